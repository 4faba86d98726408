//! One voice: no check's text may recommend what another check forbids. A fix (or a why's
//! imperative) that sets, raises or lowers a sysctl is held against every check of that key,
//! under each built-in profile and each role: a value that misses the other check's target, a
//! direction without a bound toward a limit the other check keeps (lowering tcp_fin_timeout
//! past its floor), or any change of a key whose check is advice not to apply (an info check
//! whose fix carries no command) is a [`Contradiction`]. The unit tests run it over the
//! built-in catalogs and over a planted contradiction.
//!
//! What is read, from the catalog's own words: `sysctl -w KEY=VALUE`, `KEY = VALUE` (a
//! sysctl.d line), and `raise|lower|increase|reduce|enable|disable|set KEY [and KEY2 | /KEY2]
//! [default|max|...]` with an optional bound in the same clause (`never below 25`, `to 30`).
//! Keys may be written in full or by their last part (`tcp_fin_timeout`).

use super::eval::meets;
use super::{Catalog, CheckDef, Compare, Severity, Source, Target};
use crate::profile::Role;
use crate::value::Value;
use std::collections::BTreeMap;

/// A text that recommends what another check forbids.
#[derive(Debug, Clone, PartialEq)]
pub struct Contradiction {
    /// The check whose text says it.
    pub check: String,
    /// Which text: `fix.runtime`, `fix.persistent` or `why`.
    pub text: &'static str,
    /// The words that recommend it.
    pub says: String,
    /// The check it contradicts.
    pub against: String,
    /// The profile and role under which it does (None: under every profile).
    pub profile: Option<String>,
    pub role: Role,
    pub reason: String,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) says `{}`, against {} on a {}{}: {}",
            self.check,
            self.text,
            self.says,
            self.against,
            self.role.as_str(),
            self.profile
                .as_ref()
                .map(|p| format!(" with profile {p}"))
                .unwrap_or_default(),
            self.reason
        )
    }
}

/// What a text asks for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A value, or a placeholder a report fills in (`{target}`).
    Set(SetTo),
    /// Higher, at most to the bound when one is given.
    Raise(Option<i64>),
    /// Lower, at least to the bound when one is given.
    Lower(Option<i64>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum SetTo {
    Value(Value),
    /// `{target}` or `{desired}`: the recommending check's own target.
    OwnTarget,
}

/// One recommendation found in a text.
#[derive(Debug, Clone, PartialEq)]
pub struct Mention {
    pub key: String,
    /// The field named (`defaults` -> 1, `max` -> 2), when one is.
    pub field: Option<usize>,
    pub action: Action,
    pub says: String,
}

const VERBS_UP: &[&str] = &["raise", "increase", "enable", "double"];
const VERBS_DOWN: &[&str] = &["lower", "reduce", "decrease", "disable", "shorten"];
const NEGATIONS: &[&str] = &["never", "not", "don't", "no", "nor"];

/// The full key a word names: the key itself, or the one key whose last part it is.
fn resolve<'a>(word: &str, keys: &'a [String]) -> Option<&'a String> {
    let word = word.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    if word.is_empty() {
        return None;
    }
    if let Some(k) = keys.iter().find(|k| *k == word) {
        return Some(k);
    }
    let mut ends = keys.iter().filter(|k| k.ends_with(&format!(".{word}")));
    match (ends.next(), ends.next()) {
        (Some(k), None) => Some(k),
        _ => None,
    }
}

fn field_word(word: &str) -> Option<usize> {
    match word.trim_matches(|c: char| !c.is_ascii_alphabetic()) {
        "min" | "minimum" | "low" => Some(0),
        "default" | "defaults" | "pressure" => Some(1),
        "max" | "maximum" | "maxima" | "high" => Some(2),
        _ => None,
    }
}

/// Text with parenthesised remarks taken out (they explain, they do not recommend).
fn without_parentheses(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A number after a bounding word in `rest`: `below 25`, `under 25`, `than 25`, `to 30`.
fn bound_in(rest: &str) -> Option<i64> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    words.windows(2).find_map(|w| {
        let n = w[1].trim_end_matches(|c: char| !c.is_ascii_digit());
        match w[0] {
            "below" | "under" | "than" | "to" | "above" | "over" | "most" | "least" => {
                n.parse().ok()
            }
            _ => None,
        }
    })
}

