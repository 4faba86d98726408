//! The built-in profiles, compiled in: one base that holds every value with the comment that
//! explains it, and one short file per size that `extends: base` and sets only what that size
//! changes, each change with its reason. A value is thus written (and explained) once, and the
//! sizes differ where their files say so.
//!
//! The same files are installed under /usr/share/wstune/profiles; `extends: base` there, being a
//! word and not a path, names the compiled-in base, so an installed copy loads as the built-in.

/// The sizes, in ascending order: what `--profile NAME` offers, `profiles list` shows and the
/// reports compare. The base is not among them: it is no size of its own (its values are
/// [`DEFAULT`]'s), only what they start from.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("10k", include_str!("../../profiles/10k.yaml")),
    ("50k", include_str!("../../profiles/50k.yaml")),
    ("100k", include_str!("../../profiles/100k.yaml")),
    ("250k", include_str!("../../profiles/250k.yaml")),
    ("1m", include_str!("../../profiles/1m.yaml")),
];

/// The profile used when none is named.
pub const DEFAULT: &str = "100k";

/// The name of the profile every size extends; a user's profile may extend it too.
pub const BASE: &str = "base";

/// The base's text: every key a profile has, written out, with its comment.
pub(super) const BASE_TEXT: &str = include_str!("../../profiles/base.yaml");

/// The file text of a built-in profile (a size or the base), as the file says it.
pub fn text(name: &str) -> Option<&'static str> {
    if name == BASE {
        return Some(BASE_TEXT);
    }
    EMBEDDED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// A built-in profile written out in full, as one self-contained file: the base's text,
/// comments and all, with the size's own values in place of the base's. For a tool that edits
/// a value in a copy of the profile (`pool --write-profile`) and needs each key's line to be
/// there. None for a name that is no built-in.
pub fn written_out(name: &str) -> Option<String> {
    let size = text(name)?;
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(size).ok()?;
    let mut lines: Vec<String> = BASE_TEXT.lines().map(str::to_string).collect();
    for path in leaves(&doc, "") {
        if path == "extends" {
            continue;
        }
        let (Some(from), Some(to)) = (
            crate::yaml_lines::line_of(size, &path),
            crate::yaml_lines::line_of(BASE_TEXT, &path),
        ) else {
            // Every key a size sets is one the base has (a test holds this).
            return None;
        };
        let value = value_text(size.lines().nth(from - 1)?);
        let line = &mut lines[to - 1];
        let (key, rest) = line.split_once(": ")?;
        // The base's comment after the value keeps its place; only the value changes.
        let old = value_text(line);
        *line = format!("{key}: {}", rest.replacen(old.as_str(), &value, 1));
    }
    // The base's header speaks of the sizes that extend it; this copy is one of them, and
    // says what a whole profile file says.
    let body = lines.iter().skip_while(|l| l.starts_with('#'));
    let header = format!(
        "# wstune tuning profile \"{name}\". Every value is a target for `wstune check`/`apply`, or a\n\
         # default for `wstune serve` and the self-test. Units are in the key names. docs/profiles.md documents each key.\n"
    );
    Some(header + &body.map(|l| format!("{l}\n")).collect::<String>())
}

/// The dotted paths of the scalar values (and lists) in a YAML document.
fn leaves(v: &serde_yaml_ng::Value, prefix: &str) -> Vec<String> {
    match v {
        serde_yaml_ng::Value::Mapping(m) => m
            .iter()
            .filter_map(|(k, v)| k.as_str().map(|k| (k, v)))
            .flat_map(|(k, v)| {
                let path = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &path)
            })
            .collect(),
        _ => vec![prefix.to_string()],
    }
}

/// The value a `key: value  # comment` line writes, as written.
fn value_text(line: &str) -> String {
    let after = line.split_once(": ").map_or("", |(_, v)| v);
    after
        .split(" #")
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_size_written_out_is_the_size_itself() {
        for (name, _) in EMBEDDED {
            let full = written_out(name).unwrap();
            assert!(!full.contains("extends:"), "{name}");
            let whole = super::super::parse(&full, name).unwrap();
            let short = super::super::load(name).unwrap().profile;
            assert_eq!(
                serde_yaml_ng::to_string(&whole).unwrap(),
                serde_yaml_ng::to_string(&short).unwrap(),
                "{name}"
            );
        }
        assert_eq!(written_out("nope"), None);
    }

    #[test]
    fn the_sizes_are_short_and_say_only_what_differs() {
        let base: serde_yaml_ng::Value = serde_yaml_ng::from_str(BASE_TEXT).unwrap();
        for (name, text) in EMBEDDED {
            assert!(
                text.lines().count() < 60,
                "{name}: {} lines",
                text.lines().count()
            );
            assert!(text.contains("\nextends: base\n"), "{name}");
            let size: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).unwrap();
            for path in leaves(&size, "") {
                if ["extends", "name", "description", "connections"].contains(&path.as_str()) {
                    continue;
                }
                let at = |doc: &serde_yaml_ng::Value| {
                    path.split('.')
                        .try_fold(doc.clone(), |v, k| v.get(k).cloned())
                };
                assert_ne!(
                    at(&size),
                    at(&base),
                    "{name}: {path} repeats the base's value"
                );
            }
        }
    }
}
