//! One reading of everything `wstune watch` shows, taken through a [`Backend`] at one instant:
//! cumulative kernel counters, the values that have a mark (orphans, TIME_WAIT, TCP memory,
//! conntrack, descriptors, ports), each listener's accept queue and the connections behind it,
//! CPU time per core, and a server's own figures. A [`Sample`] holds raw values only; two of
//! them make a frame (frame.rs), which is what every view renders.
//!
//! The socket table of a host with 100,000 connections costs the kernel tens of milliseconds
//! to walk, so the walks that grow with the connection count (the connections behind the
//! listeners, a process's descriptors) are paced: each measures what it cost and is skipped
//! for as many intervals as keep it under its share of one core (see [`Pacer`]); the frame says
//! how old its figures are. Listeners and counters are read every interval.

use crate::host::sockets::{Sock, TcpState, Which};
use crate::host::{procfs, Backend, Fact, Platform, ReadError};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

/// What to watch: which listeners, which process, which server.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Only listeners on these ports (`--port`, repeatable); empty: every listener.
    pub ports: Vec<u16>,
    /// Only the listeners this process holds, and its descriptors against its limit.
    pub pid: Option<u32>,
    /// Leave out the walk over every connection (states per listener, ports per
    /// destination): a self-test's watch, which must not spend a burst of CPU beside the
    /// load it measures (tenths of a second at 200,000 sockets).
    pub no_connection_walk: bool,
}

/// The kernel counters a watch reads, by the names /proc/net/netstat and /proc/net/snmp give
/// them (`Group.Field`), plus softnet and conntrack sums under their own names.
pub const NETSTAT: &[&str] = &[
    "TcpExt.ListenOverflows",
    "TcpExt.ListenDrops",
    "TcpExt.TCPBacklogDrop",
    "TcpExt.TCPAbortOnMemory",
    "TcpExt.TCPMemoryPressures",
    "TcpExt.TCPTimeWaitOverflow",
    "TcpExt.SyncookiesSent",
    "TcpExt.SyncookiesFailed",
    "TcpExt.TCPReqQFullDrop",
    "TcpExt.TCPAbortOnTimeout",
    "Tcp.PassiveOpens",
    "Tcp.ActiveOpens",
    "Tcp.AttemptFails",
    "Tcp.EstabResets",
    "Tcp.RetransSegs",
];

/// One listening socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub local: SocketAddr,
    /// Connections completed and not yet accepted.
    pub queue: u32,
    /// The accept queue's size: the backlog listen() asked for, capped at somaxconn.
    pub backlog: u32,
    pub inode: u64,
    /// Whether `queue`, `backlog` and `inode` are figures: Windows' TCP table has none of them.
    pub detailed: bool,
    /// The process that holds it, where the platform says (Windows).
    pub pid: Option<u32>,
}

/// Sockets by state behind one listener (or in all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct States {
    pub established: u64,
    pub syn_recv: u64,
    pub time_wait: u64,
    pub close_wait: u64,
    /// Closing sockets no process holds any more (FIN_WAIT, CLOSING, LAST_ACK with no inode);
    /// None where the socket table cannot tell (Windows has no inode): unknown, never 0.
    #[serde(default)]
    pub orphans: Option<u64>,
}

impl States {
    /// Nothing counted yet; orphans counted only where the table can tell them (`detailed`).
    pub fn empty(orphans_known: bool) -> States {
        States {
            orphans: orphans_known.then_some(0),
            ..States::default()
        }
    }

    fn add(&mut self, s: &Sock) {
        match s.state {
            TcpState::Established => self.established += 1,
            TcpState::SynRecv | TcpState::NewSynRecv => self.syn_recv += 1,
            TcpState::TimeWait => self.time_wait += 1,
            TcpState::CloseWait => self.close_wait += 1,
            TcpState::FinWait1 | TcpState::FinWait2 | TcpState::Closing | TcpState::LastAck
                if s.inode == 0 && s.detailed =>
            {
                if let Some(o) = &mut self.orphans {
                    *o += 1
                }
            }
            _ => {}
        }
    }
}

