//! The cluster backplane: `serve --cluster redis://HOST:PORT[/DB]` makes `broadcast` and
//! `channels` span every node on the same Redis.
//!
//! Each node delivers its own messages locally at once (no round trip through Redis) and
//! publishes them on one Redis channel, tagged with its node id; every node delivers what it
//! receives from the others and skips its own, so each subscriber gets a message exactly once,
//! encoded once per node. When Redis goes away the node keeps serving its own clients (local
//! delivery only, counted in `ws_backplane_dropped_total`), reconnects with backoff, and
//! relays again once subscribed.

use anyhow::{Context, Result};
use embedded_server::frame::OpCode;
use embedded_server::hub::Relay;
use embedded_server::Hub;
use futures_util::StreamExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// The one Redis channel every node publishes on and subscribes to.
pub const CHANNEL: &str = "wstune:relay";

const KIND_BROADCAST: u8 = 0;
const KIND_CHANNEL: u8 = 1;
/// A channel publish for the supervisor to position (`--processes` with history on).
const KIND_SEQUENCE: u8 = 2;
/// A positioned channel publication from the supervisor, for every process.
pub const KIND_POSITIONED: u8 = 3;
/// The supervisor's history, for a process that starts (see `supervisor::history`).
pub const KIND_SNAPSHOT: u8 = 4;

/// Messages waiting for the publisher; past this the relay drops (local delivery still happened).
const QUEUE: usize = 65_536;

/// Wire format: node id (u64 LE), kind, then for a broadcast the opcode and payload, for a
/// channel message the name's length (u16 LE), the name and the `{"channel":..}` text; a
/// message to position (`Relay::Sequence`) has the name the same way and the data's JSON. A
/// positioned one (`encode_positioned`) has the name, then the offset (u64 LE), the epoch's
/// length (u8) and the epoch, then the text.
pub fn encode(node: u64, r: &Relay<'_>) -> Vec<u8> {
    let mut v = node.to_le_bytes().to_vec();
    match r {
        Relay::Broadcast { op, payload } => {
            v.push(KIND_BROADCAST);
            v.push(op.as_u8());
            v.extend_from_slice(payload);
        }
        Relay::Channel { channel, text } => {
            v.push(KIND_CHANNEL);
            v.extend_from_slice(&(channel.len() as u16).to_le_bytes());
            v.extend_from_slice(channel.as_bytes());
            v.extend_from_slice(text.as_bytes());
        }
        Relay::Sequence { channel, data } => {
            v.push(KIND_SEQUENCE);
            v.extend_from_slice(&(channel.len() as u16).to_le_bytes());
            v.extend_from_slice(channel.as_bytes());
            v.extend_from_slice(data.as_bytes());
        }
    }
    v
}

/// A positioned publication (see `encode`), from the supervisor (node id `u64::MAX`, which no
/// process has, so every process delivers it, the publisher's too).
pub fn encode_positioned(channel: &str, offset: u64, epoch: &str, text: &str) -> Vec<u8> {
    let mut v = u64::MAX.to_le_bytes().to_vec();
    v.push(KIND_POSITIONED);
    v.extend_from_slice(&(channel.len() as u16).to_le_bytes());
    v.extend_from_slice(channel.as_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    let epoch = &epoch.as_bytes()[..epoch.len().min(255)];
    v.push(epoch.len() as u8);
    v.extend_from_slice(epoch);
    v.extend_from_slice(text.as_bytes());
    v
}

/// What a relayed message asks of this node, if it is well formed and not our own.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    Broadcast(OpCode, &'a [u8]),
    Channel(&'a str, &'a str),
    /// A publish for the supervisor to position: channel and data.
    Sequence(&'a str, &'a str),
    /// A positioned publication: channel, offset, epoch, text.
    Positioned(&'a str, u64, &'a str, &'a str),
    /// The supervisor's history (`supervisor::history::encode_snapshot`).
    Snapshot(&'a [u8]),
}

/// Deliver a relayed message (from Redis or the local relay) to this node's clients, counting
/// it; our own messages and malformed ones are skipped.
pub fn deliver(hub: &Hub, me: u64, m: &[u8]) {
    let received = || {
        hub.metrics
            .backplane_received
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
    match decode(me, m) {
        Some(Incoming::Broadcast(op, payload)) => {
            received();
            hub.deliver_remote_broadcast(op, payload);
        }
        Some(Incoming::Channel(name, text)) => {
            received();
            hub.deliver_remote_channel(name, text);
        }
        Some(Incoming::Positioned(name, offset, epoch, text)) => {
            received();
            let pos = embedded_server::hub::StreamPosition {
                offset,
                epoch: epoch.into(),
            };
            hub.deliver_positioned(name, &pos, text);
        }
        #[cfg(target_os = "linux")]
        Some(Incoming::Snapshot(body)) => {
            crate::serve::supervisor::history::restore(hub, body);
        }
        // Only the supervisor positions publishes.
        _ => {}
    }
}

pub fn decode(me: u64, m: &[u8]) -> Option<Incoming<'_>> {
    let node = u64::from_le_bytes(m.get(..8)?.try_into().ok()?);
    if node == me {
        return None;
    }
    match *m.get(8)? {
        KIND_BROADCAST => Some(Incoming::Broadcast(OpCode::from_u8(*m.get(9)?)?, &m[10..])),
        kind @ (KIND_CHANNEL | KIND_SEQUENCE | KIND_POSITIONED) => {
            let n = u16::from_le_bytes(m.get(9..11)?.try_into().ok()?) as usize;
            let name = std::str::from_utf8(m.get(11..11 + n)?).ok()?;
            let rest = m.get(11 + n..)?;
            if kind == KIND_POSITIONED {
                let offset = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
                let e = *rest.get(8)? as usize;
                let epoch = std::str::from_utf8(rest.get(9..9 + e)?).ok()?;
                let text = std::str::from_utf8(rest.get(9 + e..)?).ok()?;
                return Some(Incoming::Positioned(name, offset, epoch, text));
            }
            let text = std::str::from_utf8(rest).ok()?;
            Some(if kind == KIND_CHANNEL {
                Incoming::Channel(name, text)
            } else {
                Incoming::Sequence(name, text)
            })
        }
        KIND_SNAPSHOT => Some(Incoming::Snapshot(&m[9..])),
        _ => None,
    }
}

/// A node id: random enough that two nodes never share one.
fn node_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Backoff between reconnect attempts: 100 ms doubling to 5 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5000))
}

