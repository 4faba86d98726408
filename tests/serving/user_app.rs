//! The self-test and the pool measurement run the user's own server (`--command`): the
//! `offload_db` example (a handler that blocks 20 ms per request on the offload pool), started
//! by the real `wstune` binary with the profile's tuning in its environment, load-tested on
//! 127.0.0.1, and stopped with its process group; and programs that never become a server.

use crate::common;

use common::{code, fixture, json_of, run, stderr, Script};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// An example of the embedded-server crate, built by cargo next to this test's wstune
/// (`cargo test --workspace` builds them; `cargo build -p embedded-server --examples` alone).
fn example(name: &str) -> Option<PathBuf> {
    let p = Path::new(common::bin())
        .parent()
        .expect("target/debug")
        .join("examples")
        .join(name);
    if p.exists() {
        Some(p)
    } else {
        common::skip(
            "user_app",
            &format!(
                "{} is not built: run `cargo build -p embedded-server --examples` (cargo test \
                 --workspace builds it)",
                p.display()
            ),
        );
        None
    }
}

/// The 10k profile held to 40 connections at 2 msgs/s each, with a pool of 16 threads (the
/// example blocks 20 ms per request: 800 requests/s, ten times the load) and a p99 target of
/// 1 s: what the test proves is that the user's server runs under the tuning, not how fast.
fn small_profile(dir: &Path) -> PathBuf {
    let text = "extends: 10k\nname: tiny\nconnections: 40\nserver:\n  offload_pool_size: 16\nselftest:\n  rate_per_client: 2\n  p99_ms: 1000\n";
    let p = dir.join("tiny.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Processes whose command line holds `marker` (Linux /proc; its arguments are separated by
/// NULs, so "sleep\0SECS" matches the program and not a command line that quotes it).
fn running_with(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn the_self_test_runs_the_users_server_under_the_profile_and_names_it() {
    let Some(db) = example("offload_db") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let profile = small_profile(dir.path());
    let command = format!("{} --port 1", db.display());
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        profile.to_str().unwrap(),
        "--host-root",
        fixture("tuned").to_str().unwrap(),
        "--command",
        &command,
        "--message",
        "get user:1",
        "--secs",
        "1",
        // Judged as measured: this is about the user's server, and the test suite's other
        // tests keep the host busy.
        "--accept-noise",
        "--format",
        "json",
    ]);
    let r = json_of(&o);
    assert_eq!(code(&o), 0, "a pass: {r:#}\n{}", stderr(&o));
    assert_eq!(r["verdict"]["pass"], true, "{r:#}");
    // The report names the program (as given: its own --port is overridden by wstune's).
    assert_eq!(r["program"], command.as_str(), "{r:#}");
    assert!(
        r["skipped"][0].as_str().unwrap().starts_with("broadcast:"),
        "{r:#}"
    );
    let names: Vec<&str> = r["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["idle", "echo-rate", "deflate", "echo-sat", "storm"]);
    for s in r["scenarios"].as_array().unwrap() {
        let name = s["scenario"].as_str().unwrap();
        assert_eq!(s["conns_connected"], 40, "{name}: {s:#}");
        assert_eq!(s["errors"], 0, "{name}: {s:#}");
        assert!(
            s["server"]["rss_after_bytes"].as_u64().unwrap_or(0) > 0,
            "{name}: the program's memory is sampled by its pid: {s:#}"
        );
    }
    // Every answer is the example's, from the offload pool: at least its 20 ms query.
    let echo = common::element(&r["scenarios"], "scenario", "echo-rate");
    assert!(echo["received"].as_u64().unwrap() > 0, "{echo:#}");
    assert!(
        echo["latency_ms"]["p50"].as_f64().unwrap() >= 19.0,
        "replies wait for the blocking lookup: {echo:#}"
    );
    let table = stderr(&o);
    assert!(
        table.contains("[offload_db] listening on ws://127.0.0.1:"),
        "its output is passed on, prefixed: {table}"
    );
}

#[test]
fn pool_measure_reads_the_users_offloaded_work_from_its_metrics() {
    let Some(db) = example("offload_db") else {
        return;
    };
    let o = run(&[
        "pool",
        "--measure",
        "--command",
        db.to_str().unwrap(),
        "--message",
        "get user:2",
        "--cores",
        "2",
        "--conns",
        "8",
        "--secs",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r = json_of(&o);
    let m = &r["measured"];
    // The example sleeps 20 ms per query and does a few microseconds of JSON: the blocking
    // time is the sleep (the kernel wakes a sleeper late by up to a few ms on a busy 2-core
    // CI machine; waiting for a core is measured apart and taken out), the CPU time is tiny.
    let blocking = m["blocking_ms"].as_f64().unwrap();
    let cpu = m["cpu_ms"].as_f64().unwrap();
    assert!((19.0..30.0).contains(&blocking), "{m:#}");
    assert!(cpu < 2.0, "{m:#}");
    assert!(m["jobs"].as_u64().unwrap() >= 50, "{m:#}");
    // 2 cores, ratio ~ 20 / cpu: the formula's pool is far above the cores.
    assert!(r["advice"]["pool_size"].as_u64().unwrap() > 8, "{r:#}");
    // The echo is refused with the reason: nothing offloaded without the request.
    let o = run(&[
        "pool",
        "--measure",
        "--command",
        db.to_str().unwrap(),
        "--conns",
        "2",
        "--secs",
        "1",
    ]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("offloaded no work during the run"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn pool_sweep_restarts_the_users_server_at_each_size() {
    let Some(db) = example("offload_db") else {
        return;
    };
    let o = run(&[
        "pool",
        "--sweep",
        "--command",
        db.to_str().unwrap(),
        "--message",
        "get user:3",
        "--sizes",
        "1,4",
        "--cores",
        "1",
        "--conns",
        "8",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r = json_of(&o);
    let points = r["sweep"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{r:#}");
    let (one, four) = (
        points[0]["throughput"].as_f64().unwrap(),
        points[1]["throughput"].as_f64().unwrap(),
    );
    // One thread does at most 50 lookups of 20 ms a second; four, 200: the program really ran
    // with each size (a fixed pool would give the same figure twice).
    assert!(one <= 55.0, "{r:#}");
    assert!(four > 2.0 * one, "{r:#}");
    // A fresh program per step (the measurement, then one per size), each stopped.
    let starts = stderr(&o).matches("[offload_db] listening on").count();
    assert_eq!(starts, 3, "{}", stderr(&o));
}

#[test]
fn a_program_that_exits_or_never_listens_is_a_clear_error_and_nothing_is_left_running() {
    // Exits at once, saying why.
    let o = run(&[
        "serve",
        "--self-test",
        "--command",
        "sh -c 'echo cannot open the database >&2; exit 7'",
        "--conns",
        "5",
    ]);
    let e = stderr(&o);
    assert_eq!(code(&o), 3, "{e}");
    assert!(e.contains("`sh -c"), "names the program: {e}");
    assert!(
        e.contains("exited (exit status: 7) before it listened"),
        "{e}"
    );
    assert!(e.contains("| cannot open the database"), "its output: {e}");
    assert!(e.contains("WSTUNE_LISTEN"), "says what it must do: {e}");

    // Never listens: stopped at the (shortened) budget, with everything it started.
    let marker = format!("987.{}", std::process::id());
    let o = Command::new(common::bin())
        .args([
            "pool",
            "--measure",
            "--command",
            &format!("sh -c 'sleep {marker} & sleep {marker}'"),
            "--conns",
            "2",
        ])
        .env("WSTUNE_COMMAND_START_SECS", "2")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(code(&o), 3, "{e}");
    assert!(e.contains("did not listen on 127.0.0.1:"), "{e}");
    assert!(e.contains("within 2 s"), "{e}");
    assert!(e.contains("WSTUNE_ADMIN"), "pool also needs /metrics: {e}");
    common::wait_until(
        "the program's process group is gone",
        Duration::from_secs(5),
        || running_with(&format!("sleep\0{marker}")).is_empty(),
    );

    // Not a program at all.
    let o = run(&["pool", "--measure", "--command", "/nonexistent/server"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("cannot start `/nonexistent/server`"),
        "{}",
        stderr(&o)
    );
    let o = run(&["pool", "--measure", "--command", "srv 'open"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("unbalanced quotes"), "{}", stderr(&o));
}

#[test]
fn ctrl_c_stops_the_users_server_with_the_run() {
    let Some(db) = example("offload_db") else {
        return;
    };
    let port = (40000 + std::process::id() % 20000).to_string();
    let marker = format!("--port\0{port}");
    let mut child = common::Kill(
        Command::new(common::bin())
            .args([
                "serve",
                "--self-test",
                "--command",
                &format!("{} --port {port}", db.display()),
                "--message",
                "get user:1",
                "--conns",
                "4",
                "--secs",
                "30",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_until("the program runs", Duration::from_secs(30), || {
        !running_with(&marker).is_empty()
    });
    // Ctrl-C as a terminal sends it (to wstune; the program is in its own process group).
    let sent = Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = common::wait_exit(&mut child.0, Duration::from_secs(20), "wstune after Ctrl-C");
    assert_eq!(status.code(), Some(3));
    common::wait_until("the program is gone", Duration::from_secs(5), || {
        running_with(&marker).is_empty()
    });
}

#[test]
fn flags_that_do_not_apply_to_a_users_server_are_refused() {
    for (args, says) in [
        (&["--handler", "block:20"][..], "drop --handler"),
        (&["--processes", "2"][..], "drop --processes"),
    ] {
        let o = run(&[&["serve", "--self-test", "--command", "./srv"], args].concat());
        assert_eq!(code(&o), 3, "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
    }
    // --command belongs to the self-test.
    let o = run(&["serve", "--command", "./srv"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
}

/// A program whose output is not UTF-8 (a binary banner, a Latin-1 log line) is still a server:
/// its output is passed on lossily and the pipe stays open, so it neither dies of SIGPIPE nor
/// loses its messages.
#[test]
fn output_that_is_not_utf8_does_not_kill_the_users_server() {
    let Some(echo) = example("echo") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wrapper = Script::sh()
        .line(r"printf 'caf\351 ouvert\n'")
        .line("printf 'no newline at the end'")
        .line(format!("exec {} 2>&1", echo.display()))
        .write(dir.path(), "latin1-banner.sh");
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        small_profile(dir.path()).to_str().unwrap(),
        "--host-root",
        fixture("tuned").to_str().unwrap(),
        "--command",
        wrapper.to_str().unwrap(),
        "--secs",
        "1",
        "--accept-noise",
        "--format",
        "json",
    ]);
    let r = json_of(&o);
    let e = stderr(&o);
    assert_eq!(code(&o), 0, "a pass: {r:#}\n{e}");
    assert!(
        e.contains("[latin1-banner.sh] caf\u{FFFD} ouvert"),
        "shown lossily: {e}"
    );
    assert!(
        e.contains("listening on ws://"),
        "the exec'd server's own output: {e}"
    );
}

/// The process group of `pid` (Linux /proc/PID/stat's fifth field; the second may hold spaces).
fn pgrp_of(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(2)?.parse().ok()
}

/// Live processes (zombies are dead: their parent reaps them) in process group `group`.
fn in_group(group: i64) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .is_some_and(|i| stat[i + 2..].starts_with('Z'));
            !zombie && pgrp_of(pid) == Some(group)
        })
        .collect()
}

/// wstune killed outright (SIGKILL: no handler runs) takes the user's server with it, with
/// everything the server started and a program that ignores SIGTERM.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_wstune_leaves_nothing_of_the_users_server_running() {
    let Some(echo) = example("echo") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wrapper = Script::sh()
        .line("trap '' TERM")
        .line(format!("{} &", echo.display()))
        .line("wait")
        .line("wait")
        .write(dir.path(), "stubborn-wrapper.sh");
    let mut child = common::Kill(
        Command::new(common::bin())
            .args([
                "serve",
                "--self-test",
                "--command",
                wrapper.to_str().unwrap(),
                "--conns",
                "4",
                "--secs",
                "30",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The shell running the wrapper (wstune's own command line names it after --command).
    let marker = format!("sh\0{}", wrapper.display());
    let mut group = None;
    common::wait_until(
        "the program runs with its child",
        Duration::from_secs(30),
        || {
            group = running_with(&marker).first().and_then(|&p| pgrp_of(p));
            group.is_some_and(|g| in_group(g).len() >= 3)
        },
    );
    let group = group.unwrap();
    child.0.kill().unwrap();
    let _ = child.0.wait();
    common::wait_until(
        "nothing of the program's process group is left",
        Duration::from_secs(10),
        || in_group(group).is_empty(),
    );
}

/// The generators close their connections with 1000 (Normal Closure) after their results
/// instead of being killed with them, and so does the probe before the load: a server's close
/// counters see a clean end of a run.
#[test]
fn the_self_tests_connections_close_cleanly_after_the_run() {
    let s = common::serve(&["--profile", "10k"]);
    let o = run(&[
        "selftest",
        "--url",
        &s.url(),
        "--profile",
        "10k",
        "--conns",
        "20",
        "--rate",
        "10",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    // Exit 2 is a missed p99 target on a busy machine, 4 a window too noisy to judge (steal
    // on a shared VM): neither is what this test is about.
    assert!(matches!(o.status.code(), Some(0 | 2 | 4)), "{o:?}");
    // The probe's two connections before the load close cleanly too.
    let clean = s.wait_metric(
        "ws_closes_received_total{code=\"1000\"}",
        Duration::from_secs(10),
        |v| v >= 22.0,
    );
    // 20 per run: a window the noise check measures again opens another 20, closed as cleanly.
    assert!(
        clean >= 22.0 && (clean - 2.0) % 20.0 == 0.0,
        "{clean} clean closes"
    );
}

/// `pool --measure --command` exempts its own load from the profile's abuse limits (as the
/// self-test does): a per-address cap of 10 does not refuse its 30 connections from 127.0.0.1,
/// and the load runs whole (a partial one is an error, not advice).
#[test]
fn pool_measure_exempts_its_load_from_the_profiles_limits() {
    let Some(db) = example("offload_db") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let text = "extends: 10k\nname: 10k\nserver:\n  limits:\n    max_connections_per_ip: 10\n";
    assert!(text.contains("\n  limits:\n    max_connections_per_ip: 10"));
    let profile = dir.path().join("capped.yaml");
    std::fs::write(&profile, text).unwrap();
    let o = run(&[
        "pool",
        "--measure",
        "--profile",
        profile.to_str().unwrap(),
        "--command",
        db.to_str().unwrap(),
        "--message",
        "get user:2",
        "--cores",
        "2",
        "--conns",
        "30",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r = json_of(&o);
    assert!(r["measured"]["jobs"].as_u64().unwrap() > 0, "{r:#}");
}

/// A program that dies during the load is an error naming its end, not a pool size advised
/// from half a run.
#[test]
fn pool_notices_the_users_server_dying_mid_run() {
    let Some(db) = example("offload_db") else {
        return;
    };
    let command = format!("timeout -s KILL 2 {}", db.display());
    for mode in [&["--measure"][..], &["--sweep", "--sizes", "2"][..]] {
        let mut args = vec!["pool"];
        args.extend_from_slice(mode);
        args.extend_from_slice(&[
            "--command",
            &command,
            "--message",
            "get user:2",
            "--conns",
            "4",
            "--secs",
            "4",
        ]);
        let o = run(&args);
        let e = stderr(&o);
        assert_eq!(code(&o), 3, "{mode:?}: {e}");
        assert!(
            e.contains("the server died during the run"),
            "{mode:?}: {e}"
        );
    }
}
