//! docs/reference/profile-keys.md: every key a profile file may hold, with its value in the
//! default profile, what it is when left out and the values it is allowed, generated so the
//! page cannot drift from the code. Each column comes from the code that decides it:
//! - the keys, their types and their meaning: the profile model's fields and their doc
//!   comments (src/profile/model.rs, read at compile time);
//! - the value in the default profile: that profile, loaded;
//! - "left out": the default profile with that one key removed, deserialized by the model
//!   itself (serde's defaults), or "required" when that fails;
//! - "allowed": the validator (`profile::validate`), asked about values at the edges (0, 1,
//!   the largest the type holds), in its own words.
//!
//! A unit test below fails when the committed page is stale; `UPDATE_SNAPSHOTS=1 cargo test
//! --lib profile_doc` rewrites it.

use crate::profile::{self, Profile};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The profile model's source: its fields, their types and doc comments.
const MODEL: &str = include_str!("../profile/model.rs");

/// One field of a model struct, as the source declares it.
struct Field {
    name: String,
    ty: String,
    doc: String,
}

/// The model's structs (name -> fields in order) and its enums that serde writes as words
/// (name -> those words).
struct Model {
    structs: BTreeMap<String, Vec<Field>>,
    enums: BTreeMap<String, Vec<String>>,
    /// Each type's own doc comment: the meaning of a field that has none of its own.
    type_docs: BTreeMap<String, String>,
}

/// Reads the model's declarations: `pub struct` bodies of `pub name: Type,` fields with the
/// `///` lines above them, and the unit variants of each enum with a serde `rename_all`.
fn model() -> Model {
    let mut m = Model {
        structs: BTreeMap::new(),
        enums: BTreeMap::new(),
        type_docs: BTreeMap::new(),
    };
    let mut doc: Vec<&str> = Vec::new();
    let mut rename: Option<&str> = None;
    // (is_struct, name) of the item whose body the lines are in.
    let mut inside: Option<(bool, String)> = None;
    for line in MODEL.lines() {
        let t = line.trim();
        if let Some(d) = t.strip_prefix("///") {
            doc.push(d.trim());
            continue;
        }
        if t.starts_with("#[") {
            if let Some(r) = t.split("rename_all = \"").nth(1) {
                rename = r.split('"').next();
            }
            continue;
        }
        if line == "}" {
            inside = None;
        } else if let Some(name) = item_name(t, "pub struct ") {
            m.structs.insert(name.clone(), Vec::new());
            inside = Some((true, name));
        } else if let Some(name) = item_name(t, "pub enum ") {
            m.type_docs.insert(name.clone(), doc.join(" "));
            if let Some(r) = rename {
                m.enums.insert(name.clone(), Vec::new());
                inside = Some((false, name));
                rename = Some(r);
                doc.clear();
                continue;
            }
        } else if let Some((true, name)) = &inside {
            if let Some((field, ty)) = t
                .strip_prefix("pub ")
                .and_then(|f| f.strip_suffix(','))
                .and_then(|f| f.split_once(": "))
            {
                m.structs.get_mut(name).expect("opened above").push(Field {
                    name: field.to_string(),
                    ty: ty.to_string(),
                    doc: doc.join(" "),
                });
            }
        } else if let Some((false, name)) = &inside {
            let variant = t.strip_suffix(',').unwrap_or("");
            if !variant.is_empty() && variant.chars().all(char::is_alphanumeric) {
                let word = serde_word(variant, rename.unwrap_or("snake_case"));
                m.enums.get_mut(name).expect("opened above").push(word);
            }
        }
        if !t.starts_with("pub enum ") {
            doc.clear();
        }
        if inside.is_none() {
            rename = None;
        }
    }
    m
}

fn item_name(line: &str, prefix: &str) -> Option<String> {
    let rest = line.strip_prefix(prefix)?.strip_suffix(" {")?;
    Some(rest.to_string())
}

