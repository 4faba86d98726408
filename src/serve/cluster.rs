//! The cluster backplane: `serve --cluster URL` makes `broadcast` and `channels` span every
//! node on the same Redis (or Redis Sentinel group, Redis Cluster, NATS: the engines are in
//! `serve::backplane`); this file holds the relay's wire format every engine carries.
//!
//! Each node delivers its own messages locally at once (no round trip through Redis) and
//! publishes them on one Redis channel, tagged with its node id; every node delivers what it
//! receives from the others and skips its own, so each subscriber gets a message exactly once,
//! encoded once per node. When Redis goes away the node keeps serving its own clients (local
//! delivery only, counted in `ws_backplane_dropped_total`), reconnects with backoff, and
//! relays again once subscribed.

use anyhow::Result;
use embedded_server::frame::OpCode;
use embedded_server::hub::Relay;
use embedded_server::Hub;
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
/// The supervisor's tombstones and stamp family, sent just before its history
/// (`supervisor::history::encode_graves`). A process that gets one knows the supervisor takes
/// `KIND_SEQUENCE_BY`. New kinds rather than new fields: a process or supervisor of an older
/// release (a SIGUSR2 upgrade or rollback runs both at once) skips a kind it does not know.
pub const KIND_GRAVES: u8 = 6;
/// A publish to position with its publisher's id (a connection's, for its history share).
const KIND_SEQUENCE_BY: u8 = 7;
/// From the supervisor, just before a positioned publication: its publisher's key (process and
/// connection), so every process holds it to the same share.
const KIND_PUBLISHER: u8 = 8;

/// Set in a server process once its supervisor has sent `KIND_GRAVES`: it then takes
/// publishes with their publisher (`KIND_SEQUENCE_BY`); before, and under an older supervisor,
/// they go as `KIND_SEQUENCE`.
pub static SUPERVISOR_NAMES_PUBLISHERS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The publisher key a `KIND_PUBLISHER` frame announced, for the positioned publication
/// (channel, offset) that follows it on the same relay.
static NEXT_PUBLISHER: std::sync::Mutex<Option<(String, u64, u64)>> = std::sync::Mutex::new(None);

/// Messages waiting for the publisher; past this the relay drops (local delivery still happened).
pub(crate) const QUEUE: usize = 65_536;

