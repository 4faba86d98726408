//! `wstune selftest` and `serve --self-test`: the real binary, real sockets on 127.0.0.1, the
//! generator's own worker processes.

use crate::common;

use common::{bin, json_of, run, serve};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[test]
fn serve_self_test_runs_every_scenario_and_reports_them() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let prom = dir.path().join("selftest.prom");
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--conns",
        "200",
        "--secs",
        "2",
        "--rounds",
        "3",
        "--format",
        "json",
        "--report",
        html.to_str().unwrap(),
        "--out-prometheus",
        prom.to_str().unwrap(),
    ]);
    let r = json_of(&o);
    let code = o.status.code().unwrap();
    let pass = r["verdict"]["pass"].as_bool().unwrap();
    let noisy = r["verdict"]["inconclusive"].as_bool().unwrap();
    assert_eq!(
        code,
        match (pass, noisy) {
            (true, _) => 0,
            (false, true) => 4,
            (false, false) => 2,
        },
        "exit code follows the verdict: {r:#}"
    );
    assert_eq!(r["schema_version"], 1);
    assert_eq!(r["targets"]["p99_ms"], 5.0);
    assert!(
        r["host_check"]["profile"] == "10k",
        "check ran first: {r:#}"
    );
    let names: Vec<&str> = r["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "idle",
            "echo-rate",
            "deflate",
            "echo-sat",
            "storm",
            "broadcast"
        ]
    );
    for s in r["scenarios"].as_array().unwrap() {
        let name = s["scenario"].as_str().unwrap();
        assert_eq!(s["conns_connected"], 200, "{name}: {s:#}");
        assert_eq!(s["errors"], 0, "{name}: {s:#}");
        assert_eq!(s["disconnects"], 0, "{name}: {s:#}");
        assert!(s.get("incomplete").is_none(), "{name}: {s:#}");
        assert!(
            s["server"]["cpu_secs"].as_f64().is_some(),
            "{name}: server sampled"
        );
        assert!(s["generator"]["cpu_pct"].as_f64().is_some(), "{name}");
    }
    let by = |n: &str| common::element(&r["scenarios"], "scenario", n).clone();
    let echo = by("echo-rate");
    // 200 clients x 10 msgs/s (the profile's rate) for 2 s.
    assert_eq!(echo["offered_rate"], 2000.0);
    assert!(echo["achieved_rate"].as_f64().unwrap() > 1500.0, "{echo:#}");
    let l = &echo["latency_ms"];
    assert!(l["count"].as_u64().unwrap() >= 3500, "{l:#}");
    assert!(l["p50"].as_f64().unwrap() <= l["p99"].as_f64().unwrap());
    assert!(l["p99"].as_f64().unwrap() <= l["max"].as_f64().unwrap());
    assert!(!echo["timeline"].as_array().unwrap().is_empty());
    let idle = by("idle")["server"]["rss_per_conn_bytes"].as_f64().unwrap();
    assert!(
        idle > 0.0 && idle < 64.0 * 1024.0,
        "RSS per idle connection {idle}"
    );
    assert!(
        by("echo-sat")["echoes_per_server_cpu_sec"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(by("storm")["storm_secs"].as_f64().unwrap() > 0.0);
    assert_eq!(by("storm")["latency_ms"]["count"], 200);
    let b = by("broadcast");
    assert_eq!(b["received"], 600, "200 subscribers x 3 rounds: {b:#}");
    assert_eq!(b["broadcast_last_ms"]["count"], 3);
    // The budget row: both in-process servers' budgets, what the echoes held at most, and
    // no client closed over it by a well-behaved load.
    let mb = &r["memory_budget"];
    let limit = mb["limit_bytes"].as_u64().unwrap();
    assert!(
        limit >= 2 * (64 << 20),
        "two servers, 64 MiB floor each: {mb:#}"
    );
    let peak = mb["peak_bytes"].as_u64().unwrap();
    assert!(peak > 0 && peak < limit, "{mb:#}");
    assert_eq!(
        (mb["budget_closes"].as_u64(), mb["share_closes"].as_u64()),
        (Some(0), Some(0))
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("Latency by percentile"));
    assert!(page.contains("echo-sat"));
    // The verdict covers the host too, and 200 connections are no proof for 10k.
    assert!(
        page.contains("Covers the load and this host's settings (serve --self-test)"),
        "{page}"
    );
    let prom = std::fs::read_to_string(&prom).unwrap();
    let verdict = prom
        .lines()
        .find(|l| l.starts_with("wstune_selftest_verdict{"))
        .unwrap_or_else(|| panic!("no verdict: {prom}"));
    assert!(
        verdict.contains("scope=\"load_and_host\",full_size=\"false\""),
        "{verdict}"
    );
    assert!(
        prom.contains(&format!(
            "wstune_selftest_host_ready{{profile=\"10k\"}} {}\n",
            u8::from(r["verdict"]["host_pass"] == true)
        )),
        "{prom}"
    );
    assert_eq!(
        prom.lines()
            .filter(|l| l.starts_with("wstune_selftest_check{"))
            .count(),
        r["verdict"]["checks"].as_array().unwrap().len(),
        "a series per check"
    );
}

fn echo_rate(port: u16, extra: &[&str]) -> (Output, Value) {
    let url = format!("ws://127.0.0.1:{port}/");
    let mut args = vec![
        "selftest",
        "--url",
        &url,
        "--profile",
        "10k",
        "--conns",
        "20",
        "--rate",
        "5",
        "--secs",
        "3",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    let v = json_of(&o);
    (o, v)
}

/// Thresholds are the gate: all held is exit 0, one missed is 2 naming it, one whose figure
/// rests on too few samples is 4 (NOT PROVEN), never a pass on nothing. --no-default-checks
/// and --accept-noise keep the profile's 5 ms target and the shared cores out of it.
#[test]
fn thresholds_gate_the_exit_code_and_name_what_missed() {
    let srv = serve(&["--profile", "10k"]);
    let gate = |t: &[&str]| {
        let mut a = vec!["--no-default-checks", "--accept-noise"];
        for x in t {
            a.extend(["--threshold", x]);
        }
        echo_rate(srv.port, &a)
    };
    let (o, v) = gate(&[
        "echo-rate.p99 < 10s",
        "*.error_rate <= 1%",
        "*.delivered >= 99%",
    ]);
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    let checks = v["verdict"]["checks"].as_array().unwrap();
    let user: Vec<&Value> = checks.iter().filter(|c| c["threshold"] == true).collect();
    assert_eq!(user.len(), 3, "{checks:#?}");
    assert!(user.iter().all(|c| c["ok"] == true && c["judged"] == true));
    assert!(!checks.iter().any(|c| c["what"] == "p99 latency"));
    assert!(v["verdict"]["summary"]
        .as_str()
        .unwrap()
        .contains("3 of 3 threshold checks held"));

    let (o, v) = gate(&["echo-rate.p99 < 1us"]);
    assert_eq!(o.status.code(), Some(2), "{v:#}");
    let summary = v["verdict"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("MISS") && summary.contains("missed: echo-rate.p99 < 1us on echo-rate"),
        "{summary}"
    );

    // 20 x 5 msgs/s for 3 s is ~300 latencies: a p99.9 over them would be the maximum.
    let (o, v) = gate(&["echo-rate.p999 < 10s"]);
    assert_eq!(o.status.code(), Some(4), "{v:#}");
    let why = v["verdict"]["unmeasured"][0].as_str().unwrap();
    assert!(why.contains("too few for this statistic"), "{why}");
    // The table lists every threshold with its mark.
    let o = run(&[
        "selftest",
        "--url",
        &format!("ws://127.0.0.1:{}/", srv.port),
        "--conns",
        "20",
        "--rate",
        "5",
        "--secs",
        "2",
        "--accept-noise",
        "--no-default-checks",
        "--threshold",
        "echo-rate.p50 < 10s",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("ok   threshold echo-rate.p50 < 10s: "),
        "{out}"
    );
}

#[test]
fn a_stalled_server_shows_in_the_percentiles() {
    // Open loop: 20 clients x 5 msgs/s = 100 msgs/s offered. The stalled server handles 10
    // a second (one offload thread, 100 ms each), so messages queue and their latency, counted
    // from when each was due, grows through the run. A closed-loop generator would slow down
    // to the server's pace and report ~100 ms.
    let fast = serve(&["--profile", "10k"]);
    let (o, quick) = echo_rate(fast.port, &[]);
    drop(fast);
    // The baseline only needs to have run cleanly: other tests share the cores, so its p99 may
    // miss the profile's 5 ms target (exit 2) without meaning anything here.
    assert!(matches!(o.status.code(), Some(0 | 2)), "{quick:#}");
    let q = &quick["scenarios"][0];
    assert_eq!(q["errors"], 0, "{q:#}");
    assert!(q["achieved_rate"].as_f64().unwrap() > 90.0, "{q:#}");
    let quick_p99 = q["latency_ms"]["p99"].as_f64().unwrap();

    let slow = serve(&[
        "--profile",
        "10k",
        "--handler",
        "block:100",
        "--offload-pool",
        "1",
    ]);
    let started = Instant::now();
    let (o, stalled) = echo_rate(slow.port, &[]);
    drop(slow);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "bounded in time"
    );
    let s = &stalled["scenarios"][0];
    let p99 = s["latency_ms"]["p99"].as_f64().unwrap();
    assert!(
        p99 > 1000.0,
        "stalled p99 {p99} ms (quick run: {quick_p99} ms): {s:#}"
    );
    assert!(p99 > quick_p99 * 20.0);
    assert!(s["achieved_rate"].as_f64().unwrap() < 60.0, "{s:#}");
    assert!(
        s["lost"].as_u64().unwrap() > 100,
        "unanswered messages are counted: {s:#}"
    );
    // A miss (2); on a box busy with other tests the noise check may not let the latency be
    // judged at all (4, NOT PROVEN): never a pass either way.
    assert!(
        matches!(o.status.code(), Some(2 | 4)),
        "a miss: {:?}",
        o.status
    );
    assert_eq!(stalled["verdict"]["pass"], false);
}

#[test]
fn unreachable_and_non_websocket_servers_are_clear_errors() {
    let o = run(&[
        "selftest",
        "--url",
        "ws://127.0.0.1:1/",
        "--conns",
        "5",
        "--secs",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("no connection to ws://127.0.0.1:1/") && err.contains("refused"),
        "{err}"
    );

    // The admin endpoint speaks HTTP but not WebSocket.
    let srv = serve(&["--profile", "10k"]);
    let url = format!("ws://127.0.0.1:{}/metrics", srv.admin);
    let o = run(&["selftest", "--url", &url, "--conns", "5", "--secs", "1"]);
    drop(srv);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("instead of '101 Switching Protocols'"),
        "{err}"
    );
}

/// `wstune selftest --url URL --format json ARGS` running, its output piped, for a test that
/// acts on the run while it goes on.
fn selftest_in_background(url: &str, args: &[&str]) -> std::process::Child {
    Command::new(bin())
        .args(["selftest", "--url", url, "--format", "json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_server_that_goes_away_mid_run_gives_a_partial_report() {
    let srv = serve(&["--profile", "10k"]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let child = selftest_in_background(
        &url,
        &[
            "--conns",
            "50",
            "--secs",
            "4",
            // Every echo counts from the start, so a slow start cannot leave the
            // partial report empty.
            "--warmup",
            "0",
            "--scenario",
            "echo-rate",
            "--scenario",
            "echo-sat",
        ],
    );
    // Mid-run: every client connected and echoes flowing (the run lasts 4 s).
    srv.wait_metric("ws_connections", Duration::from_secs(30), |n| n >= 50.0);
    srv.wait_metric("ws_messages_in_total", Duration::from_secs(30), |n| {
        n >= 50.0
    });
    drop(srv);
    let started = Instant::now();
    let o = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "never a hang");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let r = json_of(&o);
    let s = &r["scenarios"][0];
    assert_eq!(s["scenario"], "echo-rate");
    assert!(
        s["disconnects"].as_u64().unwrap() + s["errors"].as_u64().unwrap() >= 50,
        "every connection lost: {s:#}"
    );
    assert!(
        s["latency_ms"]["count"].as_u64().unwrap() > 0,
        "what arrived before is kept"
    );
    // The next scenario could not start, and says why.
    assert!(
        err.contains("scenario echo-sat") && err.contains("no connection"),
        "{err}"
    );
    assert_eq!(r["verdict"]["pass"], false);
}

/// The generator processes a self-test started (its children running `selftest-worker`).
fn workers_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            let cmd = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmd).contains("selftest-worker") {
                out.push(c);
            }
        }
    }
    out
}

