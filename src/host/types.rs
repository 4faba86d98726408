//! The OS vocabulary every backend speaks: which platform a host is, a registry value's type,
//! an IP version, the host facts a backend answers (`Backend::host_fact`). The catalog names
//! the same things (it re-exports [`Fact`]), but they belong to the boundary: a backend must
//! not need the catalog to say what it is, so host depends on nothing of the catalog's.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Windows,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IpVersion {
    Ipv4,
    Ipv6,
}

impl IpVersion {
    /// The word netsh uses (`netsh int ipv4 ...`).
    pub fn as_str(self) -> &'static str {
        match self {
            IpVersion::Ipv4 => "ipv4",
            IpVersion::Ipv6 => "ipv6",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum RegType {
    #[serde(rename = "REG_DWORD")]
    Dword,
    #[serde(rename = "REG_SZ")]
    Sz,
}

/// A host fact a check can read (`source: {fact: NAME}`), answered by the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fact {
    KernelVersion,
    Cpus,
    /// Usable memory: MemTotal, or the cgroup's memory.max when lower.
    MemBytes,
    NumaNodes,
    NicRxQueues,
    NicTxQueues,
    /// How many CPUs have served the NIC's interrupts (/proc/interrupts).
    NicIrqCpus,
    /// The NIC's receive interrupt coalescing (ethtool netlink), as text.
    NicCoalesce,
    /// 1 when /proc/sys is mounted read-write, 0 when read-only (a container).
    ProcSysWritable,
    /// Open handles of the `--pid` process (Windows: GetProcessHandleCount).
    ProcessHandles,
    // --- The `--pid` server's threads and sockets, and the ports one source address has ---
    /// Threads of the `--pid` process (the `Threads:` line of /proc/PID/status).
    PidThreads,
    /// Open descriptors of the `--pid` process that are sockets (/proc/PID/fd).
    PidSockets,
    /// Source ports one local address can use towards one destination address and port:
    /// net.ipv4.ip_local_port_range's ports less those ip_local_reserved_ports keeps out.
    LocalPortCount,
    // Containers, Kubernetes nodes and deploys: the server's cgroup and its listeners.
    /// pids.max of the server's cgroup (`--pid`'s, else this process's), the lowest of it
    /// and its parents; `max` is unlimited.
    CgroupPidsMax,
    /// memory.max of the server's cgroup v2 (`--pid`'s, else this process's), the lowest of
    /// it and its parents: what its socket buffers are charged to; `max` is unlimited.
    CgroupMemoryMax,
    /// net.ipv4.tcp_migrate_req where two listeners or more share an address and port (an
    /// SO_REUSEPORT group); missing where none do or the kernel lacks the setting.
    ReuseportMigrateReq,
}

impl Fact {
    /// The sysctl a fact is, where it is one read under a condition (tcp_migrate_req, only
    /// where listeners share a port): its fixes name that key, and its scope is the key's.
    pub fn sysctl(self) -> Option<&'static str> {
        match self {
            Fact::ReuseportMigrateReq => Some("net.ipv4.tcp_migrate_req"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    /// host is the boundary the catalog reads through: the catalog uses host's types (these,
    /// `HostInfo`, `Link`), and no file of host/ names the catalog, so the two never form a
    /// cycle again (`Fact` once lived in the catalog while host answered it).
    #[test]
    fn no_file_of_host_names_the_catalog() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/host");
        let mut stack = vec![root];
        // Spelled in two parts so this file does not name it either.
        let needle = ["crate", "::catalog"].concat();
        let mut bad = Vec::new();
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    if text.contains(&needle) {
                        bad.push(path.display().to_string());
                    }
                }
            }
        }
        assert!(bad.is_empty(), "{bad:#?}");
    }
}
