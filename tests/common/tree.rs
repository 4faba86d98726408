//! Host trees for `--root`: the committed fixtures under tests/fixtures (README there), and a
//! fixture copied to a scratch directory so a test may apply to it, edit it or break it without
//! touching the committed tree.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tree under tests/fixtures, read in place: for commands that only read it.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fixture's copy in a scratch directory, removed on drop: the `--root` of a test that
/// changes the host (apply, rollback) or edits it first. It derefs to the tree's path.
pub struct Tree {
    /// The scratch directory: the tree is its `host` folder, and a test may keep its own files
    /// (a pristine copy, a profile) beside it. Removed when the `Tree` drops.
    scratch: tempfile::TempDir,
    /// `<scratch>/host`.
    root: PathBuf,
}

impl Tree {
    /// Copy tests/fixtures/NAME to a fresh scratch directory.
    pub fn from_fixture(name: &str) -> Tree {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("host");
        copy_dir(&fixture(name), &root);
        Tree { scratch, root }
    }

    /// The tree as `--root` takes it.
    pub fn root(&self) -> &str {
        self.root.to_str().unwrap()
    }

    /// The scratch directory the tree sits in.
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }
}

impl Deref for Tree {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.root
    }
}

impl AsRef<Path> for Tree {
    fn as_ref(&self) -> &Path {
        &self.root
    }
}

/// Copy a fixture tree (files and directories; no links in fixtures) to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Asserts that two trees hold the same files with the same contents (`diff -r`).
pub fn assert_same_tree(a: &Path, b: &Path) {
    let o = Command::new("diff")
        .args(["-r", a.to_str().unwrap(), b.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "trees differ:\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