/// Wire format: node id (u64 LE), kind, then for a broadcast the opcode and payload, for a
/// channel message the name's length (u16 LE), the name and the `{"channel":..}` text; a
/// message to position (`Relay::Sequence`) has the name the same way, its publisher (u64 LE,
/// only in `KIND_SEQUENCE_BY`) and the data's JSON. A positioned one (`encode_positioned`) has
/// the name, then the offset (u64 LE), the epoch's length (u8) and the epoch, then the text;
/// a `KIND_PUBLISHER` one (`encode_publisher`) the name, the offset and the key (u64 LE).
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
        Relay::Sequence {
            channel,
            data,
            publisher,
        } => {
            let named = *publisher != 0
                && SUPERVISOR_NAMES_PUBLISHERS.load(std::sync::atomic::Ordering::Relaxed);
            v.push(if named {
                KIND_SEQUENCE_BY
            } else {
                KIND_SEQUENCE
            });
            v.extend_from_slice(&(channel.len() as u16).to_le_bytes());
            v.extend_from_slice(channel.as_bytes());
            if named {
                v.extend_from_slice(&publisher.to_le_bytes());
            }
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

/// The publisher key of the positioned publication (channel, offset) that follows (see
/// `encode`), from the supervisor.
pub fn encode_publisher(channel: &str, offset: u64, key: u64) -> Vec<u8> {
    let mut v = u64::MAX.to_le_bytes().to_vec();
    v.push(KIND_PUBLISHER);
    v.extend_from_slice(&(channel.len() as u16).to_le_bytes());
    v.extend_from_slice(channel.as_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v.extend_from_slice(&key.to_le_bytes());
    v
}

/// What a relayed message asks of this node, if it is well formed and not our own.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    Broadcast(OpCode, &'a [u8]),
    Channel(&'a str, &'a str),
    /// A publish for the supervisor to position: channel, data and publisher.
    Sequence(&'a str, &'a str, u64),
    /// A positioned publication: channel, offset, epoch, text.
    Positioned(&'a str, u64, &'a str, &'a str),
    /// The publisher key of the positioned publication that follows: channel, offset, key.
    Publisher(&'a str, u64, u64),
    /// The supervisor's tombstones (`supervisor::history::encode_graves`).
    Graves(&'a [u8]),
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
            hub.relay().deliver_broadcast(op, payload);
        }
        Some(Incoming::Channel(name, text)) => {
            received();
            hub.relay().deliver_channel(name, text);
        }
        Some(Incoming::Publisher(name, offset, key)) => {
            *NEXT_PUBLISHER.lock().unwrap() = Some((name.to_string(), offset, key));
        }
        Some(Incoming::Positioned(name, offset, epoch, text)) => {
            received();
            let pos = embedded_server::hub::StreamPosition {
                offset,
                epoch: epoch.into(),
            };
            let publisher = match NEXT_PUBLISHER.lock().unwrap().take() {
                Some((c, o, key)) if c == name && o == offset => key,
                _ => 0,
            };
            hub.history()
                .deliver_positioned(name, &pos, text, publisher);
        }
        #[cfg(target_os = "linux")]
        Some(Incoming::Graves(body)) => {
            crate::serve::supervisor::history::restore_graves(hub, body);
            SUPERVISOR_NAMES_PUBLISHERS.store(true, std::sync::atomic::Ordering::Relaxed);
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
        kind @ (KIND_CHANNEL | KIND_SEQUENCE | KIND_SEQUENCE_BY | KIND_POSITIONED
        | KIND_PUBLISHER) => {
            let n = u16::from_le_bytes(m.get(9..11)?.try_into().ok()?) as usize;
            let name = std::str::from_utf8(m.get(11..11 + n)?).ok()?;
            let rest = m.get(11 + n..)?;
            let u64_at = |at: usize| -> Option<u64> {
                Some(u64::from_le_bytes(rest.get(at..at + 8)?.try_into().ok()?))
            };
            match kind {
                KIND_POSITIONED => {
                    let offset = u64_at(0)?;
                    let e = *rest.get(8)? as usize;
                    let epoch = std::str::from_utf8(rest.get(9..9 + e)?).ok()?;
                    let text = std::str::from_utf8(rest.get(9 + e..)?).ok()?;
                    Some(Incoming::Positioned(name, offset, epoch, text))
                }
                KIND_PUBLISHER => Some(Incoming::Publisher(name, u64_at(0)?, u64_at(8)?)),
                KIND_SEQUENCE_BY => {
                    let data = std::str::from_utf8(rest.get(8..)?).ok()?;
                    Some(Incoming::Sequence(name, data, u64_at(0)?))
                }
                KIND_SEQUENCE => Some(Incoming::Sequence(name, std::str::from_utf8(rest).ok()?, 0)),
                _ => Some(Incoming::Channel(name, std::str::from_utf8(rest).ok()?)),
            }
        }
        KIND_SNAPSHOT => Some(Incoming::Snapshot(&m[9..])),
        KIND_GRAVES => Some(Incoming::Graves(&m[9..])),
        _ => None,
    }
}

/// A node id: random enough that two nodes never share one (the seed epochs are made from).
pub(crate) fn node_id() -> u64 {
    embedded_server::hub::random_seed()
}

/// Backoff between reconnect attempts: 100 ms doubling to 5 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5000))
}

/// Check `--cluster URL` (its scheme picks the engine: `redis://`, `redis+sentinel://`,
/// `redis+cluster://`, `nats://`; see `serve::backplane`); an error names the flag and the
/// expected forms. Called before the server binds anything, so a typo stops `serve` before it
/// starts.
pub fn client(url: &str) -> Result<()> {
    crate::serve::backplane::parse(url).map(|_| ())
}

/// Validate the URL, install the relay on `hub` and start the engine's tasks (on the current
/// tokio runtime). The backplane being unreachable now is not an error: the node serves
/// locally and connects when it can.
pub fn start(url: &str, hub: Arc<Hub>) -> Result<()> {
    crate::serve::backplane::start(url, hub)
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
