//! Parsers for the text Linux shows in /proc and /sys: pure functions from a file's text to typed
//! values. One parser per format, shared by every reader of it: `gather` (through any backend,
//! live or a captured tree), the self-test's kernel samples and the proxy fd-limit check. None
//! of them reads anything; the caller reads through a [`super::Backend`].

use procfs_core::FromRead;

/// The files these parsers read, by host path: every /proc and /sys file wstune names outside
/// its catalog is here, next to the parser of its format.
pub mod paths {
    pub const PROC: &str = "/proc";
    pub const SELF_STATUS: &str = "/proc/self/status";
    pub const SELF_CGROUP: &str = "/proc/self/cgroup";
    pub const SELF_MOUNTINFO: &str = "/proc/self/mountinfo";
    pub const MEMINFO: &str = "/proc/meminfo";
    pub const CPUINFO: &str = "/proc/cpuinfo";
    pub const INTERRUPTS: &str = "/proc/interrupts";
    pub const SOCKSTAT: &str = "/proc/net/sockstat";
    /// One row per CPU of the receive path's counters, in hex (see [`super::softnet_sum`]).
    pub const SOFTNET_STAT: &str = "/proc/net/softnet_stat";
    /// The whole host's CPU time by kind (user, system, idle, steal, ...), in USER_HZ ticks.
    pub const STAT: &str = "/proc/stat";
    pub const SOFTIRQS: &str = "/proc/softirqs";
    pub const CONNTRACK_STAT: &str = "/proc/net/stat/nf_conntrack";
    pub const NETSTAT: &str = "/proc/net/netstat";
    pub const SNMP: &str = "/proc/net/snmp";
    pub const OSRELEASE: &str = "/proc/sys/kernel/osrelease";
    pub const NR_OPEN: &str = "/proc/sys/fs/nr_open";
    pub const PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
    pub const CPUS_ONLINE: &str = "/sys/devices/system/cpu/online";
    pub const NUMA_NODES: &str = "/sys/devices/system/node";

    /// `/proc/PID` (`self` for this process).
    pub fn process(pid: impl std::fmt::Display) -> String {
        format!("{PROC}/{pid}")
    }

    /// `/proc/PID/limits`.
    pub fn limits(pid: impl std::fmt::Display) -> String {
        format!("{PROC}/{pid}/limits")
    }
}

/// The /proc/sys file of a dotted sysctl key.
pub fn sysctl_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

/// (soft, hard) RLIMIT_NOFILE from /proc/PID/limits; unlimited as u64::MAX.
///
/// Parsed with procfs-core, without the lines its parser cannot take: it subtracts from the
/// word count of every line, so a line of fewer than three words (an empty line, a cut-off file
/// from a `--root` tree) overflows and panics in a debug build (found by fuzz/proc_limits). Such
/// a line is no limit anyway; a file without the needed ones is still refused.
pub fn nofile_limits(text: &str) -> Option<(u64, u64)> {
    let lines: String = text
        .lines()
        .filter(|l| l.split_whitespace().count() >= 3)
        .flat_map(|l| [l, "\n"])
        .collect();
    let l = procfs_core::process::Limits::from_read(lines.as_bytes())
        .ok()?
        .max_open_files;
    let v = |x: procfs_core::process::LimitValue| match x {
        procfs_core::process::LimitValue::Unlimited => u64::MAX,
        procfs_core::process::LimitValue::Value(n) => n,
    };
    Some((v(l.soft_limit), v(l.hard_limit)))
}

/// (soft, hard) of the resource whose /proc/PID/limits line is `name` (`Max open files`,
/// `Max processes`, `Max stack size`): the two columns after the name; unlimited as u64::MAX.
pub fn limit_pair(text: &str, name: &str) -> Option<(u64, u64)> {
    if name == "Max open files" {
        return nofile_limits(text);
    }
    let rest = text.lines().find_map(|l| l.strip_prefix(name))?;
    let mut cols = rest.split_whitespace().map(|c| match c {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    });
    Some((cols.next()??, cols.next()??))
}

