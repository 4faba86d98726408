//! Pure evaluation: catalog + profile variables + host facts -> findings.
//!
//! No I/O happens here, so every status rule is unit-tested with hand-made readings. The rules:
//! a value that meets its target passes; one that misses takes the check's severity (fail,
//! warn or info); anything that could not be read is a skip with the reason, never a pass;
//! cumulative counters are info unless they grew during `--watch`.
//!
//! Beside this file: how a value meets a target ([`meets`], [`desired`], port sets) and the
//! notes that count what a value alone does not say (`notes:` in the catalog).

mod compare;
mod notes;
#[cfg(test)]
mod tests;

use super::facts::{BootEntry, HostFacts, Instance, Reading};
use super::{Catalog, CheckDef, Compare, Requirement, Scope, Severity, Target};
use crate::value::Value;
use serde::Serialize;
use std::collections::BTreeMap;

pub use compare::{desired, meets, port_set, port_text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Info,
    Skip,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Info => "info",
            Status::Skip => "skip",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
    fn missed(severity: Severity) -> Status {
        match severity {
            Severity::Info => Status::Info,
            Severity::Warn => Status::Warn,
            Severity::Fail => Status::Fail,
        }
    }
}

/// The rendered fix for one finding.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FixText {
    pub runtime: Option<String>,
    pub persistent: Option<String>,
}

/// One check's verdict on one object. Field names are the documented JSON shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Catalog id, with `[nic]` for per-NIC checks and `.boot` for boot-time views.
    pub id: String,
    pub title: String,
    pub status: Status,
    pub current: Option<Value>,
    /// How current is compared: >=, <=, ==, covers, version>=, absent, no_growth, report.
    pub compare: &'static str,
    pub target: Option<Value>,
    pub severity: Severity,
    pub scope: Scope,
    pub why: String,
    pub fix: FixText,
    /// The public sources the recommendation follows (the catalog's `refs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<crate::catalog::Ref>,
    /// Why it was skipped, where a value was set, how much a counter grew.
    pub note: Option<String>,
    /// Which catalog check and view [`evaluate`] made this from (None: a finding from
    /// elsewhere: the load-balancer checks, the journal's, a computed one). Code joins
    /// findings on this, never on the id text; not part of the JSON shape.
    #[serde(skip)]
    pub key: Option<Key>,
}

impl Finding {
    /// The boot-time view of a sysctl check (the `ID.boot` finding).
    pub fn is_boot_view(&self) -> bool {
        self.key.is_some_and(|k| k.boot)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub total: usize,
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    pub info: usize,
}

impl Summary {
    pub fn of(findings: &[Finding]) -> Summary {
        let mut s = Summary {
            total: findings.len(),
            ..Summary::default()
        };
        for f in findings {
            match f.status {
                Status::Pass => s.pass += 1,
                Status::Warn => s.warn += 1,
                Status::Fail => s.fail += 1,
                Status::Skip => s.skip += 1,
                Status::Info => s.info += 1,
            }
        }
        s
    }
}

/// Which check, and which view of it, one finding of [`evaluate`] is: the typed key `apply`'s
/// plan joins findings on (never their id text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Index into the catalog's checks.
    pub check: usize,
    /// A per-NIC check (one finding per NIC, or one skip when there is none).
    pub per_nic: bool,
    /// The boot-time view of a sysctl check (`ID.boot`).
    pub boot: bool,
}

/// What [`evaluate`] produces for each check, in its order, with the key each finding carries.
enum View<'a> {
    NoObject,
    Runtime(&'a Instance),
    Boot(&'a Instance, &'a Reading<BootEntry>),
}

fn walk<'a>(catalog: &'a Catalog, facts: &'a HostFacts) -> Vec<(Key, &'a CheckDef, View<'a>)> {
    let mut out = Vec::new();
    for (i, def) in catalog.checks.iter().enumerate() {
        let key = |boot| Key {
            check: i,
            per_nic: def.check.each.is_some(),
            boot,
        };
        let instances: Vec<&Instance> = facts.instances.iter().filter(|x| x.check == i).collect();
        if instances.is_empty() && def.check.each.is_some() {
            out.push((key(false), def, View::NoObject));
            continue;
        }
        for inst in instances {
            out.push((key(false), def, View::Runtime(inst)));
            // A check this role does not need has no boot view to judge either.
            if let (true, None, Some(boot)) = (def.has_boot_view(), &def.role_skip, &inst.boot) {
                out.push((key(true), def, View::Boot(inst, boot)));
            }
        }
    }
    out
}

