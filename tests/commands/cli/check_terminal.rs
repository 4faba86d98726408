//! `check`, `check --why` and `explain` in a real terminal (util-linux `script` gives wstune a
//! pty; `stty` sets its size) at 80, 100 and 200 columns: no line wider than the terminal but a
//! fix command or an address that cannot be broken, every check id whole on one line, each fix
//! command whole on a line of its own, the why on screen when asked. And off a terminal: one
//! block per finding unless `--format table` asks for the table.

use crate::common;

use common::{bin, fixture, json_of, stderr, stdout, wstune};
use std::process::Command;
use unicode_width::UnicodeWidthStr;

const WIDTHS: [u16; 3] = [80, 100, 200];

/// `wstune ARGS` in a terminal `cols` wide: (exit code, what it printed). None (a recorded
/// skip) without `script`.
fn tty(cols: u16, args: &str) -> Option<(i32, String)> {
    if Command::new("script").arg("--version").output().is_err() {
        common::skip(
            "terminal",
            "no `script` (util-linux) to give wstune a terminal",
        );
        return None;
    }
    let cmd = format!("stty rows 50 cols {cols}; exec {} {args}", bin());
    let o = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).replace('\r', "");
    Some((o.status.code().unwrap_or(-1), out))
}

fn default_root() -> String {
    fixture("default").to_str().unwrap().to_string()
}

/// The default fixture's report as JSON.
fn report() -> serde_json::Value {
    json_of(&wstune(&["check", "--root", &default_root(), "-f", "json"]))
}

/// The failing and warning findings.
fn problems(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "fail" || r["status"] == "warn")
        .cloned()
        .collect()
}

/// A fix text's commands: the text before a trailing `  (remark)` or `  # comment`, split at
/// `; `.
fn commands(fix: &str) -> Vec<String> {
    let main = match (fix.find("  # "), fix.find("  (")) {
        (Some(i), _) => &fix[..i],
        (None, Some(i)) if fix.ends_with(')') => &fix[..i],
        _ => fix,
    };
    main.split("; ").map(|s| s.trim().to_string()).collect()
}

/// Every fix command of the report (what may pass the terminal's edge, whole).
fn all_commands(report: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for r in report["results"].as_array().unwrap() {
        for k in ["runtime", "persistent"] {
            if let Some(t) = r["fix"][k].as_str() {
                out.extend(commands(t));
            }
        }
    }
    out
}

/// No line wider than `cols`, but one that is a fix command or an address alone.
fn assert_fits(out: &str, cols: u16, unbreakable: &[String], what: &str) {
    for line in out.lines() {
        if line.width() <= cols as usize {
            continue;
        }
        let t = line.trim();
        let url = t.trim_start_matches('<').starts_with("https://") && !t.contains(' ');
        assert!(
            url || unbreakable.iter().any(|c| c == t),
            "{what} at {cols} columns: a line of {} columns:\n{line}\n\n{out}",
            line.width()
        );
    }
}

/// Whether `id` stands whole on some line (not part of a longer id, not broken).
fn id_whole(out: &str, id: &str) -> bool {
    out.lines().any(|l| {
        l.split(|c: char| c.is_whitespace() || c == '│' || c == '┆')
            .any(|w| w == id)
    })
}

#[test]
fn check_fits_80_100_and_200_columns_with_ids_whole_and_fix_commands_on_their_own_lines() {
    let report = report();
    let unbreakable = all_commands(&report);
    for cols in WIDTHS {
        let Some((code, out)) = tty(cols, &format!("check --root {}", default_root())) else {
            return;
        };
        assert_eq!(code, 2, "{out}");
        assert_fits(&out, cols, &unbreakable, "check");
        let table = out.contains('┌');
        // The table where there is room for it, the blocks below that.
        assert_eq!(table, cols >= 140, "at {cols} columns:\n{out}");
        for p in problems(&report) {
            let id = p["id"].as_str().unwrap();
            assert!(id_whole(&out, id), "{id} not whole at {cols}:\n{out}");
            for k in ["runtime", "persistent"] {
                let Some(fix) = p["fix"][k].as_str() else {
                    continue;
                };
                for c in commands(fix)
                    .iter()
                    .filter(|c| c.starts_with("sudo sysctl -w"))
                {
                    if table {
                        assert!(out.contains(c.as_str()), "{c} at {cols}:\n{out}");
                    } else {
                        assert!(
                            out.lines().any(|l| l.trim() == c),
                            "{c} not on a line of its own at {cols}:\n{out}"
                        );
                    }
                }
            }
        }
        assert!(
            out.lines().last().unwrap().ends_with(" skip, 40 info"),
            "{out}"
        );
        assert!(out.contains("\nNot checked:\n"), "{out}");
        assert!(out.contains("\nPassed: 28 ("), "{out}");
    }
}

