//! From findings to actions: one change per failing or warning check that wstune knows how to
//! make, derived from the check's source (a sysctl, an fd limit, a unit, a registry value).
//!
//! Pure: [`plan`] reads nothing. Everything it needs about the host is in the [`HostFacts`]
//! `gather` read once (the whole value of each sysctl, the boot configuration, the files wstune
//! owns), and it joins findings to checks by [`Finding::key`], not by id text. Each file it writes
//! is rendered here, once, into [`Plan::files`]; `apply` (mod.rs) journals the plan and the
//! backend carries it out.
//!
//! Rules: never lower what an operator raised (a `>=` setting persists the higher of current
//! and target); change at runtime only what fails now; persist whatever would not survive a
//! reboot (including a value met now whose boot default is unknown); and never write a line
//! that a later boot file would override anyway (say so instead).
//!
//! The path of one value, somaxconn, from the profile to the kernel (6 hops, 2 type changes):
//! 1. `profile::load`: profiles/100k.yaml `linux.somaxconn: 65535` -> `Profile.linux.somaxconn: u64`
//! 2. `Profile::variables`: `"linux.somaxconn"` -> `Value::Num(65535)` (change 1: u64 -> Value)
//! 3. `catalog::eval::evaluate`: the check's target expression -> `Finding.target: Value`
//! 4. [`plan`]: [`desired`] (never lower) -> `Op::Sysctl { value: String }` (change 2:
//!    [`kernel_text`], the text the kernel takes)
//! 5. `apply::execute`: the journaled action -> `Backend::write_runtime(path, &value)`
//! 6. `LinuxBackend::write_runtime` (host/linux/): `value\n` written to /proc/sys/net/core/somaxconn

use crate::catalog::eval::{Finding, Status};
use crate::catalog::facts::{HostFacts, Reading};
use crate::catalog::{self, Catalog, CheckDef, LimitKind, Process, Source};
use crate::host::procfs::sysctl_path;
use crate::host::RegType;
use crate::value::Value;
use serde::{Deserialize, Serialize};

pub use crate::catalog::eval::desired;
pub use crate::host::owned::{unit_dropin, LIMITS_FILE, SYSCTL_FILE};

// Unknown fields refused: the journal stores actions, and a field this version does not know
// must make the entry damaged, not be dropped silently (its checksum covers only known ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// The check that asked for it.
    pub check: String,
    /// What changes, for people: a sysctl key, "nofile", a registry value.
    pub setting: String,
    pub from: Option<String>,
    pub to: String,
    pub op: Op,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Write /proc/sys now.
    Sysctl { key: String, value: String },
    /// A `key = value` line in /etc/sysctl.d/60-wstune.conf.
    SysctlFile { key: String, value: String },
    /// `nofile` lines in /etc/security/limits.d/60-wstune.conf (PAM logins).
    LimitsFile { nofile: u64 },
    /// LimitNOFILE in a systemd drop-in for `unit`.
    UnitDropIn { unit: String, nofile: u64 },
    /// prlimit(2) on a running process.
    Prlimit { pid: u32, soft: u64, hard: u64 },
    /// A registry value (REG_DWORD in decimal).
    Registry {
        key: String,
        value: String,
        reg_type: RegType,
        data: String,
    },
    /// Write a NIC queue's or interrupt's setting under /sys or /proc/irq now
    /// ([`crate::host::owned::nic_runtime_path`]).
    KernelFile { path: String, value: String },
    /// The udev rule that writes the NICs' queue settings at boot and hotplug.
    NicRules,
    /// net.core.rps_sock_flow_entries in /etc/sysctl.d/60-wstune-nic.conf.
    NicSysctlFile { value: u64 },
    /// A NIC's channel counts now, over ethtool netlink (None: left as they are).
    Channels {
        nic: String,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    },
    /// The .link file that sets a NIC's channel counts and receive ring at boot.
    NicLinkFile { nic: String },
    /// The boot script and unit that pin the NICs' queue interrupts.
    NicIrqFiles,
    /// A NIC's receive ring size now, over ethtool netlink (RINGS_SET).
    RxRing { nic: String, rx: u32 },
    /// A `key = value` line in /etc/sysctl.d/60-wstune-nic.conf (the receive budget).
    NicSysctlLine { key: String, value: String },
    /// irqbalance's policy script, which bans the pinned NIC interrupts by name.
    IrqbalancePolicy,
    /// `--policyscript=` added to IRQBALANCE_ARGS in irqbalance's environment file `path`.
    IrqbalanceArgs { path: String },
    /// `systemctl try-restart UNIT` once the files are written (and again after a rollback),
    /// so a running service reads them.
    TryRestart { unit: String },
}

