//! The binary's shape, kept by tests that read the source: the modules form no cycle, only
//! `cli` knows clap, and only `host` opens files. Each rule was broken once and found by
//! reading the imports by hand; these make the next break a failing test instead.
//! (embedded-server keeps its own graph the same way: embedded-server/src/layering.rs.)

// One reader of import paths for both crates' layering tests (embedded-server's module-graph
// test reads its sources the same way).
#[path = "../embedded-server/src/import_names.rs"]
mod import_names;

use import_names::{circles, file_graph, is_test_file, names_under, shipped};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every `.rs` file under src/, as (path relative to src/, text).
fn sources() -> Vec<(String, String)> {
    import_names::sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The top-level module a file belongs to (`host/linux/netlink.rs` -> `host`).
fn module_of(rel: &str) -> String {
    rel.split('/')
        .next()
        .unwrap()
        .trim_end_matches(".rs")
        .to_string()
}

/// Top-level module -> the crate's top-level modules its shipped code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|(rel, _)| module_of(rel))
        .filter(|m| !matches!(m.as_str(), "lib" | "main" | "layering"))
        .collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (rel, text) in &files {
        let m = module_of(rel);
        let Some(deps) = g.get_mut(&m) else { continue };
        if is_test_file(rel) {
            continue;
        }
        for n in names_under(&shipped(text), "crate") {
            if n != m && modules.contains(&n) {
                deps.insert(n);
            }
        }
    }
    g
}

/// One cycle through `start`, as a path of modules, if there is one.
fn cycle_through(g: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((m, path)) = stack.pop() {
        for n in g.get(&m).into_iter().flatten() {
            if n == start {
                let mut p = path.clone();
                p.push(n.clone());
                return Some(p);
            }
            if seen.insert(n.clone()) {
                let mut p = path.clone();
                p.push(n.clone());
                stack.push((n.clone(), p));
            }
        }
    }
    None
}

#[test]
fn the_modules_form_no_cycle() {
    let g = graph();
    assert!(g.contains_key("host") && g.contains_key("catalog"), "{g:?}");
    let cycles: Vec<String> = g
        .keys()
        .filter_map(|m| cycle_through(&g, m))
        .map(|p| p.join(" -> "))
        .collect();
    assert!(
        cycles.is_empty(),
        "modules that reach themselves (move the shared item into the module both use, or a \
         leaf):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn only_cli_knows_clap() {
    let bad: Vec<String> = sources()
        .into_iter()
        .filter(|(rel, _)| {
            !rel.starts_with("cli/")
                && rel != "main.rs"
                && rel != "layering.rs"
                && !is_test_file(rel)
        })
        .filter(|(_, text)| {
            let t = shipped(text);
            t.contains("clap") || t.contains("#[arg(") || t.contains("#[command(")
        })
        .map(|(rel, _)| rel)
        .collect();
    assert!(
        bad.is_empty(),
        "clap outside cli/ (args belong in cli/args.rs, their resolution in cli/resolve.rs): {bad:?}"
    );
}

/// What opening, reading or writing a file looks like in source.
const FILE_ACCESS: &[&str] = &["File::", "OpenOptions"];

/// Whether `code` opens, reads or writes files: std's or tokio's `fs` named in any form
/// (`std::fs::write`, `use std::fs;`, `use std::{fs, io}`), a `File` or `OpenOptions`.
fn touches_files(code: &str) -> bool {
    ["std", "tokio"]
        .iter()
        .any(|root| names_under(code, root).iter().any(|n| n == "fs"))
        || FILE_ACCESS.iter().any(|f| code.contains(f))
}

#[test]
fn only_host_touches_files() {
    let bad: Vec<String> = sources()
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("host/") && rel != "layering.rs" && !is_test_file(rel))
        .filter(|(_, text)| touches_files(&shipped(text)))
        .map(|(rel, _)| rel)
        .collect();
    assert!(
        bad.is_empty(),
        "files read or written outside host/ (add a function to crate::host and call it): {bad:?}"
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, d)| (m.to_string(), d.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        cycle_through(&g, "a").unwrap().join(" -> "),
        "a -> b -> c -> a"
    );
    assert_eq!(cycle_through(&g, "d"), None);
    assert_eq!(
        shipped("x // see crate::y\n#[cfg(test)]\nmod tests {}"),
        "x "
    );
    assert_eq!(
        shipped("#[cfg(test)]\nmod tests;\ny"),
        "#[cfg(test)]\nmod tests;\ny"
    );
    assert_eq!(shipped("x\n#[cfg(all(test, unix))]\nmod tests {}"), "x");
    assert!(is_test_file("apply/tests.rs") && !is_test_file("apply/contests.rs"));
    for code in [
        "std::fs::write(p, b)",
        "use std::fs;",
        "use std::{io, fs};",
        "tokio::fs::read(p)",
        "let f = File::open(p);",
    ] {
        assert!(touches_files(code), "{code}");
    }
    assert!(!touches_files(
        "use std::{io, fmt}; crate::host::fs::read(p)"
    ));
}

