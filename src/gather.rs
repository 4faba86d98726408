//! Read, once, every value the catalog needs: the host snapshot the pure evaluator works on.
//!
//! Flow: Catalog + Options + Backend -> [`HostFacts`]. Every read goes through the backend and
//! ends as a [`Reading`]: a value, a meaningful absence, or a reason it could not be read. No
//! read error escapes as a Rust error: one unreadable file is one skipped check, never a crash.

use crate::catalog::{Catalog, CheckDef, Compare, Each, Fact, LimitKind, Process, Source, Target};
use crate::host::{Backend, HostInfo, Link, ReadError};
use crate::value::Value;
use procfs_core::FromRead;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the user asked for beyond the profile.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub pid: Option<u32>,
    pub unit: Option<String>,
    /// Re-read cumulative counters after this long and judge their growth.
    pub watch: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    Value(Value),
    /// The thing does not exist (module not loaded, key removed from the kernel).
    Missing(String),
    /// It exists but could not be read (permissions, format, unsupported here).
    Unreadable(String),
}

impl From<Result<Value, ReadError>> for Reading {
    fn from(r: Result<Value, ReadError>) -> Reading {
        match r {
            Ok(v) => Reading::Value(v),
            Err(ReadError::NotFound(what)) => Reading::Missing(format!("{what} does not exist")),
            Err(e) => Reading::Unreadable(e.to_string()),
        }
    }
}

/// One check applied to one object (the host, or one NIC).
#[derive(Debug, Clone)]
pub struct Instance {
    /// Index into the catalog's checks.
    pub check: usize,
    pub nic: Option<Link>,
    pub reading: Reading,
    /// The second reading of a counter after `--watch`.
    pub after: Option<Reading>,
    /// The boot-time configuration entry for a sysctl check.
    pub boot: Option<Reading>,
    /// The value was absent and the check's documented default stands in for it.
    pub defaulted: bool,
}

#[derive(Debug, Clone)]
pub struct HostFacts {
    pub info: HostInfo,
    /// `host.*` and `sysctl.*` variables for target expressions; absent when unreadable.
    pub vars: BTreeMap<String, Value>,
    pub instances: Vec<Instance>,
    /// Why per-NIC checks have no instance, when there is no NIC to check.
    pub no_nics: Option<String>,
    pub watched: Option<Duration>,
    pub options: Options,
}

/// Read everything `catalog` needs from `backend`. Sleeps for `--watch` when asked.
pub fn gather(catalog: &Catalog, backend: &dyn Backend, options: &Options) -> HostFacts {
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
        .read("/proc/self/status")
        .ok()
        .and_then(|t| can_raise_nofile(&t))
    {
        vars.insert("host.can_raise_nofile".to_string(), Value::Num(can as i64));
    }
    vars.insert(
        "host.page_size".to_string(),
        Value::Num(backend.page_size() as i64),
    );
    for def in &catalog.checks {
        if let Some(Target::Expr(e)) = &def.target {
            let mut names = Vec::new();
            e.vars(&mut names);
            for name in names.into_iter().filter(|n| n.starts_with("sysctl.")) {
                if let Reading::Value(v) = read_sysctl(backend, &name["sysctl.".len()..]) {
                    vars.insert(name, v);
                }
            }
        }
    }

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
            let reading = read_source(backend, def, nic, options);
            // A fix for one field of a multi-value sysctl (tcp_rmem's default) must restate the
            // other fields as they are, so the whole value is kept as `sysctl.KEY` too.
            if let (Source::Sysctl(key), Some(_)) = (&def.check.source, def.check.field) {
                let name = format!("sysctl.{key}");
                if !vars.contains_key(&name) {
                    if let Reading::Value(v) = read_sysctl(backend, key) {
                        vars.insert(name, v);
                    }
                }
            }
            let defaulted = matches!(&def.check.source, Source::Registry(_))
                && def.default.is_some()
                && is_absent(backend, def, nic);
            let boot = def.has_boot_view().then(|| match &def.check.source {
                Source::Sysctl(key) => boot_entry(backend, key),
                _ => unreachable!("boot views exist for sysctls only"),
            });
            instances.push(Instance {
                check: i,
                nic: nic.cloned(),
                reading,
                after: None,
                boot,
                defaulted,
            });
        }
    }

    if let Some(wait) = options.watch {
        std::thread::sleep(wait);
        for inst in &mut instances {
            let def = &catalog.checks[inst.check];
            if def.check.compare == Compare::NoGrowth {
                inst.after = Some(read_source(backend, def, inst.nic.as_ref(), options));
            }
        }
    }

    HostFacts {
        info: backend.describe(),
        vars,
        instances,
        no_nics,
        watched: options.watch,
        options: options.clone(),
    }
}