/// Evaluate every gathered instance. `profile_vars` come from [`crate::profile::Profile::variables`].
pub fn evaluate(
    catalog: &Catalog,
    profile_vars: &BTreeMap<String, Value>,
    facts: &HostFacts,
) -> Vec<Finding> {
    let mut vars = profile_vars.clone();
    vars.extend(facts.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut findings = walk(catalog, facts)
        .into_iter()
        .map(|(key, def, view)| {
            let mut f = match view {
                View::NoObject => {
                    let reason = facts
                        .no_nics
                        .clone()
                        .unwrap_or_else(|| "no object to check".into());
                    let mut f = base(def, &def.check.id, &vars, facts, None, None);
                    f.status = Status::Skip;
                    f.note = Some(reason);
                    f
                }
                View::Runtime(inst) => {
                    evaluate_one(def, inst, &with_nic_vars(&vars, facts, inst), facts)
                }
                View::Boot(inst, boot) => {
                    evaluate_boot(def, inst, boot, &with_nic_vars(&vars, facts, inst), facts)
                }
            };
            if let Some(why) = &def.role_skip {
                f.status = Status::Skip;
                f.note = Some(why.clone());
            }
            f.key = Some(key);
            f
        })
        .collect::<Vec<_>>();
    narrow_shared_fixes(catalog, &vars, &mut findings);
    findings
}

/// The variables of one instance: a NIC's own (`nic.rss_queues`) join the host's and the
/// profile's for a per-NIC check.
fn with_nic_vars<'a>(
    vars: &'a BTreeMap<String, Value>,
    facts: &HostFacts,
    inst: &Instance,
) -> std::borrow::Cow<'a, BTreeMap<String, Value>> {
    match inst.nic.as_ref().and_then(|n| facts.nic_vars.get(&n.name)) {
        Some(own) if !own.is_empty() => {
            let mut v = vars.clone();
            v.extend(own.iter().map(|(k, x)| (k.clone(), x.clone())));
            std::borrow::Cow::Owned(v)
        }
        _ => std::borrow::Cow::Borrowed(vars),
    }
}

/// Checks of different fields of one key (tcp_mem's pressure and hard marks) each move only
/// their own field in `{desired}`: printed alone, each fix would set the others back to what the
/// host has, and the second line in sysctl.d would undo the first. Every fix of such a key
/// says the one value that meets them all, as apply writes it.
fn narrow_shared_fixes(
    catalog: &Catalog,
    vars: &BTreeMap<String, Value>,
    findings: &mut [Finding],
) {
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (n, f) in findings.iter().enumerate() {
        let Some(k) = f.key.filter(|k| !k.per_nic) else {
            continue;
        };
        let def = &catalog.checks[k.check];
        if let (super::Source::Sysctl(key), Some(_)) = (&def.check.source, def.check.field) {
            by_key.entry(key.as_str()).or_default().push(n);
        }
    }
    for (key, idx) in by_key {
        let Some(whole) = vars.get(&format!("sysctl.{key}")) else {
            continue;
        };
        let mut checks: Vec<usize> = idx
            .iter()
            .filter_map(|&n| findings[n].key.map(|k| k.check))
            .collect();
        checks.dedup();
        if checks.len() < 2 {
            continue;
        }
        let mut all = whole.clone();
        for &c in &checks {
            let def = &catalog.checks[c];
            let target = idx
                .iter()
                .map(|&n| &findings[n])
                .find(|f| f.key.is_some_and(|k| k.check == c))
                .and_then(|f| f.target.clone());
            if let Some(v) =
                target.and_then(|t| desired(def.check.compare, &all, def.check.field, &t))
            {
                all = v;
            }
        }
        for &n in &idx {
            let f = &mut findings[n];
            let def = &catalog.checks[f.key.map_or(0, |k| k.check)];
            let own = f
                .target
                .as_ref()
                .and_then(|t| desired(def.check.compare, whole, def.check.field, t));
            if let Some(own) = own.filter(|o| *o != all) {
                let (own, all) = (own.to_string(), all.to_string());
                for text in [&mut f.fix.runtime, &mut f.fix.persistent]
                    .into_iter()
                    .flatten()
                {
                    *text = text.replace(&own, &all);
                }
            }
        }
    }
}

