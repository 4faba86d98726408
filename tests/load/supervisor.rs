//! `serve --processes N`: a supervisor and its server processes on one port, driven as an
//! operator would (real binary, real sockets, real signals).
#![cfg(target_os = "linux")]

use crate::common;

use common::tungstenite::{clients, next_text, Ws};
use common::{redis, signal, Served};
use futures_util::{SinkExt, StreamExt};
use std::process::Command;
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

fn supervisor(app: &str, n: &str) -> Served {
    common::serve(&["--profile", "10k", "--app", app, "--processes", n])
}

/// The body of `GET path` on the admin port.
fn get(admin: u16, path: &str) -> String {
    common::body(&common::get(admin, path)).to_string()
}

fn healthz(admin: u16) -> serde_json::Value {
    serde_json::from_str(&get(admin, "/healthz")).unwrap()
}

/// The value of one series (exact name and labels) in a metrics text.
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

/// Per-process (pid, connections) from the supervisor's /healthz.
fn per_process(admin: u16) -> Vec<(u64, u64)> {
    healthz(admin)["process"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap_or(0),
                p["connections"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Wait (bounded) until /healthz satisfies `ok`.
fn wait_health(
    admin: u16,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    common::poll(Duration::from_secs(30), || {
        last = healthz(admin);
        ok(&last).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("never {what}: {last:#}"))
}

async fn echo(ws: &mut Ws, text: &str) -> Option<String> {
    ws.send(Message::text(text)).await.ok()?;
    next_text(ws).await
}

/// Every process holds a client (the kernel spreads them; with dozens of clients on three
/// processes an empty one is a failure to share the port, not bad luck: p < 1e-5).
fn assert_spread(admin: u16, n: u64) {
    // Polled: on a loaded machine a process can miss one scrape (it then counts 0), and the
    // last connections may still be registering.
    let mut per = Vec::new();
    common::poll(Duration::from_secs(10), || {
        per = per_process(admin);
        (per.iter().map(|p| p.1).sum::<u64>() == n).then_some(())
    });
    assert_eq!(per.iter().map(|p| p.1).sum::<u64>(), n, "{per:?}");
    assert!(
        per.iter().all(|p| p.1 > 0),
        "every process accepts: {per:?}"
    );
}

/// Skip messages until the close frame (within 10 s each); panics on anything else.
async fn close_frame(ws: &mut Ws) -> Option<CloseFrame> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Close(c)))) => return c,
            Ok(Some(Ok(_))) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    }
}

