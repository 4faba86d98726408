//! `apply` killed with SIGKILL at every step of the 100k plan (the journal entry saved, each
//! sysctl and limit, each file written, the journal commit), then one rollback: every
//! /proc/sys value apply touches and every file under `--prefix` (less the journal, which keeps
//! the history by design) is byte for byte as before; the same with a second, complete apply in
//! between. Also a full disk (a small tmpfs as `--prefix`) and a read-only file partway: apply
//! stops, undoes what it did and says what failed. All inside `unshare --net --mount`
//! (tests/scripts/apply_killed.sh, apply_faults.sh). And on a captured tree (`--root`), apply
//! killed at every step and in the middle of every file write, each undone by a plain rollback.

use crate::common;

use common::{lib_script, stderr, stdout, tagged};

fn every_step(second: bool) {
    let env = if second { "SECOND=1" } else { "SECOND=0" };
    let Some(o) = common::in_netns(&lib_script("apply_killed.sh", env)) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let steps = tagged(&o, "STEP ");
    // 16 actions and 2 files on this kernel: at least the entry, one action, one file, the
    // commit, and the final run that completes.
    assert!(steps.len() >= 5, "too few steps: {all}");
    let paused: Vec<&String> = steps.iter().filter(|s| s.contains("paused=yes")).collect();
    assert_eq!(
        paused.len(),
        steps.len() - 1,
        "every step but the last pauses (the test build has the failpoints feature): {all}"
    );
    assert!(
        steps.last().unwrap().contains("paused=no rc=0 "),
        "the last run completes: {all}"
    );
    for s in &steps {
        assert!(s.ends_with("same=yes"), "not restored after {s}: {all}");
        assert!(
            s.contains(" rollback=0 "),
            "rollback failed after {s}: {all}"
        );
        if second {
            assert!(
                s.contains(" second=0 "),
                "the second apply failed after {s}: {all}"
            );
        }
    }
    // Killed at step 0 nothing has changed yet; killed after the first action something has:
    // the kill really landed between changes.
    assert!(steps[0].contains("changed=no"), "{all}");
    assert!(
        steps[1..].iter().all(|s| s.contains("changed=yes")),
        "{all}"
    );
    assert!(stdout(&o).lines().all(|l| !l.starts_with("ERR")), "{all}");
}

#[test]
fn apply_killed_at_every_step_is_undone_by_one_rollback() {
    every_step(false);
}

#[test]
fn apply_killed_at_every_step_then_a_second_apply_is_undone_by_one_rollback() {
    every_step(true);
}