/// Compute a check's target; an expression over an unreadable host value is an error message.
fn target_of(def: &CheckDef, vars: &BTreeMap<String, Value>) -> Result<Option<Value>, String> {
    match &def.target {
        None => Ok(None),
        Some(Target::Value(v)) => Ok(Some(v.clone())),
        Some(Target::Version(s)) => Ok(Some(Value::Text(s.clone()))),
        Some(Target::Expr(e)) => e.eval(vars).map(Some).map_err(|err| {
            if err.ends_with("is not known") {
                format!(
                    "the target needs {}, which could not be read",
                    err.trim_end_matches(" is not known")
                )
            } else {
                format!("the target cannot be computed: {err}")
            }
        }),
    }
}

pub fn compare_str(c: Compare) -> &'static str {
    match c {
        Compare::AtLeast => ">=",
        Compare::AtMost => "<=",
        Compare::Equal => "==",
        Compare::Covers => "covers",
        Compare::Reserves => "reserves",
        Compare::VersionAtLeast => "version>=",
        Compare::Absent => "absent",
        Compare::NoGrowth => "no_growth",
        Compare::Report => "report",
    }
}

/// A finding with everything but the verdict filled in.
fn base(
    def: &CheckDef,
    id: &str,
    vars: &BTreeMap<String, Value>,
    facts: &HostFacts,
    inst: Option<&Instance>,
    current: Option<Value>,
) -> Finding {
    let target = target_of(def, vars).ok().flatten();
    // `{location}`: where a `boot_entry` check found its line.
    let location = match (&def.check.source, inst.and_then(|i| i.boot.as_ref())) {
        (super::Source::BootEntry(_), Some(Reading::Value(e))) if current.is_some() => {
            Some(e.location())
        }
        _ => None,
    };
    let nic = inst.and_then(|i| i.nic.as_ref());
    // What apply would write: the whole value with the checked field moved to the target and
    // every other field as it is now, and never a step in the wrong direction (a `<=` check
    // does not raise, a `>=` check does not lower). A fix that restated tcp_rmem's max from a
    // constant would cut a host's 32 MiB to 6 MiB.
    let desired = target.as_ref().and_then(|t| {
        let whole = match (&def.check.source, def.check.field) {
            (super::Source::Sysctl(key), Some(_)) => vars.get(&format!("sysctl.{key}")).cloned(),
            _ => current.clone().filter(|_| inst.is_some()),
        }?;
        desired(def.check.compare, &whole, def.check.field, t)
    });
    let fill = |text: &Option<String>| {
        text.as_ref().map(|t| {
            let mut s = t.clone();
            let subs: [(&str, Option<String>); 8] = [
                ("{target}", target.as_ref().map(|v| v.to_string())),
                // A view without a current value (the boot view) has the target to go by.
                (
                    "{desired}",
                    desired.as_ref().or(target.as_ref()).map(|v| v.to_string()),
                ),
                ("{unit}", facts.request.unit.clone()),
                ("{pid}", facts.request.pid.map(|p| p.to_string())),
                ("{nic}", nic.map(|n| n.name.clone())),
                ("{nic_key}", nic.and_then(|n| n.registry_key.clone())),
                ("{location}", location.clone()),
                ("{current}", current.as_ref().map(|v| v.to_string())),
            ];
            for (k, v) in subs {
                let fallback = format!("<{}>", &k[1..k.len() - 1]);
                s = s.replace(k, &v.unwrap_or(fallback));
            }
            // Profile variables, e.g. both numbers of `netsh ... start={windows.dynamic_port_start}`.
            for name in super::placeholders(&s) {
                if let Some(v) = vars.get(&name) {
                    s = s.replace(&format!("{{{name}}}"), &v.to_string());
                }
            }
            s
        })
    };
    let fix = FixText {
        runtime: fill(&def.check.fix.runtime),
        persistent: fill(&def.check.fix.persistent),
    };
    Finding {
        id: id.to_string(),
        title: def.check.title.clone(),
        status: Status::Info,
        current: current.clone(),
        compare: compare_str(def.check.compare),
        target,
        severity: def.check.severity,
        scope: def.check.scope,
        why: def.check.why.trim().to_string(),
        fix,
        refs: def.check.refs.clone(),
        note: None,
        key: None,
    }
}

