//! Draining `wstune serve`: `/readyz` turns 503 before the first close, every client gets
//! 1012, the closes are spread evenly over `--drain-over`, the process exits 0; and
//! `POST /api/drain` begins the same drain without a signal.

use crate::common::{self, ws};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Raise this process's soft open-file limit to its hard limit (the clients' sockets).
fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    r.rlim_cur
}

/// A raw client: upgrade (holding a place of `gate` until then), count itself in `up`, then
/// wait (up to `limit`) for the server's close frame: when it came and its code. It answers
/// the close and waits for the FIN, as a well-behaved client does, so the server finishes
/// without its grace period.
async fn client(
    port: u16,
    gate: Arc<tokio::sync::Semaphore>,
    up: Arc<AtomicUsize>,
    limit: Duration,
) -> Option<(Instant, u16)> {
    let permit = gate.acquire_owned().await.ok()?;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(ws::UPGRADE.as_bytes()).await.ok()?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    let head_end = loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    if !buf.starts_with(b"HTTP/1.1 101") {
        return None;
    }
    buf.drain(..head_end);
    drop(permit);
    up.fetch_add(1, Relaxed);
    let frame = async {
        loop {
            // A server frame: unmasked; a close's payload is at most 125 bytes.
            while buf.len() >= 2 && buf.len() >= 2 + (buf[1] & 0x7f) as usize {
                let (op, len) = (buf[0] & 0x0f, (buf[1] & 0x7f) as usize);
                if len >= 126 {
                    return None;
                }
                if op == 8 {
                    let code = if len >= 2 {
                        u16::from_be_bytes([buf[2], buf[3]])
                    } else {
                        1005
                    };
                    return Some((Instant::now(), code));
                }
                buf.drain(..2 + len);
            }
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let got = tokio::time::timeout(limit, frame).await.ok()??;
    let _ = s
        .write_all(&ws::frame(true, 8, &got.1.to_be_bytes(), true))
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while matches!(s.read(&mut chunk).await, Ok(n) if n > 0) {}
    })
    .await;
    Some(got)
}