/// The `Threads:` line of /proc/PID/status: how many threads the process has.
pub fn status_threads(text: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `ethtool -S NIC`'s text (`NIC statistics:` then one `name: value` line per counter), as
/// (name, value) pairs; lines that are not a counter are left out.
pub fn ethtool_stats(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// How many ports of the range `first..=last` a port list (net.ipv4.ip_local_reserved_ports'
/// `8080,30000-32767`) leaves free; None when the list does not parse.
pub fn ports_free(first: u32, last: u32, reserved: &str) -> Option<i64> {
    let mut taken = std::collections::BTreeSet::new();
    for part in reserved.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let p = part.parse::<u32>().ok()?;
                (p, p)
            }
        };
        taken.extend(a.max(first)..=b.min(last));
    }
    Some((last as i64 - first as i64 + 1).max(0) - taken.len() as i64)
}

/// The `Group: names` / `Group: values` line pairs of /proc/net/netstat and /proc/net/snmp.
pub fn header_values(text: &str, group: &str, field: &str) -> Option<i64> {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let names = names[prefix.len()..].split_whitespace();
        let values = values[prefix.len()..].split_whitespace();
        for (n, v) in names.zip(values) {
            if n == field {
                return v.parse().ok();
            }
        }
    }
    None
}

/// The inode of a `/proc/PID/fd` link that names a socket (`socket:[12345]`).
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Each CPU's row of /proc/net/softnet_stat as (dropped, time_squeeze): the second and third
/// hex columns (see [`softnet_sum`]). Rows are in CPU order of the online CPUs.
pub fn softnet_rows(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut c = l.split_whitespace().skip(1);
            let d = u64::from_str_radix(c.next()?, 16).ok()?;
            let s = u64::from_str_radix(c.next()?, 16).ok()?;
            Some((d, s))
        })
        .collect()
}

/// Each CPU's (name, system ticks, softirq ticks, all ticks) from /proc/stat.
pub fn cpu_ticks(stat: &str) -> Vec<(String, u64, u64, u64)> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_string();
            let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
            (v.len() >= 7).then(|| (name, v[2], v[6], v.iter().sum()))
        })
        .collect()
}

/// One field of /proc/net/sockstat: `TCP: inuse 5 orphan 0 tw 2 alloc 7 mem 1`.
pub fn sockstat(text: &str, proto: &str, field: &str) -> Option<i64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(proto))?;
    let words: Vec<&str> = line.split_once(':')?.1.split_whitespace().collect();
    words
        .chunks(2)
        .find(|kv| kv[0] == field)
        .and_then(|kv| kv.get(1)?.parse().ok())
}

/// One column of /proc/net/softnet_stat summed over every CPU's row. The columns are hex:
/// 0 packets processed, 1 dropped (the CPU's input backlog, net.core.netdev_max_backlog, was
/// full), 2 time_squeeze (the NET_RX softirq ran out of net.core.netdev_budget or
/// netdev_budget_usecs with packets left); kernels since 2.6 have at least these. None when the
/// text has no row, or a row lacks the column or is not hex.
pub fn softnet_sum(text: &str, column: usize) -> Option<i64> {
    let mut sum: i64 = 0;
    let mut rows = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v = line.split_whitespace().nth(column)?;
        sum = sum.checked_add(i64::from_str_radix(v, 16).ok()?)?;
        rows += 1;
    }
    (rows > 0).then_some(sum)
}

/// A column of /proc/net/stat/nf_conntrack (a header of names, then one row of hex counters
/// per CPU; the columns differ between kernels, so they are found by name), summed over the
/// CPUs. None when the column is not there.
pub fn conntrack_stat_sum(text: &str, column: &str) -> Option<i64> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let at = lines.next()?.split_whitespace().position(|h| h == column)?;
    let mut sum: i64 = 0;
    for row in lines {
        let v = row.split_whitespace().nth(at)?;
        sum = sum.checked_add(i64::from_str_radix(v, 16).ok()?)?;
    }
    Some(sum)
}

