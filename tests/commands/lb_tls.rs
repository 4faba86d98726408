//! TLS terminated at a proxy, measured by `selftest` as one server with its backend: the
//! documented HAProxy and nginx recipes against a real HAProxy, a real nginx and `wstune serve`.

use crate::common;
use crate::lb::{generate, have_proxy, run_haproxy};

use common::{free_port, run, Kill};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The documented recipe for TLS at a proxy: HAProxy terminates wss:// in front of a plain
/// `wstune serve`, and `selftest --url wss://... --ca ... --pid HAPROXY --pid SERVE` measures
/// the pair as one server: the handshakes' CPU is HAProxy's, and it counts as the server's,
/// not as another process's noise.
#[test]
fn selftest_measures_tls_terminated_at_haproxy_with_both_pids() {
    if !have_proxy("haproxy") {
        return;
    }
    let backend = common::serve(&["--profile", "10k", "--admin", "off"]);
    let front = free_port();
    let dir = tempfile::tempdir().unwrap();
    let g = wstune::selftest::tls::generate(&["localhost", "127.0.0.1"]).unwrap();
    let (ca, site) = (dir.path().join("ca.pem"), dir.path().join("site.pem"));
    std::fs::write(&ca, &g.ca_pem).unwrap();
    // HAProxy reads the chain and its key from one file.
    std::fs::write(&site, format!("{}{}", g.cert_pem, g.key_pem)).unwrap();
    let cfg = generate(&[
        "haproxy",
        "--backends",
        &format!("127.0.0.1:{}", backend.port),
        "--bind",
        &format!("127.0.0.1:{front}"),
        "--profile",
        "10k",
        "--tls-cert",
        site.to_str().unwrap(),
    ]);
    let proxy = run_haproxy(&cfg, dir.path());
    common::wait_port(front, Duration::from_secs(10), "haproxy");
    measured_as_one_server(front, &ca, proxy.0.id(), backend.pid());
    drop(proxy);
}

/// `selftest --url wss://localhost:FRONT/ --ca CA --pid PROXY --pid BACKEND` with echo-rate and
/// tls-handshake: both run without errors over TLS, and the server measured is both processes.
fn measured_as_one_server(front: u16, ca: &std::path::Path, proxy_pid: u32, serve_pid: u32) {
    let (proxy_pid, serve_pid) = (proxy_pid.to_string(), serve_pid.to_string());
    let o = run(&[
        "selftest",
        "--url",
        &format!("wss://localhost:{front}/"),
        "--ca",
        ca.to_str().unwrap(),
        "--pid",
        &proxy_pid,
        "--pid",
        &serve_pid,
        "--profile",
        "10k",
        "--scenario",
        "echo-rate",
        "--scenario",
        "tls-handshake",
        "--conns",
        "50",
        "--storm-concurrency",
        "8",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    let r = common::json_of(&o);
    assert_ne!(o.status.code(), Some(3), "{r:#}");
    let s = |name: &str| {
        r["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["scenario"] == name)
            .unwrap_or_else(|| panic!("no {name}: {r:#}"))
            .clone()
    };
    let echo = s("echo-rate");
    assert_eq!(echo["errors"], 0, "{echo:#}");
    assert_eq!(echo["tls"]["full"], 50, "{echo:#}");
    let hs = s("tls-handshake");
    assert_eq!(hs["errors"], 0, "{hs:#}");
    assert!(hs["tls"]["full"].as_u64().unwrap() > 0, "{hs:#}");
    // The server is both processes: its memory is theirs added up (more than either alone
    // and half the other; the figure was read a moment before these), and the handshakes' CPU
    // is counted.
    let rss = |pid: &str| -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap();
        kib * 1024.0
    };
    let (proxy_rss, serve_rss) = (rss(&proxy_pid), rss(&serve_pid));
    let reported = echo["server"]["rss_after_bytes"].as_f64().unwrap();
    let (big, small) = (proxy_rss.max(serve_rss), proxy_rss.min(serve_rss));
    assert!(
        reported > big + small / 2.0,
        "server RSS {reported} = HAProxy {proxy_rss} + backend {serve_rss}: {echo:#}"
    );
    assert!(hs["server"]["cpu_secs"].as_f64().unwrap() > 0.0, "{hs:#}");
    assert!(
        hs["handshakes_per_server_core_sec"].as_f64().unwrap() > 0.0,
        "{hs:#}"
    );
}

/// The nginx recipe: nginx terminates TLS in front of a plain `wstune serve` (one process, no
/// master, so one pid is all of nginx).
#[test]
fn selftest_measures_tls_terminated_at_nginx_with_both_pids() {
    if !have_proxy("nginx") {
        return;
    }
    let backend = common::serve(&["--profile", "10k", "--admin", "off"]);
    let front = free_port();
    let dir = tempfile::tempdir().unwrap();
    let g = wstune::selftest::tls::generate(&["localhost", "127.0.0.1"]).unwrap();
    let (ca, crt, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("site.crt"),
        dir.path().join("site.key"),
    );
    std::fs::write(&ca, &g.ca_pem).unwrap();
    std::fs::write(&crt, &g.cert_pem).unwrap();
    std::fs::write(&key, &g.key_pem).unwrap();
    let cfg = generate(&[
        "nginx",
        "--backends",
        &format!("127.0.0.1:{}", backend.port),
        "--bind",
        &format!("127.0.0.1:{front}"),
        "--profile",
        "10k",
        "--tls-cert",
        crt.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
    .replace(
        "worker_processes auto;",
        "worker_processes 1;\nmaster_process off;\ndaemon off;",
    );
    let path = dir.path().join("nginx.conf");
    std::fs::write(&path, cfg).unwrap();
    let proxy = Kill(
        Command::new("nginx")
            .arg("-c")
            .arg(&path)
            .args(["-e", "stderr", "-g"])
            .arg(format!("pid {}/nginx.pid;", dir.path().display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_port(front, Duration::from_secs(10), "nginx");
    measured_as_one_server(front, &ca, proxy.0.id(), backend.pid());
}
