//! Sizing a load test to what the host allows, before anything starts: generator processes
//! from the fd limit, loopback source addresses from the ephemeral port range, and (for
//! `serve --self-test`) the connection count from the server's fd limit and the CPU.
//! Pure functions over the figures, so every rule is unit-tested.

use std::net::{IpAddr, Ipv4Addr};

/// File descriptors a process keeps for itself besides connections (stdio, epoll, pipes).
pub const FD_RESERVE: u64 = 64;

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
                 net.ipv4.ip_local_port_range gives {ports}; widen it (`wstune apply` does) \
                 or run the generator from more hosts"
            ));
        }
        return Ok(Vec::new());
    }
    if need > 250 {
        return Err(format!(
            "{conns} connections need {need} loopback source addresses at {usable} ports each; \
             widen net.ipv4.ip_local_port_range"
        ));
    }
    Ok((1..=need as u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect())
}

/// Echo messages per second per core that `serve --self-test` offers when generator and server
/// share the cores. Conservative on purpose: both sides together use well under half the CPU at
/// this rate (measured on the 2-core development VM: 10k msgs/s at ~25% server + ~25% generator),
/// so what the report shows is the server's latency, not a fight for the cores.
pub const ECHOES_PER_CORE: f64 = 5_000.0;

/// What `serve --self-test` can run here: the connections (bounded by the server's fd limit
/// and the CPU budget for the offered rate) and, for each bound that bit, why.
pub fn size_self_test(
    wanted: usize,
    rate: f64,
    server_nofile: u64,
    cores: usize,
) -> (usize, Vec<String>) {
    let mut conns = wanted;
    let mut why = Vec::new();
    let fd_cap = server_nofile.saturating_sub(FD_RESERVE) as usize;
    if conns > fd_cap {
        why.push(format!(
            "the profile wants {wanted} connections but this process may open {server_nofile} files \
             (ulimit -n); using {fd_cap}. `wstune apply` raises the limit"
        ));
        conns = fd_cap;
    }
    let cpu_cap = (ECHOES_PER_CORE * cores as f64 / rate.max(0.001)) as usize;
    if conns > cpu_cap {
        why.push(format!(
            "{conns} clients x {rate} msgs/s would offer {:.0} msgs/s, more than {cores} core(s) \
             can generate and serve at once (~{:.0}/s here); using {cpu_cap} clients",
            conns as f64 * rate,
            ECHOES_PER_CORE * cores as f64
        ));
        conns = cpu_cap;
    }
    (conns.max(1), why)
}

/// Ephemeral ports per source address (net.ipv4.ip_local_port_range), Linux; 28232 (the
/// kernel default) when unreadable.
pub fn ephemeral_ports() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let v: Vec<u32> = s
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 2 && v[1] >= v[0]).then(|| v[1] - v[0] + 1)
        })
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

    #[test]
    fn self_test_scales_down_and_says_why() {
        let (n, why) = size_self_test(10_000, 10.0, 1_048_576, 32);
        assert_eq!((n, why.len()), (10_000, 0));
        let (n, why) = size_self_test(10_000, 10.0, 1024, 32);
        assert_eq!(n, 960);
        assert!(why[0].contains("ulimit -n"), "{why:?}");
        let (n, why) = size_self_test(10_000, 10.0, 1_048_576, 2);
        assert_eq!(n, 1000);
        assert!(why[0].contains("2 core(s)"), "{why:?}");
    }
}
