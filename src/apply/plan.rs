//! From findings to actions: one change per failing or warning check that wstune knows how to
//! make, derived from the check's source (a sysctl, an fd limit, a unit, a registry value). Pure
//! but for reading the full current values of multi-value sysctls through the backend.
//!
//! Rules: never lower what an operator raised (a `>=` setting persists the higher of current
//! and target); change at runtime only what fails now; persist whatever would not survive a
//! reboot (including a value met now whose boot default is unknown); and never write a line
//! that a later boot file would override anyway (say so instead).

use crate::catalog::eval::{Finding, Status};
use crate::catalog::{self, Catalog, CheckDef, Compare, LimitKind, Process, RegType, Source};
use crate::gather::{boot_entry_with, split_boot_entry, sysctl_path, Reading};
use crate::host::Backend;
use crate::value::Value;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The sysctl file wstune owns.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/60-wstune.conf";
/// The PAM limits file wstune owns.
pub const LIMITS_FILE: &str = "/etc/security/limits.d/60-wstune.conf";

pub fn unit_dropin(unit: &str) -> String {
    format!("/etc/systemd/system/{unit}.d/60-wstune.conf")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[serde(tag = "kind", rename_all = "snake_case")]
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
        }
    }
    pub fn is_runtime(&self) -> bool {
        matches!(
            self,
            Op::Sysctl { .. } | Op::Prlimit { .. } | Op::Registry { .. }
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// What wstune will not do, and why (a boot file it does not own, a restart needed).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct Scope {
    pub runtime: bool,
    pub persist: bool,
}

/// Build the plan. `findings` come from evaluating `catalog` on this backend.
pub fn plan(
    catalog: &Catalog,
    findings: &[Finding],
    backend: &dyn Backend,
    scope: Scope,
    unit: Option<&str>,
    pid: Option<u32>,
) -> Plan {
    let by_id: BTreeMap<&str, &Finding> = findings.iter().map(|f| (f.id.as_str(), f)).collect();
    let wrong = |f: &Finding| matches!(f.status, Status::Fail | Status::Warn);
    let mut p = Plan::default();
    let mut persist_sysctls: Vec<(String, String, String, String)> = Vec::new(); // (check, key, from, to)
    let mut nofile_persist: Option<(String, u64, Option<String>)> = None;

    for def in &catalog.checks {
        let id = def.check.id.as_str();
        let Some(f) = by_id.get(id) else { continue };
        match &def.check.source {
            Source::Sysctl(key) => {
                let (full, desired) = match sysctl_value(def, f, backend) {
                    SysctlValue::Set { current, value } => (current, value),
                    SysctlValue::Unknown(note) => {
                        p.notes.push(note);
                        continue;
                    }
                    SysctlValue::NoTarget | SysctlValue::Unreadable => continue,
                };
                let runtime_wrong = wrong(f);
                let boot_wrong = by_id.get(format!("{id}.boot").as_str()).map(|b| b.status);
                if scope.runtime && runtime_wrong && desired != full {
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
                let persist = match boot_wrong {
                    Some(Status::Fail | Status::Warn) => true,
                    // Not set in any boot file, and the kernel computes its default at boot
                    // (from RAM): nobody can say the next boot meets the target, so the value
                    // the profile needs is written, whether apply raises it now or an operator
                    // already did by hand (a reboot would silently lower that).
                    Some(Status::Info) => true,
                    _ => false,
                };
                if scope.persist && persist && def.check.boot != Some(false) {
                    let from = by_id
                        .get(format!("{id}.boot").as_str())
                        .and_then(|b| b.current.as_ref())
                        .map(|v| v.to_string());
                    persist_sysctls.push((
                        id.into(),
                        key.clone(),
                        from.unwrap_or_else(|| "(not set)".into()),
                        kernel_text(&desired),
                    ));
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
                        let (soft, hard) = current_nofile(findings).unwrap_or((0, 0));
                        let (soft, hard) = (soft.max(target), hard.max(target));
                        p.actions.push(Action {
                            check: id.into(),
                            setting: format!("nofile of process {pid} ({:?})", r.limit)
                                .to_lowercase(),
                            from: Some(format!(
                                "{}:{}",
                                fmt_limit(current_of(findings, LimitKind::Soft)),
                                fmt_limit(current_of(findings, LimitKind::Hard))
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

    // Persisted sysctls only if our file would really win at boot.
    if !persist_sysctls.is_empty() {
        let mut lines: Vec<(String, String)> = persist_sysctls
            .iter()
            .map(|(_, k, _, v)| (k.clone(), v.clone()))
            .collect();
        if let Ok(existing) = backend.read(SYSCTL_FILE) {
            lines = merge_sysctl_lines(&existing, &lines);
        }
        let text = render_sysctl_file(&lines);
        for (check, key, from, to) in persist_sysctls {
            match boot_entry_with(backend, &key, Some((SYSCTL_FILE, &text))) {
                Reading::Value(Value::Text(e))
                    if split_boot_entry(&e)
                        .is_some_and(|(loc, _)| !loc.starts_with(SYSCTL_FILE)) =>
                {
                    let (loc, v) = split_boot_entry(&e).unwrap();
                    p.notes.push(format!(
                        "{key}: {loc} sets {v} and is applied after {SYSCTL_FILE}; wstune does not edit files it does not own: change or remove that line"
                    ));
                }
                _ => p.actions.push(Action {
                    check,
                    setting: key.clone(),
                    from: Some(from),
                    to: to.clone(),
                    op: Op::SysctlFile { key, value: to },
                }),
            }
        }
    }
    // A file that already says exactly this is done, even if the running processes it will
    // apply to (new logins, a restarted unit) do not show it yet.
    let written = |path: &str, text: &str| backend.read(path).is_ok_and(|t| t == text);
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
    p
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

/// The value `apply` and `export` set for a sysctl check: one rule for both.
pub fn sysctl_value(def: &CheckDef, f: &Finding, backend: &dyn Backend) -> SysctlValue {
    let Source::Sysctl(key) = &def.check.source else {
        return SysctlValue::NoTarget;
    };
    let Some(target) = &f.target else {
        return SysctlValue::NoTarget;
    };
    let Ok(full) = backend
        .read(&sysctl_path(key))
        .map(|t| Value::parse_kernel(&t))
    else {
        return SysctlValue::Unreadable;
    };
    match desired(def.check.compare, &full, def.check.field, target) {
        Some(value) => SysctlValue::Set {
            current: full,
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
    /// What could not be exported, and why.
    pub notes: Vec<String>,
}

pub fn settings(catalog: &Catalog, findings: &[Finding], backend: &dyn Backend) -> Settings {
    let by_id: BTreeMap<&str, &Finding> = findings.iter().map(|f| (f.id.as_str(), f)).collect();
    let mut s = Settings::default();
    for def in &catalog.checks {
        let Some(f) = by_id.get(def.check.id.as_str()) else {
            continue;
        };
        match &def.check.source {
            Source::Sysctl(key) => match sysctl_value(def, f, backend) {
                SysctlValue::Set { value, .. } => s.sysctls.push((
                    def.check.id.clone(),
                    key.clone(),
                    kernel_text(&value),
                    def.check.scope,
                )),
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

fn current_of(findings: &[Finding], kind: LimitKind) -> Option<i64> {
    let id = match kind {
        LimitKind::Soft => "linux.pid.nofile.soft",
        LimitKind::Hard => "linux.pid.nofile.hard",
    };
    findings
        .iter()
        .find(|f| f.id == id)
        .and_then(|f| f.current.as_ref())
        .and_then(Value::as_num)
}

fn current_nofile(findings: &[Finding]) -> Option<(u64, u64)> {
    Some((
        current_of(findings, LimitKind::Soft)? as u64,
        current_of(findings, LimitKind::Hard)? as u64,
    ))
}

fn fmt_limit(v: Option<i64>) -> String {
    match v {
        Some(i64::MAX) => "unlimited".into(),
        Some(n) => n.to_string(),
        None => "?".into(),
    }
}

/// The value to set: the target, except that a `>=` setting keeps a higher current value and a
/// `<=` one a lower (never undo an operator's deliberate choice), and a range is widened.
/// `field` replaces one value of a multi-value setting and keeps the others.
pub fn desired(
    compare: Compare,
    current: &Value,
    field: Option<usize>,
    target: &Value,
) -> Option<Value> {
    let pick = |c: i64, t: i64| match compare {
        Compare::AtLeast => Some(c.max(t)),
        Compare::AtMost => Some(c.min(t)),
        Compare::Equal => Some(t),
        _ => None,
    };
    match (current, field, target) {
        (Value::List(list), Some(i), Value::Num(t)) => {
            let mut list = list.clone();
            let slot = list.get_mut(i)?;
            *slot = pick(*slot, *t)?;
            Some(Value::List(list))
        }
        (Value::List(c), None, Value::List(t))
            if compare == Compare::Covers && c.len() == 2 && t.len() == 2 =>
        {
            Some(Value::List(vec![c[0].min(t[0]), c[1].max(t[1])]))
        }
        (Value::Num(c), None, Value::Num(t)) => pick(*c, *t).map(Value::Num),
        _ => None,
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

pub fn render_sysctl_file(lines: &[(String, String)]) -> String {
    let mut s = String::from("# Managed by wstune apply: this file is rewritten whole. `wstune rollback` restores what it replaced.\n");
    for (k, v) in lines {
        s.push_str(&format!("{k} = {v}\n"));
    }
    s
}

pub fn render_limits_file(nofile: u64) -> String {
    // `*` does not match root in pam_limits, hence the explicit root lines.
    format!(
        "# Managed by wstune apply: this file is rewritten whole. `wstune rollback` restores what it replaced.\n\
         * soft nofile {nofile}\n* hard nofile {nofile}\nroot soft nofile {nofile}\nroot hard nofile {nofile}\n"
    )
}

pub fn render_unit_dropin(nofile: u64) -> String {
    format!("# Managed by wstune apply. `wstune rollback` removes it.\n[Service]\nLimitNOFILE={nofile}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
