//! What a crate's Rust sources name: the one reader both crates' layering tests use. At module
//! level, which modules a file names under a path root (`crate::`, `super::`: embedded-server's
//! module graph, and the binary's rule that only cli knows clap and no command imports
//! another); at file level, which files a file's code names, and the circles they form.
//! Test-only: included by path from the binary's tests, declared under `cfg(test)` here.
//! Text, not a parser: a path is read where it is written, which is how this code base writes
//! them (no macros that build paths, no `use` inside inline modules that cross files).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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

/// Every `.rs` file under `src`, as (path relative to `src` with `/` separators, text), sorted.
pub fn sources(src: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap().to_string_lossy();
                out.push((rel.replace('\\', "/"), std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A file's code up to its unit tests, comments left out: what the shipped binary is built
/// from (a doc link to another module is no dependency of the code).
pub fn shipped(text: &str) -> String {
    // An inline `mod tests { ... }` ends the file by convention; `#[cfg(test)] mod tests;`
    // (tests in their own file) and other cfg(test) items leave the code around them counted.
    let inline_tests = text.match_indices("mod tests {").find(|(i, _)| {
        let attribute = text[..*i].trim_end().rsplit('\n').next().unwrap_or("");
        attribute.starts_with("#[cfg(") && attribute.contains("test")
    });
    let code = inline_tests.map_or(text, |(i, _)| {
        let attribute_start = text[..i].trim_end().rfind('\n').map_or(0, |n| n + 1);
        &text[..attribute_start]
    });
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Unit tests kept in a file of their own (`foo/tests.rs`, declared `#[cfg(test)] mod tests;`).
pub fn is_test_file(rel: &str) -> bool {
    rel == "tests.rs" || rel.ends_with("/tests.rs")
}

/// Every path under `root::` in `text`, as its segments after the root, groups expanded:
/// `crate::{a::{b, c::D}, e}` is `[a, b]`, `[a, c, D]`, `[e]`; `a::{self, B}` names `[a]`;
/// a glob ends at its module (`super::*` is `[]`). `x::root::` and `xroot::` are not under it.
pub fn paths_under(text: &str, root: &str) -> Vec<Vec<String>> {
    let pat = format!("{root}::");
    let mut out = Vec::new();
    for (i, _) in text.match_indices(&pat) {
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        expand(&text[i + pat.len()..], &[], &mut out);
    }
    out
}

/// The paths of one use tree (or one path expression) starting at `s`, each after `prefix`.
fn expand(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut segs = prefix.to_vec();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            for item in group_items(group) {
                expand(item, &segs, out);
            }
            return;
        }
        let id: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if id.is_empty() {
            break;
        }
        rest = rest[id.len()..].trim_start();
        if id != "self" {
            segs.push(id);
        }
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out.push(segs);
}

/// The items of a `{...}` group (its text after the brace), split at commas outside nested
/// braces, up to the brace that closes it.
fn group_items(group: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..j]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    items
}

/// The module path a file defines by its place (`a/b.rs` and `a/b/mod.rs` are `[a, b]`; the
/// crate roots `lib.rs` and `main.rs` are `[]`).
fn module_path(rel: &str) -> Vec<String> {
    let p = rel.trim_end_matches(".rs");
    let p = p.strip_suffix("/mod").unwrap_or(p);
    if p == "lib" || p == "main" || p == "mod" {
        return Vec::new();
    }
    p.split('/').map(String::from).collect()
}

/// The modules `code` declares from files (`mod x;`), each with the file a `#[path]`
/// attribute above it names (relative to the declaring file's folder), if any.
fn declared_modules(code: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut path_attr = None;
    for line in code.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("#[path = \"") {
            path_attr = p.split('"').next().map(String::from);
            continue;
        }
        let decl = line
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
            out.push((name.trim().to_string(), path_attr.take()));
        } else if !line.starts_with("#[") {
            path_attr = None;
        }
    }
    out
}

