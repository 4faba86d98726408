//! The declarative check catalog: loading, validation, and the compiled form the evaluator uses.
//!
//! Flow: checks/*.yaml (embedded, or `--catalog FILE`) -> [`load`] -> [`Catalog`]. Validation
//! runs once, at load, and collects every problem with `file:line`: duplicate ids, targets that do
//! not parse, variables no profile defines, comparisons that cannot take the given target. After
//! that, evaluation cannot meet a malformed check.

pub mod computed;
pub mod eval;
pub mod expr;
pub mod facts;
pub mod kube;
mod lines;
pub mod lint;
mod model;
pub mod words;

pub use model::*;

use crate::host::Platform;
use crate::profile::Problem;
use crate::value::{version_parts, Value};
use expr::Expr;
use lines::{item_blocks, line_in_block, line_of_id, line_with_value};
use std::collections::{BTreeMap, BTreeSet};

/// The catalogs compiled into the binary.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("checks/linux.yaml", include_str!("../../checks/linux.yaml")),
    (
        "checks/windows.yaml",
        include_str!("../../checks/windows.yaml"),
    ),
];

/// What the built-in catalogs (both platforms) can make apply change: the sysctl keys and the
/// registry values (key, value) their checks read. A journal entry naming anything else was not
/// written by apply, and a rollback never writes it (`kernel.core_pattern`, a service's
/// `ImagePath`).
#[derive(Debug, Default)]
pub struct Managed {
    pub sysctls: BTreeSet<String>,
    pub registry: BTreeSet<(String, String)>,
}

pub fn managed() -> &'static Managed {
    static MANAGED: std::sync::OnceLock<Managed> = std::sync::OnceLock::new();
    MANAGED.get_or_init(|| {
        let mut m = Managed::default();
        for (_, text) in EMBEDDED {
            let v: serde_yaml_ng::Value =
                serde_yaml_ng::from_str(text).expect("the built-in catalogs parse");
            for check in v["checks"].as_sequence().into_iter().flatten() {
                let source = &check["source"];
                if let Some(key) = source["sysctl"].as_str() {
                    m.sysctls.insert(key.to_string());
                }
                let r = &source["registry"];
                if let (Some(key), Some(value)) = (r["key"].as_str(), r["value"].as_str()) {
                    m.registry.insert((key.to_string(), value.to_string()));
                }
            }
        }
        m
    })
}

impl Managed {
    /// Whether `key\value` is a registry value the built-in catalogs change: one they name, or
    /// an adapter's under the network class key (`{nic_key}`: its four-digit subkey).
    pub fn registry_value(&self, key: &str, value: &str) -> bool {
        self.registry.iter().any(|(k, v)| {
            v == value
                && match k.split_once("{nic_key}") {
                    None => k == key,
                    Some((head, tail)) => key
                        .strip_prefix(head)
                        .and_then(|rest| rest.strip_suffix(tail))
                        .is_some_and(|sub| {
                            sub.len() == 4 && sub.bytes().all(|b| b.is_ascii_digit())
                        }),
                }
        })
    }
}

/// Host variables a target expression may use besides the profile's and `sysctl.*`.
/// `host.pid_sockets`: the sockets of the `--pid` process (read only with --pid).
pub const HOST_VARS: &[&str] = &[
    "host.cpus",
    "host.mem_bytes",
    "host.page_size",
    "host.pid_sockets",
];

/// Variables a per-NIC check's target may use besides those: each NIC's own, answered by
/// `nic::nic_vars` (`nic.rss_queues`: one receive queue per physical core of its NUMA node, at
/// most the hardware's maximum).
pub const NIC_VARS: &[&str] = &["nic.physical_cores", "nic.rss_queues"];

/// Placeholders a fix text may contain.
const PLACEHOLDERS: &[&str] = &[
    "target", "desired", "unit", "pid", "nic", "nic_key", "location", "current",
];

#[derive(Debug, Clone)]
pub struct Catalog {
    pub platform: Platform,
    pub checks: Vec<CheckDef>,
    /// Where it came from, for messages.
    pub file: String,
}

