//! `snapshot` round trips, and `profiles list/show` with profile and catalog files that extend
//! the built-ins.

use crate::common;

use super::wstune120;
use common::{check_json, code, finding, fixture, json_of, stderr, stdout};
use std::path::Path;

// --- snapshot ---------------------------------------------------------------------------------

#[test]
fn snapshot_captures_what_check_reads_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("host");
    let o = wstune120(&["snapshot", snap.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(snap.join("proc/sys/net/core/somaxconn").is_file());
    assert!(snap.join("wstune/host.yaml").is_file());
    let live = json_of(&wstune120(&["check", "-f", "json"]));
    let replay = json_of(&wstune120(&[
        "check",
        "-f",
        "json",
        "--root",
        snap.to_str().unwrap(),
    ]));
    let stable = |r: &serde_json::Value| -> Vec<(String, String)> {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| {
                !x["id"].as_str().unwrap().contains("sockstat")
                    && !x["id"].as_str().unwrap().contains("counter")
            })
            .map(|x| {
                (
                    x["id"].as_str().unwrap().to_string(),
                    x["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(stable(&live), stable(&replay));
    assert!(replay["host"]["source"]
        .as_str()
        .unwrap()
        .starts_with("snapshot:"));
    // An existing, non-empty directory is never overwritten.
    let o = wstune120(&["snapshot", snap.to_str().unwrap()]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("already exists and is not empty"));
}

// --- profiles ---------------------------------------------------------------------------------

#[test]
fn profiles_list_and_show() {
    let o = wstune120(&["profiles", "list", "-f", "json"]);
    let list = json_of(&o);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["10k", "50k", "100k", "250k", "1m"]);
    let o = wstune120(&["profiles", "show", "250k"]);
    assert!(stdout(&o).contains("connections: 250000"));
    let shown = json_of(&wstune120(&["profiles", "show", "1m", "-f", "json"]));
    assert_eq!(shown["server"]["deflate"]["window_bits"], 9);
    let table = stdout(&wstune120(&["profiles", "list"]));
    assert!(table.contains("100k") && table.contains("65535"), "{table}");
}

/// `wstune profiles` alone lists the profiles (exit 0), as `profiles list` does, in the list's
/// formats; a list flag beside a subcommand is still refused.
#[test]
fn profiles_alone_lists_them() {
    let o = wstune120(&["profiles"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), stdout(&wstune120(&["profiles", "list"])));
    let o = wstune120(&["profiles", "-f", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        json_of(&o),
        json_of(&wstune120(&["profiles", "list", "-f", "json"]))
    );
    assert_eq!(
        code(&wstune120(&["profiles", "-f", "json", "show", "10k"])),
        3
    );
}

/// `nic:` is optional: a profile without it, and one whose `nic:` has every key commented out
/// (what a copy of a built-in profile becomes when its one NIC key is commented), load for
/// check, apply and export and take the NIC defaults; one that extends a built-in keeps the
/// base's NIC settings.
#[test]
fn a_profile_without_nic_keys_loads_for_check_apply_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let built_in =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/base.yaml"))
            .unwrap();
    let empty_nic = built_in
        .replace("name: base", "name: empty-nic")
        .replace("  rss: numa_scaling", "#  rss: numa_scaling");
    assert!(
        empty_nic.contains("\nnic:\n"),
        "the built-in profile has a nic block"
    );
    let files = [
        ("empty-nic.yaml", empty_nic),
        (
            "extends-empty-nic.yaml",
            "extends: 100k\nname: edge\nnic:\n#  rss: closest\n".to_string(),
        ),
    ];
    let root = fixture("default");
    let root = root.to_str().unwrap();
    let no_nic = fixture("profiles/no-nic.yaml");
    let mut paths = vec![no_nic.to_str().unwrap().to_string()];
    for (name, text) in &files {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        paths.push(p.to_str().unwrap().to_string());
    }
    for path in &paths {
        let o = wstune120(&["check", "--profile", path, "--root", root]);
        assert!(
            [0, 1, 2].contains(&code(&o)),
            "{path}: check gives a verdict (exit {}):\n{}",
            code(&o),
            stderr(&o)
        );
        let o = wstune120(&["apply", "--dry-run", "--profile", path, "--root", root]);
        assert_eq!(code(&o), 0, "{path}: apply --dry-run:\n{}", stderr(&o));
        for to in ["sysctl", "json"] {
            let o = wstune120(&["export", "--to", to, "--profile", path, "--root", root]);
            assert_eq!(code(&o), 0, "{path}: export --to {to}:\n{}", stderr(&o));
        }
        let resolved = json_of(&wstune120(&["profiles", "show", path, "-f", "json"]));
        let want = if path.ends_with("extends-empty-nic.yaml") {
            "numa_scaling_static"
        } else {
            "closest"
        };
        assert_eq!(
            resolved["nic"]["rss"].as_str().unwrap_or("closest"),
            want,
            "{path}: {resolved}"
        );
    }
}

#[test]
fn a_profile_that_extends_a_built_in_is_shown_resolved_and_checked_against() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("edge.yaml");
    std::fs::write(
        &p,
        "extends: 100k\nname: edge\nlinux:\n  somaxconn: 32768\n",
    )
    .unwrap();
    let path = p.to_str().unwrap();
    // Its own text as written; resolved, every value in effect.
    let own = stdout(&wstune120(&["profiles", "show", path]));
    assert!(own.starts_with("extends: 100k"), "{own}");
    let resolved = stdout(&wstune120(&["profiles", "show", path, "--resolved"]));
    assert!(
        resolved.contains("name: edge") && resolved.contains("somaxconn: 32768"),
        "{resolved}"
    );
    assert!(
        resolved.contains("nofile: 200000"),
        "the base's values: {resolved}"
    );
    assert!(!resolved.contains("extends:"), "{resolved}");
    let json = json_of(&wstune120(&["profiles", "show", path, "-f", "json"]));
    assert_eq!(json["linux"]["somaxconn"], 32768);
    // The resolved text is a whole profile of its own: loaded back, the same values.
    let whole = dir.path().join("edge-resolved.yaml");
    std::fs::write(&whole, &resolved).unwrap();
    let again = json_of(&wstune120(&[
        "profiles",
        "show",
        whole.to_str().unwrap(),
        "-f",
        "json",
    ]));
    assert_eq!(again, json);
    assert_eq!(json["connections"], 100000);
    // check uses the merged target.
    let (_, report) = check_json(&fixture("default"), &["--profile", path]);
    assert_eq!(report["profile"]["name"], "edge");
    let somax = finding(&report, "linux.net.core.somaxconn");
    assert_eq!(somax["target"], 32768, "{somax}");
    assert_eq!(
        finding(&report, "linux.process.nofile.hard")["target"],
        200000
    );
    // A bad value in the extending file: its own file and line.
    std::fs::write(&p, "extends: 100k\nname: edge\nlinux:\n  somaxconn: lots\n").unwrap();
    let o = wstune120(&["profiles", "show", path]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains(&format!(
            "{path}:4: linux.somaxconn: expected a whole number"
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_profile_file_and_a_catalog_file_extend_the_built_ins() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/10k.yaml"))
            .unwrap();
    let p = dir.path().join("mine.yaml");
    std::fs::write(
        &p,
        text.replace("name: 10k", "name: mine")
            .replace("somaxconn: 4096", "somaxconn: 2000"),
    )
    .unwrap();
    let mut catalog =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("checks/linux.yaml"))
            .unwrap();
    catalog.push_str(
        "  - id: linux.site.pid_max\n    title: pid_max\n    source: {sysctl: kernel.pid_max}\n    scope: global\n    compare: \">=\"\n    target: \"connections / 100\"\n    severity: warn\n    why: an operator's own check\n    fix: {runtime: \"sysctl -w kernel.pid_max={target}\"}\n",
    );
    let c = dir.path().join("checks.yaml");
    std::fs::write(&c, catalog).unwrap();
    let (code_, r) = check_json(
        &fixture("tuned"),
        &[
            "--profile",
            p.to_str().unwrap(),
            "--catalog",
            c.to_str().unwrap(),
        ],
    );
    assert_eq!(r["profile"]["name"], "mine");
    assert_eq!(finding(&r, "linux.net.core.somaxconn")["target"], 2000);
    let own = finding(&r, "linux.site.pid_max");
    assert_eq!(own["target"], 100);
    assert_eq!(
        own["status"], "skip",
        "the fixture has no pid_max file: {own}"
    );
    assert_eq!(code_, 0);
}

// --- profiles written for earlier releases ---------------------------------------------------

/// What each key of a profile is when a file leaves it out, as docs/reference/profile-keys.md
/// says (its *left out* column, generated from the model's serde defaults): key -> value, for
/// every key that has one (not *required*, not *unset*).
fn documented_defaults() -> Vec<(String, serde_json::Value)> {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/profile-keys.md"),
    )
    .unwrap();
    page.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let key = cells[1].trim_matches('`').to_string();
            let left_out = cells[4].strip_prefix('`')?.strip_suffix('`')?;
            Some((key, serde_json::from_str(left_out).unwrap()))
        })
        .collect()
}

/// The value at the dotted key `path` of `doc`, if it has one.
fn at<'a>(doc: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.')
        .filter(|k| !k.is_empty())
        .try_fold(doc, |v, k| v.get(k))
}

