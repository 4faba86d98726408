//! A deploy at full size: 10,000 channel subscribers held on `serve --processes 2` with channel
//! history on, both processes replaced by one SIGHUP while publications keep coming. Each old
//! process drains (1012 spread over `--drain-over`), its clients reconnect with full-jitter
//! backoff and resubscribe with the last position they saw, and the test counts what an
//! operator would: connections refused, positions not recovered, publications missed or seen
//! twice. All must be zero.
#![cfg(target_os = "linux")]

use crate::common;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const CLIENTS: usize = 10_000;
const CHANNELS: usize = 50;
/// Publications a second over all channels (each reaches CLIENTS / CHANNELS subscribers).
const PUBLISH_RATE: u64 = 20;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What every subscriber counts; the test asserts on the sums.
#[derive(Default)]
struct Tally {
    /// Connect attempts that failed (refused, reset, a non-101 answer, no answer in 10 s).
    refused: AtomicU64,
    /// Reconnects whose recovering subscribe was answered `recovered:true`.
    recovered: AtomicU64,
    /// Recovering subscribes answered anything else, with the answer.
    not_recovered: Mutex<Vec<String>>,
    /// A publication whose offset skipped past the next one (a lost message).
    gaps: Mutex<Vec<String>>,
    /// A publication at or below the last offset seen (a message seen twice).
    duplicates: AtomicU64,
    /// Close codes the server sent.
    codes: Mutex<BTreeMap<u16, u64>>,
    /// Clients connected and subscribed now.
    connected: AtomicU64,
}

/// One subscriber's position in its channel.
#[derive(Clone, Debug)]
struct Position {
    offset: u64,
    epoch: String,
}

fn channel(i: usize) -> String {
    format!("c{}", i % CHANNELS)
}

async fn connect(port: u16, tally: &Tally) -> Ws {
    let mut attempt = 0u32;
    loop {
        let url = format!("ws://127.0.0.1:{port}/");
        match tokio::time::timeout(
            Duration::from_secs(10),
            tokio_tungstenite::connect_async(url),
        )
        .await
        {
            Ok(Ok((ws, _))) => return ws,
            _ => {
                tally.refused.fetch_add(1, Relaxed);
                attempt += 1;
                tokio::time::sleep(jitter(attempt)).await;
            }
        }
    }
}

/// Full-jitter backoff (AWS, "Exponential Backoff And Jitter"): uniform in
/// [0, min(2 s, 100 ms x 2^attempt)).
fn jitter(attempt: u32) -> Duration {
    let cap = (100u64 << attempt.min(5)).min(2000);
    let r = std::collections::hash_map::RandomState::new();
    use std::hash::BuildHasher;
    Duration::from_millis(r.hash_one(attempt) % cap.max(1))
}

