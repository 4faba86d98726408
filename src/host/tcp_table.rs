//! Windows' TCP table and TCP statistics as IP Helper returns them (GetExtendedTcpTable with
//! TCP_TABLE_OWNER_PID_*, GetTcpStatisticsEx2 / GetTcpStatisticsEx), decoded from their raw
//! bytes into the platform-neutral [`Sock`] and the MIB-II counter names Linux uses
//! (`Tcp.ActiveOpens`...). Pure, so that it is tested on every platform; the calls themselves
//! are in windows.rs.

use super::sockets::{Sock, TcpState};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

/// MIB_TCP_STATE (1 = CLOSED ... 12 = DELETE_TCB) as the kernel's numbering. A TCB being
/// deleted is a connection that is closing: counted as closed.
pub fn state(mib: u32) -> Option<TcpState> {
    use TcpState::*;
    Some(match mib {
        1 | 12 => Close,
        2 => Listen,
        3 => SynSent,
        4 => SynRecv,
        5 => Established,
        6 => FinWait1,
        7 => FinWait2,
        8 => CloseWait,
        9 => Closing,
        10 => LastAck,
        11 => TimeWait,
        _ => return None,
    })
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// A port as the table stores it: network byte order in the low 16 bits of a DWORD, that is
/// the DWORD's first two bytes in memory.
fn port_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

/// The owning pid of a row: 0 is the System Idle Process, which Windows names as the owner of
/// sockets no process holds any more (TIME_WAIT); Wine gives 0 for sockets of processes it
/// does not run. Neither is an owner.
fn owner(pid: u32) -> Option<u32> {
    (pid != 0).then_some(pid)
}

fn sock(state: TcpState, local: SocketAddr, remote: SocketAddr, pid: u32) -> Sock {
    Sock {
        state,
        local,
        remote,
        recv_queue: 0,
        send_queue: 0,
        inode: 0,
        uid: 0,
        pid: owner(pid),
        detailed: false,
    }
}

/// The size of a MIB_TCPROW_OWNER_PID and of a MIB_TCP6ROW_OWNER_PID.
pub const ROW_V4: usize = 24;
pub const ROW_V6: usize = 56;

/// Visit the rows of a MIB_TCPTABLE_OWNER_PID (`dwNumEntries`, then rows of dwState,
/// dwLocalAddr, dwLocalPort, dwRemoteAddr, dwRemotePort, dwOwningPid). A table shorter than
/// its count says is an error, never a partial answer taken as whole.
pub fn visit_v4(b: &[u8], visit: &mut dyn FnMut(&Sock)) -> Result<usize, String> {
    let n = u32_at(b, 0).ok_or("the IPv4 TCP table has no entry count")? as usize;
    if b.len() < 4 + n * ROW_V4 {
        return Err(format!(
            "the IPv4 TCP table says {n} rows but holds {} bytes",
            b.len()
        ));
    }
    for i in 0..n {
        let r = &b[4 + i * ROW_V4..4 + (i + 1) * ROW_V4];
        let Some(st) = state(u32_at(r, 0).unwrap_or(0)) else {
            continue;
        };
        let ip = |off: usize| IpAddr::V4(Ipv4Addr::new(r[off], r[off + 1], r[off + 2], r[off + 3]));
        let local = SocketAddr::new(ip(4), port_at(r, 8).unwrap_or(0));
        let remote = SocketAddr::new(ip(12), port_at(r, 16).unwrap_or(0));
        visit(&sock(st, local, remote, u32_at(r, 20).unwrap_or(0)));
    }
    Ok(n)
}

/// Visit the rows of a MIB_TCP6TABLE_OWNER_PID (`dwNumEntries`, then rows of ucLocalAddr[16],
/// dwLocalScopeId, dwLocalPort, ucRemoteAddr[16], dwRemoteScopeId, dwRemotePort, dwState,
/// dwOwningPid).
pub fn visit_v6(b: &[u8], visit: &mut dyn FnMut(&Sock)) -> Result<usize, String> {
    let n = u32_at(b, 0).ok_or("the IPv6 TCP table has no entry count")? as usize;
    if b.len() < 4 + n * ROW_V6 {
        return Err(format!(
            "the IPv6 TCP table says {n} rows but holds {} bytes",
            b.len()
        ));
    }
    for i in 0..n {
        let r = &b[4 + i * ROW_V6..4 + (i + 1) * ROW_V6];
        let Some(st) = state(u32_at(r, 48).unwrap_or(0)) else {
            continue;
        };
        let addr = |off: usize, scope: usize, port: usize| {
            let octets: [u8; 16] = r[off..off + 16].try_into().unwrap_or([0; 16]);
            let ip = Ipv6Addr::from(octets);
            // A scope names the link of a link-local address only; elsewhere it is noise
            // (Wine gives ::1 a scope of its own).
            let scope = if ip.is_unicast_link_local() {
                u32_at(r, scope).unwrap_or(0)
            } else {
                0
            };
            SocketAddr::V6(SocketAddrV6::new(
                ip,
                port_at(r, port).unwrap_or(0),
                0,
                scope,
            ))
        };
        let local = addr(0, 16, 20);
        let remote = addr(24, 40, 44);
        visit(&sock(st, local, remote, u32_at(r, 52).unwrap_or(0)));
    }
    Ok(n)
}

/// The counters of MIB_TCPSTATS2 (or MIB_TCPSTATS) a watch shows, widened to 64 bits (only
/// the segment counts are 64-bit in MIB_TCPSTATS2; the others wrap at 2^32 on Windows itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    pub active_opens: u64,
    pub passive_opens: u64,
    pub attempt_fails: u64,
    pub estab_resets: u64,
    pub curr_estab: u64,
    pub in_segs: u64,
    pub out_segs: u64,
    pub retrans_segs: u64,
    pub in_errs: u64,
    pub out_rsts: u64,
    /// Connections in the table now (dwNumConns); Wine leaves it 0.
    pub num_conns: u64,
}