/// The engine's shape, kept: nothing outside `cli` (and main.rs, through `cli::main`)
/// imports it, and no command calls another (shared work is in `engine`) nor is imported by
/// anything but `cli`. Both were broken once: 11 files in one cli <-> cmd import cycle.
#[test]
fn nothing_outside_cli_imports_it_and_no_command_imports_another() {
    let files = sources();
    let commands: Vec<String> = files
        .iter()
        .filter_map(|(rel, _)| rel.strip_prefix("cmd/")?.strip_suffix(".rs"))
        .filter(|n| *n != "mod")
        .map(str::to_string)
        .collect();
    let mut bad = Vec::new();
    for (rel, text) in &files {
        if rel.starts_with("cli/") || rel == "main.rs" || rel == "layering.rs" {
            continue;
        }
        let from_crate = names_under(text, "crate");
        if from_crate.iter().any(|n| n == "cli") || uses(text, "super::cli") {
            bad.push(format!("{rel} imports cli"));
        }
        // Commands are the top: what they share lives below them (engine, selftest),
        // so nothing else may import one (selftest once read a command's metrics).
        if !rel.starts_with("cmd/") && from_crate.iter().any(|n| n == "cmd") {
            bad.push(format!("{rel} imports a command"));
        }
        if rel.starts_with("cmd/") && rel != "cmd/mod.rs" {
            let from_super = names_under(text, "super");
            if from_crate.iter().any(|n| n == "cmd")
                || from_super.iter().any(|n| commands.contains(n))
            {
                bad.push(format!("{rel} imports another command"));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn grouped_and_sibling_imports_are_seen() {
    let names = |t, r| names_under(t, r);
    assert_eq!(names("use crate::cli::args;", "crate"), ["cli"]);
    assert_eq!(
        names("use crate::{engine, cli::{args, resolve}, x};", "crate"),
        ["engine", "cli", "x"]
    );
    assert_eq!(names("use crate::{\n    cmd::apply,\n};", "crate"), ["cmd"]);
    assert_eq!(names("use super::{apply, *};", "super"), ["apply"]);
    assert_eq!(names("super::check::run(r)", "super"), ["check"]);
    assert!(names("use supercrate::cli;", "crate").is_empty());
}

/// `path` named as a whole path segment (`super::client` is not `super::cli`).
fn uses(text: &str, path: &str) -> bool {
    text.match_indices(path).any(|(i, _)| {
        !text[i + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

/// The file graph of src/: each shipped file (unit tests left out) -> the files it names.
fn files_graph() -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, String)> = sources()
        .into_iter()
        .filter(|(rel, _)| rel != "layering.rs" && !is_test_file(rel))
        .map(|(rel, text)| (rel, shipped(&text)))
        .collect();
    file_graph(&files)
}

/// The circles between files that stood when the file-level rule came in, each as its sorted
/// files: tolerated while they are being broken, and listed so the list can only shrink (the
/// test fails when one of them no longer stands: delete its line as the fix lands).
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// A circle of files anywhere in src/ fails, as the module-level rule does for modules: files
/// that import each other cannot be read, tested or moved one at a time.
#[test]
fn the_files_form_no_circle_but_the_known_ones() {
    let g = files_graph();
    assert!(
        g["cmd/apply.rs"].contains("apply/mod.rs")
            && g["serve/run.rs"].contains("serve/backplane/mod.rs"),
        "the file graph lost arrows it must see: {:?}",
        g["cmd/apply.rs"]
    );
    if let Err(e) = import_names::circles_against(&g, KNOWN_CIRCLES) {
        panic!("{e}");
    }
}

#[test]
fn the_file_graph_reads_uses_calls_and_folders() {
    let files: Vec<(String, String)> = [
        ("lib.rs", "pub mod a;\npub mod b;\npub use b::Thing;"),
        (
            "a/mod.rs",
            "mod inner;\npub use inner::Face;\npub fn f() { inner::g(); }",
        ),
        (
            "a/inner.rs",
            "use super::f;\npub struct Face;\npub fn g() {}",
        ),
        (
            "b.rs",
            "use crate::{a::{self, Face}, c::C};\nfn h() { let _ = super::d::make(); }\n\
             fn msg() { \"use the crate::x way\"; }",
        ),
        (
            "c.rs",
            "pub struct C;\nfn k() -> Option<crate::b::X> { None }",
        ),
        ("d.rs", "pub fn make() {}\nconst X: super::e::T = 1;"),
        ("e.rs", "pub type T = u8;"),
    ]
    .map(|(f, c)| (f.to_string(), c.to_string()))
    .into();
    let g = file_graph(&files);
    let deps = |f: &str| g[f].iter().map(String::as_str).collect::<Vec<_>>();
    // A call into a child is an arrow; the child's `use super::f` (its own parent) is not.
    assert_eq!(deps("a/mod.rs"), ["a/inner.rs"]);
    assert!(deps("a/inner.rs").is_empty());
    // Grouped imports, a re-export named through its face, a call up through `super::`, and
    // no statement read out of a string.
    assert_eq!(deps("b.rs"), ["a/mod.rs", "c.rs", "d.rs"]);
    // A `crate::` path anywhere is read; a `super::` type written inline is not.
    assert_eq!(deps("c.rs"), ["b.rs"]);
    assert!(deps("d.rs").is_empty());
    assert!(!g.contains_key("lib.rs"));
    assert_eq!(circles(&g), [["b.rs", "c.rs"]]);
    // A known circle is tolerated; a new one fails with its arrows, a gone one fails too.
    let known: &[&[&str]] = &[&["b.rs", "c.rs"]];
    assert_eq!(import_names::circles_against(&g, known), Ok(()));
    assert!(import_names::circles_against(&g, &[])
        .unwrap_err()
        .contains("b.rs -> c.rs"));
    let stale: &[&[&str]] = &[&["b.rs", "c.rs"], &["d.rs", "e.rs"]];
    let e = import_names::circles_against(&g, stale).unwrap_err();
    assert!(
        e.contains("no longer stand") && e.contains("d.rs, e.rs"),
        "{e}"
    );
}
