//! Read, once, every value the catalog needs: the host facts the pure evaluator and the pure
//! plan work on.
//!
//! Flow: Catalog + FactsRequest + Backend -> [`HostFacts`] (catalog/facts.rs). Every read goes
//! through the backend and ends as a [`Reading`]: a value, a meaningful absence, or a reason it
//! could not be read. No read error escapes as a Rust error: one unreadable file is one skipped
//! check, never a crash. The text formats are parsed by `host::procfs`; this module decides
//! only what to read for which check.

use crate::catalog::facts::{BootConfig, BootEntry, SYSCTL_CONF, SYSCTL_DIRS};
use crate::catalog::facts::{FactsRequest, HostFacts, Instance, Reading};
use crate::catalog::{
    Catalog, CheckDef, Compare, Each, Fact, LimitKind, Process, Resource, SoftirqField, Source,
    Target,
};
use crate::host::procfs::{self, paths, sysctl_path};
use crate::host::{owned, Backend, Link, Platform, ReadError};
use crate::value::Value;
use std::collections::BTreeMap;

impl From<Result<Value, ReadError>> for Reading {
    fn from(r: Result<Value, ReadError>) -> Reading {
        match r {
            Ok(v) => Reading::Value(v),
            Err(ReadError::NotFound(what)) => Reading::Missing(format!("{what} does not exist")),
            Err(e) => Reading::Unreadable(e.to_string()),
        }
    }
}

/// Each sysctl read once, whole: checks on different fields of one key (tcp_rmem's default and
/// max), target expressions over it and the plan all share the one reading.
#[derive(Default)]
struct Sysctls(BTreeMap<String, Reading>);

impl Sysctls {
    fn get(&mut self, backend: &dyn Backend, key: &str) -> Reading {
        self.0
            .entry(key.to_string())
            .or_insert_with(|| read_sysctl(backend, key))
            .clone()
    }
}

/// The host's own variables the catalog's targets use (`host.cpus`, `host.mem_bytes`, ...).
fn host_vars(backend: &dyn Backend, request: &FactsRequest) -> BTreeMap<String, Value> {
    let mut vars = BTreeMap::new();
    if let Reading::Value(v) = fact(backend, Fact::Cpus, None, None) {
        vars.insert("host.cpus".to_string(), v);
    }
    if let Reading::Value(v) = fact(backend, Fact::MemBytes, None, None) {
        vars.insert("host.mem_bytes".to_string(), v);
    }
    // Whether this process may raise its own hard fd limit (CAP_SYS_RESOURCE in CapEff, bit
    // 24): without it, root included, `serve --processes` is the way past the limit.
    if let Some(can) = backend
        .read(paths::SELF_STATUS)
        .ok()
        .and_then(|t| procfs::can_raise_nofile(&t))
    {
        vars.insert("host.can_raise_nofile".to_string(), Value::Num(can as i64));
    }
    vars.insert(
        "host.page_size".to_string(),
        Value::Num(backend.page_size() as i64),
    );
    // The `--pid` server's sockets, which its threads are judged against (linux.pid.io_model).
    if request.pid.is_some() {
        if let Reading::Value(v) = fact(backend, Fact::PidSockets, None, request.pid) {
            vars.insert("host.pid_sockets".to_string(), v);
        }
    }
    // The socket buffers charged to the server's cgroup now (memory.stat `sock`), for the
    // note of the check that weighs its memory.max.
    if let Some(sock) = cgroup_sock_bytes(backend, request.pid) {
        vars.insert("host.cgroup_sock_bytes".to_string(), Value::Num(sock));
    }
    vars
}

/// After the watch's interval: the rates read a second time (softirq spreads and shares
/// against their first reading, a no-growth check's second value).
fn read_after_watch(
    catalog: &Catalog,
    backend: &dyn Backend,
    request: &FactsRequest,
    instances: &mut [Instance],
) {
    for inst in instances.iter_mut() {
        let def = &catalog.checks[inst.check];
        if let (Source::Softirq(SoftirqField::NetRx), Reading::Value(Value::Text(before))) =
            (&def.check.source, &inst.reading)
        {
            inst.reading = match backend.read(paths::SOFTIRQS) {
                Ok(after) => match procfs::net_rx_spread(before, &after) {
                    Some((text, _)) => Reading::Value(Value::Text(text)),
                    None => Reading::Value(Value::Text(
                        "no receive softirqs ran during the watch".into(),
                    )),
                },
                Err(e) => Err(e).into(),
            };
            continue;
        }
        if let (Source::Softirq(_), Reading::Value(Value::Text(before))) =
            (&def.check.source, &inst.reading)
        {
            inst.reading = match backend.read(paths::STAT) {
                Ok(after) => match procfs::softirq_shares(before, &after) {
                    Some(shares) => Reading::Value(Value::Text(shares)),
                    None => Reading::Unreadable(format!(
                        "{} showed no CPU time passing during the watch",
                        paths::STAT
                    )),
                },
                Err(e) => Err(e).into(),
            };
            continue;
        }
        if def.check.compare == Compare::NoGrowth {
            // A second reading, never the cached first one.
            let mut fresh = Sysctls::default();
            inst.after = Some(read_source(
                backend,
                def,
                inst.nic.as_ref(),
                request,
                &mut fresh,
            ));
        }
    }
}

