//! Sizing a load test to what the host allows, before anything starts: generator processes
//! from the fd limit, loopback source addresses from the ephemeral port range, and (for
//! `serve --self-test`) the connection count from the server's fd limit and the CPU, and the
//! server processes and deflate count that follow (`size_serve`).
//! Pure functions over the figures, so every rule is unit-tested.

use std::net::{IpAddr, Ipv4Addr};

/// File descriptors a process keeps for itself besides connections (stdio, epoll, pipes).
pub const FD_RESERVE: u64 = 64;

/// Server processes `serve --self-test` starts at most (100k connections at a 20,000 fd limit
/// need 6; more than this means the limit is the problem).
pub const MAX_SERVER_PROCESSES: usize = 64;

/// More generator processes than this means the fd limit is the problem, not the host's size.
pub const MAX_WORKERS: usize = 64;

/// How many generator processes `conns` connections need when each may open `nofile` files;
/// never fewer than `requested`.
pub fn workers_for(conns: usize, nofile: u64, requested: usize) -> Result<usize, String> {
    let per = nofile.saturating_sub(FD_RESERVE);
    if per == 0 {
        return Err(format!(
            "this process may open only {nofile} files, too few for any connection; raise the \
             limit (ulimit -n, LimitNOFILE=) to at least {}",
            FD_RESERVE + 1000
        ));
    }
    let need = (conns as u64).div_ceil(per) as usize;
    if need > MAX_WORKERS {
        return Err(format!(
            "{conns} connections at {nofile} open files per process would need {need} generator \
             processes (at most {MAX_WORKERS}); raise the limit (ulimit -n, LimitNOFILE=) to at \
             least {} or ask for fewer --conns",
            (conns as u64).div_ceil(MAX_WORKERS as u64) + FD_RESERVE
        ));
    }
    Ok(need.max(requested).max(1))
}

/// Loopback source addresses at most (127.0.0.1 .. 127.0.0.250).
pub const MAX_SOURCES: usize = 250;