/// The NET_RX row of /proc/softirqs: each CPU's receive softirq count since boot, by the
/// header's CPU names (`CPU0` -> `cpu0`).
pub fn net_rx_counts(softirqs: &str) -> Vec<(String, u64)> {
    let mut lines = softirqs.lines();
    let Some(header) = lines.next() else {
        return vec![];
    };
    let cpus: Vec<String> = header
        .split_whitespace()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    lines
        .find_map(|l| l.trim_start().strip_prefix("NET_RX:"))
        .map(|row| {
            cpus.iter()
                .cloned()
                .zip(row.split_whitespace().map(|v| v.parse().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// Receive softirqs per CPU between two /proc/softirqs readings, busiest first, as
/// "cpu1 82 % (41,000), cpu0 18 % (9,000)" (the busiest 8), and the busiest CPU's share of
/// them all; None when nothing ran.
pub fn net_rx_spread(before: &str, after: &str) -> Option<(String, f64)> {
    let before = net_rx_counts(before);
    let mut d: Vec<(String, u64)> = net_rx_counts(after)
        .into_iter()
        .filter_map(|(cpu, n)| {
            let (_, b) = before.iter().find(|(c, _)| *c == cpu)?;
            Some((cpu, n.saturating_sub(*b)))
        })
        .collect();
    let total: u64 = d.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    d.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let share = |n: u64| n as f64 * 100.0 / total as f64;
    let mut text: Vec<String> = d
        .iter()
        .take(8)
        .map(|(c, n)| format!("{c} {:.0} % ({n})", share(*n)))
        .collect();
    if d.len() > 8 {
        text.push(format!("{} more", d.len() - 8));
    }
    Some((text.join(", "), share(d[0].1)))
}

/// Each CPU's (name, softirq ticks, all ticks) from /proc/stat's `cpuN` lines (user nice
/// system idle iowait irq softirq steal; guest time is inside user and nice already).
pub fn cpu_softirq_ticks(stat: &str) -> Vec<(String, u64, u64)> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_string();
            let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
            (v.len() >= 7).then(|| (name, v[6], v.iter().sum()))
        })
        .collect()
}

/// The share of time each CPU spent in softirq between two /proc/stat readings, busiest
/// first, as "cpu3 31.0 %, cpu0 2.5 %, ..." (the busiest 8); None when the readings share no
/// CPU or no time passed.
pub fn softirq_shares(before: &str, after: &str) -> Option<String> {
    let before = cpu_softirq_ticks(before);
    let mut shares: Vec<(String, f64)> = cpu_softirq_ticks(after)
        .into_iter()
        .filter_map(|(cpu, soft, total)| {
            let (_, soft0, total0) = before.iter().find(|(c, _, _)| *c == cpu)?;
            let dt = total.checked_sub(*total0).filter(|d| *d > 0)?;
            Some((cpu, soft.saturating_sub(*soft0) as f64 * 100.0 / dt as f64))
        })
        .collect();
    if shares.is_empty() {
        return None;
    }
    shares.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let n = shares.len();
    let mut text: Vec<String> = shares
        .iter()
        .take(8)
        .map(|(c, p)| format!("{c} {p:.1} %"))
        .collect();
    if n > 8 {
        text.push(format!("{} more", n - 8));
    }
    Some(text.join(", "))
}

/// CAP_SYS_RESOURCE (linux/capability.h): lets a process raise its hard limit up to
/// fs.nr_open.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// CAP_SYS_RESOURCE in the CapEff line of /proc/PID/status; None when the line is absent.
pub fn can_raise_nofile(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Whether /proc/sys is mounted read-write (/proc/self/mountinfo): the last mount covering it
/// wins (containers remount it read-only on top of /proc).
pub fn proc_sys_writable(mountinfo: &str) -> bool {
    let mut writable = true;
    for line in mountinfo.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 {
            continue;
        }
        let (mount_point, opts) = (f[4], f[5]);
        if mount_point == "/proc" || mount_point == "/proc/sys" {
            writable = !opts.split(',').any(|o| o == "ro");
        }
    }
    writable
}

/// A CPU list (/sys/devices/system/cpu/online): "0-3,8-11" -> 8.
pub fn count_cpu_list(text: &str) -> Option<i64> {
    let mut n = 0;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => n += b.parse::<i64>().ok()? - a.parse::<i64>().ok()? + 1,
            None => {
                part.parse::<i64>().ok()?;
                n += 1
            }
        }
    }
    (n > 0).then_some(n)
}