/// Read everything `catalog` needs from `backend`. Sleeps for `--watch` when asked.
pub fn gather(catalog: &Catalog, backend: &dyn Backend, request: &FactsRequest) -> HostFacts {
    let mut vars = host_vars(backend, request);
    let mut sysctls = Sysctls::default();
    for def in &catalog.checks {
        if let Some(Target::Expr(e)) = &def.target {
            let mut names = Vec::new();
            e.vars(&mut names);
            for name in names.into_iter().filter(|n| n.starts_with("sysctl.")) {
                if let Reading::Value(v) = sysctls.get(backend, &name["sysctl.".len()..]) {
                    vars.insert(name, v);
                }
            }
        }
    }
    // The boot configuration is read once, whole, when a check looks at it.
    let boot = if catalog
        .checks
        .iter()
        .any(|d| d.has_boot_view() || matches!(d.check.source, Source::BootEntry(_)))
    {
        read_boot_config(backend)
    } else {
        BootConfig::default()
    };

    let (nics, no_nics) = match backend.links() {
        Ok(links) => {
            let physical: Vec<Link> = links.into_iter().filter(|l| l.physical).collect();
            let why = physical.is_empty().then(|| "no physical NIC is visible here (a container or network namespace sees only virtual links)".to_string());
            (physical, why)
        }
        Err(e) => (Vec::new(), Some(format!("cannot list network links: {e}"))),
    };

    let mut instances = Vec::new();
    for (i, def) in catalog.checks.iter().enumerate() {
        let targets: Vec<Option<&Link>> = match def.check.each {
            Some(Each::Nic) => nics.iter().map(Some).collect(),
            None => vec![None],
        };
        for nic in targets {
            let (reading, entry) = match &def.check.source {
                // The entry itself is the value; the report shows it as `FILE:LINE = VALUE`.
                Source::BootEntry(key) => {
                    let entry = boot.entry(key);
                    (
                        entry.clone().map(|e| Value::Text(e.to_string())),
                        Some(entry),
                    )
                }
                _ => (read_source(backend, def, nic, request, &mut sysctls), None),
            };
            // A fix for one field of a multi-value sysctl (tcp_rmem's default) must restate the
            // other fields as they are, so the whole value is kept as `sysctl.KEY` too.
            if let (Source::Sysctl(key), Some(_)) = (&def.check.source, def.check.field) {
                let name = format!("sysctl.{key}");
                if let (std::collections::btree_map::Entry::Vacant(slot), Reading::Value(v)) =
                    (vars.entry(name), sysctls.get(backend, key))
                {
                    slot.insert(v);
                }
            }
            let defaulted = matches!(&def.check.source, Source::Registry(_))
                && def.default.is_some()
                && is_absent(backend, def, nic);
            let boot_view = def.has_boot_view().then(|| match &def.check.source {
                Source::Sysctl(key) => boot.entry(key),
                _ => unreachable!("boot views exist for sysctls only"),
            });
            instances.push(Instance {
                check: i,
                nic: nic.cloned(),
                reading,
                after: None,
                boot: boot_view.or(entry),
                defaulted,
            });
        }
    }

    if let Some(wait) = request.watch {
        std::thread::sleep(wait);
        read_after_watch(catalog, backend, request, &mut instances);
    }

    // Without a watch a softirq share has no interval: say so rather than show the raw file.
    for inst in &mut instances {
        let def = &catalog.checks[inst.check];
        if matches!(def.check.source, Source::Softirq(_)) && request.watch.is_none() {
            inst.reading =
                Reading::Missing("a share of time needs an interval: --watch SECS".into());
        }
    }

    let owned = match catalog.platform {
        Platform::Linux => read_owned(backend, request),
        Platform::Windows => BTreeMap::new(),
    };
    // Each NIC's own target variables, read only when a check's target uses them.
    let uses_nic_vars = catalog.checks.iter().any(|d| {
        let mut names = Vec::new();
        if let Some(Target::Expr(e)) = &d.target {
            e.vars(&mut names);
        }
        names
            .iter()
            .any(|n| crate::catalog::NIC_VARS.contains(&n.as_str()))
    });
    let nic_vars = if uses_nic_vars {
        nics.iter()
            .map(|l| (l.name.clone(), crate::nic::nic_vars(backend, &l.name)))
            .collect()
    } else {
        BTreeMap::new()
    };
    HostFacts {
        info: backend.describe(),
        vars,
        nic_vars,
        instances,
        sysctls: sysctls.0,
        boot,
        owned,
        no_nics,
        watched: request.watch,
        request: request.clone(),
    }
}

