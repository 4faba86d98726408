//! `wstune explain [ID | PREFIX | GLOB]`: one check from the built-in catalogs in full (the
//! why, the fix, the sources, how the host's role changes it, each built-in profile's target),
//! or the ids that match a prefix or a glob. An unknown id is an error that names the closest.

use crate::catalog::{self, computed, eval::compare_str, Check, Source, Target};
use crate::host::Platform;
use crate::outcome::Outcome;
use crate::output;
use crate::profile;
use crate::report::{self, Explanation, FixTemplate, IdEntry, ProfileTarget, RoleChange};
use anyhow::{bail, Result};
use std::collections::BTreeSet;

/// `explain`, resolved.
pub struct Request {
    /// An id (`linux.net.core.somaxconn`, also as a report writes it: `ID[eth0]`, `ID.boot`), a
    /// prefix (`linux.net.ipv4.`) or a glob (`*tw*`); none: every id.
    pub query: Option<String>,
    pub json: bool,
    /// Columns to lay the text out in.
    pub width: u16,
}

/// One check of any built-in catalog, as explain reads it.
enum Entry {
    Host(Platform, Box<catalog::CheckDef>),
    Lb(&'static crate::lb::wording::Def),
    Own(&'static computed::Computed),
}

impl Entry {
    fn id(&self) -> &str {
        match self {
            Entry::Host(_, d) => &d.check.id,
            Entry::Lb(d) => &d.id,
            Entry::Own(c) => &c.id,
        }
    }
    fn title(&self) -> String {
        match self {
            Entry::Host(_, d) => d.check.title.clone(),
            Entry::Lb(d) => d.title.replace("{proxy}", "HAProxy or nginx"),
            Entry::Own(c) => c.title.clone(),
        }
    }
}

fn entries() -> Result<Vec<Entry>> {
    let known: BTreeSet<String> = profile::load(profile::DEFAULT)?
        .profile
        .variables()
        .into_keys()
        .collect();
    let mut out = Vec::new();
    for platform in [Platform::Linux, Platform::Windows] {
        let cat = catalog::load(platform, None, &known)?;
        out.extend(
            cat.checks
                .into_iter()
                .map(|d| Entry::Host(platform, Box::new(d))),
        );
    }
    out.extend(crate::lb::wording::defs().iter().map(Entry::Lb));
    out.extend(computed::all().iter().map(Entry::Own));
    Ok(out)
}

pub fn run(r: Request) -> Result<Outcome> {
    let all = entries()?;
    let list = |matching: Vec<&Entry>| {
        let ids: Vec<IdEntry> = matching
            .iter()
            .map(|e| IdEntry {
                id: e.id().to_string(),
                title: e.title(),
            })
            .collect();
        output::emit(None, &report::id_list(&ids, r.json, r.width))
    };
    let Some(query) = r.query.as_deref().map(str::trim) else {
        list(all.iter().collect())?;
        return Ok(Outcome::Ok);
    };
    if let Some(e) = find(&all, query) {
        let x = explanation(e)?;
        let text = if r.json {
            report::explain_json(&x)
        } else {
            report::explain_text(&x, r.width)
        };
        output::emit(None, &text)?;
        return Ok(Outcome::Ok);
    }
    let matching: Vec<&Entry> = if query.contains(['*', '?']) {
        all.iter().filter(|e| glob(query, e.id())).collect()
    } else {
        // A prefix ends at a dot (`linux.net.core` or `linux.net.core.`): a word cut short
        // (`somaxcon`) is a misspelt id, answered with the closest below.
        all.iter()
            .filter(|e| {
                e.id()
                    .strip_prefix(query)
                    .is_some_and(|rest| query.ends_with('.') || rest.starts_with('.'))
            })
            .collect()
    };
    if !matching.is_empty() {
        list(matching)?;
        return Ok(Outcome::Ok);
    }
    let near = closest(&all, query);
    if near.is_empty() {
        bail!(
            "no check id matches `{query}`; `wstune explain` lists every id, `wstune explain linux.` those for Linux"
        );
    }
    bail!(
        "unknown check id `{query}`; did you mean {}? (`wstune explain` lists every id; a prefix such as `linux.net.` or a glob such as '*tw*' lists those that match)",
        near.join(", ")
    )
}

/// The check `query` names: its id, or the id a report shows for one of its findings
/// (`ID[eth0]` per NIC, `ID.boot` for the next boot's value).
fn find<'a>(all: &'a [Entry], query: &str) -> Option<&'a Entry> {
    let exact = |id: &str| all.iter().find(|e| e.id() == id);
    let base = query.split('[').next().unwrap_or(query);
    exact(query)
        .or_else(|| exact(base))
        .or_else(|| base.strip_suffix(".boot").and_then(exact))
}