/// Source addresses for `conns` connections to `server` when each source address can use
/// `ports` ephemeral ports. Loopback servers get 127.0.0.1, 127.0.0.2, ... (any 127/8 address
/// is local on Linux), keeping every source at most 80% used; others must fit in one.
pub fn sources_for(
    server: IpAddr,
    conns: usize,
    ports: u32,
    requested: usize,
) -> Result<Vec<IpAddr>, String> {
    let usable = (ports as usize * 8 / 10).max(1);
    let need = conns.div_ceil(usable).max(requested).max(1);
    if !server.is_loopback() || !server.is_ipv4() {
        if need > 1 {
            return Err(format!(
                "{conns} connections from one address need {conns} ephemeral ports, and \
                 net.ipv4.ip_local_port_range gives {ports}; widen it (`wstune apply` does), \
                 give more of this host's addresses with --src-ips, or run the generator from \
                 more hosts (selftest --shard I/N)"
            ));
        }
        return Ok(Vec::new());
    }
    if need > MAX_SOURCES {
        return Err(format!(
            "{conns} connections need {need} loopback source addresses at {usable} ports each; \
             widen net.ipv4.ip_local_port_range"
        ));
    }
    Ok((1..=need as u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect())
}

/// `--src-ips`: the addresses the user gave, checked to hold `conns` connections at 80 % of
/// `ports` each and to be of the server's family (binding each is the caller's check).
pub fn given_sources(
    given: &[IpAddr],
    server: IpAddr,
    conns: usize,
    ports: u32,
) -> Result<Vec<IpAddr>, String> {
    if let Some(a) = given.iter().find(|a| a.is_ipv4() != server.is_ipv4()) {
        return Err(format!(
            "--src-ips {a}: the server {server} is IPv{}; give addresses of the same family",
            if server.is_ipv4() { 4 } else { 6 }
        ));
    }
    let mut list = given.to_vec();
    list.sort();
    list.dedup();
    let usable = (ports as usize * 8 / 10).max(1);
    let need = conns.div_ceil(usable);
    if need > list.len() {
        return Err(format!(
            "{conns} connections need {need} source addresses at {usable} ports each \
             (net.ipv4.ip_local_port_range gives {ports}), and --src-ips gives {}; add \
             addresses (ip addr add ADDR dev IFACE) or widen the port range",
            list.len()
        ));
    }
    Ok(list)
}

/// Echo messages per second per core that `serve --self-test` offers when generator and server
/// share the cores. Conservative on purpose: both sides together use well under half the CPU at
/// this rate (measured on the 2-core development VM: 10k msgs/s at ~25% server + ~25% generator),
/// so what the report shows is the server's latency, not a fight for the cores. It sizes the
/// *rate* of the rate scenarios only: holding idle connections and a connect storm cost
/// memory and file descriptors, not a sustained CPU share, so the CPU never lowers a count.
pub const ECHOES_PER_CORE: f64 = 5_000.0;

/// Broadcast deliveries per second per core that `serve --self-test` plans with: the server's
/// write and the generator's read of each, both on these cores. Measured on the 2-core VM (at
/// real-time priority, so other work did not decide it): 21-34 us of CPU per delivery at 100k
/// connections over 7 server and 6 generator processes (13-19 in the servers' sends, 8-15 in
/// the generator's receives: the kernel's loopback path, with 200k sockets' state out of
/// cache), ~15 us at 10k; 25,000 is that with a margin.
pub const DELIVERIES_PER_CORE: f64 = 25_000.0;

/// How many of `wanted` broadcast rounds fit `secs` when each round must reach `conns`
/// subscribers at `DELIVERIES_PER_CORE` on `cores`: the publisher spaces rounds `secs /
/// (rounds + 1)` apart, and that gap must hold one round's fan-out. With fewer rounds than
/// wanted, the note says so (at least one round always runs).
pub fn broadcast_rounds(
    conns: usize,
    cores: usize,
    secs: f64,
    wanted: usize,
) -> (usize, Option<String>) {
    let per_sec = DELIVERIES_PER_CORE * cores.max(1) as f64;
    let round = conns as f64 / per_sec;
    let fit = ((secs / round.max(1e-9)).floor() as usize)
        .saturating_sub(1)
        .max(1);
    if fit >= wanted {
        return (wanted, None);
    }
    (
        fit,
        Some(format!(
            "broadcast publishes {fit} round(s) of {conns} deliveries, one every {:.2} s, instead of {wanted}: what {} core(s) fan out and receive at once (~{DELIVERIES_PER_CORE:.0} deliveries/s per core; --rounds sets it)",
            secs / (fit + 1) as f64,
            cores.max(1)
        )),
    )
}

/// Memory one loopback test connection costs besides the server's share (the profile's
/// estimate): the generator's kernel socket (4 KiB, like the server's) and its client state
/// (socket halves, task, schedule; an idle connection holds no read buffer): 20,000 idle
/// connections held 69 MB of generator RSS with the process's own base, 3.4 KB each, so
/// 4 KiB.
pub const GENERATOR_BYTES_PER_CONN: u64 = 4096 + 4096;

/// What one idle TLS connection adds on both sides of a loopback self-test: rustls' session
/// state and the buffers it keeps after the handshake. Measured: 4,000 idle connections of
/// `serve --self-test --tls` (ECDSA P-256, TLS 1.3) held 7.8 KB more server RSS each than
/// plain ones (1.9 KB) and 9.5 KB more generator RSS each (38 MB more over 4,000): 17.3 KB,
/// and 20 KiB with a margin (tests/measured/generator.rs holds it).
pub const TLS_BYTES_PER_CONN: u64 = 20 << 10;

/// What one deflate connection adds on the generator's side: a decompressor with the server's
/// window (the server keeps its context); the generator compresses from one shared context
/// per process. Measured: 5,000 deflate connections against the 100k profile's server (window
/// 11 bits) held 136 MB of generator RSS, 27 KB each with the plain client state (a
/// per-connection compressor and 32 KiB inflate window held 896 MB, 179 KB each, and kept the
/// deflate scenario to ~72k connections on a 24 GiB host): 22 KiB of inflate state and buffers
/// plus the window, rounded up.
pub fn generator_deflate_bytes_per_conn(server_window_bits: u8) -> u64 {
    (22 << 10) + (1u64 << server_window_bits.clamp(9, 15))
}

/// The deflate scenario's own count when `conns` deflate connections (server estimate
/// `bytes_per_conn` with its contexts, plus the generator's side) do not fit the memory; the
/// other scenarios keep `conns`. None when they fit (or the memory is unknown).
pub fn deflate_conns(
    conns: usize,
    bytes_per_conn: u64,
    window_bits: u8,
    mem_available: Option<u64>,
) -> Option<(usize, String)> {
    let avail = mem_available?;
    let generator = GENERATOR_BYTES_PER_CONN + generator_deflate_bytes_per_conn(window_bits);
    let per = bytes_per_conn + generator;
    let cap = ((avail as f64 * MEMORY_SHARE) as u64 / per) as usize;
    (cap < conns).then(|| {
        (
            cap.max(1),
            format!(
                "deflate scenario: {conns} deflate connections need about {} MiB here ({bytes_per_conn} \
                 bytes per server connection with its contexts, {} for the generator's side), \
                 more than {:.0}% of the {} MiB available; it runs {cap}, the other scenarios \
                 keep {conns}",
                (conns as u64 * per) >> 20,
                generator,
                MEMORY_SHARE * 100.0,
                avail >> 20
            ),
        )
    })
}

/// Share of the available memory the self-test may plan to use: the rest stays for the page
/// cache, the other processes and the estimate's error.
pub const MEMORY_SHARE: f64 = 0.8;

/// What this host allows a self-test, read before anything starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostRoom {
    /// Open files one server process may hold (its soft limit once raised to the hard one).
    pub server_nofile: u64,
    /// Server processes the self-test may start (1 when the server runs inside this process).
    pub max_server_processes: usize,
    /// MemAvailable (or the cgroup's room), bytes; None when unreadable (no memory bound).
    pub mem_available: Option<u64>,
    /// Ephemeral ports per loopback source address.
    pub ephemeral_ports: u32,
    pub cores: usize,
}

