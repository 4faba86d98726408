//! The Autobahn TestSuite against `wstune serve` (heavy tier: `cargo test --features heavy-tests`;
//! `.ci/run` runs it). The suite is Python 2 code that .ci/run installs under target/autobahn.

use crate::common;
use std::process::Command;

fn serve_10k(args: &[&str]) -> common::Served {
    common::serve(&[&["--profile", "10k"], args].concat())
}

/// Run the Autobahn fuzzing client on `cases` against a fresh server and compare every case with
/// the committed baseline `expected` (tests/autobahn/). Skipped outside CI when the suite is
/// not installed (.ci/run installs it).
fn autobahn(cases: &[&str], expected: &str, server_args: &[&str]) {
    let site = std::env::var("AUTOBAHN_SITE")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/autobahn").to_string());
    let python = std::env::var("AUTOBAHN_PYTHON").unwrap_or_else(|_| {
        let root = Command::new("pyenv")
            .arg("root")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        format!("{root}/versions/2.7.18/bin/python")
    });
    if !std::path::Path::new(&site)
        .join("autobahntestsuite")
        .is_dir()
        || !std::path::Path::new(&python).exists()
    {
        common::skip(
            "autobahn",
            &format!("no Autobahn TestSuite at {site} (.ci/run installs it)"),
        );
        return;
    }
    let srv = serve_10k(server_args);
    let dir = tempfile::tempdir().unwrap();
    let spec = serde_json::json!({
        "outdir": "./reports",
        "servers": [{"agent": "wstune", "url": format!("ws://127.0.0.1:{}", srv.port)}],
        "cases": cases,
        "exclude-cases": [],
        "exclude-agent-cases": {},
    });
    std::fs::write(dir.path().join("spec.json"), spec.to_string()).unwrap();
    let runner = format!("import site, sys\nsite.addsitedir({site:?})\nsys.argv = ['wstest', '-m', 'fuzzingclient', '-s', 'spec.json']\nfrom autobahntestsuite.wstest import run\nrun()\n");
    let o = Command::new(&python)
        .args(["-c", &runner])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("reports/index.json"))
        .unwrap_or_else(|_| panic!("no report: {}", String::from_utf8_lossy(&o.stderr)));
    let got: serde_json::Value = serde_json::from_str(&text).unwrap();
    let path = format!("{}/tests/autobahn/{expected}", env!("CARGO_MANIFEST_DIR"));
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let got = &got["wstune"];
    let mut problems = Vec::new();
    for (case, want) in expected.as_object().unwrap() {
        let g = &got[case];
        if g["behavior"] == "FAILED"
            || g["behaviorClose"] == "FAILED"
            || g["behavior"] == "UNIMPLEMENTED"
        {
            problems.push(format!(
                "{case}: FAILED ({} / {})",
                g["behavior"], g["behaviorClose"]
            ));
        } else if g["behavior"] != want["behavior"] || g["behaviorClose"] != want["behaviorClose"] {
            problems.push(format!(
                "{case}: {} / {} (expected {} / {})",
                g["behavior"], g["behaviorClose"], want["behavior"], want["behaviorClose"]
            ));
        }
    }
    assert_eq!(
        got.as_object().unwrap().len(),
        expected.as_object().unwrap().len(),
        "every case ran"
    );
    assert!(
        problems.is_empty(),
        "Autobahn differs from {path}:\n{}",
        problems.join("\n")
    );
}

#[test]
fn autobahn_testsuite_reports_no_failure() {
    let _area = common::area("autobahn");
    let cases = [
        "1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*",
    ];
    autobahn(
        &cases,
        "expected.json",
        &["--max-frame", "16777216", "--max-message", "16777216"],
    );
}

/// Compression (categories 12 and 13) is slow on the suite's side (Python 2 deflate), so CI
/// runs a spread of the groups: small and large messages, and every parameter combination
/// group of 13 at the smaller sizes. `bench/autobahn-compression.sh` runs them all.
#[test]
fn autobahn_compression_cases_report_no_failure() {
    let _area = common::area("autobahn");
    let cases = [
        "12.1.*", "12.5.1", "12.5.5", "12.5.9", "13.1.*", "13.2.1", "13.3.1", "13.4.1", "13.5.1",
        "13.6.1", "13.7.1", "13.7.9",
    ];
    autobahn(
        &cases,
        "expected-compression.json",
        &[
            "--deflate",
            "--max-frame",
            "16777216",
            "--max-message",
            "16777216",
        ],
    );
}
