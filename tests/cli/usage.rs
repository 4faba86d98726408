//! Bad input is one clear error and exit 3, and `check --help` is what tests/snapshots says.

use crate::common;

use super::wstune120;
use common::{bin, code, fixture, stderr, stdout};
use std::path::Path;
use std::process::Command;

fn assert_usage_error(args: &[&str], expect: &[&str]) {
    let o = wstune120(args);
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{args:?}: {err}");
    assert!(stdout(&o).is_empty(), "{args:?}: nothing on stdout");
    for e in expect {
        assert!(err.contains(e), "{args:?}: expected '{e}' in: {err}");
    }
}

#[test]
fn bad_input_is_one_clear_error_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("default");
    let root = root.to_str().unwrap();
    assert_usage_error(
        &["check", "--profile", "200k"],
        &["unknown profile '200k'", "10k, 50k, 100k, 250k, 1m"],
    );
    assert_usage_error(
        &["check", "--profile", "/nope/p.yaml"],
        &["cannot read profile /nope/p.yaml"],
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "name: x\nconnections: [1\n").unwrap();
    assert_usage_error(
        &["check", "--profile", bad.to_str().unwrap()],
        &["bad.yaml:"],
    );
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/100k.yaml"))
            .unwrap();
    std::fs::write(
        &bad,
        text.replace("  somaxconn: 65535", "  somaxconn: 65535\n  somaxcon: 1"),
    )
    .unwrap();
    // The typo is on the line after somaxconn's.
    let typo_line = text
        .lines()
        .position(|l| l == "  somaxconn: 65535")
        .unwrap()
        + 2;
    assert_usage_error(
        &["check", "--profile", bad.to_str().unwrap()],
        &[&format!(
            "bad.yaml:{typo_line}: linux: unknown field `somaxcon`, expected one of"
        )],
    );
    std::fs::write(&bad, text.replace("window_bits: 11", "window_bits: 8")).unwrap();
    assert_usage_error(
        &["check", "--profile", bad.to_str().unwrap()],
        &[
            "bad.yaml:",
            "server.deflate.window_bits: 8 is out of range; allowed 9..=15",
        ],
    );
    std::fs::write(&bad, text.replace("coalesce_us: 500", "coalesce_us: 5000")).unwrap();
    assert_usage_error(
        &["check", "--profile", bad.to_str().unwrap()],
        &[
            "bad.yaml:",
            "server.coalesce_us: 5000 is out of range; allowed 0..=2000",
        ],
    );
    assert_usage_error(
        &[
            "serve",
            "--coalesce-us",
            "5000",
            "--port",
            "0",
            "--admin",
            "off",
        ],
        &["--coalesce-us 5000: at most 2000 microseconds"],
    );
    assert_usage_error(
        &["check", "--root", "/nonexistent/tree"],
        &["--root /nonexistent/tree: no such directory"],
    );
    assert_usage_error(
        &["check", "--root", dir.path().to_str().unwrap()],
        &["neither proc/ nor registry.yaml"],
    );
    assert_usage_error(
        &["check", "--root", root, "--pid", "999999"],
        &["--pid 999999: no such process"],
    );
    assert_usage_error(&["check", "--pid", "4000000000"], &["--pid"]);
    assert_usage_error(&["check", "--format", "xml"], &["invalid value 'xml'"]);
    assert_usage_error(&["check", "--watch", "0"], &["--watch"]);
    assert_usage_error(&["frobnicate"], &["unrecognized subcommand"]);
    assert_usage_error(&["profiles", "show", "nope"], &["unknown profile 'nope'"]);
    let cat = dir.path().join("c.yaml");
    std::fs::write(&cat, "platform: linux\nchecks:\n  - id: Bad Id\n    title: t\n    source: {sysctl: a.b}\n    scope: netns\n    compare: \">=\"\n    target: nope.x\n    severity: fail\n    why: w\n    fix: {}\n").unwrap();
    assert_usage_error(
        &["check", "--root", root, "--catalog", cat.to_str().unwrap()],
        &[
            "c.yaml:3: Bad Id: ids are lowercase",
            "c.yaml:3: Bad Id: target uses 'nope.x'",
        ],
    );
    // Single problems are single lines.
    let o = wstune120(&["check", "--profile", "200k"]);
    assert_eq!(stderr(&o).lines().count(), 1);
}

/// The variable wstune hands its child servers their configuration in, inherited by a serve
/// given flags: refused, not silently preferred over the flags (and not read: not JSON here).
#[test]
fn an_inherited_child_configuration_beside_flags_is_refused() {
    let o = Command::new(bin())
        .args(["serve", "--port", "0"])
        .env("WSTUNE_SERVE_CONFIG", "not json")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{err}");
    assert!(
        err.contains("$WSTUNE_SERVE_CONFIG is set") && err.contains("env -u WSTUNE_SERVE_CONFIG"),
        "{err}"
    );
}

#[test]
fn help_is_what_the_snapshot_says() {
    let o = Command::new(bin())
        .args(["check", "--help"])
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/check-help.txt");
    let got = stdout(&o);
    if std::env::var("UPDATE_SNAPSHOTS").is_ok() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .expect("run with UPDATE_SNAPSHOTS=1 once to create the snapshot");
    assert_eq!(
        got, want,
        "`wstune check --help` changed; review it and run with UPDATE_SNAPSHOTS=1"
    );
    let v = Command::new(bin()).arg("--version").output().unwrap();
    assert_eq!(code(&v), 0);
}
