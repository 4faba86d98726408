//! deploy/: each file is checked by the tool that consumes it. Prometheus rules by promtool
//! (syntax and a unit test per alert), the Grafana dashboard's queries by promtool and by a
//! real Prometheus, the systemd units by systemd-analyze, and the whole monitoring recipe end to
//! end: a real Prometheus scraping `wstune serve` and a real node_exporter (unprivileged)
//! reading the textfile `wstune check` wrote.

use crate::common;

use common::{bin, code, fixture, have, stderr, stdout, try_get_ok, wait_for, Kill};
use serde_json::Value as Json;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
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
        "wstune-serve.socket",
        "wstune-check.service",
        "wstune-check.timer",
    ];
    for n in names {
        let text = std::fs::read_to_string(deploy("systemd").join(n)).unwrap();
        assert!(
            n.ends_with(".timer")
                || n.ends_with(".socket")
                || text.contains("ExecStart=/usr/bin/wstune "),
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
    let body = try_get_ok(port, &format!("/api/v1/query?query={}", urlencode(q)))?;
    let v: Json = serde_json::from_str(&body).ok()?;
    assert_eq!(v["status"], "success", "query {q}: {v}");
    v["data"]["result"].as_array().cloned()
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
    let connections = wait_for(
        "ws_connections in Prometheus",
        Duration::from_secs(90),
        || {
            let r = query(prom_port, "ws_connections{job=\"wstune\"}")?;
            let v = r.first()?["value"][1].as_str()?.parse::<f64>().ok()?;
            (v == clients.len() as f64).then_some(v)
        },
    );
    assert_eq!(connections, 7.0);
    // The check results, through node_exporter's textfile collector.
    let failed = wait_for(
        "wstune_check_result in Prometheus",
        Duration::from_secs(60),
        || {
            let r = query(
                prom_port,
                "wstune_check_result{job=\"node\",status=\"fail\"} == 1",
            )?;
            (!r.is_empty()).then_some(r)
        },
    );
    assert!(
        failed
            .iter()
            .any(|s| s["metric"]["id"] == "linux.net.core.somaxconn"),
        "the default fixture fails somaxconn: {failed:?}"
    );
    let fired = wait_for("WstuneCheckFailed to fire", Duration::from_secs(60), || {
        let r = query(prom_port, "ALERTS{alertname=\"WstuneCheckFailed\"}")?;
        (!r.is_empty()).then_some(r)
    });
    assert!(fired
        .iter()
        .any(|s| s["metric"]["id"] == "linux.net.core.somaxconn"));
    // Every rule of the shipped file evaluates on real series without error.
    let rules: Json =
        serde_json::from_str(&try_get_ok(prom_port, "/api/v1/rules").unwrap()).unwrap();
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

/// `wstune completions bash` loaded into bash completes subcommands, flags and flag values.
#[test]
fn bash_completion_completes_subcommands_and_flags() {
    let script = format!(
        r#"source <("{bin}" completions bash)
complete_line() {{ COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=();
  _wstune wstune "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"; echo "${{COMPREPLY[*]}}"; }}
complete_line wstune ch
complete_line wstune check --pro
complete_line wstune export --to ""
"#,
        bin = bin()
    );
    let o = Command::new("bash")
        .args(["--norc", "-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first().copied(), Some("check"), "{out}");
    assert_eq!(lines.get(1).copied(), Some("--profile"), "{out}");
    assert!(
        lines
            .get(2)
            .is_some_and(|l| l.split(' ').any(|w| w == "ansible")),
        "{out}"
    );
    // Every other shell's script is generated too.
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let o = common::run(&["completions", shell]);
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains("export"), "{shell}");
    }
}

/// `wstune man --out DIR` writes one page per subcommand, and man renders them.
#[test]
fn man_pages_for_every_subcommand_render_with_man() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::run(&["man", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for page in [
        "wstune",
        "wstune-check",
        "wstune-apply",
        "wstune-serve",
        "wstune-export",
        "wstune-bench-deflate",
        "wstune-profiles-show",
    ] {
        assert!(dir.path().join(format!("{page}.1")).exists(), "{page}.1");
    }
    assert!(!dir.path().join("wstune-help.1").exists());
    assert!(!dir.path().join("wstune-selftest-worker.1").exists());
    if !have("man") {
        return common::skip("man", "man is not installed (apt-get install man-db)");
    }
    let o = Command::new("man")
        .arg("-l")
        .arg(dir.path().join("wstune-check.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("wstune-check") && text.contains("--profile"),
        "{text}"
    );
    let o = common::run(&["man", "--out", dir.path().join("nope").to_str().unwrap()]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("mkdir -p"), "{}", stderr(&o));
}

/// `serve --log-format json --log-level debug`: every line a log event writes is one JSON
/// object; the connection's events (opened, closed, refused) carry its peer address and id.
#[test]
fn serve_json_logs_carry_each_connections_peer_and_id() {
    let srv = common::serve_env(
        &[
            "--profile",
            "10k",
            "--admin",
            "off",
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ],
        &[("RUST_LOG", None)],
    );
    let port = srv.port;
    let client = common::ws::upgraded(port, None);
    let local = client.local_addr().unwrap().to_string();
    drop(client);
    // A plain GET on the WebSocket port: refused with 426.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let refused_peer = plain.local_addr().unwrap().to_string();
    let json_events = |log: &[String]| -> Vec<Json> {
        log.iter()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    };
    let seen = |events: &[Json], msg: &str| events.iter().any(|e| e["fields"]["message"] == msg);
    srv.wait_log("connection events", Duration::from_secs(20), |log| {
        let events = json_events(log);
        [
            "connection opened",
            "connection closed",
            "handshake refused",
        ]
        .iter()
        .all(|m| seen(&events, m))
    });
    let events = json_events(&srv.log.lock().unwrap());
    let find = |msg: &str| {
        events
            .iter()
            .find(|e| e["fields"]["message"] == msg)
            .unwrap_or_else(|| panic!("no '{msg}' event in {events:?}"))
    };
    let opened = find("connection opened");
    let closed = find("connection closed");
    let refused = find("handshake refused");
    assert_eq!(opened["fields"]["peer"], local.as_str());
    assert_eq!(closed["fields"]["peer"], local.as_str());
    assert_eq!(opened["fields"]["conn"], closed["fields"]["conn"]);
    assert_eq!(
        opened["span"]["peer"],
        local.as_str(),
        "the span carries the peer too"
    );
    assert_eq!(refused["fields"]["peer"], refused_peer.as_str());
    assert_ne!(refused["fields"]["conn"], opened["fields"]["conn"]);
    assert_eq!(opened["level"], "DEBUG");
    assert_eq!(opened["target"], "embedded_server");
}

/// At the default level (info) no per-connection event is written: 100k connections must not
/// mean 100k log lines. RUST_LOG still turns them on when no --log-level is given.
#[test]
fn connection_events_are_debug_and_rust_log_selects_them() {
    let run = |rust_log: Option<&str>| -> String {
        let mut srv = common::serve_env(
            &["--profile", "10k", "--log-format", "json"],
            &[("RUST_LOG", rust_log)],
        );
        drop(common::ws::upgraded(srv.port, None));
        // The connection has come and gone (its events, if any, are written) before the stop.
        srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 0.0);
        // SIGTERM: the server drains and exits, closing stderr.
        common::signal(srv.pid(), "-TERM");
        srv.wait_exit(Duration::from_secs(20));
        srv.wait_log("shutting down", Duration::from_secs(10), |log| {
            log.iter().any(|l| l.contains("shutting down"))
        })
    };
    let quiet = run(None);
    assert!(!quiet.contains("connection opened"), "{quiet}");
    assert!(quiet.contains("shutting down"), "{quiet}");
    let loud = run(Some("embedded_server=debug"));
    assert!(loud.contains("\"connection opened\""), "{loud}");
}

/// The Debian package (cargo-deb, deploy/debian/build.sh) installs with dpkg into a scratch
/// root (the host's package database and /usr are untouched), after which `wstune --version`,
/// `wstune check --profile 100k` and `man wstune-check` work from it, and the completions,
/// units, profiles and Prometheus files are in place.
#[test]
fn debian_package_installs_with_dpkg_and_works() {
    let has_deb = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_deb || !have("dpkg") {
        return common::skip(
            "cargo-deb",
            "cargo-deb or dpkg is missing (cargo install --locked cargo-deb)",
        );
    }
    // This build's binary, packaged as a dev-profile build (stripped by the script).
    let target = Path::new(bin()).parent().unwrap().parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deb");
    let o = Command::new(deploy("debian/build.sh"))
        .args(["--profile", "dev", "--no-build", "-o"])
        .arg(&out)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let deb = PathBuf::from(stdout(&o).trim().lines().last().unwrap());
    assert!(
        deb.starts_with(&out) && deb.extension().is_some_and(|e| e == "deb"),
        "{}",
        stdout(&o)
    );

    let root = dir.path().join("root");
    for d in [
        "var/lib/dpkg/updates",
        "var/lib/dpkg/info",
        "var/lib/dpkg/triggers",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    // --force-depends: the scratch root's empty database has no libc6; the host's libc serves.
    let o = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-depends", "--log=/dev/null", "-i"])
        .arg(&deb)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let o = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["-s", "wstune"])
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("Status: install ok installed"),
        "{}",
        stdout(&o)
    );

    let wstune = root.join("usr/bin/wstune");
    let o = Command::new(&wstune).arg("--version").output().unwrap();
    assert_eq!(
        stdout(&o).trim(),
        format!("wstune {}", env!("CARGO_PKG_VERSION"))
    );
    let o = Command::new(&wstune)
        .args(["check", "--profile", "100k", "-f", "json"])
        .output()
        .unwrap();
    assert!(matches!(code(&o), 0 | 2), "{}", stderr(&o));
    let report: Json = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["profile"]["name"], "100k");
    let o = Command::new("man")
        .arg("wstune-check")
        .env("MANPATH", root.join("usr/share/man"))
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    assert!(
        o.status.success() && stdout(&o).contains("wstune-check"),
        "{}",
        stderr(&o)
    );
    for f in [
        "usr/share/bash-completion/completions/wstune",
        "usr/share/zsh/vendor-completions/_wstune",
        "usr/share/man/man1/wstune-serve.1",
        "usr/lib/systemd/system/wstune-serve.service",
        "usr/lib/systemd/system/wstune-serve.socket",
        "usr/lib/systemd/system/wstune-check.timer",
        "usr/share/wstune/profiles/100k.yaml",
        "usr/share/wstune/checks/linux.yaml",
        "usr/share/wstune/prometheus/wstune-rules.yml",
        "usr/share/wstune/grafana/wstune-dashboard.json",
    ] {
        assert!(root.join(f).is_file(), "{f} is not in the package");
    }
    // The packaged profile is the one built in.
    let o = Command::new(&wstune)
        .args(["check", "--profile"])
        .arg(root.join("usr/share/wstune/profiles/100k.yaml"))
        .args(["-f", "json"])
        .output()
        .unwrap();
    assert!(matches!(code(&o), 0 | 2), "{}", stderr(&o));
}