impl TcpStats {
    /// IPv4's and IPv6's statistics together. Windows keeps one set per family; an answer that
    /// is the same for both, field by field, is one table answered twice (Wine reads the
    /// host's single /proc/net/snmp for either family) and counts once.
    pub fn both(v4: TcpStats, v6: Option<TcpStats>) -> TcpStats {
        match v6 {
            Some(v6) if v6 != v4 => TcpStats {
                active_opens: v4.active_opens + v6.active_opens,
                passive_opens: v4.passive_opens + v6.passive_opens,
                attempt_fails: v4.attempt_fails + v6.attempt_fails,
                estab_resets: v4.estab_resets + v6.estab_resets,
                curr_estab: v4.curr_estab + v6.curr_estab,
                in_segs: v4.in_segs + v6.in_segs,
                out_segs: v4.out_segs + v6.out_segs,
                retrans_segs: v4.retrans_segs + v6.retrans_segs,
                in_errs: v4.in_errs + v6.in_errs,
                out_rsts: v4.out_rsts + v6.out_rsts,
                num_conns: v4.num_conns + v6.num_conns,
            },
            _ => v4,
        }
    }

    /// The counter by its MIB-II name as /proc/net/snmp gives it (`Tcp.ActiveOpens`), the name
    /// a watch shows on either platform; None for a name Windows does not count.
    pub fn get(&self, name: &str) -> Option<u64> {
        Some(match name {
            "Tcp.ActiveOpens" => self.active_opens,
            "Tcp.PassiveOpens" => self.passive_opens,
            "Tcp.AttemptFails" => self.attempt_fails,
            "Tcp.EstabResets" => self.estab_resets,
            "Tcp.CurrEstab" => self.curr_estab,
            "Tcp.InSegs" => self.in_segs,
            "Tcp.OutSegs" => self.out_segs,
            "Tcp.RetransSegs" => self.retrans_segs,
            "Tcp.InErrs" => self.in_errs,
            "Tcp.OutRsts" => self.out_rsts,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_row(
        state: u32,
        local: [u8; 4],
        lport: u16,
        remote: [u8; 4],
        rport: u16,
        pid: u32,
    ) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend(state.to_ne_bytes());
        r.extend(local);
        // The port's two bytes in network order, then two unused bytes.
        r.extend(lport.to_be_bytes());
        r.extend([0xAA, 0xBB]);
        r.extend(remote);
        r.extend(rport.to_be_bytes());
        r.extend([0, 0]);
        r.extend(pid.to_ne_bytes());
        assert_eq!(r.len(), ROW_V4);
        r
    }

    fn seen(b: &[u8], v6: bool) -> Result<Vec<Sock>, String> {
        let mut out = Vec::new();
        let f = if v6 { visit_v6 } else { visit_v4 };
        f(b, &mut |s| out.push(*s))?;
        Ok(out)
    }

    #[test]
    fn every_mib_state_maps_onto_the_kernels_and_nothing_else_does() {
        assert_eq!(state(2), Some(TcpState::Listen));
        assert_eq!(state(3), Some(TcpState::SynSent));
        assert_eq!(state(4), Some(TcpState::SynRecv));
        assert_eq!(state(5), Some(TcpState::Established));
        assert_eq!(state(8), Some(TcpState::CloseWait));
        assert_eq!(state(11), Some(TcpState::TimeWait));
        assert_eq!(state(12), Some(TcpState::Close));
        assert_eq!(state(0), None);
        assert_eq!(state(13), None);
    }

    #[test]
    fn an_ipv4_table_gives_addresses_ports_states_and_owners() {
        let mut b = 2u32.to_ne_bytes().to_vec();
        b.extend(v4_row(2, [127, 0, 0, 1], 9001, [0, 0, 0, 0], 0, 4242));
        b.extend(v4_row(11, [10, 0, 0, 2], 50123, [10, 0, 0, 9], 443, 0));
        let s = seen(&b, false).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].state, TcpState::Listen);
        assert_eq!(s[0].local, "127.0.0.1:9001".parse().unwrap());
        assert_eq!(s[0].pid, Some(4242));
        assert!(
            !s[0].detailed,
            "Windows' table has no queues: never taken as 0"
        );
        assert_eq!(s[1].state, TcpState::TimeWait);
        assert_eq!(s[1].local, "10.0.0.2:50123".parse().unwrap());
        assert_eq!(s[1].remote, "10.0.0.9:443".parse().unwrap());
        assert_eq!(s[1].pid, None, "pid 0 (System Idle) owns no socket");
    }

