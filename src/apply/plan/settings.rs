//! Every host setting the profile asks for, with this host's value: what `wstune export`
//! renders, passing or not, by the same rule as the plan ([`sysctl_value`]).

use super::{
    boot_nr_open, cap_nofile, cap_nofile_without_sysctl_file, desired, kernel_text,
    nr_open_without_ours, SYSCTL_FILE,
};
use crate::catalog::eval::Finding;
use crate::catalog::facts::{HostFacts, Reading};
use crate::catalog::{self, Catalog, CheckDef, Process, Resource, Source};
use crate::value::Value;

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
/// what it has): what `wstune export` renders for other tools. Unlike [`plan`](fn@super::plan) it lists
/// settings that already pass, since an exported file is installed on other hosts too.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// (check id, key, value, scope) in catalog order.
    pub sysctls: Vec<(String, String, String, catalog::Scope)>,
    /// The per-process open-file limit the server needs (soft = hard), for a format that
    /// carries the sysctl file too (ansible, kubernetes, json): never above the fs.nr_open
    /// this host boots with once that file is installed.
    pub nofile: Option<u64>,
    /// Why [`Settings::nofile`] is lower than the profile asks, when it is.
    pub nofile_note: Option<String>,
    /// The same limit for a format installed without the sysctl file (limits.d, a drop-in or
    /// unit, docker, compose): never above the fs.nr_open the host has without it (the lower
    /// of its current and its boot value), or every login's setrlimit would fail.
    pub nofile_alone: Option<u64>,
    /// Why [`Settings::nofile_alone`] is lower than the profile asks, when it is.
    pub nofile_alone_note: Option<String>,
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
        // Nor a check whose condition does not hold here (the thread limits of a server
        // that is not thread-per-connection).
        if def.role_skip.is_some()
            || (f.severity == catalog::Severity::Info && def.default.is_some())
            || (def.check.only_if_missed.is_some()
                && f.status == crate::catalog::eval::Status::Skip)
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
            Source::Rlimit(r) if r.process == Process::Current && r.resource == Resource::Nofile => {
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
    // Never above the fs.nr_open this host boots with, by apply's rule: its sysctl.d file's
    // value where that wins at boot (a later boot file's line overrides it), else what the
    // boot files or the kernel give. That holds only where the sysctl file is installed with
    // the limit: a format without it is bounded by the host's nr_open without ours.
    let ours: Vec<(String, String)> = s
        .sysctls
        .iter()
        .filter(|(_, key, _, _)| facts.boot.set_after(SYSCTL_FILE, key).is_none())
        .map(|(_, key, value, _)| (key.clone(), value.clone()))
        .collect();
    let what = "the open-file limit (limits.d, LimitNOFILE, a container's ulimit)";
    s.nofile_alone = s.nofile;
    if let (Some(nofile), Some(cap)) = (&mut s.nofile, boot_nr_open(facts, &ours)) {
        s.nofile_note = cap_nofile(nofile, &cap, what, "export again");
    }
    if let (Some(nofile), Some(cap)) = (&mut s.nofile_alone, nr_open_without_ours(facts)) {
        // Our file raising fs.nr_open is the fix only where it sets it and wins at boot;
        // else the line that bounds it is the host's own, as apply says.
        s.nofile_alone_note = if ours.iter().any(|(k, _)| k == "fs.nr_open") {
            cap_nofile_without_sysctl_file(nofile, &cap, what)
        } else {
            cap_nofile(nofile, &cap, what, "export again")
        };
    }
    s
}