/// The files wstune owns, as they are now (absent ones left out).
fn read_owned(backend: &dyn Backend, request: &FactsRequest) -> BTreeMap<String, String> {
    let mut paths = vec![
        owned::SYSCTL_FILE.to_string(),
        owned::LIMITS_FILE.to_string(),
    ];
    paths.extend(request.unit.as_deref().map(owned::unit_dropin));
    paths
        .into_iter()
        .filter_map(|p| backend.read(&p).ok().map(|t| (p, t)))
        .collect()
}

fn read_source(
    backend: &dyn Backend,
    def: &CheckDef,
    nic: Option<&Link>,
    request: &FactsRequest,
    sysctls: &mut Sysctls,
) -> Reading {
    let reading = match &def.check.source {
        Source::Sysctl(key) => sysctls.get(backend, key),
        Source::Rlimit(r) => {
            let pid = match r.process {
                Process::Current => "self".to_string(),
                Process::Pid => match request.pid {
                    Some(p) => p.to_string(),
                    None => return Reading::Unreadable("needs --pid".into()),
                },
            };
            read_rlimit(backend, &pid, r.resource, r.limit)
        }
        Source::Systemd(prop) => match &request.unit {
            Some(unit) => backend
                .systemd_property(unit, prop)
                .map(|v| systemd_value(&v))
                .into(),
            None => Reading::Unreadable("needs --unit".into()),
        },
        Source::File(path) => {
            let path = substitute_nic(path, nic);
            backend.read(&path).map(|t| Value::parse_kernel(&t)).into()
        }
        Source::Netstat(name) => read_netstat(backend, name),
        Source::Sockstat(name) => read_sockstat(backend, name),
        // The first reading; the share is computed once the watch has waited (see `gather`).
        Source::Softirq(SoftirqField::NetRx) => {
            backend.read(paths::SOFTIRQS).map(Value::Text).into()
        }
        Source::Softirq(_) => backend.read(paths::STAT).map(Value::Text).into(),
        Source::Softnet(field) => match backend.read(paths::SOFTNET_STAT) {
            Ok(text) => match procfs::softnet_sum(&text, field.column()) {
                Some(v) => Reading::Value(Value::Num(v)),
                None => Reading::Unreadable(format!(
                    "{} has no column {} on every row",
                    paths::SOFTNET_STAT,
                    field.column()
                )),
            },
            Err(e) => Err(e).into(),
        },
        Source::ConntrackStat(column) => match backend.read(paths::CONNTRACK_STAT) {
            Ok(text) => match procfs::conntrack_stat_sum(&text, column) {
                Some(v) => Reading::Value(Value::Num(v)),
                None => Reading::Unreadable(format!(
                    "{} has no column {column} (an older kernel counts it elsewhere)",
                    paths::CONNTRACK_STAT
                )),
            },
            Err(e) => Err(e).into(),
        },
        Source::Fact(f) => fact(backend, *f, nic, request.pid),
        Source::BootEntry(key) => read_boot_config(backend)
            .entry(key)
            .map(|e| Value::Text(e.to_string())),
        Source::Registry(r) => {
            let key = registry_key(&r.key, nic);
            let raw = match backend.registry(&key, &r.value, r.kind) {
                Ok(raw) => Ok(raw),
                // An absent value means Windows uses its built-in default.
                Err(ReadError::NotFound(_)) if def.default.is_some() => {
                    Ok(def.default.as_ref().unwrap().to_string())
                }
                Err(e) => Err(e),
            };
            raw.map(|raw| match r.names.get(raw.trim()) {
                Some(name) => Value::Text(name.clone()),
                None => Value::parse_kernel(&raw),
            })
            .into()
        }
        // `[first, last]`, the shape `covers` compares (as Linux's ip_local_port_range).
        Source::DynamicPorts(ip) => backend
            .dynamic_ports(*ip)
            .map(|r| Value::List(vec![r.start as i64, r.last() as i64]))
            .into(),
        Source::DynamicPortCount(ip) => backend
            .dynamic_ports(*ip)
            .map(|r| Value::Num(r.count as i64))
            .into(),
        Source::NicStat(name) => {
            let Some(link) = nic else {
                return Reading::Unreadable("needs a NIC".into());
            };
            match backend.nic_stats(&link.name) {
                Ok(stats) => match stats.iter().find(|(k, _)| k == name) {
                    Some((_, v)) => Reading::Value(Value::Num((*v).min(i64::MAX as u64) as i64)),
                    None => Reading::Missing(format!(
                        "{}'s driver has no {name} counter (ethtool -S)",
                        link.name
                    )),
                },
                Err(ReadError::Unsupported(why)) => Reading::Missing(why),
                Err(e) => Err(e).into(),
            }
        }
    };
    match (reading, def.check.field) {
        (Reading::Value(Value::List(v)), Some(i)) => match v.get(i) {
            Some(n) => Reading::Value(Value::Num(*n)),
            None => Reading::Unreadable(format!("has {} values, no field {i}", v.len())),
        },
        (r, _) => r,
    }
}