    #[test]
    fn an_ipv6_table_gives_addresses_with_scope_and_ports() {
        let mut b = 1u32.to_ne_bytes().to_vec();
        let mut r = Vec::new();
        r.extend(Ipv6Addr::LOCALHOST.octets());
        r.extend(4096u32.to_ne_bytes());
        r.extend(8443u16.to_be_bytes());
        r.extend([0, 0]);
        r.extend("fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        r.extend(7u32.to_ne_bytes());
        r.extend(61000u16.to_be_bytes());
        r.extend([0, 0]);
        r.extend(5u32.to_ne_bytes());
        r.extend(99u32.to_ne_bytes());
        assert_eq!(r.len(), ROW_V6);
        b.extend(r);
        let s = seen(&b, true).unwrap();
        assert_eq!(s[0].state, TcpState::Established);
        assert_eq!(s[0].local, "[::1]:8443".parse().unwrap());
        assert_eq!(s[0].remote, "[fe80::1%7]:61000".parse().unwrap());
        assert_eq!(s[0].pid, Some(99));
    }

    #[test]
    fn a_table_shorter_than_its_count_is_refused() {
        let mut b = 3u32.to_ne_bytes().to_vec();
        b.extend(v4_row(2, [0; 4], 80, [0; 4], 0, 1));
        let e = seen(&b, false).unwrap_err();
        assert!(e.contains("says 3 rows"), "{e}");
        assert!(seen(&[], true).is_err());
        // An unknown state is left out, the rest kept.
        let mut b = 2u32.to_ne_bytes().to_vec();
        b.extend(v4_row(77, [0; 4], 80, [0; 4], 0, 1));
        b.extend(v4_row(2, [0; 4], 81, [0; 4], 0, 1));
        assert_eq!(seen(&b, false).unwrap().len(), 1);
    }

    #[test]
    fn the_two_families_add_up_unless_they_are_one_table_answered_twice() {
        let v4 = TcpStats {
            active_opens: 10,
            attempt_fails: 2,
            ..TcpStats::default()
        };
        let v6 = TcpStats {
            active_opens: 5,
            ..TcpStats::default()
        };
        assert_eq!(TcpStats::both(v4, Some(v6)).active_opens, 15);
        assert_eq!(TcpStats::both(v4, Some(v6)).attempt_fails, 2);
        assert_eq!(TcpStats::both(v4, Some(v4)).active_opens, 10);
        assert_eq!(TcpStats::both(v4, None).active_opens, 10);
        assert_eq!(v4.get("Tcp.ActiveOpens"), Some(10));
        assert_eq!(v4.get("TcpExt.ListenOverflows"), None);
    }
}
