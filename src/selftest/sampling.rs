//! What the self-test reads from /proc (through host/) around a measurement: the kernel's
//! socket memory and drop counters, the server's CPU and memory, and how disturbed the window
//! was by other processes.

use super::client::Target;
use super::{noise, server, RunPlan, Scenario};
use crate::host::Machine;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The kernel's socket figures at one moment: /proc/net/sockstat and the slab total.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelSample {
    /// `sockets: used`: every socket of this network namespace.
    pub sockets_used: u64,
    /// `TCP: inuse`: TCP sockets of this network namespace.
    pub tcp_inuse: u64,
    /// `TCP: mem`: pages the whole host's TCP buffers hold (what tcp_mem limits).
    pub tcp_mem_pages: u64,
    /// /proc/meminfo `Slab`: kernel objects, where each socket's tcp_sock, inode, file and
    /// epoll item live (host-wide, so other activity shows up too).
    pub slab_bytes: u64,
}

/// The kernel's socket memory before the idle connections opened and while they were held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelMemory {
    pub before: KernelSample,
    pub during: KernelSample,
    pub page_size: u64,
    /// TCP buffer memory held while idle, bytes (`TCP: mem` during x page size).
    pub tcp_mem_bytes_during: u64,
    /// Slab growth per TCP socket opened: both ends of a loopback connection are sockets of
    /// this host, so this is per socket, not per connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slab_bytes_per_socket: Option<f64>,
}

/// Read /proc/net/sockstat and /proc/meminfo through the machine's backend (Linux; None
/// elsewhere).
pub fn kernel_sample(host: &Machine) -> Option<KernelSample> {
    use crate::host::procfs::paths;
    let sockstat = host.read(paths::SOCKSTAT).ok()?;
    let meminfo = host.read(paths::MEMINFO).ok()?;
    Some(parse_kernel_sample(&sockstat, &meminfo))
}

pub(super) fn parse_kernel_sample(sockstat: &str, meminfo: &str) -> KernelSample {
    use crate::host::procfs;
    let field = |proto, name| {
        procfs::sockstat(sockstat, proto, name)
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0)
    };
    KernelSample {
        sockets_used: field("sockets", "used"),
        tcp_inuse: field("TCP", "inuse"),
        tcp_mem_pages: field("TCP", "mem"),
        slab_bytes: procfs::meminfo_bytes(meminfo, "Slab").unwrap_or(0),
    }
}

/// `host`'s memory page size is what `TCP: mem` counts in.
pub(super) fn kernel_memory(
    host: &Machine,
    before: Option<KernelSample>,
    during: Option<KernelSample>,
) -> Option<KernelMemory> {
    let (before, during) = (before?, during?);
    let page_size = host.page_size();
    let sockets = during.tcp_inuse.saturating_sub(before.tcp_inuse);
    Some(KernelMemory {
        before,
        during,
        page_size,
        tcp_mem_bytes_during: during.tcp_mem_pages * page_size,
        slab_bytes_per_socket: (sockets > 0)
            .then(|| (during.slab_bytes as f64 - before.slab_bytes as f64) / sockets as f64),
    })
}

/// The kernel's TCP drop and memory counters over one scenario (/proc/net/netstat, this
/// network namespace): what names the bound when connections fail at scale.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelDrops {
    /// TcpExt ListenOverflows: a full accept queue (net.core.somaxconn, the listen backlog).
    pub listen_overflows: u64,
    /// TcpExt ListenDrops: every SYN or handshake dropped at a listener (overflows included).
    pub listen_drops: u64,
    /// TcpExt TCPMemoryPressures: times TCP memory entered pressure (net.ipv4.tcp_mem).
    pub memory_pressures: u64,
    /// TcpExt TCPAbortOnMemory: connections reset because TCP memory was spent.
    pub aborts_on_memory: u64,
    /// What bit, in words, when a counter grew; None when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
}

