//! The crate's module graph, read from its sources: which top-level modules name which
//! (`crate::x`, grouped imports included, doc links too, and the crate root's re-exports
//! followed to the module that defines them: `crate::ServerConfig` names `config`). The graph
//! must have no cycle, so the server's core stays layered: leaves (the codec, the HTTP
//! responses, the memory formulas, the settings) at the bottom, then the metrics, the
//! configuration, the hub, the handler API, the apps and the connection's acceptance, each
//! naming only what lies below it. A module that names one above it fails the test, which
//! names the cycle it closed.

use std::collections::{BTreeMap, BTreeSet};

/// Leaves: modules that name no other module of the crate, so anything may use them.
const LEAVES: &[&str] = &[
    "budget",
    "coalesce",
    "frame",
    "heavy",
    "http",
    "memory",
    "proxy_protocol",
    "transport",
    "utf8",
];

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

/// The first segment of every `crate::` path in `text` (grouped imports included), an item
/// the crate root re-exports replaced by the module it comes from (`reexports`).
fn named(text: &str, reexports: &BTreeMap<String, String>) -> BTreeSet<String> {
    crate::import_names::names_under(text, "crate")
        .into_iter()
        .map(|n| reexports.get(&n).cloned().unwrap_or(n))
        .collect()
}

/// The items lib.rs re-exports (`pub use module::{A, b::C};`), by name -> their module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(path) = stmt.trim_start().split("pub use ").nth(1) else {
            continue;
        };
        let Some((module, rest)) = path.trim().split_once("::") else {
            continue;
        };
        // The name every item is exported under, braces or not (`{A, b::C as D}` -> A, D).
        for item in rest.split([',', '{', '}']) {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if !name.is_empty() && name != "self" && name != "*" {
                out.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    out
}

/// Module -> the crate's modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let reexports = root_reexports(&std::fs::read_to_string(lib).unwrap());
    mods.iter()
        .map(|(m, text)| {
            let deps = named(text, &reexports)
                .into_iter()
                .filter(|n| n != m && mods.contains_key(n))
                .collect();
            (m.clone(), deps)
        })
        .collect()
}

/// One cycle of `g`, as the modules along it with the first repeated at the end
/// (`a -> b -> a`), or None when the graph has none.
fn a_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    /// Depth-first from `m`: `path` holds the modules being visited, `done` those whose every
    /// successor has been visited with no cycle found.
    fn visit<'g>(
        g: &'g BTreeMap<String, BTreeSet<String>>,
        m: &'g str,
        path: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for n in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, n, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

#[test]
fn the_module_graph_has_no_cycle_and_the_leaves_stay_leaves() {
    let g = graph();
    assert!(
        g.contains_key("conn") && g.contains_key("hub") && g.contains_key("config"),
        "{:?}",
        g.keys()
    );
    for leaf in LEAVES {
        assert_eq!(g[*leaf], BTreeSet::new(), "{leaf} is a leaf");
    }
    if let Some(cycle) = a_cycle(&g) {
        panic!(
            "embedded-server's modules form a cycle: {}. Cut one of its edges: move what the \
             lower module needs below it (a settings type into a leaf, a doc link into plain \
             text), or pass it in as a value. The whole graph: {g:#?}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn grouped_imports_and_whole_segments_are_read() {
    let none = BTreeMap::new();
    assert_eq!(
        named(
            "use crate::{hub::Hub, conn::{a, b}};\nlet x = crate::memory::X;",
            &none
        ),
        ["conn", "hub", "memory"].map(String::from).into()
    );
    assert!(named("use supercrate::conn;", &none).is_empty());
}

#[test]
fn root_reexports_name_their_module() {
    let lib = "pub use config::{App, ServerConfig};\n#[doc(hidden)]\npub use hub::Hub;\n\
               pub use handler::{\n    Conn, Handler as H,\n};\nuse conn::Ctx;\nmod frame;";
    let r = root_reexports(lib);
    assert_eq!(r["ServerConfig"], "config");
    assert_eq!(r["Hub"], "hub");
    assert_eq!(r["H"], "handler");
    assert!(!r.contains_key("Ctx"), "a private use is no re-export");
    assert_eq!(
        named("/// See [`crate::ServerConfig`] and crate::H.", &r),
        ["config", "handler"].map(String::from).into()
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let g = |edges: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
        edges
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    };
    let knot = g(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
    assert_eq!(
        a_cycle(&knot).unwrap(),
        ["a", "b", "c", "a"].map(String::from)
    );
    let layered = g(&[
        ("a", &["b", "c"]),
        ("b", &["c"]),
        ("c", &[]),
        ("d", &["a", "c"]),
    ]);
    assert_eq!(a_cycle(&layered), None);
    assert_eq!(
        a_cycle(&g(&[("a", &["a"])])).unwrap(),
        ["a", "a"].map(String::from)
    );
}

/// The circles between files that stood when the file-level rule came in, each as its sorted
/// files: tolerated while they are being broken; the test fails when one no longer stands, so
/// the list can only shrink. deflate/shared.rs picks ISA-L or zlib through `backend` (isal.rs
/// where built, by `#[path]`), and isal.rs falls back to shared.rs's zlib inflate.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// The same rule at file level: no two files of the crate import each other, directly or
/// around a circle (unit tests left out). The module graph above can stay acyclic while a
/// module's own files tie themselves in a knot; this is where that shows.
#[test]
fn the_files_form_no_circle_but_the_known_ones() {
    use crate::import_names::{circles_against, file_graph, is_test_file, shipped, sources};
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<(String, String)> = sources(&src)
        .into_iter()
        .filter(|(rel, _)| rel != "layering.rs" && rel != "import_names.rs" && !is_test_file(rel))
        .map(|(rel, text)| (rel, shipped(&text)))
        .collect();
    let g = file_graph(&files);
    assert!(
        g.get("conn/read.rs")
            .is_some_and(|d| d.contains("frame.rs")),
        "the file graph lost arrows it must see: {:?}",
        g.get("conn/read.rs")
    );
    if let Err(e) = circles_against(&g, KNOWN_CIRCLES) {
        panic!("embedded-server: {e}");
    }
}
