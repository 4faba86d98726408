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
//!
//! Beside this file: the open-file limits ([`boot_nr_open`], the `--pid` process's limits),
//! [`settings()`] (what export renders: every setting, passing or not) and the texts of the files
//! apply writes ([`render_sysctl_file`] and its siblings).

mod nofile;
mod render;
mod settings;
#[cfg(test)]
mod tests;
use crate::catalog::eval::{Finding, Status};
use crate::catalog::facts::HostFacts;
use crate::catalog::{
    self, Catalog, CheckDef, Process, RegistrySource, Resource, RlimitSource, Source,
};
use crate::host::procfs::sysctl_path;
use crate::host::RegType;
use crate::value::Value;
use serde::{Deserialize, Serialize};

pub use crate::catalog::eval::desired;
pub use crate::host::owned::{unit_dropin, LIMITS_FILE, SYSCTL_FILE};

pub use nofile::{
    boot_nr_open, cap_nofile, cap_nofile_without_sysctl_file, nr_open_without_ours, KERNEL_NR_OPEN,
};
use nofile::{fmt_limit, PidNofile};
pub use render::{
    dropin_body, kernel_text, limits_lines, merge_sysctl_lines, render_limits_file,
    render_sysctl_file, render_unit_dropin, sysctl_lines,
};
pub use settings::{settings, sysctl_value, Rule, Settings, SysctlValue};
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
///
/// Two passes: the walk over the checks decides each change on its own ([`Draft`]); then the
/// boot files have their say (a later file wins, nr_open caps nofile, a file already written
/// is done) and the files are rendered.
pub fn plan(catalog: &Catalog, findings: &[Finding], facts: &HostFacts, scope: Scope) -> Plan {
    // One finding per check and view, joined on the key evaluate gave it; per-NIC checks are
    // not changed by apply.
    let finding = |check: usize, boot: bool| {
        findings.iter().find(|f| {
            f.key
                .is_some_and(|k| k.check == check && k.boot == boot && !k.per_nic)
        })
    };
    let mut d = Draft {
        facts,
        scope,
        p: Plan::default(),
        persist_sysctls: Vec::new(),
        nofile_persist: None,
    };
    let pid_nofile = PidNofile::of(catalog, &finding);

    for (i, def) in catalog.checks.iter().enumerate() {
        let Some(f) = finding(i, false) else { continue };
        match &def.check.source {
            Source::Sysctl(key) => d.sysctl(def, key, f, finding(i, true)),
            // Only the fd limit is planned: the thread limits (nproc, stack) are the operator's.
            Source::Rlimit(r) if wrong(f) && r.resource == Resource::Nofile => {
                d.nofile(&def.check.id, r, f, &pid_nofile)
            }
            // The drop-in apply writes holds LimitNOFILE; other properties (TasksMax) are
            // the fix text's to set.
            Source::Systemd(prop) if prop == "LimitNOFILE" && wrong(f) && scope.persist => {
                d.unit_nofile(&def.check.id, f)
            }
            Source::Registry(r) if wrong(f) && scope.runtime => d.registry(def, r, f),
            _ => {}
        }
    }

    narrow_shared_keys(catalog, findings, &mut d.p.actions, &mut d.persist_sysctls);
    let sysctl_lines = d.sysctl_file();
    d.cap_nofile(&sysctl_lines);
    d.skip_written();
    d.finish()
}

/// A check that fails or warns: only those are changed.
fn wrong(f: &Finding) -> bool {
    matches!(f.status, Status::Fail | Status::Warn)
}

/// The plan while the checks are walked: the actions and notes so far, and the boot changes
/// held back until every check has spoken (a shared key is narrowed, a later boot file may win).
struct Draft<'a> {
    facts: &'a HostFacts,
    scope: Scope,
    p: Plan,
    /// Sysctls to write to our boot file, once the boot view says our file would win.
    persist_sysctls: Vec<Persist>,
    /// The PAM logins' nofile (check id, value, current), capped and rendered at the end.
    nofile_persist: Option<(String, u64, Option<String>)>,
}

