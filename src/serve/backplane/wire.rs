//! The relay's wire format, the one every engine carries (and the `--processes` supervisor's
//! local relay too): a relay message is this node's id, a kind byte and the kind's fields.
//! Only bytes live here: no I/O, no state, so every case is a unit test. Where the messages
//! go (`CHANNEL`, the shard channels, the NATS subject) is here as well: every node of a
//! cluster must name them alike.
//!
//! Each node delivers its own messages locally at once (no round trip through the
//! backplane) and publishes them tagged with its node id; every node delivers what it
//! receives from the others and skips its own (`decode` returns None for them), so each
//! subscriber gets a message exactly once, encoded once per node.

use embedded_server::frame::OpCode;
use embedded_server::hub::Relay;

/// The one Redis channel every node publishes on and subscribes to.
pub const CHANNEL: &str = "wstune:relay";

/// Redis Cluster's shard channels (`redis+cluster://`): enough to spread over a few masters;
/// each node holds one subscription per shard, grouped into one connection per master.
pub const SHARDS: u16 = 16;

/// Shard channel `k`: `wstune:relay:{K}` (the braces are a hash tag: the slot is the number's).
pub fn shard_channel(k: u16) -> String {
    format!("{CHANNEL}:{{{k}}}")
}

/// The NATS subject every node publishes on and subscribes to (`nats://`).
pub const SUBJECT: &str = "wstune.relay";

/// The node id of the `--processes` supervisor, which no process has, so every process
/// delivers what it sends, the publisher's too.
pub const SUPERVISOR: u64 = u64::MAX;

const KIND_BROADCAST: u8 = 0;
const KIND_CHANNEL: u8 = 1;
/// A channel publish for the supervisor to position (`--processes` with history on).
const KIND_SEQUENCE: u8 = 2;
/// A positioned channel publication from the supervisor, for every process.
const KIND_POSITIONED: u8 = 3;
/// The supervisor's history, for a process that starts (`snapshot::encode_snapshot`).
pub const KIND_SNAPSHOT: u8 = 4;
/// The supervisor's tombstones and stamp family, sent just before its history
/// (`snapshot::encode_graves`). A process that gets one knows the supervisor takes
/// `KIND_SEQUENCE_BY`. New kinds rather than new fields: a process or supervisor of an older
/// release (a SIGUSR2 upgrade or rollback runs both at once) skips a kind it does not know.
pub const KIND_GRAVES: u8 = 6;
/// A publish to position with its publisher's id (a connection's, for its history share).
const KIND_SEQUENCE_BY: u8 = 7;
/// From the supervisor, just before a positioned publication: its publisher's key (process and
/// connection), so every process holds it to the same share.
const KIND_PUBLISHER: u8 = 8;

/// Messages waiting for the publisher; past this the relay drops (local delivery still happened).
pub(crate) const QUEUE: usize = 65_536;

/// Wire format: node id (u64 LE), kind, then for a broadcast the opcode and payload, for a
/// channel message the name's length (u16 LE), the name and the `{"channel":..}` text; a
/// message to position (`Relay::Sequence`) has the name the same way, its publisher (u64 LE,
/// only in `KIND_SEQUENCE_BY`) and the data's JSON. A positioned one (`encode_positioned`) has
/// the name, then the offset (u64 LE), the epoch's length (u8) and the epoch, then the text;
/// a `KIND_PUBLISHER` one (`encode_publisher`) the name, the offset and the key (u64 LE).
///
/// `named`: the receiver takes publishers (`KIND_SEQUENCE_BY`); a supervisor of an older
/// release does not, so a publish to position goes without one until it says so
/// (`deliver::supervisor_names_publishers`).
pub fn encode(node: u64, r: &Relay<'_>, named: bool) -> Vec<u8> {
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
            let named = *publisher != 0 && named;
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

/// A positioned publication (see `encode`), from the supervisor (node id `SUPERVISOR`).
pub fn encode_positioned(channel: &str, offset: u64, epoch: &str, text: &str) -> Vec<u8> {
    let mut v = SUPERVISOR.to_le_bytes().to_vec();
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
    let mut v = SUPERVISOR.to_le_bytes().to_vec();
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
    /// The supervisor's tombstones (`snapshot::encode_graves`).
    Graves(&'a [u8]),
    /// The supervisor's history (`snapshot::encode_snapshot`).
    Snapshot(&'a [u8]),
}

/// What `m` asks of node `me`: None for our own messages, malformed ones and kinds this
/// release does not know (a heartbeat, a probe, a newer release's).
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
            false,
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
            false,
        );
        assert_eq!(
            decode(9, &c),
            Some(Incoming::Channel("prices", "{\"channel\":\"prices\"}"))
        );
        assert_eq!(decode(9, &c[..10]), None, "truncated");
        assert_eq!(decode(9, b"short"), None);
    }
}
