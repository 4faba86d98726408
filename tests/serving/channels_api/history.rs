//! History and recovery: a subscriber that goes away and comes back with its last position
//! gets exactly what it missed, in order, then live publications, with no duplicate; a
//! position the server cannot continue is answered `recovered:false`. On one process, under a
//! concurrent publisher, and bounded per channel; across processes and nodes: across.rs.

use crate::common;

use super::{connect, curl, json, nothing_more, path, publish, secrets};
use common::tungstenite::{next_text, Ws};
use common::Served;
use futures_util::SinkExt;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

mod across;

/// Whether a `subscribed` answer is the stamp of a channel without a stream: offset 0 and an
/// epoch of its own (not empty).
fn is_stamp(answer: &Value) -> bool {
    answer["offset"] == 0 && answer["epoch"].as_str().is_some_and(|e| !e.is_empty())
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

async fn next(ws: &mut Ws) -> Value {
    json(&next_text(ws).await.expect("a message"))
}

/// Subscribe to `channel`, recovering from `from` (offset, epoch) when given: the answer.
async fn subscribe_from(ws: &mut Ws, channel: &str, from: Option<(u64, &str)>) -> Value {
    let mut m = json!({"op": "subscribe", "channel": channel});
    if let Some((offset, epoch)) = from {
        m["recover"] = json!({"offset": offset, "epoch": epoch});
    }
    send(ws, m).await;
    next(ws).await
}

/// The next `n` publications' (offset, data), each checked to carry `epoch`.
async fn take(ws: &mut Ws, n: usize, epoch: &str) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let v = next(ws).await;
        assert_eq!(v["epoch"], epoch, "{v}");
        out.push((v["offset"].as_u64().expect("an offset"), v["data"].clone()));
    }
    out
}

/// The first publication of a channel subscribed before it had a stream (its `subscribed`
/// said `(0, "")`): (its offset and data, the stream's epoch it names).
async fn first_of_stream(ws: &mut Ws) -> ((u64, Value), String) {
    let v = next(ws).await;
    let epoch = v["epoch"].as_str().expect("an epoch").to_string();
    assert!(!epoch.is_empty(), "{v}");
    (
        (v["offset"].as_u64().expect("an offset"), v["data"].clone()),
        epoch,
    )
}

