//! docs/reference/report-schema.md: the fields of `wstune check --format json`, then of the
//! self-test's JSON report, one row each, generated from the JSON Schemas the tests validate
//! the reports against (docs/check-report.schema.json, docs/selftest-report.schema.json, read
//! at compile time), so the page and the schema cannot
//! disagree. A unit test below fails when the committed page is stale;
//! `UPDATE_SNAPSHOTS=1 cargo test --lib schema_doc` rewrites it.
//!
//! The schema is read as YAML (JSON is a subset of it) because a YAML mapping keeps its keys
//! in the file's order, and the page lists the fields in the order the report writes them;
//! `serde_json::Value` would sort them.

use serde_yaml_ng::Value;
use std::fmt::Write;

const SCHEMA: &str = include_str!("../../docs/check-report.schema.json");
/// The self-test's report (`selftest`, `serve --self-test`, `report merge`), on the same page.
const SELFTEST_SCHEMA: &str = include_str!("../../docs/selftest-report.schema.json");

/// A schema's type in words: `integer`, `"pass"`, ..., `string or null`, `object`.
fn type_of(s: &Value, root: &Value) -> String {
    let s = resolve(s, root);
    if let Some(c) = s.get("const") {
        return format!("`{}`", json(c));
    }
    if let Some(Value::Sequence(e)) = s.get("enum") {
        let words: Vec<String> = e.iter().map(|v| format!("`{}`", json(v))).collect();
        return words.join(", ");
    }
    if let Some(Value::Sequence(alts)) = s.get("oneOf").or(s.get("anyOf")) {
        let kinds: Vec<String> = alts.iter().map(|a| type_of(a, root)).collect();
        return kinds.join(" or ");
    }
    match s.get("type") {
        Some(Value::String(t)) if t == "array" => match s.get("items") {
            Some(items) => format!("array of {}", type_of(items, root)),
            None => "array".to_string(),
        },
        Some(Value::String(t)) => t.clone(),
        Some(Value::Sequence(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_string(),
    }
}

/// A constant as the report writes it: `1`, `"pass"`.
fn json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// `{"$ref": "#/$defs/x"}` -> the schema it names.
fn resolve<'a>(s: &'a Value, root: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/")
            .map(|p| p.split('/').fold(root, |v, k| &v[k]))
            .unwrap_or(s),
        None => s,
    }
}

/// One row per property, depth first; an array's items as `name[]`.
fn rows(path: &str, s: &Value, root: &Value, out: &mut String) {
    let s = resolve(s, root);
    let s = match (s.get("type").and_then(Value::as_str), s.get("items")) {
        (Some("array"), Some(items)) => resolve(items, root),
        _ => s,
    };
    let Some(Value::Mapping(props)) = s.get("properties") else {
        return;
    };
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_sequence)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, p) in props {
        let Some(name) = name.as_str() else { continue };
        let child = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        let p_resolved = resolve(p, root);
        let is_array = p_resolved.get("type").and_then(Value::as_str) == Some("array");
        let shown = if is_array {
            format!("{child}[]")
        } else {
            child.clone()
        };
        let about = p
            .get("description")
            .or(p_resolved.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let _ = writeln!(
            out,
            "| `{shown}` | {} | {} | {} |",
            type_of(p, root).replace('|', "\\|"),
            if required.contains(&name) {
                "yes"
            } else {
                "no"
            },
            about.replace('|', "\\|").replace('<', "\\<")
        );
        rows(&shown, p, root, out);
    }
}

/// The whole of docs/reference/report-schema.md.
pub fn schema_markdown() -> String {
    let root: Value = serde_yaml_ng::from_str(SCHEMA).expect("the schema is JSON, so YAML");
    let title = root["title"].as_str().unwrap_or("");
    let about = root["description"].as_str().unwrap_or("");
    let mut out = format!(
        "# The JSON report\n\n\
         `{title}` writes one object per run. {about} The schema itself is \
         [check-report.schema.json](../check-report.schema.json) (JSON Schema 2020-12); the tests \
         validate every report they make against it. [Checking a host](../check.md) shows the \
         other formats.\n\n\
         Generated from the schema by `src/report/schema_doc.rs`; a unit test fails when this \
         page is stale, and `UPDATE_SNAPSHOTS=1 cargo test --lib schema_doc` rewrites it.\n\n\
         | field | type | required | meaning |\n|---|---|---|---|\n"
    );
    rows("", &root, &root, &mut out);
    let root: Value =
        serde_yaml_ng::from_str(SELFTEST_SCHEMA).expect("the schema is JSON, so YAML");
    let title = root["title"].as_str().unwrap_or("");
    let about = root["description"].as_str().unwrap_or("");
    let _ = write!(
        out,
        "\n## The self-test report\n\n\
         `{title}` writes one object per run. {about} The schema itself is \
         [selftest-report.schema.json](../selftest-report.schema.json) (JSON Schema 2020-12); the \
         tests validate the reports they make against it. [Self-test](../selftest.md) shows \
         the table and the HTML page. Objects listed without their fields (memory, disturbance, \
         host_timeline, ...) are for reading; their fields may grow.\n\n\
         | field | type | required | meaning |\n|---|---|---|---|\n"
    );
    rows("", &root, &root, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_doc_is_current() {
        crate::report::book::assert_current(
            "docs/reference/report-schema.md",
            &schema_markdown(),
            "the schema changed",
            "schema_doc",
        );
    }

    #[test]
    fn schema_doc_follows_refs_and_arrays() {
        let md = schema_markdown();
        assert!(md.contains("| `schema_version` | `1` | yes |"), "{md}");
        assert!(md.contains("| `results[].status` | `\"pass\"`, "), "{md}");
        assert!(
            md.contains("| `results[].fix.runtime` | string or null | yes |"),
            "{md}"
        );
        assert!(md.contains("| `results[].refs[].url` |"), "{md}");
        // The self-test's report, below the check's.
        assert!(md.contains("## The self-test report"), "{md}");
        assert!(
            md.contains("| `scenarios[].latency_ms.p99` | number | yes |"),
            "{md}"
        );
        assert!(md.contains("| `refused[].instead[]` |"), "{md}");
    }

    /// The rows follow the schema's own order (the report's), not the alphabet.
    #[test]
    fn schema_doc_keeps_the_schemas_order() {
        let md = schema_markdown();
        let at = |f: &str| {
            md.find(&format!("| `{f}` |"))
                .unwrap_or_else(|| panic!("{f}: {md}"))
        };
        assert!(at("schema_version") < at("profile"));
        assert!(at("profile") < at("host"));
        assert!(at("results[].id") < at("results[].title"));
        assert!(at("results[]") < at("summary"));
    }
}