/// Subscribe (from `from`, when recovering) and return the `subscribed` answer.
async fn subscribe(ws: &mut Ws, name: &str, from: Option<&Position>) -> Option<Value> {
    let mut m = json!({"op": "subscribe", "channel": name});
    if let Some(p) = from {
        m["recover"] = json!({"offset": p.offset, "epoch": p.epoch});
    }
    ws.send(Message::text(m.to_string())).await.ok()?;
    loop {
        match tokio::time::timeout(Duration::from_secs(20), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(&t).ok()?;
                if v["op"] == "subscribed" {
                    return Some(v);
                }
            }
            Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) | Err(_) => return None,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// A subscriber for the whole test: connect, subscribe, follow the channel's positions; on a
/// close, back off, reconnect and resubscribe from the last position. Ends when `stop` is set
/// and nothing arrived for a while, with its last position.
async fn subscriber(
    port: u16,
    i: usize,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    ready: Arc<tokio::sync::Barrier>,
) -> Position {
    let name = channel(i);
    let mut pos: Option<Position> = None;
    let mut first = true;
    loop {
        let mut ws = connect(port, &tally).await;
        let Some(answer) = subscribe(&mut ws, &name, pos.as_ref()).await else {
            // Closed before the answer: a drain that reached it early. Try again.
            tokio::time::sleep(jitter(1)).await;
            continue;
        };
        if pos.is_some() {
            if answer["recovered"] == true {
                tally.recovered.fetch_add(1, Relaxed);
            } else {
                tally
                    .not_recovered
                    .lock()
                    .unwrap()
                    .push(format!("{name} from {pos:?}: {answer}"));
            }
        }
        let at = Position {
            offset: answer["offset"].as_u64().unwrap_or(0),
            epoch: answer["epoch"].as_str().unwrap_or("").to_string(),
        };
        let mut cur = pos.take().unwrap_or(at);
        tally.connected.fetch_add(1, Relaxed);
        if first {
            first = false;
            ready.wait().await;
        }
        let closed = loop {
            let next = tokio::time::timeout(Duration::from_secs(3), ws.next()).await;
            match next {
                Ok(Some(Ok(Message::Text(t)))) => {
                    let Ok(v) = serde_json::from_str::<Value>(&t) else {
                        continue;
                    };
                    let (Some(o), Some(e)) = (v["offset"].as_u64(), v["epoch"].as_str()) else {
                        continue;
                    };
                    // A channel without a stream yet answers offset 0 (a stamp): its first publication
                    // names the epoch.
                    if cur.offset == 0 {
                        cur.epoch = e.to_string();
                    }
                    if e != cur.epoch {
                        tally
                            .gaps
                            .lock()
                            .unwrap()
                            .push(format!("{name}: epoch {} then {e}", cur.epoch));
                        cur.epoch = e.to_string();
                    } else if o <= cur.offset {
                        tally.duplicates.fetch_add(1, Relaxed);
                        continue;
                    } else if o != cur.offset + 1 {
                        tally
                            .gaps
                            .lock()
                            .unwrap()
                            .push(format!("{name}: offset {} then {o}", cur.offset));
                    }
                    cur.offset = o;
                }
                Ok(Some(Ok(Message::Close(f)))) => {
                    let code = f.map_or(1005, |f| u16::from(f.code));
                    *tally.codes.lock().unwrap().entry(code).or_default() += 1;
                    break true;
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_))) | Ok(None) => break true,
                Err(_) if stop.load(Relaxed) => break false,
                Err(_) => {}
            }
        };
        tally.connected.fetch_sub(1, Relaxed);
        if !closed {
            return cur;
        }
        pos = Some(cur);
        tokio::time::sleep(jitter(2)).await;
    }
}

fn healthz(admin: u16) -> Value {
    serde_json::from_str(common::body(&common::get(admin, "/healthz"))).unwrap()
}

fn pids(admin: u16) -> Vec<u64> {
    healthz(admin)["process"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["pid"].as_u64())
        .collect()
}

