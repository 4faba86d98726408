//! `wstune lb` configurations checked by the real proxies (`haproxy -c`, `nginx -t`), WebSocket
//! traffic through a real HAProxy to two `wstune serve` backends, and `check --lb-config`.

mod common;

use common::{free_port, run, Kill};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Whether a proxy binary is installed; CI must have it (.ci/run installs both).
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "CI must apt-get install {tool}"
        );
        eprintln!("skipped: {tool} is not installed");
    }
    ok
}

fn generate(args: &[&str]) -> String {
    let mut a = vec!["lb"];
    a.extend_from_slice(args);
    let o = run(&a);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn generated_configs_pass_the_proxies_own_checks() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::self_signed_cert(dir.path()).expect("openssl for the TLS variants");
    // HAProxy reads the key from FILE.key beside the certificate.
    std::fs::copy(&key, dir.path().join("cert.pem.key")).unwrap();
    let (c, k) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let backends = "127.0.0.1:9001,127.0.0.1:9002";
    if have("haproxy") {
        for extra in [
            &[][..],
            &["--sticky", "cookie"],
            &["--sticky", "source"],
            &["--tls-cert", c],
        ] {
            let mut args = vec!["haproxy", "--backends", backends, "--profile", "100k"];
            args.extend_from_slice(extra);
            let cfg = dir.path().join("haproxy.cfg");
            std::fs::write(&cfg, generate(&args)).unwrap();
            let o = Command::new("haproxy")
                .arg("-c")
                .arg("-f")
                .arg(&cfg)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{extra:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    if have("nginx") {
        for extra in [
            &[][..],
            &["--sticky", "source"],
            &["--tls-cert", c, "--tls-key", k],
        ] {
            let mut args = vec!["nginx", "--backends", backends, "--bind", "127.0.0.1:8088"];
            args.extend_from_slice(extra);
            let cfg = dir.path().join("nginx.conf");
            std::fs::write(&cfg, generate(&args)).unwrap();
            let o = Command::new("nginx")
                .arg("-t")
                .arg("-c")
                .arg(&cfg)
                .args(["-e", "stderr", "-g"])
                .arg(format!("pid {}/nginx.pid;", dir.path().display()))
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{extra:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

#[test]
fn bad_lb_input_is_refused() {
    for (args, want) in [
        (
            &["lb", "haproxy", "--backends", "nope"][..],
            "'nope' is not HOST:PORT",
        ),
        (
            &["lb", "nginx", "--backends", "a:1", "--sticky", "cookie"],
            "NGINX Plus",
        ),
        (
            &["lb", "nginx", "--backends", "a:1", "--tls-cert", "x.pem"],
            "--tls-key",
        ),
        (
            &["lb", "envoy", "--backends", "a:1"],
            "invalid value 'envoy'",
        ),
        (
            &["check", "--lb-config", "/no/such/file"],
            "--lb-config /no/such/file",
        ),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn check_reads_a_proxy_config_against_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        "global\n  maxconn 2000\ndefaults\n  mode http\n  timeout client 20s\nfrontend f\n  bind :80\n  default_backend b\nbackend b\n  server s1 10.0.0.1:9001\n",
    )
    .unwrap();
    let check = || {
        run(&[
            "check",
            "--profile",
            "10k",
            "--format",
            "json",
            "--lb-config",
            cfg.to_str().unwrap(),
        ])
    };
    let o = check();
    assert_eq!(o.status.code(), Some(2), "findings fail");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let find = |id: &str| common::element(&v["results"], "id", id).clone();
    let idle = find("lb.idle_timeout");
    assert_eq!(
        idle["status"], "fail",
        "20 s < the 30 s ping interval: {idle:#}"
    );
    assert_eq!(idle["current"], 20);
    assert_eq!(idle["scope"], "proxy");
    assert!(idle["fix"]["runtime"]
        .as_str()
        .unwrap()
        .contains("timeout tunnel 120s"));
    assert_eq!(find("lb.max_connections")["status"], "fail");
    // What `wstune lb` generates passes both.
    std::fs::write(
        &cfg,
        generate(&["haproxy", "--backends", "10.0.0.1:9001", "--profile", "10k"]),
    )
    .unwrap();
    let o = check();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for f in v["results"].as_array().unwrap() {
        if f["id"].as_str().unwrap().starts_with("lb.") {
            assert_eq!(f["status"], "pass", "{f:#}");
        }
    }
}

/// The connection count a backend reports on its own port (GET /healthz without an upgrade).
fn healthz(port: u16) -> Option<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let body: Value = serde_json::from_str(r.split("\r\n\r\n").nth(1)?).ok()?;
    body["connections"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_traffic_through_haproxy_survives_losing_a_backend() {
    if !have("haproxy") {
        return;
    }
    let b1 = common::serve(&["--profile", "10k", "--admin", "off"]);
    let b2 = common::serve(&["--profile", "10k", "--admin", "off"]);
    let (p1, p2, front) = (b1.port, b2.port, free_port());
    let dir = tempfile::tempdir().unwrap();
    let cfg = generate(&[
        "haproxy",
        "--backends",
        &format!("127.0.0.1:{p1},127.0.0.1:{p2}"),
        "--bind",
        &format!("127.0.0.1:{front}"),
        "--profile",
        "10k",
    ])
    // The runtime socket goes to this test's directory (the generated path needs /run/haproxy),
    // and maxconn fits this machine: HAProxy reserves two fds per connection and the hard
    // limit here is 20,000.
    .replace(
        "/run/haproxy/admin.sock",
        &format!("{}/admin.sock", dir.path().display()),
    )
    .replace("maxconn 10000", "maxconn 2000");
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    let _proxy = Kill(
        Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("ws://127.0.0.1:{front}/");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", front)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    // 10 clients through the proxy: every echo comes back, and leastconn uses both backends.
    let mut clients = Vec::new();
    for i in 0..10 {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        ws.send(Message::text(format!("hello {i}"))).await.unwrap();
        let m = ws.next().await.unwrap().unwrap();
        assert_eq!(m.to_text().unwrap(), format!("hello {i}"));
        clients.push(ws);
    }
    let (n1, n2) = (healthz(p1).unwrap(), healthz(p2).unwrap());
    assert_eq!(n1 + n2, 10);
    assert!(n1 >= 3 && n2 >= 3, "leastconn spreads: {n1} / {n2}");
    // Backend 1 goes away: new connections all reach backend 2.
    drop(b1);
    for i in 0..10 {
        let (mut ws, _) = tokio::time::timeout(
            Duration::from_secs(10),
            tokio_tungstenite::connect_async(&url),
        )
        .await
        .expect("connect in time")
        .unwrap();
        ws.send(Message::text(format!("again {i}"))).await.unwrap();
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(m.to_text().unwrap(), format!("again {i}"));
    }
    // The self-test runs through the proxy.
    let o = tokio::task::spawn_blocking(move || {
        run(&[
            "selftest",
            "--url",
            &url,
            "--profile",
            "10k",
            "--conns",
            "50",
            "--secs",
            "2",
            "--format",
            "json",
        ])
    })
    .await
    .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    let s = &v["scenarios"][0];
    assert_eq!(s["conns_connected"], 50, "{s:#}");
    assert_eq!(s["errors"], 0, "{s:#}");
    assert!(s["achieved_rate"].as_f64().unwrap() > 400.0, "{s:#}");
}