impl Op {
    /// Where the change lands, for the plan table.
    pub fn place(&self) -> String {
        match self {
            Op::Sysctl { key, .. } => sysctl_path(key),
            Op::SysctlFile { .. } => SYSCTL_FILE.into(),
            Op::LimitsFile { .. } => LIMITS_FILE.into(),
            Op::UnitDropIn { unit, .. } => unit_dropin(unit),
            Op::Prlimit { pid, .. } => format!("process {pid} (prlimit)"),
            Op::Registry { key, value, .. } => format!("{key}\\{value}"),
            Op::KernelFile { path, .. } => path.clone(),
            Op::NicRules => crate::host::owned::NIC_RULES_FILE.into(),
            Op::NicSysctlFile { .. } => crate::host::owned::NIC_SYSCTL_FILE.into(),
            Op::Channels { nic, .. } => format!("{nic}'s channels (ethtool netlink)"),
            Op::NicLinkFile { nic } => crate::host::owned::nic_link_file(nic),
            Op::NicIrqFiles => crate::host::owned::NIC_IRQ_SCRIPT.into(),
            Op::RxRing { nic, .. } => format!("{nic}'s receive ring (ethtool netlink)"),
            Op::NicSysctlLine { .. } => crate::host::owned::NIC_SYSCTL_FILE.into(),
            Op::IrqbalancePolicy => crate::host::owned::IRQBALANCE_POLICY.into(),
            Op::IrqbalanceArgs { path } => path.clone(),
            Op::TryRestart { unit } => format!("systemctl try-restart {unit}"),
        }
    }
    pub fn is_runtime(&self) -> bool {
        matches!(
            self,
            Op::Sysctl { .. }
                | Op::Prlimit { .. }
                | Op::Registry { .. }
                | Op::KernelFile { .. }
                | Op::Channels { .. }
                | Op::RxRing { .. }
                | Op::TryRestart { .. }
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// The whole new text of every file the actions write (host path, text), rendered once.
    pub files: Vec<(String, String)>,
    /// The text each file that is merged rather than replaced (our sysctl file keeps the lines
    /// of settings it no longer changes) was rendered from, as the facts saw it ("" when it
    /// was absent). [`super::record`] refuses when the file no longer says this: a change made
    /// between the check and the lock would otherwise be silently dropped.
    pub rendered_from: Vec<(String, String)>,
    /// What wstune will not do, and why (a boot file it does not own, a restart needed).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct Scope {
    pub runtime: bool,
    pub persist: bool,
}

/// A key several checks judge (tcp_fin_timeout's ceiling and floor): its runtime change and its
/// boot line are written once each, with a value that meets every one of them, starting from
/// what the host will have now (the runtime change, else the value the first check chose).
fn narrow_shared_keys(
    catalog: &Catalog,
    findings: &[Finding],
    actions: &mut Vec<Action>,
    persist: &mut Vec<Persist>,
) {
    let rules = |key: &str| -> Vec<(catalog::Compare, Option<usize>, Value)> {
        catalog
            .checks
            .iter()
            .enumerate()
            .filter(|(_, d)| matches!(&d.check.source, Source::Sysctl(k) if k == key))
            .filter_map(|(i, d)| {
                let f = findings
                    .iter()
                    .find(|f| f.key.is_some_and(|k| k.check == i && !k.boot && !k.per_nic))?;
                Some((d.check.compare, d.check.field, f.target.clone()?))
            })
            .collect()
    };
    let narrow = |rules: &[(catalog::Compare, Option<usize>, Value)], text: &str| {
        let mut v = Value::parse_kernel(text);
        for (cmp, field, target) in rules {
            if let Some(n) = desired(*cmp, &v, *field, target) {
                v = n;
            }
        }
        kernel_text(&v)
    };
    let keys: Vec<String> = actions
        .iter()
        .filter_map(|a| match &a.op {
            Op::Sysctl { key, .. } => Some(key.clone()),
            _ => None,
        })
        .chain(persist.iter().map(|p| p.key.clone()))
        .collect();
    let mut done = std::collections::BTreeSet::new();
    for key in keys {
        let rules = rules(&key);
        if rules.len() < 2 || !done.insert(key.clone()) {
            continue;
        }
        let mut runtime_after: Option<String> = None;
        let mut seen = false;
        actions.retain_mut(|a| {
            let Op::Sysctl { key: k, value } = &mut a.op else {
                return true;
            };
            if *k != key {
                return true;
            }
            if seen {
                return false;
            }
            seen = true;
            *value = narrow(&rules, value);
            a.to = value.clone();
            runtime_after = Some(value.clone());
            true
        });
        let mut seen = false;
        persist.retain_mut(|p| {
            if p.key != key {
                return true;
            }
            if seen {
                return false;
            }
            seen = true;
            p.to = narrow(&rules, runtime_after.as_deref().unwrap_or(&p.to));
            true
        });
    }
}

/// One sysctl to persist in our file: (check id, key, from, to).
struct Persist {
    check: String,
    key: String,
    from: String,
    to: String,
}

/// Build the plan from `findings` (which start with what `eval::evaluate` made of `facts`:
/// later ones, the journal's or a proxy's, are not catalog checks and are ignored), the same
/// `facts`, and what to change. `--unit` and `--pid` are the ones `facts` were gathered for.
pub fn plan(catalog: &Catalog, findings: &[Finding], facts: &HostFacts, scope: Scope) -> Plan {
    // One finding per check and view, joined on the key evaluate gave it; per-NIC checks are
    // not changed by apply.
    let finding = |check: usize, boot: bool| {
        findings.iter().find(|f| {
            f.key
                .is_some_and(|k| k.check == check && k.boot == boot && !k.per_nic)
        })
    };
    let (unit, pid) = (facts.options.unit.as_deref(), facts.options.pid);
    let wrong = |f: &Finding| matches!(f.status, Status::Fail | Status::Warn);
    let mut p = Plan::default();
    let mut persist_sysctls: Vec<Persist> = Vec::new();
    let mut nofile_persist: Option<(String, u64, Option<String>)> = None;
    let pid_nofile = PidNofile::of(catalog, &finding);

    for (i, def) in catalog.checks.iter().enumerate() {
        let id = def.check.id.as_str();
        let Some(f) = finding(i, false) else { continue };
        match &def.check.source {
            Source::Sysctl(key) => {
                let (full, desired) = match sysctl_value(def, f, facts) {
                    SysctlValue::Set { current, value } => (current, value),
                    SysctlValue::Unknown(note) => {
                        p.notes.push(note);
                        continue;
                    }
                    SysctlValue::NoTarget | SysctlValue::Unreadable => continue,
                };
                let boot = finding(i, true);
                if scope.runtime && wrong(f) && desired != full {
                    p.actions.push(Action {
                        check: id.into(),
                        setting: key.clone(),
                        from: Some(full.to_string()),
                        to: desired.to_string(),
                        op: Op::Sysctl {
                            key: key.clone(),
                            value: kernel_text(&desired),
                        },
                    });
                }
                let persist = match boot.map(|b| b.status) {
                    Some(Status::Fail | Status::Warn) => true,
                    // Not set in any boot file, and the kernel computes its default at boot
                    // (from RAM): nobody can say the next boot meets the target, so the value
                    // the profile needs is written, whether apply raises it now or an operator
                    // already did by hand (a reboot would silently lower that).
                    // (An info check's miss with a known default is advice: not written.)
                    Some(Status::Info) => def.default.is_none(),
                    _ => false,
                };
                if scope.persist && persist && def.check.boot != Some(false) {
                    let from = boot.and_then(|b| b.current.as_ref()).map(|v| v.to_string());
                    persist_sysctls.push(Persist {
                        check: id.into(),
                        key: key.clone(),
                        from: from.unwrap_or_else(|| "(not set)".into()),
                        to: kernel_text(&desired),
                    });
                }
            }
            Source::Rlimit(r) if wrong(f) => {
                let Some(Value::Num(target)) = f.target.clone() else {
                    continue;
                };
                let target = target as u64;
                match r.process {
                    Process::Current if scope.persist && nofile_persist.is_none() => {
                        nofile_persist =
                            Some((id.into(), target, f.current.as_ref().map(|v| v.to_string())));
                    }
                    Process::Pid if scope.runtime => {
                        let Some(pid) = pid else { continue };
                        if p.actions.iter().any(|a| matches!(a.op, Op::Prlimit { .. })) {
                            continue;
                        }
                        let (soft, hard) = pid_nofile.both().unwrap_or((0, 0));
                        let (soft, hard) = (soft.max(target), hard.max(target));
                        p.actions.push(Action {
                            check: id.into(),
                            setting: format!("nofile of process {pid} ({:?})", r.limit)
                                .to_lowercase(),
                            from: Some(format!(
                                "{}:{}",
                                fmt_limit(pid_nofile.soft),
                                fmt_limit(pid_nofile.hard)
                            )),
                            to: format!("{soft}:{hard}"),
                            op: Op::Prlimit { pid, soft, hard },
                        });
                    }
                    _ => {}
                }
            }
            Source::Systemd(_) if wrong(f) && scope.persist => {
                let (Some(unit), Some(Value::Num(target))) = (unit, f.target.clone()) else {
                    continue;
                };
                p.actions.push(Action {
                    check: id.into(),
                    setting: format!("LimitNOFILE of {unit}"),
                    from: f.current.as_ref().map(|v| v.to_string()),
                    to: target.to_string(),
                    op: Op::UnitDropIn {
                        unit: unit.to_string(),
                        nofile: target as u64,
                    },
                });
                p.notes.push(format!(
                    "{unit} gets its new LimitNOFILE only when systemd rereads its units and the unit restarts: systemctl daemon-reload && systemctl restart {unit}"
                ));
            }
            Source::Registry(r) if wrong(f) && scope.runtime => {
                let Some(target) = &f.target else { continue };
                let data = match (
                    target,
                    r.names
                        .iter()
                        .find(|(_, n)| Value::Text((*n).clone()) == *target),
                ) {
                    (_, Some((raw, _))) => raw.clone(),
                    (Value::Num(n), None) => n.to_string(),
                    _ => continue,
                };
                p.actions.push(Action {
                    check: id.into(),
                    setting: r.value.clone(),
                    from: f.current.as_ref().map(|v| v.to_string()),
                    to: target.to_string(),
                    op: Op::Registry {
                        key: r.key.clone(),
                        value: r.value.clone(),
                        reg_type: r.kind,
                        data,
                    },
                });
                p.notes.push(format!(
                    "{}: Windows reads it at boot; it takes effect after a restart",
                    r.value
                ));
            }
            _ => {}
        }
    }

    narrow_shared_keys(catalog, findings, &mut p.actions, &mut persist_sysctls);

    if !facts.boot.skipped.is_empty() && scope.persist {
        p.notes.push(format!(
            "the boot view {}; a line there may override {SYSCTL_FILE}",
            facts.boot.skipped_note()
        ));
    }
    // Persisted sysctls only if our file would really win at boot: a line for the key in a
    // file applied after ours would override it.
    let mut sysctl_lines: Vec<(String, String)> = Vec::new();
    for s in persist_sysctls {
        match facts.boot.set_after(SYSCTL_FILE, &s.key) {
            Some(e) => p.notes.push(format!(
                "{}: {} sets {} and is applied after {SYSCTL_FILE}; wstune does not edit files it does not own: change or remove that line",
                s.key,
                e.location(),
                e.value
            )),
            None => {
                sysctl_lines.push((s.key.clone(), s.to.clone()));
                p.actions.push(Action {
                    check: s.check,
                    setting: s.key.clone(),
                    from: Some(s.from),
                    to: s.to.clone(),
                    op: Op::SysctlFile {
                        key: s.key,
                        value: s.to,
                    },
                });
            }
        }
    }
    if !sysctl_lines.is_empty() {
        let existing = facts.owned.get(SYSCTL_FILE).map_or("", String::as_str);
        let text = render_sysctl_file(&merge_sysctl_lines(existing, &sysctl_lines));
        p.files.push((SYSCTL_FILE.to_string(), text));
        p.rendered_from
            .push((SYSCTL_FILE.to_string(), existing.to_string()));
    }
    // A nofile limit above the fs.nr_open the host will have after the next boot makes every
    // login's (or the unit's) setrlimit fail with EPERM: judge it against that nr_open (ours
    // when this plan writes it and it wins, else the boot file that sets it last, else the
    // kernel's default), and lower it to it, saying why.
    if let Some((cap, by)) = boot_nr_open(facts, &sysctl_lines) {
        let mut capped = |nofile: &mut u64, what: &str| {
            if *nofile > cap {
                p.notes.push(format!(
                    "{what}: nofile {nofile} is above the fs.nr_open this host will have after the next boot ({cap}, {by}): the kernel would refuse it to every login (EPERM), so {cap} is written instead. Fix: raise fs.nr_open there (or remove that line), then apply again"
                ));
                *nofile = cap;
            }
        };
        if let Some((_, nofile, _)) = &mut nofile_persist {
            capped(nofile, LIMITS_FILE);
        }
        for a in &mut p.actions {
            if let Op::UnitDropIn { unit, nofile } = &mut a.op {
                capped(nofile, &unit_dropin(unit));
                a.to = nofile.to_string();
            }
        }
    }
    // A file that already says exactly this is done, even if the running processes it will
    // apply to (new logins, a restarted unit) do not show it yet.
    let written = |path: &str, text: &str| facts.owned.get(path).is_some_and(|t| t == text);
    p.actions.retain(|a| match &a.op {
        Op::UnitDropIn { unit, nofile } => {
            !written(&unit_dropin(unit), &render_unit_dropin(*nofile))
        }
        _ => true,
    });
    if let Some((_, nofile, _)) = &nofile_persist {
        if written(LIMITS_FILE, &render_limits_file(*nofile)) {
            p.notes.push(format!(
                "{LIMITS_FILE} already sets nofile {nofile}: it applies at the next login"
            ));
            nofile_persist = None;
        }
    }
    if let Some((check, nofile, from)) = nofile_persist {
        p.actions.push(Action {
            check,
            setting: "nofile (PAM logins)".into(),
            from,
            to: nofile.to_string(),
            op: Op::LimitsFile { nofile },
        });
        p.notes.push("limits.d applies to new PAM logins (ssh, su), not to running shells or systemd services (use --unit)".into());
    }
    // The other files, in action order (the journal restores in reverse).
    for a in &p.actions {
        match &a.op {
            Op::LimitsFile { nofile } => p
                .files
                .push((LIMITS_FILE.into(), render_limits_file(*nofile))),
            Op::UnitDropIn { unit, nofile } => p
                .files
                .push((unit_dropin(unit), render_unit_dropin(*nofile))),
            _ => {}
        }
    }
    p
}

/// The kernel's fs.nr_open when no boot file sets it (1024 * 1024).
pub const KERNEL_NR_OPEN: u64 = 1 << 20;

/// The fs.nr_open the host will have after the next boot, and where it comes from; None when
/// nothing applies sysctls at boot here (a container: its runtime does).
pub fn boot_nr_open(facts: &HostFacts, ours: &[(String, String)]) -> Option<(u64, String)> {
    if let Some((_, v)) = ours.iter().find(|(k, _)| k == "fs.nr_open") {
        return Some((v.trim().parse().ok()?, format!("set by {SYSCTL_FILE}")));
    }
    match facts.boot.entry("fs.nr_open") {
        Reading::Value(e) => Some((
            e.value.trim().parse().ok()?,
            format!("set by {}", e.location()),
        )),
        Reading::Missing(_) => Some((
            KERNEL_NR_OPEN,
            "the kernel's default: no boot file sets it".into(),
        )),
        Reading::Unreadable(_) => None,
    }
}

/// The current nofile limits of the `--pid` process, from its two checks.
struct PidNofile {
    soft: Option<i64>,
    hard: Option<i64>,
}

impl PidNofile {
    fn of<'a>(catalog: &Catalog, finding: &impl Fn(usize, bool) -> Option<&'a Finding>) -> Self {
        let current = |kind: LimitKind| {
            let i = catalog.checks.iter().position(|d| {
                matches!(&d.check.source, Source::Rlimit(r) if r.process == Process::Pid && r.limit == kind)
            })?;
            finding(i, false)?.current.as_ref()?.as_num()
        };
        PidNofile {
            soft: current(LimitKind::Soft),
            hard: current(LimitKind::Hard),
        }
    }

    fn both(&self) -> Option<(u64, u64)> {
        Some((self.soft? as u64, self.hard? as u64))
    }
}

/// What one sysctl check asks of this host.
pub enum SysctlValue {
    /// Set `key` to `value` (today `current`): the target, never lowering what an operator
    /// raised ([`desired`]).
    Set { current: Value, value: Value },
    /// The check has no target (it only reports).
    NoTarget,
    /// The key cannot be read here (not in this kernel, a module not loaded): nothing to set.
    Unreadable,
    /// No value can be computed from the current one and the target: set it by hand.
    Unknown(String),
}

/// The value `apply` and `export` set for a sysctl check: one rule for both. The current value
/// is the whole one `gather` read (all of tcp_rmem, not the checked field).
pub fn sysctl_value(def: &CheckDef, f: &Finding, facts: &HostFacts) -> SysctlValue {
    let Source::Sysctl(key) = &def.check.source else {
        return SysctlValue::NoTarget;
    };
    let Some(target) = &f.target else {
        return SysctlValue::NoTarget;
    };
    let Some(Reading::Value(full)) = facts.sysctls.get(key) else {
        return SysctlValue::Unreadable;
    };
    match desired(def.check.compare, full, def.check.field, target) {
        Some(value) => SysctlValue::Set {
            current: full.clone(),
            value,
        },
        None => SysctlValue::Unknown(format!(
            "{key}: cannot compute a value from '{full}' and target '{target}'; set it by hand"
        )),
    }
}

/// Every host setting the profile asks for, with the value for this host (never lower than
/// what it has): what `wstune export` renders for other tools. Unlike [`plan`] it lists
/// settings that already pass, since an exported file is installed on other hosts too.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// (check id, key, value, scope) in catalog order.
    pub sysctls: Vec<(String, String, String, catalog::Scope)>,
    /// The per-process open-file limit the server needs (soft = hard).
    pub nofile: Option<u64>,
    /// What could not be exported, and why; and the boot files on this host that override
    /// wstune's sysctl.d file (as `apply` says).
    pub notes: Vec<String>,
    /// How each key's check compares (by key): an exported script or play keeps "never lower"
    /// on the host where it runs, which may already have more than the host it was made on.
    pub rules: std::collections::BTreeMap<String, Rule>,
}

