//! Cluster-wide presence: `GET /api/channels/NAME` on either node counts every node's
//! subscribers (heartbeats over the backplane), and a killed node leaves the sum once its
//! heartbeats stop for the expiry.

use crate::common;

use super::wait_backplane;
use common::tungstenite::{clients, next_text};
use common::{free_port, redis, Served};
use futures_util::SinkExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

const KEY: &str = "presence-test-key-0123456789";

fn node(redis_port: u16, key_file: &str) -> Served {
    let url = format!("redis://127.0.0.1:{redis_port}/0");
    common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--cluster",
        &url,
        "--api-key-file",
        key_file,
    ])
}

/// `GET /api/channels/NAME` with the key: the JSON body.
fn channel(admin: u16, name: &str) -> serde_json::Value {
    let r = common::Admin::on(admin)
        .with_key(KEY)
        .api("GET", &format!("/api/channels/{name}"));
    serde_json::from_str(common::body(&r)).unwrap_or_else(|e| panic!("{e}: {r}"))
}

fn wait_count(admin: u16, name: &str, n: u64, within: Duration) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    common::poll(within, || {
        last = channel(admin, name);
        (last["subscribers"] == n).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("{name} never counted {n} on :{admin}: {last}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_sums_every_node_and_forgets_a_killed_one() {
    let rp = free_port();
    let Some(_r) = redis(rp) else { return };
    let d = tempfile::tempdir().unwrap();
    let key = d.path().join("api-key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = key.to_str().unwrap();
    let a = node(rp, key);
    let b = node(rp, key);
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    let mut subs = clients(a.port, 3).await;
    subs.extend(clients(b.port, 2).await);
    for ws in subs.iter_mut() {
        ws.send(Message::text(r#"{"op":"subscribe","channel":"room"}"#))
            .await
            .unwrap();
        assert!(next_text(ws).await.unwrap().contains("subscribed"));
    }
    // Within a heartbeat (2 s) or two, both nodes say 5, with each node's share.
    let on_a = wait_count(a.admin, "room", 5, Duration::from_secs(10));
    let on_b = wait_count(b.admin, "room", 5, Duration::from_secs(10));
    assert_eq!(on_a["local"], 3, "{on_a}");
    assert_eq!(on_b["local"], 2, "{on_b}");
    let mut shares: Vec<u64> = on_a["nodes"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .collect();
    shares.sort();
    assert_eq!(shares, [2, 3], "{on_a}");
    assert_eq!(on_a["live_nodes"], 2);
    assert_eq!(on_a["partial"], false);
    a.wait_metric("ws_backplane_nodes", Duration::from_secs(10), |v| v == 2.0);
    assert_eq!(channel(a.admin, "nobody")["subscribers"], 0);
    // B is killed (SIGKILL: no goodbye): after the expiry (6 s) A counts its own 3 only.
    let t0 = std::time::Instant::now();
    drop(b);
    let after = wait_count(a.admin, "room", 3, Duration::from_secs(15));
    assert!(
        t0.elapsed() >= Duration::from_secs(3),
        "B was forgotten after {:?}: sooner than its heartbeats could have stopped counting",
        t0.elapsed()
    );
    assert_eq!(after["live_nodes"], 1, "{after}");
    a.wait_metric("ws_backplane_nodes", Duration::from_secs(10), |v| v == 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_of_cluster_nodes_counts_each_subscriber_once() {
    // With --processes 2 each process is a node of the cluster and already counts the other;
    // the supervisor's answer merges their views rather than adding overlapping totals.
    let rp = free_port();
    let Some(_r) = redis(rp) else { return };
    let d = tempfile::tempdir().unwrap();
    let key = d.path().join("api-key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = format!("redis://127.0.0.1:{rp}/0");
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--cluster",
        &url,
        "--api-key-file",
        key.to_str().unwrap(),
    ]);
    let mut subs = clients(s.port, 6).await;
    for ws in subs.iter_mut() {
        ws.send(Message::text(r#"{"op":"subscribe","channel":"room"}"#))
            .await
            .unwrap();
        assert!(next_text(ws).await.unwrap().contains("subscribed"));
    }
    // Both processes have heard each other (the view is the same in each, not summed)...
    s.wait_metric("ws_backplane_nodes", Duration::from_secs(20), |v| v == 2.0);
    // ...and a heartbeat later still count each subscriber once.
    std::thread::sleep(presence_interval());
    assert_eq!(channel(s.admin, "room")["subscribers"], 6);
}

/// One heartbeat interval and a little more (the pause is what is tested: a second view).
fn presence_interval() -> Duration {
    Duration::from_millis(2500)
}