/// A variant's name as serde's `rename_all` writes it (`NumaScaling` -> `numa_scaling`).
fn serde_word(variant: &str, rule: &str) -> String {
    let sep = if rule == "kebab-case" { '-' } else { '_' };
    let mut out = String::new();
    for (i, c) in variant.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push(sep);
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// One key of the page.
struct Key {
    path: String,
    ty: String,
    doc: String,
}

/// Every leaf key under `name`'s fields, depth first in the source's order.
fn keys(m: &Model, name: &str, prefix: &str, out: &mut Vec<Key>) {
    for f in &m.structs[name] {
        let path = if prefix.is_empty() {
            f.name.clone()
        } else {
            format!("{prefix}.{}", f.name)
        };
        let ty =
            f.ty.strip_prefix("Option<")
                .and_then(|t| t.strip_suffix('>'))
                .unwrap_or(&f.ty);
        if m.structs.contains_key(ty) {
            keys(m, ty, &path, out);
        } else {
            let doc = match (f.doc.is_empty(), m.type_docs.get(ty)) {
                (true, Some(d)) => d.clone(),
                _ => f.doc.clone(),
            };
            out.push(Key {
                path,
                ty: ty.to_string(),
                doc,
            });
        }
    }
}

/// A profile as JSON with every block written out (see [`Profile::written_out`]).
fn full(p: &Profile) -> Value {
    p.written_out()
}

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn get_mut<'a>(v: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    path.split('.').try_fold(v, |v, k| v.get_mut(k))
}

/// The key's value when a profile leaves it out: the default profile without it, read by the
/// model; `None` when the model requires it.
fn left_out(base: &Value, path: &str) -> Option<String> {
    let mut doc = base.clone();
    let (parent, leaf) = path.rsplit_once('.').unwrap_or(("", path));
    let map = if parent.is_empty() {
        Some(&mut doc)
    } else {
        get_mut(&mut doc, parent)
    };
    if let Some(Value::Object(map)) = map {
        map.remove(leaf);
    }
    let read: Profile = serde_json::from_value(doc).ok()?;
    Some(get(&full(&read), path).map_or_else(|| "unset".to_string(), code))
}

/// The validator's rule for a key, from the problems it reports at the edges of the key's type.
fn allowed(base: &Value, path: &str) -> Option<String> {
    let current = get(base, path)?;
    let probes: Vec<Value> = match current {
        Value::Number(_) => [0, 1, 255, u64::MAX].into_iter().map(Value::from).collect(),
        Value::Array(a) if a.iter().all(Value::is_number) => {
            vec![Value::from(vec![0u64; a.len()])]
        }
        _ => return None,
    };
    for probe in probes {
        let mut doc = base.clone();
        *get_mut(&mut doc, path)? = probe;
        let Ok(p) = serde_json::from_value::<Profile>(doc) else {
            continue;
        };
        let problems = profile::validate(&p);
        let mine = problems.iter().filter(|(k, _)| *k == path);
        let mut rule = None;
        for (_, message) in mine {
            if let Some((_, bound)) = message.split_once("allowed ") {
                return Some(bound.to_string());
            }
            if let Some((_, how)) = message.split_once("; ") {
                rule.get_or_insert_with(|| how.to_string());
            }
        }
        if rule.is_some() {
            return rule;
        }
    }
    None
}

/// A JSON value as inline code: `200000`, `true`, `[10000,65535]`, `"text"`.
fn code(v: &Value) -> String {
    format!("`{v}`")
}

/// A Rust field type in the words of a profile file.
fn kind(m: &Model, ty: &str) -> String {
    if let Some(words) = m.enums.get(ty) {
        let words: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
        return format!("one of {}", words.join(", "));
    }
    match ty {
        "u8" | "u64" => "integer".to_string(),
        "bool" => "`true` or `false`".to_string(),
        "String" => "text".to_string(),
        "Vec<String>" => "list of text".to_string(),
        "[u64; 2]" => "`[low, high]`".to_string(),
        "Processes" => "integer, `auto` or `cores`".to_string(),
        other => format!("`{other}`"),
    }
}

/// A doc comment as one table cell: intra-doc links as plain code, no cell separator.
fn cell(doc: &str) -> String {
    doc.replace("[`", "`")
        .replace("`]", "`")
        .replace('|', "\\|")
        .replace('<', "\\<")
}