fn value_of(raw: &str) -> Option<SetTo> {
    let raw = raw.trim().trim_matches(|c| c == '"' || c == '\'').trim();
    if raw == "{target}" || raw == "{desired}" {
        return Some(SetTo::OwnTarget);
    }
    if raw.starts_with('<') || raw.contains('{') {
        return None;
    }
    Some(SetTo::Value(Value::parse_kernel(raw)))
}

/// Every recommendation `text` makes about the `keys` (full sysctl names). With `commands`
/// false (a why), only `sysctl -w` and imperative words count: a why's `KEY = VALUE` may
/// describe the bad state it explains.
pub fn mentions(text: &str, keys: &[String], commands: bool) -> Vec<Mention> {
    let mut out = Vec::new();
    // sysctl -w KEY=VALUE
    let mut rest = text;
    while let Some(i) = rest.find("sysctl -w ") {
        let after = &rest[i + "sysctl -w ".len()..];
        if let Some((key, value)) = after.split_once('=') {
            let key = key.trim();
            let value = match value.strip_prefix('"') {
                Some(v) => v.split('"').next().unwrap_or(""),
                None => value.split_whitespace().next().unwrap_or(""),
            };
            if let (Some(k), Some(v)) = (keys.iter().find(|k| *k == key), value_of(value)) {
                out.push(Mention {
                    key: k.clone(),
                    field: None,
                    action: Action::Set(v),
                    says: format!("sysctl -w {key}={value}"),
                });
            } else if let (Some(k), true) =
                (keys.iter().find(|k| *k == key), value.starts_with('<'))
            {
                // `<higher>`, `<double the current>`: a direction without a number.
                let action = if value.contains("lower") || value.contains("half") {
                    Action::Lower(None)
                } else if value.contains("higher") || value.contains("double") {
                    Action::Raise(None)
                } else {
                    rest = after;
                    continue;
                };
                out.push(Mention {
                    key: k.clone(),
                    field: None,
                    action,
                    says: format!("sysctl -w {key}={value}"),
                });
            }
        }
        rest = after;
    }
    // KEY = VALUE (a sysctl.d line)
    if commands {
        for k in keys {
            let pat = format!("{k} = ");
            let mut rest = text;
            while let Some(i) = rest.find(&pat) {
                let after = &rest[i + pat.len()..];
                let value: String = after
                    .chars()
                    .take_while(|c| !matches!(c, '\'' | ';' | '\n' | ')' | '"'))
                    .collect();
                if let Some(v) = value_of(&value) {
                    out.push(Mention {
                        key: k.clone(),
                        field: None,
                        action: Action::Set(v),
                        says: format!("{k} = {}", value.trim()),
                    });
                }
                rest = after;
            }
        }
    }
    // raise KEY [and KEY2] [field] [bound]
    let plain = without_parentheses(text);
    let plain = plain
        .replace(". ", "; ")
        .replace(": ", "; ")
        .replace(" # ", "; ");
    for clause in plain.split(';').map(str::trim) {
        let words: Vec<&str> = clause.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let verb = w
                .trim_matches(|c: char| !c.is_ascii_alphabetic())
                .to_lowercase();
            let up = VERBS_UP.contains(&verb.as_str());
            let down = VERBS_DOWN.contains(&verb.as_str());
            if !(up || down) {
                continue;
            }
            if i > 0 && NEGATIONS.contains(&words[i - 1].to_lowercase().as_str()) {
                continue;
            }
            let mut named: Vec<&String> = Vec::new();
            let mut field = None;
            let mut j = i + 1;
            while j < words.len() {
                let word = words[j];
                let parts: Vec<Option<&String>> =
                    word.split('/').map(|p| resolve(p, keys)).collect();
                if parts.iter().any(Option::is_some) {
                    named.extend(parts.into_iter().flatten());
                } else if matches!(word, "and" | "or" | "its" | "the" | "both") {
                } else if let Some(f) = field_word(word) {
                    field = Some(f);
                } else {
                    break;
                }
                let ends = word.ends_with(',');
                j += 1;
                if ends && j < words.len() && !matches!(words[j], "and" | "or") {
                    break;
                }
            }
            if named.is_empty() {
                continue;
            }
            let tail = words[j.min(words.len())..].join(" ");
            let bound = bound_in(&tail);
            let says = words[i..j.min(words.len())].join(" ");
            for k in named {
                out.push(Mention {
                    key: k.clone(),
                    field,
                    action: if up {
                        Action::Raise(bound)
                    } else {
                        Action::Lower(bound)
                    },
                    says: says.clone(),
                });
            }
        }
    }
    out
}

