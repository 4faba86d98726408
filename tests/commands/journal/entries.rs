//! The journal itself: damaged and tampered entries reported by check and refused by apply and
//! rollback, its directory's permissions, reading it without root, older versions' temporaries,
//! and a FIFO or /dev/zero link in it refused without blocking.

use crate::common;
use common::Tree;

use super::applied_tree;
use common::{
    assert_same_tree, code, finding, fixture, json_of, stderr, stdout, tagged_line, wstune,
};

#[test]
fn a_damaged_entry_is_reported_by_check_and_refused_by_apply() {
    let tree = Tree::from_fixture("default");
    let t = tree.root();
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
        let (tree, entry) = applied_tree();
        let outside = tree.scratch().join("outside");
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
        assert!(
            !tree.scratch().join("outside/victim-file").exists(),
            "{what}"
        );
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
        let (tree, entry) = applied_tree();
        let outside = tree.scratch().join("outside");
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
    let (tree, _entry) = applied_tree();
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
        let tree = Tree::from_fixture("default");
        let o = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("umask {umask}; exec \"$0\" apply --root \"$1\" --yes"),
            ])
            .arg(common::bin())
            .arg(tree.root())
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
        let o = wstune(&["rollback", "--root", tree.root(), "--yes"]);
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
    let (tree, entry) = applied_tree();
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
        let (tree, _entry) = applied_tree();
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
