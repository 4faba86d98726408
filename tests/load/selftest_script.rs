//! `selftest --script`: scripted sessions against the channels app with JWT auth, every
//! waiting step timed and judged, and a file's mistakes named with their lines.

use crate::common;

use common::{json_of, run, serve};
use std::process::Output;
use std::time::Duration;

/// `selftest --script FILE` against `url`, the report as JSON (a loaded box judged anyway).
fn run_script(url: &str, file: &std::path::Path) -> Output {
    run(&[
        "selftest",
        "--url",
        url,
        "--script",
        file.to_str().unwrap(),
        "--format",
        "json",
        "--accept-noise",
    ])
}

/// A scripted session against the channels app with JWT auth: tokens minted from the server's
/// secret, viewers subscribe and wait for a price, traders publish and see it come back; every
/// step is timed and judged by the file's thresholds. A wrong expectation fails naming its
/// step (exit 2); a mistake in the file is named with its line before anything connects.
#[test]
fn a_script_with_tokens_subscribe_publish_and_expect_runs_against_channels() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a-shared-jwt-secret-of-at-least-32-bytes\n").unwrap();
    let srv = serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--auth-secret-file",
        secret.to_str().unwrap(),
    ]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let script = |name: &str, expect: &str, thresholds: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "duration: 3s