/// How an exported key compares on the host where it is set (see [`Settings::rules`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub compare: catalog::Compare,
    /// The fields judged, when checks judge some fields of a multi-value key (0-based;
    /// tcp_mem's pressure and high marks are 1 and 2); empty when the whole value is.
    pub fields: Vec<usize>,
    /// A ceiling's floor from a second check of the same value (tcp_fin_timeout: at most 30,
    /// not under 25): a host below it is raised to it, one between is kept.
    pub floor: Option<i64>,
}

/// [`Settings`] from `findings` (evaluate's output for `facts` first) and the same `facts`.
pub fn settings(catalog: &Catalog, findings: &[Finding], facts: &HostFacts) -> Settings {
    let mut s = Settings::default();
    for (i, def) in catalog.checks.iter().enumerate() {
        let Some(f) = findings
            .iter()
            .find(|f| f.key.is_some_and(|k| k.check == i && !k.boot && !k.per_nic))
        else {
            continue;
        };
        // A check this host's role does not need is not exported either, nor advice (an
        // info check of a setting with a known default, which apply leaves alone too).
        if def.role_skip.is_some()
            || (f.severity == catalog::Severity::Info && def.default.is_some())
        {
            continue;
        }
        match &def.check.source {
            // A second check of the same key (a floor beside a ceiling) narrows the value the
            // first one chose; the key is written once.
            Source::Sysctl(key) if s.sysctls.iter().any(|(_, k, _, _)| k == key) => {
                let slot = s.sysctls.iter_mut().find(|(_, k, _, _)| k == key).unwrap();
                let now = Value::parse_kernel(&slot.2);
                // Another field of the key judged the same way (tcp_mem's pressure beside its
                // high mark) is kept "never lower" on the target host too.
                if let (Some(rule), Some(field)) = (s.rules.get_mut(key), def.check.field) {
                    if rule.compare == def.check.compare
                        && !rule.fields.is_empty()
                        && !rule.fields.contains(&field)
                    {
                        rule.fields.push(field);
                        rule.fields.sort_unstable();
                    }
                }
                // A floor beside a ceiling of the same value: the host keeps its own value
                // only between the two.
                if let (Some(rule), Some(Value::Num(floor))) = (s.rules.get_mut(key), &f.target) {
                    if rule.compare == catalog::Compare::AtMost
                        && def.check.compare == catalog::Compare::AtLeast
                        && rule.fields.is_empty()
                        && def.check.field.is_none()
                    {
                        rule.floor = Some(*floor);
                    }
                }
                if let Some(v) = f
                    .target
                    .as_ref()
                    .and_then(|t| desired(def.check.compare, &now, def.check.field, t))
                {
                    slot.2 = kernel_text(&v);
                }
            }
            Source::Sysctl(key) => match sysctl_value(def, f, facts) {
                SysctlValue::Set { value, .. } => {
                    s.sysctls.push((
                        def.check.id.clone(),
                        key.clone(),
                        kernel_text(&value),
                        def.check.scope,
                    ));
                    s.rules.insert(
                        key.clone(),
                        Rule {
                            compare: def.check.compare,
                            fields: def.check.field.into_iter().collect(),
                            floor: None,
                        },
                    );
                    if let Some(e) = facts.boot.set_after(SYSCTL_FILE, key) {
                        s.notes.push(format!(
                            "{key}: {} sets {} and is applied after {SYSCTL_FILE}, so on the host this was computed on (and any like it) it wins at boot over this value: change or remove that line",
                            e.location(),
                            e.value
                        ));
                    }
                }
                SysctlValue::Unreadable => s.notes.push(format!(
                    "{key}: not readable on this host (not in this kernel, or its module is not loaded); not exported"
                )),
                SysctlValue::Unknown(note) => s.notes.push(note),
                SysctlValue::NoTarget => {}
            },
            Source::Rlimit(r) if r.process == Process::Current => {
                if let Some(Value::Num(target)) = f.target {
                    // Never lower: a shell already above the target keeps its limit.
                    // (An unlimited one, i64::MAX, cannot be written to a file: the target is.)
                    let current = f
                        .current
                        .as_ref()
                        .and_then(Value::as_num)
                        .filter(|&c| c != i64::MAX)
                        .unwrap_or(0);
                    let n = target.max(current).max(0) as u64;
                    s.nofile = Some(s.nofile.map_or(n, |m| m.max(n)));
                }
            }
            _ => {}
        }
    }
    s
}

