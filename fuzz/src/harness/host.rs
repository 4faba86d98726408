//! The host-side readers: profile, catalog and registry YAML, and the /proc and /sys files
//! `gather` reads (limits, net, interrupts, cgroups), through the in-memory host.

use std::collections::BTreeMap;
use wstune::catalog::{self, facts::FactsRequest};
use wstune::gather;
use wstune::host::memory::MemoryBackend;
use wstune::host::procfs;
use wstune::host::Link;
use wstune::host::Platform;

fn text_of(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A profile file: parse and validate (all problems at once, never a panic), and for a valid
/// one the estimate and variables the checks use.
pub fn profile_yaml(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    match wstune::profile::parse(text, "fuzz.yaml") {
        Ok(p) => {
            assert!(wstune::profile::validate(&p).is_empty());
            let e = p.estimate();
            let _ = (e.bytes_per_conn(), e.total_bytes());
            let vars = p.variables();
            let known = vars.keys().cloned().collect();
            // A valid profile works with the built-in catalog end to end.
            let cat = catalog::load(Platform::Linux, None, &known).expect("built-in catalog");
            let facts = gather::gather(&cat, &MemoryBackend::default(), &FactsRequest::default());
            let _ = catalog::eval::evaluate(&cat, &vars, &facts);
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
    }
}

fn profile_vars() -> BTreeMap<String, wstune::value::Value> {
    // Parsed once per thread: the targets that gather a whole catalog would otherwise spend
    // most of each run parsing the built-in profile and catalog again.
    thread_local! {
        static VARS: BTreeMap<String, wstune::value::Value> = wstune::profile::load("100k")
            .expect("built-in profile")
            .profile
            .variables();
    }
    VARS.with(Clone::clone)
}

fn builtin_catalog(platform: Platform) -> catalog::Catalog {
    thread_local! {
        static CATALOGS: std::cell::RefCell<Vec<(Platform, catalog::Catalog)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    CATALOGS.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, cat)) = c.iter().find(|(p, _)| *p == platform) {
            return cat.clone();
        }
        let known = profile_vars().into_keys().collect();
        let cat = catalog::load(platform, None, &known).expect("built-in catalog");
        c.push((platform, cat.clone()));
        cat
    })
}

/// A check catalog: parse and validate (targets, expressions, placeholders); a valid one is
/// gathered against a small in-memory host and evaluated.
pub fn catalog_yaml(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    let vars = profile_vars();
    let known = vars.keys().cloned().collect();
    match catalog::parse(text, "fuzz.yaml", &known) {
        Ok(cat) => {
            let host = linux_host();
            let facts = gather::gather(&cat, &host, &FactsRequest::default());
            let _ = catalog::eval::evaluate(&cat, &vars, &facts);
        }
        Err(e) => assert!(!e.0.is_empty()),
    }
}

/// registry.yaml of a captured Windows tree: load (from a file, as `--root` does), then
/// every query the Windows checks make, through the Windows catalog.
pub fn registry_yaml(data: &[u8]) {
    use std::io::Write;
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().expect("a temporary directory");
    }
    let path = DIR.with(|d| d.path().join("registry.yaml"));
    let mut f = std::fs::File::create(&path).expect("write the input");
    f.write_all(data).expect("write the input");
    drop(f);
    let Ok(reg) = wstune::host::registry_file::RegistryFile::load(&path) else {
        return;
    };
    let _ = reg.to_yaml();
    let _ = reg.adapters();
    let host = MemoryBackend::default().with_registry(reg);
    let vars = profile_vars();
    let cat = builtin_catalog(Platform::Windows);
    let facts = gather::gather(&cat, &host, &FactsRequest::default());
    let _ = catalog::eval::evaluate(&cat, &vars, &facts);
}

/// A plausible Linux host for the catalog checks: what the parsers below leave alone.
fn linux_host() -> MemoryBackend {
    let mut host = MemoryBackend::default()
        .file("/proc/sys/kernel/osrelease", "6.1.0\n")
        .file("/sys/devices/system/cpu/online", "0-1\n")
        .file("/proc/meminfo", "MemTotal: 4000000 kB\n")
        .file("/proc/sys/fs/file-max", "9223372036854775807\n");
    host.links = vec![Link {
        name: "eth0".into(),
        physical: true,
        rx_queues: Some(2),
        tx_queues: Some(2),
        registry_key: None,
    }];
    host
}

/// Gather the whole built-in Linux catalog with `path` holding the fuzzed text, evaluate it,
/// and check the finding list is whole.
fn gather_with(files: &[(&str, &str)]) {
    let mut host = linux_host();
    for (p, t) in files {
        host = host.file(p, t);
    }
    let vars = profile_vars();
    let cat = builtin_catalog(Platform::Linux);
    let facts = gather::gather(&cat, &host, &FactsRequest::default());
    let findings = catalog::eval::evaluate(&cat, &vars, &facts);
    assert!(!findings.is_empty());
}

