//! History and recovery across processes and Redis nodes: a subscriber of a killed process
//! recovers on any other, positions are shared through the stream so a new node recovers from
//! it, a forgotten stream is too old everywhere, and one publisher cannot push out the others.

use crate::channels_api::{connect, curl, json, nothing_more, publish, secrets};
use crate::common;
use common::tungstenite::next_text;
use common::Served;
use serde_json::json;
use std::time::Duration;

use super::{
    history_server, is_stamp, next, one_publisher_cannot_push_out_other_channels, send,
    subscribe_from, take,
};

/// The `--processes` supervisor positions every publication, so a subscriber whose process
/// is killed recovers on whichever process it reconnects to, the restarted one included
/// (which took the supervisor's history before it served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_processes_a_subscriber_of_a_killed_process_recovers_on_any() {
    let d = secrets();
    let s = history_server(&d, "100", &["--processes", "2"]);
    let health = |s: &Served| json(common::body(&common::get(s.admin, "/healthz")));
    let conns = |s: &Served| -> Vec<u64> {
        health(s)["process"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["connections"].as_u64().unwrap_or(0))
            .collect()
    };
    let mut sub = connect(s.port, "", None).await.unwrap();
    // Before the supervisor has a stream for the channel a process answers a stamp of the
    // supervisor's (an epoch of its own would not be the supervisor's).
    let none = subscribe_from(&mut sub, "p", None).await;
    assert!(is_stamp(&none), "{none}");
    let stamp = none["epoch"].as_str().unwrap().to_string();
    // Positions come from the supervisor: a WebSocket publish too.
    let mut publisher = connect(s.port, "", None).await.unwrap();
    send(
        &mut publisher,
        json!({"op": "publish", "channel": "p", "data": 1}),
    )
    .await;
    let first = next(&mut sub).await;
    let epoch = first["epoch"].as_str().unwrap().to_string();
    assert_eq!(first["offset"], 1, "{first}");
    drop(publisher);
    for i in 2..=3 {
        assert_eq!(
            publish(&s, &d, &format!(r#"{{"channel":"p","data":{i}}}"#)).0,
            200
        );
    }
    assert_eq!(
        take(&mut sub, 2, &epoch).await,
        [(2, json!(2)), (3, json!(3))]
    );
    // Kill the subscriber's process (the one holding a connection).
    let i = common::wait_for("the subscriber's process", Duration::from_secs(10), || {
        conns(&s).iter().position(|&n| n == 1)
    });
    let pid = health(&s)["process"][i]["pid"].as_u64().unwrap() as u32;
    common::signal(pid, "-KILL");
    assert!(
        next_text(&mut sub).await.is_none(),
        "the socket closes with its process"
    );
    for i in 4..=6 {
        assert_eq!(
            publish(&s, &d, &format!(r#"{{"channel":"p","data":{i}}}"#)).0,
            200
        );
    }
    common::wait_until(
        "the killed process restarted",
        Duration::from_secs(30),
        || {
            let h = health(&s);
            h["up"] == 2 && h["restarts"].as_u64() >= Some(1)
        },
    );
    // Clients come back until both processes hold some: each recovers the same three.
    let mut back = Vec::new();
    while back.len() < 2 || conns(&s).contains(&0) {
        assert!(
            back.len() < 64,
            "every connection went to one process: {:?}",
            conns(&s)
        );
        let mut ws = connect(s.port, "", None).await.unwrap();
        let a = subscribe_from(&mut ws, "p", Some((3, &epoch))).await;
        assert_eq!(
            (
                a["recovered"].as_bool(),
                a["offset"].as_u64(),
                a["epoch"].as_str()
            ),
            (Some(true), Some(6), Some(epoch.as_str())),
            "{a}"
        );
        assert_eq!(
            take(&mut ws, 3, &epoch).await,
            (4..=6).map(|i| (i, json!(i))).collect::<Vec<_>>()
        );
        back.push(ws);
    }
    // A client that subscribed before the first publication recovers the whole stream, on
    // either process (the restarted one took the supervisor's tombstones and stamps); one
    // with `(0, "")`, which names no time, is told it is too old.
    let mut bare = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut bare, "p", Some((0, ""))).await;
    assert_eq!(
        (a["recovered"].as_bool(), a["reason"].as_str()),
        (Some(false), Some("too_old")),
        "{a}"
    );
    back.push(bare);
    let (mut on_each, mut served) = (Vec::new(), [false; 2]);
    while !(served[0] && served[1]) {
        assert!(on_each.len() < 64, "every connection went to one process");
        let was = conns(&s);
        let mut ws = connect(s.port, "", None).await.unwrap();
        let a = subscribe_from(&mut ws, "p", Some((0, &stamp))).await;
        let now = conns(&s);
        if let Some(i) = (0..2).find(|&i| now.get(i) > was.get(i)) {
            served[i] = true;
        }
        assert_eq!(a["recovered"], true, "{a}");
        assert_eq!(
            take(&mut ws, 6, &epoch).await,
            (1..=6).map(|i| (i, json!(i))).collect::<Vec<_>>()
        );
        on_each.push(ws);
    }
    back.extend(on_each);
    let mut early = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut early, "p", Some((0, &stamp))).await;
    assert_eq!(a["recovered"], true, "{a}");
    assert_eq!(
        take(&mut early, 6, &epoch).await,
        (1..=6).map(|i| (i, json!(i))).collect::<Vec<_>>()
    );
    back.push(early);
    let h = d.path().join("auth-header");
    let (code, body) = curl(s.admin, "GET", "/api/channels/p", Some(&h), "");
    let v = json(&body);
    assert_eq!(
        (
            code,
            v["offset"].as_u64(),
            v["epoch"].as_str(),
            v["history"].as_u64()
        ),
        (200, Some(6), Some(epoch.as_str()), Some(6)),
        "{body}"
    );
    assert_eq!(publish(&s, &d, r#"{"channel":"p","data":7}"#).0, 200);
    for ws in back.iter_mut() {
        assert_eq!(take(ws, 1, &epoch).await, [(7, json!(7))]);
    }
    for ws in back.iter_mut() {
        nothing_more(ws).await;
    }
}

/// `--cluster`: Redis positions every node's publications (one Lua script per publish), so a
/// subscriber recovers on another node, and on a node started after the publications, which
/// reads them from the channel's Redis stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_redis_nodes_positions_are_shared_and_a_new_node_recovers_from_the_stream() {
    let rp = common::free_port();
    let Some(_redis) = common::redis(rp) else {
        return;
    };
    let d = secrets();
    let url = format!("redis://127.0.0.1:{rp}/0");
    let node = || {
        let n = history_server(&d, "100", &["--cluster", &url]);
        common::wait_until("the backplane up", Duration::from_secs(20), || {
            common::get(n.admin, "/healthz").contains("\"backplane\":\"up\"")
        });
        n
    };
    let (a, b) = (node(), node());
    let mut sub = connect(a.port, "", None).await.unwrap();
    subscribe_from(&mut sub, "n", None).await;
    let mut on_b = connect(b.port, "", None).await.unwrap();
    let mut on_a = connect(a.port, "", None).await.unwrap();
    let (code, body) = publish(&a, &d, r#"{"channel":"n","data":1}"#);
    assert_eq!(code, 200, "{body}");
    let first = next(&mut sub).await;
    assert_eq!(
        (first["offset"].as_u64(), &first["data"]),
        (Some(1), &json!(1)),
        "{first}"
    );
    let epoch = first["epoch"].as_str().unwrap().to_string();
    send(
        &mut on_b,
        json!({"op": "publish", "channel": "n", "data": 2}),
    )
    .await;
    assert_eq!(take(&mut sub, 1, &epoch).await, [(2, json!(2))]);
    drop(sub);
    publish(&b, &d, r#"{"channel":"n","data":3}"#);
    send(
        &mut on_a,
        json!({"op": "publish", "channel": "n", "data": 4}),
    )
    .await;
    // Back on the other node: the two it missed, then live ones from either node.
    let mut back = connect(b.port, "", None).await.unwrap();
    let wait_top = |s: &Served, top: u64| {
        let h = d.path().join("auth-header");
        common::wait_until(
            "the publications on the node",
            Duration::from_secs(10),
            || {
                let (_, body) = curl(s.admin, "GET", "/api/channels/n", Some(&h), "");
                json(&body)["offset"] == top
            },
        );
    };
    wait_top(&b, 4);
    let answer = subscribe_from(&mut back, "n", Some((2, &epoch))).await;
    assert_eq!(
        (answer["recovered"].as_bool(), answer["offset"].as_u64()),
        (Some(true), Some(4)),
        "{answer}"
    );
    assert_eq!(
        take(&mut back, 2, &epoch).await,
        [(3, json!(3)), (4, json!(4))]
    );
    publish(&a, &d, r#"{"channel":"n","data":5}"#);
    assert_eq!(take(&mut back, 1, &epoch).await, [(5, json!(5))]);
    nothing_more(&mut back).await;
    // A node started now has seen none of them: it reads the stream from Redis.
    let c = node();
    let mut late = connect(c.port, "", None).await.unwrap();
    let answer = subscribe_from(&mut late, "n", Some((2, &epoch))).await;
    assert_eq!(
        (answer["recovered"].as_bool(), answer["offset"].as_u64()),
        (Some(true), Some(5)),
        "{answer}"
    );
    assert_eq!(
        take(&mut late, 3, &epoch).await,
        (3..=5).map(|i| (i, json!(i))).collect::<Vec<_>>()
    );
    send(
        &mut on_b,
        json!({"op": "publish", "channel": "n", "data": 6}),
    )
    .await;
    assert_eq!(take(&mut late, 1, &epoch).await, [(6, json!(6))]);
    assert_eq!(take(&mut back, 1, &epoch).await, [(6, json!(6))]);
    nothing_more(&mut late).await;
    // A position older than the stream keeps: too old, from Redis too.
    let mut old = connect(c.port, "", None).await.unwrap();
    let answer = subscribe_from(&mut old, "n", Some((2, "another-epoch"))).await;
    assert_eq!(
        (answer["recovered"].as_bool(), answer["reason"].as_str()),
        (Some(false), Some("epoch")),
        "{answer}"
    );
}

/// Under `--cluster` a forgotten stream is too old on every node too: the node that gave a
/// stamp decides it from its tombstones, another node (which cannot tell what the first one
/// saw) answers `too_old`, and Redis, which forgets a stream's epoch with it, is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_redis_nodes_a_forgotten_stream_is_too_old() {
    let rp = common::free_port();
    let Some(_redis) = common::redis(rp) else {
        return;
    };
    let d = secrets();
    let url = format!("redis://127.0.0.1:{rp}/0");
    let node = || {
        let n = history_server(&d, "100", &["--history-ttl", "2", "--cluster", &url]);
        common::wait_until("the backplane up", Duration::from_secs(20), || {
            common::get(n.admin, "/healthz").contains("\"backplane\":\"up\"")
        });
        n
    };
    let (a, b) = (node(), node());
    let mut sub = connect(a.port, "", None).await.unwrap();
    let before = subscribe_from(&mut sub, "gone", None).await;
    let stamp = before["epoch"].as_str().unwrap().to_string();
    let mut epoch = String::new();
    for i in 1..=3 {
        let (code, body) = publish(&b, &d, &format!(r#"{{"channel":"gone","data":{i}}}"#));
        assert_eq!(code, 200, "{body}");
        if let Some(e) = json(&body)["epoch"].as_str() {
            epoch = e.to_string();
        }
    }
    let first = next(&mut sub).await;
    if epoch.is_empty() {
        epoch = first["epoch"].as_str().unwrap().to_string();
    }
    drop(sub);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for n in [&a, &b] {
        for from in [(0, ""), (0, stamp.as_str()), (1, epoch.as_str())] {
            let mut ws = connect(n.port, "", None).await.unwrap();
            let v = subscribe_from(&mut ws, "gone", Some(from)).await;
            assert_eq!(
                (v["recovered"].as_bool(), v["reason"].as_str()),
                (Some(false), Some("too_old")),
                "{from:?}: {v}"
            );
            nothing_more(&mut ws).await;
        }
    }
    assert!(is_stamp(&before), "{before}");
}

/// Under `--processes` too: the process copies and the supervisor forget the stream alike,
/// and every process answers `too_old`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_processes_a_forgotten_stream_is_too_old() {
    let d = secrets();
    let s = history_server(&d, "100", &["--history-ttl", "2", "--processes", "2"]);
    let mut sub = connect(s.port, "", None).await.unwrap();
    let before = subscribe_from(&mut sub, "gone", None).await;
    let stamp = before["epoch"].as_str().unwrap().to_string();
    for i in 1..=3 {
        let (code, body) = publish(&s, &d, &format!(r#"{{"channel":"gone","data":{i}}}"#));
        assert_eq!(code, 200, "{body}");
    }
    let first = next(&mut sub).await;
    let epoch = first["epoch"].as_str().unwrap().to_string();
    drop(sub);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for _ in 0..8 {
        for from in [(0, ""), (0, stamp.as_str()), (1, epoch.as_str())] {
            let mut ws = connect(s.port, "", None).await.unwrap();
            let v = subscribe_from(&mut ws, "gone", Some(from)).await;
            assert_eq!(
                (v["recovered"].as_bool(), v["reason"].as_str()),
                (Some(false), Some("too_old")),
                "{from:?}: {v}"
            );
        }
    }
    assert!(is_stamp(&before), "{before}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_processes_one_publisher_cannot_push_out_other_channels() {
    one_publisher_cannot_push_out_other_channels(&["--processes", "2"]).await;
}