/// The connections behind the listeners, from one walk of the socket table.
#[derive(Debug, Clone)]
pub struct Connections {
    /// Per listener, by its local address.
    pub per_listener: BTreeMap<SocketAddr, States>,
    pub total: States,
    /// Local ports from the ephemeral range in use per destination, and per source address
    /// on Linux (which needs a free port per source address, destination address and port;
    /// Windows shares one pool: None), most used first, at most 8.
    pub ports_by_destination: Vec<(Option<IpAddr>, SocketAddr, u64)>,
    /// Sockets on a local port of the ephemeral range, whatever their destination, and those
    /// of them in TIME_WAIT: Windows gives an outbound connection a port of its own from the
    /// range (per local address), so the range runs out in total, not per destination.
    pub range_in_use: u64,
    pub range_time_wait: u64,
    /// When this walk was made (it may be older than the sample; see the module's note).
    pub at: Instant,
    /// What the walk cost in CPU time.
    pub cost: Duration,
}

/// A process's descriptors (`--pid`).
#[derive(Debug, Clone, Default)]
pub struct Process {
    pub pid: u32,
    pub fds: Option<u64>,
    pub soft_limit: Option<u64>,
    pub hard_limit: Option<u64>,
    /// The inodes of its sockets, to tie listeners to it.
    pub sockets: Vec<u64>,
    /// Its open handles (Windows: GetProcessHandleCount).
    pub handles: Option<u64>,
}

/// Host-wide values that have a mark.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub orphans: Option<u64>,
    pub max_orphans: Option<u64>,
    pub time_wait: Option<u64>,
    pub max_tw_buckets: Option<u64>,
    /// Pages of TCP socket memory, and tcp_mem's three marks (low, pressure, high).
    pub tcp_mem_pages: Option<u64>,
    pub tcp_mem: Option<[u64; 3]>,
    pub conntrack: Option<u64>,
    pub conntrack_max: Option<u64>,
    /// Allocated file handles (fs/file-nr's first field) and fs.file-max.
    pub files: Option<u64>,
    pub file_max: Option<u64>,
    pub port_range: Option<(u16, u16)>,
    pub somaxconn: Option<u64>,
}

/// One CPU's cumulative ticks and softnet counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    pub name: String,
    pub system: u64,
    pub softirq: u64,
    pub total: u64,
    pub softnet_dropped: u64,
    pub time_squeeze: u64,
}

/// One reading.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The host's platform: which checks explain its figures.
    pub platform: Platform,
    pub wall: SystemTime,
    pub at: Instant,
    pub listeners: Vec<Listener>,
    /// The latest walk of the connections (None until one succeeded).
    pub connections: Option<Connections>,
    /// Cumulative counters by name ([`NETSTAT`], `softnet.dropped`, `softnet.time_squeeze`,
    /// `conntrack.drop`, `conntrack.early_drop`, `conntrack.insert_failed`).
    pub counters: BTreeMap<String, u64>,
    pub gauges: Gauges,
    pub cpus: Vec<Cpu>,
    pub process: Option<Process>,
    /// What could not be read this time, and why (shown as unavailable, never as zero).
    pub unavailable: BTreeMap<String, String>,
    /// Notes on the scope (a `--port` nobody listens on).
    pub notes: Vec<String>,
}

/// Spreads a costly read over intervals so that it takes at most `share` of one core: after
/// a read that cost `c`, the next waits `c / share`. A 20 ms walk at a 1 % share runs every
/// 2 s; a 1 ms walk runs every interval.
#[derive(Debug, Clone)]
pub struct Pacer {
    share: f64,
    next: Option<Instant>,
}

impl Pacer {
    pub fn new(share: f64) -> Pacer {
        Pacer { share, next: None }
    }
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|n| now >= n)
    }
    pub fn spent(&mut self, now: Instant, cost: Duration) {
        self.next = Some(now + cost.div_f64(self.share));
    }
}

/// Reads samples, keeping what the paced walks found between their runs.
pub struct Collector {
    pub scope: Scope,
    walk: Pacer,
    fd_walk: Pacer,
    last_connections: Option<Connections>,
    last_process_sockets: Vec<u64>,
    fds_read: bool,
}

/// The share of one core the connection walk may take, and the descriptor walk: with the
/// rest of a reading (well under 0.1 %), under the 2 % `bench/watch-cost.sh` holds a watch to.
/// A walk costs about 1.5 us of CPU per socket (two thirds of it the kernel's, building the
/// messages), so at 100,000 sockets the per-listener figures are refreshed every 10 s or so
/// and at 10,000 every second; each frame says how old they are.
const WALK_SHARE: f64 = 0.015;
const FD_WALK_SHARE: f64 = 0.003;

impl Collector {
    pub fn new(scope: Scope) -> Collector {
        Collector {
            scope,
            walk: Pacer::new(WALK_SHARE),
            fd_walk: Pacer::new(FD_WALK_SHARE),
            last_connections: None,
            last_process_sockets: Vec::new(),
            fds_read: false,
        }
    }

