//! The journal's promises against the real `wstune` binary: an apply killed midway and followed
//! by another apply is still undone by one rollback; `check` reports an interrupted or damaged
//! entry; rollback will not silently overwrite values changed by hand; values raised by hand
//! are persisted; `--unit` says what systemd needs (or that there is none). One submodule per
//! idea: `interrupted`, `by_hand`, `links`, `entries`; the helpers they share are here.

use crate::common;

use common::{code, stderr, wstune, Tree};

mod by_hand;
mod entries;
mod interrupted;
mod links;

fn lib_path(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
        .display()
        .to_string()
}

/// A `--root` tree with one applied entry: (the tree, the entry's file).
fn applied_tree() -> (Tree, std::path::PathBuf) {
    let tree = Tree::from_fixture("default");
    let o = wstune(&["apply", "--root", tree.root(), "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let jdir = tree.join("var/lib/wstune/journal");
    let entry = std::fs::read_dir(&jdir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    (tree, entry)
}