/// A validated check with its target compiled.
#[derive(Debug, Clone)]
pub struct CheckDef {
    pub check: Check,
    pub target: Option<Target>,
    /// The kernel default at boot, for sysctl checks that have one.
    pub default: Option<Value>,
    /// Set by [`Catalog::for_role`]: this role does not need the check, and why.
    pub role_skip: Option<String>,
    /// The check as each role it names needs it, validated when the catalog loads.
    pub by_role: BTreeMap<crate::profile::Role, (Check, Option<Target>, Option<String>)>,
    /// The note the check names (`note:`), from the file's `notes`.
    pub note: Option<NoteDef>,
}

impl CheckDef {
    /// Whether this check also produces a boot-time finding.
    pub fn has_boot_view(&self) -> bool {
        matches!(self.check.source, Source::Sysctl(_))
            && self.check.boot.unwrap_or(true)
            && self.target.is_some()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Value(Value),
    /// A version such as "3.9", kept as text for display.
    Version(String),
    Expr(Expr),
}

#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct CatalogError(pub Vec<Problem>);

impl Catalog {
    /// The catalog as a host of `role` needs it: each check's override for that role laid
    /// over it (a skip keeps the check, to say why it does not apply).
    pub fn for_role(mut self, role: crate::profile::Role) -> Catalog {
        for def in &mut self.checks {
            if let Some((check, target, skip)) = def.by_role.get(&role).cloned() {
                def.check = check;
                def.target = target;
                def.role_skip = skip.map(|why| format!("not needed on a {role}: {}", why.trim()));
            }
        }
        self
    }
}

/// Load the built-in catalog for `platform`, or `override_file` instead when given.
pub fn load(
    platform: Platform,
    override_file: Option<&str>,
    known_vars: &BTreeSet<String>,
) -> Result<Catalog, CatalogError> {
    if let Some(path) = override_file {
        let text = crate::profile::read_config_file(std::path::Path::new(path)).map_err(|e| {
            CatalogError(vec![Problem {
                file: path.to_string(),
                line: None,
                message: format!("cannot read the catalog: {e}"),
            }])
        })?;
        let cat = parse(&text, path, known_vars)?;
        if cat.platform != platform {
            return Err(CatalogError(vec![Problem {
                file: path.to_string(),
                line: crate::yaml_lines::line_of(&text, "platform"),
                message: format!(
                    "this catalog is for {:?} but the host is {:?}",
                    cat.platform, platform
                ),
            }]));
        }
        return Ok(cat);
    }
    for (file, text) in EMBEDDED {
        let cat = parse(text, file, known_vars)?;
        if cat.platform == platform {
            return Ok(cat);
        }
    }
    unreachable!("every platform has an embedded catalog")
}

/// Parse and validate catalog text. `known_vars` are the profile variables targets may use.
pub fn parse(
    text: &str,
    file: &str,
    known_vars: &BTreeSet<String>,
) -> Result<Catalog, CatalogError> {
    let serde_problem = |e: serde_yaml_ng::Error| {
        let msg = e.to_string();
        let msg = msg
            .rfind(" at line ")
            .map(|i| msg[..i].to_string())
            .unwrap_or(msg);
        CatalogError(vec![Problem {
            file: file.into(),
            line: e.location().map(|l| l.line()),
            message: msg,
        }])
    };
    // The file's frame first (a syntax error or a bad `platform` stops here); then each check
    // on its own, so one check's unknown key or bad type does not hide the next check's.
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(serde_problem)?;
    let blocks = item_blocks(text);
    let mut problems = Vec::new();
    for (name, note) in &raw.notes {
        for message in note_problems(note, known_vars) {
            problems.push(Problem {
                file: file.into(),
                line: crate::yaml_lines::line_of(text, &format!("notes.{name}")),
                message: format!("notes.{name}: {message}"),
            });
        }
    }
    let (parsed, read_problems) = read_checks(text, file, raw.checks, &blocks);
    problems.extend(read_problems);
    let mut seen = BTreeSet::new();
    let mut checks = Vec::new();
    for (check, block) in parsed {
        // The id line of this very entry: a duplicate is reported where the duplicate is.
        let line = block
            .as_ref()
            .and_then(|b| line_in_block(text, b, "id").or(Some(b.start + 1)))
            .or_else(|| line_of_id(text, &check.id));
        let mut messages = Vec::new();
        if !seen.insert(check.id.clone()) {
            messages.push("duplicate id; ids must be unique".to_string());
        }
        let id = check.id.clone();
        checks.push(check_def(
            check,
            &seen,
            &raw.notes,
            known_vars,
            &mut messages,
        ));
        problems.extend(messages.into_iter().map(|message| Problem {
            file: file.into(),
            line,
            message: format!("{id}: {message}"),
        }));
    }
    problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    if problems.is_empty() {
        Ok(Catalog {
            platform: raw.platform,
            checks,
            file: file.into(),
        })
    } else {
        Err(CatalogError(problems))
    }
}

/// Each check of the file read on its own, so one check's unknown key or bad type does not hide
/// the next check's: those that deserialize, with their block of lines, and a problem for each
/// that does not, at the line of the key (or value) serde names.
#[allow(clippy::type_complexity)]
fn read_checks(
    text: &str,
    file: &str,
    items: Vec<serde_yaml_ng::Value>,
    blocks: &[std::ops::Range<usize>],
) -> (Vec<(Check, Option<std::ops::Range<usize>>)>, Vec<Problem>) {
    let (mut parsed, mut problems) = (Vec::new(), Vec::new());
    for (i, item) in items.into_iter().enumerate() {
        let block = blocks.get(i).cloned();
        let id = item.get("id").and_then(|v| v.as_str()).map(str::to_string);
        match serde_yaml_ng::from_value::<Check>(item) {
            Ok(check) => parsed.push((check, block)),
            Err(e) => {
                let msg = e.to_string();
                // serde names the offending key in backticks; point at its line in the block.
                let key = msg
                    .split('`')
                    .nth(1)
                    .filter(|_| msg.starts_with("unknown field"))
                    .or_else(|| msg.split_once(':').map(|(k, _)| k.trim()));
                // An unknown variant names the value, not the key: find the line that has it.
                let value = msg
                    .split('`')
                    .nth(1)
                    .filter(|_| msg.starts_with("unknown variant"));
                let line = block.as_ref().and_then(|b| {
                    value
                        .and_then(|v| line_with_value(text, b, v))
                        .or_else(|| key.and_then(|k| line_in_block(text, b, k)))
                        .or_else(|| line_in_block(text, b, "id"))
                        .or(Some(b.start + 1))
                });
                problems.push(Problem {
                    file: file.into(),
                    line,
                    message: match &id {
                        Some(id) => format!("{id}: {msg}"),
                        None => format!("check {}: {msg}", i + 1),
                    },
                });
            }
        }
    }
    (parsed, problems)
}

/// One check that deserialized, validated: its id, sources, target, default, placeholders,
/// gate, note and role overrides. What is wrong goes to `problems` (the caller adds the id and
/// the line); `seen` holds the ids of this check and those above it.
fn check_def(
    check: Check,
    seen: &BTreeSet<String>,
    notes: &BTreeMap<String, NoteDef>,
    known_vars: &BTreeSet<String>,
    problems: &mut Vec<String>,
) -> CheckDef {
    let mut bad = |message: String| problems.push(message);
    let id_ok = check.id.split('.').count() >= 2
        && check
            .id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if !id_ok {
        bad("ids are lowercase words joined by dots, e.g. linux.net.core.somaxconn".into());
    }
    for r in &check.refs {
        if !r.url.starts_with("https://") || r.url.contains(char::is_whitespace) {
            bad(format!(
                "refs: `{}` is not an https:// address; give the source's address, e.g. https://docs.kernel.org/networking/ip-sysctl.html",
                r.url
            ));
        }
        if r.section.trim().is_empty() {
            bad(format!(
                "refs: {} has no section; name the heading or entry the check follows",
                r.url
            ));
        }
    }
    let target = match compile_target(&check, known_vars) {
        Ok(t) => t,
        Err(e) => {
            bad(e);
            None
        }
    };
    let default = match &check.default {
        None => None,
        // A port list's default is text ("" for none reserved).
        Some(serde_yaml_ng::Value::String(t)) if check.compare == Compare::Reserves => {
            Some(Value::Text(t.clone()))
        }
        Some(v) => match literal(v) {
            Some(v) => Some(v),
            None => {
                bad("default must be a number or a list of numbers".into());
                None
            }
        },
    };
    for text in [&check.fix.runtime, &check.fix.persistent]
        .into_iter()
        .flatten()
    {
        for name in placeholders(text) {
            // A profile variable (`{windows.dynamic_port_start}`) fills in that value.
            if !PLACEHOLDERS.contains(&name.as_str()) && !known_vars.contains(&name) {
                bad(format!(
                    "unknown placeholder {{{name}}} in fix; known: {} or a profile variable such as {{linux.somaxconn}}",
                    PLACEHOLDERS.join(", ")
                ));
            }
        }
    }
    let nic_only = matches!(
        check.source,
        Source::Fact(Fact::NicRxQueues | Fact::NicTxQueues | Fact::NicIrqCpus | Fact::NicCoalesce)
    ) || matches!(&check.source, Source::Registry(r) if r.key.contains("{nic_key}"));
    let nic_only = nic_only || matches!(check.source, Source::NicStat(_));
    if nic_only && check.each != Some(Each::Nic) {
        bad("this source is per NIC; add `each: nic`".into());
    }
    if check.why.trim().is_empty() {
        bad("every check needs a `why`".into());
    }
    if let Some(gate) = &check.only_if_missed {
        if !seen.contains(&gate.check) || gate.check == check.id {
            bad(format!(
                "only_if_missed: `{}` is no check above this one; name an earlier check's id",
                gate.check
            ));
        }
        if gate.otherwise.trim().is_empty() {
            bad("only_if_missed: `otherwise` says why the check does not apply when that one passed".into());
        }
    }
    let note = match &check.note {
        None => None,
        Some(name) => match notes.get(name) {
            Some(n) => Some(n.clone()),
            None => {
                bad(format!(
                    "note: `{name}` is not one of the file's notes ({})",
                    notes.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
                None
            }
        },
    };
    let mut by_role = BTreeMap::new();
    for (role, o) in &check.roles {
        let mut c = check.clone();
        c.roles.clear();
        if o.skip.is_some() && (o.compare.is_some() || o.target.is_some() || o.severity.is_some()) {
            bad(format!(
                "roles.{role}: `skip` leaves nothing to compare; give either skip or compare/target/severity"
            ));
        }
        if let Some(v) = o.compare {
            c.compare = v;
        }
        if let Some(v) = &o.target {
            c.target = Some(v.clone());
        }
        if let Some(v) = o.severity {
            c.severity = v;
        }
        if let Some(v) = &o.why {
            c.why = v.clone();
        }
        if let Some(v) = &o.fix {
            c.fix = v.clone();
        }
        match compile_target(&c, known_vars) {
            Ok(t) => {
                by_role.insert(*role, (c, t, o.skip.clone()));
            }
            Err(e) => bad(format!("roles.{role}: {e}")),
        }
    }
    CheckDef {
        check,
        target,
        default,
        role_skip: None,
        by_role,
        note,
    }
}

fn compile_target(check: &Check, known: &BTreeSet<String>) -> Result<Option<Target>, String> {
    let needs = !matches!(
        check.compare,
        Compare::Absent | Compare::NoGrowth | Compare::Report
    );
    let Some(raw) = &check.target else {
        return if needs {
            Err("this comparison needs a `target`".into())
        } else {
            Ok(None)
        };
    };
    if !needs {
        return Err(format!("`{:?}` takes no target", check.compare));
    }
    let target = if check.compare == Compare::VersionAtLeast {
        let text = match raw {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            _ => return Err("a version target is written like \"3.9\"".into()),
        };
        if version_parts(&text).is_empty() {
            return Err(format!("'{text}' is not a version like \"3.9\""));
        }
        Target::Version(text)
    } else if check.compare == Compare::Reserves {
        let text = match raw {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            _ => {
                return Err("a `reserves` target is a port list like \"30000-32767,10250\"".into())
            }
        };
        let ports = eval::port_set(&Value::Text(text.clone()))
            .ok_or_else(|| format!("'{text}' is not a port list like \"30000-32767,10250\""))?;
        Target::Value(Value::Text(eval::port_text(&ports)))
    } else if let Some(v) = literal(raw) {
        Target::Value(v)
    } else if let serde_yaml_ng::Value::String(s) = raw {
        let e = expr::parse(s).map_err(|e| format!("target: {e}"))?;
        let mut vars = Vec::new();
        e.vars(&mut vars);
        for v in vars {
            let nic_var = NIC_VARS.contains(&v.as_str());
            if nic_var && check.each != Some(Each::Nic) {
                return Err(format!(
                    "target uses '{v}', a NIC's own value: only a check with `each: nic` has one"
                ));
            }
            if !(known.contains(&v)
                || HOST_VARS.contains(&v.as_str())
                || nic_var
                || v.starts_with("sysctl."))
            {
                return Err(format!(
                    "target uses '{v}', which no profile defines; use a profile key (e.g. linux.somaxconn, estimate.total_bytes), {}, sysctl.KEY or (each: nic) {}",
                    HOST_VARS.join(", "),
                    NIC_VARS.join(", ")
                ));
            }
        }
        Target::Expr(e)
    } else {
        return Err("target must be a number, a list of numbers, or an expression".into());
    };
    if check.compare == Compare::Covers
        && matches!(&target, Target::Value(v) if !matches!(v, Value::List(l) if l.len() == 2))
    {
        return Err("`covers` compares ranges; the target must be [low, high]".into());
    }
    Ok(Some(target))
}

fn literal(v: &serde_yaml_ng::Value) -> Option<Value> {
    match v {
        serde_yaml_ng::Value::Number(n) => n.as_i64().map(Value::Num),
        serde_yaml_ng::Value::Sequence(items) => items
            .iter()
            .map(|i| i.as_i64())
            .collect::<Option<Vec<_>>>()
            .map(Value::List),
        _ => None,
    }
}

/// `{name}` placeholders in a fix text.
pub fn placeholders(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        out.push(rest[start + 1..start + len].to_string());
        rest = &rest[start + len + 1..];
    }
    out
}

/// The catalog file's frame, with each check kept as YAML to be read on its own.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    platform: Platform,
    #[serde(default)]
    notes: BTreeMap<String, NoteDef>,
    checks: Vec<serde_yaml_ng::Value>,
}

/// What is wrong with one note: a case of its count without words or words for no case, a
/// placeholder its count does not fill, a `variable` missing, unneeded or unknown.
fn note_problems(note: &NoteDef, known_vars: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let cases = note.counts.cases();
    for case in cases {
        if !note.words.contains_key(*case) {
            out.push(format!(
                "words: `{case}` is missing; give words for each of {}",
                cases.join(", ")
            ));
        }
    }
    for (case, text) in &note.words {
        if !cases.contains(&case.as_str()) {
            out.push(format!(
                "words: `{case}` is no case of this count; its cases: {}",
                cases.join(", ")
            ));
        }
        let known = note.counts.placeholders();
        for name in placeholders(text) {
            if !known.contains(&name.as_str()) {
                out.push(format!(
                    "words.{case}: unknown placeholder {{{name}}}; known: {}",
                    known.join(", ")
                ));
            }
        }
    }
    match (note.counts, &note.variable) {
        (NoteCount::ProxyAddresses, None) => out
            .push("needs `variable`: the profile variable holding the profile's port count".into()),
        (NoteCount::ProxyAddresses, Some(v)) if !known_vars.contains(v) => {
            out.push(format!("variable: `{v}` is no profile variable"))
        }
        (NoteCount::ProxyAddresses, Some(_)) | (_, None) => {}
        (_, Some(_)) => out.push("`variable` is only for proxy_addresses".into()),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> BTreeSet<String> {
        crate::profile::load("100k")
            .unwrap()
            .profile
            .variables()
            .into_keys()
            .collect()
    }

    #[test]
    fn embedded_catalogs_are_valid() {
        for (file, text) in EMBEDDED {
            let c = parse(text, file, &known()).unwrap_or_else(|e| panic!("{e}"));
            assert!(c.checks.len() >= 4, "{file}");
        }
    }

    /// Every built-in recommendation says whom it follows, so an operator can read the
    /// source and judge it for their host.
    #[test]
    fn every_built_in_check_names_its_sources() {
        let mut missing = Vec::new();
        for (file, text) in EMBEDDED {
            for c in parse(text, file, &known()).unwrap().checks {
                if c.check.refs.is_empty() {
                    missing.push(c.check.id.clone());
                }
            }
        }
        assert!(missing.is_empty(), "checks without refs: {missing:?}");
    }

    #[test]
    fn a_ref_must_be_an_https_address_with_a_section() {
        let text = ONE.replace("TARGET", "1").replace(
            "    why: w\n",
            "    why: w\n    refs:\n      - {url: \"docs.kernel.org\", section: somaxconn}\n      - {url: \"https://docs.kernel.org/\", section: \" \"}\n",
        );
        let err = parse(&text, "c.yaml", &known()).unwrap_err().to_string();
        assert!(
            err.contains("`docs.kernel.org` is not an https:// address"),
            "{err}"
        );
        assert!(err.contains("has no section"), "{err}");
    }

    #[test]
    fn ids_are_unique_across_catalogs() {
        let mut all = BTreeSet::new();
        for (file, text) in EMBEDDED {
            for c in parse(text, file, &known()).unwrap().checks {
                assert!(all.insert(c.check.id.clone()), "{} twice", c.check.id);
            }
        }
    }

    const ONE: &str = "platform: linux\nchecks:\n  - id: linux.x.y\n    title: t\n    source: {sysctl: net.core.somaxconn}\n    scope: netns\n    compare: \">=\"\n    target: TARGET\n    severity: fail\n    why: w\n    fix: {runtime: \"sysctl -w x={target}\"}\n";

    #[test]
    fn bad_targets_are_reported_with_the_line() {
        let err = parse(&ONE.replace("TARGET", "linux.somaxcon"), "c.yaml", &known()).unwrap_err();
        assert_eq!(err.0[0].line, Some(3));
        assert!(
            err.0[0]
                .message
                .contains("'linux.somaxcon', which no profile defines"),
            "{err}"
        );
        let err = parse(&ONE.replace("TARGET", "2 *"), "c.yaml", &known()).unwrap_err();
        assert!(err.to_string().contains("ends too early"), "{err}");
        // A NIC's own value exists only for a per-NIC check.
        let err = parse(&ONE.replace("TARGET", "nic.rss_queues"), "c.yaml", &known()).unwrap_err();
        assert!(
            err.to_string().contains(
                "'nic.rss_queues', a NIC's own value: only a check with `each: nic` has one"
            ),
            "{err}"
        );
        let per_nic = ONE
            .replace("TARGET", "nic.rss_queues")
            .replace("    scope: netns\n", "    each: nic\n    scope: host\n");
        assert!(parse(&per_nic, "c.yaml", &known()).is_ok());
    }

    #[test]
    fn unknown_placeholder_and_duplicate_ids_are_collected() {
        let text = ONE
            .replace("TARGET", "4096")
            .replace("{target}", "{targte}");
        let dup = format!("{text}{}", &text[text.find("  - id").unwrap()..]);
        let err = parse(&dup, "c.yaml", &known()).unwrap_err();
        let msgs: Vec<_> = err.0.iter().map(|p| p.message.clone()).collect();
        assert!(
            msgs.iter()
                .any(|m| m.contains("unknown placeholder {targte}")),
            "{msgs:?}"
        );
        assert!(msgs.iter().any(|m| m.contains("duplicate id")), "{msgs:?}");
    }

    #[test]
    fn unknown_key_is_a_serde_error_with_line() {
        let err = parse(
            &ONE.replace("TARGET", "1")
                .replace("severity: fail", "severity: fail\n    sevrity: x"),
            "c.yaml",
            &known(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `sevrity`"), "{err}");
        assert!(err.0[0].line.is_some());
    }

    /// A note's words are checked against its count: every case given, none unknown, only
    /// the count's placeholders; a check names only a note the file has.
    #[test]
    fn notes_are_validated_against_their_count_and_named_by_checks() {
        let notes = "notes:\n  n:\n    counts: port_range\n    words:\n      held: \"{ports} ports\"\n      wanted: \"{port}\"\n";
        let text = ONE
            .replace("TARGET", "1")
            .replace("checks:\n", &format!("{notes}checks:\n"))
            .replace("severity: fail", "severity: fail\n    note: m");
        let err = parse(&text, "c.yaml", &known()).unwrap_err();
        let msgs: Vec<_> = err.0.iter().map(|p| p.message.clone()).collect();
        for want in [
            "notes.n: words: `held_and_wanted` is missing",
            "notes.n: words: `wanted` is no case of this count",
            "notes.n: words.wanted: unknown placeholder {port}",
            "linux.x.y: note: `m` is not one of the file's notes (n)",
        ] {
            assert!(msgs.iter().any(|m| m.starts_with(want)), "{want}: {msgs:?}");
        }
        assert_eq!(err.0[0].line, Some(3), "{err}");
        let good = text
            .replace(
                "      wanted: \"{port}\"",
                "      held_and_wanted: \"{ports} of {wanted_ports}\"",
            )
            .replace("note: m", "note: n");
        let cat = parse(&good, "c.yaml", &known()).unwrap();
        assert_eq!(
            cat.checks[0].note.as_ref().map(|n| n.counts),
            Some(NoteCount::PortRange)
        );
    }
}
