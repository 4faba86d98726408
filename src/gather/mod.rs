//! Read, once, every value the catalog needs: the host facts the pure evaluator and the pure
//! plan work on.
//!
//! Flow: Catalog + FactsRequest + Backend -> [`HostFacts`] (catalog/facts.rs). Every read goes
//! through the backend and ends as a [`Reading`]: a value, a meaningful absence, or a reason it
//! could not be read. No read error escapes as a Rust error: one unreadable file is one skipped
//! check, never a crash. The text formats are parsed by `host::procfs`; this module decides
//! only what to read for which check.
//!
//! This file: what each check's source reads, the host's own variables, and the second reading
//! after a watch. Beside it: `fact` (the host facts no single file holds) and `boot` (the
//! sysctl configuration the next boot applies).

mod boot;
mod fact;
#[cfg(test)]
mod tests;

pub use boot::{boot_entry, read_boot_config};
use fact::{cgroup_sock_bytes, fact};

use crate::catalog::facts::BootConfig;
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