/// `processor` lines of /proc/cpuinfo (where /sys has no CPU list).
pub fn cpuinfo_processors(text: &str) -> i64 {
    text.lines().filter(|l| l.starts_with("processor")).count() as i64
}

/// MemTotal of /proc/meminfo, bytes, through procfs-core (which checks the whole format).
pub fn mem_total(meminfo: &str) -> Option<u64> {
    procfs_core::Meminfo::from_read(meminfo.as_bytes())
        .ok()
        .map(|m| m.mem_total)
}

/// One `Key:  N kB` line of /proc/meminfo, bytes (`MemAvailable`, `Slab`).
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// The files holding this process's cgroup memory limit, from /proc/self/cgroup: v2
/// (`0::PATH` -> memory.max) or v1 (`N:memory:PATH` -> memory.limit_in_bytes).
pub fn cgroup_memory_files(proc_self_cgroup: &str) -> Vec<String> {
    let norm = |p: &str| {
        if p == "/" {
            String::new()
        } else {
            p.to_string()
        }
    };
    let mut candidates = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            // A line that is not `ID:CONTROLLERS:PATH`: the file is not what it should be,
            // and no limit is better than a wrong one.
            return Vec::new();
        };
        if controllers.is_empty() {
            candidates.push(format!("/sys/fs/cgroup{}/memory.max", norm(path)));
        } else if controllers.split(',').any(|c| c == "memory") {
            candidates.push(format!(
                "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
                norm(path)
            ));
        }
    }
    candidates
}

/// A cgroup memory limit file's value; "max" and v1's near-2^63 "unlimited" are None.
pub fn cgroup_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|v| *v < (1 << 62))
}