#[test]
fn check_why_puts_each_problems_why_on_screen_at_every_width() {
    let report = report();
    let unbreakable = all_commands(&report);
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for cols in WIDTHS {
        let Some((_, out)) = tty(cols, &format!("check --root {} --why", default_root())) else {
            return;
        };
        assert_fits(&out, cols, &unbreakable, "check --why");
        let flat = words(&out);
        for p in problems(&report) {
            let id = p["id"].as_str().unwrap();
            assert!(id_whole(&out, id), "{id} at {cols}:\n{out}");
            let why = words(p["why"].as_str().unwrap());
            if cols >= 140 {
                // In the table the why wraps inside its cell: its start is on one line.
                let start: Vec<&str> = why.split(' ').take(3).collect();
                assert!(
                    out.contains(&format!("why: {}", start.join(" "))),
                    "{id}'s why at {cols}:\n{out}"
                );
            } else {
                assert!(
                    flat.contains(&format!("why: {why}")),
                    "{id}'s why at {cols}:\n{out}"
                );
            }
        }
    }
    // Without --why, no why: the hint says how to get it.
    let (_, plain) = tty(80, &format!("check --root {}", default_root())).unwrap();
    assert!(!plain.contains("why: "), "{plain}");
    assert!(
        words(&plain).contains("`--why` says why each matters"),
        "{plain}"
    );
}

