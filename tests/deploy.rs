//! deploy/: each file is checked by the tool that consumes it. Prometheus rules by promtool
//! (syntax and a unit test per alert), the Grafana dashboard's queries by promtool and by a
//! real Prometheus, the systemd units by systemd-analyze, and the whole monitoring recipe end to
//! end: a real Prometheus scraping `wstune serve` and a real node_exporter (unprivileged)
//! reading the textfile `wstune check` wrote.

mod common;

use common::{bin, code, fixture, stderr, stdout, Kill};
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn promtool(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool")
}

/// The rules load, and `promtool test rules` passes with a case for every alert in the file.
#[test]
fn prometheus_rules_pass_promtool_and_every_alert_is_unit_tested() {
    if !have("promtool") {
        return common::skip(
            "promtool",
            "promtool is not installed (apt-get install prometheus)",
        );
    }
    let dir = deploy("prometheus");
    let o = promtool(&["check", "rules", "wstune-rules.yml"], &dir);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let o = promtool(&["test", "rules", "wstune-rules.test.yml"], &dir);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));

    let rules: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("wstune-rules.yml")).unwrap())
            .unwrap();
    let tests: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(dir.join("wstune-rules.test.yml")).unwrap(),
    )
    .unwrap();
    let alerts: Vec<&str> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    let fired: Vec<&str> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().unwrap())
        .filter(|c| c["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["alertname"].as_str())
        .collect();
    assert!(alerts.len() >= 9, "{alerts:?}");
    for a in &alerts {
        assert!(
            fired.contains(a),
            "alert {a} has no promtool test case that fires it"
        );
    }
}

/// Every query of the Grafana dashboard, with Grafana's variables given values.
fn dashboard_queries() -> Vec<String> {
    let d: Json = serde_json::from_str(
        &std::fs::read_to_string(deploy("grafana/wstune-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let e = t["expr"].as_str().unwrap();
            out.push(e.replace("$__rate_interval", "1m").replace("$job", ".*"));
        }
    }
    out
}

/// The dashboard's queries parse as PromQL (promtool, each as a recording rule) and use only
/// metric names wstune really exports.
#[test]
fn dashboard_queries_pass_promtool() {
    if !have("promtool") {
        return common::skip(
            "promtool",
            "promtool is not installed (apt-get install prometheus)",
        );
    }
    let queries = dashboard_queries();
    assert!(queries.len() >= 15, "{queries:?}");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:panel_query_{i}\n        expr: {}\n",
            serde_json::to_string(q).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yml"), &rules).unwrap();
    let o = promtool(&["check", "rules", "dashboard.yml"], dir.path());
    assert!(o.status.success(), "{}{}\n{rules}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{}",
        stdout(&o)
    );
}

/// The units in deploy/systemd pass `systemd-analyze verify` (with this build's binary in
/// ExecStart, since verify checks that it exists).
#[test]
fn systemd_units_pass_systemd_analyze() {
    if !have("systemd-analyze") {
        return common::skip(
            "systemd",
            "systemd-analyze is not installed (apt-get install systemd)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "wstune-serve.service",
        "wstune-check.service",
        "wstune-check.timer",
    ];
    for n in names {
        let text = std::fs::read_to_string(deploy("systemd").join(n)).unwrap();
        assert!(
            n.ends_with(".timer") || text.contains("ExecStart=/usr/bin/wstune "),
            "{n}"
        );
        std::fs::write(dir.path().join(n), text.replace("/usr/bin/wstune", bin())).unwrap();
    }
    let mut cmd = Command::new("systemd-analyze");
    cmd.arg("verify")
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.path().display()));
    for n in names {
        cmd.arg(dir.path().join(n));
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success() && stderr(&o).trim().is_empty(),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    // The committed units are what `export --to systemd-unit` renders for 100k (less the header).
    let out = tempfile::tempdir().unwrap();
    let o = common::run(&[
        "export",
        "--to",
        "systemd-unit",
        "--root",
        fixture("default").to_str().unwrap(),
        "-o",
        out.path().to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for n in names {
        let body = |t: &str| -> String {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n")
                .replace(bin(), "/usr/bin/wstune")
        };
        let committed = std::fs::read_to_string(deploy("systemd").join(n)).unwrap();
        let rendered = std::fs::read_to_string(out.path().join(n)).unwrap();
        assert_eq!(
            body(&committed),
            body(&rendered),
            "deploy/systemd/{n} differs from the export"
        );
    }
}

/// GET a path on 127.0.0.1:port; the body on a 200, else None.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query; the `data.result` array (None while Prometheus is not up).
fn query(port: u16, q: &str) -> Option<Vec<Json>> {
    let body = http_get(port, &format!("/api/v1/query?query={}", urlencode(q)))?;
    let v: Json = serde_json::from_str(&body).ok()?;
    assert_eq!(v["status"], "success", "query {q}: {v}");
    v["data"]["result"].as_array().cloned()
}

fn wait_for<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// README's monitoring recipe, live: Prometheus (loading deploy/prometheus/wstune-rules.yml)
/// scrapes `wstune serve`'s /metrics and a node_exporter that runs as nobody and reads the
/// textfile `wstune check -f prometheus -o` wrote; its HTTP API then has the open connection
/// count and the check results, every rule evaluates without error, and every dashboard query
/// runs.
#[test]
fn prometheus_scrapes_the_server_and_the_check_textfile() {
    let exporter = "/usr/bin/prometheus-node-exporter";
    if !have("prometheus") || !Path::new(exporter).exists() {
        return common::skip(
            "prometheus",
            "prometheus or prometheus-node-exporter is not installed (apt-get install prometheus prometheus-node-exporter)",
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap();
    if euid != "0" {
        return common::skip("prometheus", "needs root, to run node_exporter as nobody");
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let textfiles = dir.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    for d in [dir.path(), textfiles.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let prom_file = textfiles.join("wstune.prom");
    let o = common::run(&[
        "check",
        "--root",
        fixture("default").to_str().unwrap(),
        "-f",
        "prometheus",
        "-o",
        prom_file.to_str().unwrap(),
    ]);
    assert!(prom_file.exists(), "{}", stderr(&o));

    let server = common::serve(&["--profile", "10k"]);
    let clients: Vec<TcpStream> = (0..7)
        .map(|_| common::ws::upgraded(server.port, None))
        .collect();

    let exporter_port = common::free_port();
    let _exporter = Kill(
        Command::new("setpriv")
            .args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                exporter,
            ])
            .args(["--collector.disable-defaults", "--collector.textfile"])
            .arg(format!(
                "--collector.textfile.directory={}",
                textfiles.display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{exporter_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter"),
    );

    let prom_port = common::free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n\
             \x20 - job_name: wstune\n    static_configs:\n      - targets: ['127.0.0.1:{admin}']\n\
             \x20 - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n",
            rules = deploy("prometheus/wstune-rules.yml").display(),
            admin = server.admin
        ),
    )
    .unwrap();
    let _prometheus = Kill(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );

    // The live connection count, scraped from the server.
    let connections = wait_for("ws_connections in Prometheus", 90, || {
        let r = query(prom_port, "ws_connections{job=\"wstune\"}")?;
        let v = r.first()?["value"][1].as_str()?.parse::<f64>().ok()?;
        (v == clients.len() as f64).then_some(v)
    });
    assert_eq!(connections, 7.0);
    // The check results, through node_exporter's textfile collector.
    let failed = wait_for("wstune_check_result in Prometheus", 60, || {
        let r = query(
            prom_port,
            "wstune_check_result{job=\"node\",status=\"fail\"} == 1",
        )?;
        (!r.is_empty()).then_some(r)
    });
    assert!(
        failed
            .iter()
            .any(|s| s["metric"]["id"] == "linux.net.core.somaxconn"),
        "the default fixture fails somaxconn: {failed:?}"
    );
    let fired = wait_for("WstuneCheckFailed to fire", 60, || {
        let r = query(prom_port, "ALERTS{alertname=\"WstuneCheckFailed\"}")?;
        (!r.is_empty()).then_some(r)
    });
    assert!(fired
        .iter()
        .any(|s| s["metric"]["id"] == "linux.net.core.somaxconn"));
    // Every rule of the shipped file evaluates on real series without error.
    let rules: Json = serde_json::from_str(&http_get(prom_port, "/api/v1/rules").unwrap()).unwrap();
    let mut n = 0;
    for g in rules["data"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_eq!(r["health"], "ok", "{r}");
            n += 1;
        }
    }
    assert_eq!(n, 16);
    // Every dashboard query runs against the live series.
    for q in dashboard_queries() {
        query(prom_port, &q).unwrap_or_else(|| panic!("query failed: {q}"));
    }
    let messages = query(prom_port, "sum(ws_messages_in_total)").unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    drop(clients);
}