impl Draft<'_> {
    /// A sysctl: changed now when it fails now, and persisted when the next boot would not
    /// meet the target.
    fn sysctl(&mut self, def: &CheckDef, key: &str, f: &Finding, boot: Option<&Finding>) {
        let id = def.check.id.as_str();
        let (full, desired) = match sysctl_value(def, f, self.facts) {
            SysctlValue::Set { current, value } => (current, value),
            SysctlValue::Unknown(note) => {
                self.p.notes.push(note);
                return;
            }
            SysctlValue::NoTarget | SysctlValue::Unreadable => return,
        };
        if self.scope.runtime && wrong(f) && desired != full {
            self.p.actions.push(Action {
                check: id.into(),
                setting: key.to_string(),
                from: Some(full.to_string()),
                to: desired.to_string(),
                op: Op::Sysctl {
                    key: key.to_string(),
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
        if self.scope.persist && persist && def.check.boot != Some(false) {
            let from = boot.and_then(|b| b.current.as_ref()).map(|v| v.to_string());
            self.persist_sysctls.push(Persist {
                check: id.into(),
                key: key.to_string(),
                from: from.unwrap_or_else(|| "(not set)".into()),
                to: kernel_text(&desired),
            });
        }
    }

    /// The fd limit: the PAM logins' (persisted, decided at the end) or the `--pid` process's
    /// (raised now, never lowered).
    fn nofile(&mut self, id: &str, r: &RlimitSource, f: &Finding, pid_nofile: &PidNofile) {
        let Some(Value::Num(target)) = f.target.clone() else {
            return;
        };
        let target = target as u64;
        match r.process {
            Process::Current if self.scope.persist && self.nofile_persist.is_none() => {
                self.nofile_persist =
                    Some((id.into(), target, f.current.as_ref().map(|v| v.to_string())));
            }
            Process::Pid if self.scope.runtime => {
                let Some(pid) = self.facts.request.pid else {
                    return;
                };
                if self
                    .p
                    .actions
                    .iter()
                    .any(|a| matches!(a.op, Op::Prlimit { .. }))
                {
                    return;
                }
                let (soft, hard) = pid_nofile.both().unwrap_or((0, 0));
                let (soft, hard) = (soft.max(target), hard.max(target));
                self.p.actions.push(Action {
                    check: id.into(),
                    setting: format!("nofile of process {pid} ({:?})", r.limit).to_lowercase(),
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

    /// The `--unit`'s LimitNOFILE, in a drop-in.
    fn unit_nofile(&mut self, id: &str, f: &Finding) {
        let (Some(unit), Some(Value::Num(target))) =
            (self.facts.request.unit.as_deref(), f.target.clone())
        else {
            return;
        };
        self.p.actions.push(Action {
            check: id.into(),
            setting: format!("LimitNOFILE of {unit}"),
            from: f.current.as_ref().map(|v| v.to_string()),
            to: target.to_string(),
            op: Op::UnitDropIn {
                unit: unit.to_string(),
                nofile: target as u64,
            },
        });
        self.p.notes.push(format!(
            "{unit} gets its new LimitNOFILE only when systemd rereads its units and the unit restarts: systemctl daemon-reload && systemctl restart {unit}"
        ));
    }

    /// A Windows registry value, read at boot.
    fn registry(&mut self, def: &CheckDef, r: &RegistrySource, f: &Finding) {
        let Some(target) = &f.target else { return };
        // Windows' own value for an absent one, where it meets the target, rather than
        // the bare target: TcpNumConnections goes back to its default and maximum
        // (16,777,214) instead of a cap at the profile's connections, as its fix says.
        let target = match &def.default {
            Some(d @ Value::Num(_))
                if catalog::eval::meets(def.check.compare, d, target) == Ok(true) =>
            {
                d
            }
            _ => target,
        };
        let data = match (
            target,
            r.names
                .iter()
                .find(|(_, n)| Value::Text((*n).clone()) == *target),
        ) {
            (_, Some((raw, _))) => raw.clone(),
            (Value::Num(n), None) => n.to_string(),
            _ => return,
        };
        self.p.actions.push(Action {
            check: def.check.id.clone(),
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
        self.p.notes.push(format!(
            "{}: Windows reads it at boot; it takes effect after a restart",
            r.value
        ));
    }

    /// Our sysctl file: the held-back sysctls that would really win at boot (a line for the key
    /// in a file applied after ours would override it), merged into what the file says now.
    /// Returns the lines written (key, value).
    fn sysctl_file(&mut self) -> Vec<(String, String)> {
        let (facts, p) = (self.facts, &mut self.p);
        if !facts.boot.skipped.is_empty() && self.scope.persist {
            p.notes.push(format!(
                "the boot view {}; a line there may override {SYSCTL_FILE}",
                facts.boot.skipped_note()
            ));
        }
        let mut sysctl_lines: Vec<(String, String)> = Vec::new();
        for s in std::mem::take(&mut self.persist_sysctls) {
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
        sysctl_lines
    }

    /// A nofile limit above the fs.nr_open the host will have after the next boot makes every
    /// login's (or the unit's) setrlimit fail with EPERM: judge it against that nr_open (ours
    /// when this plan writes it and it wins, else the boot file that sets it last, else the
    /// kernel's default), and lower it to it, saying why.
    fn cap_nofile(&mut self, sysctl_lines: &[(String, String)]) {
        let Some(cap) = boot_nr_open(self.facts, sysctl_lines) else {
            return;
        };
        let p = &mut self.p;
        let mut capped = |nofile: &mut u64, what: &str| {
            p.notes
                .extend(cap_nofile(nofile, &cap, what, "apply again"));
        };
        if let Some((_, nofile, _)) = &mut self.nofile_persist {
            capped(nofile, LIMITS_FILE);
        }
        for a in &mut p.actions {
            if let Op::UnitDropIn { unit, nofile } = &mut a.op {
                capped(nofile, &unit_dropin(unit));
                a.to = nofile.to_string();
            }
        }
    }

    /// A file that already says exactly this is done, even if the running processes it will
    /// apply to (new logins, a restarted unit) do not show it yet.
    fn skip_written(&mut self) {
        let facts = self.facts;
        let written = |path: &str, text: &str| facts.owned.get(path).is_some_and(|t| t == text);
        self.p.actions.retain(|a| match &a.op {
            Op::UnitDropIn { unit, nofile } => {
                !written(&unit_dropin(unit), &render_unit_dropin(*nofile))
            }
            _ => true,
        });
        if let Some((_, nofile, _)) = &self.nofile_persist {
            if written(LIMITS_FILE, &render_limits_file(*nofile)) {
                self.p.notes.push(format!(
                    "{LIMITS_FILE} already sets nofile {nofile}: it applies at the next login"
                ));
                self.nofile_persist = None;
            }
        }
    }

    /// The limits file's action last, then the other files, in action order (the journal
    /// restores in reverse).
    fn finish(mut self) -> Plan {
        let p = &mut self.p;
        if let Some((check, nofile, from)) = self.nofile_persist {
            p.actions.push(Action {
                check,
                setting: "nofile (PAM logins)".into(),
                from,
                to: nofile.to_string(),
                op: Op::LimitsFile { nofile },
            });
            p.notes.push("limits.d applies to new PAM logins (ssh, su), not to running shells or systemd services (use --unit)".into());
        }
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
        self.p
    }
}
