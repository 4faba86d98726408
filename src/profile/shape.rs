//! Every unknown key, missing key and wrongly typed value of a profile, at once.
//!
//! serde stops at the first such error, so one edit would uncover the next. Here the parsed
//! YAML is compared with the shape of a built-in profile (its keys and value kinds), every
//! mismatch is collected with its dotted path, and the document is patched with the built-in
//! value so deserialization and the range checks can still run on everything else.
//!
//! Which keys a file may leave out is the model's own answer, not a list kept here: a key is
//! optional exactly when the model still reads the template without it (a serde default fills
//! it in), so a key a release adds with a default never breaks a file written before it.

use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use std::collections::BTreeSet;

/// Integer fields narrower than u64 (the template cannot tell a u8 from a u64).
const BYTE_FIELDS: &[&str] = &[
    "server.deflate.window_bits",
    "server.deflate.mem_level",
    "server.deflate.level",
];

/// Keys that take a whole number or a word (`server.processes`: N, auto or cores): serde
/// checks the word.
const NUMBER_OR_WORD: &[&str] = &["server.processes"];

/// The keys and value kinds a document must have, and which keys the model fills in itself.
#[derive(Debug, Clone)]
pub struct Shape {
    /// A valid document as JSON with every key written out (optional blocks too).
    template: Json,
    /// Dotted paths of the keys a document may leave out: the model reads the template
    /// without each one.
    defaulted: BTreeSet<String>,
}

impl Shape {
    /// The shape of `template` as model `T` reads it: each key of the template is removed in
    /// turn and the rest deserialized; where that succeeds, serde has a default for the key.
    pub fn of<T: DeserializeOwned>(template: Json) -> Shape {
        let mut paths = Vec::new();
        key_paths("", &template, &mut paths);
        let defaulted = paths
            .into_iter()
            .filter(|path| {
                let mut doc = template.clone();
                remove(&mut doc, path);
                serde_json::from_value::<T>(doc).is_ok()
            })
            .collect();
        Shape {
            template,
            defaulted,
        }
    }

    /// Whether a document may leave `path` out (the model fills it in).
    pub fn is_defaulted(&self, path: &str) -> bool {
        self.defaulted.contains(path)
    }

    /// Whether `key` is a top-level key of the shape.
    pub fn has_top_level(&self, key: &str) -> bool {
        self.template.get(key).is_some()
    }

    /// The top-level keys, for messages.
    pub fn top_level_keys(&self) -> String {
        match &self.template {
            Json::Object(fields) => names(fields.keys()),
            _ => String::new(),
        }
    }
}

/// Whether an unknown key may be quoted back in a message: a plain name (letters, digits,
/// `_`, `-`, `.`, at most 64 of them), as a typo of a profile key is. Anything else, such as
/// a line of some other file read as a key (`root:$6$...:19000:0:99999:7::`), is not shown.
fn quotable(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Every mapping key's dotted path in `v`, parents before their children.
fn key_paths(prefix: &str, v: &Json, out: &mut Vec<String>) {
    if let Json::Object(fields) = v {
        for (name, sub) in fields {
            let path = join(prefix, name);
            out.push(path.clone());
            key_paths(&path, sub, out);
        }
    }
}

/// `doc` without the key at `path`.
fn remove(doc: &mut Json, path: &str) {
    let (parent, leaf) = path.rsplit_once('.').unwrap_or(("", path));
    let map = if parent.is_empty() {
        Some(doc)
    } else {
        parent.split('.').try_fold(doc, |v, k| v.get_mut(k))
    };
    if let Some(Json::Object(map)) = map {
        map.remove(leaf);
    }
}

/// Take out every block written with nothing under it (`nic:` whose keys are all commented
/// out), so that it means what leaving it out means: the model's defaults for a block that has
/// them, or, in a file that `extends` another (`inherits`), the base's values. A block the
/// model needs and nothing else provides stays, for [`check`] to name. True when one was
/// taken out.
pub fn drop_empty_blocks(doc: &mut Yaml, shape: &Shape, inherits: bool) -> bool {
    fn walk(path: &str, doc: &mut Yaml, template: &Json, shape: &Shape, inherits: bool) -> bool {
        let (Yaml::Mapping(map), Json::Object(fields)) = (doc, template) else {
            return false;
        };
        let mut dropped = false;
        for (name, sub) in fields {
            if !matches!(sub, Json::Object(_)) {
                continue;
            }
            let key = Yaml::String(name.clone());
            let full = join(path, name);
            match map.get_mut(&key) {
                Some(Yaml::Null) if inherits || shape.is_defaulted(&full) => {
                    map.remove(&key);
                    dropped = true;
                }
                Some(v) => dropped |= walk(&full, v, sub, shape, inherits),
                None => {}
            }
        }
        dropped
    }
    walk("", doc, &shape.template, shape, inherits)
}

/// One shape problem: the dotted key path it is about, and what is wrong (with the fix).
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The key the problem is at (for its line); for an unknown key, that key's own path.
    pub path: String,
    pub message: String,
}