/// How `serve --self-test` runs here.
#[derive(Debug, Clone, PartialEq)]
pub struct SelfTestSize {
    /// Connections of every scenario.
    pub conns: usize,
    /// Server processes the count needs (one per `server_nofile - FD_RESERVE` connections).
    pub server_processes: usize,
    /// Messages per second per connection in the rate scenarios (echo-rate, deflate).
    pub rate: f64,
    /// Why the count is below the profile's, one line per bound that bit (fd, memory, ports).
    pub scaled_down: Vec<String>,
    /// Why the rate scenarios offer less per connection than the profile (the CPU budget).
    pub rate_note: Option<String>,
}

/// Size `serve --self-test`: every scenario at the profile's `wanted` connections unless the
/// fd limits over the allowed server processes, the memory (`bytes_per_conn` for the server,
/// from the profile's estimate, plus the generator's side) or the loopback port ranges cannot
/// hold them; each bound that bites is named. The CPU budget only lowers the per-connection
/// `rate` of the rate scenarios (and says so), never the count.
pub fn size_self_test(wanted: usize, rate: f64, bytes_per_conn: u64, h: &HostRoom) -> SelfTestSize {
    let mut conns = wanted.max(1);
    let mut scaled_down = Vec::new();
    let procs = h.max_server_processes.max(1);
    // Several processes: the child server is started for `server_max(conns)`, so that is what
    // must fit. One process is the self-test's own, sized for the count itself.
    let fd_cap = match procs {
        1 => fd_room(h.server_nofile, 1),
        _ => conns_for_server_max(fd_room(h.server_nofile, procs)),
    };
    if conns > fd_cap {
        let needed = crate::profile::processes_needed(wanted as u64, h.server_nofile);
        scaled_down.push(format!(
            "fd limit: the profile wants {wanted} connections, a server process may open {} files \
             (hard limit, ulimit -n) and the self-test can run {procs} server process(es) here, \
             room for {fd_cap}; using {fd_cap}. Raise the hard limit (`wstune apply`, \
             LimitNOFILE=) to at least {}{}",
            h.server_nofile,
            match procs {
                1 => wanted as u64,
                _ => crate::profile::connections_per_process(server_max(wanted) as u64, procs as u64),
            } + FD_RESERVE,
            match needed {
                Some(n) if procs == 1 =>
                    format!(", or run the server as {n} processes (`serve --processes {n}`)"),
                _ => String::new(),
            }
        ));
        conns = fd_cap;
    }
    if let Some(avail) = h.mem_available {
        let per = bytes_per_conn + GENERATOR_BYTES_PER_CONN;
        let mem_cap = ((avail as f64 * MEMORY_SHARE) as u64 / per.max(1)) as usize;
        if conns > mem_cap {
            scaled_down.push(format!(
                "memory: {conns} connections need about {} MiB here (the profile's estimate of {} \
                 bytes per server connection plus {} for the generator's side), more than {:.0}% \
                 of the {} MiB available; using {mem_cap}. Add memory (or run the generator on \
                 another host: `wstune selftest --url`)",
                (conns as u64 * per) >> 20,
                bytes_per_conn,
                GENERATOR_BYTES_PER_CONN,
                MEMORY_SHARE * 100.0,
                avail >> 20
            ));
            conns = mem_cap;
        }
    }
    let port_cap = (h.ephemeral_ports as usize * 8 / 10).max(1) * MAX_SOURCES;
    if conns > port_cap {
        scaled_down.push(format!(
            "ports: {conns} connections at {} ephemeral ports per loopback source address need \
             more than {MAX_SOURCES} sources; using {port_cap}. Widen \
             net.ipv4.ip_local_port_range (`wstune apply` does)",
            h.ephemeral_ports
        ));
        conns = port_cap;
    }
    let conns = conns.max(1);
    let budget = ECHOES_PER_CORE * h.cores.max(1) as f64;
    let (rate, rate_note) = if conns as f64 * rate > budget {
        let r = budget / conns as f64;
        (
            r,
            Some(format!(
                "echo-rate and deflate offer {budget:.0} msgs/s in total, {r:.3} per connection \
                 instead of the profile's {rate}: what {} core(s) can generate and serve at once \
                 (~{ECHOES_PER_CORE:.0}/s per core). Idle, storm and the others keep all {conns} \
                 connections",
                h.cores.max(1)
            )),
        )
    } else {
        (rate, None)
    };
    SelfTestSize {
        conns,
        // What `serve --self-test` starts (without --processes): as many as the supervisor
        // needs for `server_max(conns)`, at most `procs`.
        server_processes: crate::profile::processes_needed(
            server_max(conns) as u64,
            h.server_nofile,
        )
        .map_or(procs, |n| n as usize)
        .min(procs),
        rate,
        scaled_down,
        rate_note,
    }
}

