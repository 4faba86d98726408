//! A host fact (`Source::Fact`): the values no single sysctl or limit holds, each read or
//! derived from /proc, /sys and the cgroup files (the CPUs, memory under a cgroup's cap, a
//! NIC's interrupts, a container's limits), unless the backend has a source of its own.

use super::read_sysctl;
use crate::catalog::facts::Reading;
use crate::catalog::Fact;
use crate::host::procfs::{self, paths, sysctl_path};
use crate::host::{Backend, Link, ReadError};
use crate::value::Value;

/// A host fact: from the backend's own source when it has one (Windows' API, a registry.yaml
/// tree's `host:` section), else from /proc and /sys.
pub(super) fn fact(
    backend: &dyn Backend,
    f: Fact,
    nic: Option<&Link>,
    pid: Option<u32>,
) -> Reading {
    match backend.host_fact(f, pid) {
        Some(r) => r.map(Value::Num).into(),
        None => read_fact(backend, f, nic, pid),
    }
}

fn read_fact(backend: &dyn Backend, fact: Fact, nic: Option<&Link>, pid: Option<u32>) -> Reading {
    match fact {
        Fact::PidThreads => {
            let Some(pid) = pid else {
                return Reading::Unreadable("needs --pid".into());
            };
            let path = format!("{}/status", paths::process(pid));
            match backend.read(&path) {
                Ok(t) => match procfs::status_threads(&t) {
                    Some(n) => Reading::Value(Value::Num(n)),
                    None => Reading::Unreadable(format!("{path}: no readable Threads: line")),
                },
                Err(e) => Err(e).into(),
            }
        }
        Fact::PidSockets => {
            let Some(pid) = pid else {
                return Reading::Unreadable("needs --pid".into());
            };
            match backend.process_fds(pid) {
                Ok((_, sockets)) => Reading::Value(Value::Num(sockets.len() as i64)),
                Err(e) => Err(e).into(),
            }
        }
        Fact::LocalPortCount => local_port_count(backend),
        Fact::CgroupPidsMax | Fact::CgroupMemoryMax | Fact::ReuseportMigrateReq => {
            read_container_fact(backend, fact, pid)
        }
        Fact::ProcessHandles => Reading::Unreadable(
            "the handle count of a process is a Windows fact (Linux: see the nofile checks)".into(),
        ),
        Fact::KernelVersion => backend
            .read(paths::OSRELEASE)
            .map(|t| Value::Text(t.trim().to_string()))
            .into(),
        Fact::Cpus => match backend.read(paths::CPUS_ONLINE) {
            Ok(t) => match procfs::count_cpu_list(&t) {
                Some(n) => Reading::Value(Value::Num(n)),
                None => Reading::Unreadable(format!(
                    "cannot parse /sys/devices/system/cpu/online: '{}'",
                    t.trim()
                )),
            },
            Err(_) => backend
                .read(paths::CPUINFO)
                .map(|t| Value::Num(procfs::cpuinfo_processors(&t)))
                .into(),
        },
        Fact::MemBytes => mem_bytes(backend),
        Fact::NumaNodes => backend
            .list(paths::NUMA_NODES)
            .map(|names| {
                Value::Num(
                    names
                        .iter()
                        .filter(|n| {
                            n.strip_prefix("node").is_some_and(|d| {
                                !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
                            })
                        })
                        .count() as i64,
                )
            })
            .into(),
        Fact::NicRxQueues | Fact::NicTxQueues => {
            let Some(link) = nic else {
                return Reading::Unreadable("needs a NIC".into());
            };
            let q = if fact == Fact::NicRxQueues {
                link.rx_queues
            } else {
                link.tx_queues
            };
            match q {
                Some(n) => Reading::Value(Value::Num(n as i64)),
                None => Reading::Missing(format!("{} reports no queues", link.name)),
            }
        }
        Fact::ProcSysWritable => match backend.read(paths::SELF_MOUNTINFO) {
            Ok(text) => Reading::Value(Value::Num(procfs::proc_sys_writable(&text) as i64)),
            Err(e) => Err(e).into(),
        },
        Fact::NicIrqCpus => {
            let Some(link) = nic else {
                return Reading::Unreadable("needs a NIC".into());
            };
            nic_irq_cpus(backend, &link.name)
        }
        Fact::NicCoalesce => {
            let Some(link) = nic else {
                return Reading::Unreadable("needs a NIC".into());
            };
            match backend.coalesce(&link.name) {
                Ok(c) => Reading::Value(Value::Text(c.to_string())),
                Err(crate::host::ReadError::Unsupported(why)) => Reading::Missing(why),
                Err(e) => Err(e).into(),
            }
        }
    }
}