/// The TcpExt counters `KernelDrops` follows, as read now (Linux; None elsewhere).
pub(super) fn drop_counters(host: &Machine) -> Option<[u64; 4]> {
    use crate::host::procfs::{header_values, paths};
    let text = host.read(paths::NETSTAT).ok()?;
    let v = |f| header_values(&text, "TcpExt", f).and_then(|v| u64::try_from(v).ok());
    Some([
        v("ListenOverflows")?,
        v("ListenDrops")?,
        v("TCPMemoryPressures").unwrap_or(0),
        v("TCPAbortOnMemory").unwrap_or(0),
    ])
}

/// The counters' growth from `before` to `after`, and the bound they name: the sysctls that
/// set it are read from this host so the words say what to raise.
pub(super) fn kernel_drops(
    host: &Machine,
    before: Option<[u64; 4]>,
    after: Option<[u64; 4]>,
) -> Option<KernelDrops> {
    let (b, a) = (before?, after?);
    let d: Vec<u64> = a.iter().zip(b).map(|(a, b)| a.saturating_sub(b)).collect();
    let sysctl = |p: &str| {
        host.read(p)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "?".into())
    };
    let mut bound = Vec::new();
    if d[0] > 0 || d[1] > 0 {
        bound.push(format!(
            "the accept queues overflowed: {} SYNs or handshakes dropped at the listeners \
             (TcpExt ListenOverflows +{}, ListenDrops +{}; `nstat -az TcpExtListenDrops`), \
             with net.core.somaxconn {} and net.ipv4.tcp_max_syn_backlog {} here \
             (`wstune check` names the fix)",
            d[1].max(d[0]),
            d[0],
            d[1],
            sysctl("/proc/sys/net/core/somaxconn"),
            sysctl("/proc/sys/net/ipv4/tcp_max_syn_backlog")
        ));
    }
    if d[2] > 0 || d[3] > 0 {
        bound.push(format!(
            "TCP memory ran short: pressure entered {} times, {} connections reset for memory \
             (TcpExt TCPMemoryPressures, TCPAbortOnMemory), with net.ipv4.tcp_mem {} pages here",
            d[2],
            d[3],
            sysctl("/proc/sys/net/ipv4/tcp_mem")
        ));
    }
    Some(KernelDrops {
        listen_overflows: d[0],
        listen_drops: d[1],
        memory_pressures: d[2],
        aborts_on_memory: d[3],
        bound: (!bound.is_empty()).then(|| bound.join("; ")),
    })
}

/// The server's CPU time and RSS: its process, or its whole process tree.
pub(super) fn server_sample(o: &RunPlan, scenario: Scenario) -> Option<(f64, u64)> {
    let one = |pid| {
        if o.server_tree {
            server::sample_tree(pid)
        } else {
            sample(pid)
        }
    };
    if let Some(pid) = o.broadcast_server_pid.filter(|_| scenario.fans_out()) {
        return one(pid);
    }
    let (mut cpu, mut rss) = one(o.server_pid?)?;
    for &pid in &o.more_server_pids {
        let (c, r) = one(pid)?;
        cpu += c;
        rss += r;
    }
    Some((cpu, rss))
}

/// A process's peak resident memory (VmHWM), Linux (read by host/).
pub fn peak_rss(pid: u32) -> Option<u64> {
    crate::host::process::peak_rss(pid)
}