fn read_source(
    backend: &dyn Backend,
    def: &CheckDef,
    nic: Option<&Link>,
    options: &Options,
) -> Reading {
    let reading = match &def.check.source {
        Source::Sysctl(key) => read_sysctl(backend, key),
        Source::Rlimit(r) => {
            let pid = match r.process {
                Process::Current => "self".to_string(),
                Process::Pid => match options.pid {
                    Some(p) => p.to_string(),
                    None => return Reading::Unreadable("needs --pid".into()),
                },
            };
            read_nofile(backend, &pid, r.limit)
        }
        Source::Systemd(prop) => match &options.unit {
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
        Source::Fact(f) => fact(backend, *f, nic, options.pid),
        Source::BootEntry(key) => boot_entry(backend, key),
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

pub fn sysctl_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
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

fn read_nofile(backend: &dyn Backend, pid: &str, which: LimitKind) -> Reading {
    let path = format!("/proc/{pid}/limits");
    let text = match backend.read(&path) {
        Ok(t) => t,
        Err(e) => return Err(e).into(),
    };
    match parse_limits(&text) {
        Some(limits) => {
            let l = limits.max_open_files;
            let v = match which {
                LimitKind::Soft => l.soft_limit,
                LimitKind::Hard => l.hard_limit,
            };
            Reading::Value(Value::Num(match v {
                procfs_core::process::LimitValue::Unlimited => i64::MAX,
                procfs_core::process::LimitValue::Value(n) => n.min(i64::MAX as u64) as i64,
            }))
        }
        // procfs's own message for a malformed file is an "internal error, please report this
        // procfs bug"; the problem is the file, and that is what the note says.
        None => Reading::Unreadable(format!(
            "{path}: no readable \"Max open files\" line; it is not in /proc/PID/limits format"
        )),
    }
}

/// (soft, hard) RLIMIT_NOFILE of a process; unlimited as u64::MAX.
pub fn nofile_of(backend: &dyn Backend, pid: u32) -> Option<(u64, u64)> {
    let text = backend.read(&format!("/proc/{pid}/limits")).ok()?;
    let l = parse_limits(&text)?.max_open_files;
    let v = |x: procfs_core::process::LimitValue| match x {
        procfs_core::process::LimitValue::Unlimited => u64::MAX,
        procfs_core::process::LimitValue::Value(n) => n,
    };
    Some((v(l.soft_limit), v(l.hard_limit)))
}

/// /proc/PID/limits through procfs-core, without the lines its parser cannot take: it
/// subtracts from the word count of every line, so a line of fewer than three words (an empty
/// line, a cut-off file from a `--root` tree) overflows and panics in a debug build (found by
/// fuzz/proc_limits). Such a line is no limit anyway; a file without the needed ones is
/// still refused.
fn parse_limits(text: &str) -> Option<procfs_core::process::Limits> {
    let lines: String = text
        .lines()
        .filter(|l| l.split_whitespace().count() >= 3)
        .flat_map(|l| [l, "\n"])
        .collect();
    procfs_core::process::Limits::from_read(lines.as_bytes()).ok()
}

/// `Group.Name` from /proc/net/netstat, then /proc/net/snmp (same two-line format).
fn read_netstat(backend: &dyn Backend, name: &str) -> Reading {
    let Some((group, field)) = name.split_once('.') else {
        return Reading::Unreadable(format!("'{name}' is not Group.Name"));
    };
    let mut last_err = None;
    for path in ["/proc/net/netstat", "/proc/net/snmp"] {
        match backend.read(path) {
            Ok(text) => {
                if let Some(v) = parse_header_values(&text, group, field) {
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

/// The `Group: names` / `Group: values` line pairs of /proc/net/netstat and /proc/net/snmp.
pub fn parse_header_values(text: &str, group: &str, field: &str) -> Option<i64> {
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

fn read_sockstat(backend: &dyn Backend, name: &str) -> Reading {
    let Some((proto, field)) = name.split_once('.') else {
        return Reading::Unreadable(format!("'{name}' is not PROTO.field"));
    };
    match backend.read("/proc/net/sockstat") {
        Ok(text) => match parse_sockstat(&text, proto, field) {
            Some(v) => Reading::Value(Value::Num(v)),
            None => Reading::Missing(format!("/proc/net/sockstat has no {name}")),
        },
        Err(e) => Err(e).into(),
    }
}

/// `TCP: inuse 5 orphan 0 tw 2 alloc 7 mem 1`
pub fn parse_sockstat(text: &str, proto: &str, field: &str) -> Option<i64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(proto))?;
    let words: Vec<&str> = line.split_once(':')?.1.split_whitespace().collect();
    words
        .chunks(2)
        .find(|kv| kv[0] == field)
        .and_then(|kv| kv.get(1)?.parse().ok())
}

/// A host fact: from the backend's own source when it has one (Windows' API, a registry.yaml
/// tree's `host:` section), else from /proc and /sys.
fn fact(backend: &dyn Backend, f: Fact, nic: Option<&Link>, pid: Option<u32>) -> Reading {
    match backend.host_fact(f, pid) {
        Some(r) => r.map(Value::Num).into(),
        None => read_fact(backend, f, nic),
    }
}

fn read_fact(backend: &dyn Backend, fact: Fact, nic: Option<&Link>) -> Reading {
    match fact {
        Fact::ProcessHandles => Reading::Unreadable(
            "the handle count of a process is a Windows fact (Linux: see the nofile checks)".into(),
        ),
        Fact::KernelVersion => backend
            .read("/proc/sys/kernel/osrelease")
            .map(|t| Value::Text(t.trim().to_string()))
            .into(),
        Fact::Cpus => match backend.read("/sys/devices/system/cpu/online") {
            Ok(t) => match count_cpu_list(&t) {
                Some(n) => Reading::Value(Value::Num(n)),
                None => Reading::Unreadable(format!(
                    "cannot parse /sys/devices/system/cpu/online: '{}'",
                    t.trim()
                )),
            },
            Err(_) => backend
                .read("/proc/cpuinfo")
                .map(
                    |t| Value::Num(t.lines().filter(|l| l.starts_with("processor")).count() as i64),
                )
                .into(),
        },
        Fact::MemBytes => mem_bytes(backend),
        Fact::NumaNodes => backend
            .list("/sys/devices/system/node")
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
        Fact::ProcSysWritable => match backend.read("/proc/self/mountinfo") {
            Ok(text) => Reading::Value(Value::Num(proc_sys_writable(&text) as i64)),
            Err(e) => Err(e).into(),
        },
        Fact::NicIrqCpus => {
            let Some(link) = nic else {
                return Reading::Unreadable("needs a NIC".into());
            };
            nic_irq_cpus(backend, &link.name)
        }
    }
}

/// Whether /proc/sys is mounted read-write: the last mount covering it wins (containers
/// remount it read-only on top of /proc).
/// CAP_SYS_RESOURCE (bit 24) in the CapEff line of /proc/PID/status; None when absent.
pub fn can_raise_nofile(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps & (1 << 24) != 0)
}

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

/// "0-3,8-11" -> 8
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

/// MemTotal, or the cgroup v2 memory.max of this process when it is lower (a container).
fn mem_bytes(backend: &dyn Backend) -> Reading {
    let text = match backend.read("/proc/meminfo") {
        Ok(t) => t,
        Err(e) => return Err(e).into(),
    };
    let total = match procfs_core::Meminfo::from_read(text.as_bytes()) {
        Ok(m) => m.mem_total,
        Err(_) => {
            return Reading::Unreadable(
                "/proc/meminfo: no readable MemTotal line; it is not in /proc/meminfo format"
                    .into(),
            )
        }
    };
    let cgroup = backend
        .read("/proc/self/cgroup")
        .ok()
        .and_then(|t| cgroup_memory_limit(backend, &t));
    let bytes = cgroup.map_or(total, |c| c.min(total));
    Reading::Value(Value::Num(bytes.min(i64::MAX as u64) as i64))
}

/// The memory limit of this process's cgroup: v2 (`0::PATH` -> memory.max) or v1
/// (`N:memory:PATH` -> memory.limit_in_bytes). "max" and v1's near-2^63 "unlimited" are None.
fn cgroup_memory_limit(backend: &dyn Backend, proc_self_cgroup: &str) -> Option<u64> {
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
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
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
        .iter()
        .filter_map(|p| backend.read(p).ok()?.trim().parse::<u64>().ok())
        .filter(|v| *v < (1 << 62))
        .min()
}

/// How many CPUs have served the NIC's interrupts. The IRQ numbers come from the PCI device's
/// msi_irqs directory when there is one (driver naming in /proc/interrupts varies), else from
/// /proc/interrupts lines that name the NIC.
fn nic_irq_cpus(backend: &dyn Backend, nic: &str) -> Reading {
    let text = match backend.read("/proc/interrupts") {
        Ok(t) => t,
        Err(e) => return Err(e).into(),
    };
    let irqs: Vec<String> = backend
        .list(&format!("/sys/class/net/{nic}/device/msi_irqs"))
        .unwrap_or_default();
    match count_irq_cpus(&text, nic, &irqs) {
        Some(n) => Reading::Value(Value::Num(n)),
        None => Reading::Missing(format!("no interrupt of {nic} in /proc/interrupts")),
    }
}

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

/// Boot-time configuration directories in the order `sysctl --system` and systemd-sysctl use:
/// all `*.conf` files sorted by name; for equal names the earlier directory wins; later
/// assignments override earlier ones. /etc/sysctl.conf is applied last (procps), which matches
/// the usual 99-sysctl.conf symlink to it on systemd distributions.
pub const SYSCTL_DIRS: &[&str] = &[
    "/etc/sysctl.d",
    "/run/sysctl.d",
    "/usr/local/lib/sysctl.d",
    "/usr/lib/sysctl.d",
    "/lib/sysctl.d",
];

/// The entry that sets `key` at the next boot: `Value(Text("FILE:LINE = VALUE"))`, or Missing.
pub fn boot_entry(backend: &dyn Backend, key: &str) -> Reading {
    boot_entry_with(backend, key, None)
}

/// [`boot_entry`] as if `extra` (a path and its text) were also on disk: how `apply` checks that
/// the file it is about to write would really win at boot.
pub fn boot_entry_with(backend: &dyn Backend, key: &str, extra: Option<(&str, &str)>) -> Reading {
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut any_config = backend.read("/etc/sysctl.conf").is_ok();
    for dir in SYSCTL_DIRS {
        let Ok(names) = backend.list(dir) else {
            continue;
        };
        any_config = true;
        for name in names.into_iter().filter(|n| n.ends_with(".conf")) {
            files
                .entry(name.clone())
                .or_insert_with(|| format!("{dir}/{name}"));
        }
    }
    if let Some((path, _)) = extra {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        // Our file is in /etc/sysctl.d, the first directory: it masks same-named files.
        files.insert(name.to_string(), format!("{dir}/{name}"));
        any_config = true;
    }
    let mut order: Vec<String> = files.into_values().collect();
    order.push("/etc/sysctl.conf".to_string());
    let mut found = None;
    for path in order {
        let text = match extra {
            Some((p, t)) if p == path => t.to_string(),
            _ => match backend.read(&path) {
                Ok(t) => t,
                Err(_) => continue,
            },
        };
        if let Some((line, value)) = last_assignment(&text, key) {
            found = Some(format!("{path}:{line} = {value}"));
        }
    }
    match found {
        Some(f) => Reading::Value(Value::Text(f)),
        None if !any_config => Reading::Unreadable(
            "no /etc/sysctl.conf or sysctl.d directory: nothing applies sysctls at boot here (in a container the runtime does: docker --sysctl, Kubernetes securityContext.sysctls)".into(),
        ),
        None => Reading::Missing(format!("no sysctl.d file sets {key}")),
    }
}

/// The last line of a sysctl.conf-format text that assigns `key` (either `a.b.c` or `a/b/c`,
/// optionally prefixed with `-`), as (1-based line, value).
pub fn last_assignment(text: &str, key: &str) -> Option<(usize, String)> {
    let mut found = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim().trim_start_matches('-').replace('/', ".");
        if k == key {
            found = Some((i + 1, v.trim().to_string()));
        }
    }
    found
}

/// Split the text of a boot entry back into its location and value.
pub fn split_boot_entry(text: &str) -> Option<(&str, &str)> {
    text.split_once(" = ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::memory::MemoryBackend;

    #[test]
    fn limits_lines_of_fewer_than_three_words_are_skipped_not_a_panic() {
        // fuzz/regressions/proc_limits: procfs-core subtracts from each line's word count.
        let good = "Limit Soft Limit Hard Limit Units\nMax open files 1024 4096 files\n";
        for bad in ["\n", "x\n", "Max nice\n", "Max open\n"] {
            let host = MemoryBackend::default().file("/proc/7/limits", &format!("{good}{bad}"));
            assert_eq!(
                nofile_of(&host, 7),
                None,
                "{bad:?}: the other limits are missing"
            );
        }
        let full = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        if !full.is_empty() {
            let host = MemoryBackend::default().file("/proc/7/limits", &format!("{full}\nx\n"));
            assert!(nofile_of(&host, 7).is_some());
        }
    }

    #[test]
    fn netstat_pairs() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 17 19\nIpExt: InNoRoutes\nIpExt: 3\n";
        assert_eq!(
            parse_header_values(text, "TcpExt", "ListenOverflows"),
            Some(17)
        );
        assert_eq!(parse_header_values(text, "IpExt", "InNoRoutes"), Some(3));
        assert_eq!(parse_header_values(text, "TcpExt", "Nope"), None);
    }

    #[test]
    fn sockstat_fields() {
        let text =
            "sockets: used 100\nTCP: inuse 5 orphan 1 tw 2 alloc 7 mem 3\nUDP: inuse 1 mem 0\n";
        assert_eq!(parse_sockstat(text, "TCP", "tw"), Some(2));
        assert_eq!(parse_sockstat(text, "TCP", "mem"), Some(3));
        assert_eq!(parse_sockstat(text, "UDP", "mem"), Some(0));
        assert_eq!(parse_sockstat(text, "TCP", "x"), None);
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
    fn sysctl_conf_parsing() {
        let text =
            "# c\nnet.core.somaxconn = 1024\n-net/core/somaxconn=2048\nnet.core.somaxconnx = 1\n";
        assert_eq!(
            last_assignment(text, "net.core.somaxconn"),
            Some((3, "2048".into()))
        );
        assert_eq!(last_assignment(text, "fs.file-max"), None);
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
            Reading::Value(Value::Text("/usr/lib/sysctl.d/50-b.conf:1 = 3".into()))
        );
        assert_eq!(
            boot_entry(&b, "fs.nr_open"),
            Reading::Value(Value::Text("/etc/sysctl.conf:1 = 6".into()))
        );
        let b = b.file("/run/sysctl.d/60-c.conf", "net.core.somaxconn = 4\n");
        assert_eq!(
            boot_entry(&b, "net.core.somaxconn"),
            Reading::Value(Value::Text("/run/sysctl.d/60-c.conf:1 = 4".into()))
        );
        assert!(matches!(boot_entry(&b, "fs.file-max"), Reading::Missing(_)));
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
}