/// /proc/PID/limits (procfs-core's parser, as wstune reads a server's and its own limits).
pub fn proc_limits(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    let host = MemoryBackend::default().file("/proc/42/limits", text);
    if let Some((soft, hard)) = gather::nofile_of(&host, 42) {
        let _ = (soft, hard);
    }
    gather_with(&[("/proc/self/limits", text)]);
}

/// /proc/net/sockstat, /proc/net/netstat and /proc/net/snmp, through the pure parsers and
/// through the catalog's counter checks. The first byte picks the file and the name looked up,
/// the rest is the file (so real files seed the corpus).
pub fn proc_net(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = text_of(rest) else {
        return;
    };
    const NAMES: [(&str, &str); 6] = [
        ("TcpExt", "ListenOverflows"),
        ("TcpExt", "ListenDrops"),
        ("Tcp", "CurrEstab"),
        ("TCP", "inuse"),
        ("TCP", "orphan"),
        ("", ""),
    ];
    let (group, field) = NAMES[pick as usize % NAMES.len()];
    let _ = procfs::header_values(text, group, field);
    let _ = procfs::sockstat(text, group, field);
    let path =
        ["/proc/net/netstat", "/proc/net/snmp", "/proc/net/sockstat"][(pick as usize >> 3) % 3];
    gather_with(&[(path, text)]);
}

/// /proc/interrupts, with or without the NIC's MSI IRQ list (from
/// /sys/class/net/NIC/device/msi_irqs). The first byte picks the NIC name and the IRQ list;
/// the rest is the file.
pub fn proc_interrupts(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = text_of(rest) else {
        return;
    };
    let nic = ["eth0", "ens3", "", "eth0-TxRx-0"][pick as usize % 4];
    let irqs: Vec<String> = match (pick >> 2) % 3 {
        0 => Vec::new(),
        1 => vec!["24".into(), "25".into()],
        _ => text
            .lines()
            .skip(1)
            .filter_map(|l| l.split(':').next())
            .map(|i| i.trim().to_string())
            .filter(|i| !i.is_empty() && !i.contains('/'))
            .take(4)
            .collect(),
    };
    if let Some(n) = procfs::count_irq_cpus(text, nic, &irqs) {
        let cpus = text
            .lines()
            .next()
            .map_or(0, |l| l.split_whitespace().count());
        assert!(n >= 0 && n as usize <= cpus, "{n} CPUs of {cpus}");
    }
    let irq_paths: Vec<String> = irqs
        .iter()
        .map(|i| format!("/sys/class/net/eth0/device/msi_irqs/{i}"))
        .collect();
    let mut files = vec![("/proc/interrupts", text)];
    for p in &irq_paths {
        files.push((p, ""));
    }
    gather_with(&files);
}

struct SysFiles<'a> {
    cgroup: &'a str,
    memory_max: &'a str,
    meminfo: &'a str,
    cpu_online: &'a str,
    mountinfo: &'a str,
    status: &'a str,
}

/// The cgroup and /sys readers: /proc/self/cgroup (v1 and v2) with the memory limit it points
/// at, /proc/meminfo, /sys/devices/system/cpu/online, mountinfo and the CapEff line. The input
/// is the six files in that order, separated by NUL bytes (so real files seed the corpus).
pub fn cgroup_sys(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let mut next = || parts.next().unwrap_or("");
    let s = SysFiles {
        cgroup: next(),
        memory_max: next(),
        meminfo: next(),
        cpu_online: next(),
        mountinfo: next(),
        status: next(),
    };
    if let Some(n) = procfs::count_cpu_list(s.cpu_online) {
        assert!(n > 0);
    }
    let _ = procfs::proc_sys_writable(s.mountinfo);
    let _ = procfs::can_raise_nofile(s.status);
    // The limit file at the path the cgroup line names (v2 first, else the v1 memory one).
    let mut limit_paths = Vec::new();
    for line in s.cgroup.lines().take(4) {
        let mut parts = line.splitn(3, ':');
        if let (Some(_), Some(ctl), Some(path)) = (parts.next(), parts.next(), parts.next()) {
            let path = if path == "/" { "" } else { path };
            limit_paths.push(if ctl.is_empty() {
                format!("/sys/fs/cgroup{path}/memory.max")
            } else {
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
            });
        }
    }
    let mut files: Vec<(&str, &str)> = vec![
        ("/proc/self/cgroup", s.cgroup),
        ("/proc/meminfo", s.meminfo),
        ("/sys/devices/system/cpu/online", s.cpu_online),
        ("/proc/self/mountinfo", s.mountinfo),
        ("/proc/self/status", s.status),
    ];
    for p in &limit_paths {
        files.push((p, s.memory_max));
    }
    gather_with(&files);
}