/// A crate's files as a graph: each file -> the files its shipped code names. `files` holds
/// (path relative to src/, code) with unit-test files left out and test modules cut
/// (`shipped`). The graph is the one the house's plans draw (`farm-studio look`), so the test
/// and the plans name the same circles:
/// - a path names the file of its longest module prefix (`crate::a::b::Item` is a/b.rs or
///   a/b/mod.rs), written in a `use` (`crate::`, `super::`, `self::`, a child module's name),
///   anywhere under `crate::`, or in a call under `super::`, `self::` or a child
///   (`super::x::f()`);
/// - a re-export (`pub use child::Item;`) only hands names on: it is no arrow, and a path
///   through it names the re-exporting file;
/// - the files of the modules a file sits in (its parent's mod.rs and up) are no arrows: a
///   child naming what its parent keeps for all its children is at home, and an arrow up
///   would make every folder a circle;
/// - the crate roots (lib.rs, main.rs) are no nodes.
pub fn file_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(files);
    let file_of = |path: &[String]| (1..=path.len()).rev().find_map(|k| modules.get(&path[..k]));
    let mut graph = BTreeMap::new();
    for (rel, code) in files.iter().filter(|(rel, _)| !is_root(rel)) {
        let here = module_path(rel);
        let children = declared_modules(code).into_iter().map(|(c, _)| c);
        let (code, _) = split_uses(code, true);
        let (code, imports) = split_uses(&code, false);
        let mut named: Vec<Vec<String>> = paths_under(&code, "crate");
        named.extend(imports.into_iter().map(|p| absolute(&here, p)));
        for root in ["super".to_string(), "self".to_string()]
            .into_iter()
            .chain(children)
        {
            for p in calls_under(&code, &root) {
                named.push(absolute(&here, [vec![root.clone()], p].concat()));
            }
        }
        let enclosing: BTreeSet<&String> = (0..here.len())
            .flat_map(|k| modules.get(&here[..k]).into_iter().flatten())
            .collect();
        let deps = named
            .iter()
            .filter_map(|p| file_of(p))
            .flatten()
            .filter(|f| *f != rel && !enclosing.contains(f))
            .cloned()
            .collect();
        graph.insert(rel.clone(), deps);
    }
    graph
}

/// The crate roots, which declare and re-export but are no rooms of their own.
fn is_root(rel: &str) -> bool {
    rel == "lib.rs" || rel == "main.rs"
}

/// Module path -> the files that define it: by their place, and by a `#[path]` attribute
/// (two files where cfg-chosen twins share one module).
fn modules(files: &[(String, String)]) -> BTreeMap<Vec<String>, BTreeSet<String>> {
    let mut modules: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for (rel, code) in files {
        let here = module_path(rel);
        if !is_root(rel) {
            modules.entry(here.clone()).or_default().insert(rel.clone());
        }
        let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
        for (name, path) in declared_modules(code) {
            if let Some(p) = path {
                let target = if dir.is_empty() {
                    p
                } else {
                    format!("{dir}/{p}")
                };
                let m = [here.clone(), vec![name]].concat();
                modules.entry(m).or_default().insert(target);
            }
        }
    }
    modules
}

/// A path as written in module `here` (`crate::`, `super::`, else relative to `here`: a
/// child module, or an item of its own), made absolute.
fn absolute(here: &[String], mut path: Vec<String>) -> Vec<String> {
    if path.first().is_some_and(|s| s == "crate") {
        return path.split_off(1);
    }
    // One level up per `super` (`super::super::x`).
    let mut base = here.to_vec();
    while path.first().is_some_and(|s| s == "super") {
        path.remove(0);
        base.pop();
    }
    [base, path].concat()
}

/// Every call through a path under `root::` in `text` (`root::a::f(`, `root::f::<T>(`, a
/// tuple variant's `root::E::V(`), as the path's segments after the root.
fn calls_under(text: &str, root: &str) -> Vec<Vec<String>> {
    let pat = format!("{root}::");
    let mut out = Vec::new();
    for (i, _) in text.match_indices(&pat) {
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &text[i + pat.len()..];
        let mut segs = Vec::new();
        loop {
            let id: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if id.is_empty() {
                break;
            }
            rest = &rest[id.len()..];
            segs.push(id);
            match rest.strip_prefix("::") {
                Some(r) if !r.starts_with('<') => rest = r,
                _ => break,
            }
        }
        let rest = rest.strip_prefix("::").unwrap_or(rest);
        let rest = match rest.strip_prefix('<') {
            Some(generics) => generics.find('>').map_or("", |e| &generics[e + 1..]),
            None => rest,
        };
        if !segs.is_empty() && rest.trim_start().starts_with('(') {
            out.push(segs);
        }
    }
    out
}