fn alive(pid: u64) -> bool {
    // Gone, or a zombie waiting for a reaper: either way it no longer runs.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_one_port_metrics_summed_and_a_killed_one_restarted() {
    let s = supervisor("echo", "3");
    assert!(
        s.head.iter().any(|l| l.contains("3 processes on one port")),
        "{:#?}",
        s.head
    );
    let mut open = clients(s.port, 36).await;
    for (i, ws) in open.iter_mut().enumerate() {
        assert_eq!(
            echo(ws, &format!("e{i}")).await.as_deref(),
            Some(&*format!("e{i}"))
        );
    }
    assert_spread(s.admin, 36);
    // /metrics: one exposition, each series once, summed over the processes.
    let m = get(s.admin, "/metrics");
    assert_eq!(series(&m, "ws_connections"), 36.0, "{m}");
    assert_eq!(series(&m, "ws_messages_in_total"), 36.0, "{m}");
    assert_eq!(series(&m, "ws_handshakes_accepted_total"), 36.0, "{m}");
    assert_eq!(m.matches("# TYPE ws_connections gauge").count(), 1, "{m}");
    assert_eq!(m.matches("\nws_connections ").count(), 1, "{m}");
    assert_eq!(series(&m, "ws_supervisor_processes_up"), 3.0);
    let per: f64 = (0..3)
        .map(|i| {
            series(
                &m,
                &format!("ws_supervisor_process_connections{{process=\"{i}\"}}"),
            )
        })
        .sum();
    assert_eq!(per, 36.0, "{m}");

    // kill -9 one process: its clients are cut, the others' stay, the port keeps accepting.
    let before = per_process(s.admin);
    let (victim, cut) = before[1];
    signal(victim as u32, "-KILL");
    // Once the supervisor has reaped it (every thread gone, its listener closed: a connection
    // still in a dying listener's accept queue is lost with it, see README), the port accepts
    // on the others, during the restart's backoff or after it.
    wait_health(s.admin, "reaped", |h| h["process"][1]["restarts"] == 1);
    let mut late = clients(s.port, 6).await;
    for ws in late.iter_mut() {
        assert_eq!(echo(ws, "late").await.as_deref(), Some("late"));
    }
    let mut lost = 0;
    for (i, ws) in open.iter_mut().enumerate() {
        match echo(ws, &format!("again{i}")).await {
            Some(t) => assert_eq!(t, format!("again{i}")),
            None => lost += 1,
        }
    }
    assert_eq!(
        lost, cut,
        "only the killed process's clients are lost: {before:?}"
    );
    let h = wait_health(s.admin, "restarted", |h| {
        h["up"] == 3 && h["process"][1]["restarts"] == 1 && h["process"][1]["pid"] != victim
    });
    assert_eq!(h["process"][0]["restarts"], 0, "{h:#}");
    assert!(
        h["process"][1]["last_exit"]
            .as_str()
            .unwrap()
            .contains("SIGKILL"),
        "{h:#}"
    );
    let m = get(s.admin, "/metrics");
    assert_eq!(
        series(&m, "ws_supervisor_restarts_total{process=\"1\"}"),
        1.0
    );
    assert_eq!(
        series(&m, "ws_supervisor_restarts_total{process=\"0\"}"),
        0.0
    );
    // The restarted process takes clients again.
    let mut after = clients(s.port, 30).await;
    for ws in after.iter_mut() {
        assert_eq!(echo(ws, "x").await.as_deref(), Some("x"));
    }
    let per = per_process(s.admin);
    assert!(per[1].1 > 0, "the restarted process accepts: {per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_every_process_with_1012_and_leaves_none_behind() {
    let mut s = supervisor("echo", "3");
    let mut open = clients(s.port, 24).await;
    for ws in open.iter_mut() {
        assert_eq!(echo(ws, "hi").await.as_deref(), Some("hi"));
    }
    assert_spread(s.admin, 24);
    let pids: Vec<u64> = per_process(s.admin).iter().map(|p| p.0).collect();
    let ready = common::get(s.admin, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.contains("\"ready\":3"), "{ready}");
    signal(s.pid(), "-TERM");
    // Not ready while it stops, before the processes' drain delay (5 s) lets a close out.
    common::wait_until(
        "the supervisor's /readyz to answer 503",
        Duration::from_secs(4),
        || common::get(s.admin, "/readyz").starts_with("HTTP/1.1 503"),
    );
    for ws in open.iter_mut() {
        let close = close_frame(ws).await;
        assert_eq!(close.map(|c| c.code), Some(CloseCode::Restart));
    }
    drop(open); // answer the closes so the processes need not wait out the grace
    let status = s.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its supervisor");
    }
}