    pub fn sample(&mut self, b: &dyn Backend) -> Sample {
        let mut unavailable = BTreeMap::new();
        let mut miss = |what: &str, e: &ReadError| {
            unavailable.insert(what.to_string(), e.to_string());
        };
        let now = Instant::now();
        let wall = SystemTime::now();
        let platform = b.platform();

        let process = self
            .scope
            .pid
            .map(|pid| self.process(b, pid, now, &mut miss));

        let mut listeners = Vec::new();
        if let Err(e) = b.tcp_sockets(Which::Listeners, &mut |s| {
            listeners.push(Listener {
                local: s.local,
                queue: s.recv_queue,
                backlog: s.send_queue,
                inode: s.inode,
                detailed: s.detailed,
                pid: s.pid,
            })
        }) {
            miss("listeners", &e);
        }
        let mut notes = Vec::new();
        for p in &self.scope.ports {
            if !listeners.iter().any(|l| l.local.port() == *p) {
                notes.push(format!(
                    "nothing listens on TCP port {p} in this network namespace (yet)"
                ));
            }
        }
        listeners
            .retain(|l| self.scope.ports.is_empty() || self.scope.ports.contains(&l.local.port()));
        // Where the table names each listener's process (Windows), that ties it; else tied
        // to the process only once its descriptors could be read; until then (another user's
        // process without root) every listener shows, and the frame says why.
        if let (Some(pid), true) = (self.scope.pid, listeners.iter().any(|l| l.pid.is_some())) {
            listeners.retain(|l| l.pid == Some(pid));
            if listeners.is_empty() {
                notes.push(format!("process {pid} holds no listening TCP socket"));
            }
        } else if let (Some(pid), Platform::Windows, false) =
            (self.scope.pid, platform, listeners.is_empty())
        {
            notes.push(format!(
                "process {pid}: the TCP table names no owning process for any listener (Wine names none); every listener is shown"
            ));
        } else if let Some(p) = process
            .as_ref()
            .filter(|p| self.fds_read || p.fds.is_some())
        {
            listeners.retain(|l| p.sockets.contains(&l.inode));
        }
        listeners.sort_by(|a, b| {
            a.local
                .port()
                .cmp(&b.local.port())
                .then(a.local.cmp(&b.local))
        });
        listeners.dedup_by(|a, b| a.local == b.local && a.inode == b.inode);

        let gauges = gauges(b, &mut miss);
        if !self.scope.no_connection_walk && self.walk.due(now) {
            match walk(b, &listeners, gauges.port_range) {
                Ok(c) => {
                    self.walk.spent(now, c.cost);
                    self.last_connections = Some(c);
                }
                Err(e) => miss("connections", &e),
            }
        }

        let counters = counters(b, &mut miss);
        let cpus = cpus(b, &mut miss);
        Sample {
            platform,
            wall,
            at: now,
            listeners,
            connections: self.last_connections.clone(),
            counters,
            gauges,
            cpus,
            process,
            unavailable,
            notes,
        }
    }

    fn process(
        &mut self,
        b: &dyn Backend,
        pid: u32,
        now: Instant,
        miss: &mut dyn FnMut(&str, &ReadError),
    ) -> Process {
        let mut p = Process {
            pid,
            ..Process::default()
        };
        if b.platform() == Platform::Windows {
            // No descriptors and no descriptor limit: a Windows process holds handles, up to
            // 16,777,216 (windows.process.handles).
            if !b.process_exists(pid) {
                miss("process", &ReadError::NotFound(format!("process {pid}")));
                return p;
            }
            match b.host_fact(Fact::ProcessHandles, Some(pid)) {
                Some(Ok(n)) => p.handles = Some(n.max(0) as u64),
                Some(Err(e)) => miss("process handles", &e),
                None => {}
            }
            return p;
        }
        match b.read(&procfs::paths::limits(pid)) {
            Ok(t) => {
                if let Some((soft, hard)) = procfs::nofile_limits(&t) {
                    p.soft_limit = Some(soft);
                    p.hard_limit = Some(hard);
                }
            }
            Err(e) => miss("process", &e),
        }
        if self.fd_walk.due(now) {
            let cpu0 = embedded_server::offload::thread_cpu_time();
            match b.process_fds(pid) {
                Ok((n, sockets)) => {
                    p.fds = Some(n);
                    self.last_process_sockets = sockets;
                    self.fds_read = true;
                }
                Err(e) => miss("process descriptors", &e),
            }
            self.fd_walk.spent(
                now,
                embedded_server::offload::thread_cpu_time().saturating_sub(cpu0),
            );
        }
        p.sockets = self.last_process_sockets.clone();
        p
    }
}