/// A file's code without its `use` statements, and the paths they name as written (`crate::`,
/// `super::`, a child module's name): the re-exports (`pub use`, `pub(crate) use`) when
/// `public`, else the private imports.
fn split_uses(code: &str, public: bool) -> (String, Vec<Vec<String>>) {
    let mut rest = String::with_capacity(code.len());
    let mut paths = Vec::new();
    let mut tail = code;
    while let Some((start, tree)) = find_use(tail, public) {
        rest.push_str(&tail[..start]);
        let end = tail[tree..].find(';').map_or(tail.len(), |e| tree + e + 1);
        let mut tree_paths = Vec::new();
        expand(&tail[tree..end], &[], &mut tree_paths);
        paths.extend(tree_paths.into_iter().filter(|p| !p.is_empty()));
        tail = &tail[end..];
    }
    rest.push_str(tail);
    (rest, paths)
}

/// Where the next `use` statement in `code` starts, and where its tree does: a `pub use` or
/// `pub(...) use` when `public`, else a plain `use`. A statement opens its line (the words
/// "use the" in a message do not).
fn find_use(code: &str, public: bool) -> Option<(usize, usize)> {
    let opens_line = |i: usize| {
        code[..i]
            .rsplit('\n')
            .next()
            .unwrap_or("")
            .trim()
            .is_empty()
    };
    let word = if public { "pub" } else { "use " };
    code.match_indices(word)
        .map(|(i, _)| i)
        .filter(|&i| opens_line(i))
        .find_map(|i| {
            if !public {
                return Some((i, i + "use ".len()));
            }
            let after = &code[i + 3..];
            let after = match after.strip_prefix('(') {
                Some(a) => &a[a.find(')')? + 1..],
                None => after,
            };
            let tree = after.trim_start().strip_prefix("use ")?;
            after
                .starts_with(char::is_whitespace)
                .then(|| (i, code.len() - tree.len()))
        })
}

/// The circles of a graph: every set of two or more nodes that reach each other (a strongly
/// connected component), each sorted, in sorted order.
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| -> BTreeSet<&String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for m in graph.get(n).into_iter().flatten() {
                if seen.insert(m) {
                    stack.push(m);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<&String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut out: BTreeSet<Vec<String>> = BTreeSet::new();
    for (n, r) in &reaches {
        let circle: Vec<String> = r
            .iter()
            .filter(|m| *m != n && reaches.get(*m).is_some_and(|back| back.contains(n)))
            .chain([n])
            .map(|m| m.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if circle.len() > 1 {
            out.insert(circle);
        }
    }
    out.into_iter().collect()
}

/// Checks a graph's circles against those `known` to stand (each its sorted files): Err says
/// which circles are new (with the arrows that close them) and which known ones no longer
/// stand, so a list of known circles can only shrink.
pub fn circles_against(
    graph: &BTreeMap<String, BTreeSet<String>>,
    known: &[&[&str]],
) -> Result<(), String> {
    let known: BTreeSet<Vec<String>> = known
        .iter()
        .map(|c| c.iter().map(|f| f.to_string()).collect())
        .collect();
    let found: BTreeSet<Vec<String>> = circles(graph).into_iter().collect();
    let new: Vec<String> = found
        .difference(&known)
        .map(|c| {
            let arrows = c.iter().flat_map(|f| {
                graph[f]
                    .iter()
                    .filter(|d| c.contains(d))
                    .map(move |d| format!("\n  {f} -> {d}"))
            });
            format!("{}:{}", c.join(", "), arrows.collect::<String>())
        })
        .collect();
    let gone: Vec<String> = known.difference(&found).map(|c| c.join(", ")).collect();
    let mut errors = Vec::new();
    if !new.is_empty() {
        errors.push(format!(
            "files that import each other in a circle (move what both need into a file below \
             both, or pass it in as a value; `farm-studio look` draws a circle with the names \
             that tie it):\n{}",
            new.join("\n")
        ));
    }
    if !gone.is_empty() {
        errors.push(format!(
            "known circles that no longer stand (delete them from the known list, so they \
             cannot come back unseen):\n{}",
            gone.join("\n")
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}