fn history_server(d: &tempfile::TempDir, size: &str, extra: &[&str]) -> Served {
    let key = path(d, "api-key");
    let mut args = vec![
        "--profile",
        "10k",
        "--app",
        "channels",
        "--api-key-file",
        &key,
    ];
    args.extend_from_slice(&["--history-size", size]);
    args.extend_from_slice(extra);
    common::serve(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_comes_back_with_its_position_gets_exactly_what_it_missed() {
    let d = secrets();
    let s = history_server(&d, "100", &[]);
    let mut sub = connect(s.port, "", None).await.unwrap();
    let first = subscribe_from(&mut sub, "prices", None).await;
    assert_eq!(
        (first["op"].as_str(), first["offset"].as_u64()),
        (Some("subscribed"), Some(0))
    );
    // No stream before the first publication: a subscribe creates none, and answers a stamp.
    assert!(is_stamp(&first), "{first}");
    assert!(first.get("recovered").is_none(), "{first}");
    // Two live publications over WebSocket, each with its position.
    let mut publisher = connect(s.port, "", None).await.unwrap();
    for i in 1..=2 {
        send(
            &mut publisher,
            json!({"op": "publish", "channel": "prices", "data": i}),
        )
        .await;
    }
    let (one, epoch) = first_of_stream(&mut sub).await;
    assert_eq!(one, (1, json!(1)));
    assert_eq!(take(&mut sub, 1, &epoch).await, [(2, json!(2))]);
    drop(sub);
    // Away: three over WebSocket, two over the HTTP API (whose answer has the position).
    for i in 3..=5 {
        send(
            &mut publisher,
            json!({"op": "publish", "channel": "prices", "data": i}),
        )
        .await;
    }
    for i in 6..=7 {
        let (code, body) = publish(&s, &d, &format!(r#"{{"channel":"prices","data":{i}}}"#));
        let v = json(&body);
        assert_eq!((code, v["offset"].as_u64()), (200, Some(i)), "{body}");
        assert_eq!(v["epoch"], epoch.as_str());
    }
    let h = d.path().join("auth-header");
    let (code, body) = curl(s.admin, "GET", "/api/channels/prices", Some(&h), "");
    assert_eq!(code, 200);
    assert_eq!(
        json(&body),
        json!({"channel": "prices", "subscribers": 0, "offset": 7, "epoch": epoch, "history": 7})
    );
    // Back with its last position: the answer, the five missed in order, then live ones.
    let mut back = connect(s.port, "", None).await.unwrap();
    let answer = subscribe_from(&mut back, "prices", Some((2, &epoch))).await;
    assert_eq!(
        answer,
        json!({"op": "subscribed", "channel": "prices", "offset": 7, "epoch": epoch,
               "recovered": true})
    );
    let missed = take(&mut back, 5, &epoch).await;
    assert_eq!(missed, (3..=7).map(|i| (i, json!(i))).collect::<Vec<_>>());
    send(
        &mut publisher,
        json!({"op": "publish", "channel": "prices", "data": 8}),
    )
    .await;
    assert_eq!(take(&mut back, 1, &epoch).await, [(8, json!(8))]);
    nothing_more(&mut back).await;
    // A position from another stream, or one from the future, cannot be continued.
    for (top, from) in [(8, (2, "not-this-epoch")), (9, (99, epoch.as_str()))] {
        let mut ws = connect(s.port, "", None).await.unwrap();
        let a = subscribe_from(&mut ws, "prices", Some(from)).await;
        assert_eq!(
            (a["recovered"].as_bool(), a["reason"].as_str()),
            (Some(false), Some("epoch")),
            "{a}"
        );
        assert_eq!(a["offset"], top);
        // Still subscribed, live from here.
        send(
            &mut publisher,
            json!({"op": "publish", "channel": "prices", "data": top + 1}),
        )
        .await;
        let v = next(&mut ws).await;
        assert_eq!(
            (v["offset"].as_u64(), &v["data"]),
            (Some(top + 1), &json!(top + 1))
        );
        nothing_more(&mut ws).await;
        let _ = take(&mut back, 1, &epoch).await;
    }
    let recoveries =
        |r: &str| s.metric(&format!(r#"ws_channels_recoveries_total{{result="{r}"}}"#));
    assert_eq!((recoveries("recovered"), recoveries("epoch")), (1.0, 2.0));
    assert_eq!(s.metric("ws_channels_recovered_publications_total"), 5.0);
    assert!(s.metric(r#"ws_memory_budget_store_bytes{store="history"}"#) > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_older_than_what_is_kept_or_too_far_behind_is_not_recovered() {
    let d = secrets();
    let s = history_server(&d, "3", &["--recover-max", "2"]);
    let mut sub = connect(s.port, "", None).await.unwrap();
    assert!(is_stamp(&subscribe_from(&mut sub, "c", None).await));
    drop(sub);
    let mut epoch = String::new();
    for i in 1..=6 {
        let (_, body) = publish(&s, &d, &format!(r#"{{"channel":"c","data":{i}}}"#));
        epoch = json(&body)["epoch"].as_str().unwrap().to_string();
    }
    let mut ws = connect(s.port, "", None).await.unwrap();
    // Offsets 4..=6 are kept: from 1 the 2 and 3 are gone.
    let a = subscribe_from(&mut ws, "c", Some((1, &epoch))).await;
    assert_eq!(
        (a["recovered"].as_bool(), a["reason"].as_str()),
        (Some(false), Some("too_old")),
        "{a}"
    );
    nothing_more(&mut ws).await;
    // From 3 all three are kept, but one recovery sends at most two.
    let mut ws = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut ws, "c", Some((3, &epoch))).await;
    assert_eq!(
        (a["recovered"].as_bool(), a["reason"].as_str()),
        (Some(false), Some("too_many")),
        "{a}"
    );
    let mut ws = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut ws, "c", Some((4, &epoch))).await;
    assert_eq!(a["recovered"], true, "{a}");
    assert_eq!(
        take(&mut ws, 2, &epoch).await,
        [(5, json!(5)), (6, json!(6))]
    );
    nothing_more(&mut ws).await;
}

/// The race a recovery must survive: a publisher keeps publishing while the subscriber comes
/// back. Every offset after its position arrives exactly once, in order, whichever side of
/// the resubscribe each publication fell on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_racing_a_publisher_has_no_gap_and_no_duplicate() {
    let d = secrets();
    let s = history_server(&d, "2000", &["--recover-max", "2000"]);
    let mut sub = connect(s.port, "", None).await.unwrap();
    assert!(is_stamp(&subscribe_from(&mut sub, "r", None).await));
    const N: u64 = 1500;
    let port = s.port;
    let publisher = tokio::spawn(async move {
        let mut p = connect(port, "", None).await.unwrap();
        for i in 1..=N {
            send(&mut p, json!({"op": "publish", "channel": "r", "data": i})).await;
            if i % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        // Every publish is handled before this answer (one connection's messages in order).
        send(&mut p, json!({"op": "unsubscribe", "channel": "r"})).await;
        next_text(&mut p).await
    });
    let (one, epoch) = first_of_stream(&mut sub).await;
    assert_eq!(one.0, 1);
    let got = take(&mut sub, 99, &epoch).await;
    let last = got.last().unwrap().0;
    drop(sub);
    let mut back = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut back, "r", Some((last, &epoch))).await;
    assert_eq!(a["recovered"], true, "{a}");
    let mut offsets = Vec::new();
    while offsets.last().copied() != Some(N) {
        offsets.push(take(&mut back, 1, &epoch).await[0].0);
    }
    assert!(publisher.await.unwrap().is_some());
    assert_eq!(offsets, (last + 1..=N).collect::<Vec<_>>());
    nothing_more(&mut back).await;
}

/// A subscribe creates no stream: subscribes to names nobody publishes to cost the history
/// nothing, so a client cannot push other channels' publications out of its byte bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribes_to_made_up_names_take_nothing_from_the_history() {
    let d = secrets();
    let s = history_server(&d, "100", &[]);
    publish(&s, &d, r#"{"channel":"kept","data":1}"#);
    let held = s.metric(r#"ws_memory_budget_store_bytes{store="history"}"#);
    assert!(held > 0.0);
    let mut ws = connect(s.port, "", None).await.unwrap();
    for i in 0..200 {
        let a = subscribe_from(&mut ws, &format!("made-up-{i:0>50}"), None).await;
        assert_eq!(a["op"], "subscribed", "{a}");
        assert!(is_stamp(&a), "{a}");
    }
    assert_eq!(
        s.metric(r#"ws_memory_budget_store_bytes{store="history"}"#),
        held,
        "subscribes grew the history"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_flags_are_refused_where_they_cannot_work() {
    for (args, says) in [
        (
            vec!["--app", "echo", "--history-size", "10"],
            "--app channels",
        ),
        (
            vec!["--app", "channels", "--history-ttl", "5"],
            "--history-size N",
        ),
        (
            vec![
                "--app",
                "channels",
                "--history-size",
                "10",
                "--recover-max",
                "0",
            ],
            "--recover-max 0",
        ),
        (
            vec![
                "--app",
                "channels",
                "--history-size",
                "10",
                "--cluster",
                "nats://127.0.0.1:4222",
            ],
            "redis+sentinel://",
        ),
        (
            vec![
                "--app",
                "channels",
                "--history-size",
                "10",
                "--cluster",
                "redis+cluster://127.0.0.1:7000",
            ],
            "Redis Streams",
        ),
    ] {
        let mut all = vec!["serve", "--port", "0", "--admin", "off"];
        all.extend(args);
        let o = common::wstune(&all);
        assert_eq!(common::code(&o), 3, "{all:?}: {}", common::stderr(&o));
        assert!(
            common::stderr(&o).contains(says),
            "{all:?}: {}",
            common::stderr(&o)
        );
    }
}

/// Recovery stays cheap when a whole fleet comes back at once: a thousand clients resubscribe
/// concurrently, each from its own position, while publications go on; each gets exactly the
/// ones after its position, in order, then the live ones, without a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_recovering_at_once_each_get_exactly_theirs() {
    const CLIENTS: u64 = 1000;
    let d = secrets();
    let s = history_server(&d, "500", &[]);
    let mut publisher = connect(s.port, "", None).await.unwrap();
    for i in 1..=200 {
        publish_ws(&mut publisher, i).await;
    }
    let h = d.path().join("auth-header");
    let channel = || json(&curl(s.admin, "GET", "/api/channels/f", Some(&h), "").1);
    common::wait_until("the publications kept", Duration::from_secs(10), || {
        channel()["offset"] == 200
    });
    let epoch = channel()["epoch"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let port = s.port;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let epoch = epoch.clone();
            tokio::spawn(async move {
                let from = 100 + i % 100;
                let mut ws = connect(port, "", None).await.unwrap();
                let a = subscribe_from(&mut ws, "f", Some((from, &epoch))).await;
                assert_eq!(a["recovered"], true, "{a}");
                let mut offsets = Vec::new();
                while offsets.last() != Some(&210) {
                    offsets.push(take(&mut ws, 1, &epoch).await[0].0);
                }
                assert_eq!(offsets, (from + 1..=210).collect::<Vec<_>>());
                ws
            })
        })
        .collect();
    // Publications go on while they come back.
    for i in 201..=210 {
        publish_ws(&mut publisher, i).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for t in tasks {
        let mut ws = t.await.unwrap();
        let _ = ws.close(None).await;
    }
    eprintln!("{CLIENTS} recoveries in {:?}", started.elapsed());
    assert_eq!(
        s.metric(r#"ws_channels_recoveries_total{result="recovered"}"#),
        CLIENTS as f64
    );
}

async fn publish_ws(ws: &mut Ws, i: u64) {
    send(ws, json!({"op": "publish", "channel": "f", "data": i})).await;
}

/// A stream that was forgotten (its publications expired, or were pushed out of the byte
/// bound by other channels') is not one that never existed: a client that subscribed before
/// its first publication, or saw one of its publications, is told `too_old`, never
/// `recovered:true` with nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_stream_is_too_old_never_recovered_empty() {
    let d = secrets();
    let s = history_server(
        &d,
        "100",
        &["--history-ttl", "2", "--history-max-bytes", "65536"],
    );
    let mut sub = connect(s.port, "", None).await.unwrap();
    let before = subscribe_from(&mut sub, "gone", None).await;
    let pushed = subscribe_from(&mut sub, "pushed", None).await;
    drop(sub);
    let mut epoch = String::new();
    for i in 1..=3 {
        let (code, body) = publish(&s, &d, &format!(r#"{{"channel":"gone","data":{i}}}"#));
        assert_eq!(code, 200, "{body}");
        epoch = json(&body)["epoch"].as_str().unwrap().to_string();
    }
    // The three expire and the stream is forgotten.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let stamp = before["epoch"].as_str().unwrap();
    for from in [
        (0, ""),
        (0, stamp),
        (1, epoch.as_str()),
        (3, epoch.as_str()),
    ] {
        let mut ws = connect(s.port, "", None).await.unwrap();
        let a = subscribe_from(&mut ws, "gone", Some(from)).await;
        assert_eq!(
            (a["recovered"].as_bool(), a["reason"].as_str()),
            (Some(false), Some("too_old")),
            "{from:?}: {a}"
        );
        nothing_more(&mut ws).await;
    }
    // The positions given before the first publications were stamps.
    assert!(is_stamp(&before) && is_stamp(&pushed), "{before} {pushed}");
    // Pushed out: one publication, then other channels' fill the 64 KiB bound.
    let (code, body) = publish(&s, &d, r#"{"channel":"pushed","data":1}"#);
    assert_eq!(code, 200, "{body}");
    let h = d.path().join("auth-header");
    for batch in 0..4 {
        let messages: Vec<Value> = (0..100)
            .map(|i| json!({"channel": format!("other-{batch}-{i}"), "data": "x".repeat(200)}))
            .collect();
        let body = json!({ "messages": messages }).to_string();
        let (code, out) = curl(s.admin, "POST", "/api/batch", Some(&h), &body);
        assert_eq!(code, 200, "{out}");
    }
    let (_, body) = curl(s.admin, "GET", "/api/channels/pushed", Some(&h), "");
    assert_eq!(json(&body)["history"].as_u64().unwrap_or(0), 0, "{body}");
    let mut ws = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(
        &mut ws,
        "pushed",
        Some((0, pushed["epoch"].as_str().unwrap())),
    )
    .await;
    assert_eq!(
        (a["recovered"].as_bool(), a["reason"].as_str()),
        (Some(false), Some("too_old")),
        "{a}"
    );
    // A client that subscribes once the other channels' streams have gone too (their
    // tombstones overflow their share: one dropped after a stamp makes it too old) misses
    // nothing and recovers what comes next.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let now = subscribe_from(&mut ws, "gone", None).await;
    assert!(is_stamp(&now), "{now}");
    drop(ws);
    publish(&s, &d, r#"{"channel":"gone","data":4}"#);
    let mut ws = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut ws, "gone", Some((0, now["epoch"].as_str().unwrap()))).await;
    assert_eq!(a["recovered"], true, "{a}");
    let v = next(&mut ws).await;
    assert_eq!(
        (v["offset"].as_u64(), &v["data"]),
        (Some(1), &json!(4)),
        "{v}"
    );
    assert_eq!(
        s.metric(r#"ws_channels_recoveries_total{result="too_old"}"#),
        5.0
    );
}

/// One connection publishing small data to thousands of new channel names holds only its
/// share of the history's byte bound: every other channel keeps its stream (and recovers),
/// and what the connection lost is counted on /metrics. On one process and under
/// `--processes`, where the supervisor and every process hold it to the same share.
async fn one_publisher_cannot_push_out_other_channels(extra: &[&str]) {
    let d = secrets();
    let mut args = vec!["--history-max-bytes", "1048576"];
    args.extend_from_slice(extra);
    let s = history_server(&d, "100", &args);
    let h = d.path().join("auth-header");
    let channel = |name: &str| {
        json(
            &curl(
                s.admin,
                "GET",
                &format!("/api/channels/{name}"),
                Some(&h),
                "",
            )
            .1,
        )
    };
    for i in 0..20 {
        for n in 1..=5 {
            let (code, body) = publish(&s, &d, &format!(r#"{{"channel":"kept-{i}","data":{n}}}"#));
            assert_eq!(code, 200, "{body}");
        }
    }
    common::wait_until("the publications kept", Duration::from_secs(10), || {
        channel("kept-19")["history"] == 5
    });
    let epoch = channel("kept-0")["epoch"].as_str().unwrap().to_string();
    let mut spam = connect(s.port, "", None).await.unwrap();
    const NAMES: usize = 5000;
    for i in 0..NAMES {
        let m = json!({"op": "publish", "channel": format!("spam-{i}"), "data": "x".repeat(100)});
        spam.feed(Message::text(m.to_string())).await.unwrap();
    }
    spam.flush().await.unwrap();
    common::wait_until("the spam positioned", Duration::from_secs(20), || {
        channel(&format!("spam-{}", NAMES - 1))["offset"] == 1
    });
    for i in 0..20 {
        let v = channel(&format!("kept-{i}"));
        assert_eq!(
            (v["offset"].as_u64(), v["history"].as_u64()),
            (Some(5), Some(5)),
            "kept-{i}: {v}"
        );
    }
    let mut ws = connect(s.port, "", None).await.unwrap();
    let a = subscribe_from(&mut ws, "kept-0", Some((1, &epoch))).await;
    assert_eq!(a["recovered"], true, "{a}");
    assert_eq!(
        take(&mut ws, 4, &epoch).await,
        (2..=5).map(|i| (i, json!(i))).collect::<Vec<_>>()
    );
    let evicted = s.metric(r#"ws_channels_history_evicted_total{share="publisher"}"#);
    assert!(evicted > 0.0, "{evicted}");
    // Each process holds its copy within the bound (the supervisor sums them).
    let copies = if extra.contains(&"--processes") {
        2.0
    } else {
        1.0
    };
    assert!(s.metric(r#"ws_memory_budget_store_bytes{store="history"}"#) <= copies * 1048576.0);
    drop(spam);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_publisher_on_many_new_names_cannot_push_out_other_channels() {
    one_publisher_cannot_push_out_other_channels(&[]).await;
}
