//! `serve --cluster redis://...`: two real `wstune serve` nodes on a real `redis-server`;
//! the other engines (Redis Cluster, Sentinel, NATS) and cluster-wide presence in
//! `cluster/engines.rs` and `cluster/presence.rs`.

use crate::common;

mod engines;
mod presence;

use common::tungstenite::{clients, next_text};
use common::{free_port, redis, Served};
use futures_util::SinkExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// A node on the Redis at `redis_port`: (process, WebSocket port, admin port).
fn node(app: &str, redis_port: u16) -> (Served, u16, u16) {
    let url = format!("redis://127.0.0.1:{redis_port}/0");
    let n = common::serve(&["--profile", "10k", "--app", app, "--cluster", &url]);
    let (port, admin) = (n.port, n.admin);
    (n, port, admin)
}

fn healthz(admin: u16) -> String {
    common::get(admin, "/healthz")
}

fn wait_backplane(admin: u16, state: &str) {
    let mut h = String::new();
    common::poll(Duration::from_secs(20), || {
        h = healthz(admin);
        h.contains(&format!("\"backplane\":\"{state}\""))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("backplane never {state}: {h}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_spans_nodes_exactly_once_and_survives_a_redis_restart() {
    let rp = free_port();
    let Some(r) = redis(rp) else { return };
    let (_a, pa, aa) = node("broadcast", rp);
    let (_b, pb, ab) = node("broadcast", rp);
    wait_backplane(aa, "up");
    wait_backplane(ab, "up");
    let mut on_a = clients(pa, 3).await;
    let mut on_b = clients(pb, 3).await;
    // A publish on A reaches every client on both nodes, once: the next message after it is
    // the next publish, never a duplicate.
    on_a[0].send(Message::text("m1")).await.unwrap();
    on_a[0].send(Message::text("m2")).await.unwrap();
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        assert_eq!(next_text(ws).await.unwrap(), "m1");
        assert_eq!(next_text(ws).await.unwrap(), "m2");
    }
    // Redis goes away: A keeps serving its own clients (local delivery), nothing crashes.
    drop(r);
    wait_backplane(aa, "down");
    wait_backplane(ab, "down");
    on_a[1].send(Message::text("m3")).await.unwrap();
    for ws in on_a.iter_mut() {
        assert_eq!(next_text(ws).await.unwrap(), "m3");
    }
    let mut late = clients(pb, 1).await; // B still accepts connections
                                         // Redis comes back on the same port: both nodes resubscribe and relay again.
    let _r = redis(rp).unwrap();
    wait_backplane(aa, "up");
    wait_backplane(ab, "up");
    on_b[2].send(Message::text("m4")).await.unwrap();
    for ws in on_a
        .iter_mut()
        .chain(on_b.iter_mut())
        .chain(late.iter_mut())
    {
        // B's clients never saw m3 (it was local to A during the outage); everyone gets m4.
        assert_eq!(next_text(ws).await.unwrap(), "m4");
    }
    assert!(healthz(aa).contains("\"backplane\":\"up\""));
    // The WebSocket port answers the same health check, for load balancers.
    assert!(
        healthz(pa).contains("\"backplane\":\"up\""),
        "{}",
        healthz(pa)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_span_nodes() {
    let rp = free_port();
    let Some(_r) = redis(rp) else { return };
    let (_a, pa, aa) = node("channels", rp);
    let (_b, pb, ab) = node("channels", rp);
    wait_backplane(aa, "up");
    wait_backplane(ab, "up");
    let mut sub_a = clients(pa, 1).await.pop().unwrap();
    let mut sub_b = clients(pb, 1).await.pop().unwrap();
    let mut other_b = clients(pb, 1).await.pop().unwrap();
    for ws in [&mut sub_a, &mut sub_b] {
        ws.send(Message::text(r#"{"op":"subscribe","channel":"prices"}"#))
            .await
            .unwrap();
        assert!(next_text(ws).await.unwrap().contains("subscribed"));
    }
    other_b
        .send(Message::text(r#"{"op":"subscribe","channel":"news"}"#))
        .await
        .unwrap();
    assert!(next_text(&mut other_b)
        .await
        .unwrap()
        .contains("subscribed"));
    let mut publisher = clients(pa, 1).await.pop().unwrap();
    publisher
        .send(Message::text(
            r#"{"op":"publish","channel":"prices","data":{"px":101}}"#,
        ))
        .await
        .unwrap();
    publisher
        .send(Message::text(
            r#"{"op":"publish","channel":"news","data":"hi"}"#,
        ))
        .await
        .unwrap();
    assert_eq!(
        next_text(&mut sub_a).await.unwrap(),
        r#"{"channel":"prices","data":{"px":101}}"#
    );
    assert_eq!(
        next_text(&mut sub_b).await.unwrap(),
        r#"{"channel":"prices","data":{"px":101}}"#
    );
    // Only the channel's subscribers, on either node.
    assert_eq!(
        next_text(&mut other_b).await.unwrap(),
        r#"{"channel":"news","data":"hi"}"#
    );
}

#[test]
fn a_bad_cluster_url_is_refused() {
    let o = common::run(&[
        "serve",
        "--port",
        "0",
        "--admin",
        "off",
        "--cluster",
        "http://nope",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--cluster http://nope: not a Redis URL"),
        "{err}"
    );
    assert!(
        !err.contains("listening on"),
        "refused before the server starts: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuseport_processes_share_one_port() {
    // Two processes accept on the same port (SO_REUSEPORT); the kernel spreads the clients.
    let port = free_port();
    let start = || {
        let p = port.to_string();
        let n = common::serve(&["--profile", "10k", "--reuseport", "--port", &p]);
        let admin = n.admin;
        (n, admin)
    };
    let (_p1, a1) = start();
    let (_p2, a2) = start();
    let mut open = clients(port, 40).await;
    for (i, ws) in open.iter_mut().enumerate() {
        ws.send(Message::text(format!("r{i}"))).await.unwrap();
        assert_eq!(next_text(ws).await.unwrap(), format!("r{i}"));
    }
    let count = |admin: u16| -> u64 {
        let h = healthz(admin);
        let body = h.split("\r\n\r\n").nth(1).unwrap();
        serde_json::from_str::<serde_json::Value>(body).unwrap()["connections"]
            .as_u64()
            .unwrap()
    };
    let (n1, n2) = (count(a1), count(a2));
    assert_eq!(n1 + n2, 40);
    assert!(n1 > 0 && n2 > 0, "both processes accept: {n1} / {n2}");
}
