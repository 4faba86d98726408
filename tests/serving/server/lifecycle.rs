//! The server's life and wiring: channels, blocking handlers on the offload pool, SIGTERM closing
//! every client with 1012, the settings table and fd warning at start, SO_REUSEPORT accept loops.

use crate::common;

use super::serve_10k;
use common::ws::{close_code, frame, read_frame, status_of, upgraded};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn channels_subscribe_publish_unsubscribe() {
    let srv = serve_10k(&["--app", "channels"]);
    let mut a = upgraded(srv.port, None);
    let mut b = upgraded(srv.port, None);
    let send =
        |s: &mut TcpStream, t: &str| s.write_all(&frame(true, 1, t.as_bytes(), true)).unwrap();
    let recv = |s: &mut TcpStream| String::from_utf8(read_frame(s).unwrap().1).unwrap();
    send(&mut a, r#"{"op":"subscribe","channel":"prices"}"#);
    assert_eq!(recv(&mut a), r#"{"channel":"prices","op":"subscribed"}"#);
    send(
        &mut b,
        r#"{"op":"publish","channel":"prices","data":{"eur":1.08}}"#,
    );
    assert_eq!(recv(&mut a), r#"{"channel":"prices","data":{"eur":1.08}}"#);
    send(&mut b, "not json");
    assert!(recv(&mut b).contains(r#""op":"error""#));
    send(&mut a, r#"{"op":"unsubscribe","channel":"prices"}"#);
    assert_eq!(recv(&mut a), r#"{"channel":"prices","op":"unsubscribed"}"#);
    send(&mut b, r#"{"op":"publish","channel":"prices","data":2}"#);
    send(&mut a, r#"{"op":"subscribe","channel":"other"}"#);
    assert!(
        recv(&mut a).contains("subscribed"),
        "nothing from prices arrived in between"
    );
    b.write_all(&frame(true, 2, b"\x01", true)).unwrap();
    assert_eq!(close_code(&mut b), Some(1003));
}

#[test]
fn blocking_handlers_run_on_the_offload_pool() {
    let srv = serve_10k(&[
        "--handler",
        "block:250",
        "--offload-pool",
        "4",
        "--workers",
        "1",
    ]);
    let mut socks: Vec<TcpStream> = (0..4).map(|_| upgraded(srv.port, None)).collect();
    let start = Instant::now();
    for s in &mut socks {
        s.write_all(&frame(true, 1, b"job", true)).unwrap();
    }
    for s in &mut socks {
        assert_eq!(read_frame(s), Some((1, b"job".to_vec())));
    }
    // Four 250 ms jobs on one I/O thread finish together (inline they would take 1 s): they ran
    // in the pool. The margin is wide so a loaded CI box cannot tip it.
    assert!(
        start.elapsed() < Duration::from_millis(700),
        "{:?}",
        start.elapsed()
    );
    srv.assert_metric("ws_offload_jobs_total", |v| v == 4.0);
    assert!(srv.get("/metrics").contains("ws_offload_queue_depth 0"));
}

#[test]
fn sigterm_closes_every_client_with_1012_and_exits() {
    let mut srv = serve_10k(&["--drain-delay", "0"]);
    let mut a = upgraded(srv.port, None);
    let mut b = upgraded(srv.port, None);
    common::signal(srv.pid(), "-TERM");
    assert_eq!(close_code(&mut a), Some(1012));
    assert_eq!(close_code(&mut b), Some(1012));
    a.write_all(&frame(true, 8, &1012u16.to_be_bytes(), true))
        .unwrap();
    b.write_all(&frame(true, 8, &1012u16.to_be_bytes(), true))
        .unwrap();
    let status = srv.wait_exit(Duration::from_secs(10));
    assert!(status.success());
}

#[test]
fn settings_table_and_fd_warning_at_start() {
    let srv = serve_10k(&["--max-connections", "50000", "--workers", "2"]);
    let log = srv.log_text();
    assert!(
        log.contains("max connections") && log.contains("50000") && log.contains("flag"),
        "{log}"
    );
    assert!(
        log.contains("heartbeat interval s") && log.contains("profile"),
        "{log}"
    );
    // This machine's hard limit (20000) is below 50000: the server says so.
    let hard: u64 = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .nth(4)
        .unwrap()
        .parse()
        .unwrap_or(u64::MAX);
    if hard < 50_000 {
        assert!(log.contains("fewer than max connections 50000"), "{log}");
    }
    // The check engine's verdict on this host for the profile, at start: the same failures
    // `wstune check` finds here, by id, or no such line when there are none.
    let report = common::json_of(&common::wstune(&[
        "check",
        "--profile",
        "10k",
        "-f",
        "json",
    ]));
    let failed: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    if failed.is_empty() {
        assert!(!log.contains("this host fails"), "{log}");
    } else {
        assert!(log.contains("this host fails"), "{log}");
        for id in failed {
            assert!(log.contains(&format!("{id} (")), "{id} missing: {log}");
        }
    }
    let metrics = srv.get("/metrics");
    assert!(
        metrics.contains("ws_worker_busy_seconds_total{worker=\"1\"}"),
        "{metrics}"
    );
    assert_eq!(status_of(&srv.get("/nope")), 404);
}

#[test]
fn reuseport_accept_loops_share_one_port() {
    let srv = serve_10k(&["--reuseport", "--acceptors", "3"]);
    let log = srv.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("accept loops") && l.contains(" 3 ")),
        "{log}"
    );
    for i in 0..20 {
        let mut s = upgraded(srv.port, None);
        let msg = format!("via reuseport {i}");
        s.write_all(&frame(true, 1, msg.as_bytes(), true)).unwrap();
        assert_eq!(read_frame(&mut s), Some((1, msg.into_bytes())));
    }
}

/// A TLS listener that nothing rate limits says so at start, naming the settings that bound
/// replayed handshakes; with a rate at accept, and without TLS, it does not.
#[test]
fn a_tls_listener_without_handshake_rates_says_so_at_start() {
    let Some((srv, _cert, _dir)) = common::serve_tls(&["--profile", "10k", "--app", "echo"]) else {
        return;
    };
    let log = srv.log_text();
    assert!(
        log.contains("TLS handshakes are not rate limited")
            && log.contains("limits.connection_rate_per_ip")
            && log.contains("limits.exempt"),
        "{log}"
    );
    let Some((limited, _cert, _dir)) = common::serve_tls(&[
        "--profile",
        "10k",
        "--app",
        "echo",
        "--conn-rate-per-ip",
        "100",
    ]) else {
        return;
    };
    let log = limited.log_text();
    assert!(log.contains("listening on wss://"), "{log}");
    assert!(!log.contains("not rate limited"), "{log}");
    let plain = common::serve(&["--profile", "10k", "--app", "echo"]);
    assert!(!plain.log_text().contains("not rate limited"));
}

/// Ctrl-C (SIGINT) with nothing connected stops the server at once: the drain delay is for the
/// clients it holds, and it holds none. With a client held, the first SIGINT begins the drain
/// (the delay keeps the client served) and a second one ends the process at once, exit 130,
/// saying what it cut short.
#[test]
fn sigint_when_idle_exits_at_once_and_a_second_sigint_forces_the_exit() {
    let mut srv = serve_10k(&[]);
    let asked = Instant::now();
    common::signal(srv.pid(), "-INT");
    let status = srv.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}: {}", srv.log_text());
    assert!(
        asked.elapsed() < Duration::from_millis(2000),
        "an idle server took {:?} to stop (the profile's drain delay is 5 s)",
        asked.elapsed()
    );

    let mut srv = serve_10k(&[]);
    let _held = upgraded(srv.port, None);
    common::signal(srv.pid(), "-INT");
    srv.wait_log("the drain to begin", Duration::from_secs(10), |l| {
        l.iter().any(|l| l.contains("shutting down"))
    });
    assert!(
        srv.proc.0.try_wait().unwrap().is_none(),
        "the drain delay keeps a server with a client up"
    );
    let asked = Instant::now();
    common::signal(srv.pid(), "-INT");
    let status = srv.wait_exit(Duration::from_secs(20));
    assert!(
        asked.elapsed() < Duration::from_millis(2000),
        "a second SIGINT took {:?}",
        asked.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", srv.log_text());
    let log = srv.log_text();
    assert!(
        log.contains("SIGINT again while stopping")
            && log.contains("1 connection(s) still open are cut without a close frame"),
        "{log}"
    );
}

/// An admin port already in use is refused as clearly as the WebSocket port: the address, the
/// flag, what holds it and the fixes, exit 3, no bare OS error; alone and under a supervisor.
#[test]
fn an_admin_port_in_use_is_named_with_its_flag_and_the_fixes() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    for processes in ["1", "2"] {
        let o = common::run_bounded(
            std::process::Command::new(common::bin()).args([
                "serve",
                "--profile",
                "10k",
                "--port",
                "0",
                "--admin",
                &addr,
                "--processes",
                processes,
            ]),
            Duration::from_secs(60),
        );
        let err = common::stderr(&o);
        assert_eq!(common::code(&o), 3, "--processes {processes}: {err}");
        for want in [
            format!("cannot listen on --admin {addr}"),
            "the port is in use".to_string(),
            format!("ss -ltnp 'sport = :{port}'"),
            "--admin 127.0.0.1:0".to_string(),
            "--admin off".to_string(),
        ] {
            assert!(
                err.contains(&want),
                "--processes {processes}: no {want:?} in:\n{err}"
            );
        }
        assert!(!err.contains("os error"), "--processes {processes}: {err}");
    }
    drop(held);
}