/// A check whose advice is to leave its key alone: an info check (not a report) whose fix
/// carries no command that sets it.
fn advice_not_to_apply(def: &CheckDef) -> bool {
    let Source::Sysctl(key) = &def.check.source else {
        return false;
    };
    def.check.severity == Severity::Info
        && def.check.compare != Compare::Report
        && [&def.check.fix.runtime, &def.check.fix.persistent]
            .into_iter()
            .flatten()
            .all(|t| !t.contains("sysctl -w") && !t.contains(&format!("{key} = ")))
}

fn target(def: &CheckDef, vars: &BTreeMap<String, Value>) -> Option<Value> {
    match def.target.as_ref()? {
        Target::Value(v) => Some(v.clone()),
        Target::Version(_) => None,
        Target::Expr(x) => x.eval(vars).ok(),
    }
}

/// The field a check judges of a value, or the whole value.
fn field_of(v: &Value, field: Option<usize>) -> Value {
    match (v, field) {
        (Value::List(l), Some(i)) => l.get(i).map(|n| Value::Num(*n)).unwrap_or(v.clone()),
        _ => v.clone(),
    }
}

/// Every contradiction in `catalog` under each of `profiles` (name, variables) and each role.
pub fn lint(
    catalog: &Catalog,
    profiles: &[(String, BTreeMap<String, Value>)],
) -> Vec<Contradiction> {
    // The catalog's keys and the built-in Linux catalog's: a text may name a key no check of
    // this catalog reads.
    let mut keys: Vec<String> = catalog
        .checks
        .iter()
        .filter_map(|d| match &d.check.source {
            Source::Sysctl(k) => Some(k.clone()),
            _ => None,
        })
        .collect();
    keys.extend(super::kube::scopes().iter().map(|(k, _)| k.clone()));
    keys.sort();
    keys.dedup();
    let mut out: Vec<Contradiction> = Vec::new();
    for role in Role::ALL {
        let cat = catalog.clone().for_role(role);
        for a in cat.checks.iter().filter(|d| d.role_skip.is_none()) {
            let texts = [
                ("fix.runtime", a.check.fix.runtime.as_deref(), true),
                ("fix.persistent", a.check.fix.persistent.as_deref(), true),
                ("why", Some(a.check.why.as_str()), false),
            ];
            for (which, text, commands) in texts {
                let Some(text) = text else { continue };
                for m in mentions(text, &keys, commands) {
                    for b in cat.checks.iter().filter(|b| {
                        b.role_skip.is_none()
                            && b.check.id != a.check.id
                            && b.check.source == Source::Sysctl(m.key.clone())
                            && match (m.field, b.check.field) {
                                (Some(x), Some(y)) => x == y,
                                _ => true,
                            }
                    }) {
                        let mut found = |profile: Option<&str>, reason: String| {
                            let c = Contradiction {
                                check: a.check.id.clone(),
                                text: which,
                                says: m.says.clone(),
                                against: b.check.id.clone(),
                                profile: profile.map(str::to_string),
                                role,
                                reason,
                            };
                            if !out.contains(&c) {
                                out.push(c);
                            }
                        };
                        if advice_not_to_apply(b) {
                            found(
                                None,
                                format!(
                                    "{} is advice not to apply: its fix carries no command",
                                    b.check.id
                                ),
                            );
                            continue;
                        }
                        for (name, vars) in profiles {
                            let Some(t) = target(b, vars) else { continue };
                            if let Some(reason) = misses(a, b, &m, &t, vars) {
                                found(Some(name), reason);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Why what `a`'s text says (`m`) contradicts `b`'s target `t` under one profile's
/// variables, or None when it does not (or `b`'s comparison judges no value).
fn misses(
    a: &CheckDef,
    b: &CheckDef,
    m: &Mention,
    t: &Value,
    vars: &BTreeMap<String, Value>,
) -> Option<String> {
    let c = b.check.compare;
    let judged = matches!(
        c,
        Compare::AtLeast | Compare::AtMost | Compare::Equal | Compare::Covers
    );
    if !judged {
        return None;
    }
    let wrong = |v: &Value| {
        let v = field_of(
            v,
            if m.field.is_some() {
                None
            } else {
                b.check.field
            },
        );
        matches!(meets(c, &v, t), Ok(false))
    };
    let unbounded = |bound: Option<i64>| {
        bound
            .map(|n| format!("to {n}"))
            .unwrap_or("without a bound".into())
    };
    match &m.action {
        Action::Set(SetTo::Value(v)) if wrong(v) => {
            Some(format!("{v} misses {} {t}", compare_word(c)))
        }
        Action::Set(SetTo::OwnTarget) => {
            let own_key = matches!(&a.check.source, Source::Sysctl(k) if *k == m.key);
            let same_field = a.check.field == b.check.field
                || a.check.field.is_none()
                || b.check.field.is_none();
            if !own_key || !same_field {
                return None;
            }
            let own = target(a, vars)?;
            matches!(meets(c, &own, t), Ok(false))
                .then(|| format!("its target {own} misses {} {t}", compare_word(c)))
        }
        Action::Raise(bound) => {
            let limit = match c {
                Compare::AtMost | Compare::Equal => t.as_num()?,
                _ => return None,
            };
            bound.is_none_or(|n| n > limit).then(|| {
                format!(
                    "raising it {} passes {} {t}",
                    unbounded(*bound),
                    compare_word(c)
                )
            })
        }
        Action::Lower(bound) => {
            let limit = match c {
                Compare::AtLeast | Compare::Equal => t.as_num()?,
                _ => return None,
            };
            bound.is_none_or(|n| n < limit).then(|| {
                format!(
                    "lowering it {} passes {} {t}",
                    unbounded(*bound),
                    compare_word(c)
                )
            })
        }
        _ => None,
    }
}

fn compare_word(c: Compare) -> &'static str {
    super::eval::compare_str(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn profiles() -> Vec<(String, BTreeMap<String, Value>)> {
        crate::profile::EMBEDDED
            .iter()
            .map(|(name, _)| {
                (
                    name.to_string(),
                    crate::profile::load(name).unwrap().profile.variables(),
                )
            })
            .collect()
    }

    fn known() -> BTreeSet<String> {
        profiles()[0].1.keys().cloned().collect()
    }

    #[test]
    fn the_built_in_catalogs_speak_with_one_voice() {
        let profiles = profiles();
        for (file, text) in super::super::EMBEDDED {
            let cat = super::super::parse(text, file, &known()).unwrap();
            // Not vacuous: every fix that is a sysctl command is read as one.
            let keys: Vec<String> = super::super::kube::scopes()
                .iter()
                .map(|(k, _)| k.clone())
                .collect();
            for d in &cat.checks {
                if let Some(r) = d
                    .check
                    .fix
                    .runtime
                    .as_deref()
                    .filter(|r| r.contains("sysctl -w net."))
                {
                    assert!(!mentions(r, &keys, true).is_empty(), "{}: {r}", d.check.id);
                }
            }
            let found = lint(&cat, &profiles);
            assert!(
                found.is_empty(),
                "{file}:\n{}",
                found
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }

    /// A catalog of the three checks that keep tcp_fin_timeout, tcp_tw_recycle and the
    /// receive buffers where they are, and one more whose fix says `fix`.
    fn planted(fix: &str) -> Catalog {
        let text = format!(
            r#"platform: linux
checks:
  - id: t.fin.floor
    title: floor
    source: {{sysctl: net.ipv4.tcp_fin_timeout}}
    scope: netns
    compare: ">="
    target: "min(25, linux.tcp_fin_timeout)"
    severity: warn
    why: w
    fix:
      runtime: "sudo sysctl -w net.ipv4.tcp_fin_timeout={{desired}}"
  - id: t.recycle
    title: recycle
    source: {{sysctl: net.ipv4.tcp_tw_recycle}}
    scope: netns
    compare: "=="
    target: 0
    severity: fail
    why: w
    fix:
      runtime: "sudo sysctl -w net.ipv4.tcp_tw_recycle=0"
  - id: t.rmem.default
    title: rmem
    source: {{sysctl: net.ipv4.tcp_rmem}}
    field: 1
    scope: netns
    compare: "<="
    target: 4096
    severity: info
    why: w
    fix:
      runtime: "leave it as the kernel sets it"
  - id: t.counter
    title: counter
    source: {{netstat: TcpExt.ListenDrops}}
    scope: netns
    compare: no_growth
    severity: warn
    why: w
    fix:
      runtime: "{fix}"
"#
        );
        super::super::parse(&text, "planted.yaml", &known()).unwrap()
    }

    fn says(fix: &str) -> Vec<String> {
        lint(&planted(fix), &profiles())
            .into_iter()
            .map(|c| format!("{} -> {}", c.says, c.against))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    #[test]
    fn a_planted_contradiction_is_found() {
        // A value below the floor, in a command and in a sysctl.d line.
        assert_eq!(
            says("sudo sysctl -w net.ipv4.tcp_fin_timeout=10"),
            ["sysctl -w net.ipv4.tcp_fin_timeout=10 -> t.fin.floor"]
        );
        assert_eq!(
            says("echo 'net.ipv4.tcp_fin_timeout = 15' | sudo tee -a f"),
            ["net.ipv4.tcp_fin_timeout = 15 -> t.fin.floor"]
        );
        // Lowering with no word of the floor, by the key's short name.
        assert_eq!(
            says("raise net.ipv4.tcp_max_orphans and lower tcp_fin_timeout"),
            ["lower tcp_fin_timeout -> t.fin.floor"]
        );
        // A removed, forbidden setting turned on.
        assert_eq!(
            says("sudo sysctl -w net.ipv4.tcp_tw_recycle=1"),
            ["sysctl -w net.ipv4.tcp_tw_recycle=1 -> t.recycle"]
        );
        assert_eq!(
            says("enable tcp_tw_recycle"),
            ["enable tcp_tw_recycle -> t.recycle"]
        );
        // A change of what another check calls advice not to apply.
        assert_eq!(
            says("raise net.ipv4.tcp_mem, lower tcp_rmem/tcp_wmem defaults"),
            ["lower tcp_rmem/tcp_wmem defaults -> t.rmem.default"]
        );
    }

    #[test]
    fn the_built_in_catalog_with_its_old_fix_texts_fails() {
        // linux.sockstat.orphans and linux.counter.tcp_abort_on_memory as they once read.
        let text = super::super::EMBEDDED[0].1;
        let old = text
            .replace(
                "# and lower net.ipv4.tcp_fin_timeout to the profile's, never below 25 (linux.net.ipv4.tcp_fin_timeout.floor)",
                "# and lower tcp_fin_timeout",
            )
            .replace(
                "runtime: \"raise net.ipv4.tcp_mem (out of memory)",
                "runtime: \"raise net.ipv4.tcp_mem, lower tcp_rmem/tcp_wmem defaults; (out of memory)",
            );
        assert_ne!(old, text, "the old texts were planted");
        let cat = super::super::parse(&old, "checks/linux.yaml", &known()).unwrap();
        let found: BTreeSet<(String, String)> = lint(&cat, &profiles())
            .into_iter()
            .map(|c| (c.check, c.against))
            .collect();
        for want in [
            (
                "linux.sockstat.orphans",
                "linux.net.ipv4.tcp_fin_timeout.floor",
            ),
            (
                "linux.counter.tcp_abort_on_memory",
                "linux.net.ipv4.tcp_rmem.default",
            ),
            (
                "linux.counter.tcp_abort_on_memory",
                "linux.net.ipv4.tcp_wmem.default",
            ),
        ] {
            assert!(
                found.contains(&(want.0.to_string(), want.1.to_string())),
                "{want:?} not in {found:?}"
            );
        }
    }

    #[test]
    fn what_agrees_with_the_catalog_passes() {
        for fix in [
            "sudo sysctl -w net.ipv4.tcp_fin_timeout=30",
            "lower net.ipv4.tcp_fin_timeout to the profile's, never below 25 (the floor)",
            "never lower tcp_fin_timeout",
            "sudo sysctl -w net.ipv4.tcp_tw_recycle=0",
            "raise net.core.somaxconn and the server's listen backlog",
            "add memory, or hold fewer connections per host",
        ] {
            assert!(says(fix).is_empty(), "{fix}: {:?}", says(fix));
        }
    }

    #[test]
    fn mentions_read_commands_lines_and_words() {
        let keys: Vec<String> = [
            "net.ipv4.tcp_mem",
            "net.ipv4.tcp_rmem",
            "net.core.somaxconn",
        ]
        .map(String::from)
        .to_vec();
        let m = mentions(
            "sudo sysctl -w net.ipv4.tcp_mem=\"1 2 3\"; echo 'net.core.somaxconn = 4096' | sudo tee f; lower tcp_rmem defaults",
            &keys,
            true,
        );
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(
            m[0].action,
            Action::Set(SetTo::Value(Value::List(vec![1, 2, 3])))
        );
        assert_eq!(m[1].key, "net.core.somaxconn");
        assert_eq!((m[2].field, &m[2].action), (Some(1), &Action::Lower(None)));
        // A why's `KEY = VALUE` describes; only its imperatives recommend.
        assert!(mentions("(net.core.somaxconn = 128)", &keys, false).is_empty());
    }
}