/// Wait, at most `limit`, until the server processes measured here are quiet: under 5 % of
/// one core over a quarter of a second. At 100k connections a server spends seconds on the
/// last handshakes after a connect phase, and on closing a scenario's connections after its
/// clients left; a measurement started meanwhile charges that work to the next scenario (after
/// the idle scenario, echo-rate's p99 at 100k was 240-1000 ms with the cores saturated by the
/// teardown, 1.2 ms when it ran first). Every call takes at least one quarter-second sample;
/// a server measured only by URL (no pid) costs just that one.
pub async fn quiesce(o: &RunPlan, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    let pids: Vec<u32> = [o.server_pid, o.broadcast_server_pid]
        .into_iter()
        .flatten()
        .chain(o.more_server_pids.iter().copied())
        .collect();
    let cpu = || -> Option<f64> {
        pids.iter()
            .map(|&pid| {
                if o.server_tree {
                    server::sample_tree(pid)
                } else {
                    sample(pid)
                }
                .map(|s| s.0)
            })
            .sum()
    };
    loop {
        let before = cpu();
        tokio::time::sleep(Duration::from_millis(250)).await;
        match (before, cpu()) {
            (Some(a), Some(b)) if b - a >= 0.0125 && tokio::time::Instant::now() < deadline => {}
            _ => return,
        }
    }
}

/// A process's CPU time and resident memory (Linux /proc via host/; None elsewhere or when it
/// is gone).
pub fn sample(pid: u32) -> Option<(f64, u64)> {
    crate::host::process::sample(pid)
}

/// How disturbed the window between `a` and `b` was: this process, the servers measured by pid
/// and everything below them are the run's own; every other process's CPU is noise.
pub(super) fn disturbance_of(
    o: &RunPlan,
    target: &Target,
    a: &noise::Sample,
    b: &noise::Sample,
) -> noise::Disturbance {
    let roots: Vec<u32> = [
        Some(std::process::id()),
        o.server_pid,
        o.broadcast_server_pid,
    ]
    .into_iter()
    .flatten()
    .chain(o.more_server_pids.iter().copied())
    .collect();
    // A server on another host does not share this one's CPU with anything here.
    let server_known = o.server_pid.is_some() || !target.addr.ip().is_loopback();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    noise::between(
        a,
        b,
        &noise::Ours {
            roots: &roots,
            server_known,
        },
        cores,
        crate::host::process::ticks_per_second(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn kernel_drops_name_the_accept_queue_and_tcp_memory_only_when_they_grew() {
        let quiet = kernel_drops(
            &crate::host::Machine::live(),
            Some([5, 7, 1, 0]),
            Some([5, 7, 1, 0]),
        )
        .unwrap();
        assert_eq!(quiet.bound, None);
        let full = kernel_drops(
            &crate::host::Machine::live(),
            Some([5, 7, 1, 0]),
            Some([105, 120, 3, 4]),
        )
        .unwrap();
        assert_eq!(
            (
                full.listen_overflows,
                full.listen_drops,
                full.memory_pressures,
                full.aborts_on_memory
            ),
            (100, 113, 2, 4)
        );
        let b = full.bound.unwrap();
        assert!(
            b.contains("accept queues overflowed: 113") && b.contains("somaxconn"),
            "{b}"
        );
        assert!(
            b.contains("TCP memory ran short") && b.contains("tcp_mem"),
            "{b}"
        );
        // A counter that went back (a namespace's counters reset) is no growth, not a wrap.
        let back = kernel_drops(
            &crate::host::Machine::live(),
            Some([9, 9, 9, 9]),
            Some([1, 1, 1, 1]),
        )
        .unwrap();
        assert_eq!(back.bound, None);
    }

    #[test]
    fn sockstat_and_slab_are_read() {
        let k = parse_kernel_sample(
            "sockets: used 1234\nTCP: inuse 200 orphan 0 tw 3 alloc 210 mem 57\nUDP: inuse 2 mem 1\n",
            "MemTotal:       24000000 kB\nSlab:             512000 kB\n",
        );
        assert_eq!(
            k,
            KernelSample {
                sockets_used: 1234,
                tcp_inuse: 200,
                tcp_mem_pages: 57,
                slab_bytes: 512_000 * 1024
            }
        );
        let mut during = k;
        during.tcp_inuse += 100;
        during.slab_bytes += 400 * 1024;
        let m = kernel_memory(&crate::host::Machine::live(), Some(k), Some(during)).unwrap();
        assert_eq!(m.slab_bytes_per_socket, Some(4096.0));
    }
}
