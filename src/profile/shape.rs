//! Every unknown key, missing key and wrongly typed value of a profile, at once.
//!
//! serde stops at the first such error, so one edit would uncover the next. Here the parsed
//! YAML is compared with the shape of a built-in profile (its keys and value kinds), every
//! mismatch is collected with its dotted path, and the document is patched with the built-in
//! value so deserialization and the range checks can still run on everything else.

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

/// Integer fields narrower than u64 (the template cannot tell a u8 from a u64).
const BYTE_FIELDS: &[&str] = &[
    "server.deflate.window_bits",
    "server.deflate.mem_level",
    "server.deflate.level",
];

/// Keys a profile may leave out that the built-in template does not even show (they serialize
/// only when set), each checked against a value of the kind it takes.
fn optional(path: &str) -> Option<Json> {
    match path {
        "server.deflate.inflate_budget_bytes" => Some(Json::from(0u64)),
        "role" => Some(Json::from("server")),
        // The NIC block: every key optional (serde defaults them).
        "nic" => serde_json::to_value(super::NicProfile::default()).ok(),
        // The abuse limits: every key of the block is optional too (see `LIMITS`).
        LIMITS => serde_json::to_value(super::LimitsProfile::default()).ok(),
        // The channels app's block: every key optional (serde defaults them).
        "server.channels" => serde_json::to_value(super::ChannelsProfile::default()).ok(),
        // The memory budget and its bounds: every key optional too.
        "server.budget" => serde_json::to_value(super::BudgetProfile::default()).ok(),
        // The drain's pacing: every key optional too.
        "server.drain" => serde_json::to_value(super::DrainProfile::default()).ok(),
        _ => None,
    }
}

/// Keys the template shows that a profile may still leave out (newer than most profiles in
/// use), each with a serde default.
const OPTIONAL: &[&str] = &["server.processes"];

/// `server.limits`: an optional block whose keys are each optional (serde defaults them).
const LIMITS: &str = "server.limits";

/// One shape problem: the dotted key path it is about, and what is wrong (with the fix).
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The key the problem is at (for its line); for an unknown key, that key's own path.
    pub path: String,
    pub message: String,
}