fn read_u64(b: &dyn Backend, path: &str) -> Result<u64, ReadError> {
    let t = b.read(path)?;
    t.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ReadError::Other(format!("{path}: not a number")))
}

/// What Windows does not have of what a Linux host shows, in the words a view puts beside it:
/// `unavailable` entries under the keys the Linux reads use, so that each row says "not on
/// Windows" rather than what reading /proc answered.
const NOT_ON_WINDOWS: &[(&str, &str)] = &[
    (
        "sockstat",
        "not on Windows: TCP socket memory against tcp_mem, and the orphan and TIME_WAIT marks (tcp_max_orphans, tcp_max_tw_buckets), are Linux kernel figures; TIME_WAIT is counted from the TCP table",
    ),
    (
        "orphans",
        "not on Windows: its TCP table does not say whether a process still holds a closing socket",
    ),
    (
        "conntrack",
        "not on Windows: connection tracking (netfilter) is Linux's",
    ),
    (
        "file handles",
        "not on Windows: Windows has no host-wide file-handle limit (with --pid, the process's handles are shown)",
    ),
    (
        "cpu",
        "not on Windows: softirq and system time per core and softnet drops are Linux's figures (Windows counts DPC time per core: perfmon Processor(*)\\% DPC Time)",
    ),
];

fn not_on_windows(key: &str, miss: &mut dyn FnMut(&str, &ReadError)) {
    if let Some((k, why)) = NOT_ON_WINDOWS.iter().find(|(k, _)| *k == key) {
        miss(k, &ReadError::Unsupported(why.to_string()));
    }
}

fn gauges(b: &dyn Backend, miss: &mut dyn FnMut(&str, &ReadError)) -> Gauges {
    let mut g = Gauges::default();
    if b.platform() == Platform::Windows {
        for key in ["sockstat", "orphans", "conntrack", "file handles"] {
            not_on_windows(key, miss);
        }
        match b.ephemeral_ports() {
            Ok(r) => g.port_range = Some(r),
            Err(e) => miss("ports", &e),
        }
        return g;
    }
    match b.read("/proc/net/sockstat") {
        Ok(t) => {
            g.orphans = procfs::sockstat(&t, "TCP", "orphan").map(|v| v.max(0) as u64);
            g.time_wait = procfs::sockstat(&t, "TCP", "tw").map(|v| v.max(0) as u64);
            g.tcp_mem_pages = procfs::sockstat(&t, "TCP", "mem").map(|v| v.max(0) as u64);
        }
        Err(e) => miss("sockstat", &e),
    }
    let sysctl = |key: &str| b.read(&procfs::sysctl_path(key));
    g.max_orphans = sysctl("net.ipv4.tcp_max_orphans")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    g.max_tw_buckets = sysctl("net.ipv4.tcp_max_tw_buckets")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    g.somaxconn = sysctl("net.core.somaxconn")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    g.tcp_mem = sysctl("net.ipv4.tcp_mem").ok().and_then(|t| {
        let v: Vec<u64> = t
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        (v.len() == 3).then(|| [v[0], v[1], v[2]])
    });
    g.port_range = b.ephemeral_ports().ok();
    match (
        read_u64(b, "/proc/sys/net/netfilter/nf_conntrack_count"),
        read_u64(b, "/proc/sys/net/netfilter/nf_conntrack_max"),
    ) {
        (Ok(c), Ok(m)) => {
            g.conntrack = Some(c);
            g.conntrack_max = Some(m);
        }
        (Err(ReadError::NotFound(_)), _) => miss(
            "conntrack",
            &ReadError::NotFound("nf_conntrack (not loaded: nothing is tracked)".into()),
        ),
        (Err(e), _) | (_, Err(e)) => miss("conntrack", &e),
    }
    match b.read("/proc/sys/fs/file-nr") {
        Ok(t) => {
            let v: Vec<u64> = t
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            g.files = v.first().copied();
            g.file_max = v.get(2).copied();
        }
        Err(e) => miss("file handles", &e),
    }
    g
}

