//! Applies that do not finish cleanly: killed midway then followed by another, two first
//! applies at once, a killed write's temporaries, stdout closed early, write failures named once,
//! and nofile kept under the nr_open the host boots with.

use crate::common;
use common::Tree;

use super::lib_path;
use common::{code, lib_script, stderr, stdout, tagged_line, wstune};

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

/// Two first applies (no journal directory yet) started together: the lock was taken after
/// planning, so the 50k apply, delayed at its flock (strace), wrote its lower values over the
/// 100k apply's, and both exited 0. The lock is taken before anything is read now: the second
/// plans from what the first left, and never lowers it.
#[test]
fn two_first_applies_at_once_never_lower_what_the_other_raised() {
    if !common::have("strace") {
        common::skip("strace", "strace is not installed (apt-get install strace)");
        return;
    }
    let script = format!(
        r#"source {lib}
strace -f -qq -o /dev/null -e trace=flock -e inject=flock:delay_enter=6000000:when=1 \
  "$W" apply --profile 50k --runtime-only --yes --prefix "$P" > "$T/a" 2>&1 &
a=$!
sleep 1
"$W" apply --profile 100k --runtime-only --yes --prefix "$P" > "$T/b" 2>&1; echo "B $?"
wait $a; echo "A $?"
echo "VALUES $(cat /proc/sys/net/core/somaxconn) $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog) $(cat /proc/sys/net/ipv4/tcp_fin_timeout)"
cat "$T/a" "$T/b""#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(tagged_line(&o, "B "), "B 0", "{all}");
    assert_eq!(tagged_line(&o, "A "), "A 0", "{all}");
    assert_eq!(
        tagged_line(&o, "VALUES "),
        "VALUES 65535 65535 30",
        "the 100k values stay: {all}"
    );
}

/// apply killed (strace, SIGKILL) on the rename of its sysctl.d file left `.tmpXXXXXX` with the
/// new content there, and nothing removed it. The next rollback, or the next apply's recovery,
/// removes wstune's own temporaries; the tree is as before.
#[test]
fn temporaries_of_a_killed_write_are_removed_by_rollback_and_recovery() {
    if !common::have("strace") {
        common::skip("strace", "strace is not installed (apt-get install strace)");
        return;
    }
    let script = format!(
        r#"source {lib}
state > "$T/before"
for next in rollback apply; do
  strace -f -qq -o /dev/null -e trace=rename,renameat,renameat2 \
    -e inject=rename,renameat,renameat2:signal=SIGKILL:when=2 \
    "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2>&1
  echo "KILLED $next $?"
  echo "LEFT $next $(ls -A "$P/etc/sysctl.d" | grep -vc '^60-wstune.conf$')"
  if [ $next = apply ]; then "$W" apply --profile 100k --yes --prefix "$P" >> "$T/out" 2>&1; echo "APPLY $?"; fi
  "$W" rollback --yes --prefix "$P" >> "$T/out" 2>&1; echo "ROLLBACK $next $?"
  echo "AFTER $next $(ls -A "$P/etc/sysctl.d" 2>/dev/null | wc -l) $(same)"
done
cat "$T/out""#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    for next in ["rollback", "apply"] {
        assert_eq!(
            tagged_line(&o, &format!("KILLED {next} ")),
            format!("KILLED {next} 137"),
            "{all}"
        );
        assert_eq!(
            tagged_line(&o, &format!("LEFT {next} ")),
            format!("LEFT {next} 1"),
            "the kill left a temporary: {all}"
        );
        assert_eq!(
            tagged_line(&o, &format!("ROLLBACK {next} ")),
            format!("ROLLBACK {next} 0"),
            "{all}"
        );
        assert_eq!(
            tagged_line(&o, &format!("AFTER {next} ")),
            format!("AFTER {next} 0 yes"),
            "{all}"
        );
    }
    assert!(
        stdout(&o).contains("temporary file(s) an interrupted write had left"),
        "{all}"
    );
}

/// A vendor file applied after wstune's sets fs.nr_open = 1048576: apply said so, and still
/// wrote `* hard nofile 2000000`, which every login's setrlimit refuses after the next boot.
/// nofile is judged against the boot-time nr_open now, lowered to it, and the reason given.
#[test]
fn nofile_is_never_written_above_the_nr_open_the_host_boots_with() {
    let tree = Tree::from_fixture("default");
    std::fs::write(
        tree.join("usr/lib/sysctl.d/99-vendor.conf"),
        "fs.nr_open = 1048576\n",
    )
    .unwrap();
    let t = tree.root();
    let o = wstune(&["apply", "--root", t, "--profile", "1m", "--yes"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let limits =
        std::fs::read_to_string(tree.join("etc/security/limits.d/60-wstune.conf")).unwrap();
    assert!(limits.contains("* hard nofile 1048576"), "{limits}");
    assert!(!limits.contains("2000000"), "{limits}");
    let out = stdout(&o);
    assert!(
        out.contains("above the fs.nr_open this host will have after the next boot (1048576, set by /usr/lib/sysctl.d/99-vendor.conf:1)"),
        "{out}"
    );
}

/// Run as root, a key the kernel keeps read-only in a child network namespace got "permission
/// denied (run as root)"; a sysctl.d file that could not be written was blamed on its first
/// line's setting alone, with the OS error printed twice. Each says what happened now.
#[test]
fn write_failures_name_the_namespace_the_file_and_the_os_error_once() {
    let script = format!(
        r#"source {lib}
umount /proc/sys/net/netfilter/nf_conntrack_max /proc/sys/net/netfilter/nf_conntrack_buckets 2>/dev/null
if [ -w /proc/sys/net/netfilter/nf_conntrack_max ] || [ ! -e /proc/sys/net/netfilter/nf_conntrack_max ]; then echo "NS no-conntrack"; else
  "$W" apply --profile 1m --runtime-only --yes --prefix "$P" > /dev/null 2> "$T/err"; echo "NS rc=$? $(tr '\n' ' ' < "$T/err")"
fi
mkdir -p "$P/etc/sysctl.d"; mount --bind "$P/etc/sysctl.d" "$P/etc/sysctl.d"; mount -o remount,bind,ro "$P/etc/sysctl.d"
"$W" apply --profile 100k --yes --prefix "$P" > /dev/null 2> "$T/err"; echo "RO rc=$? $(tr '\n' ' ' < "$T/err")"
umount "$P/etc/sysctl.d""#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let ns = tagged_line(&o, "NS ");
    if ns != "NS no-conntrack" {
        assert!(ns.starts_with("NS rc=3 "), "{all}");
        assert!(
            ns.contains(
                "cannot be changed from this network namespace, although wstune runs as root"
            ) && ns.contains("most likely")
                && ns.contains("SELinux")
                && !ns.contains("(run as root)"),
            "{all}"
        );
    }
    let ro = tagged_line(&o, "RO ");
    assert!(ro.starts_with("RO rc=3 "), "{all}");
    assert!(
        ro.contains("writing /etc/sysctl.d/60-wstune.conf failed (actions "),
        "the file, with every action it holds: {all}"
    );
    assert_eq!(ro.matches("Read-only file system").count(), 1, "{all}");
    assert!(!ro.contains("os error"), "{all}");
}