/// SIGINT to an idle supervisor stops it at once (its processes hold no client to drain); with
/// a client held, a second SIGINT during the drain kills the processes and exits 130 at once,
/// saying so, and leaves none behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_an_idle_supervisor_at_once_and_a_second_one_forces_the_exit() {
    let mut s = supervisor("echo", "2");
    let asked = std::time::Instant::now();
    signal(s.pid(), "-INT");
    let status = s.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", s.log_text());
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "an idle supervisor took {:?} to stop (the profile's drain delay is 5 s)",
        asked.elapsed()
    );

    let mut s = supervisor("echo", "2");
    let mut ws = clients(s.port, 1).await.pop().unwrap();
    assert_eq!(echo(&mut ws, "hi").await.as_deref(), Some("hi"));
    let pids: Vec<u64> = per_process(s.admin).iter().map(|p| p.0).collect();
    signal(s.pid(), "-INT");
    s.wait_log("the stop to begin", Duration::from_secs(10), |l| {
        l.iter()
            .any(|l| l.contains("stopping: every process drains"))
    });
    let asked = std::time::Instant::now();
    signal(s.pid(), "-INT");
    let status = s.wait_exit(Duration::from_secs(20));
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "a second SIGINT took {:?}",
        asked.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", s.log_text());
    assert!(
        s.log_text().contains("SIGINT again while stopping"),
        "{}",
        s.log_text()
    );
    common::wait_until(
        &format!("the processes {pids:?} to end"),
        Duration::from_secs(10),
        || !pids.iter().any(|&p| alive(p)),
    );
    drop(ws);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_killed_with_9_leaves_no_orphan() {
    let s = supervisor("echo", "2");
    let mut ws = clients(s.port, 1).await.pop().unwrap();
    assert_eq!(echo(&mut ws, "hi").await.as_deref(), Some("hi"));
    let pids: Vec<u64> = per_process(s.admin).iter().map(|p| p.0).collect();
    signal(s.pid(), "-KILL");
    // The parent-death signal (SIGTERM) drains the processes: the client gets 1012.
    let close = close_frame(&mut ws).await;
    assert_eq!(close.map(|c| c.code), Some(CloseCode::Restart));
    drop(ws);
    common::wait_until(
        &format!("the processes {pids:?} to end"),
        Duration::from_secs(20),
        || !pids.iter().any(|&p| alive(p)),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_process_exactly_once() {
    let s = supervisor("broadcast", "3");
    let mut all = clients(s.port, 24).await;
    assert_spread(s.admin, 24);
    // Two publishers on (probably) different processes; every client gets each message once,
    // in order: the message after m1 is m2, never a second m1.
    all[0].send(Message::text("m1")).await.unwrap();
    for ws in all.iter_mut() {
        assert_eq!(next_text(ws).await.as_deref(), Some("m1"));
    }
    all[23].send(Message::text("m2")).await.unwrap();
    for ws in all.iter_mut() {
        assert_eq!(next_text(ws).await.as_deref(), Some("m2"));
    }
    // The counters move just after the frames are queued, and a process can miss a scrape
    // on a loaded machine: poll until they settle.
    let mut m = String::new();
    common::poll(Duration::from_secs(10), || {
        m = get(s.admin, "/metrics");
        (series(&m, "ws_messages_out_total") == 48.0).then_some(())
    });
    // Each message crossed to the two other processes once.
    assert_eq!(series(&m, "ws_supervisor_relay_frames_total"), 4.0, "{m}");
    assert_eq!(series(&m, "ws_messages_out_total"), 48.0, "{m}");
    assert_eq!(series(&m, "ws_supervisor_relay_dropped_total"), 0.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_reach_subscribers_of_every_process_exactly_once() {
    let s = supervisor("channels", "3");
    let mut subs = clients(s.port, 18).await;
    let mut others = clients(s.port, 6).await;
    assert_spread(s.admin, 24);
    for ws in subs.iter_mut() {
        ws.send(Message::text(r#"{"op":"subscribe","channel":"prices"}"#))
            .await
            .unwrap();
        assert!(next_text(ws).await.unwrap().contains("subscribed"));
    }
    for ws in others.iter_mut() {
        ws.send(Message::text(r#"{"op":"subscribe","channel":"news"}"#))
            .await
            .unwrap();
        assert!(next_text(ws).await.unwrap().contains("subscribed"));
    }
    let mut publisher = clients(s.port, 1).await.pop().unwrap();
    for px in [101, 102] {
        let m = format!(r#"{{"op":"publish","channel":"prices","data":{{"px":{px}}}}}"#);
        publisher.send(Message::text(m)).await.unwrap();
    }
    publisher
        .send(Message::text(
            r#"{"op":"publish","channel":"news","data":"hi"}"#,
        ))
        .await
        .unwrap();
    for ws in subs.iter_mut() {
        assert_eq!(
            next_text(ws).await.as_deref(),
            Some(r#"{"channel":"prices","data":{"px":101}}"#)
        );
        assert_eq!(
            next_text(ws).await.as_deref(),
            Some(r#"{"channel":"prices","data":{"px":102}}"#)
        );
    }
    // Only the channel's subscribers, on any process: news subscribers never saw prices.
    for ws in others.iter_mut() {
        assert_eq!(
            next_text(ws).await.as_deref(),
            Some(r#"{"channel":"news","data":"hi"}"#)
        );
    }
}

/// `wstune serve ARGS` must refuse with exit 3, saying `want`, and start nothing.
fn refused(args: &[&str], want: &str) {
    let mut all = vec!["serve", "--admin", "off"];
    all.extend_from_slice(args);
    let o = common::run(&all);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err}");
    assert!(!err.contains("listening on"), "{err}");
    assert!(!err.contains("process 0"), "no process started: {err}");
}

#[test]
fn bad_process_counts_and_a_taken_port_are_refused() {
    refused(
        &["--port", "0", "--processes", "0"],
        "--processes 0: a server needs at least one process",
    );
    refused(&["--port", "0", "--processes", "2000"], "more than 1024");
    refused(
        &["--port", "0", "--processes", "many"],
        "'many' is not a process count: use a whole number, auto or cores",
    );
    // A port held by a listener without SO_REUSEPORT: found before any process starts.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    refused(
        &["--profile", "10k", "--port", &port, "--processes", "2"],
        "without SO_REUSEPORT",
    );
    // Too few processes for the connection count under this fd hard limit: the fix is named.
    let o = Command::new("bash")
        .arg("-c")
        .arg(
            "ulimit -n 4096 && exec \"$WSTUNE\" serve --admin off --port 0 --profile 10k \
             --max-connections 10000 --processes 2",
        )
        .env("WSTUNE", common::bin())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--processes 2: each process may hold 5500 of max connections 10000 and needs 5564 file descriptors, above the fd hard limit 4096; use --processes 3 (or auto)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cluster_every_process_is_a_node_on_redis() {
    let rp = common::free_port();
    let Some(_r) = redis(rp) else { return };
    let url = format!("redis://127.0.0.1:{rp}/0");
    let args = |n| {
        [
            "--profile",
            "10k",
            "--app",
            "broadcast",
            "--processes",
            n,
            "--cluster",
            &url,
        ]
        .map(String::from)
    };
    let a = args("2");
    let a = common::serve(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let b = args("1");
    let b = common::serve(&b.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        a.head
            .iter()
            .any(|l| l.contains("relay: Redis (--cluster)")),
        "{:#?}",
        a.head
    );
    wait_health(a.admin, "on Redis", |h| {
        h["process"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["backplane"] == "up")
    });
    common::wait_until("node B to subscribe", Duration::from_secs(20), || {
        get(b.admin, "/healthz").contains("\"backplane\":\"up\"")
    });
    let mut on_a = clients(a.port, 16).await;
    assert_spread(a.admin, 16);
    let mut on_b = clients(b.port, 2).await;
    on_b[0].send(Message::text("from-b")).await.unwrap();
    on_a[0].send(Message::text("from-a")).await.unwrap();
    // Once each, through Redis only (no local relay beside it, or A's clients would get
    // A's message twice).
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        let mut got = vec![next_text(ws).await.unwrap(), next_text(ws).await.unwrap()];
        got.sort();
        assert_eq!(got, ["from-a", "from-b"]);
    }
    on_b[1].send(Message::text("end")).await.unwrap();
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        assert_eq!(
            next_text(ws).await.as_deref(),
            Some("end"),
            "no duplicate before it"
        );
    }
    let m = get(a.admin, "/metrics");
    assert_eq!(series(&m, "ws_supervisor_relay_frames_total"), 0.0, "{m}");
    assert_eq!(series(&m, "ws_backplane_up"), 1.0, "{m}");
}