/// The whole of docs/reference/profile-keys.md.
pub fn profile_keys_markdown() -> String {
    let default = profile::load(profile::DEFAULT)
        .expect("the default profile loads")
        .profile;
    let base = full(&default);
    let m = model();
    let mut all = Vec::new();
    keys(&m, "Profile", "", &mut all);

    let mut out = format!(
        "# Profile keys\n\n\
         Every key a profile file (`profiles/*.yaml`, or any file `--profile PATH` names) may \
         hold. *{d}* is the value in the built-in default profile `{d}`; *left out* is what a \
         profile that omits the key gets (*required*: loading it fails and says so); *allowed* \
         is what loading accepts, in the validator's words (every problem of a file is reported \
         at once, with its line). [Profiles](../profiles.md) says how to write one, and \
         `extends:` to start from another.\n\n\
         Generated from the profile model (`src/profile/model.rs`, its fields and their doc \
         comments), the default profile and the validator (`src/profile/validate.rs`), by \
         `src/report/profile_doc.rs`; a unit test fails when this page is stale, and \
         `UPDATE_SNAPSHOTS=1 cargo test --lib profile_doc` rewrites it.\n",
        d = profile::DEFAULT
    );
    // One table per block, the blocks in the order the model first names them.
    let mut blocks: Vec<(String, Vec<String>)> = Vec::new();
    for k in &all {
        let block = match k.path.split_once('.') {
            Some(("server", rest)) => rest
                .split_once('.')
                .map_or("server".to_string(), |(b, _)| format!("server.{b}")),
            Some((first, _)) => first.to_string(),
            None => String::new(),
        };
        let in_default = get(&base, &k.path).map_or_else(|| "unset".to_string(), code);
        let absent = left_out(&base, &k.path).unwrap_or_else(|| "required".to_string());
        let rule = allowed(&base, &k.path)
            .map(|r| cell(&r))
            .unwrap_or_default();
        let row = format!(
            "| `{}` | {} | {} | {} | {} | {} |",
            k.path,
            kind(&m, &k.ty),
            in_default,
            absent,
            rule,
            cell(&k.doc)
        );
        match blocks.iter_mut().find(|(b, _)| *b == block) {
            Some((_, rows)) => rows.push(row),
            None => blocks.push((block, vec![row])),
        }
    }
    for (block, rows) in blocks {
        let title = if block.is_empty() {
            "The top level".to_string()
        } else {
            format!("`{block}`")
        };
        let _ = write!(
            out,
            "\n## {title}\n\n| key | type | {} | left out | allowed | meaning |\n|---|---|---|---|---|---|\n",
            profile::DEFAULT
        );
        for row in rows {
            let _ = writeln!(out, "{row}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile author looks a key up here: the page must hold every key as the code has it.
    #[test]
    fn profile_doc_is_current() {
        crate::report::book::assert_current(
            "docs/reference/profile-keys.md",
            &profile_keys_markdown(),
            "a profile key, default or bound changed",
            "profile_doc",
        );
    }

    /// The readers of the model, the defaults and the validator find what the code says.
    #[test]
    fn profile_doc_reads_keys_defaults_bounds_and_words() {
        let md = profile_keys_markdown();
        let row = |key: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| `{key}` |")))
                .unwrap_or_else(|| panic!("no row for {key}:\n{md}"))
                .to_string()
        };
        assert!(row("linux.somaxconn").contains(
            "| integer | `65535` | required | 128..=2147483647 (the kernel's maximum is 2147483647, an int) |"
        ));
        assert!(row("server.coalesce_us").contains("| `500` |"));
        assert!(row("server.limits.message_rate_close").contains("use 1008"));
        assert!(row("linux.ip_local_port_range").contains("1024 \\<= low"));
        assert!(row("role").contains("| unset | unset |"));
        // The words serde writes, as the model's own list has them.
        let words: Vec<String> = crate::profile::RssProfile::ALL
            .iter()
            .map(|r| format!("`{}`", r.as_str()))
            .collect();
        assert!(row("nic.rss").contains(&format!("one of {}", words.join(", "))));
        let roles: Vec<String> = crate::profile::Role::ALL
            .iter()
            .map(|r| format!("`{}`", r.as_str()))
            .collect();
        assert!(row("role").contains(&roles.join(", ")));
        // Every key of the model has its value in the default profile, or is an Option.
        let m = model();
        let mut all = Vec::new();
        keys(&m, "Profile", "", &mut all);
        assert!(all.len() > 60, "{}", all.len());
        let base = full(&profile::load(profile::DEFAULT).unwrap().profile);
        for k in &all {
            assert!(
                get(&base, &k.path).is_some()
                    || ["role", "server.deflate.inflate_budget_bytes"].contains(&k.path.as_str()),
                "{} is missing from the default profile's JSON: add its block to `Profile::written_out`",
                k.path
            );
        }
        // Every key the validator names is on the page.
        for (key, _) in crate::profile::validate(&{
            let mut p = profile::load(profile::DEFAULT).unwrap().profile;
            p.linux.somaxconn = 0;
            p
        }) {
            row(key);
        }
    }
}