/// What the self-test's server may accept in all for `conns` clients: a tenth more (the
/// kernel's SO_REUSEPORT hash spreads connections evenly on average only; at 600 over 3
/// processes one got more than its share + 10 % and answered 503) plus the publisher's.
pub fn server_max(conns: usize) -> usize {
    conns.saturating_add(conns / 10).saturating_add(64)
}

/// The most clients whose [`server_max`] stays within `room` connections.
pub fn conns_for_server_max(room: usize) -> usize {
    let mut c = room.saturating_sub(64) / 11 * 10;
    while server_max(c + 1) <= room {
        c += 1;
    }
    c
}

/// Connections `processes` server processes can hold at `nofile` open files each, under the
/// supervisor's rule (each process gets its share plus 10%, plus `FD_RESERVE` files).
pub fn fd_room(nofile: u64, processes: usize) -> usize {
    let per = nofile.saturating_sub(FD_RESERVE);
    if processes <= 1 {
        return per as usize;
    }
    // The largest share s with s + ceil(s / 10) <= per (u128: `per` may be u64::MAX).
    let mut share = (per as u128 * 10 / 11) as u64;
    while share + share.div_ceil(10) > per {
        share -= 1;
    }
    while (share + 1) + (share + 1).div_ceil(10) <= per {
        share += 1;
    }
    share
        .saturating_mul(processes as u64)
        .min(usize::MAX as u64) as usize
}