fn instance_id(def: &CheckDef, inst: &Instance) -> String {
    match &inst.nic {
        Some(n) => format!("{}[{}]", def.check.id, n.name),
        None => def.check.id.clone(),
    }
}

fn evaluate_one(
    def: &CheckDef,
    inst: &Instance,
    vars: &BTreeMap<String, Value>,
    facts: &HostFacts,
) -> Finding {
    let id = instance_id(def, inst);
    let current = match &inst.reading {
        Reading::Value(v) => Some(v.clone()),
        _ => None,
    };
    let mut f = base(def, &id, vars, facts, Some(inst), current);
    let (status, note) = verdict(def, inst, vars, facts);
    f.status = status;
    f.note = note.or_else(|| {
        inst.defaulted
            .then(|| "not set: the built-in default applies".to_string())
    });
    if f.note.is_none() {
        f.note = def.note.as_ref().and_then(|n| notes::note(n, &f, vars));
    }
    f
}

fn verdict(
    def: &CheckDef,
    inst: &Instance,
    vars: &BTreeMap<String, Value>,
    facts: &HostFacts,
) -> (Status, Option<String>) {
    match def.check.requires {
        Some(Requirement::Pid) if facts.request.pid.is_none() => {
            return (
                Status::Skip,
                Some("pass --pid PID to check a running server".into()),
            )
        }
        Some(Requirement::Unit) if facts.request.unit.is_none() => {
            return (
                Status::Skip,
                Some("pass --unit NAME to check a systemd service".into()),
            )
        }
        _ => {}
    }
    let current = match &inst.reading {
        Reading::Value(v) => v,
        Reading::Missing(reason) => {
            return match (&def.check.if_missing, def.check.compare) {
                (Some(m), _) => (
                    match m.status {
                        super::MissingStatus::Pass => Status::Pass,
                        super::MissingStatus::Skip => Status::Skip,
                        super::MissingStatus::Info => Status::Info,
                    },
                    Some(m.reason.clone()),
                ),
                (None, Compare::Absent) => (Status::Pass, Some(reason.clone())),
                (None, _) => (Status::Skip, Some(reason.clone())),
            }
        }
        Reading::Unreadable(reason) => return (Status::Skip, Some(reason.clone())),
    };
    let missed = Status::missed(def.check.severity);
    match def.check.compare {
        Compare::Report => return (Status::Info, None),
        // The current value already says where; the fix says what to do.
        Compare::Absent => return (missed, None),
        Compare::NoGrowth => {
            let Some(secs) = facts.watched.map(|w| w.as_secs_f64()) else {
                return (
                    Status::Info,
                    Some("cumulative since boot; --watch SECS judges its growth".into()),
                );
            };
            return match (&inst.after, current.as_num()) {
                (Some(Reading::Value(after)), Some(before)) => {
                    match after.as_num().map(|a| a - before) {
                        Some(d) if d > 0 => (missed, Some(format!("+{d} in {secs:.0} s"))),
                        Some(_) => (Status::Pass, Some(format!("no growth in {secs:.0} s"))),
                        None => (
                            Status::Skip,
                            Some("the second reading is not a number".into()),
                        ),
                    }
                }
                _ => (Status::Skip, Some("the second reading failed".into())),
            };
        }
        _ => {}
    }
    let target = match target_of(def, vars) {
        Ok(Some(t)) => t,
        Ok(None) => return (Status::Info, None),
        Err(e) => return (Status::Skip, Some(e)),
    };
    match meets(def.check.compare, current, &target) {
        Ok(true) => (Status::Pass, None),
        Ok(false) => (missed, None),
        Err(e) => (Status::Skip, Some(e)),
    }
}