fn counters(b: &dyn Backend, miss: &mut dyn FnMut(&str, &ReadError)) -> BTreeMap<String, u64> {
    let tcp = b.tcp_counters(NETSTAT);
    for (what, e) in &tcp.unavailable {
        miss(what, e);
    }
    let mut out = tcp.values;
    if b.platform() == Platform::Windows {
        return out;
    }
    match b.read("/proc/net/stat/nf_conntrack") {
        Ok(t) => {
            for col in ["drop", "early_drop", "insert_failed"] {
                if let Some(v) = procfs::conntrack_stat_sum(&t, col) {
                    out.insert(format!("conntrack.{col}"), v.max(0) as u64);
                }
            }
        }
        Err(ReadError::NotFound(_)) => {}
        Err(e) => miss("conntrack statistics", &e),
    }
    out
}

fn cpus(b: &dyn Backend, miss: &mut dyn FnMut(&str, &ReadError)) -> Vec<Cpu> {
    if b.platform() == Platform::Windows {
        not_on_windows("cpu", miss);
        return Vec::new();
    }
    let mut cpus: Vec<Cpu> = match b.read("/proc/stat") {
        Ok(t) => procfs::cpu_ticks(&t)
            .into_iter()
            .map(|(name, system, softirq, total)| Cpu {
                name,
                system,
                softirq,
                total,
                ..Cpu::default()
            })
            .collect(),
        Err(e) => {
            miss("cpu", &e);
            Vec::new()
        }
    };
    match b.read("/proc/net/softnet_stat") {
        Ok(t) => {
            for (i, (d, s)) in procfs::softnet_rows(&t).into_iter().enumerate() {
                if let Some(c) = cpus.get_mut(i) {
                    c.softnet_dropped = d;
                    c.time_squeeze = s;
                }
            }
        }
        Err(e) => miss("softnet", &e),
    }
    cpus
}

/// The listener a connection belongs to: same local port, and the same address unless the
/// listener took every address (0.0.0.0, ::).
fn owner(listeners: &[Listener], local: SocketAddr) -> Option<usize> {
    let ip = |a: IpAddr| match a {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    let mut wildcard = None;
    for (i, l) in listeners.iter().enumerate() {
        if l.local.port() != local.port() {
            continue;
        }
        if ip(l.local.ip()) == ip(local.ip()) {
            return Some(i);
        }
        if l.local.ip().is_unspecified() {
            wildcard = Some(i);
        }
    }
    wildcard
}

fn walk(
    b: &dyn Backend,
    listeners: &[Listener],
    range: Option<(u16, u16)>,
) -> Result<Connections, ReadError> {
    let t0 = Instant::now();
    let cpu0 = embedded_server::offload::thread_cpu_time();
    // Linux's socket table says which closing sockets no file holds; Windows' does not.
    let known = b.platform() != Platform::Windows;
    let mut c = Connections {
        per_listener: listeners
            .iter()
            .map(|l| (l.local, States::empty(known)))
            .collect(),
        total: States::empty(known),
        ports_by_destination: Vec::new(),
        range_in_use: 0,
        range_time_wait: 0,
        at: t0,
        cost: Duration::ZERO,
    };
    // Linux needs a free local port per source address and destination (a client that binds
    // several source addresses has the range once per address); Windows shares one pool.
    let per_source = b.platform() != Platform::Windows;
    let mut by_dest: std::collections::HashMap<(Option<IpAddr>, SocketAddr), u64> =
        Default::default();
    let listening: std::collections::HashSet<u16> =
        listeners.iter().map(|l| l.local.port()).collect();
    b.tcp_sockets(Which::Connections, &mut |s| {
        c.total.add(s);
        if listening.contains(&s.local.port()) {
            if let Some(i) = owner(listeners, s.local) {
                if let Some(st) = c.per_listener.get_mut(&listeners[i].local) {
                    st.add(s);
                }
            }
        } else if let Some((lo, hi)) = range {
            let p = s.local.port();
            if (lo..=hi).contains(&p) && s.state != TcpState::Listen {
                let source = per_source.then(|| s.local.ip());
                *by_dest.entry((source, s.remote)).or_default() += 1;
                c.range_in_use += 1;
                if s.state == TcpState::TimeWait {
                    c.range_time_wait += 1;
                }
            }
        }
    })?;
    let mut ports: Vec<(Option<IpAddr>, SocketAddr, u64)> =
        by_dest.into_iter().map(|((s, d), n)| (s, d, n)).collect();
    ports.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.cmp(&b.1)).then(a.0.cmp(&b.0)));
    ports.truncate(8);
    c.ports_by_destination = ports;
    // What the walk cost this process (the kernel's time building the messages included),
    // not the wall time: on a busy host the wall time also counts the wait for a core.
    c.cost = embedded_server::offload::thread_cpu_time().saturating_sub(cpu0);
    Ok(c)
}

#[cfg(test)]
mod tests;