/// What `serve --self-test` sizes: the profile and the operator's load, and how the server
/// runs (the processes asked for, a user's program, compression).
pub struct ServeAsk<'a> {
    /// The machine that runs the server and the load: its free memory and ephemeral ports.
    pub host: &'a crate::host::Machine,
    pub profile: &'a crate::profile::Profile,
    /// `--conns`: the operator's count (no scale-down to explain then).
    pub conns: Option<usize>,
    /// `--scenario`s named (empty: the defaults).
    pub scenarios: &'a [super::Scenario],
    /// `--processes` or a `server.processes` other than 1, with which of the two it was.
    pub processes: Option<(crate::profile::Processes, &'a str)>,
    /// `--command`: the user's program is the server.
    pub user_program: bool,
    /// The server's window bits when it offers permessage-deflate.
    pub deflate_window_bits: Option<u8>,
    /// Every connection is TLS (`--tls`): both ends hold a session ([`TLS_BYTES_PER_CONN`]).
    pub tls: bool,
    /// This process's open-file limit (raised to the hard one) and the host's cores.
    pub nofile: u64,
    pub cores: usize,
}

/// How `serve --self-test` runs on this host.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeSize {
    /// Connections of every scenario.
    pub conns: usize,
    /// What the server accepts in all ([`server_max`]).
    pub server_max: usize,
    /// Server processes: 1 in this process, more as a child `serve --processes N`.
    pub processes: usize,
    /// The deflate scenario's own, lower count (its contexts on both sides), when it runs.
    pub deflate_conns: Option<usize>,
    /// Messages per second per connection in the rate scenarios, and why it is below the
    /// profile's.
    pub rate: f64,
    pub rate_note: Option<String>,
    /// Why the counts are below the profile's, one line per bound that bit.
    pub scaled_down: Vec<String>,
    pub cores: usize,
}