/// Compare `doc` with `shape`; fix `doc` in place so that it deserializes, and return what
/// was wrong. An empty list means `doc` was left untouched. A key the model defaults may be
/// left out; an unknown key never passes.
pub fn check(doc: &mut Yaml, shape: &Shape) -> Vec<Mismatch> {
    let mut out = Vec::new();
    walk("", doc, &shape.template, shape, &mut out);
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk(path: &str, doc: &mut Yaml, template: &Json, shape: &Shape, out: &mut Vec<Mismatch>) {
    match template {
        Json::Object(fields) => walk_mapping(path, doc, fields, template, shape, out),
        Json::Number(_) => {
            let (max, what) = if BYTE_FIELDS.contains(&path) {
                (u8::MAX as u64, "a whole number 0..=255")
            } else {
                (u64::MAX, "a whole number (0 or more)")
            };
            // `server.processes` is a number or a word (auto, cores): serde checks the word.
            let word = NUMBER_OR_WORD.contains(&path) && matches!(doc, Yaml::String(_));
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

/// [`walk`] at a mapping: every key of `doc` must be one of the template's `fields` (a typo is
/// named with the key it was probably meant for), and every field the model does not default
/// must be there; each is then walked in turn.
fn walk_mapping(
    path: &str,
    doc: &mut Yaml,
    fields: &serde_json::Map<String, Json>,
    template: &Json,
    shape: &Shape,
    out: &mut Vec<Mismatch>,
) {
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
        if !fields.contains_key(&name) {
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
        let shown = if quotable(&name) {
            format!("`{name}`")
        } else {
            "(a key that is not a plain name, not shown)".to_string()
        };
        out.push(Mismatch {
            path: join(path, &name),
            message: format!(
                "{at}unknown field {shown}, expected one of {}{hint}",
                names(fields.keys())
            ),
        });
        map.remove(&key);
    }
    for (name, sub) in fields {
        let key = Yaml::String(name.clone());
        match map.get_mut(&key) {
            Some(v) => walk(&join(path, name), v, sub, shape, out),
            // Left out where the model has a default: serde fills it in.
            None if shape.is_defaulted(&join(path, name)) => {}
            None => {
                if !meant.contains(name) {
                    out.push(Mismatch {
                    path: path.to_string(),
                    message: format!(
                        "{}missing field `{name}`; add it (docs/reference/profile-keys.md documents each key)",
                        if path.is_empty() { String::new() } else { format!("{path}: ") }
                    ),
                });
                }
                map.insert(key, to_yaml(sub));
            }
        }
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

    /// A model with required keys and defaulted ones, as the profile model has.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        a: u64,
        m: M,
        #[serde(default)]
        later: u64,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct M {
        b: bool,
        r: [u64; 2],
        s: String,
        #[serde(default)]
        block: Block,
    }

    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    #[allow(dead_code)]
    struct Block {
        x: u64,
        y: bool,
    }

    fn shape() -> Shape {
        Shape::of::<Doc>(serde_json::json!({
            "a": 1, "later": 0,
            "m": {"b": true, "r": [1, 2], "s": "x", "block": {"x": 1, "y": false}}
        }))
    }

    #[test]
    fn the_model_says_which_keys_may_be_left_out() {
        let shape = shape();
        let defaulted: Vec<&str> = shape.defaulted.iter().map(String::as_str).collect();
        assert_eq!(
            defaulted,
            ["later", "m.block", "m.block.x", "m.block.y"],
            "{shape:?}"
        );
        // Left out: no mismatch, the document untouched, serde fills them in.
        let mut doc: Yaml = serde_yaml_ng::from_str(
            "a: 1\nm:\n  b: true\n  r: [1, 2]\n  s: y\n  block:\n    y: true\n",
        )
        .unwrap();
        let before = doc.clone();
        assert!(check(&mut doc, &shape).is_empty());
        assert_eq!(doc, before);
        // A key without a default is still required, and a key the model does not have,
        // inside a defaulted block too, is still unknown.
        let mut doc: Yaml =
            serde_yaml_ng::from_str("m:\n  b: true\n  r: [1, 2]\n  s: y\n  block:\n    z: 1\n")
                .unwrap();
        let found = check(&mut doc, &shape);
        let messages: Vec<&str> = found.iter().map(|m| m.message.as_str()).collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(messages[0].starts_with("missing field `a`"), "{found:?}");
        assert!(
            messages[1].starts_with("m.block: unknown field `z`"),
            "{found:?}"
        );
    }

    #[test]
    fn collects_every_mismatch_and_patches_the_document() {
        let shape = shape();
        let mut doc: Yaml =
            serde_yaml_ng::from_str("a: lots\nm:\n  b: 1\n  r: [1]\n  sx: y\nextra: 1\n").unwrap();
        let found = check(&mut doc, &shape);
        let paths: Vec<&str> = found.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            ["extra", "a", "m.sx", "m.b", "m.r"], // `s` is not also "missing": `sx` was meant for it
            "{found:?}"
        );
        assert!(found[2].message.contains("did you mean `s`?"), "{found:?}");
        // Patched: a second pass finds nothing.
        assert!(check(&mut doc, &shape).is_empty());
    }
}