/// Compare `doc` with `template` (a valid profile as JSON); fix `doc` in place so that it
/// deserializes, and return what was wrong. An empty list means `doc` was left untouched.
pub fn check(doc: &mut Yaml, template: &Json) -> Vec<Mismatch> {
    let mut out = Vec::new();
    walk("", doc, template, &mut out);
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk(path: &str, doc: &mut Yaml, template: &Json, out: &mut Vec<Mismatch>) {
    match template {
        Json::Object(fields) => {
            let Yaml::Mapping(map) = doc else {
                out.push(Mismatch {
                    path: path.to_string(),
                    message: format!(
                        "{}: expected a mapping of {}, found {}",
                        if path.is_empty() { "the profile" } else { path },
                        names(fields.keys()),
                        kind(doc)
                    ),
                });
                *doc = to_yaml(template);
                return;
            };
            let mut unknown = Vec::new();
            for key in map.keys() {
                let name = match key {
                    Yaml::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                };
                if !fields.contains_key(&name) && optional(&join(path, &name)).is_none() {
                    unknown.push((key.clone(), name));
                }
            }
            // A typo is one problem, not two: the key it was meant for is not also "missing".
            let mut meant = Vec::new();
            for (key, name) in unknown {
                let near = closest(&name, fields.keys());
                meant.extend(near.cloned());
                let hint = near
                    .map(|c| format!("; did you mean `{c}`?"))
                    .unwrap_or_default();
                let at = if path.is_empty() {
                    String::new()
                } else {
                    format!("{path}: ")
                };
                out.push(Mismatch {
                    path: join(path, &name),
                    message: format!(
                        "{at}unknown field `{name}`, expected one of {}{hint}",
                        names(fields.keys())
                    ),
                });
                map.remove(&key);
            }
            for (key, v) in map.iter_mut() {
                if let Yaml::String(name) = key {
                    let at = join(path, name);
                    if let Some(t) = optional(&at) {
                        walk(&at, v, &t, out);
                    }
                }
            }
            for (name, sub) in fields {
                let key = Yaml::String(name.clone());
                match map.get_mut(&key) {
                    Some(v) => walk(&join(path, name), v, sub, out),
                    // An optional key left out: serde's default fills it in.
                    None if OPTIONAL.contains(&join(path, name).as_str())
                        || path == LIMITS
                        || path == "server.channels"
                        || path == "server.channels.auth"
                        || path == "server.channels.history"
                        || path == "nic" => {}
                    None => {
                        if !meant.contains(name) {
                            out.push(Mismatch {
                            path: path.to_string(),
                            message: format!(
                                "{}missing field `{name}`; add it (docs/profiles.md documents each key)",
                                if path.is_empty() { String::new() } else { format!("{path}: ") }
                            ),
                        });
                        }
                        map.insert(key, to_yaml(sub));
                    }
                }
            }
        }
        Json::Number(_) => {
            let (max, what) = if BYTE_FIELDS.contains(&path) {
                (u8::MAX as u64, "a whole number 0..=255")
            } else {
                (u64::MAX, "a whole number (0 or more)")
            };
            // `server.processes` is a number or a word (auto, cores): serde checks the word.
            let word = OPTIONAL.contains(&path) && matches!(doc, Yaml::String(_));
            if !word && !matches!(doc, Yaml::Number(n) if n.as_u64().is_some_and(|v| v <= max)) {
                out.push(Mismatch {
                    path: path.to_string(),
                    message: format!("{path}: expected {what}, found {}", shown(doc)),
                });
                *doc = to_yaml(template);
            }
        }
        Json::Bool(_) => {
            if !matches!(doc, Yaml::Bool(_)) {
                out.push(Mismatch {
                    path: path.to_string(),
                    message: format!("{path}: expected true or false, found {}", shown(doc)),
                });
                *doc = to_yaml(template);
            }
        }
        Json::String(_) => {
            if !matches!(doc, Yaml::String(_)) {
                out.push(Mismatch {
                    path: path.to_string(),
                    message: format!("{path}: expected text, found {}", shown(doc)),
                });
                *doc = to_yaml(template);
            } else if let (Some(words), Yaml::String(w)) = (words_of(path), &*doc) {
                if !words.contains(&w.as_str()) {
                    out.push(Mismatch {
                        path: path.to_string(),
                        message: format!(
                            "{path}: {w:?} is not one of {}",
                            words
                                .iter()
                                .map(|w| format!("`{w}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                    *doc = to_yaml(template);
                }
            }
        }
        // A list of text (the limits' address lists; the template's is empty).
        Json::Array(items) if items.is_empty() => {
            if !matches!(doc, Yaml::Sequence(s) if s.iter().all(|v| matches!(v, Yaml::String(_)))) {
                out.push(Mismatch {
                    path: path.to_string(),
                    message: format!(
                        "{path}: expected a list of addresses or networks ([10.0.0.0/8, 192.0.2.7]), found {}",
                        shown(doc)
                    ),
                });
                *doc = to_yaml(template);
            }
        }
        Json::Array(items) => {
            let ok = matches!(doc, Yaml::Sequence(s) if s.len() == items.len()
                && s.iter().all(|v| matches!(v, Yaml::Number(n) if n.as_u64().is_some())));
            if !ok {
                out.push(Mismatch {
                    path: path.to_string(),
                    message: format!(
                        "{path}: expected a list of {} whole numbers like {}, found {}",
                        items.len(),
                        serde_json::to_string(template).unwrap_or_default(),
                        shown(doc)
                    ),
                });
                *doc = to_yaml(template);
            }
        }
        Json::Null => {}
    }
}

/// The words a key of a fixed vocabulary takes (serde would say so too, but without the line).
fn words_of(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "role" => &["server", "proxy", "kubernetes-node"],
        "nic.rss" => &[
            "closest",
            "closest_static",
            "numa_scaling",
            "numa_scaling_static",
            "conservative",
        ],
        "nic.irq" => &["irqbalance", "pinned"],
        "nic.when" => &["evidence", "always"],
        _ => return None,
    })
}

fn to_yaml(v: &Json) -> Yaml {
    serde_yaml_ng::to_value(v).unwrap_or(Yaml::Null)
}

fn names<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    keys.map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn kind(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "nothing",
        Yaml::Bool(_) => "true/false",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "text",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

/// The value as the user wrote it (short), for "found ...".
fn shown(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => format!("{s:?}"),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => kind(other).to_string(),
    }
}

/// The known key nearest to a typo, when it is close (at most 2 edits).
fn closest<'a>(name: &str, keys: impl Iterator<Item = &'a String>) -> Option<&'a String> {
    keys.map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("somaxcon", "somaxconn"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    #[test]
    fn collects_every_mismatch_and_patches_the_document() {
        let template: Json = serde_json::json!({"a": 1, "m": {"b": true, "r": [1, 2], "s": "x"}});
        let mut doc: Yaml =
            serde_yaml_ng::from_str("a: lots\nm:\n  b: 1\n  r: [1]\n  sx: y\nextra: 1\n").unwrap();
        let found = check(&mut doc, &template);
        let paths: Vec<&str> = found.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            ["extra", "a", "m.sx", "m.b", "m.r"], // `s` is not also "missing": `sx` was meant for it
            "{found:?}"
        );
        assert!(found[2].message.contains("did you mean `s`?"), "{found:?}");
        // Patched: a second pass finds nothing.
        assert!(check(&mut doc, &template).is_empty());
    }
}