/// Size `serve --self-test` to this host: the profile's connections unless the fd limit over
/// the server processes allowed, the memory or the port ranges cannot hold them, the server
/// processes the supervisor will start for that count, and the deflate scenario's count. The
/// errors are bad input (`--processes 1` with more connections than one process may hold).
pub fn size_serve(a: &ServeAsk) -> Result<ServeSize, String> {
    use crate::profile::Processes;
    let profile = a.profile;
    let profile_rate = profile.selftest.rate_per_client as f64;
    let max_server_processes = match a.processes {
        // The user's program is one process as far as the sizing knows (it may fork more;
        // they are measured as its process tree).
        _ if a.user_program => 1,
        _ if !crate::host::MANY_SERVER_PROCESSES => 1,
        Some((Processes::Count(n), _)) => n.max(1) as usize,
        _ => MAX_SERVER_PROCESSES,
    };
    let room = HostRoom {
        server_nofile: a.nofile,
        max_server_processes,
        mem_available: mem_available(a.host),
        ephemeral_ports: ephemeral_ports(a.host),
        cores: a.cores,
    };
    // The scenarios' connections are plain ones (the deflate scenario's own count, with its
    // contexts, is sized below): counting every connection's deflate contexts and in-flight
    // buffers sized a million-connection profile down to 421k on a host that holds 1M.
    let sized = size_self_test(
        profile.connections as usize,
        profile_rate,
        profile.estimate().plain_bytes_per_conn() + if a.tls { TLS_BYTES_PER_CONN } else { 0 },
        &room,
    );
    // --conns is the operator's choice: no scale-down to explain (and the verdict still says
    // when it is below the profile's count); the rate still follows the CPU budget.
    let (conns, mut scaled_down) = match a.conns {
        Some(n) => (n, Vec::new()),
        None => (sized.conns, sized.scaled_down.clone()),
    };
    let mut server_max = server_max(conns);
    // The supervisor's own sizing, so the report names what it will start.
    let size = |server_max: usize| -> Result<usize, String> {
        Ok(match a.processes {
            _ if max_server_processes == 1 => 1,
            Some((w, from)) => {
                crate::profile::size_processes(w, from, server_max, a.nofile, a.cores)?.processes
            }
            None => crate::profile::processes_needed(server_max as u64, a.nofile)
                .map_or(1, |n| n as usize)
                .min(MAX_SERVER_PROCESSES),
        })
    };
    let mut processes = size(server_max)?;
    // A rolling restart moves a draining process's clients over every process, so each of the
    // others takes about 1/N of them on top of its own (docs/serve.md, "Leave room for the
    // roll"): the restart scenario's server gets that room, as a deployment should.
    if processes > 1 && a.scenarios.iter().any(|s| s.disrupts_server()) {
        server_max += server_max.div_ceil(processes);
        processes = size(server_max)?;
    }
    // The deflate scenario alone may need a lower count: its contexts on both sides. Only
    // said when the deflate scenario runs (named, or among the defaults).
    let deflate_runs = a.conns.is_none()
        && (a.scenarios.is_empty() || a.scenarios.iter().any(|s| s.negotiates_deflate()));
    let deflate = a
        .deflate_window_bits
        .filter(|_| deflate_runs)
        .and_then(|bits| {
            deflate_conns(
                conns,
                profile.estimate().bytes_per_conn(),
                bits,
                room.mem_available,
            )
        });
    if let Some((_, why)) = &deflate {
        scaled_down.push(why.clone());
    }
    let sized = if a.conns.is_some() {
        size_self_test(
            conns,
            profile_rate,
            0,
            &HostRoom {
                server_nofile: u64::MAX,
                max_server_processes: 1,
                mem_available: None,
                ephemeral_ports: u32::MAX,
                ..room
            },
        )
    } else {
        sized
    };
    Ok(ServeSize {
        conns,
        server_max,
        processes,
        deflate_conns: deflate.map(|d| d.0),
        rate: sized.rate,
        rate_note: sized.rate_note,
        scaled_down,
        cores: room.cores,
    })
}

/// Memory this host can still give, bytes: MemAvailable from /proc/meminfo, Linux.
pub fn mem_available(host: &crate::host::Machine) -> Option<u64> {
    let text = host.read(crate::host::procfs::paths::MEMINFO).ok()?;
    crate::host::procfs::meminfo_bytes(&text, "MemAvailable")
}

