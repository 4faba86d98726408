//! The journal's promises against the real `wstune` binary: an apply killed midway and followed
//! by another apply is still undone by one rollback; `check` reports an interrupted or damaged
//! entry; rollback will not silently overwrite values changed by hand; values raised by hand
//! are persisted; `--unit` says what systemd needs (or that there is none).

mod common;

use common::{
    assert_same_tree, code, copy_dir, finding, fixture, json_of, lib_script, stderr, stdout,
    tagged, tagged_line, wstune,
};

#[test]
fn an_apply_killed_midway_then_another_apply_is_undone_by_one_rollback() {
    let host_before = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap();
    let Some(o) = common::in_netns(&lib_script("journal_killed.sh", "")) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged_line(&o, "STEP paused "),
        "STEP paused yes",
        "the test build honours WSTUNE_FAILPOINT (feature failpoints): {all}"
    );
    assert_eq!(
        tagged_line(&o, "STEP killed "),
        "STEP killed rc=137 same=no",
        "the kill happened between changes: {all}"
    );
    // While the first apply is paused (alive, holding the journal lock), a second one refuses.
    assert_eq!(
        tagged_line(&o, "STEP concurrent "),
        "STEP concurrent rc=3",
        "{all}"
    );
    assert!(
        tagged_line(&o, "ERR concurrent ").contains("another wstune apply or rollback is running"),
        "{all}"
    );
    // check names the interrupted entry, fails, and gives the fix.
    let check = tagged_line(&o, "CHECK ");
    let r: serde_json::Value = serde_json::from_str(check.strip_prefix("CHECK ").unwrap()).unwrap();
    let pending = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "wstune.journal.pending")
        .unwrap_or_else(|| panic!("no wstune.journal.pending: {check}"));
    assert_eq!(pending["status"], "fail", "{pending}");
    assert!(
        pending["note"]
            .as_str()
            .unwrap()
            .contains("was interrupted"),
        "{pending}"
    );
    assert!(
        pending["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("wstune rollback --id"),
        "{pending}"
    );
    // The second apply undoes the interrupted one first and says so.
    assert_eq!(
        tagged_line(&o, "STEP second-apply "),
        "STEP second-apply rc=0",
        "{all}"
    );
    assert!(
        tagged_line(&o, "ERR second-apply ").contains("was interrupted"),
        "{all}"
    );
    // One rollback returns every value and file to the state before the killed apply.
    assert_eq!(
        tagged_line(&o, "STEP rollback "),
        "STEP rollback rc=0 same=yes",
        "{all}"
    );
    let after = tagged_line(&o, "CHECKAFTER ");
    let r: serde_json::Value =
        serde_json::from_str(after.strip_prefix("CHECKAFTER ").unwrap()).unwrap();
    let pending = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "wstune.journal.pending")
        .unwrap_or_else(|| panic!("no wstune.journal.pending: {after}"));
    assert_eq!(
        pending["status"], "pass",
        "nothing is left interrupted: {pending}"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap(),
        host_before,
        "the host's own namespace is untouched"
    );
}

#[test]
fn values_raised_by_hand_are_persisted_for_the_next_boot() {
    let Some(o) = common::in_netns(&lib_script("journal_hand_raised.sh", "")) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(tagged_line(&o, "STEP apply "), "STEP apply rc=0", "{all}");
    let file = tagged(&o, "FILE ");
    for want in [
        "FILE net.ipv4.tcp_max_syn_backlog = 100000",
        "FILE net.ipv4.tcp_max_tw_buckets = 500000",
        "FILE net.core.somaxconn = 65535",
    ] {
        assert!(file.iter().any(|l| l == want), "{want} missing: {all}");
    }
    assert_eq!(
        tagged_line(&o, "STEP second-apply "),
        "STEP second-apply rc=0 nothing=yes",
        "persisting them is done once: {all}"
    );
    assert_eq!(
        tagged_line(&o, "STEP rollback "),
        "STEP rollback rc=0 same=yes",
        "{all}"
    );
}

