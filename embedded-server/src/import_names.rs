//! Which modules a Rust source file names under a path root (`crate::`, `super::`): the one
//! reader both crates' layering tests use (embedded-server's module graph, and the binary's
//! rule that only cli knows clap and no command imports another). Test-only: included by path
//! from the binary's tests, declared under `cfg(test)` here.

/// The first segment of every path under `root::`, plain (`crate::cli::x`) or grouped
/// (`crate::{cli::x, engine}`, nested groups included): `crate::{cli::...}` and
/// `super::apply` inside cmd/ imported around the text match once.
pub fn names_under(text: &str, root: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let pat = format!("{root}::");
    for (i, _) in text.match_indices(&pat) {
        // A whole segment: `supercrate::x` is not `crate::x`.
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = text[i + pat.len()..].trim_start();
        let Some(group) = rest.strip_prefix('{') else {
            out.push(ident(rest));
            continue;
        };
        // The group's top-level items, split at commas outside nested braces.
        let (mut depth, mut start) = (0usize, 0usize);
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(ident(&group[start..j]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(ident(&group[start..j]));
                    start = j + 1;
                }
                _ => {}
            }
        }
    }
    out.retain(|n| !n.is_empty());
    out
}