/// The source ports one local address has towards one destination: the ephemeral range less
/// the reserved ports inside it (ip-sysctl.rst: ip_local_reserved_ports).
fn local_port_count(backend: &dyn Backend) -> Reading {
    let (first, last) = match backend.ephemeral_ports() {
        Ok(r) => r,
        Err(e) => return Err(e).into(),
    };
    let reserved = backend
        .read(&sysctl_path("net.ipv4.ip_local_reserved_ports"))
        .unwrap_or_default();
    match procfs::ports_free(first as u32, last as u32, reserved.trim()) {
        Some(n) => Reading::Value(Value::Num(n)),
        None => Reading::Unreadable(format!(
            "net.ipv4.ip_local_reserved_ports: not a port list: {}",
            reserved.trim()
        )),
    }
}

/// The cgroup file of the server: `--pid`'s, else this process's (a server started from this
/// shell, or in this container, shares it).
fn cgroup_file(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("{}/cgroup", paths::process(p)),
        None => paths::SELF_CGROUP.to_string(),
    }
}

/// The facts of containers, Kubernetes nodes and deploys: the server's cgroup limits and
/// whether its host runs SO_REUSEPORT listeners.
pub(super) fn read_container_fact(backend: &dyn Backend, fact: Fact, pid: Option<u32>) -> Reading {
    use crate::host::containers::{self, CgroupVersion};
    let (file, controller) = match fact {
        Fact::CgroupPidsMax => ("pids.max", "pids"),
        Fact::CgroupMemoryMax => ("memory.max", "memory"),
        _ => return reuseport_migrate_req(backend),
    };
    let path = cgroup_file(pid);
    let text = match backend.read(&path) {
        Ok(t) => t,
        Err(ReadError::NotFound(_)) => {
            return Reading::Missing(format!("{path} does not exist: no cgroup to limit it"))
        }
        Err(e) => return Err(e).into(),
    };
    let (dirs, version) = containers::cgroup_dirs(&text, controller);
    match (version, fact) {
        (CgroupVersion::None, _) => {
            return Reading::Missing(format!(
                "{path} names no cgroup with the {controller} controller: nothing limits it"
            ))
        }
        // cgroup v1 keeps socket buffers out of memory.limit_in_bytes (they are charged to
        // memory.kmem.tcp.* only, when that is set).
        (CgroupVersion::V1, Fact::CgroupMemoryMax) => {
            return Reading::Unreadable(format!(
                "{path}: a cgroup v1 hierarchy, which charges socket buffers to memory.kmem.tcp.limit_in_bytes rather than to the memory limit; see linux.host.memory for the limit itself"
            ))
        }
        _ => {}
    }
    let mut lowest: Option<i64> = None;
    for dir in &dirs {
        let p = format!("{dir}/{file}");
        match backend.read(&p) {
            Ok(t) => match containers::limit(&t) {
                Some(v) => lowest = Some(lowest.map_or(v, |l| l.min(v))),
                None => {
                    return Reading::Unreadable(format!(
                        "{p}: '{}' is neither a number nor max",
                        t.trim()
                    ))
                }
            },
            Err(ReadError::NotFound(_)) => {}
            Err(e) => return Err(e).into(),
        }
    }
    match lowest {
        Some(v) => Reading::Value(Value::Num(v)),
        None => Reading::Missing(format!(
            "no {file} in {} or above: the {controller} controller limits nothing there",
            dirs.first().map_or(containers::CGROUP_ROOT, String::as_str)
        )),
    }
}