/// Every built-in profile of an earlier release (tests/fixtures/profiles/2497f16, as that
/// release shipped them) and a current profile without a `nic:` block load: `check` gives a
/// verdict (0, 1 or 2, never 3) with nothing but warnings on stderr, and every key the file
/// leaves out takes the default docs/reference/profile-keys.md documents (the CPU check's
/// target follows the default cost per message). docs/profiles.md, "Compatibility", promises
/// this; a release that breaks it fails here.
#[test]
fn profiles_of_an_earlier_release_and_without_optional_blocks_load_with_the_defaults() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles");
    let mut files: Vec<_> = std::fs::read_dir(dir.join("2497f16"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "the five built-in profiles: {files:?}");
    files.push(dir.join("no-nic.yaml"));
    let defaults = documented_defaults();
    let default_of = |key: &str| -> serde_json::Value {
        defaults
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{key} has a default in profile-keys.md"))
            .1
            .clone()
    };
    // The keys the checks below name are among them (the page was read right).
    for key in [
        "server.coalesce_us",
        "server.cpu_ns_per_message",
        "server.notsent_lowat_bytes",
        "selftest.restart.back_p99_ms",
        "nic.irq",
    ] {
        default_of(key);
    }
    let root = fixture("default");
    let root = root.to_str().unwrap();
    for file in &files {
        let path = file.to_str().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let written: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        let old = file.parent().unwrap().ends_with("2497f16");
        let o = wstune120(&["check", "--profile", path, "--root", root]);
        let err = stderr(&o);
        assert!(
            [0, 1, 2].contains(&code(&o)),
            "{path}: a verdict, not an error (exit {}):\n{err}",
            code(&o)
        );
        assert!(
            err.lines().all(|l| l.starts_with("wstune: warning: ")),
            "{path}: nothing but warnings on stderr:\n{err}"
        );
        if old {
            // The one key renamed since: read, and the new name said.
            assert!(
                err.contains("windows.rss_profile is the older name of nic.rss")
                    && err.contains("`nic: rss: numa_scaling`"),
                "{path}:\n{err}"
            );
        } else {
            assert_eq!(err, "", "{path}");
        }

        let (_, report) = common::check_json(&fixture("default"), &["--profile", path]);
        assert_eq!(report["profile"]["name"], written["name"], "{path}");
        // The CPU check budgets the default cost per message.
        let resolved = json_of(&wstune120(&["profiles", "show", path, "-f", "json"]));
        let rate = resolved["connections"].as_u64().unwrap()
            * resolved["selftest"]["rate_per_client"].as_u64().unwrap();
        let ns = default_of("server.cpu_ns_per_message").as_u64().unwrap();
        let cores = ((rate * ns) as f64 / 0.7e9).ceil() as u64;
        assert_eq!(
            finding(&report, "linux.host.cpus")["target"],
            cores.max(1),
            "{path}"
        );
        // Every key the file leaves out has the documented default. A block serde leaves out
        // of the resolved profile holds only defaults.
        let mut compared = 0;
        for (key, want) in &defaults {
            if at(&written, key).is_some() || (old && key == "nic.rss") {
                continue;
            }
            match at(&resolved, key) {
                Some(got) => {
                    assert_eq!(got, want, "{path}: {key} left out");
                    compared += 1;
                }
                None => {
                    let parent = key.rsplit_once('.').map_or("", |(p, _)| p);
                    assert!(
                        at(&resolved, parent).is_none(),
                        "{path}: {key} left out is missing from the resolved profile"
                    );
                }
            }
        }
        if old {
            assert!(compared >= 5, "{path}: {compared} defaults compared");
        }
        if old {
            assert_eq!(
                resolved["server"]["coalesce_us"],
                default_of("server.coalesce_us")
            );
            assert_eq!(resolved["nic"]["rss"], "numa_scaling", "{path}");
        } else {
            assert!(
                resolved.get("nic").is_none(),
                "{path}: the default NIC block"
            );
        }
    }
}

/// `serve` loads its profile twice (its server's settings, then the host's checks), and each
/// load printed the profile's warnings: an earlier release's file named its renamed key twice.
/// Each warning is printed once per file now. `--admin bogus` ends the run after both loads.
#[test]
fn serve_prints_a_profiles_warning_once() {
    let old = fixture("profiles/2497f16/100k.yaml");
    let o = wstune120(&[
        "serve",
        "--profile",
        old.to_str().unwrap(),
        "--admin",
        "bogus",
    ]);
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{err}");
    assert!(err.contains("--admin bogus"), "{err}");
    assert_eq!(
        err.matches("windows.rss_profile is the older name of nic.rss")
            .count(),
        1,
        "{err}"
    );
}
