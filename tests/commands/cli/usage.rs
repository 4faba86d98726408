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
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/base.yaml"))
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

/// wstune with `args` at 100 columns, the environment's colour variables cleared and `env` set.
fn wstune_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.args(args)
        .env("COLUMNS", "100")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The commands a `-h` lists under "Commands:" (clap's `help` left out).
fn commands_of(path: &[&str]) -> Vec<Vec<String>> {
    let mut args: Vec<&str> = path.to_vec();
    args.push("-h");
    let help = stdout(&wstune_env(&args, &[]));
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(|n| {
            let mut p: Vec<String> = path.iter().map(|s| s.to_string()).collect();
            p.push(n.to_string());
            p
        })
        .collect()
}

/// Every command wstune has, nested ones too, as argv after `wstune`.
fn every_command() -> Vec<Vec<String>> {
    let mut all = vec![vec![]];
    let mut i = 0;
    while i < all.len() {
        let p: Vec<&str> = all[i].iter().map(String::as_str).collect();
        all.extend(commands_of(&p));
        i += 1;
    }
    assert!(all.len() > 15, "{all:?}");
    all
}

/// The options a `--help` lists: clap's flag lines, `  -p, --profile` or `      --pid`.
fn option_lines(help: &str) -> usize {
    help.lines()
        .filter(|l| l.starts_with("      --") || (l.starts_with("  -") && l.get(4..5) == Some(",")))
        .count()
}

/// `-h` is a screen: at most 50 lines at 100 columns, none wider, ending with examples and,
/// for a command without subcommands, how many options `--help` lists (the true count).
#[test]
fn short_help_is_one_screen_with_examples() {
    for path in every_command() {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let short = stdout(&wstune_env(&[&p[..], &["-h"]].concat(), &[]));
        let name = format!("wstune {}", p.join(" "));
        let lines = short.lines().count();
        assert!(lines <= 50, "`{name} -h` is {lines} lines:\n{short}");
        for l in short.lines() {
            assert!(l.chars().count() <= 100, "`{name} -h` line too wide: {l}");
        }
        assert!(short.contains("\nExamples:\n  # "), "`{name} -h`:\n{short}");
        let long = stdout(&wstune_env(&[&p[..], &["--help"]].concat(), &[]));
        assert!(long.contains("\nExamples:\n  # "), "`{name} --help`");
        if commands_of(&p).is_empty() {
            let n = option_lines(&long);
            assert!(
                short.contains(&format!("Run `{name} --help` for all {n} options")),
                "`{name} -h` does not say {n} options:\n{short}"
            );
        }
    }
}

/// `serve --help` is still the whole reference: the flags `-h` leaves out are there.
#[test]
fn serve_long_help_keeps_every_flag_that_short_help_leaves_out() {
    let short = stdout(&wstune_env(&["serve", "-h"], &[]));
    let long = stdout(&wstune_env(&["serve", "--help"], &[]));
    for flag in [
        "--coalesce-us",
        "--max-conns-per-ip",
        "--history-size",
        "--tls-resumption",
        "--drain-over",
        "--cluster",
        "--color",
    ] {
        assert!(!short.contains(flag), "{flag} in serve -h");
        assert!(long.contains(flag), "{flag} not in serve --help");
    }
    for flag in ["--profile", "--port", "--app", "--admin", "--self-test"] {
        assert!(short.contains(flag), "{flag} not in serve -h");
    }
    assert!(option_lines(&long) > 80, "{long}");
}

/// The top-level help sends people to the installed manual, not to files of the repository.
#[test]
fn top_level_help_points_at_the_manual_not_the_repository() {
    for flag in ["-h", "--help"] {
        let help = stdout(&wstune_env(&[flag], &[]));
        assert!(
            !help.contains("README") && !help.contains("docs/"),
            "{help}"
        );
        assert!(help.contains("man wstune-"), "{help}");
    }
}

/// Each man page has an EXAMPLES section and no SEE ALSO or SUBCOMMANDS entry for a
/// `wstune-help` page, which is not written; `man` renders the examples.
#[test]
fn man_pages_have_examples_and_name_only_pages_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::run(&["man", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut pages = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let roff = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(roff.contains("\n.SH EXAMPLES\n"), "{name}: no EXAMPLES");
        assert!(!roff.contains("help("), "{name} names a help page:\n{roff}");
        for linked in roff.split("\\fB").skip(1) {
            if let Some((page, _)) = linked.split_once("\\fR(1)") {
                let file = format!("{}.1", page.replace("\\-", "-"));
                assert!(dir.path().join(&file).exists(), "{name} links {file}");
            }
        }
        pages += 1;
    }
    assert!(pages > 15, "{pages} pages");
    if Command::new("man").arg("--version").output().is_err() {
        return common::skip("man", "man is not installed (apt-get install man-db)");
    }
    let o = Command::new("man")
        .arg("-l")
        .arg(dir.path().join("wstune-check.1"))
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(text.contains("EXAMPLES"), "{text}");
    assert!(text.contains("wstune check -p 1m --show all"), "{text}");
}

/// `--color always` colours a check piped to another program, `never` and NO_COLOR do not;
/// the flag outranks the environment, and CLICOLOR_FORCE colours a pipe.
#[test]
fn color_flag_and_environment_decide_colour_in_one_way() {
    let root = fixture("default");
    let root = root.to_str().unwrap();
    let coloured = |args: &[&str], env: &[(&str, &str)]| {
        let o = wstune_env(&[&["check", "--root", root][..], args].concat(), env);
        assert!(matches!(code(&o), 0..=2), "{args:?}: {}", stderr(&o));
        stdout(&o).contains("\x1b[")
    };
    assert!(
        coloured(&["--color", "always"], &[]),
        "--color always, piped"
    );
    assert!(
        coloured(&["--color=always"], &[("NO_COLOR", "1")]),
        "the flag over NO_COLOR"
    );
    assert!(!coloured(&[], &[]), "auto, piped");
    assert!(
        !coloured(&["--color", "never"], &[("CLICOLOR_FORCE", "1")]),
        "never"
    );
    assert!(coloured(&[], &[("CLICOLOR_FORCE", "1")]), "CLICOLOR_FORCE");
    assert!(
        !coloured(&[], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]),
        "NO_COLOR first"
    );
    // Never in a file, whatever --color says.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.txt");
    coloured(&["--color", "always", "-o", out.to_str().unwrap()], &[]);
    assert!(!std::fs::read_to_string(&out).unwrap().contains("\x1b["));
    // clap's own output follows it too: an error's styled `error:`, a help's headings.
    let o = wstune_env(&["--color", "always", "check", "--bogus"], &[]);
    assert!(stderr(&o).contains("\x1b["), "{}", stderr(&o));
    let o = wstune_env(
        &["check", "--bogus", "--color", "never"],
        &[("CLICOLOR_FORCE", "1")],
    );
    assert!(!stderr(&o).contains("\x1b["), "{}", stderr(&o));
    let o = wstune_env(&["check", "-h", "--color", "always"], &[]);
    assert!(stdout(&o).contains("\x1b["));
    let o = wstune_env(&["check", "-h"], &[]);
    assert!(!stdout(&o).contains("\x1b["));
    let o = wstune_env(&["check", "--color", "sometimes"], &[]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("invalid value 'sometimes'"),
        "{}",
        stderr(&o)
    );
}