#[test]
fn explain_fits_80_100_and_200_columns() {
    let o = wstune(&["explain", "linux.net.core.somaxconn", "-f", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = json_of(&o);
    let fixes: Vec<String> = ["runtime", "persistent"]
        .iter()
        .filter_map(|k| e["fix"][k].as_str())
        .flat_map(commands)
        .collect();
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for cols in WIDTHS {
        let Some((code, out)) = tty(cols, "explain linux.net.core.somaxconn") else {
            return;
        };
        assert_eq!(code, 0, "{out}");
        assert_fits(&out, cols, &fixes, "explain");
        assert!(
            out.starts_with("linux.net.core.somaxconn: Accept queue cap (somaxconn)\n"),
            "{out}"
        );
        assert!(
            words(&out).contains(&words(e["why"].as_str().unwrap())),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.trim() == "sudo sysctl -w net.core.somaxconn={target}"),
            "{out}"
        );
        assert!(words(&out).contains("per network namespace"), "{out}");
        for (profile, target) in [
            ("10k", "4096"),
            ("50k", "16384"),
            ("100k", "65535"),
            ("1m", "65535"),
        ] {
            assert!(
                out.lines()
                    .any(|l| l.split_whitespace().collect::<Vec<_>>() == [profile, target]),
                "{profile} {target} at {cols}:\n{out}"
            );
        }
        assert!(
            out.contains("https://docs.kernel.org/networking/ip-sysctl.html"),
            "{out}"
        );
    }
}

#[test]
fn piped_check_is_blocks_unless_the_table_is_asked_for() {
    let root = default_root();
    let blocks = stdout(&wstune(&["check", "--root", &root]));
    assert!(!blocks.contains('│'), "{blocks}");
    assert!(
        blocks.contains("\nFAIL  linux.net.core.somaxconn  4096 -> >= 65535\n"),
        "{blocks}"
    );
    assert!(
        blocks.contains("\n    sudo sysctl -w net.core.somaxconn=65535\n"),
        "{blocks}"
    );
    let table = stdout(&wstune(&["check", "--root", &root, "--format", "table"]));
    assert!(table.contains("│ linux.net.core.somaxconn "), "{table}");
    assert!(
        table.contains("now: sudo sysctl -w net.core.somaxconn=65535"),
        "{table}"
    );
    // --compact is the blocks on a wide terminal too; it contradicts any --format.
    if let Some((_, wide)) = tty(200, &format!("check --root {root} --compact")) {
        assert!(
            !wide.contains('│') && wide.contains("\nFAIL  linux.net.core.somaxconn"),
            "{wide}"
        );
    }
    let o = wstune(&["check", "--root", &root, "--compact", "-f", "json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

#[test]
fn byte_values_read_in_binary_units_for_people_and_stay_numbers_for_machines() {
    let report = report();
    let memory = common::finding(&report, "linux.host.memory");
    let current = memory["current"].as_i64().unwrap();
    assert!(current > 1 << 30, "{memory}");
    let out = stdout(&wstune(&[
        "check",
        "--root",
        &default_root(),
        "--show",
        "all",
    ]));
    let line = out
        .lines()
        .find(|l| l.contains("linux.host.memory "))
        .unwrap_or_else(|| panic!("{out}"));
    let gib = format!("{:.1} GiB", current as f64 / (1u64 << 30) as f64);
    assert!(line.contains(&format!("{gib} -> >= ")), "{line}");
    assert!(line.ends_with(" GiB"), "the target in GiB too: {line}");
    assert!(!out.contains(&current.to_string()), "{out}");
    let table = stdout(&wstune(&[
        "check",
        "--root",
        &default_root(),
        "--show",
        "all",
        "-f",
        "table",
    ]));
    assert!(table.contains(&gib), "{table}");
}

#[test]
fn explain_lists_by_prefix_or_glob_and_names_the_closest_id_for_a_misspelt_one() {
    let o = wstune(&["explain", "linux.net.core.somaxcon"]);
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(
        err.starts_with("wstune: error: unknown check id `linux.net.core.somaxcon`; did you mean linux.net.core.somaxconn"),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
    let listed = stdout(&wstune(&["explain", "linux.net.core"]));
    assert!(
        listed.starts_with("linux.net.core.somaxconn\n    Accept queue cap"),
        "{listed}"
    );
    assert!(!listed.contains("linux.net.ipv4."), "{listed}");
    let globbed = stdout(&wstune(&["explain", "*tw_re*"]));
    assert!(
        globbed.contains("linux.net.ipv4.tcp_tw_reuse\n"),
        "{globbed}"
    );
    assert!(
        globbed.contains("linux.net.ipv4.tcp_tw_recycle\n"),
        "{globbed}"
    );
    // As a report prints it: per NIC and at the next boot.
    for id in ["linux.nic.rx_queues[eth0]", "linux.net.core.somaxconn.boot"] {
        let o = wstune(&["explain", id]);
        assert_eq!(o.status.code(), Some(0), "{id}: {}", stderr(&o));
    }
}

#[test]
fn explain_json_has_the_why_fix_refs_roles_and_each_profiles_target() {
    let e = json_of(&wstune(&[
        "explain",
        "linux.net.ipv4.ip_local_port_range",
        "-f",
        "json",
    ]));
    assert_eq!(e["id"], "linux.net.ipv4.ip_local_port_range");
    assert_eq!(e["area"], "TIME_WAIT and ports");
    assert_eq!(e["per_netns"], true);
    assert_eq!(e["boot_view"], true);
    assert!(e["why"].as_str().unwrap().contains("Source ports"), "{e}");
    assert!(
        e["fix"]["runtime"]
            .as_str()
            .unwrap()
            .starts_with("sudo sysctl -w"),
        "{e}"
    );
    assert!(
        e["refs"][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://"),
        "{e}"
    );
    let server = common::element(&e["roles"], "role", "server");
    assert!(
        server["skip"].as_str().unwrap().contains("listening port"),
        "{e}"
    );
    let profiles: Vec<&str> = e["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["profile"].as_str().unwrap())
        .collect();
    assert_eq!(profiles, ["10k", "50k", "100k", "250k", "1m"]);
    assert_eq!(
        common::element(&e["targets"], "profile", "100k")["target"],
        serde_json::json!([10000, 65535])
    );
}

/// The 1m profile on the default host: tcp_rmem's default misses its (advice) target, and
/// tcp_retries2 its.
fn advice_rows(extra: &[&str]) -> String {
    let root = default_root();
    let mut args = vec!["check", "--root", &root, "--profile", "1m", "--show", "all"];
    args.extend_from_slice(extra);
    stdout(&wstune(&args))
}

#[test]
fn advice_rows_offer_no_paste_ready_commands_unless_asked() {
    for layout in [&[][..], &["-f", "table"][..]] {
        let out = advice_rows(layout);
        // A check whose advice is not to apply carries no command at all.
        assert!(!out.contains("sysctl -w net.ipv4.tcp_rmem"), "{out}");
        assert!(!out.contains("sysctl -w net.ipv4.tcp_wmem"), "{out}");
        assert!(
            out.contains("advice: leave it as the kernel sets it"),
            "{out}"
        );
        // Optional advice with commands: only how to see them.
        assert!(!out.contains("sysctl -w net.ipv4.tcp_retries2"), "{out}");
        assert!(
            out.contains("advice, optional: `--why` shows why and its commands"),
            "{out}"
        );
        assert!(out.contains("`--why` adds each row's why"), "{out}");
        // A failure's fix is still there to paste, with its Kubernetes class.
        assert!(
            out.contains("sudo sysctl -w net.core.somaxconn=65535"),
            "{out}"
        );
        assert!(
            out.contains("Kubernetes: net.core.somaxconn is namespaced but unsafe"),
            "{out}"
        );
        // Asked for: the commands, labelled optional, and the why, in either layout.
        let mut why = layout.to_vec();
        why.push("--why");
        let out = advice_rows(&why);
        assert!(out.contains("sysctl -w net.ipv4.tcp_retries2=8"), "{out}");
        assert!(out.contains("advice, optional (an info check"), "{out}");
        assert!(out.contains("why: A client that vanishes"), "{out}");
        assert!(!out.contains("sysctl -w net.ipv4.tcp_rmem"), "{out}");
    }
}

#[test]
fn json_marks_advice_and_each_sysctls_kubernetes_class() {
    let root = default_root();
    let r = json_of(&wstune(&[
        "check",
        "--root",
        &root,
        "--profile",
        "1m",
        "-f",
        "json",
    ]));
    let retries = common::finding(&r, "linux.net.ipv4.tcp_retries2");
    assert_eq!(retries["advice"], true, "{retries}");
    // The machines keep the fix data of advice rows.
    assert_eq!(
        retries["fix"]["runtime"], "sudo sysctl -w net.ipv4.tcp_retries2=8",
        "{retries}"
    );
    let somaxconn = common::finding(&r, "linux.net.core.somaxconn");
    assert_eq!(somaxconn["advice"], false, "{somaxconn}");
    let class = |f: &serde_json::Value| f["kubernetes"][0]["class"].clone();
    assert_eq!(class(somaxconn), "unsafe", "{somaxconn}");
    assert_eq!(
        class(common::finding(&r, "linux.net.ipv4.tcp_fin_timeout")),
        "safe"
    );
    assert_eq!(
        class(common::finding(&r, "linux.net.core.netdev_max_backlog")),
        "node"
    );
    // A fix that names no sysctl has no class.
    let memory = common::finding(&r, "linux.host.memory");
    assert!(memory.get("kubernetes").is_none(), "{memory}");
}

#[test]
fn explain_says_advice_is_optional_and_names_the_kubernetes_class() {
    let out = stdout(&wstune(&["explain", "linux.net.ipv4.tcp_retries2"]));
    assert!(out.contains("\nAdvice, optional (an info check"), "{out}");
    assert!(
        out.contains("Kubernetes: net.ipv4.tcp_retries2 is namespaced but unsafe"),
        "{out}"
    );
    let out = stdout(&wstune(&["explain", "linux.net.core.somaxconn"]));
    assert!(out.contains("\nFix (a report fills in"), "{out}");
    let e = json_of(&wstune(&[
        "explain",
        "linux.net.ipv4.tcp_fin_timeout",
        "-f",
        "json",
    ]));
    assert_eq!(e["advice"], false, "{e}");
    assert_eq!(e["kubernetes"][0]["key"], "net.ipv4.tcp_fin_timeout", "{e}");
    assert_eq!(e["kubernetes"][0]["class"], "safe", "{e}");
    let e = json_of(&wstune(&[
        "explain",
        "linux.proc.sys_writable",
        "-f",
        "json",
    ]));
    assert!(
        e["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("--allowed-unsafe-sysctls"),
        "{e}"
    );
}