/// memory.stat's `sock` of the server's cgroup v2: the socket buffers charged to it now.
pub(super) fn cgroup_sock_bytes(backend: &dyn Backend, pid: Option<u32>) -> Option<i64> {
    use crate::host::containers;
    let text = backend.read(&cgroup_file(pid)).ok()?;
    let (dirs, version) = containers::cgroup_dirs(&text, "memory");
    if version != containers::CgroupVersion::V2 {
        return None;
    }
    let stat = backend
        .read(&format!("{}/memory.stat", dirs.first()?))
        .ok()?;
    containers::flat_key(&stat, "sock")
}

/// net.ipv4.tcp_migrate_req, where it matters: on a host (network namespace) with two
/// listeners or more on one address and port. The socket table comes from sock_diag on the
/// live host (its listening hash only, cheap at any connection count), else from
/// /proc/net/tcp and tcp6, which a captured tree can hold.
pub(super) fn reuseport_migrate_req(backend: &dyn Backend) -> Reading {
    use crate::host::containers;
    use crate::host::sockets::{TcpState, Which};
    let key = "net.ipv4.tcp_migrate_req";
    let value = match read_sysctl(backend, key) {
        Reading::Missing(_) => {
            return Reading::Missing(format!(
                "this kernel has no {key} (Linux 5.14 added it): a listener that closes resets the connections queued on it; restart such servers one listener at a time, after the others accept"
            ))
        }
        other => other,
    };
    let mut counts = std::collections::BTreeMap::new();
    let live = backend.tcp_sockets(Which::Listeners, &mut |s| {
        if s.state == TcpState::Listen {
            *counts.entry(s.local.to_string()).or_default() += 1;
        }
    });
    match live {
        Ok(()) => {}
        Err(ReadError::Unsupported(_)) => {
            let mut any = None;
            for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
                match backend.read(path) {
                    Ok(t) => {
                        containers::count_listeners(&t, &mut counts);
                        any = Some(Ok(()));
                    }
                    Err(e) => {
                        any.get_or_insert(Err(e));
                    }
                }
            }
            if let Some(Err(e)) = any {
                return Reading::Unreadable(format!(
                    "cannot see this host's listening sockets to find SO_REUSEPORT groups: {e}"
                ));
            }
        }
        Err(e) => {
            return Reading::Unreadable(format!(
                "cannot see this host's listening sockets to find SO_REUSEPORT groups: {e}"
            ))
        }
    }
    if containers::shared(&counts) == 0 {
        return Reading::Missing(
            "no two listening sockets share an address and port here (no SO_REUSEPORT group in this network namespace): restarting a listener drops no other's connections".into(),
        );
    }
    value
}

/// MemTotal, or the cgroup memory limit of this process when it is lower (a container).
pub(super) fn mem_bytes(backend: &dyn Backend) -> Reading {
    let text = match backend.read(paths::MEMINFO) {
        Ok(t) => t,
        Err(e) => return Err(e).into(),
    };
    let Some(total) = procfs::mem_total(&text) else {
        return Reading::Unreadable(format!(
            "{0}: no readable MemTotal line; it is not in {0} format",
            paths::MEMINFO
        ));
    };
    let cgroup = backend.read(paths::SELF_CGROUP).ok().and_then(|t| {
        procfs::cgroup_memory_files(&t)
            .iter()
            .filter_map(|p| procfs::cgroup_limit(&backend.read(p).ok()?))
            .min()
    });
    let bytes = cgroup.map_or(total, |c| c.min(total));
    Reading::Value(Value::Num(bytes.min(i64::MAX as u64) as i64))
}

/// How many CPUs have served the NIC's interrupts. The IRQ numbers come from the PCI device's
/// msi_irqs directory when there is one (driver naming in /proc/interrupts varies), else from
/// /proc/interrupts lines that name the NIC.
fn nic_irq_cpus(backend: &dyn Backend, nic: &str) -> Reading {
    let text = match backend.read(paths::INTERRUPTS) {
        Ok(t) => t,
        Err(e) => return Err(e).into(),
    };
    let irqs: Vec<String> = backend
        .list(&format!("/sys/class/net/{nic}/device/msi_irqs"))
        .unwrap_or_default();
    match procfs::count_irq_cpus(&text, nic, &irqs) {
        Some(n) => Reading::Value(Value::Num(n)),
        None => Reading::Missing(format!("no interrupt of {nic} in /proc/interrupts")),
    }
}
