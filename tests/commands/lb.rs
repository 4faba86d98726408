//! `wstune lb` configurations checked by the real proxies (`haproxy -c`, `nginx -t`), WebSocket
//! traffic through a real HAProxy to two `wstune serve` backends, and `check --lb-config`.

use crate::common;

use common::{free_port, run, Kill};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// Whether a proxy binary is installed (and runs); CI must have it (.ci/run installs both).
pub(crate) fn have_proxy(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        common::skip(tool, &format!("{tool} is not installed"));
    }
    ok
}

pub(crate) fn generate(args: &[&str]) -> String {
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
    if have_proxy("haproxy") {
        for extra in [
            &[][..],
            &["--sticky", "cookie"],
            &["--sticky", "source"],
            &["--tls-cert", c],
            &["--check-port", "9100"],
        ] {
            let mut args = vec!["haproxy", "--backends", backends, "--profile", "100k"];
            args.extend_from_slice(extra);
            let cfg = dir.path().join("haproxy.cfg");
            std::fs::write(&cfg, generate(&args)).unwrap();
            let o = haproxy_c(&cfg);
            assert!(
                o.status.success(),
                "{extra:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    if have_proxy("nginx") {
        for extra in [
            &[][..],
            &["--sticky", "source"],
            &["--tls-cert", c, "--tls-key", k],
        ] {
            let mut args = vec!["nginx", "--backends", backends, "--bind", "127.0.0.1:8088"];
            args.extend_from_slice(extra);
            let cfg = dir.path().join("nginx.conf");
            std::fs::write(&cfg, generate(&args)).unwrap();
            let o = nginx_t(&cfg, dir.path());
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
        // lb.fd_limit depends on this host's limits: tested against a real HAProxy below.
        let id = f["id"].as_str().unwrap();
        if id.starts_with("lb.") && id != "lb.fd_limit" {
            assert_eq!(f["status"], "pass", "{f:#}");
        }
    }
}

/// The connection count a backend reports on its own port (GET /healthz without an upgrade).
/// HAProxy in the foreground on `cfg` as `wstune lb haproxy` wrote it, made to fit a test: the
/// runtime socket in `dir` (the generated path needs /run/haproxy), and maxconn (10,000 + 10 %)
/// down to 2,000: HAProxy reserves two fds per connection and the hard limit here is 20,000.
pub(crate) fn run_haproxy(cfg: &str, dir: &std::path::Path) -> Kill {
    let cfg = cfg
        .replace(
            "/run/haproxy/admin.sock",
            &format!("{}/admin.sock", dir.display()),
        )
        .replace("maxconn 11000", "maxconn 2000");
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    Kill(
        Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A real HAProxy on a free loopback port in front of the backends on `p1` and `p2`, with
/// the configuration `wstune lb haproxy` generates for the 10k profile: (its port, the
/// configuration, its directory, the running proxy).
fn haproxy_in_front(p1: u16, p2: u16) -> (u16, String, tempfile::TempDir, Kill) {
    let front = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = generate(&[
        "haproxy",
        "--backends",
        &format!("127.0.0.1:{p1},127.0.0.1:{p2}"),
        "--bind",
        &format!("127.0.0.1:{front}"),
        "--profile",
        "10k",
    ]);
    let proxy = run_haproxy(&cfg, dir.path());
    (front, cfg, dir, proxy)
}

fn healthz(port: u16) -> Option<u64> {
    let r = common::try_http(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")?;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let body: Value = serde_json::from_str(common::body(&r)).ok()?;
    body["connections"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_traffic_through_haproxy_survives_losing_a_backend() {
    if !have_proxy("haproxy") {
        return;
    }
    let b1 = common::serve(&["--profile", "10k", "--admin", "off"]);
    let b2 = common::serve(&["--profile", "10k", "--admin", "off"]);
    let (p1, p2) = (b1.port, b2.port);
    let (front, _cfg, _dir, _proxy) = haproxy_in_front(p1, p2);
    let url = format!("ws://127.0.0.1:{front}/");
    common::wait_port(front, Duration::from_secs(10), "haproxy");
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

/// A server's state in HAProxy's `show stat` (UP, DOWN, "UP 1/2", ...), over the runtime
/// socket `run_haproxy` puts in `dir`.
fn haproxy_status(dir: &std::path::Path, server: &str) -> Option<String> {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(dir.join("admin.sock")).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"show stat\n").ok()?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("wstune,{server},")))?;
    // The CSV's 18th field is the status.
    line.split(',').nth(17).map(str::to_string)
}

/// The generated HAProxy configuration checks /readyz: a backend that begins a drain is
/// marked down (new clients go to the other one) before its drain delay ends, while its own
/// clients are still open; they are then closed with 1012 through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_takes_a_draining_backend_out_before_its_first_close() {
    if !have_proxy("haproxy") {
        return;
    }
    const KEY: &str = "k3y-0f-the-lb-drain-test-Zq81";
    let b1 = common::serve_env(
        &[
            "--profile",
            "10k",
            "--drain-delay",
            "5",
            "--drain-over",
            "1",
        ],
        &[("WSTUNE_API_KEY", Some(KEY))],
    );
    let b2 = common::serve(&["--profile", "10k", "--admin", "off"]);
    let (p1, p2) = (b1.port, b2.port);
    let (front, cfg, dir, _proxy) = haproxy_in_front(p1, p2);
    assert!(cfg.contains("option httpchk GET /readyz"), "{cfg}");
    common::wait_port(front, Duration::from_secs(10), "haproxy");
    for s in ["s1", "s2"] {
        common::wait_until(
            &format!("haproxy to see {s} up"),
            Duration::from_secs(10),
            || haproxy_status(dir.path(), s).as_deref() == Some("UP"),
        );
    }
    let url = format!("ws://127.0.0.1:{front}/");
    let mut clients = Vec::new();
    for i in 0..10 {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        ws.send(Message::text(format!("hello {i}"))).await.unwrap();
        ws.next().await.unwrap().unwrap();
        clients.push(ws);
    }
    let on_b1 = healthz(p1).unwrap();
    assert!(on_b1 >= 3, "leastconn spreads: {on_b1} on backend 1");
    let r = b1.admin_api().with_key(KEY).api("POST", "/api/drain");
    assert!(r.starts_with("HTTP/1.1 202"), "{r}");
    let asked = std::time::Instant::now();
    common::wait_until(
        "haproxy to mark the draining s1 down",
        Duration::from_secs(5),
        || haproxy_status(dir.path(), "s1").as_deref() == Some("DOWN"),
    );
    let down_after = asked.elapsed();
    // Out of rotation before its delay ended: not one of its clients was closed yet.
    assert_eq!(
        b1.metric("ws_connections"),
        on_b1 as f64,
        "closed before haproxy took it out"
    );
    assert!(down_after < Duration::from_secs(5), "{down_after:?}");
    // New clients all go to backend 2.
    let before = healthz(p2).unwrap();
    for i in 0..5 {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        ws.send(Message::text(format!("later {i}"))).await.unwrap();
        ws.next().await.unwrap().unwrap();
        clients.push(ws);
    }
    assert_eq!(healthz(p2), Some(before + 5));
    // Then backend 1 closes its clients with 1012, through the proxy.
    // (Its own port stopped accepting, /healthz there included: the admin port says.)
    b1.wait_metric("ws_connections", Duration::from_secs(15), |n| n == 0.0);
    let mut restarts = 0;
    for ws in clients.iter_mut() {
        // A backend 2 client has nothing to read but pings.
        while let Ok(Some(Ok(m))) =
            tokio::time::timeout(Duration::from_millis(300), ws.next()).await
        {
            if let Message::Close(c) = m {
                assert_eq!(c.map(|c| u16::from(c.code)), Some(1012));
                restarts += 1;
                break;
            }
        }
    }
    assert_eq!(restarts as u64, on_b1);
    drop(b2);
}

fn check_lb(profile: &str, cfg: &std::path::Path, extra: &[&str]) -> Value {
    let mut a = vec![
        "check",
        "--profile",
        profile,
        "--format",
        "json",
        "--lb-config",
        cfg.to_str().unwrap(),
    ];
    a.extend_from_slice(extra);
    let o = run(&a);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{a:?}: {}", String::from_utf8_lossy(&o.stderr)))
}

/// `haproxy -c`: HAProxy's own check of a config file.
fn haproxy_c(cfg: &std::path::Path) -> std::process::Output {
    Command::new("haproxy")
        .arg("-c")
        .arg("-f")
        .arg(cfg)
        .output()
        .unwrap()
}

/// `nginx -t`: nginx's own check of a config file (its pid file under `dir`).
fn nginx_t(cfg: &std::path::Path, dir: &std::path::Path) -> std::process::Output {
    Command::new("nginx")
        .arg("-t")
        .arg("-c")
        .arg(cfg)
        .args(["-e", "stderr", "-g"])
        .arg(format!("pid {}/nginx.pid;", dir.display()))
        .output()
        .unwrap()
}

#[test]
fn nginx_listens_with_the_profiles_backlog_and_check_flags_one_without() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("nginx.conf");
    let text = generate(&[
        "nginx",
        "--backends",
        "127.0.0.1:9001",
        "--bind",
        "127.0.0.1:8089",
        "--profile",
        "100k",
    ]);
    assert!(
        text.contains("listen 127.0.0.1:8089 backlog=65535;"),
        "{text}"
    );
    std::fs::write(&cfg, &text).unwrap();
    if have_proxy("nginx") {
        let o = nginx_t(&cfg, dir.path());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // What lb generates for 10k passes lb.backlog; the same file without backlog= (nginx then
    // asks for 511) fails it with the fix.
    std::fs::write(
        &cfg,
        generate(&["nginx", "--backends", "127.0.0.1:9001", "--profile", "10k"]),
    )
    .unwrap();
    let v = check_lb("10k", &cfg, &[]);
    let b = common::element(&v["results"], "id", "lb.backlog");
    assert_eq!(b["status"], "pass", "{b:#}");
    assert_eq!(b["current"], 4096);
    let without = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(" backlog=4096", "");
    std::fs::write(&cfg, without).unwrap();
    let v = check_lb("10k", &cfg, &[]);
    let b = common::element(&v["results"], "id", "lb.backlog");
    assert_eq!(b["status"], "fail", "{b:#}");
    assert_eq!(b["current"], 511);
    assert_eq!(b["target"], 4096);
    assert!(
        b["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("backlog=4096"),
        "{b:#}"
    );
    // A backlog below the profile's is short too.
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace(":80;", ":80 backlog=1024;"),
    )
    .unwrap();
    let v = check_lb("10k", &cfg, &[]);
    let b = common::element(&v["results"], "id", "lb.backlog");
    assert_eq!(
        (b["status"].as_str(), b["current"].as_u64()),
        (Some("fail"), Some(1024))
    );
}

#[test]
fn check_counts_nginx_worker_rlimit_nofile() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("nginx.conf");
    // 30,000 worker connections would hold 15,000 proxied ones, but a worker with 1024 fds
    // holds 512.
    std::fs::write(
        &cfg,
        "worker_processes 1;\nworker_rlimit_nofile 1024;\nevents { worker_connections 30000; }\n\
         http {\n  upstream u { server 127.0.0.1:9001; }\n  server {\n    listen 127.0.0.1:8090 backlog=4096;\n\
         location / { proxy_pass http://u; proxy_read_timeout 120s; proxy_send_timeout 120s; }\n  }\n}\n",
    )
    .unwrap();
    if have_proxy("nginx") {
        let o = nginx_t(&cfg, dir.path());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let v = check_lb("10k", &cfg, &[]);
    let cap = common::element(&v["results"], "id", "lb.max_connections");
    assert_eq!(cap["status"], "fail", "{cap:#}");
    assert_eq!(cap["current"], 512, "{cap:#}");
    let fd = common::element(&v["results"], "id", "lb.fd_limit");
    assert_eq!(fd["status"], "fail", "{fd:#}");
    assert_eq!(fd["current"], 1024, "{fd:#}");
    assert_eq!(fd["target"], 30000 + 256, "{fd:#}");
    assert!(
        fd["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("worker_rlimit_nofile 30256"),
        "{fd:#}"
    );
    // A pid that is not there is an input error, not a finding.
    let o = run(&[
        "check",
        "--lb-config",
        cfg.to_str().unwrap(),
        "--lb-pid",
        "999999999",
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--lb-pid 999999999: no such process"));
}

#[test]
fn lb_bind_is_validated() {
    for (bind, want) in [
        ("nonsense", "--bind 'nonsense': there is no port"),
        ("0.0.0.0:99999", "'99999' is not a port"),
        ("1.2.3:80", "'1.2.3' is not an IPv4 address"),
        ("::1:80", "in brackets"),
        ("bad host:80", "neither an address nor a host name"),
    ] {
        for kind in ["haproxy", "nginx"] {
            let o = run(&["lb", kind, "--backends", "a:1", "--bind", bind]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(3), "{bind}: {err}");
            assert!(
                err.contains(want) && err.contains("ADDR:PORT"),
                "{bind}: {err}"
            );
            assert!(o.stdout.is_empty(), "nothing written for {bind}");
        }
    }
    // What is accepted, both proxies accept (":PORT" is written "*:PORT": nginx refuses ":PORT").
    let dir = tempfile::tempdir().unwrap();
    for bind in ["*:18443", ":18444", "[::1]:18445", "localhost:18446"] {
        if have_proxy("haproxy") {
            let cfg = dir.path().join("haproxy.cfg");
            std::fs::write(
                &cfg,
                generate(&["haproxy", "--backends", "127.0.0.1:9001", "--bind", bind]),
            )
            .unwrap();
            let o = haproxy_c(&cfg);
            assert!(
                o.status.success(),
                "{bind}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        if have_proxy("nginx") {
            let cfg = dir.path().join("nginx.conf");
            let text = generate(&["nginx", "--backends", "127.0.0.1:9001", "--bind", bind]);
            assert!(!text.contains("listen :"), "{text}");
            std::fs::write(&cfg, text).unwrap();
            let o = nginx_t(&cfg, dir.path());
            assert!(
                o.status.success(),
                "{bind}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// HAProxy started with a hard fd limit of `nofile` and without CAP_SYS_RESOURCE (so it cannot
/// raise that limit, even as root).
fn haproxy_limited(cfg: &std::path::Path, nofile: u32) -> std::process::Child {
    Command::new("setpriv")
        .args(["--bounding-set", "-sys_resource", "--", "sh", "-c"])
        .arg(format!(
            "ulimit -n {nofile} && exec haproxy -db -f '{}'",
            cfg.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux)")
}

#[test]
fn haproxy_maxconn_has_headroom_and_check_compares_the_fd_limit_of_the_running_proxy() {
    if !have_proxy("haproxy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = generate(&[
        "haproxy",
        "--backends",
        "127.0.0.1:9001",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--profile",
        "10k",
    ])
    .replace(
        "/run/haproxy/admin.sock",
        &format!("{}/admin.sock", dir.path().display()),
    );
    // 10,000 connections + 10 %, and the fd limit that needs, said in the file.
    assert!(text.contains("global\n    maxconn 11000\n"), "{text}");
    assert!(text.contains("    bind 127.0.0.1:"), "{text}");
    assert!(
        text.contains("\n    maxconn 11000\n    default_backend"),
        "{text}"
    );
    assert!(text.contains("fd limit of at least 22256"), "{text}");
    let big = dir.path().join("big.cfg");
    std::fs::write(&big, &text).unwrap();
    // The real HAProxy agrees that 4096 fds are not enough: it refuses to start.
    let mut p = haproxy_limited(&big, 4096);
    let status = common::wait_exit(
        &mut p,
        Duration::from_secs(10),
        "haproxy with 4096 fds for maxconn 11000 (it must refuse to start)",
    );
    let mut err = String::new();
    p.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(
        !status.success() && err.contains("Cannot raise FD limit"),
        "{err}"
    );
    // The same with maxconn 1000 (2 x 1000 + 256 fds) runs in 4096; check reads that process.
    let small = dir.path().join("small.cfg");
    std::fs::write(&small, text.replace("maxconn 11000", "maxconn 1000")).unwrap();
    let proxy = Kill(haproxy_limited(&small, 4096));
    let pid = proxy.0.id().to_string();
    common::wait_port(port, Duration::from_secs(10), "haproxy");
    let v = check_lb("10k", &big, &["--lb-pid", &pid]);
    let fd = common::element(&v["results"], "id", "lb.fd_limit");
    assert_eq!(fd["status"], "fail", "{fd:#}");
    assert_eq!(fd["current"], 4096, "{fd:#}");
    assert_eq!(fd["target"], 22256, "{fd:#}");
    let note = fd["note"].as_str().unwrap();
    assert!(
        note.contains(&format!("haproxy pid {pid}")) && note.contains("hard limit 4096"),
        "says which limit it compared: {note}"
    );
    assert!(fd["fix"]["runtime"]
        .as_str()
        .unwrap()
        .contains("ulimit -Hn 22256"));
    // The profile's cap is met with headroom.
    let cap = common::element(&v["results"], "id", "lb.max_connections");
    assert_eq!(cap["status"], "pass", "{cap:#}");
    let v = check_lb("10k", &small, &["--lb-pid", &pid]);
    let fd = common::element(&v["results"], "id", "lb.fd_limit");
    assert_eq!(fd["status"], "pass", "{fd:#}");
    assert_eq!(fd["target"], 2256, "{fd:#}");
}