/// How many CPUs have served the NIC's interrupts (/proc/interrupts): its IRQs by number when
/// `irqs` (the PCI device's msi_irqs) is known, else the lines that name the NIC.
pub fn count_irq_cpus(text: &str, nic: &str, irqs: &[String]) -> Option<i64> {
    let mut lines = text.lines();
    let ncpu = lines.next()?.split_whitespace().count();
    let mut served = vec![false; ncpu];
    let mut found = false;
    for line in lines {
        let Some((irq, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let ours = if irqs.is_empty() {
            rest.split_whitespace()
                .any(|w| w == nic || w.starts_with(&format!("{nic}-")))
        } else {
            irqs.iter().any(|i| i == irq)
        };
        if !ours {
            continue;
        }
        found = true;
        for (cpu, count) in rest.split_whitespace().take(ncpu).enumerate() {
            if count.parse::<u64>().is_ok_and(|c| c > 0) {
                served[cpu] = true;
            }
        }
    }
    found.then(|| served.iter().filter(|s| **s).count() as i64)
}

/// The parent pid in /proc/PID/stat (`pid (comm) state ppid ...`; comm may hold spaces and
/// parentheses, so the fields are counted after the last ')').
pub fn stat_ppid(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A two-number range sysctl (ip_local_port_range): how many values it holds.
pub fn range_len(text: &str) -> Option<u32> {
    let v: Vec<u32> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 2 && v[1] >= v[0]).then(|| v[1] - v[0] + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_lines_of_fewer_than_three_words_are_skipped_not_a_panic() {
        // fuzz/regressions/proc_limits: procfs-core subtracts from each line's word count.
        let good = "Limit Soft Limit Hard Limit Units\nMax open files 1024 4096 files\n";
        for bad in ["\n", "x\n", "Max nice\n", "Max open\n"] {
            assert_eq!(
                nofile_limits(&format!("{good}{bad}")),
                None,
                "{bad:?}: the other limits are missing"
            );
        }
        let full =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
            Max cpu time              unlimited            unlimited            seconds   \n\
            Max file size             unlimited            unlimited            bytes     \n\
            Max data size             unlimited            unlimited            bytes     \n\
            Max stack size            8388608              unlimited            bytes     \n\
            Max core file size        0                    unlimited            bytes     \n\
            Max resident set          unlimited            unlimited            bytes     \n\
            Max processes             63448                63448                processes \n\
            Max open files            1024                 unlimited            files     \n\
            Max locked memory         8388608              8388608              bytes     \n\
            Max address space         unlimited            unlimited            bytes     \n\
            Max file locks            unlimited            unlimited            locks     \n\
            Max pending signals       63448                63448                signals   \n\
            Max msgqueue size         819200               819200               bytes     \n\
            Max nice priority         0                    0                    \n\
            Max realtime priority     0                    0                    \n\
            Max realtime timeout      unlimited            unlimited            us        \n";
        assert_eq!(nofile_limits(full), Some((1024, u64::MAX)));
        assert_eq!(
            nofile_limits(&format!("{full}\nx\n")),
            Some((1024, u64::MAX))
        );
    }

    #[test]
    fn netstat_pairs() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 17 19\nIpExt: InNoRoutes\nIpExt: 3\n";
        assert_eq!(header_values(text, "TcpExt", "ListenOverflows"), Some(17));
        assert_eq!(header_values(text, "IpExt", "InNoRoutes"), Some(3));
        assert_eq!(header_values(text, "TcpExt", "Nope"), None);
    }

    #[test]
    fn conntrack_counters_are_found_by_name_and_summed_over_cpus() {
        let text = "entries  clashres found new invalid ignore delete delete_list insert insert_failed drop  early_drop icmp_error\n0000001c  00000000 00000000 00000000 00000003 00000000 00000000 00000000 00000000 00000000 0000000a 00000001 00000000\n0000001c  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000006 00000000 00000000\n";
        assert_eq!(conntrack_stat_sum(text, "drop"), Some(16));
        assert_eq!(conntrack_stat_sum(text, "early_drop"), Some(1));
        assert_eq!(conntrack_stat_sum(text, "nope"), None);
    }

    #[test]
    fn net_rx_is_counted_per_cpu_between_two_readings() {
        let before = "                    CPU0       CPU1\n          HI:          0          0\n      NET_RX:        100        200\n";
        let after = "                    CPU0       CPU1\n          HI:          0          0\n      NET_RX:        200       1100\n";
        let (text, busiest) = net_rx_spread(before, after).unwrap();
        assert_eq!(text, "cpu1 90 % (900), cpu0 10 % (100)");
        assert_eq!(busiest.round(), 90.0);
        assert!(net_rx_spread(before, before).is_none());
    }

    #[test]
    fn softirq_shares_are_per_cpu_and_busiest_first() {
        let before = "cpu  10 0 10 100 0 0 10 0 0 0\ncpu0 5 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 50 0 0 10 0 0 0\nintr 1\n";
        // 100 ticks pass on each CPU: cpu1 spends 30 of them in softirq, cpu0 2.
        let after = "cpu  ...\ncpu0 50 0 5 103 0 0 2 0 0 0\ncpu1 20 0 5 105 0 0 40 0 0 0\n";
        assert_eq!(
            softirq_shares(before, after).unwrap(),
            "cpu1 30.0 %, cpu0 2.0 %"
        );
        assert_eq!(softirq_shares(before, before), None, "no time passed");
        assert_eq!(softirq_shares("", after), None);
    }

    #[test]
    fn softnet_columns_are_summed_over_cpus() {
        let text = "00b2f6a1 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n\
                    0001e240 0000000a 0000001f 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001\n";
        assert_eq!(softnet_sum(text, 0), Some(0xb2f6a1 + 0x1e240));
        assert_eq!(softnet_sum(text, 1), Some(10));
        assert_eq!(softnet_sum(text, 2), Some(3 + 31));
        assert_eq!(softnet_sum(text, 20), None);
        assert_eq!(softnet_sum("", 1), None);
        assert_eq!(softnet_sum("zz 1 2\n", 0), None);
    }

    #[test]
    fn sockstat_fields() {
        let text =
            "sockets: used 100\nTCP: inuse 5 orphan 1 tw 2 alloc 7 mem 3\nUDP: inuse 1 mem 0\n";
        assert_eq!(sockstat(text, "TCP", "tw"), Some(2));
        assert_eq!(sockstat(text, "TCP", "mem"), Some(3));
        assert_eq!(sockstat(text, "UDP", "mem"), Some(0));
        assert_eq!(sockstat(text, "sockets", "used"), Some(100));
        assert_eq!(sockstat(text, "TCP", "x"), None);
    }

    #[test]
    fn read_only_proc_sys() {
        let host = "22 1 0:20 / /proc rw,nosuid - proc proc rw\n";
        assert!(proc_sys_writable(host));
        let container =
            format!("{host}1203 22 0:84 /sys /proc/sys ro,nosuid,nodev - proc proc rw\n");
        assert!(!proc_sys_writable(&container));
    }

    #[test]
    fn cap_sys_resource_is_bit_24_of_cap_eff() {
        let root = "Name:\twstune\nCapEff:\t000001ffffffffff\n";
        assert_eq!(can_raise_nofile(root), Some(true));
        // Docker's default set: root without CAP_SYS_RESOURCE.
        let docker = "CapEff:\t00000000a80425fb\n";
        assert_eq!(can_raise_nofile(docker), Some(false));
        assert_eq!(can_raise_nofile("Name: x\n"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,8-11"), Some(8));
        assert_eq!(count_cpu_list("5"), Some(1));
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn irq_spread() {
        let text = "      CPU0  CPU1  CPU2\n 24:  10  0  0  PCI-MSI 1 eth0-TxRx-0\n 25:  0  5  0  PCI-MSI 2 eth0-TxRx-1\n 26: 9 9 9 PCI-MSI 3 nvme0q0\n";
        assert_eq!(count_irq_cpus(text, "eth0", &[]), Some(2));
        assert_eq!(count_irq_cpus(text, "eth0", &["26".into()]), Some(3));
        assert_eq!(count_irq_cpus(text, "eth1", &[]), None);
    }

    #[test]
    fn meminfo_cgroup_stat_and_ranges() {
        let meminfo = "MemTotal:  2048 kB\nMemAvailable:   1024 kB\nSlab: 8 kB\n";
        assert_eq!(meminfo_bytes(meminfo, "MemAvailable"), Some(1 << 20));
        assert_eq!(meminfo_bytes(meminfo, "Slab"), Some(8192));
        assert_eq!(meminfo_bytes(meminfo, "Mem"), None);
        assert_eq!(
            cgroup_memory_files("0::/box\n"),
            ["/sys/fs/cgroup/box/memory.max"]
        );
        assert_eq!(
            cgroup_memory_files("4:cpu,memory:/\n"),
            ["/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        );
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit("9223372036854771712\n"), None);
        assert_eq!(cgroup_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(stat_ppid("42 (a) b) S 7 42 42"), Some(7));
        assert_eq!(range_len("32768\t60999\n"), Some(28232));
        assert_eq!(range_len("5 4"), None);
    }

    #[test]
    fn thread_limits_threads_ena_stats_and_free_ports_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax stack size            8388608              unlimited            bytes     \nMax processes             63444                63444                processes \nMax open files            1024                 524288               files     \n";
        assert_eq!(
            limit_pair(limits, "Max stack size"),
            Some((8_388_608, u64::MAX))
        );
        assert_eq!(limit_pair(limits, "Max processes"), Some((63_444, 63_444)));
        assert_eq!(limit_pair(limits, "Max cpu time"), None);
        assert_eq!(status_threads("Name:\tjava\nThreads:\t4100\n"), Some(4100));
        assert_eq!(status_threads("Name:\tjava\n"), None);
        let s = "NIC statistics:\n     tx_timeout: 0\n     pps_allowance_exceeded: 17\n     queue_0_tx_cnt: 5\n";
        assert_eq!(
            ethtool_stats(s),
            vec![
                ("tx_timeout".to_string(), 0),
                ("pps_allowance_exceeded".to_string(), 17),
                ("queue_0_tx_cnt".to_string(), 5)
            ]
        );
        assert_eq!(ports_free(10000, 65535, ""), Some(55_536));
        assert_eq!(
            ports_free(10000, 65535, "10250,30000-32767"),
            Some(55_536 - 2_769)
        );
        assert_eq!(ports_free(32768, 60999, "8080"), Some(28_232));
        assert_eq!(ports_free(1, 2, "x"), None);
    }
}