/// Ids that look like `query`: those containing its last word, then the most alike by
/// Jaro-Winkler; three at most.
fn closest(all: &[Entry], query: &str) -> Vec<String> {
    let last = query.rsplit('.').next().unwrap_or(query);
    let mut near: Vec<String> = Vec::new();
    if last.len() >= 3 {
        near.extend(
            all.iter()
                .map(|e| e.id())
                .filter(|id| id.contains(last))
                .map(str::to_string),
        );
    }
    let mut scored: Vec<(f64, &str)> = all
        .iter()
        .map(|e| (strsim::jaro_winkler(query, e.id()), e.id()))
        .filter(|(s, _)| *s >= 0.9)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, id) in scored {
        if !near.iter().any(|n| n == id) {
            near.push(id.to_string());
        }
    }
    near.truncate(3);
    near
}

/// `*` any text, `?` one character.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn explanation(e: &Entry) -> Result<Explanation> {
    let id = e.id().to_string();
    let area = report::area(&id);
    Ok(match e {
        Entry::Host(platform, d) => {
            let c = &d.check;
            let mut targets = Vec::new();
            if let Some(t) = &d.target {
                for (name, _) in profile::EMBEDDED {
                    let vars = profile::load(name)?.profile.variables();
                    let (target, from_host) = match t {
                        Target::Value(v) => (Some(v.clone()), None),
                        Target::Version(s) => (Some(crate::value::Value::Text(s.clone())), None),
                        Target::Expr(x) => match x.eval(&vars) {
                            Ok(v) => (Some(v), None),
                            Err(_) => (None, Some(raw(c.target.as_ref()))),
                        },
                    };
                    targets.push(ProfileTarget {
                        profile: name.to_string(),
                        target,
                        from_host,
                    });
                }
            }
            Explanation {
                title: c.title.clone(),
                platform: match platform {
                    Platform::Linux => "linux",
                    Platform::Windows => "windows",
                }
                .into(),
                area,
                reads: Some(reads(&c.source)),
                scope: Some(c.scope),
                per_netns: c.scope == catalog::Scope::Netns,
                boot_view: d.has_boot_view(),
                severity: Some(c.severity),
                compare: Some(compare_str(c.compare)),
                why: c.why.clone(),
                fix: FixTemplate {
                    runtime: c.fix.runtime.clone(),
                    persistent: c.fix.persistent.clone(),
                },
                refs: c.refs.clone(),
                roles: roles(c),
                targets,
                id,
            }
        }
        Entry::Lb(d) => Explanation {
            title: e.title(),
            platform: "load balancer".into(),
            area,
            reads: Some("the proxy's configuration (check --lb-config FILE)".into()),
            scope: Some(catalog::Scope::Proxy),
            per_netns: false,
            boot_view: false,
            severity: None,
            compare: None,
            why: d.why.for_kind(None),
            fix: FixTemplate {
                runtime: Some(d.fix.for_kind(None)),
                persistent: None,
            },
            refs: d.refs.clone(),
            roles: Vec::new(),
            targets: Vec::new(),
            id,
        },
        Entry::Own(c) => Explanation {
            title: c.title.clone(),
            platform: "wstune".into(),
            area,
            reads: Some("wstune's journal of applied changes".into()),
            scope: Some(c.scope),
            per_netns: false,
            boot_view: false,
            severity: Some(c.severity),
            compare: Some(compare_str(c.compare)),
            why: c.why.clone(),
            fix: FixTemplate {
                runtime: c.fix.runtime.clone(),
                persistent: c.fix.persistent.clone(),
            },
            refs: Vec::new(),
            roles: Vec::new(),
            targets: Vec::new(),
            id,
        },
    })
}

/// What each role the catalog names changes.
fn roles(c: &Check) -> Vec<RoleChange> {
    c.roles
        .iter()
        .map(|(role, o)| RoleChange {
            role: role.to_string(),
            skip: o.skip.clone(),
            compare: o.compare.map(compare_str),
            target: o.target.as_ref().map(|t| raw(Some(t))),
            severity: o.severity,
            why: o.why.clone(),
        })
        .collect()
}

/// A target as the catalog writes it.
fn raw(t: Option<&serde_yaml_ng::Value>) -> String {
    match t {
        Some(serde_yaml_ng::Value::String(s)) => s.clone(),
        Some(other) => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .replace('\n', " "),
        None => "-".into(),
    }
}