/// The Redis client for `--cluster URL`; an error names the flag and the expected form. Called
/// before the server binds anything, so a typo stops `serve` before it starts.
pub fn client(url: &str) -> Result<redis::Client> {
    redis::Client::open(url).with_context(|| {
        format!("--cluster {url}: not a Redis URL (like redis://127.0.0.1:6379/0)")
    })
}

/// Validate the URL, install the relay on `hub` and start the publisher and subscriber tasks
/// (on the current tokio runtime). Redis being unreachable now is not an error: the node
/// serves locally and connects when it can.
pub fn start(url: &str, hub: Arc<Hub>) -> Result<()> {
    let client = client(url)?;
    let me = node_id();
    let metrics = hub.metrics.clone();
    metrics.backplane_up.store(0, Relaxed);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(QUEUE);
    {
        let metrics = metrics.clone();
        hub.set_relay(Box::new(move |r| {
            // While Redis is down the message was delivered here only; queueing it for later
            // would replay stale messages after the outage.
            if metrics.backplane_up.load(Relaxed) != 1 || tx.try_send(encode(me, &r)).is_err() {
                metrics.backplane_dropped.fetch_add(1, Relaxed);
            }
        }));
    }
    // With channel history on, Redis positions every publication (cluster_history.rs).
    crate::serve::cluster_history::start(&hub, client.clone());
    // Publisher: one multiplexed connection, rebuilt after an error. A connection that died
    // with Redis is only found out on its next use, so the message that finds it out is sent
    // again on the new connection rather than lost.
    {
        let (client, metrics, hub) = (client.clone(), metrics.clone(), hub.clone());
        tokio::spawn(async move {
            let mut attempt = 0;
            let mut retry: Option<Vec<u8>> = None;
            loop {
                let conn = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.get_multiplexed_async_connection(),
                )
                .await;
                let Ok(Ok(mut conn)) = conn else {
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                    if attempt > 3 {
                        // Redis stays away: what waited is stale now (delivered locally).
                        if retry.take().is_some() {
                            metrics.backplane_dropped.fetch_add(1, Relaxed);
                        }
                    }
                    continue;
                };
                attempt = 0;
                loop {
                    let msg = match retry.take() {
                        Some(m) => m,
                        None => match rx.recv().await {
                            Some(m) => m,
                            None => return,
                        },
                    };
                    let r =
                        crate::serve::cluster_history::send(&mut conn, &hub, &msg, CHANNEL).await;
                    match r {
                        Ok(_) => {
                            metrics.backplane_published.fetch_add(1, Relaxed);
                        }
                        Err(e) => {
                            tracing::warn!("cluster backplane: publish failed ({e}); reconnecting");
                            retry = Some(msg);
                            break;
                        }
                    }
                }
            }
        });
    }
    // Subscriber: the backplane is "up" while this subscription stands.
    tokio::spawn(async move {
        let mut attempt = 0;
        loop {
            let sub = async {
                let mut ps = client.get_async_pubsub().await?;
                ps.subscribe(CHANNEL).await?;
                Ok::<_, redis::RedisError>(ps)
            };
            let mut ps = match tokio::time::timeout(Duration::from_secs(2), sub).await {
                Ok(Ok(ps)) => ps,
                _ => {
                    if attempt == 0 {
                        tracing::warn!(
                            "cluster backplane: cannot reach Redis; serving local clients only, retrying"
                        );
                    }
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                    continue;
                }
            };
            attempt = 0;
            metrics.backplane_up.store(1, Relaxed);
            tracing::info!("cluster backplane: subscribed to {CHANNEL}");
            let mut stream = ps.on_message();
            while let Some(msg) = stream.next().await {
                deliver(&hub, me, msg.get_payload_bytes());
            }
            metrics.backplane_up.store(0, Relaxed);
            tracing::warn!(
                "cluster backplane: lost Redis; serving local clients only, reconnecting"
            );
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_messages_round_trip_and_skip_our_own() {
        let b = encode(
            7,
            &Relay::Broadcast {
                op: OpCode::Binary,
                payload: b"\x00\x01",
            },
        );
        assert_eq!(
            decode(8, &b),
            Some(Incoming::Broadcast(OpCode::Binary, b"\x00\x01"))
        );
        assert_eq!(decode(7, &b), None, "our own message comes back: skipped");
        let c = encode(
            7,
            &Relay::Channel {
                channel: "prices",
                text: "{\"channel\":\"prices\"}",
            },
        );
        assert_eq!(
            decode(9, &c),
            Some(Incoming::Channel("prices", "{\"channel\":\"prices\"}"))
        );
        assert_eq!(decode(9, &c[..10]), None, "truncated");
        assert_eq!(decode(9, b"short"), None);
        assert!(backoff(0) < backoff(3) && backoff(30) == Duration::from_secs(5));
    }
}
