//! The journal's promises against the real `wstune` binary: an apply killed midway and followed
//! by another apply is still undone by one rollback; `check` reports an interrupted or damaged
//! entry; rollback will not silently overwrite values changed by hand; values raised by hand
//! are persisted; `--unit` says what systemd needs (or that there is none).

use crate::common;

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

/// The shape of every file under a tree (less the journal): type, mode, owner, link count,
/// link target and content, one line each, for an exact before/after comparison.
const FINGERPRINT: &str = r#"fp() { (cd "$1" && find . -mindepth 1 -path ./var -prune -o -printf '%y %m %U:%G %n %l %p\n' | sort
  find . -path ./var -prune -o -type f -print | sort | xargs -r sha256sum); }"#;

/// A symlinked limits.d file (to a plain file beside it), a sysctl.d file owned by 1000:1000
/// with mode 640: apply writes through the link and keeps the owner and mode; rollback puts
/// back the tree exactly (it made the link a regular 0600 copy, the owner 0:0, and the 640 file
/// was 644 while applied).
#[test]
fn rollback_restores_links_owners_and_modes_exactly() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
mkdir -p "$P/etc/sysctl.d" "$P/etc/security/limits.d"
printf '# mine\nvm.swappiness = 10\n' > "$P/etc/sysctl.d/60-wstune.conf"
chown 1000:1000 "$P/etc/sysctl.d/60-wstune.conf"; chmod 640 "$P/etc/sysctl.d/60-wstune.conf"
printf '# real\n' > "$P/etc/security/limits.d/wstune.real"; chown 1000:1000 "$P/etc/security/limits.d/wstune.real"
chmod 600 "$P/etc/security/limits.d/wstune.real"
ln -s wstune.real "$P/etc/security/limits.d/60-wstune.conf"
fp "$P" > "$T/tree-before"; before=$(state)
"$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2>&1; echo "APPLY $?"
echo "DURING $(stat -c '%a %u:%g %h' "$P/etc/sysctl.d/60-wstune.conf") $(stat -c %F "$P/etc/security/limits.d/60-wstune.conf")"
grep -c nofile "$P/etc/security/limits.d/wstune.real" | sed 's/^/REALNOFILE /'
"$W" rollback --yes --prefix "$P" >> "$T/out" 2>&1; echo "ROLLBACK $?"
fp "$P" > "$T/tree-after"
if cmp -s "$T/tree-before" "$T/tree-after"; then echo "TREE same"; else echo "TREE differs"; diff "$T/tree-before" "$T/tree-after"; fi
[ "$before" = "$(state)" ] && echo "VALUES same" || echo "VALUES differ"
cat "$T/out""#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(tagged_line(&o, "APPLY "), "APPLY 0", "{all}");
    assert_eq!(
        tagged_line(&o, "DURING "),
        "DURING 640 1000:1000 1 symbolic link",
        "applied in place: mode, owner and symlink kept: {all}"
    );
    assert_eq!(
        tagged_line(&o, "REALNOFILE "),
        "REALNOFILE 4",
        "written through the link: {all}"
    );
    assert_eq!(tagged_line(&o, "ROLLBACK "), "ROLLBACK 0", "{all}");
    assert_eq!(tagged_line(&o, "TREE "), "TREE same", "{all}");
    assert_eq!(tagged_line(&o, "VALUES "), "VALUES same", "{all}");
}