/// A value as the kernel accepts it back: numbers in full ("no limit", stored as i64::MAX,
/// prints as `unlimited` for people but must be written as a number).
pub fn kernel_text(v: &Value) -> String {
    match v {
        Value::Num(n) => n.to_string(),
        other => other.to_string(),
    }
}

fn fmt_limit(v: Option<i64>) -> String {
    match v {
        Some(i64::MAX) => "unlimited".into(),
        Some(n) => n.to_string(),
        None => "?".into(),
    }
}

/// Our file's existing lines with `updates` applied (existing keys keep their place).
pub fn merge_sysctl_lines(existing: &str, updates: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = existing
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    for (k, v) in updates {
        match out.iter_mut().find(|(ek, _)| ek == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

/// The first line of every file apply writes whole.
const MANAGED: &str = "# Managed by wstune apply: this file is rewritten whole. `wstune rollback` restores what it replaced.\n";

pub fn render_sysctl_file(lines: &[(String, String)]) -> String {
    format!("{MANAGED}{}", sysctl_lines(lines))
}

/// The `KEY = VALUE` lines of a sysctl.d file (apply's file, export's file).
pub fn sysctl_lines<K: AsRef<str>, V: AsRef<str>>(lines: &[(K, V)]) -> String {
    lines
        .iter()
        .map(|(k, v)| format!("{} = {}\n", k.as_ref(), v.as_ref()))
        .collect()
}

pub fn render_limits_file(nofile: u64) -> String {
    format!("{MANAGED}{}", limits_lines(nofile))
}

/// The nofile lines of a limits.d file (apply's file, export's file).
pub fn limits_lines(nofile: u64) -> String {
    // `*` does not match root in pam_limits, hence the explicit root lines.
    format!("* soft nofile {nofile}\n* hard nofile {nofile}\nroot soft nofile {nofile}\nroot hard nofile {nofile}\n")
}

pub fn render_unit_dropin(nofile: u64) -> String {
    format!(
        "# Managed by wstune apply. `wstune rollback` removes it.\n{}",
        dropin_body(Some(nofile))
    )
}

/// The body of a systemd drop-in setting the open-file limit (apply's drop-in, export's).
pub fn dropin_body(nofile: Option<u64>) -> String {
    match nofile {
        Some(n) => format!("[Service]\nLimitNOFILE={n}\n"),
        None => "[Service]\n".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::facts::{BootConfig, Instance};
    use crate::catalog::Compare;
    use crate::host::HostInfo;
    use std::collections::BTreeMap;

    /// A plan from hand-made facts, with no backend anywhere: the catalog, facts written out
    /// here, the pure evaluator, the pure plan.
    mod pure {
        use super::*;
        use crate::catalog::eval;

        fn catalog() -> (Catalog, BTreeMap<String, Value>) {
            let vars = crate::profile::load("100k").unwrap().profile.variables();
            let known = vars.keys().cloned().collect();
            let c = catalog::load(crate::host::Platform::Linux, None, &known).unwrap();
            (c, vars)
        }

        /// Facts where each named sysctl has a value and the rest of the catalog is missing.
        fn facts(c: &Catalog, sysctls: &[(&str, Value)], nofile: Option<i64>) -> HostFacts {
            let mut f = HostFacts::empty(HostInfo::default());
            f.vars.insert("host.cpus".into(), Value::Num(2));
            f.vars.insert("host.page_size".into(), Value::Num(4096));
            f.vars.insert("host.mem_bytes".into(), Value::Num(8 << 30));
            f.boot = BootConfig {
                skipped: vec![],
                files: vec![],
                any: true,
            };
            for (k, v) in sysctls {
                f.sysctls.insert(k.to_string(), Reading::Value(v.clone()));
            }
            for (i, def) in c.checks.iter().enumerate() {
                let reading = match &def.check.source {
                    Source::Sysctl(key) => match (f.sysctls.get(key), def.check.field) {
                        (Some(Reading::Value(Value::List(l))), Some(n)) => {
                            Reading::Value(Value::Num(l[n]))
                        }
                        (Some(r), _) => r.clone(),
                        (None, _) => Reading::Missing("not here".into()),
                    },
                    Source::Rlimit(r) if r.process == Process::Current => match nofile {
                        Some(n) => Reading::Value(Value::Num(n)),
                        None => Reading::Missing("not here".into()),
                    },
                    _ => Reading::Missing("not here".into()),
                };
                f.instances.push(Instance {
                    check: i,
                    nic: None,
                    reading,
                    after: None,
                    boot: None,
                    defaulted: false,
                });
            }
            f
        }

        /// Set each sysctl instance's boot entry from the facts' boot configuration.
        fn with_boot(c: &Catalog, mut f: HostFacts) -> HostFacts {
            for inst in &mut f.instances {
                let def = &c.checks[inst.check];
                if let (true, Source::Sysctl(key)) = (def.has_boot_view(), &def.check.source) {
                    inst.boot = Some(f.boot.entry(key));
                }
            }
            f
        }

        fn plan_of(c: &Catalog, vars: &BTreeMap<String, Value>, f: &HostFacts) -> Plan {
            let findings = eval::evaluate(c, vars, f);
            let scope = Scope {
                runtime: true,
                persist: true,
            };
            plan(c, &findings, f, scope)
        }

        #[test]
        fn a_low_sysctl_is_raised_now_and_persisted_in_one_rendered_file() {
            let (c, vars) = catalog();
            let mut f = facts(&c, &[("net.core.somaxconn", Value::Num(4096))], None);
            f.owned.insert(
                SYSCTL_FILE.into(),
                render_sysctl_file(&[("vm.swappiness".into(), "1".into())]),
            );
            let f = with_boot(&c, f);
            let p = plan_of(&c, &vars, &f);
            let ops: Vec<&Op> = p.actions.iter().map(|a| &a.op).collect();
            assert!(ops.contains(&&Op::Sysctl {
                key: "net.core.somaxconn".into(),
                value: "65535".into()
            }));
            assert!(ops.contains(&&Op::SysctlFile {
                key: "net.core.somaxconn".into(),
                value: "65535".into()
            }));
            // One file, merged into what our file already holds, rendered once.
            assert_eq!(
                p.files,
                vec![(
                    SYSCTL_FILE.to_string(),
                    render_sysctl_file(&[
                        ("vm.swappiness".into(), "1".into()),
                        ("net.core.somaxconn".into(), "65535".into())
                    ])
                )]
            );
        }

        /// Findings are joined to checks by their key, not their position: a finding from
        /// elsewhere first (a proxy's, the journal's) and the rest in another order give the same
        /// plan and settings.
        #[test]
        fn findings_join_by_key_not_by_position() {
            let (c, vars) = catalog();
            let f = facts(&c, &[("net.core.somaxconn", Value::Num(4096))], None);
            let f = with_boot(&c, f);
            let findings = eval::evaluate(&c, &vars, &f);
            let scope = Scope {
                runtime: true,
                persist: true,
            };
            let want = plan(&c, &findings, &f, scope);
            assert!(!want.actions.is_empty());
            let mut shuffled = findings.clone();
            shuffled.reverse();
            let mut foreign = shuffled[0].clone();
            foreign.id = "lb.haproxy.maxconn".into();
            foreign.status = Status::Fail;
            foreign.key = None;
            shuffled.insert(0, foreign);
            assert_eq!(plan(&c, &shuffled, &f, scope), want);
            assert_eq!(
                settings(&c, &shuffled, &f).sysctls,
                settings(&c, &findings, &f).sysctls
            );
        }

        #[test]
        fn a_later_boot_file_is_named_not_overridden() {
            let (c, vars) = catalog();
            let mut f = facts(&c, &[("net.core.somaxconn", Value::Num(65535))], None);
            f.boot.files.push((
                "/etc/sysctl.d/99-x.conf".into(),
                "net.core.somaxconn = 1024\n".into(),
            ));
            let f = with_boot(&c, f);
            let p = plan_of(&c, &vars, &f);
            assert!(p.actions.iter().all(|a| a.setting != "net.core.somaxconn"));
            assert!(p.files.is_empty());
            assert!(
                p.notes.iter().any(|n| n.starts_with(
                    "net.core.somaxconn: /etc/sysctl.d/99-x.conf:1 sets 1024 and is applied after"
                )),
                "{:?}",
                p.notes
            );
        }

        #[test]
        fn a_limits_file_that_already_says_it_is_left_alone() {
            let (c, vars) = catalog();
            let f = facts(&c, &[], Some(1024));
            let p = plan_of(&c, &vars, &f);
            let nofile = p
                .actions
                .iter()
                .find_map(|a| match a.op {
                    Op::LimitsFile { nofile } => Some(nofile),
                    _ => None,
                })
                .expect("a low nofile is persisted for PAM logins");
            assert_eq!(
                p.files,
                vec![(LIMITS_FILE.to_string(), render_limits_file(nofile))]
            );

            let mut f = f;
            f.owned
                .insert(LIMITS_FILE.into(), render_limits_file(nofile));
            let p = plan_of(&c, &vars, &f);
            assert!(p.actions.is_empty(), "{:?}", p.actions);
            assert!(p.files.is_empty());
            assert!(p.notes[0].contains("already sets nofile"), "{:?}", p.notes);
        }
    }

    #[test]
    fn desired_never_lowers_a_deliberate_value() {
        assert_eq!(
            desired(
                Compare::AtLeast,
                &Value::Num(4096),
                None,
                &Value::Num(65535)
            ),
            Some(Value::Num(65535))
        );
        assert_eq!(
            desired(
                Compare::AtLeast,
                &Value::Num(100000),
                None,
                &Value::Num(65535)
            ),
            Some(Value::Num(100000))
        );
        assert_eq!(
            desired(Compare::AtMost, &Value::Num(60), None, &Value::Num(15)),
            Some(Value::Num(15))
        );
        assert_eq!(
            desired(Compare::AtMost, &Value::Num(5), None, &Value::Num(15)),
            Some(Value::Num(5))
        );
        assert_eq!(
            desired(Compare::Equal, &Value::Num(2), None, &Value::Num(1)),
            Some(Value::Num(1))
        );
    }

    #[test]
    fn desired_keeps_the_other_fields_and_widens_ranges() {
        let mem = Value::List(vec![100, 200, 300]);
        assert_eq!(
            desired(Compare::AtLeast, &mem, Some(2), &Value::Num(1000)),
            Some(Value::List(vec![100, 200, 1000]))
        );
        let rmem = Value::List(vec![4096, 131072, 6291456]);
        assert_eq!(
            desired(Compare::AtMost, &rmem, Some(1), &Value::Num(11792)),
            Some(Value::List(vec![4096, 11792, 6291456]))
        );
        let ports = Value::List(vec![32768, 60999]);
        assert_eq!(
            desired(
                Compare::Covers,
                &ports,
                None,
                &Value::List(vec![10000, 65535])
            ),
            Some(Value::List(vec![10000, 65535]))
        );
        assert_eq!(
            desired(
                Compare::Covers,
                &Value::List(vec![1024, 60999]),
                None,
                &Value::List(vec![10000, 65535])
            ),
            Some(Value::List(vec![1024, 65535]))
        );
        assert_eq!(
            desired(Compare::AtLeast, &mem, Some(7), &Value::Num(1)),
            None
        );
    }

    #[test]
    fn our_file_is_merged_not_duplicated() {
        let existing =
            render_sysctl_file(&[("a.b".into(), "1".into()), ("c.d".into(), "2".into())]);
        let merged = merge_sysctl_lines(
            &existing,
            &[("c.d".into(), "3".into()), ("e.f".into(), "4 5".into())],
        );
        assert_eq!(
            merged,
            vec![
                ("a.b".into(), "1".into()),
                ("c.d".into(), "3".into()),
                ("e.f".into(), "4 5".into())
            ]
        );
    }
}