/// 10,000 subscribers, one SIGHUP: both processes replaced, and not one connection refused, one
/// position unrecovered, one publication lost or seen twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_10k_subscribers_refuses_nothing_and_loses_nothing() {
    let _area = common::area("restart_recovery");
    // The node's cap leaves room for the roll: a draining process's clients reconnect over
    // every process (the kernel hashes them over the listening sockets), so the others take
    // about 1/N of them on top of their own (docs/serve.md, "Rolling restarts").
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--max-connections",
        "15000",
        "--history-size",
        "5000",
        "--drain-over",
        "4",
        "--drain-delay",
        "0",
    ]);
    let before = pids(s.admin);
    assert_eq!(before.len(), 2, "{before:?}");
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let started = Instant::now();
    let mut subs = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        subs.push(tokio::spawn(subscriber(
            s.port,
            i,
            tally.clone(),
            stop.clone(),
            ready.clone(),
        )));
        // Connect in waves: the test's clients, not the server, would be the storm.
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::timeout(Duration::from_secs(120), ready.wait())
        .await
        .expect("10,000 subscribers within 120 s");
    eprintln!(
        "{CLIENTS} subscribed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The publisher: a client of its own, reconnecting when its process drains; what a
    // publish that raced a close did not deliver is not a subscriber's loss (no position).
    let publishing = Arc::new(AtomicBool::new(true));
    let published = Arc::new(AtomicU64::new(0));
    let publisher = {
        let (publishing, published, tally) = (publishing.clone(), published.clone(), tally.clone());
        let port = s.port;
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(1000 / PUBLISH_RATE));
            'connect: while publishing.load(Relaxed) {
                let mut ws = connect(port, &tally).await;
                while publishing.load(Relaxed) {
                    tick.tick().await;
                    let m = json!({"op": "publish", "channel": channel(n as usize), "data": n});
                    if ws.send(Message::text(m.to_string())).await.is_err() {
                        continue 'connect;
                    }
                    n += 1;
                    published.fetch_add(1, Relaxed);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    common::signal(s.pid(), "-HUP");
    // Both replaced (bounded), the roll done.
    let mut last = Value::Null;
    common::poll(Duration::from_secs(120), || {
        last = healthz(s.admin);
        let procs = last["process"].as_array()?;
        let done = last["rolling_restart"] == false
            && procs.len() == 2
            && procs.iter().all(|p| {
                p["state"] == "up" && p["pid"].as_u64().is_some_and(|pid| !before.contains(&pid))
            });
        done.then_some(())
    })
    .unwrap_or_else(|| panic!("the processes {before:?} were never both replaced: {last:#}"));
    // Everyone back, then a few more seconds of publications on the new processes.
    common::poll(Duration::from_secs(60), || {
        (tally.connected.load(Relaxed) == CLIENTS as u64).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "only {} of {CLIENTS} subscribers came back",
            tally.connected.load(Relaxed)
        )
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    publishing.store(false, Relaxed);
    publisher.await.unwrap();
    // Let the last publications arrive, then every subscriber stops after 3 s of silence.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Relaxed);
    let mut last_offsets: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (i, t) in subs.into_iter().enumerate() {
        let p = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a subscriber never stopped")
            .unwrap();
        last_offsets.entry(channel(i)).or_default().push(p.offset);
    }
    let codes = tally.codes.lock().unwrap().clone();
    let recovered = tally.recovered.load(Relaxed);
    eprintln!(
        "published {}, close codes {codes:?}, recovered {recovered}, refused {}, duplicates {}",
        published.load(Relaxed),
        tally.refused.load(Relaxed),
        tally.duplicates.load(Relaxed)
    );
    // Every subscriber was closed by the roll (once or, moved onto the second process, twice)
    // with 1012, and recovered each time.
    assert!(
        codes.keys().all(|&c| c == 1012) && codes.values().sum::<u64>() >= CLIENTS as u64,
        "every process drained with 1012: {codes:?}"
    );
    assert_eq!(
        recovered,
        codes.values().sum::<u64>(),
        "one recovery per close"
    );
    let not = tally.not_recovered.lock().unwrap();
    assert!(
        not.is_empty(),
        "{} not recovered: {:?}",
        not.len(),
        &not[..not.len().min(5)]
    );
    let gaps = tally.gaps.lock().unwrap();
    assert!(
        gaps.is_empty(),
        "{} gaps: {:?}",
        gaps.len(),
        &gaps[..gaps.len().min(5)]
    );
    assert_eq!(tally.duplicates.load(Relaxed), 0, "publications seen twice");
    assert_eq!(tally.refused.load(Relaxed), 0, "connections refused");
    // And each ended at its channel's last position: nothing was left undelivered.
    for (name, offsets) in &last_offsets {
        let top = *offsets.iter().max().unwrap();
        assert!(top > 0, "{name} had publications");
        assert!(
            offsets.iter().all(|&o| o == top),
            "{name}: subscribers ended at different positions (last {top}): {:?}",
            offsets
                .iter()
                .filter(|&&o| o != top)
                .take(5)
                .collect::<Vec<_>>()
        );
    }
}