#[test]
fn a_generator_killed_mid_run_is_named_with_how_it_ended() {
    let srv = serve(&["--profile", "10k"]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let child = selftest_in_background(
        &url,
        &[
            "--conns",
            "40",
            "--secs",
            "6",
            "--generators",
            "2",
            "--scenario",
            "idle",
        ],
    );
    srv.wait_metric("ws_connections", Duration::from_secs(30), |n| n >= 40.0);
    // The server counts a connection before the generator process that opened it has told
    // the run so: a kill in between is one "before its connections were open" (exit 3), not
    // the mid-run death this test is about. A second is far past that report and well inside
    // the 6 s scenario.
    std::thread::sleep(Duration::from_secs(1));
    let deadline = Instant::now() + Duration::from_secs(20);
    let workers = loop {
        let w = workers_of(child.id());
        if w.len() == 2 || Instant::now() > deadline {
            break w;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(workers.len(), 2, "two generator processes");
    unsafe { libc::kill(workers[1] as i32, libc::SIGKILL) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let r = json_of(&o);
    let why = r["scenarios"][0]["incomplete"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains(" of 2 ended (signal: 9 (SIGKILL)) without a result"),
        "{why}"
    );
    assert_eq!(r["verdict"]["pass"], false);
}

#[test]
fn bad_input_and_low_limits_are_refused_before_anything_starts() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--url", "http://127.0.0.1:9/"],
            "not a ws:// or wss:// URL",
        ),
        (&["--url", "wss://127.0.0.1:9/"], "wss:// needs --ca FILE"),
        (
            &["--url", "ws://127.0.0.1:9/", "--ca", "/no/such/ca.pem"],
            "apply to a wss:// server",
        ),
        (&["--url", "ws://127.0.0.1:9/", "--rate=-1"], "--rate -1"),
        (&["--url", "ws://127.0.0.1:9/", "--size", "4"], "--size 4"),
        (&["--url", "ws://127.0.0.1:9/", "--secs", "0"], "--secs 0"),
        (&["--url", "ws://127.0.0.1:9/", "--conns", "0"], "--conns 0"),
        (
            &["--url", "ws://127.0.0.1:9/", "--pid", "999999999"],
            "--pid 999999999",
        ),
        (
            &["--url", "ws://127.0.0.1:9/", "--scenario", "nope"],
            "invalid value 'nope'",
        ),
        (
            &["--url", "ws://127.0.0.1:9/", "--rate", "x"],
            "invalid value 'x'",
        ),
        (
            &[
                "--url",
                "ws://127.0.0.1:9/",
                "--report",
                "/no/such/dir/r.html",
            ],
            "--report /no/such/dir/r.html: cannot create a file in /no/such/dir",
        ),
        (
            &[
                "--url",
                "ws://127.0.0.1:9/",
                "--threshold",
                "nosuch.p99 < 1ms",
            ],
            "unknown scenario 'nosuch'",
        ),
        (
            &[
                "--url",
                "ws://127.0.0.1:9/",
                "--threshold",
                "echo-rate.p99 < 5",
            ],
            "a duration needs its unit",
        ),
        (
            &[
                "--url",
                "ws://127.0.0.1:9/",
                "--scenario",
                "echo-rate",
                "--threshold",
                "broadcast.p99 < 1s",
            ],
            "scenario broadcast is not in this run (echo-rate); add --scenario broadcast",
        ),
        (
            &["--url", "ws://127.0.0.1:9/", "--no-default-checks"],
            "give at least one --threshold",
        ),
        (
            &["--url", "ws://127.0.0.1:9/", "--baseline", "/etc/hostname"],
            "--baseline /etc/hostname: not a self-test JSON report",
        ),
    ];
    for (args, want) in cases {
        let mut a = vec!["selftest"];
        a.extend_from_slice(args);
        let o = run(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want '{want}' in: {err}");
    }
    // A file limit too low for the connections asked for.
    let o = Command::new("prlimit")
        .args([
            "--nofile=100:100",
            bin(),
            "selftest",
            "--url",
            "ws://127.0.0.1:9/",
            "--conns",
            "5000",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("ulimit -n") && err.contains("generator processes"),
        "{err}"
    );
    // Server flags the self-test would ignore.
    let o = run(&["serve", "--self-test", "--app", "channels"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("wstune selftest --url"));
    // Load settings without a load test.
    let o = run(&["serve", "--conns", "10"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("add --self-test"));
}

/// A CPU hog beside the server: the self-test measures it, does not say PASS (or MISS), says
/// why, re-measures once, and exits 4. The hog is one busy shell loop, unpinned, so it gets a
/// core of its own on any host with two or more (half a core is the limit at most).
#[test]
fn a_cpu_hog_on_the_box_makes_the_verdict_not_proven() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let srv = serve(&["--profile", "10k"]);
    let mut hog = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let pid = srv.pid().to_string();
    let started = Instant::now();
    let o = run(&[
        "selftest",
        "--url",
        &url,
        "--pid",
        &pid,
        "--profile",
        "10k",
        "--scenario",
        "echo-rate",
        "--conns",
        "20",
        "--rate",
        "5",
        "--secs",
        "2",
        "--warmup",
        "0",
        "--format",
        "json",
    ]);
    let _ = hog.kill();
    let _ = hog.wait();
    assert!(started.elapsed() < Duration::from_secs(60), "bounded");
    let r = json_of(&o);
    let s = &r["scenarios"][0];
    let d = &s["disturbance"];
    assert_eq!(d["too_noisy"], true, "{s:#}");
    assert!(d["other_cpu_pct"].as_f64().unwrap() >= 50.0, "{d:#}");
    assert!(
        d["why"].as_str().unwrap().contains("other processes"),
        "{d:#}"
    );
    // Measured twice: the first (noisy) measurement is kept for the spread.
    assert_eq!(s["attempts"].as_array().map(|a| a.len()), Some(1), "{s:#}");
    let v = &r["verdict"];
    assert_eq!(v["pass"], false, "{v:#}");
    assert_eq!(v["too_noisy"], true, "{v:#}");
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("NOT PROVEN: load: NOT PROVEN"),
        "{v:#}"
    );
    assert_eq!(o.status.code(), Some(4), "{v:#}");
    // The generator's sends were measured too.
    assert!(s["arrivals"]["gap_cv"].as_f64().is_some(), "{s:#}");
}

/// A self-test against a server whose accept queue is too small (somaxconn 2 in a private
/// network namespace, the server stopped while the storm connects) reports the
/// overflow in the scenario's host timeline: the listener full, ListenOverflows moved, and the
/// somaxconn check with its fix, in the JSON report, on the HTML page and under the table.
#[test]
fn a_storm_against_a_too_small_backlog_shows_the_overflow_in_its_host_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let script = format!(
        r#"
DIR={d}
ip link set lo up
echo 2 > /proc/sys/net/core/somaxconn
"$WSTUNE" serve --port 9001 --admin off --profile 10k > "$DIR/serve.log" 2>&1 &
S=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/9001) 2>/dev/null && break; sleep 0.1; done
run() {{
    kill -STOP $S
    # The probe before the load gives up on a server that does not answer after 2 s; the
    # storm then meets the stopped server for 2.5 s more.
    (sleep 4.5; kill -CONT $S) &
    C=$!
    timeout 120 "$WSTUNE" selftest --url ws://127.0.0.1:9001/ --scenario storm --conns 20 \
        --profile 10k "$@"
    echo "rc=$?" >&2
    wait $C
}}
run --format json --report "$DIR/page.html" > "$DIR/report.json"
run --format table > "$DIR/table.txt"
kill -CONT $S; kill $S
"#
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let file = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap_or_default();
    let r: Value = serde_json::from_str(&file("report.json"))
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {err}\nserve: {}", file("serve.log")));
    let storm = common::element(&r["scenarios"], "scenario", "storm");
    let t = &storm["host_timeline"];
    assert!(t["frames"].as_u64().unwrap() >= 2, "{t:#}");
    let l = common::element(&t["listeners"], "local", "127.0.0.1:9001");
    assert_eq!(l["backlog"], 2, "{t:#}");
    assert!(l["full_s"].as_f64().unwrap() > 0.0, "never full: {t:#}");
    assert!(l["max_queue"].as_u64().unwrap() >= 2, "{t:#}");
    let overflows = common::element(&t["counters"], "name", "TcpExt.ListenOverflows");
    assert!(overflows["delta"].as_u64().unwrap() > 0, "{t:#}");
    let somaxconn = common::element(&t["advice"], "id", "linux.net.core.somaxconn");
    // The catalog's words, with the profile's target.
    assert!(
        somaxconn["fix"][0]
            .as_str()
            .unwrap()
            .starts_with("sudo sysctl -w net.core.somaxconn="),
        "{somaxconn:#}"
    );
    assert!(somaxconn["first_s"].as_f64().unwrap() > 0.0);
    common::element(&t["advice"], "id", "linux.counter.listen_overflows");

    let line = |text: &str| -> String {
        text.lines()
            .find(|l| l.contains("accept queue of 127.0.0.1:9001 full for"))
            .unwrap_or_else(|| panic!("no host timeline line in:\n{text}\n{err}"))
            .to_string()
    };
    let html = line(&file("page.html"));
    assert!(
        html.contains("TcpExt.ListenOverflows +") && html.contains("(linux.net.core.somaxconn)"),
        "{html}"
    );
    let table = line(&file("table.txt"));
    assert!(
        table.starts_with("host during storm: accept queue of 127.0.0.1:9001 full for ")
            && table.contains("TcpExt.ListenOverflows +")
            && table.contains("sudo sysctl -w net.core.somaxconn=")
            && table.ends_with("(linux.net.core.somaxconn)"),
        "{table}"
    );
}