/// Poll `/readyz` on `admin` every few milliseconds until it answers 503: when it first did.
fn watch_readyz(admin: u16, stop: Arc<AtomicUsize>) -> std::thread::JoinHandle<Option<Instant>> {
    std::thread::spawn(move || {
        while stop.load(Relaxed) == 0 {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", admin)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
                let mut r = String::new();
                let _ = s.read_to_string(&mut r);
                if ws::status_of(&r) == 503 {
                    return Some(Instant::now());
                }
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        None
    })
}

#[test]
fn sigterm_drains_10k_connections_with_1012_spread_evenly_over_drain_over() {
    const N: usize = 10_000;
    const OVER: f64 = 10.0;
    const DELAY: f64 = 1.0;
    let nofile = raise_nofile();
    if nofile < N as u64 + 1000 {
        return common::skip(
            "drain",
            &format!("this process may open {nofile} files; 10,000 clients need more"),
        );
    }
    let started = Instant::now();
    let mut srv = common::serve(&[
        "--profile",
        "10k",
        "--max-connections",
        "12000",
        "--drain-over",
        "10",
        "--drain-delay",
        "1",
    ]);
    assert!(
        srv.head
            .iter()
            .any(|l| l.contains("drain: closes spread over s (1012)")),
        "{:#?}",
        srv.head
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let up = Arc::new(AtomicUsize::new(0));
    let port = srv.port;
    // At most 256 handshakes in flight: a burst of 10,000 SYNs would overflow the accept
    // queue and put clients on the 1 s SYN retry.
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    let clients: Vec<_> = (0..N)
        .map(|_| {
            rt.spawn(client(
                port,
                gate.clone(),
                up.clone(),
                Duration::from_secs(40),
            ))
        })
        .collect();
    common::wait_until("10,000 clients upgraded", Duration::from_secs(60), || {
        up.load(Relaxed) == N
    });
    srv.wait_metric("ws_connections", Duration::from_secs(10), |v| v == N as f64);
    assert!(common::get(srv.admin, "/readyz").starts_with("HTTP/1.1 200"));
    let connected = started.elapsed();
    let stop = Arc::new(AtomicUsize::new(0));
    let readyz = watch_readyz(srv.admin, stop.clone());
    let t0 = Instant::now();
    common::signal(srv.pid(), "-TERM");
    let results: Vec<Option<(Instant, u16)>> = rt.block_on(async {
        let mut out = Vec::with_capacity(N);
        for c in clients {
            out.push(c.await.unwrap());
        }
        out
    });
    stop.store(1, Relaxed);
    let not_ready = readyz.join().unwrap().expect("/readyz never answered 503");
    let status = srv.wait_exit(Duration::from_secs(15));
    let closed: Vec<(Instant, u16)> = results.iter().flatten().copied().collect();
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for (_, c) in &closed {
        *codes.entry(*c).or_default() += 1;
    }
    let first = closed
        .iter()
        .map(|(t, _)| *t)
        .min()
        .expect("no close at all");
    let secs: Vec<f64> = closed
        .iter()
        .map(|(t, _)| t.duration_since(t0).as_secs_f64() - DELAY)
        .collect();
    let mut buckets = [0usize; 12];
    for s in &secs {
        buckets[(s.max(0.0) as usize).min(11)] += 1;
    }
    let histogram: Vec<String> = buckets
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "{i:>2}-{:<2} s {n:>5} {}",
                i + 1,
                "#".repeat(n * 400 / N.max(1))
            )
        })
        .collect();
    println!(
        "drain of {} connections (connected in {connected:?}): /readyz 503 after {:?}, first \
         close after {:?}, close codes {codes:?}; closes a second from the end of the delay:\n{}",
        closed.len(),
        not_ready.duration_since(t0),
        first.duration_since(t0),
        histogram.join("\n")
    );
    assert_eq!(closed.len(), N, "clients without a close frame");
    assert_eq!(codes, [(1012, N)].into(), "close codes");
    assert!(
        not_ready < first,
        "/readyz answered 503 only after the first close"
    );
    let earliest = secs.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        earliest >= 0.0,
        "a close {earliest:.3} s before the delay ended"
    );
    let latest = secs.iter().cloned().fold(0.0, f64::max);
    assert!(
        latest <= OVER + 1.0,
        "a close {latest:.3} s into a {OVER} s window"
    );
    for (i, n) in buckets[..10].iter().enumerate() {
        let share = *n as f64 / N as f64;
        assert!(
            (0.05..=0.15).contains(&share),
            "second {i} of the window holds {:.1} % of the closes:\n{}",
            share * 100.0,
            histogram.join("\n")
        );
    }
    assert!(status.success(), "wstune serve exited with {status}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn post_api_drain_closes_with_1012_stays_up_not_ready_and_a_second_call_is_409() {
    const KEY: &str = "k3y-0f-the-drain-test-Zq81xv";
    let mut srv = common::serve_env(
        &["--profile", "10k", "--drain-delay", "0"],
        &[("WSTUNE_API_KEY", Some(KEY))],
    );
    let mut clients: Vec<_> = (0..20).map(|_| ws::upgraded(srv.port, None)).collect();
    srv.wait_metric("ws_connections", Duration::from_secs(10), |v| v == 20.0);
    let post = |path: &str, key: Option<&str>, body: &str| {
        let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
        common::http(
            srv.admin,
            format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    assert_eq!(ws::status_of(&post("/api/drain", None, "")), 401);
    assert_eq!(
        ws::status_of(&post("/api/drain", Some(KEY), r#"{"over":-3}"#)),
        400
    );
    assert!(common::get(srv.admin, "/readyz").starts_with("HTTP/1.1 200"));
    let r = post("/api/drain", Some(KEY), r#"{"over":1}"#);
    assert_eq!(ws::status_of(&r), 202, "{r}");
    let v: serde_json::Value = serde_json::from_str(common::body(&r)).unwrap();
    assert_eq!(v["connections"], 20, "{v}");
    assert_eq!(v["over_secs"], 1.0, "{v}");
    let ready = common::get(srv.admin, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(common::body(&ready).contains("draining"), "{ready}");
    let again = post("/api/drain?over=0", Some(KEY), "");
    assert_eq!(ws::status_of(&again), 409, "{again}");
    assert!(again.contains("\"over_secs\":1"), "{again}");
    let start = Instant::now();
    for c in &mut clients {
        assert_eq!(ws::close_code(c), Some(1012));
        c.write_all(&ws::frame(true, 8, &1012u16.to_be_bytes(), true))
            .unwrap();
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    srv.wait_metric("ws_connections", Duration::from_secs(10), |v| v == 0.0);
    // Drained by the API: still up and live, not ready, until a signal.
    assert!(
        srv.proc.0.try_wait().unwrap().is_none(),
        "the server exited"
    );
    assert!(common::get(srv.admin, "/healthz").starts_with("HTTP/1.1 200"));
    assert!(common::get(srv.admin, "/readyz").contains("\"phase\":\"drained\""));
    common::signal(srv.pid(), "-TERM");
    assert!(srv.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn the_supervisor_drains_every_process_through_its_api_and_its_readyz_follows() {
    const KEY: &str = "k3y-0f-the-supervisor-drain-Zq81";
    let mut srv = common::serve_env(
        &["--profile", "10k", "--processes", "2", "--drain-delay", "0"],
        &[("WSTUNE_API_KEY", Some(KEY))],
    );
    let mut clients: Vec<_> = (0..6).map(|_| ws::upgraded(srv.port, None)).collect();
    srv.wait_metric("ws_connections", Duration::from_secs(10), |v| v == 6.0);
    let ready = common::get(srv.admin, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(common::body(&ready).contains("\"ready\":2"), "{ready}");
    let post = || {
        srv.admin_api()
            .with_key(KEY)
            .api("POST", "/api/drain?over=1")
    };
    let r = post();
    assert_eq!(ws::status_of(&r), 202, "{r}");
    let v: serde_json::Value = serde_json::from_str(common::body(&r)).unwrap();
    assert_eq!(
        (v["began"].as_u64(), v["connections"].as_u64()),
        (Some(2), Some(6)),
        "{v}"
    );
    let not_ready = common::get(srv.admin, "/readyz");
    assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
    let again = post();
    assert_eq!(ws::status_of(&again), 409, "{again}");
    for c in &mut clients {
        assert_eq!(ws::close_code(c), Some(1012));
        c.write_all(&ws::frame(true, 8, &1012u16.to_be_bytes(), true))
            .unwrap();
    }
    srv.wait_metric("ws_connections", Duration::from_secs(10), |v| v == 0.0);
    assert!(
        srv.proc.0.try_wait().unwrap().is_none(),
        "the supervisor exited"
    );
    common::signal(srv.pid(), "-TERM");
    assert!(srv.wait_exit(Duration::from_secs(20)).success());
}
