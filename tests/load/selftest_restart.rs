//! The restart scenario end to end: `serve --self-test --scenario restart` restarting the
//! server it started, and `selftest --scenario restart --restart-cmd` restarting a server
//! started on its own; every client must come back, and the report must say how.

use crate::common;

use common::{bin, json_of, run, serve};
use serde_json::Value;

/// The restart scenario's report, after the checks every run of it must pass: one scenario,
/// every connection closed by the restart and back, the counts and figures present.
fn restart_report(v: &Value, conns: u64) -> &Value {
    let s = &v["scenarios"][0];
    assert_eq!(s["scenario"], "restart", "{v:#}");
    assert_eq!(
        s["conns_connected"], conns,
        "every connection held first: {s:#}"
    );
    let r = &s["restart"];
    assert_eq!(
        r["closed"], conns,
        "the restart closed every connection: {r:#}"
    );
    assert_eq!(r["not_back"], 0, "every client came back: {r:#}");
    assert_eq!(r["back"], conns, "{r:#}");
    assert!(r["attempts"].as_u64().unwrap() >= conns, "{r:#}");
    // Refused attempts are counted by kind (none may be a fine answer): their sum matches.
    let by_kind: u64 = r["refused"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(r["refused_total"].as_u64().unwrap(), by_kind, "{r:#}");
    assert_eq!(
        r["attempts"].as_u64().unwrap(),
        conns + by_kind,
        "each client's attempts are its refusals and its one success: {r:#}"
    );
    let back = &r["back_ms"];
    assert_eq!(
        back["count"], conns,
        "one close-to-upgrade time per client: {back:#}"
    );
    let p99 = back["p99"].as_f64().unwrap();
    assert!(
        p99 > 0.0 && p99 <= back["max"].as_f64().unwrap(),
        "{back:#}"
    );
    // The scenario's latency is the same distribution, kept as a histogram for merging.
    assert_eq!(s["latency_ms"]["p99"], back["p99"]);
    assert!(s["histograms"]["latency"]
        .as_str()
        .is_some_and(|h| !h.is_empty()));
    let all_back = r["all_back_secs"].as_f64().expect("all back");
    assert!(all_back > 0.0 && all_back < 60.0, "{r:#}");
    assert!(r["peak_accept_rate"].as_f64().unwrap() >= 1.0, "{r:#}");
    assert!(
        r["kernel"]["listen_overflows"].is_u64(),
        "a loopback server's listen counters are read: {r:#}"
    );
    let checks = v["verdict"]["checks"].as_array().unwrap();
    for what in ["server restarted", "every client back"] {
        let c = checks
            .iter()
            .find(|c| c["what"] == what)
            .unwrap_or_else(|| panic!("no check '{what}': {checks:#?}"));
        assert_eq!(c["ok"], true, "{c:#}");
    }
    r
}

/// `serve --self-test` restarts its own in-process server (the default, sigterm): every one
/// of 2,000 clients is closed with 1012 and comes back; a threshold on the back p99 judges
/// both ways (a generous one holds, an impossible one misses and fails the load).
#[test]
fn serve_self_test_restarts_its_server_and_every_client_comes_back() {
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--scenario",
        "restart",
        "--conns",
        "2000",
        "--secs",
        "3",
        "--format",
        "json",
        "--threshold",
        "restart.back_p99 < 30s",
        "--threshold",
        "restart.back.p99 < 1us",
        "--threshold",
        "restart.refused <= 100000",
    ]);
    let v = json_of(&o);
    let r = restart_report(&v, 2000);
    assert_eq!(r["restart_by"], "sigterm", "{r:#}");
    let codes = &v["scenarios"][0]["close_codes"];
    assert_eq!(
        codes["1012"], 2000,
        "the old server's service-restart closes: {codes:#}"
    );
    let checks = v["verdict"]["checks"].as_array().unwrap();
    let threshold = |t: &str| {
        checks
            .iter()
            .find(|c| c["what"] == t)
            .unwrap_or_else(|| panic!("no check '{t}': {checks:#?}"))
    };
    let held = threshold("restart.back_p99 < 30s");
    assert_eq!(
        (held["ok"].as_bool(), held["judged"].as_bool()),
        (Some(true), Some(true))
    );
    let missed = threshold("restart.back.p99 < 1us");
    assert_eq!(
        (missed["ok"].as_bool(), missed["judged"].as_bool()),
        (Some(false), Some(true))
    );
    assert_eq!(threshold("restart.refused <= 100000")["ok"], true);
    assert_eq!(
        v["verdict"]["load_pass"], false,
        "a missed threshold fails the load"
    );
    assert_eq!(o.status.code(), Some(2), "{v:#}");
    // The table says the same in words.
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--scenario",
        "restart",
        "--conns",
        "50",
        "--secs",
        "1",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    for words in [
        "restart by sigterm",
        "codes 1012 x50",
        "refused ",
        "all back after",
    ] {
        assert!(out.contains(words), "'{words}' missing: {out}");
    }
}