/// A hard-linked sysctl.d file was rewritten in place (truncated, then written: a power loss
/// left it empty for systemd-sysctl at boot), and a link `60-wstune.conf -> ../limits.conf` had
/// limits.conf's whole content replaced while applied. Both are refused before any change now,
/// with the reason and the fix.
#[test]
fn hard_links_and_links_out_of_their_directory_are_refused_before_any_change() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
for case in hardlink limits-conf absolute-beside; do
  rm -rf "$P"/*; mkdir -p "$P/etc/sysctl.d" "$P/etc/security/limits.d"
  printf '# limits\n' > "$P/etc/security/limits.conf"
  case $case in
    hardlink) printf '# mine\n' > "$P/etc/sysctl.d/60-wstune.conf"; ln "$P/etc/sysctl.d/60-wstune.conf" "$P/etc/sysctl-copy.conf" ;;
    limits-conf) ln -s ../limits.conf "$P/etc/security/limits.d/60-wstune.conf" ;;
    absolute-beside) printf '# x\n' > "$P/etc/sysctl.d/real"; ln -s "$P/etc/sysctl.d/real" "$P/etc/sysctl.d/60-wstune.conf" ;;
  esac
  fp "$P" > "$T/tree-before"; before=$(state)
  "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2> "$T/err"; rc=$?
  fp "$P" > "$T/tree-after"
  same=no; cmp -s "$T/tree-before" "$T/tree-after" && [ "$before" = "$(state)" ] && same=yes
  echo "CASE $case rc=$rc same=$same var=$(test -e "$P/var/lib/wstune" && echo left || echo none)"
  echo "ERR $(tr '\n' ' ' < "$T/err")"
done"#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged(&o, "CASE "),
        vec![
            "CASE hardlink rc=3 same=yes var=none",
            "CASE limits-conf rc=3 same=yes var=none",
            "CASE absolute-beside rc=3 same=yes var=none",
        ],
        "{all}"
    );
    let errs = tagged(&o, "ERR ");
    assert!(
        errs[0].contains("hard links") && errs[0].contains("Fix:"),
        "{all}"
    );
    for e in &errs[1..] {
        assert!(e.contains("own directory") && e.contains("Fix:"), "{all}");
    }
}

/// A link wstune cannot write through and put back (out of /etc, dangling) is refused before
/// anything changes, with the reason and the fix.
#[test]
fn a_link_out_of_etc_or_dangling_is_refused_before_any_change() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
mkdir -p "$P/etc/sysctl.d" "$T/outside"; printf '# victim\n' > "$T/outside/victim.conf"
for target in "$T/outside/victim.conf" "$P/etc/nowhere.conf"; do
  ln -sfn "$target" "$P/etc/sysctl.d/60-wstune.conf"
  fp "$P" > "$T/tree-before"; before=$(state); v=$(sha256sum < "$T/outside/victim.conf")
  "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2> "$T/err"; rc=$?
  fp "$P" > "$T/tree-after"
  same=no; cmp -s "$T/tree-before" "$T/tree-after" && [ "$before" = "$(state)" ] && [ "$v" = "$(sha256sum < "$T/outside/victim.conf")" ] && same=yes
  # The fingerprint skips ./var: a journal directory left by the refusal is checked here.
  [ -e "$P/var/lib/wstune" ] && same=no
  echo "CASE rc=$rc same=$same"; echo "ERR $(tr '\n' ' ' < "$T/err")"
done"#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged(&o, "CASE "),
        vec!["CASE rc=3 same=yes", "CASE rc=3 same=yes"],
        "{all}"
    );
    let errs = tagged(&o, "ERR ");
    assert!(
        errs[0].contains("outside") && errs[0].contains("Fix:"),
        "{all}"
    );
    assert!(
        errs[1].contains("does not exist") && errs[1].contains("Fix:"),
        "{all}"
    );
}

/// A link in a directory above wstune's file (`etc/security/limits.d -> outside`): apply wrote
/// `outside/60-wstune.conf`. Each such parent is refused before any change now, with nothing
/// written outside and no journal directory left behind.
#[test]
fn a_link_in_a_parent_directory_is_refused_before_any_change() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
for linked in etc/security/limits.d etc/security etc/sysctl.d; do
  rm -rf "$P"/* "$T/outside"; mkdir -p "$P/$(dirname $linked)" "$T/outside"
  ln -s "$T/outside" "$P/$linked"
  fp "$P" > "$T/tree-before"; before=$(state)
  "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2> "$T/err"; rc=$?
  fp "$P" > "$T/tree-after"
  same=no; cmp -s "$T/tree-before" "$T/tree-after" && [ "$before" = "$(state)" ] && same=yes
  echo "CASE $linked rc=$rc same=$same outside=$(find "$T/outside" -mindepth 1 | wc -l) var=$(test -e "$P/var/lib/wstune" && echo left || echo none)"
  echo "ERR $(tr '\n' ' ' < "$T/err")"
done"#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged(&o, "CASE "),
        vec![
            "CASE etc/security/limits.d rc=3 same=yes outside=0 var=none",
            "CASE etc/security rc=3 same=yes outside=0 var=none",
            "CASE etc/sysctl.d rc=3 same=yes outside=0 var=none",
        ],
        "{all}"
    );
    for e in tagged(&o, "ERR ") {
        assert!(e.contains("outside") && e.contains("Fix:"), "{all}");
    }
}

fn lib_path(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
        .display()
        .to_string()
}

/// A `--root` tree with one applied entry: (tempdir, tree, the entry's file).
fn applied_tree() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host");
    copy_dir(&fixture("default"), &tree);
    let o = wstune(&["apply", "--root", tree.to_str().unwrap(), "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let jdir = tree.join("var/lib/wstune/journal");
    let entry = std::fs::read_dir(&jdir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    (dir, tree, entry)
}

/// Edit an entry's JSON with `f`; `legacy` drops its format and checksum (an entry as an older
/// wstune wrote it), so that what is checked is the path itself, not the checksum.
fn tamper(entry: &std::path::Path, legacy: bool, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(entry).unwrap()).unwrap();
    if legacy {
        let o = v.as_object_mut().unwrap();
        o.remove("format");
        o.remove("checksum");
    }
    f(&mut v);
    std::fs::write(entry, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// rollback restored whatever a journal entry named: a runtime path outside /proc/sys, a file
/// path that climbs out of the tree, one changed base64 character, fields of "a newer version".
/// Each is now refused (exit 3, naming the entry), and nothing is written.
#[test]
fn rollback_refuses_an_entry_that_does_not_verify() {
    type Edit = Box<dyn Fn(&mut serde_json::Value, &std::path::Path)>;
    let cases: Vec<(&str, bool, Edit, &str)> = vec![
        (
            "runtime path outside /proc/sys",
            true,
            Box::new(|v, out| {
                v["runtime"][0]["path"] = out.join("victim-runtime").display().to_string().into()
            }),
            "is not a kernel setting under /proc/sys",
        ),
        (
            "file path out of the tree",
            true,
            Box::new(|v, _| {
                v["files"][0]["path"] = "/etc/../../outside/victim-file".into();
            }),
            "is not one wstune writes",
        ),
        (
            "one base64 character changed",
            false,
            Box::new(|v, _| {
                let b = v["files"][0]["new"]["base64"].as_str().unwrap().to_string();
                let flipped = if b.starts_with('I') { "J" } else { "I" };
                v["files"][0]["new"]["base64"] = format!("{flipped}{}", &b[1..]).into();
            }),
            "checksum does not match",
        ),
        (
            "an unknown field",
            false,
            Box::new(|v, _| v["files"][0]["mode_v3"] = 1.into()),
            "unknown field",
        ),
        (
            "an unknown field in an action",
            false,
            Box::new(|v, _| v["actions"][0]["op"]["undo_with"] = "rm -rf /".into()),
            "unknown field",
        ),
        (
            "a newer format",
            false,
            Box::new(|v, _| v["format"] = 99.into()),
            "newer wstune",
        ),
    ];
    for (what, legacy, edit, want) in cases {
        let (dir, tree, entry) = applied_tree();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("victim-runtime"), "keep\n").unwrap();
        tamper(&entry, legacy, |v| edit(v, &outside));
        let before = std::fs::read_to_string(tree.join("proc/sys/net/core/somaxconn")).unwrap();
        let t = tree.to_str().unwrap();
        let o = wstune(&["rollback", "--root", t, "--yes", "--force"]);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{what}: {}{err}", stdout(&o));
        assert!(
            err.contains(&entry.display().to_string()) && err.contains(want),
            "{what}: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("victim-runtime")).unwrap(),
            "keep\n",
            "{what}"
        );
        assert!(!dir.path().join("outside/victim-file").exists(), "{what}");
        assert_eq!(
            std::fs::read_to_string(tree.join("proc/sys/net/core/somaxconn")).unwrap(),
            before,
            "{what}: nothing was restored"
        );
        // --id names the entry too.
        let id = entry.file_stem().unwrap().to_str().unwrap();
        let o = wstune(&["rollback", "--root", t, "--id", id, "--yes", "--force"]);
        assert_eq!(code(&o), 3, "{what} --id: {}", stderr(&o));
    }
}

/// An entry whose `link` leads out of the tree (rollback made wstune's file a link there, and
/// every later rollback failed), whose `created_dirs` names a directory wstune did not create,
/// that lost its format and checksum but carries the fields only format 2 has, or that says
/// format 0: each is refused (exit 3, naming the entry), and nothing is written.
#[test]
fn rollback_refuses_a_tampered_link_created_dir_or_stripped_format() {
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, bool, Edit, &str)> = vec![
        (
            "a link out of the tree",
            true,
            Box::new(|v| v["files"][0]["link"] = "../../../outside/victim".into()),
            "not a file wstune may write through",
        ),
        (
            "an absolute link",
            true,
            Box::new(|v| v["files"][0]["link"] = "/etc/passwd".into()),
            "not a file wstune may write through",
        ),
        (
            "a /proc/sys key the catalog does not change",
            true,
            Box::new(|v| v["runtime"][0]["path"] = "/proc/sys/kernel/core_pattern".into()),
            "not a setting wstune's catalog changes",
        ),
        (
            "a directory wstune did not create",
            true,
            Box::new(|v| v["created_dirs"] = serde_json::json!(["/var"])),
            "is not one wstune created",
        ),
        (
            "format 2 fields without format and checksum",
            true,
            Box::new(|v| v["files"][0]["new"]["owner"] = serde_json::json!([0, 0])),
            "fields only format 2 has",
        ),
        (
            "a link without format and checksum",
            true,
            Box::new(|v| {
                let p = v["files"][0]["path"].as_str().unwrap().to_string();
                let name = p.rsplit('/').next().unwrap().to_string();
                v["files"][0]["link"] = format!("{name}.real").into();
            }),
            "fields only format 2 has",
        ),
        (
            "format 0",
            false,
            Box::new(|v| v["format"] = 0.into()),
            "format 0",
        ),
    ];
    for (what, legacy, edit, want) in cases {
        let (dir, tree, entry) = applied_tree();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("victim"), "keep\n").unwrap();
        tamper(&entry, legacy, |v| {
            edit(v);
            if let Some(name) = v["files"][0]["link"]
                .as_str()
                .filter(|l| l.ends_with(".real"))
            {
                // The target exists: only the missing checksum can refuse it.
                let p = v["files"][0]["path"].as_str().unwrap();
                let real = tree.join(&p[1..]).with_file_name(name);
                std::fs::write(real, "x = 1\n").unwrap();
            }
        });
        let file: String =
            serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&entry).unwrap())
                .unwrap()["files"][0]["path"]
                .as_str()
                .unwrap()
                .to_string();
        let on_disk = tree.join(&file[1..]);
        let before = std::fs::read(&on_disk).ok();
        let t = tree.to_str().unwrap();
        let o = wstune(&["rollback", "--root", t, "--yes", "--force"]);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{what}: {}{err}", stdout(&o));
        assert!(
            err.contains(&entry.display().to_string()) && err.contains(want),
            "{what}: {err}"
        );
        assert!(
            !std::fs::symlink_metadata(&on_disk).is_ok_and(|m| m.file_type().is_symlink()),
            "{what}: {file} was made a link"
        );
        assert_eq!(std::fs::read(&on_disk).ok(), before, "{what}: {file}");
        assert_eq!(
            std::fs::read_to_string(outside.join("victim")).unwrap(),
            "keep\n",
            "{what}"
        );
        assert!(tree.join("var").exists(), "{what}");
    }
}

/// A journal directory others can write is refused, as sudo refuses such a sudoers file.
#[test]
fn a_journal_directory_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, tree, _entry) = applied_tree();
    let jdir = tree.join("var/lib/wstune/journal");
    std::fs::set_permissions(&jdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let t = tree.to_str().unwrap();
    for args in [
        vec!["rollback", "--root", t, "--yes"],
        vec!["apply", "--root", t, "--yes"],
    ] {
        let o = wstune(&args);
        assert_eq!(code(&o), 3, "{args:?}: {}{}", stdout(&o), stderr(&o));
        assert!(
            stderr(&o).contains("writable by others") && stderr(&o).contains("chmod 700"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let r = json_of(&wstune(&["check", "--root", t, "-f", "json"]));
    let f = finding(&r, "wstune.journal.pending");
    assert_eq!(f["status"], "fail", "check shows it too: {f}");
    assert!(
        f["note"].as_str().unwrap().contains("writable by others"),
        "{f}"
    );
    std::fs::set_permissions(&jdir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = wstune(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// With `umask 000` apply created its journal directory 0777 and then refused it as writable
/// by others. The state and journal directories are made 0700 whatever the umask.
#[test]
fn the_journal_directory_apply_creates_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    for umask in ["000", "777"] {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("host");
        copy_dir(&fixture("default"), &tree);
        let o = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("umask {umask}; exec \"$0\" apply --root \"$1\" --yes"),
            ])
            .arg(common::bin())
            .arg(&tree)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "umask {umask}: {}{}", stdout(&o), stderr(&o));
        for d in ["var/lib/wstune", "var/lib/wstune/journal"] {
            let mode = std::fs::metadata(tree.join(d))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o700, "umask {umask}: {d}");
        }
        let o = wstune(&["rollback", "--root", tree.to_str().unwrap(), "--yes"]);
        assert_eq!(code(&o), 0, "umask {umask}: {}", stderr(&o));
    }
}

/// `check` without root failed "journal refused: permission denied" on the private (0700)
/// journal directory; it is a skip now, saying why.
#[test]
fn check_without_root_skips_a_journal_it_cannot_read() {
    use std::os::unix::fs::PermissionsExt;
    if !common::have("setpriv") {
        common::skip("setpriv", "setpriv is not installed (util-linux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let jdir = dir.path().join("var/lib/wstune/journal");
    std::fs::create_dir_all(&jdir).unwrap();
    for d in [jdir.parent().unwrap(), &jdir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let o = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(common::bin())
        .args([
            "check",
            "--prefix",
            dir.path().to_str().unwrap(),
            "-f",
            "json",
        ])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let r = json_of(&o);
    let f = finding(&r, "wstune.journal.pending");
    assert_eq!(f["status"], "skip", "{f}");
    assert!(
        f["note"].as_str().unwrap().contains("run check as root"),
        "{f}"
    );
}

/// With the lock taken before planning, an apply that had nothing to change had to create
/// /var/lib/wstune first, and failed on a read-only /var where it used to exit 0. It exits 0
/// again; one that would change something is refused before any change.
#[test]
fn an_apply_with_nothing_to_change_needs_no_writable_var() {
    let script = format!(
        r#"set -u; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cp -a {fixture} "$T/done"; cp -a {fixture} "$T/todo"
"$WSTUNE" apply --root "$T/done" --yes > /dev/null 2>&1; echo "FIRST $?"
rm -rf "$T/done/var/lib/wstune"
for t in done todo; do
  mkdir -p "$T/$t/var"; mount --bind -o ro "$T/$t/var" "$T/$t/var" || exit 91
  "$WSTUNE" apply --root "$T/$t" --yes > "$T/out" 2>&1; echo "APPLY $t $?"
  echo "OUT $t $(tr '\n' ' ' < "$T/out")"
done"#,
        fixture = fixture("default").display()
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(tagged_line(&o, "FIRST "), "FIRST 0", "{all}");
    assert_eq!(tagged_line(&o, "APPLY done "), "APPLY done 0", "{all}");
    assert!(
        tagged_line(&o, "OUT done ").contains("Nothing to change"),
        "{all}"
    );
    assert_eq!(tagged_line(&o, "APPLY todo "), "APPLY todo 3", "{all}");
    assert!(
        tagged_line(&o, "OUT todo ").contains("Nothing was changed"),
        "{all}"
    );
}

/// An older wstune's killed write left `.tmpXXXXXX` with the new content, which nothing
/// removed. rollback removes such a file when its bytes are exactly a journaled new content,
/// and leaves one of that name with other bytes.
#[test]
fn rollback_removes_an_older_versions_temporaries_with_journaled_content() {
    let (_dir, tree, entry) = applied_tree();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&entry).unwrap()).unwrap();
    let path = v["files"][0]["path"].as_str().unwrap();
    let on_disk = tree.join(&path[1..]);
    let new = std::fs::read(&on_disk).unwrap();
    let dir = on_disk.parent().unwrap();
    std::fs::write(dir.join(".tmpAb12Cd"), &new).unwrap();
    std::fs::write(dir.join(".tmpZz99Yy"), b"someone else's\n").unwrap();
    let o = wstune(&["rollback", "--root", tree.to_str().unwrap(), "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!dir.join(".tmpAb12Cd").exists(), "{}", stdout(&o));
    assert!(dir.join(".tmpZz99Yy").exists());
    assert!(stdout(&o).contains(".tmpAb12Cd"), "{}", stdout(&o));
}

/// A FIFO in the journal directory hung check, apply, rollback and `rollback --list`; a link to
/// /dev/zero was read until memory ran out. Both are a damaged entry now, reported at once.
#[test]
fn a_fifo_or_a_dev_zero_link_in_the_journal_is_refused_without_blocking() {
    for kind in ["fifo", "dev-zero", "lock-fifo"] {
        let (_dir, tree, _entry) = applied_tree();
        let jdir = tree.join("var/lib/wstune/journal");
        let odd = jdir.join(if kind == "lock-fifo" {
            ".lock"
        } else {
            "20991231T235959.000000000.json"
        });
        let _ = std::fs::remove_file(&odd);
        if kind == "dev-zero" {
            std::os::unix::fs::symlink("/dev/zero", &odd).unwrap();
        } else {
            assert!(std::process::Command::new("mkfifo")
                .arg(&odd)
                .status()
                .unwrap()
                .success());
        }
        let t = tree.to_str().unwrap();
        let limit = std::time::Duration::from_secs(20);
        let run = |args: &[&str]| {
            let mut cmd = std::process::Command::new(common::bin());
            cmd.args(args).env("NO_COLOR", "1");
            common::run_bounded(&mut cmd, limit)
        };
        let o = run(&["check", "--root", t, "-f", "json"]);
        if kind != "lock-fifo" {
            let r = json_of(&o);
            let f = finding(&r, "wstune.journal.pending");
            assert_eq!(f["status"], "fail", "{kind}: {f}");
            assert!(
                f["note"].as_str().unwrap().contains("not a regular file"),
                "{kind}: {f}"
            );
            let o = run(&["rollback", "--root", t, "--list"]);
            assert!(
                stdout(&o).contains("damaged"),
                "{kind}: {}{}",
                stdout(&o),
                stderr(&o)
            );
        }
        for args in [
            vec!["rollback", "--root", t, "--yes"],
            vec!["apply", "--root", t, "--yes"],
        ] {
            let o = run(&args);
            assert_eq!(code(&o), 3, "{kind} {args:?}: {}{}", stdout(&o), stderr(&o));
            assert!(
                stderr(&o).contains(&odd.display().to_string())
                    || stderr(&o).contains("not a plain file"),
                "{kind} {args:?}: {}",
                stderr(&o)
            );
        }
    }
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
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host");
    copy_dir(&fixture("default"), &tree);
    std::fs::write(
        tree.join("usr/lib/sysctl.d/99-vendor.conf"),
        "fs.nr_open = 1048576\n",
    )
    .unwrap();
    let t = tree.to_str().unwrap();
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

/// There was no way to roll back everything but a value changed by hand since: `--keep KEY`
/// leaves that one and restores the rest; a key the entry did not change is refused.
#[test]
fn rollback_keep_leaves_one_hand_changed_value_and_restores_the_rest() {
    let (_dir, tree, _entry) = applied_tree();
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
