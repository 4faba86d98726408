//! Values changed by hand: raised ones persisted for the next boot, changed ones shown by
//! rollback and kept without `--force` (`--keep`), drift against every applied entry, and what
//! `--unit` says systemd needs.

use crate::common;
use common::Tree;

use super::applied_tree;
use common::{
    assert_same_tree, code, fixture, lib_script, stderr, stdout, tagged, tagged_line, wstune,
};

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
    let tree = Tree::from_fixture("default");
    let t = tree.root();
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
fn unit_drop_in_advice_includes_daemon_reload() {
    let tree = Tree::from_fixture("tuned");
    std::fs::write(
        tree.join("wstune/systemd/wsserver.service.show"),
        "LimitNOFILE=4096\nLoadState=loaded\n",
    )
    .unwrap();
    let t = tree.root();
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
    let tree = Tree::from_fixture("tuned");
    let t = tree.root();
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

/// There was no way to roll back everything but a value changed by hand since: `--keep KEY`
/// leaves that one and restores the rest; a key the entry did not change is refused.
#[test]
fn rollback_keep_leaves_one_hand_changed_value_and_restores_the_rest() {
    let (tree, _entry) = applied_tree();
    let t = tree.to_str().unwrap();
    let somaxconn = tree.join("proc/sys/net/core/somaxconn");
    std::fs::write(&somaxconn, "100000\n").unwrap();
    let o = wstune(&[
        "rollback",
        "--root",
        t,
        "--yes",
        "--keep",
        "net.core.somaxcon",
    ]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("did not change net.core.somaxcon at runtime")
            && stderr(&o).contains("net.core.somaxconn"),
        "{}",
        stderr(&o)
    );
    let o = wstune(&[
        "rollback",
        "--root",
        t,
        "--yes",
        "--keep",
        "net.core.somaxconn",
    ]);
    assert_eq!(
        code(&o),
        0,
        "no --force needed: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("Kept net.core.somaxconn at 100000"),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read_to_string(&somaxconn).unwrap(), "100000\n");
    // Everything else is as before the apply.
    std::fs::write(
        &somaxconn,
        std::fs::read_to_string(fixture("default").join("proc/sys/net/core/somaxconn")).unwrap(),
    )
    .unwrap();
    std::fs::remove_dir_all(tree.join("var")).unwrap();
    assert_same_tree(&fixture("default"), &tree);
}

/// Drift is the host against every applied entry, each value against the newest entry that set
/// it: a value only an older apply set, changed by hand since, is drift too (it used to read
/// only the newest entry and say "unchanged").
#[test]
fn drift_compares_every_applied_entry_not_only_the_newest() {
    let tree = Tree::from_fixture("default");
    let t = tree.root();
    // 10k sets tcp_fin_timeout 30 and tcp_max_syn_backlog 8192; 100k then raises the backlog
    // to 65535 and has nothing to change in tcp_fin_timeout.
    for profile in ["10k", "100k"] {
        let o = wstune(&["apply", "--root", t, "--profile", profile, "--yes"]);
        assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("Applied"), "{}", stdout(&o));
    }
    let drift = |want: &str| {
        let (_, r) = common::check_json(&tree, &[]);
        let f = common::finding(&r, "wstune.journal.drift").clone();
        assert_eq!(f["status"], want, "{f}");
        f["note"].as_str().unwrap().to_string()
    };
    assert!(drift("pass").starts_with("entries "));
    std::fs::write(tree.join("proc/sys/net/ipv4/tcp_fin_timeout"), "45\n").unwrap();
    std::fs::write(tree.join("proc/sys/net/ipv4/tcp_max_syn_backlog"), "8192\n").unwrap();
    let note = drift("warn");
    assert!(
        note.contains("net.ipv4.tcp_fin_timeout is 45 (applied 30)"),
        "{note}"
    );
    // Set by both: compared with the newest only.
    assert!(
        note.contains("net.ipv4.tcp_max_syn_backlog is 8192 (applied 65535)")
            && !note.contains("(applied 8192)"),
        "{note}"
    );
}
