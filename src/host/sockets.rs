//! The TCP socket table, as the kernel's socket diagnostics answer it (Linux: netlink
//! sock_diag, INET_DIAG; Windows: GetExtendedTcpTable). `wstune watch` reads it each interval
//! to see every listener's accept queue and whose connections are whose, so the types are
//! small and the table is visited, never collected: a host with 100,000 sockets would
//! otherwise allocate them all once a second.

use super::ReadError;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// A TCP state, with the kernel's numbering (include/net/tcp_states.h), which Windows'
/// MIB_TCP_STATE is mapped onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TcpState {
    Established,
    SynSent,
    SynRecv,
    FinWait1,
    FinWait2,
    TimeWait,
    Close,
    CloseWait,
    LastAck,
    Listen,
    Closing,
    NewSynRecv,
}

impl TcpState {
    /// The kernel's TCP_* number (1 = ESTABLISHED ... 12 = NEW_SYN_RECV).
    pub fn from_kernel(n: u8) -> Option<TcpState> {
        use TcpState::*;
        Some(match n {
            1 => Established,
            2 => SynSent,
            3 => SynRecv,
            4 => FinWait1,
            5 => FinWait2,
            6 => TimeWait,
            7 => Close,
            8 => CloseWait,
            9 => LastAck,
            10 => Listen,
            11 => Closing,
            12 => NewSynRecv,
            _ => return None,
        })
    }

    /// The bit of this state in a sock_diag request's state mask.
    pub fn bit(self) -> u32 {
        use TcpState::*;
        let n = match self {
            Established => 1,
            SynSent => 2,
            SynRecv => 3,
            FinWait1 => 4,
            FinWait2 => 5,
            TimeWait => 6,
            Close => 7,
            CloseWait => 8,
            LastAck => 9,
            Listen => 10,
            Closing => 11,
            NewSynRecv => 12,
        };
        1 << n
    }
}

/// Which sockets a dump should visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Listening sockets only: cheap at any connection count (the kernel walks its listening
    /// hash, not the established one).
    Listeners,
    /// Every other state: the kernel walks all of them.
    Connections,
}

/// One socket of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sock {
    pub state: TcpState,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// A listener: connections completed and waiting in its accept queue; other sockets:
    /// bytes received and not yet read.
    pub recv_queue: u32,
    /// A listener: its backlog (what listen() asked, capped at somaxconn); other sockets:
    /// bytes not yet acknowledged.
    pub send_queue: u32,
    /// The socket's inode (0: no file holds it any more: an orphan, or TIME_WAIT), which
    /// /proc/PID/fd names as `socket:[INODE]`.
    pub inode: u64,
    /// The owner's user id (Windows: none, 0).
    pub uid: u32,
    /// The owning process where the platform says (Windows does; Linux does not, see the
    /// inode).
    pub pid: Option<u32>,
    /// Whether `recv_queue`, `send_queue` and `inode` are figures the platform gave: Linux's
    /// socket diagnostics do; Windows' TCP table has no queues and no inodes, so there they
    /// read 0 and mean nothing (a view shows them as unavailable, never as 0).
    pub detailed: bool,
}

/// Cumulative TCP counters by name (`Tcp.ActiveOpens`), and why those asked for and missing
/// are missing, by what could not be read (`netstat`: /proc/net/netstat; on Windows, the
/// counters it has none of).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TcpCounters {
    pub values: BTreeMap<String, u64>,
    pub unavailable: BTreeMap<String, ReadError>,
}