/// A usage error clap finds and an error wstune finds start the same way, and keep their
/// exit code.
#[test]
fn usage_errors_and_wstune_errors_share_one_prefix() {
    let clap = wstune_env(&["check", "--strictt"], &[]);
    let ours = wstune_env(&["check", "--profile", "200k"], &[]);
    for o in [&clap, &ours] {
        assert_eq!(code(o), 3);
        assert!(stderr(o).starts_with("wstune: error: "), "{}", stderr(o));
    }
    assert!(stderr(&clap).contains("tip: "), "{}", stderr(&clap));
}

/// watch's full-screen view (a real terminal: tmux) is coloured by default, plain under
/// `--color never` and NO_COLOR, and coloured by `--color always` over NO_COLOR, as every
/// other output.
#[test]
fn watch_full_screen_view_follows_the_colour_choice() {
    if Command::new("tmux").arg("-V").output().is_err() {
        return common::skip("tmux", "tmux is not installed");
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tmux.sock");
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args(args)
            .output()
            .unwrap()
    };
    let pane = |session: &str, env: &str, flag: &str| -> String {
        let cmd = format!("env -u NO_COLOR {env} {} watch {flag}", bin());
        // Its server outlives the call: no pipe of ours may be left with it.
        let started = Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args([
                "-u",
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "120",
                "-y",
                "40",
                &cmd,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(started.success(), "tmux new-session");
        let mut text = String::new();
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            text = stdout(&tmux(&["capture-pane", "-e", "-p", "-t", session]));
            if text.contains("Kernel counters") {
                break;
            }
        }
        // q quits the view (a hang-up alone may leave it running).
        tmux(&["send-keys", "-t", session, "q"]);
        for _ in 0..50 {
            if !tmux(&["has-session", "-t", session]).status.success() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        tmux(&["kill-session", "-t", session]);
        text
    };
    // An SGR that sets a foreground colour: ESC [ 3x (or 9x) m, alone or after another code.
    let coloured = |t: &str| {
        t.split("\x1b[").skip(1).any(|sgr| {
            let codes = sgr.split('m').next().unwrap_or("");
            codes
                .split(';')
                .any(|c| c.len() == 2 && (c.starts_with('3') || c.starts_with('9')) && c != "39")
        })
    };
    let auto = pane("auto", "", "");
    let never = pane("never", "", "--color never");
    let no_color = pane("nocolor", "NO_COLOR=1", "");
    let always = pane("always", "NO_COLOR=1", "--color always");
    tmux(&["kill-server"]);
    for pane in [&auto, &never, &no_color, &always] {
        assert!(
            pane.contains("Kernel counters"),
            "the view did not start:\n{pane}"
        );
    }
    assert!(coloured(&auto), "no colour by default:\n{auto}");
    assert!(!coloured(&never), "--color never:\n{never}");
    assert!(!coloured(&no_color), "NO_COLOR:\n{no_color}");
    assert!(coloured(&always), "--color always over NO_COLOR:\n{always}");
}
