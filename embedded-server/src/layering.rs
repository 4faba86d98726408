//! The crate's module graph, read from its sources: which top-level modules name which
//! (`crate::x`, grouped imports included, doc links too), and which of them sit on a cycle.
//! A ratchet: the modules still on a cycle are listed, a module that joins one fails the
//! test, and one that leaves it must leave the list, so the knot only ever gets smaller.

use std::collections::{BTreeMap, BTreeSet};

/// Modules that still depend on each other in a circle (through the server's configuration
/// carrying the built-in apps, and the hub parsing the channels protocol). Shrink this list as
/// those edges are cut; never grow it.
const STILL_ON_A_CYCLE: &[&str] = &[
    "accept",
    "admin",
    "apps",
    "budget",
    "channels",
    "config",
    "handler",
    "handshake",
    "hub",
    "limits",
    "metrics",
    "offload",
];

/// Leaves: modules that name no other module of the crate, so anything may use them.
const LEAVES: &[&str] = &["frame", "http", "memory", "utf8"];

/// Every top-level module's source text (a folder's files together), by module name.
fn modules() -> BTreeMap<String, String> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let top = top.trim_end_matches(".rs").to_string();
            if top == "lib" || top == "layering" || top == "import_names" {
                continue;
            }
            out.entry(top)
                .or_default()
                .push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    out
}

/// The first segment of every `crate::` path in `text` (grouped imports included).
fn named(text: &str) -> BTreeSet<String> {
    crate::import_names::names_under(text, "crate")
        .into_iter()
        .collect()
}

/// Module -> the crate's modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    mods.iter()
        .map(|(m, text)| {
            let deps = named(text)
                .into_iter()
                .filter(|n| n != m && mods.contains_key(n))
                .collect();
            (m.clone(), deps)
        })
        .collect()
}

/// The modules that reach themselves.
fn on_a_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    g.keys()
        .filter(|m| {
            let (mut seen, mut todo) = (BTreeSet::new(), g[*m].iter().collect::<Vec<_>>());
            while let Some(n) = todo.pop() {
                if seen.insert(n.clone()) {
                    todo.extend(g.get(n).into_iter().flatten());
                }
            }
            seen.contains(*m)
        })
        .cloned()
        .collect()
}

#[test]
fn no_module_joins_the_cycle_and_the_leaves_stay_leaves() {
    let g = graph();
    assert!(
        g.contains_key("conn") && g.contains_key("hub"),
        "{:?}",
        g.keys()
    );
    for leaf in LEAVES {
        assert_eq!(g[*leaf], BTreeSet::new(), "{leaf} is a leaf");
    }
    let cycle = on_a_cycle(&g);
    let listed: BTreeSet<String> = STILL_ON_A_CYCLE.iter().map(|s| s.to_string()).collect();
    let joined: Vec<_> = cycle.difference(&listed).collect();
    let left: Vec<_> = listed.difference(&cycle).collect();
    assert!(
        joined.is_empty(),
        "these modules joined a dependency cycle: {joined:?} (graph: {g:#?})"
    );
    assert!(
        left.is_empty(),
        "these modules are no longer on a cycle: take them off STILL_ON_A_CYCLE: {left:?}"
    );
}

#[test]
fn grouped_imports_and_whole_segments_are_read() {
    assert_eq!(
        named("use crate::{hub::Hub, conn::{a, b}};\nlet x = crate::memory::X;"),
        ["conn", "hub", "memory"].map(String::from).into()
    );
    assert!(named("use supercrate::conn;").is_empty());
}

#[test]
fn a_cycle_is_found() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(on_a_cycle(&g), ["a", "b", "c"].map(String::from).into());
}
