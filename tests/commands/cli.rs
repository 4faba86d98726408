//! The core commands (check, apply, rollback, snapshot, profiles) driven through the real
//! `wstune` executable: against the live host, inside private network namespaces, against the
//! fixture trees under tests/fixtures, and with bad input. Every test asserts on exit codes and
//! on what a person or a machine reads. One submodule per idea: `live`, `fixtures`, `watch`,
//! `nic`, `output` (machine-readable), `profiles`, `usage`, `apply`, `bench`, `check_terminal`
//! (check and explain in a real terminal), `doc_examples` (the README's and the book's command
//! examples), `book` (the book in headless Chromium); the helpers they share are here.

use crate::common;

use common::{bin, Tree};
use std::path::Path;
use std::process::{Command, Output};

mod apply;
mod bench;
mod book;
mod check_terminal;
mod containers;
mod doc_examples;
mod fixtures;
mod live;
mod nic;
mod output;
mod profiles;
mod threads;
mod usage;
mod watch;
mod watch_live;
mod watch_report;
mod watch_serve;

/// wstune at 120 columns: what this file's expected texts and snapshots are laid out for
/// (common's `wstune` is 160 wide).
fn wstune120(args: &[&str]) -> Output {
    common::wstune_cols(120, args)
}

/// A copy of the default fixture whose file `rel` (under the tree) reads `text`.
fn default_tree_with(rel: &str, text: &str) -> Tree {
    let tree = Tree::from_fixture("default");
    std::fs::write(tree.join(rel), text).unwrap();
    tree
}

/// Run wstune with `args` (one of them `--watch 4`), writing `after` to `rel` in `tree` 1.5 s
/// in, while the watch waits.
fn watched_while_rewritten(args: &[&str], tree: &Path, rel: &str, after: &str) -> Output {
    let child = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env("COLUMNS", "200")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    std::fs::write(tree.join(rel), after).unwrap();
    child.wait_with_output().unwrap()
}

/// softnet_stat as the kernel prints it: one row per CPU (processed, dropped, squeezed...).
fn softnet_row(processed: u32, dropped: u32, squeezed: u32) -> String {
    format!("{processed:08x} {dropped:08x} {squeezed:08x} 00000000 00000000 00000000 00000000 00000000 00000000\n")
}
