//! The machine-readable output of `check`: JSON against the documented schema, JUnit XML,
//! Prometheus exposition text, and an output file written whole or not at all.

use crate::common;

use super::wstune120;
use common::{check_json, code, fixture, json_of, stderr, stdout};
use std::path::Path;
use std::process::Command;

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/check-report.schema.json"),
    )
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

#[test]
fn json_validates_against_the_documented_schema_for_every_host() {
    let v = schema();
    let mut reports = vec![json_of(&wstune120(&["check", "-f", "json"]))];
    for name in [
        "default",
        "tuned",
        "container",
        "legacy",
        "windows-default",
        "windows-tuned",
    ] {
        reports.push(check_json(&fixture(name), &[]).1);
    }
    for r in &reports {
        let errors: Vec<String> = v
            .iter_errors(r)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", r["host"]["source"]);
        let s = &r["summary"];
        let n = r["results"].as_array().unwrap().len() as u64;
        assert_eq!(s["total"].as_u64(), Some(n));
        let sum: u64 = ["pass", "warn", "fail", "skip", "info"]
            .iter()
            .map(|k| s[*k].as_u64().unwrap())
            .sum();
        assert_eq!(sum, n);
    }
    // The schema is strict enough to catch a broken report.
    let mut broken = reports[1].clone();
    broken["results"][0]["status"] = "ok".into();
    assert!(!v.is_valid(&broken));
}

#[test]
fn junit_is_well_formed_xml_with_one_testcase_per_check() {
    use quick_xml::events::Event;
    for (name, strict) in [
        ("default", false),
        ("legacy", false),
        ("legacy", true),
        ("container", false),
    ] {
        let root = fixture(name);
        let mut args = vec!["check", "--root", root.to_str().unwrap(), "-f", "junit"];
        if strict {
            args.push("--strict");
        }
        let xml = stdout(&wstune120(&args));
        let (_, report) = check_json(&fixture(name), &[]);
        let mut reader = quick_xml::Reader::from_str(&xml);
        let (mut cases, mut failures, mut skipped, mut depth) = (0, 0, 0, 0i32);
        let mut suite_attrs = std::collections::BTreeMap::new();
        loop {
            match reader
                .read_event()
                .unwrap_or_else(|e| panic!("{name}: invalid XML: {e}"))
            {
                Event::Start(e) | Event::Empty(e) if e.name().into_inner() == "testsuite" => {
                    for a in e.attributes() {
                        let a = a.unwrap();
                        suite_attrs.insert(
                            a.key.into_inner().to_string(),
                            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                                .unwrap()
                                .into_owned(),
                        );
                    }
                    depth += 1;
                }
                Event::Start(e) => {
                    depth += 1;
                    match e.name().into_inner() {
                        "testcase" => cases += 1,
                        "failure" => failures += 1,
                        _ => {}
                    }
                }
                Event::Empty(e) if e.name().into_inner() == "skipped" => skipped += 1,
                Event::End(_) => depth -= 1,
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0, "{name}: balanced elements");
        let s = &report["summary"];
        assert_eq!(cases, s["total"].as_u64().unwrap(), "{name}");
        let expect_fail = s["fail"].as_u64().unwrap()
            + if strict {
                s["warn"].as_u64().unwrap()
            } else {
                0
            };
        assert_eq!(failures, expect_fail, "{name} strict={strict}");
        assert_eq!(skipped, s["skip"].as_u64().unwrap(), "{name}");
        assert_eq!(suite_attrs["failures"], failures.to_string());
        assert_eq!(suite_attrs["skipped"], skipped.to_string());
        assert_eq!(suite_attrs["tests"], cases.to_string());
    }
}

#[test]
fn prometheus_text_follows_the_exposition_format() {
    let root = fixture("legacy");
    let text = stdout(&wstune120(&[
        "check",
        "--root",
        root.to_str().unwrap(),
        "-f",
        "prometheus",
    ]));
    let mut samples = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            assert!(
                rest.starts_with("HELP wstune_") || rest.starts_with("TYPE wstune_"),
                "{line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value of {line}"));
        let name_end = series.find('{').unwrap();
        assert!(
            series[..name_end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        assert!(series.ends_with('}'), "{line}");
        samples += 1;
    }
    assert!(
        text.contains("wstune_check_result{id=\"linux.boot.tcp_tw_recycle\",status=\"warn\""),
        "{text}"
    );
    assert!(text.contains("wstune_checks{status=\"fail\",profile=\"100k\"} 0"));
    assert!(samples > 50);
    // And a parser we did not write agrees, where it is installed (CI installs it).
    let py = Command::new("python3")
        .args(["-c", "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as p\nprint(sum(len(f.samples) for f in p(sys.stdin.read())))"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = py else {
        return common::skip("prometheus_client", "no python3 to run prometheus_client");
    };
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named 'prometheus_client'") {
            return common::skip(
                "prometheus_client",
                "pip install -r tests/requirements.txt for the exposition-format parser",
            );
        }
        assert!(out.status.success(), "prometheus_client: {err}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            samples.to_string()
        );
    }
}

#[test]
fn output_file_is_written_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.xml");
    let root = fixture("default");
    let o = wstune120(&[
        "check",
        "--root",
        root.to_str().unwrap(),
        "-f",
        "junit",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(stdout(&o).is_empty());
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("<testsuites"));
    let missing = dir.path().join("no/such/dir/report.xml");
    let o = wstune120(&[
        "check",
        "--root",
        root.to_str().unwrap(),
        "-o",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("no/such/dir"), "{}", stderr(&o));
    assert!(!missing.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left behind"
    );
}
