//! A newcomer's first self-test: a scenario the server cannot serve is refused before any load
//! with what to run instead; the plan and a line per scenario on standard error; the report in
//! a file (`-o`) or as the HTML page; the summary at 80, 100 and 200 columns through a real
//! terminal; the JSON against docs/selftest-report.schema.json.

use crate::common;

use common::{bin, code, json_of, run, serve, stderr, stdout};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/selftest-report.schema.json"),
    )
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn assert_valid(v: &jsonschema::Validator, r: &Value) {
    let errors: Vec<String> = v
        .iter_errors(r)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{r:#}");
}

/// A one-second echo-rate run of five connections against the server on `port`: the
/// shortest self-test that still writes every part of a report.
fn quick_run(port: u16) -> Vec<String> {
    let u = url(port);
    [
        "selftest",
        "--url",
        &u,
        "--scenario",
        "echo-rate",
        "--conns",
        "5",
        "--rate",
        "5",
        "--secs",
        "1",
        "--warmup",
        "0",
        "--accept-noise",
    ]
    .map(String::from)
    .to_vec()
}

fn url(port: u16) -> String {
    format!("ws://127.0.0.1:{port}/")
}

/// The first experiment: `wstune serve` (echo) and `selftest --scenario broadcast` stop at
/// once, naming the echo server and `serve --app broadcast`, exit 3, with the JSON and the
/// page saying it too; never "0 of 5000 deliveries" after a whole run.
#[test]
fn a_broadcast_against_an_echo_server_is_refused_before_any_load() {
    let echo = serve(&["--profile", "10k"]);
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let started = Instant::now();
    let o = run(&[
        "selftest",
        "--url",
        &url(echo.port),
        "--scenario",
        "broadcast",
        "--conns",
        "5000",
        "--secs",
        "30",
        "--format",
        "json",
        "--report",
        page.to_str().unwrap(),
    ]);
    let took = started.elapsed();
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{err}");
    assert!(took < Duration::from_secs(10), "no load ran: {took:?}");
    assert!(
        err.contains("--scenario broadcast cannot work against")
            && err.contains("it is an echo server")
            && err.contains("`wstune serve --app broadcast`")
            && err.contains("--scenario echo-rate"),
        "{err}"
    );
    assert!(!err.contains("about "), "no plan for a run refused: {err}");
    let r = json_of(&o);
    assert_valid(&schema(), &r);
    assert_eq!(r["refused"][0]["scenario"], "broadcast", "{r:#}");
    assert_eq!(r["scenarios"].as_array().unwrap().len(), 0, "{r:#}");
    assert_eq!(r["verdict"]["pass"], false);
    let summary = r["verdict"]["summary"].as_str().unwrap();
    assert!(summary.starts_with("NOT RUN: "), "{summary}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("NOT RUN"), "the page says it too");
    assert!(html.contains("wstune serve --app broadcast"));

    // --no-probe sends nothing first: the load runs, and misses as it did before.
    let o = run(&[
        "selftest",
        "--url",
        &url(echo.port),
        "--scenario",
        "broadcast",
        "--conns",
        "5",
        "--secs",
        "1",
        "--rounds",
        "1",
        "--format",
        "json",
        "--no-probe",
    ]);
    let r = json_of(&o);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(r.get("refused").is_none(), "{r:#}");
    assert_eq!(r["scenarios"][0]["received"], 0, "{r:#}");

    // Echoes against a channels server are refused too, naming what it is.
    let channels = serve(&["--profile", "10k", "--app", "channels"]);
    let o = run(&[
        "selftest",
        "--url",
        &url(channels.port),
        "--scenario",
        "echo-rate",
        "--conns",
        "5",
    ]);
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{err}");
    assert!(
        err.contains("--scenario echo-rate cannot work against") && err.contains("channels server"),
        "{err}"
    );
    assert!(stdout(&o).is_empty(), "the error says it: {}", stdout(&o));
}

/// broadcast against a broadcast server still runs: the plan before it, a line when it
/// starts and one with its result (stderr is not a terminal), the JSON alone on stdout and
/// valid against the schema.
#[test]
fn a_broadcast_against_a_broadcast_server_runs_with_its_plan_and_progress() {
    let srv = serve(&["--profile", "10k", "--app", "broadcast"]);
    let o = run(&[
        "selftest",
        "--url",
        &url(srv.port),
        "--profile",
        "10k",
        "--scenario",
        "broadcast",
        "--conns",
        "20",
        "--secs",
        "1",
        "--rounds",
        "3",
        "--format",
        "json",
    ]);
    let err = stderr(&o);
    let r = json_of(&o);
    assert!(matches!(code(&o), 0 | 2 | 4), "{err}");
    assert_valid(&schema(), &r);
    assert!(r.get("refused").is_none(), "{r:#}");
    assert_eq!(r["scenarios"][0]["received"], 60, "{r:#}");
    assert!(
        err.contains(&format!(
            "wstune: self-test of {}, profile 10k: 1 scenario, about ",
            url(srv.port)
        )) && err.contains("  1. broadcast  20 subscribers, 3 rounds over 1 s"),
        "the plan: {err}"
    );
    let start = err.find("wstune: [1/1] broadcast: started").expect(&err);
    let done = err.rfind("wstune: [1/1] broadcast: ").unwrap();
    assert!(start < done, "a result line after the start: {err}");
    let result = err[done..].lines().next().unwrap();
    assert!(
        result.contains(" in ") && result.contains("20/20 connected"),
        "{result}"
    );
}

/// `-o FILE`: the format from --format or the file's extension, written whole, nothing on
/// stdout; `--format html` is the page; a FILE that cannot be written is refused before the
/// load.
#[test]
fn the_report_goes_to_a_file_in_the_format_its_name_says() {
    let srv = serve(&["--profile", "10k"]);
    let dir = tempfile::tempdir().unwrap();
    let quick = |extra: &[&str]| {
        let mut a = quick_run(srv.port);
        a.extend(extra.iter().map(|s| s.to_string()));
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let json = dir.path().join("run.json");
    let o = quick(&["-o", json.to_str().unwrap()]);
    assert!(matches!(code(&o), 0 | 2), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains(&format!("wstune: wrote {}", json.display())));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_valid(&schema(), &r);
    assert_eq!(r["scenarios"][0]["scenario"], "echo-rate");

    let page = dir.path().join("run.html");
    let o = quick(&["--output", page.to_str().unwrap()]);
    assert!(matches!(code(&o), 0 | 2), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!doctype html>"), "{}", &html[..80]);

    let o = quick(&["--format", "html"]);
    assert!(stdout(&o).starts_with("<!doctype html>"), "{}", stderr(&o));

    // --format wins over the extension.
    let txt = dir.path().join("run.json.txt");
    let o = quick(&["-o", txt.to_str().unwrap(), "--format", "json"]);
    assert!(matches!(code(&o), 0 | 2), "{}", stderr(&o));
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_ok(), "{text}");

    // A place that cannot take the file: refused at once, naming the flag.
    let started = Instant::now();
    let o = quick(&["-o", "/nonexistent-dir/run.json"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("--output"), "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(5));

    // The format's error names FORMAT and its values, not an internal id.
    let o = run(&["selftest", "--url", &url(srv.port), "--format", "xml"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{err}");
    assert!(
        err.contains("'--format <FORMAT>'") && err.contains("table, json, html"),
        "{err}"
    );
    assert!(!err.contains("load_format"), "{err}");
}

/// The summary through a real terminal at 80, 100 and 200 columns: no line wider than the
/// terminal, the scenario's name whole; blocks where a table would not fit, the table at 200.
/// Piped, it is blocks unless `--format table` asks for the table.
#[test]
fn the_summary_fits_the_terminal_at_80_100_and_200_columns() {
    if Command::new("script").arg("--version").output().is_err() {
        common::skip(
            "terminal",
            "no `script` (util-linux) to give wstune a terminal",
        );
        return;
    }
    let srv = serve(&["--profile", "10k"]);
    let args = format!(
        "selftest --url {} --scenario echo-rate --conns 5 --rate 5 --secs 1 --warmup 0 \
         --accept-noise --threshold 'echo-rate.p50 < 1us'",
        url(srv.port)
    );
    for cols in [80, 100, 200] {
        let cmd = format!("stty cols {cols} rows 50; {} {args} 2>/dev/null", bin());
        let o = Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .env_remove("COLUMNS")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let out = stdout(&o).replace('\r', "");
        assert!(out.contains("verdict: MISS"), "{cols}: {out}");
        for line in out.lines() {
            assert!(
                line.chars().count() <= cols,
                "{cols} columns, a line of {}: {line:?}\n{out}",
                line.chars().count()
            );
        }
        if cols == 200 {
            assert!(out.contains("│ echo-rate ┆ MISS"), "the table: {out}");
        } else {
            assert!(out.contains("\necho-rate: MISS\n"), "{cols}: blocks: {out}");
            assert!(out.contains("  latency      p50 "), "{cols}: {out}");
            assert!(
                out.contains("  MISS         echo-rate.p50 < 1us: "),
                "{cols}: the reason in the block: {out}"
            );
        }
    }
    // Piped: blocks; --format table asks for the table (at $COLUMNS).
    let base = quick_run(srv.port);
    let base: Vec<&str> = base.iter().map(String::as_str).collect();
    let o = Command::new(bin())
        .args(&base)
        .args(["--format", "table"])
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("│ echo-rate ┆ "), "{out}");
    let o = run(&base);
    let out = stdout(&o);
    assert!(out.contains("echo-rate: ") && !out.contains('│'), "{out}");
}