/// restart is never in the default list (it disrupts), and its flags are refused where they
/// cannot act, naming the fix.
#[test]
fn restart_runs_only_when_asked_and_its_flags_say_how() {
    let url = "ws://127.0.0.1:9/";
    let o = run(&["selftest", "--url", url, "--scenario", "restart"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--restart-cmd 'CMD' (e.g. 'systemctl"),
        "{err}"
    );
    let o = run(&["selftest", "--url", url, "--restart-cmd", "true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("add --scenario restart"), "{err}");
    let o = run(&[
        "selftest",
        "--url",
        url,
        "--scenario",
        "restart",
        "--restart-by",
        "sigterm",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("only `wstune serve --self-test`"), "{err}");
    let o = run(&["selftest", "--url", url, "--restart-by", "reboot"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("sigterm-child"), "{err}");
    let o = run(&[
        "selftest",
        "--url",
        url,
        "--scenario",
        "restart",
        "--drain-url",
        "https://x/api/drain",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("give an http:// URL"), "{err}");
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--conns",
        "100",
        "--scenario",
        "restart",
        "--restart-by",
        "sighup",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--processes 2"), "{err}");
    // A supervisor that does not catch SIGHUP would die of it: refused before the load.
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--conns",
        "100",
        "--processes",
        "2",
        "--scenario",
        "restart",
        "--restart-by",
        "sighup",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    if !err.contains("does not handle SIGHUP") {
        // A supervisor with rolling restarts on SIGHUP: the restart ran, and closed some.
        let v = json_of(&o);
        let r = &v["scenarios"][0]["restart"];
        assert_eq!(r["restart_by"], "sighup", "{err}\n{v:#}");
        assert!(r["closed"].as_u64().unwrap() > 0, "{r:#}");
    }
}

/// The second server the restart command starts, killed when the test ends.
struct PidFile(std::path::PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", pid.trim()])
                .status();
        }
    }
}

/// `selftest --scenario restart --restart-cmd` against a server it did not start: the command
/// stops it (SIGTERM, waiting for it to exit, as a service manager does: here until it is a
/// zombie, the test being its parent) and starts another
/// on the same port; every client comes back to the new one.
#[test]
fn selftest_restart_cmd_restarts_a_separate_server() {
    let srv = serve(&["--profile", "10k"]);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = PidFile(dir.path().join("new.pid"));
    let cmd = format!(
        "kill -TERM {old}; while [ -e /proc/{old} ] && ! grep -q '^State:[[:space:]]*Z' \
         /proc/{old}/status; do sleep 0.05; done; \
         {bin} serve --profile 10k --port {port} --admin off >/dev/null 2>&1 & echo $! > {pids}",
        old = srv.pid(),
        bin = bin(),
        port = srv.port,
        pids = pidfile.0.display()
    );
    let o = run(&[
        "selftest",
        "--url",
        &srv.url(),
        "--profile",
        "10k",
        "--scenario",
        "restart",
        "--restart-cmd",
        &cmd,
        "--conns",
        "500",
        "--secs",
        "3",
        "--format",
        "json",
        "--threshold",
        "restart.back_p99 < 30s",
        "--threshold",
        "restart.not_back <= 0",
        // The refusals depend on how long the new server takes to start on a busy host: the
        // thresholds judge here, the profile's keys in the test above.
        "--no-default-checks",
    ]);
    let v = json_of(&o);
    let r = restart_report(&v, 500);
    assert!(
        r["restart_by"]
            .as_str()
            .unwrap()
            .starts_with("command: kill -TERM"),
        "{r:#}"
    );
    assert_eq!(
        v["scenarios"][0]["close_codes"]["1012"], 500,
        "the old server closed them for a restart: {v:#}"
    );
    assert!(
        std::fs::read_to_string(&pidfile.0).is_ok(),
        "the command started a server"
    );
    assert_eq!(o.status.code(), Some(0), "{v:#}");
}

fn supervised_restart(by: Option<&str>) -> (Value, Value) {
    let mut args = vec![
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--processes",
        "2",
        "--scenario",
        "restart",
        "--conns",
        "600",
        "--secs",
        "3",
        "--format",
        "json",
    ];
    if let Some(by) = by {
        args.extend(["--restart-by", by]);
    }
    let o = run(&args);
    let v = json_of(&o);
    let s = v["scenarios"][0].clone();
    assert!(s["incomplete"].is_null(), "{s:#}");
    (v, s)
}

/// `--processes 2`: the default trigger is a rolling restart (SIGHUP to the supervisor): every
/// process is replaced, so every client is closed (with 1012) at least once, and every one
/// comes back without a refused attempt: the listening sockets outlive the processes, and each
/// replaced process drains alone. The window grew by the roll's length.
#[test]
fn serve_self_test_with_a_supervisor_rolls_every_server_process() {
    let (v, s) = supervised_restart(None);
    let r = &s["restart"];
    assert_eq!(r["restart_by"], "sighup", "{v:#}");
    let closed = r["closed"].as_u64().unwrap();
    assert!(closed >= 600, "every process replaced: {r:#}");
    assert_eq!(s["close_codes"]["1012"], closed, "{s:#}");
    assert_eq!(r["not_back"], 0, "{r:#}");
    assert_eq!(r["refused_total"], 0, "{r:#}");
}

/// `--restart-by sigterm-child`: SIGTERM to one server process, which the supervisor replaces
/// once it exits; only that process's clients are closed, and they come back to a process
/// that accepts them (the other answers 503 at its share of the limit, counted as refused).
#[test]
fn serve_self_test_with_a_supervisor_restarts_one_server_process() {
    let (v, s) = supervised_restart(Some("sigterm-child"));
    let r = &s["restart"];
    assert_eq!(r["restart_by"], "sigterm-child", "{v:#}");
    assert!(
        r["disruption"]
            .as_str()
            .unwrap()
            .starts_with("SIGTERM to server process"),
        "{r:#}"
    );
    let closed = r["closed"].as_u64().unwrap();
    assert!(
        closed > 0 && closed < 600,
        "one of two processes' clients: {r:#}"
    );
    assert_eq!(s["close_codes"]["1012"], closed, "{s:#}");
    assert!(r["back"].as_u64().unwrap() > 0, "{r:#}");
    assert_eq!(
        r["back"].as_u64().unwrap() + r["not_back"].as_u64().unwrap(),
        closed,
        "{r:#}"
    );
}