/// Whether a registry check's value is absent (so its default applies).
fn is_absent(backend: &dyn Backend, def: &CheckDef, nic: Option<&Link>) -> bool {
    match &def.check.source {
        Source::Registry(r) => matches!(
            backend.registry(&registry_key(&r.key, nic), &r.value, r.kind),
            Err(ReadError::NotFound(_))
        ),
        _ => false,
    }
}

fn registry_key(template: &str, nic: Option<&Link>) -> String {
    template.replace(
        "{nic_key}",
        nic.and_then(|n| n.registry_key.as_deref()).unwrap_or(""),
    )
}

fn substitute_nic(text: &str, nic: Option<&Link>) -> String {
    match nic {
        Some(n) => text.replace("{nic}", &n.name),
        None => text.to_string(),
    }
}

fn read_sysctl(backend: &dyn Backend, key: &str) -> Reading {
    backend
        .read(&sysctl_path(key))
        .map(|t| Value::parse_kernel(&t))
        .into()
}

/// systemd prints `infinity` for no limit.
fn systemd_value(v: &str) -> Value {
    match v.trim() {
        "infinity" => Value::Num(i64::MAX),
        other => Value::parse_kernel(other),
    }
}

fn read_rlimit(backend: &dyn Backend, pid: &str, resource: Resource, which: LimitKind) -> Reading {
    let path = paths::limits(pid);
    let text = match backend.read(&path) {
        Ok(t) => t,
        Err(e) => return Err(e).into(),
    };
    let line = resource.limits_line();
    match procfs::limit_pair(&text, line) {
        Some((soft, hard)) => {
            let v = match which {
                LimitKind::Soft => soft,
                LimitKind::Hard => hard,
            };
            // Unlimited (u64::MAX) and anything past i64 is "no limit", i64::MAX.
            Reading::Value(Value::Num(v.min(i64::MAX as u64) as i64))
        }
        // procfs's own message for a malformed file is an "internal error, please report this
        // procfs bug"; the problem is the file, and that is what the note says.
        None => Reading::Unreadable(format!(
            "{path}: no readable \"{line}\" line; it is not in /proc/PID/limits format"
        )),
    }
}

/// (soft, hard) RLIMIT_NOFILE of a process; unlimited as u64::MAX.
pub fn nofile_of(backend: &dyn Backend, pid: u32) -> Option<(u64, u64)> {
    procfs::nofile_limits(&backend.read(&paths::limits(pid)).ok()?)
}

/// `Group.Name` from /proc/net/netstat, then /proc/net/snmp (same two-line format).
fn read_netstat(backend: &dyn Backend, name: &str) -> Reading {
    let Some((group, field)) = name.split_once('.') else {
        return Reading::Unreadable(format!("'{name}' is not Group.Name"));
    };
    let mut last_err = None;
    for path in [paths::NETSTAT, paths::SNMP] {
        match backend.read(path) {
            Ok(text) => {
                if let Some(v) = procfs::header_values(&text, group, field) {
                    return Reading::Value(Value::Num(v));
                }
            }
            Err(e) => last_err = Some(e),
        }
    }
    match last_err {
        Some(e @ (ReadError::Denied(_) | ReadError::Other(_) | ReadError::Unsupported(_))) => {
            Reading::Unreadable(e.to_string())
        }
        _ => Reading::Missing(format!("this kernel has no {name} counter")),
    }
}

