//! The check table for people: problems first, grouped by area, each with its fix, then one
//! line counting what passed; `--show all` lists every row; the machine formats keep every row.
//! Off a terminal the report is one block per finding unless `--format table` asks for the
//! table (tests/commands/cli/check_terminal.rs has both in a real terminal): the table's tests ask.

use crate::common;
use common::Tree;

use common::{fixture, stdout, wstune};

fn table(args: &[&str]) -> String {
    let root = fixture("default");
    let o = wstune(
        &[
            &[
                "check",
                "--root",
                root.to_str().unwrap(),
                "--format",
                "table",
            ],
            args,
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
    stdout(&o)
}

#[test]
fn problems_come_first_grouped_by_area_with_their_fix_and_passes_are_counted() {
    let out = table(&[]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("wstune check: profile 100k"), "{out}");
    // Areas in the operator's order, each heading with its counts.
    let heading = |area: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(&format!("{area}: ")))
            .unwrap_or_else(|| panic!("no {area} heading in\n{out}"))
    };
    let fd = heading("File descriptors");
    let accept = heading("Accept path");
    let boot = heading("Next boot");
    assert!(fd < accept && accept < boot, "{out}");
    assert!(lines[accept].contains("fail"), "{}", lines[accept]);
    // A failing row is there in full, with its fix, under its area.
    let somaxconn = lines
        .iter()
        .position(|l| l.contains("linux.net.core.somaxconn "))
        .unwrap();
    assert!(somaxconn > accept && somaxconn < boot, "{out}");
    assert!(
        out.contains("now: sudo sysctl -w net.core.somaxconn=65535"),
        "{out}"
    );
    // No passing row is listed; passes are one counted line, and the last line is unchanged.
    let json = common::json_of(&wstune(&[
        "check",
        "--root",
        fixture("default").to_str().unwrap(),
        "-f",
        "json",
    ]));
    let results = json["results"].as_array().unwrap();
    for r in results.iter().filter(|r| r["status"] == "pass") {
        let id = r["id"].as_str().unwrap();
        assert!(
            !out.lines().any(|l| l.contains(&format!("│ {id} "))),
            "{id} listed:\n{out}"
        );
    }
    let pass = json["summary"]["pass"].as_u64().unwrap();
    assert!(out.contains(&format!("\nPassed: {pass} (")), "{out}");
    assert!(out.contains("`--show all` lists every row"), "{out}");
    let last = lines.last().unwrap();
    assert!(
        last.starts_with(&format!("{} checks: {pass} pass, ", results.len())),
        "{last}"
    );
    // Much shorter than every row.
    let all = table(&["--show", "all"]);
    assert!(
        out.lines().count() * 3 / 2 < all.lines().count(),
        "{} vs {}",
        out.lines().count(),
        all.lines().count()
    );
}

#[test]
fn show_all_lists_every_row_by_area() {
    let out = table(&["--show", "all"]);
    let json = common::json_of(&wstune(&[
        "check",
        "--root",
        fixture("default").to_str().unwrap(),
        "-f",
        "json",
    ]));
    for r in json["results"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        // Ids are never broken: each is whole in its column.
        assert!(out.contains(&format!("│ {id} ")), "{id} missing:\n{out}");
    }
    assert!(out.contains("Kernel counters: "), "{out}");
    assert!(!out.contains("`--show all`"), "{out}");
    // Every recommendation with the sources it follows, once per check.
    let sources = out
        .split("Sources each recommendation follows:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no sources list:\n{out}"));
    assert!(
        sources.contains("  linux.net.core.somaxconn: TCP variables: somaxconn <https://docs.kernel.org/networking/ip-sysctl.html>"),
        "{sources}"
    );
    assert_eq!(
        sources.matches("  linux.net.core.somaxconn:").count(),
        1,
        "{sources}"
    );
    let somax = common::finding(&json, "linux.net.core.somaxconn");
    assert_eq!(
        somax["refs"][0]["url"],
        "https://docs.kernel.org/networking/ip-sysctl.html"
    );
}

#[test]
fn machine_formats_do_not_depend_on_show() {
    let root = fixture("default");
    let root = root.to_str().unwrap();
    for f in ["json", "junit"] {
        let a = stdout(&wstune(&["check", "--root", root, "-f", f]));
        let b = stdout(&wstune(&[
            "check", "--root", root, "-f", f, "--show", "all",
        ]));
        let strip = |s: &str| {
            s.lines()
                .filter(|l| !l.contains("timestamp"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(strip(&a), strip(&b), "{f}");
    }
}

/// apply's plan: one row per setting, its change now and at boot side by side, grouped by
/// area; the files it writes named once below.
#[test]
fn apply_plan_has_one_row_per_setting_grouped_by_area() {
    let tree = Tree::from_fixture("default");
    let o = wstune(&[
        "apply",
        "--dry-run",
        "--profile",
        "50k",
        "--root",
        tree.root(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = stdout(&o);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("net.core.somaxconn "))
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    let cells: Vec<&str> = rows[0].split(['│', '┆']).map(str::trim).collect();
    assert_eq!(cells[1], "accept path", "{out}");
    assert!(
        cells[3].ends_with("-> 16384") && cells[4].ends_with("-> 16384"),
        "{out}"
    );
    let areas: Vec<usize> = [
        "file descriptors",
        "accept path",
        "TIME_WAIT and ports",
        "memory",
    ]
    .iter()
    .map(|a| {
        out.find(&format!("│ {a} "))
            .unwrap_or_else(|| panic!("{a}:\n{out}"))
    })
    .collect();
    assert!(areas.windows(2).all(|w| w[0] < w[1]), "{out}");
    assert!(
        out.contains("At boot: written to /etc/sysctl.d/60-wstune.conf"),
        "{out}"
    );
    assert!(out.contains("Dry run: nothing was changed."), "{out}");
}