#[test]
fn a_full_disk_or_a_read_only_file_partway_stops_apply_and_undoes_it() {
    let Some(o) = common::in_netns(&lib_script("apply_faults.sh", "")) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let cases = tagged(&o, "CASE ");
    assert_eq!(cases.len(), 14, "{all}");
    for c in &cases {
        assert!(c.ends_with("same=yes"), "not restored: {c}: {all}");
    }
    let rc = |name: &str| -> String {
        let c = cases
            .iter()
            .find(|c| c.starts_with(&format!("CASE {name} ")))
            .unwrap_or_else(|| panic!("no case {name}: {all}"));
        c.split("rc=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string()
    };
    let err = |name: &str| -> String {
        tagged(&o, &format!("ERR {name} "))
            .into_iter()
            .next()
            .unwrap_or_default()
    };
    // The smallest disk fails, the largest succeeds, and some size in between fails after
    // changes were made (they were undone: same=yes above).
    assert_ne!(rc("disk-1"), "0", "{all}");
    assert_eq!(rc("disk-12"), "0", "{all}");
    let failed_midway = (1..=12)
        .map(|p| format!("disk-{p}"))
        .filter(|d| rc(d) != "0")
        .filter(|d| err(d).contains("undone") || err(d).contains("action"))
        .count();
    assert!(failed_midway > 0, "no disk size failed partway: {all}");
    for p in 1..=12 {
        let d = format!("disk-{p}");
        if rc(&d) != "0" {
            assert_eq!(rc(&d), "3", "{d}: {all}");
            let e = err(&d);
            assert!(
                e.contains("No space left") || e.contains("no space"),
                "{d} names the full disk: {e}"
            );
            assert!(!e.contains("panicked"), "{all}");
        }
    }
    for case in ["ro-sysctl", "ro-file"] {
        assert_eq!(rc(case), "3", "{case}: {all}");
        let e = err(case);
        assert!(e.contains("failed"), "{case} names the action: {e}");
        assert!(
            e.contains("undone"),
            "{case} says it undid the changes: {e}"
        );
    }
}

/// Everything a tree holds, by path relative to it: each file's mode and bytes, each link's
/// target, each directory's mode; less the journal (`var/lib/wstune`, and the `var`, `var/lib`
/// made for it), which keeps the history by design.
fn tree_state(root: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, String>,
    ) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "var/lib/wstune" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("link {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else if m.is_dir() {
                if rel != "var" && rel != "var/lib" {
                    out.insert(rel, format!("dir {mode:o}"));
                }
                walk(root, &p, out);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(
                    rel,
                    format!("file {mode:o} {}", String::from_utf8_lossy(&bytes)),
                );
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The temporary files a write left anywhere in `root` (the journal included).
fn temporaries(root: &std::path::Path) -> Vec<String> {
    let o = std::process::Command::new("find")
        .arg(root)
        .args(["-name", ".wstune-tmp.*", "-o", "-name", ".tmp*"])
        .output()
        .unwrap();
    stdout(&o).lines().map(str::to_string).collect()
}

/// `apply --root TREE --profile 100k --yes` with `failpoint`, killed (SIGKILL) once it pauses
/// there; false when it never got there (it completed: exit 0).
fn apply_killed_at(tree: &std::path::Path, failpoint: &str) -> bool {
    use std::io::BufRead;
    let mut child = std::process::Command::new(common::bin())
        .args([
            "apply",
            "--root",
            tree.to_str().unwrap(),
            "--profile",
            "100k",
            "--yes",
        ])
        .env("WSTUNE_FAILPOINT", failpoint)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut paused = false;
        let mut seen = String::new();
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if line.starts_with("wstune: failpoint: paused") {
                paused = true;
                break;
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        let _ = tx.send((paused, seen));
    });
    let (paused, seen) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{failpoint}: apply neither paused nor ended in 60 s"));
    if paused {
        child.kill().unwrap();
        child.wait().unwrap();
    } else {
        let status = child.wait().unwrap();
        assert!(status.success(), "{failpoint}: apply failed: {seen}");
    }
    paused
}

/// On a captured tree (`--root`): apply killed at every step, and in the middle of every file
/// write it makes (its journal entries, its files under /etc, the tree's runtime values), then
/// one plain `rollback --yes`, without --force: the tree is byte for byte as before (modes and
/// links too) and no temporary file is left anywhere in it. A kill before the journal held an
/// entry changed nothing, and rollback says there is nothing to roll back.
#[test]
fn apply_killed_anywhere_on_a_root_tree_is_undone_by_a_plain_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(common::fixture("default"))
        .arg(&pristine)
        .status()
        .unwrap();
    assert!(cp.success());
    let before = tree_state(&pristine);
    let tree = dir.path().join("tree");
    let mut kills = Vec::new();
    for (point, first) in [("apply-pause-after", 0), ("write-pause-at", 1)] {
        for n in first..200 {
            if tree.exists() {
                std::fs::remove_dir_all(&tree).unwrap();
            }
            let cp = std::process::Command::new("cp")
                .arg("-a")
                .arg(&pristine)
                .arg(&tree)
                .status()
                .unwrap();
            assert!(cp.success());
            let at = format!("{point}={n}");
            if !apply_killed_at(&tree, &at) {
                break;
            }
            kills.push(at.clone());
            let o = common::run(&["rollback", "--root", tree.to_str().unwrap(), "--yes"]);
            let said = format!("{}{}", stdout(&o), stderr(&o));
            if common::code(&o) != 0 {
                assert!(
                    said.contains("nothing to roll back"),
                    "{at}: a plain rollback failed:\n{said}"
                );
            }
            let after = tree_state(&tree);
            let differ: Vec<&String> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect();
            assert!(
                differ.is_empty(),
                "{at}: not restored: {differ:?}\nrollback said:\n{said}"
            );
            assert_eq!(
                temporaries(&tree),
                Vec::<String>::new(),
                "{at}: temporary files left\nrollback said:\n{said}"
            );
        }
    }
    // Every step of the plan and every write: far more than the plan's few sysctls and files.
    assert!(kills.len() >= 30, "{kills:?}");
    assert!(
        kills.iter().any(|k| k.starts_with("write-pause-at")),
        "{kills:?}"
    );
}