fn read_sockstat(backend: &dyn Backend, name: &str) -> Reading {
    let Some((proto, field)) = name.split_once('.') else {
        return Reading::Unreadable(format!("'{name}' is not PROTO.field"));
    };
    match backend.read(paths::SOCKSTAT) {
        Ok(text) => match procfs::sockstat(&text, proto, field) {
            Some(v) => Reading::Value(Value::Num(v)),
            None => Reading::Missing(format!("{} has no {name}", paths::SOCKSTAT)),
        },
        Err(e) => Err(e).into(),
    }
}

/// A host fact: from the backend's own source when it has one (Windows' API, a registry.yaml
/// tree's `host:` section), else from /proc and /sys.
fn fact(backend: &dyn Backend, f: Fact, nic: Option<&Link>, pid: Option<u32>) -> Reading {
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
fn read_container_fact(backend: &dyn Backend, fact: Fact, pid: Option<u32>) -> Reading {
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
fn cgroup_sock_bytes(backend: &dyn Backend, pid: Option<u32>) -> Option<i64> {
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
fn reuseport_migrate_req(backend: &dyn Backend) -> Reading {
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
fn mem_bytes(backend: &dyn Backend) -> Reading {
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

/// The boot-time sysctl configuration in the order `sysctl --system` applies it
/// ([`SYSCTL_DIRS`]: `*.conf` by name, the earlier directory winning a name; /etc/sysctl.conf
/// last), each file read once.
pub fn read_boot_config(backend: &dyn Backend) -> BootConfig {
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut any = false;
    for dir in SYSCTL_DIRS {
        let Ok(entries) = backend.list(dir) else {
            continue;
        };
        any = true;
        for name in entries.into_iter().filter(|n| n.ends_with(".conf")) {
            names
                .entry(name.clone())
                .or_insert_with(|| format!("{dir}/{name}"));
        }
    }
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let listed = names.len();
    for (i, path) in names
        .into_values()
        .chain([SYSCTL_CONF.to_string()])
        .enumerate()
    {
        match backend.read(&path) {
            Ok(text) => {
                any |= path == SYSCTL_CONF;
                files.push((path, text));
            }
            // /etc/sysctl.conf is optional; a listed file that cannot be read (not UTF-8, a
            // link loop, no permission) is named: what it sets at boot is unknown.
            Err(ReadError::NotFound(_)) if i == listed => {}
            Err(e) => skipped.push((path, e.to_string())),
        }
    }
    BootConfig {
        files,
        any,
        skipped,
    }
}

/// The entry that sets `key` at the next boot (a single lookup; `gather` reads the whole
/// configuration once instead).
pub fn boot_entry(backend: &dyn Backend, key: &str) -> Reading<BootEntry> {
    read_boot_config(backend).entry(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::memory::MemoryBackend;

    fn entry(file: &str, line: usize, value: &str) -> Reading<BootEntry> {
        Reading::Value(BootEntry {
            file: file.into(),
            line,
            value: value.into(),
        })
    }

    #[test]
    fn boot_order_follows_sysctl_system() {
        // 10-a in /usr/lib is masked by /etc's 10-a; 99 sorts last; sysctl.conf comes after all.
        let b = MemoryBackend::default()
            .file("/usr/lib/sysctl.d/10-a.conf", "net.core.somaxconn = 1\n")
            .file("/etc/sysctl.d/10-a.conf", "net.core.somaxconn = 2\n")
            .file(
                "/usr/lib/sysctl.d/50-b.conf",
                "net.core.somaxconn = 3\nfs.nr_open = 5\n",
            )
            .file("/etc/sysctl.conf", "fs.nr_open = 6\n");
        assert_eq!(
            boot_entry(&b, "net.core.somaxconn"),
            entry("/usr/lib/sysctl.d/50-b.conf", 1, "3")
        );
        assert_eq!(
            boot_entry(&b, "fs.nr_open"),
            entry("/etc/sysctl.conf", 1, "6")
        );
        let b = b.file("/run/sysctl.d/60-c.conf", "net.core.somaxconn = 4\n");
        assert_eq!(
            boot_entry(&b, "net.core.somaxconn"),
            entry("/run/sysctl.d/60-c.conf", 1, "4")
        );
        assert!(matches!(boot_entry(&b, "fs.file-max"), Reading::Missing(_)));
        assert!(matches!(
            boot_entry(&MemoryBackend::default(), "fs.file-max"),
            Reading::Unreadable(_)
        ));
    }

    #[test]
    fn cgroup_limit_caps_memory() {
        let meminfo = std::fs::read_to_string("tests/fixtures/default/proc/meminfo").unwrap();
        let b = MemoryBackend::default().file("/proc/meminfo", &meminfo);
        let Reading::Value(Value::Num(total)) = mem_bytes(&b) else {
            panic!()
        };
        let b = b
            .file("/proc/self/cgroup", "0::/box\n")
            .file("/sys/fs/cgroup/box/memory.max", "1073741824\n");
        assert_eq!(mem_bytes(&b), Reading::Value(Value::Num(1 << 30)));
        assert!(total > 1 << 30);
    }

    /// The server's cgroup limits are the lowest of its cgroup and its parents; cgroup v1
    /// keeps socket buffers out of its memory limit; a listener group needs two listeners.
    #[test]
    fn container_facts_follow_the_hierarchy_and_say_what_is_missing() {
        let b = MemoryBackend::default()
            .file("/proc/7/cgroup", "0::/pod/ctr\n")
            .file("/sys/fs/cgroup/pod/pids.max", "1024\n")
            .file("/sys/fs/cgroup/pod/ctr/pids.max", "max\n")
            .file("/sys/fs/cgroup/pod/ctr/memory.max", "max\n")
            .file("/sys/fs/cgroup/pod/ctr/memory.stat", "anon 1\nsock 4096\n");
        let fact = |f, pid| read_container_fact(&b, f, pid);
        assert_eq!(
            fact(Fact::CgroupPidsMax, Some(7)),
            Reading::Value(Value::Num(1024))
        );
        assert_eq!(
            fact(Fact::CgroupMemoryMax, Some(7)),
            Reading::Value(Value::Num(i64::MAX))
        );
        assert_eq!(cgroup_sock_bytes(&b, Some(7)), Some(4096));
        assert!(matches!(
            fact(Fact::CgroupPidsMax, None),
            Reading::Missing(_)
        ));
        let v1 = MemoryBackend::default().file("/proc/self/cgroup", "4:memory:/box\n");
        assert!(matches!(
            read_container_fact(&v1, Fact::CgroupMemoryMax, None),
            Reading::Unreadable(_)
        ));

        let listener = |inode: u32| {
            format!("   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n")
        };
        let head = "  sl  local_address rem_address   st\n";
        let one = MemoryBackend::default()
            .file("/proc/sys/net/ipv4/tcp_migrate_req", "0\n")
            .file("/proc/net/tcp", &format!("{head}{}", listener(1)));
        assert!(
            matches!(reuseport_migrate_req(&one), Reading::Missing(m) if m.contains("SO_REUSEPORT"))
        );
        let two = one.file(
            "/proc/net/tcp",
            &format!("{head}{}{}", listener(1), listener(2)),
        );
        assert_eq!(reuseport_migrate_req(&two), Reading::Value(Value::Num(0)));
        let old = MemoryBackend::default().file(
            "/proc/net/tcp",
            &format!("{head}{}{}", listener(1), listener(2)),
        );
        assert!(matches!(reuseport_migrate_req(&old), Reading::Missing(m) if m.contains("5.14")));
    }

    #[test]
    fn each_sysctl_is_read_once_and_kept_whole() {
        let known = crate::profile::load("100k")
            .unwrap()
            .profile
            .variables()
            .into_keys()
            .collect();
        let catalog = crate::catalog::load(Platform::Linux, None, &known).unwrap();
        let b = MemoryBackend::default()
            .file("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
            .file("/etc/sysctl.d/60-wstune.conf", "fs.nr_open = 1\n");
        let facts = gather(&catalog, &b, &FactsRequest::default());
        assert_eq!(
            facts.sysctls["net.ipv4.tcp_rmem"],
            Reading::Value(Value::List(vec![4096, 131072, 6291456]))
        );
        assert_eq!(
            facts.owned.get(owned::SYSCTL_FILE).map(String::as_str),
            Some("fs.nr_open = 1\n")
        );
        assert!(facts.boot.any);
    }
}