/// Where a check's value comes from, in an operator's words.
fn reads(s: &Source) -> String {
    match s {
        Source::Sysctl(k) => format!("sysctl {k}"),
        Source::Rlimit(r) => format!(
            "the {} RLIMIT_{} of {}",
            match r.limit {
                catalog::LimitKind::Soft => "soft",
                catalog::LimitKind::Hard => "hard",
            },
            match r.resource {
                catalog::Resource::Nofile => "NOFILE",
                catalog::Resource::Nproc => "NPROC",
                catalog::Resource::Stack => "STACK",
            },
            match r.process {
                catalog::Process::Current => "this shell (what a server started from it inherits)",
                catalog::Process::Pid => "the --pid process",
            }
        ),
        Source::Systemd(p) => format!("the --unit service's {p} (systemctl show)"),
        Source::File(p) => format!("the file {p}"),
        Source::Netstat(n) => format!("the kernel counter {n} (/proc/net/netstat, /proc/net/snmp)"),
        Source::Sockstat(n) => format!("{n} in /proc/net/sockstat"),
        Source::Softnet(_) => "/proc/net/softnet_stat, summed over CPUs".into(),
        Source::ConntrackStat(n) => format!("{n} in /proc/net/stat/nf_conntrack, summed over CPUs"),
        Source::Softirq(_) => {
            "each CPU's softirq time during --watch (/proc/stat, /proc/softirqs)".into()
        }
        Source::Fact(f) => format!("the host's {}", fact_words(f)),
        Source::BootEntry(k) => format!("the sysctl.d line that sets {k} at boot"),
        Source::Registry(r) => format!("the registry value {}\\{}", r.key, r.value),
        Source::DynamicPorts(_) | Source::DynamicPortCount(_) => {
            "the TCP dynamic port range (netsh int ipv4|ipv6 show dynamicport tcp)".into()
        }
        Source::NicStat(n) => format!("the NIC driver's counter {n} (ethtool -S)"),
    }
}

fn fact_words(f: &catalog::Fact) -> &'static str {
    use catalog::Fact::*;
    match f {
        KernelVersion => "kernel version",
        Cpus => "CPU count",
        MemBytes => "usable memory (MemTotal, or the cgroup's limit when lower)",
        NumaNodes => "NUMA nodes",
        NicRxQueues => "NIC receive queues",
        NicTxQueues => "NIC transmit queues",
        NicIrqCpus => "CPUs serving the NIC's interrupts (/proc/interrupts)",
        NicCoalesce => "NIC receive interrupt coalescing (ethtool netlink)",
        ProcSysWritable => "/proc/sys mount (read-write or read-only)",
        ProcessHandles => "open handles of the --pid process",
        PidThreads => "threads of the --pid process (/proc/PID/status)",
        PidSockets => "sockets of the --pid process (/proc/PID/fd)",
        LocalPortCount => {
            "source ports per destination (ip_local_port_range less ip_local_reserved_ports)"
        }
        CgroupPidsMax => "pids.max of the server's cgroup (--pid's, else wstune's own)",
        CgroupMemoryMax => "memory.max of the server's cgroup v2 (--pid's, else wstune's own)",
        ReuseportMigrateReq => {
            "net.ipv4.tcp_migrate_req, where listeners share an address and port (SO_REUSEPORT)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_ids() {
        assert!(glob("*tw*", "linux.net.ipv4.tcp_tw_reuse"));
        assert!(glob("linux.net.core.*", "linux.net.core.somaxconn"));
        assert!(glob("linux.net.core.somaxcon?", "linux.net.core.somaxconn"));
        assert!(!glob("linux.net.core.*", "linux.net.ipv4.tcp_tw_reuse"));
        assert!(!glob("*tw", "linux.net.ipv4.tcp_tw_reuse"));
    }

    #[test]
    fn a_misspelt_id_finds_the_right_one_and_a_report_id_its_check() {
        let all = entries().unwrap();
        assert_eq!(
            closest(&all, "linux.net.core.somaxcon")[0],
            "linux.net.core.somaxconn"
        );
        assert_eq!(
            find(&all, "linux.nic.rx_queues[eth0]").map(Entry::id),
            Some("linux.nic.rx_queues")
        );
        assert_eq!(
            find(&all, "linux.net.core.somaxconn.boot").map(Entry::id),
            Some("linux.net.core.somaxconn")
        );
        assert_eq!(
            find(&all, "linux.boot.tcp_tw_recycle").map(Entry::id),
            Some("linux.boot.tcp_tw_recycle")
        );
    }
}