populations:
  - name: viewers
    conns: 6
    token: {{mint: {{channels: [\"prices.*\"]}}, secret_file: secret}}
    steps:
      - subscribe: prices.eu
      - expect: {{json: {expect}, timeout: 2500ms}}
        name: price
  - name: traders
    conns: 2
    token: {{mint: {{channels: [\"prices.*\"], publish: [\"prices.*\"]}}, secret_file: secret, send_in: query}}
    repeat: true
    steps:
      - subscribe: prices.eu
        name: sub
      - publish: {{channel: prices.eu, data: {{px: \"{{{{seq}}}}\", from: \"{{{{conn}}}}\"}}}}
      - expect: {{json: {{channel: prices.eu, data: {{px: \"*\"}}}}, timeout: 2s}}
        name: echo
      - think: 200ms
thresholds:
{thresholds}"
            ),
        )
        .unwrap();
        let o = run_script(&url, &p);
        (o.status.code(), json_of(&o))
    };
    let (code, v) = script(
        "good.yaml",
        "{channel: prices.eu}",
        "  - viewers.price.met >= 100%\n  - traders.echo.max < 2s\n",
    );
    assert_eq!(code, Some(0), "{v:#}");
    let s = &v["scenarios"][0];
    assert_eq!(s["scenario"], "script");
    assert_eq!(s["conns_connected"], 8);
    let step = |n: &str| {
        s["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .unwrap_or_else(|| panic!("no step {n}: {s:#}"))
            .clone()
    };
    assert_eq!(step("viewers.price")["matched"], 6, "{s:#}");
    assert_eq!(step("viewers.price")["timeouts"], 0);
    assert_eq!(
        step("viewers.subscribe1")["matched"],
        6,
        "subscribed: {s:#}"
    );
    assert!(
        step("traders.echo")["matched"].as_u64().unwrap() >= 4,
        "{s:#}"
    );
    // Each pass of a repeating population subscribes again: at least once per trader.
    assert!(step("traders.sub")["matched"].as_u64().unwrap() >= 2);
    let checks = v["verdict"]["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["threshold"] == true
        && c["what"] == "viewers.price.met >= 100%"
        && c["ok"] == true));

    // A wrong expectation: the viewers wait for a channel nothing publishes to.
    let (code, v) = script(
        "wrong.yaml",
        "{channel: prices.us}",
        "  - viewers.price.met >= 100%\n",
    );
    assert_eq!(code, Some(2), "{v:#}");
    let summary = v["verdict"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("missed: viewers.price.met >= 100% on script"),
        "{summary}"
    );
    let failed: Vec<&str> = v["verdict"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["what"].as_str().unwrap())
        .collect();
    assert!(
        failed.contains(&"step viewers.price: every expectation met"),
        "{failed:?}"
    );

    // Mistakes in the file: each with its line, nothing connected.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "populations:\n  - name: a\n    conns: 1\n    steps:\n      - sendd: {text: x}\n",
    )
    .unwrap();
    let o = run(&["selftest", "--url", &url, "--script", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("bad.yaml:5:") && err.contains("unknown field `sendd`"),
        "{err}"
    );
    std::fs::write(
        &bad,
        "populations:\n  - name: a\n    conns: 1\n    steps:\n      - think: 1s\n        idle: 1s\n",
    )
    .unwrap();
    let o = run(&[
        "selftest",
        "--url",
        &url,
        "--script",
        bad.to_str().unwrap(),
        "--threshold",
        "a.nosuch.p99 < 1s",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("bad.yaml:5: population 'a', step 1: give exactly one of"),
        "{err}"
    );
}

/// Stages: the connections open over the first second, hold, and the newest close over the
/// last; every one of them runs its steps, and the run lasts as long as its stages.
#[test]
fn a_staged_script_opens_and_closes_its_connections_on_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(&["--profile", "10k"]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let p = dir.path().join("staged.yaml");
    std::fs::write(
        &p,
        "stages:
  - {to: 20, over: 1s}
  - {hold: 2s}
  - {to: 5, over: 1s}
populations:
  - name: clients
    conns: 20
    repeat: true
    steps:
      - send: {text: 'ping {{conn}}'}
      - expect: {contains: ping, timeout: 2s}
        name: echo
      - think: 200ms
",
    )
    .unwrap();
    let o = run_script(&url, &p);
    let v = json_of(&o);
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    let s = &v["scenarios"][0];
    assert_eq!(s["conns_connected"], 20, "{s:#}");
    assert_eq!(s["secs"], 4.0);
    assert_eq!(s["errors"], 0);
    assert_eq!(s["connect_ms"]["count"], 20);
    let echo = &s["steps"][0];
    assert_eq!(echo["name"], "clients.echo");
    assert_eq!(echo["timeouts"], 0, "{echo:#}");
    // 20 connections for ~2.5 s at a pass every ~0.2 s each, 5 for the rest: far more than 20.
    assert!(echo["matched"].as_u64().unwrap() > 100, "{echo:#}");
    let o = run(&[
        "selftest",
        "--url",
        &url,
        "--script",
        p.to_str().unwrap(),
        "--secs",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("its stages say how long the run takes"));
}

/// Regression: the script reader could be made to eat memory or hang before it refused a
/// file: a 60 KB file of one 10,000-value list aliased 10,000 times grew past 4 GiB; 100,000
/// levels of `[` took 41 s; 55,000 steps took 34 s (each step's line was looked up from the
/// file's start); populations of 2^63 + 2^63 + 2 connections wrapped to 2 and the run
/// passed. Each is now refused within seconds (a debug build; well under one in a
/// release), under 2 GiB of address space, with its line and the fix, and nothing connects.
#[test]
fn hostile_scripts_are_refused_quickly_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |name: &str, text: &str| -> (String, Duration) {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let t0 = std::time::Instant::now();
        // Port 9 (discard) on loopback: nothing listens; the file is refused before any
        // connection is tried.
        let o = common::run_bounded(
            std::process::Command::new("sh")
                .args(["-c", "ulimit -v 2097152 && exec \"$0\" \"$@\""])
                .arg(common::bin())
                .args(["selftest", "--url", "ws://127.0.0.1:9/", "--script"])
                .arg(&p)
                .env("NO_COLOR", "1"),
            Duration::from_secs(30),
        );
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(3), "{name}: {err}");
        eprintln!("{name}: refused in {took:?}");
        assert!(
            took < Duration::from_secs(10),
            "{name} took {took:?}: {err}"
        );
        (err, took)
    };
    let head = "populations:\n- name: a\n  conns: 1\n  steps:\n";
    // 10,000 zeros anchored once, aliased 10,000 times: 100 million values.
    let bomb = format!(
        "{head}  - publish: {{channel: x, data: &z [{}0]}}\n  - publish: {{channel: x, data: [{}*z]}}\n",
        "0,".repeat(9_999),
        "*z,".repeat(9_999)
    );
    assert!(bomb.len() < 64 << 10);
    let (err, _) = refused("aliases.yaml", &bomb);
    assert!(
        err.contains("aliases.yaml:")
            && err.contains("its aliases (*NAME) expand it to more than")
            && err.contains("write the repeated part out"),
        "{err}"
    );
    // 100,000 levels of flow nesting.
    let deep = format!(
        "{head}  - publish: {{channel: x, data: {}{}}}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (err, _) = refused("deep.yaml", &deep);
    assert!(
        err.contains("deep.yaml:5: nested deeper than 64 levels") && err.contains("flatten"),
        "{err}"
    );
    // 55,000 steps, the last one wrong: its line, found without reading the file 55,000 times.
    let mut many = head.to_string();
    many.push_str(&"  - think: 1\n".repeat(54_999));
    many.push_str("  - {think: 1, idle: 1}\n");
    assert!(many.len() < 1 << 20);
    let (err, _) = refused("steps.yaml", &many);
    assert!(
        err.contains("steps.yaml:55004: population 'a', step 55000: give exactly one of"),
        "{err}"
    );
    // Connections that add up past what a count holds.
    let huge = "populations:\n- {name: a, conns: 9223372036854775808, steps: [{think: 1}]}\n- {name: b, conns: 9223372036854775808, steps: [{think: 1}]}\n- {name: c, conns: 2, steps: [{think: 1}]}\n";
    let (err, _) = refused("conns.yaml", huge);
    assert!(
        err.contains("population 'a': conns 9223372036854775808; give 1..=100000")
            && err.contains("the populations' connections add up to more than"),
        "{err}"
    );
}