#[test]
fn rollback_shows_values_changed_by_hand_and_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host");
    copy_dir(&fixture("default"), &tree);
    let t = tree.to_str().unwrap();
    let o = wstune(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // An operator changes a value wstune applied, after the apply.
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), "100000\n").unwrap();
    let o = wstune(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("net.core.somaxconn: applied 65535, now 100000 (changed by hand)"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(tree.join("proc/sys/net/core/somaxconn")).unwrap(),
        "100000\n",
        "refused: nothing was changed"
    );
    let list = stdout(&wstune(&["rollback", "--root", t, "--list"]));
    assert!(list.contains("applied"), "{list}");

    let o = wstune(&["rollback", "--root", t, "--yes", "--force"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    std::fs::remove_dir_all(tree.join("var")).unwrap();
    assert_same_tree(&fixture("default"), &tree);
}

#[test]
fn a_damaged_entry_is_reported_by_check_and_refused_by_apply() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host");
    copy_dir(&fixture("default"), &tree);
    let t = tree.to_str().unwrap();
    let o = wstune(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let jdir = tree.join("var/lib/wstune/journal");
    let good = std::fs::read_dir(&jdir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(String::from)
        })
        .next()
        .unwrap();
    let bad = jdir.join("20991231T235959.000000000.json");
    std::fs::write(&bad, "{\"id\": \"20991231T2359").unwrap();

    let o = wstune(&["check", "--root", t, "-f", "json"]);
    let r = json_of(&o);
    let f = finding(&r, "wstune.journal.pending");
    assert_eq!(f["status"], "fail", "{f}");
    let bad_s = bad.display().to_string();
    assert!(f["note"].as_str().unwrap().contains(&bad_s), "{f}");
    assert!(
        f["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("move it aside"),
        "{f}"
    );
    // The drift view still works beside it.
    assert_eq!(
        finding(&json_of(&o), "wstune.journal.drift")["status"],
        "pass"
    );

    let before = std::fs::read_to_string(tree.join("proc/sys/net/core/somaxconn")).unwrap();
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), "4096\n").unwrap();
    let o = wstune(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains(&bad_s) && stderr(&o).contains("is damaged"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("wstune rollback --id"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(tree.join("proc/sys/net/core/somaxconn")).unwrap(),
        "4096\n",
        "refused: nothing was changed"
    );
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), before).unwrap();
    // The good entry can still be rolled back by id.
    let o = wstune(&["rollback", "--root", t, "--id", &good, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    std::fs::remove_dir_all(tree.join("var")).unwrap();
    assert_same_tree(&fixture("default"), &tree);
}

#[test]
fn unit_drop_in_advice_includes_daemon_reload() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("t");
    copy_dir(&fixture("tuned"), &tree);
    std::fs::write(
        tree.join("wstune/systemd/wsserver.service.show"),
        "LimitNOFILE=4096\nLoadState=loaded\n",
    )
    .unwrap();
    let t = tree.to_str().unwrap();
    let o = wstune(&["apply", "--root", t, "--unit", "wsserver.service", "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("systemctl daemon-reload && systemctl restart wsserver.service"),
        "{}",
        stdout(&o)
    );
    let o = wstune(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("systemctl daemon-reload && systemctl restart wsserver.service"),
        "rollback removed the drop-in: the unit needs the same: {}",
        stdout(&o)
    );
}

#[test]
fn unit_without_systemd_says_so_instead_of_planning_nothing() {
    // A captured tree with no record of the unit: systemd cannot be asked.
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("t");
    copy_dir(&fixture("tuned"), &tree);
    let t = tree.to_str().unwrap();
    let o = wstune(&[
        "apply",
        "--root",
        t,
        "--unit",
        "nosuch.service",
        "--dry-run",
    ]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("--unit nosuch.service")
            && stderr(&o).contains("no unit to give a LimitNOFILE drop-in"),
        "{}",
        stderr(&o)
    );
    // A live host without systemd (a mount namespace hides it, if this one runs it).
    let Some(o) = common::in_netns(
        "[ -d /run/systemd ] && mount -t tmpfs none /run/systemd; P=$(mktemp -d); \
         \"$WSTUNE\" apply --prefix \"$P\" --unit myserver.service --dry-run; echo \"RC $?\"",
    ) else {
        return;
    };
    assert_eq!(
        tagged_line(&o, "RC "),
        "RC 3",
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("systemd (not running"),
        "{}",
        stderr(&o)
    );
}

/// An operator who pipes apply or rollback into `head` closes stdout early. The change must
/// still finish: println! panicked on the broken pipe, and a rollback stopped halfway.
#[test]
fn apply_and_rollback_finish_when_stdout_is_closed_early() {
    let Some(o) = common::in_netns(
        r#"ip link set lo up; P=$(mktemp -d)
        before=$(cat /proc/sys/net/ipv4/tcp_max_syn_backlog)
        "$WSTUNE" apply --profile 100k --yes --prefix "$P" | head -c 1 > /dev/null
        echo "APPLY ${PIPESTATUS[0]} $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog)"
        "$WSTUNE" rollback --yes --prefix "$P" | head -c 1 > /dev/null
        echo "ROLLBACK ${PIPESTATUS[0]} $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog) $before"
        ls "$P/etc/sysctl.d" 2>/dev/null | wc -l | sed 's/^/FILES /'"#,
    ) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{all}");
    assert_eq!(tagged_line(&o, "APPLY "), "APPLY 0 65535", "{all}");
    let rb = tagged_line(&o, "ROLLBACK ");
    let f: Vec<&str> = rb.split(' ').collect();
    assert_eq!(
        (f[1], f[2]),
        ("0", f[3]),
        "rolled back to the value before: {all}"
    );
    assert_eq!(
        tagged_line(&o, "FILES "),
        "FILES 0",
        "the persisted file is gone too: {all}"
    );
}