/// Ephemeral ports per source address (net.ipv4.ip_local_port_range), Linux; 28232 (the
/// kernel default) when unreadable.
pub fn ephemeral_ports(host: &crate::host::Machine) -> u32 {
    host.read(crate::host::procfs::paths::PORT_RANGE)
        .ok()
        .and_then(|s| crate::host::procfs::range_len(&s))
        .unwrap_or(28_232)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_follow_the_fd_limit() {
        assert_eq!(workers_for(1000, 20_000, 1), Ok(1));
        assert_eq!(workers_for(19_936, 20_000, 1), Ok(1));
        assert_eq!(workers_for(19_937, 20_000, 1), Ok(2));
        assert_eq!(workers_for(100_000, 20_000, 1), Ok(6));
        assert_eq!(workers_for(10, 20_000, 4), Ok(4));
        assert!(workers_for(10, 64, 1).unwrap_err().contains("ulimit -n"));
        let e = workers_for(5000, 100, 1).unwrap_err();
        assert!(
            e.contains("139 generator processes") && e.contains("ulimit -n"),
            "{e}"
        );
    }

    #[test]
    fn loopback_sources_keep_ports_below_80_percent() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(sources_for(lo, 1000, 28_232, 1).unwrap().len(), 1);
        let s = sources_for(lo, 50_000, 28_232, 1).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[2], "127.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(sources_for(lo, 10, 28_232, 4).unwrap().len(), 4);
        let remote: IpAddr = "10.0.0.5".parse().unwrap();
        assert!(sources_for(remote, 1000, 28_232, 1).unwrap().is_empty());
        assert!(sources_for(remote, 50_000, 28_232, 1)
            .unwrap_err()
            .contains("ip_local_port_range"));
    }

    fn room(nofile: u64, procs: usize, mem: Option<u64>, cores: usize) -> HostRoom {
        HostRoom {
            server_nofile: nofile,
            max_server_processes: procs,
            mem_available: mem,
            ephemeral_ports: 28_232,
            cores,
        }
    }

    #[test]
    fn the_cpu_never_lowers_the_count_only_the_rate() {
        // The old rule: 2 cores x 5,000 echoes/s / 10 msgs/s cut 100k connections to 1,000.
        let s = size_self_test(100_000, 10.0, 8192, &room(1_048_576, 1, None, 2));
        assert_eq!(s.conns, 100_000);
        assert!(s.scaled_down.is_empty(), "{:?}", s.scaled_down);
        assert!((s.rate - 0.1).abs() < 1e-9, "{}", s.rate);
        let note = s.rate_note.unwrap();
        assert!(
            note.contains("10000 msgs/s") && note.contains("0.100"),
            "{note}"
        );
        // Small enough for the budget: the profile's rate, no note.
        let s = size_self_test(500, 10.0, 8192, &room(1_048_576, 1, None, 2));
        assert_eq!((s.conns, s.rate, s.rate_note), (500, 10.0, None));
    }

    #[test]
    fn fd_limits_count_over_the_server_processes() {
        let s = size_self_test(100_000, 10.0, 8192, &room(20_000, 1, None, 2));
        assert_eq!((s.conns, s.server_processes), (19_936, 1));
        assert!(
            s.scaled_down[0].starts_with("fd limit"),
            "{:?}",
            s.scaled_down
        );
        assert!(
            s.scaled_down[0].contains("--processes"),
            "{:?}",
            s.scaled_down
        );
        assert!(
            s.scaled_down[0].contains("6 processes"),
            "{:?}",
            s.scaled_down
        );
        // Seven processes hold 100k (110,064 with the headroom) under a 20,000 limit.
        let s = size_self_test(100_000, 10.0, 8192, &room(20_000, 8, None, 2));
        assert_eq!((s.conns, s.server_processes), (100_000, 7));
        assert!(s.scaled_down.is_empty(), "{:?}", s.scaled_down);
        // Eight processes at most, 18,123 each (+10% +64 = 20,000): 144,984.
        assert_eq!(fd_room(20_000, 8), 144_984);
        assert!(fd_room(u64::MAX, 64) > 1 << 40);
        let s = size_self_test(200_000, 10.0, 8192, &room(20_000, 8, None, 2));
        // 144,984 hold the server's total with its headroom: 131,746 clients.
        assert_eq!((s.conns, s.server_processes), (131_746, 8));
        assert!(
            s.scaled_down[0].contains("8 server process(es)"),
            "{:?}",
            s.scaled_down
        );
        let s = size_self_test(10_000, 10.0, 8192, &room(1024, 1, None, 32));
        assert_eq!(s.conns, 960);
        assert!(
            s.scaled_down[0].contains("ulimit -n"),
            "{:?}",
            s.scaled_down
        );
    }

    #[test]
    fn the_sized_count_fits_the_supervisor_it_starts() {
        // The supervisor adds its 10 % per process to the server's total: whatever the self-test
        // sizes must be accepted by `profile::size_processes` for that many processes.
        for (nofile, procs) in [(20_000, 6), (20_000, 4), (4096, 3), (1024, 64)] {
            let s = size_self_test(100_000, 10.0, 4096, &room(nofile, procs, None, 2));
            let fits = crate::profile::size_processes(
                crate::profile::Processes::Count(procs as u64),
                "--processes",
                server_max(s.conns),
                nofile,
                2,
            );
            assert!(fits.is_ok(), "{nofile} x {procs}: {} -> {fits:?}", s.conns);
        }
        assert_eq!(conns_for_server_max(server_max(98_794)), 98_794);
    }

    #[test]
    fn memory_and_ports_bound_the_count_and_say_so() {
        // 1 GiB available, 48 KiB + the generator's 8 KiB per connection.
        let s = size_self_test(100_000, 10.0, 48 << 10, &room(1 << 20, 1, Some(1 << 30), 2));
        assert_eq!(
            s.conns,
            (((1u64 << 30) as f64 * 0.8) as u64 / (56 << 10)) as usize
        );
        assert_eq!(s.scaled_down.len(), 1);
        assert!(
            s.scaled_down[0].starts_with("memory"),
            "{:?}",
            s.scaled_down
        );
        let mut r = room(1 << 30, 1, None, 2);
        r.ephemeral_ports = 100;
        let s = size_self_test(100_000, 10.0, 8192, &r);
        assert_eq!(s.conns, 80 * MAX_SOURCES);
        assert!(
            s.scaled_down[0].contains("ip_local_port_range"),
            "{:?}",
            s.scaled_down
        );
        // Deflate needs its own, lower count on an 8 GiB host at 100k; the others keep theirs
        // (24 GiB holds all 100k since the generator shares its compressor).
        assert_eq!(deflate_conns(100_000, 48 << 10, 11, Some(24 << 30)), None);
        let (n, why) = deflate_conns(100_000, 48 << 10, 11, Some(8 << 30)).unwrap();
        assert!(n < 100_000 && n > 50_000, "{n}");
        assert!(
            why.starts_with("deflate scenario") && why.contains("keep 100000"),
            "{why}"
        );
        assert_eq!(deflate_conns(10_000, 48 << 10, 11, Some(24 << 30)), None);
        // Plenty of everything: the profile's count.
        let s = size_self_test(
            100_000,
            10.0,
            48 << 10,
            &room(1 << 20, 1, Some(24 << 30), 16),
        );
        assert_eq!((s.conns, s.scaled_down.len()), (100_000, 0));
    }

    #[test]
    fn broadcast_rounds_are_spaced_by_what_the_cores_deliver() {
        // Small counts keep the ten rounds and say nothing.
        assert_eq!(broadcast_rounds(10_000, 2, 5.0, 10), (10, None));
        // 100k on 2 cores: 2 s per round, so one round, 2.5 s into a 5 s run; 60 s hold 29.
        let (r, note) = broadcast_rounds(100_000, 2, 5.0, 10);
        assert_eq!(r, 1);
        let note = note.unwrap();
        assert!(
            note.contains("1 round(s) of 100000 deliveries, one every 2.50 s"),
            "{note}"
        );
        assert_eq!(broadcast_rounds(100_000, 2, 60.0, 10).0, 10);
        assert_eq!(broadcast_rounds(100_000, 4, 5.0, 10).0, 4);
        assert!(note.contains("--rounds"), "{note}");
        // Never none, however short the run.
        assert_eq!(broadcast_rounds(1_000_000, 1, 1.0, 10).0, 1);
    }
}