/// The boot-time view of a sysctl check: what the value will be after the next reboot.
fn evaluate_boot(
    def: &CheckDef,
    inst: &Instance,
    boot: &Reading<BootEntry>,
    vars: &BTreeMap<String, Value>,
    facts: &HostFacts,
) -> Finding {
    let id = format!("{}.boot", instance_id(def, inst));
    let mut f = base(def, &id, vars, facts, Some(inst), None);
    f.title = format!("{} at next boot", def.check.title);
    // Only the persistent form fixes what happens at boot.
    f.fix.runtime = None;
    f.scope = Scope::Boot;
    f.severity = def.check.severity.min(Severity::Warn);
    let missed = Status::missed(f.severity);
    let target = match target_of(def, vars) {
        Ok(Some(t)) => t,
        Ok(None) => {
            f.status = Status::Info;
            return f;
        }
        Err(e) => {
            f.status = Status::Skip;
            f.note = Some(e);
            return f;
        }
    };
    let select = |v: Value| match (v, def.check.field) {
        (Value::List(l), Some(i)) => l.get(i).map(|n| Value::Num(*n)),
        (v, _) => Some(v),
    };
    // Without a runtime value there is nothing to persist or compare against.
    if let Reading::Missing(why) | Reading::Unreadable(why) = &inst.reading {
        f.status = Status::Skip;
        f.note = Some(why.clone());
        return f;
    }
    let runtime_ok = matches!(&inst.reading, Reading::Value(v) if meets(def.check.compare, v, &target) == Ok(true));
    let (status, note, current) = match boot {
        Reading::Value(entry) => {
            let (location, raw) = (entry.location(), entry.value.as_str());
            match select(Value::parse_kernel(raw)) {
                Some(v) => match meets(def.check.compare, &v, &target) {
                    Ok(true) => (Status::Pass, format!("set by {location}"), Some(v)),
                    Ok(false) => {
                        // Appending to our own file would not help: this line is read later.
                        if let super::Source::Sysctl(key) = &def.check.source {
                            let want = f.target.as_ref().map(|t| t.to_string()).unwrap_or_default();
                            f.fix.persistent = Some(format!("edit {location} to `{key} = {want}` or delete that line (it is applied after earlier sysctl.d files)"));
                        }
                        (missed, format!("{location} sets {v}, which misses the target and replaces the runtime value at the next boot"), Some(v))
                    }
                    Err(e) => (Status::Skip, format!("{location}: {e}"), Some(v)),
                },
                None => (
                    Status::Skip,
                    format!("{location}: cannot read '{raw}'"),
                    None,
                ),
            }
        }
        Reading::Missing(why) => {
            let (status, note, current) = match &def.default {
            Some(d) => {
                let d = select(d.clone());
                match d.as_ref().map(|d| meets(def.check.compare, d, &target)) {
                    Some(Ok(true)) => (Status::Pass, format!("not set in sysctl.d; the kernel default {} meets the target", d.as_ref().unwrap()), d),
                    _ if runtime_ok => (missed, format!("not set in sysctl.d: the value set at runtime is lost at the next boot (kernel default {})", d.as_ref().map(|v| v.to_string()).unwrap_or_default()), d),
                    _ => (missed, format!("not set in sysctl.d: the kernel default {} returns at every boot", d.as_ref().map(|v| v.to_string()).unwrap_or_default()), d),
                }
            }
            None => (
                Status::Info,
                "not set in sysctl.d; the kernel computes its default at boot (from RAM). If the current value was set by hand, persist it".into(),
                None,
            ),
            };
            // Files the boot view could not read may set it: say so (BootConfig::entry).
            match why.split_once("; could not read ") {
                Some((_, rest)) => (status, format!("{note}; could not read {rest}"), current),
                None => (status, note, current),
            }
        }
        Reading::Unreadable(e) => (Status::Skip, e.clone(), None),
    };
    f.status = status;
    f.note = Some(note);
    f.current = current;
    f
}
