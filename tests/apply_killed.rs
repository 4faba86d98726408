//! `apply` killed with SIGKILL at every step of the 100k plan (the journal entry saved, each
//! sysctl and limit, each file written, the journal commit), then one rollback: every
//! /proc/sys value apply touches and every file under `--prefix` (less the journal, which keeps
//! the history by design) is byte for byte as before; the same with a second, complete apply in
//! between. Also a full disk (a small tmpfs as `--prefix`) and a read-only file partway: apply
//! stops, undoes what it did and says what failed. All inside `unshare --net --mount`
//! (tests/scripts/apply_killed.sh, apply_faults.sh).

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
