//! Cluster-wide presence over any engine: every node announces, every `INTERVAL`, its id and
//! its channels' subscriber counts (a heartbeat on the backplane, beside the relay messages);
//! every node keeps the last announcement of each other node and forgets a node not heard
//! from within `EXPIRY`. `GET /api/channels/NAME` answers this node's count plus the live
//! nodes' (`hub.presence().set_remote`), and `ws_backplane_nodes` counts the live nodes.
//!
//! This is the shape of the Socket.IO Redis Streams adapter's node heartbeat (5 s interval,
//! a node gone after 10 s without one) and of Centrifugo's node info messages, sized down:
//! a heartbeat is small, so the interval is 2 s and a killed node leaves the sum within
//! about 6 s.
//!
//! A heartbeat is bounded: at most `MAX_CHANNELS` channels and `MAX_BYTES` of names, taken
//! in byte order of the names. A node with more says so (`truncated`, and the last name it
//! covered): a lookup of a later name then counts that node as 0 and answers
//! `"partial":true`, never a guess. The table is bounded too (`MAX_NODES` nodes).

use embedded_server::hub::RemotePresence;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

/// Between two heartbeats of a node.
pub const INTERVAL: Duration = Duration::from_secs(2);
/// A node not heard from for this long is gone: three heartbeats missed.
pub const EXPIRY: Duration = Duration::from_secs(6);
/// The most channels one heartbeat lists.
pub const MAX_CHANNELS: usize = 1000;
/// The most bytes of channel names one heartbeat carries (about 64 KiB on the wire).
pub const MAX_BYTES: usize = 64 * 1024;
/// The most other nodes the table remembers; heartbeats from more are ignored.
pub const MAX_NODES: usize = 1024;

/// The heartbeat's kind byte, after the node id: apart from the relay kinds
/// (`wire::encode`), which skip it as unknown.
const KIND_PRESENCE: u8 = 0x50;
const VERSION: u8 = 1;

/// Whether a backplane message is a presence heartbeat.
pub fn is_heartbeat(m: &[u8]) -> bool {
    m.get(8) == Some(&KIND_PRESENCE)
}

/// Wire format: node id (u64 LE), KIND_PRESENCE, version, flags (bit 0: truncated), count
/// (u16 LE), then per channel: the name's length (u16 LE), the name, subscribers (u32 LE).
pub fn encode(node: u64, counts: &[(impl AsRef<str>, usize)]) -> Vec<u8> {
    let mut v = node.to_le_bytes().to_vec();
    v.extend_from_slice(&[KIND_PRESENCE, VERSION, 0, 0, 0]);
    let (mut n, mut bytes) = (0u16, 0);
    let mut truncated = false;
    for (name, subs) in counts {
        let name = name.as_ref();
        if *subs == 0 {
            continue;
        }
        if n as usize == MAX_CHANNELS || bytes + name.len() > MAX_BYTES {
            truncated = true;
            break;
        }
        v.extend_from_slice(&(name.len() as u16).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&((*subs).min(u32::MAX as usize) as u32).to_le_bytes());
        n += 1;
        bytes += name.len();
    }
    v[10] = truncated as u8;
    v[11..13].copy_from_slice(&n.to_le_bytes());
    v
}

/// One node's announcement, decoded.
#[derive(Debug, Default, PartialEq, Eq)]
struct Announced {
    counts: BTreeMap<Box<str>, u32>,
    /// Set when the heartbeat was cut: the last name it covered.
    covered_to: Option<Box<str>>,
}

fn decode(m: &[u8]) -> Option<(u64, Announced)> {
    let node = u64::from_le_bytes(m.get(..8)?.try_into().ok()?);
    if m.get(8..10)? != [KIND_PRESENCE, VERSION] {
        return None;
    }
    let truncated = *m.get(10)? & 1 == 1;
    let n = u16::from_le_bytes(m.get(11..13)?.try_into().ok()?);
    let (mut at, mut a) = (13, Announced::default());
    let mut last: Option<Box<str>> = None;
    for _ in 0..n {
        let len = u16::from_le_bytes(m.get(at..at + 2)?.try_into().ok()?) as usize;
        let name: Box<str> = std::str::from_utf8(m.get(at + 2..at + 2 + len)?)
            .ok()?
            .into();
        let subs = u32::from_le_bytes(m.get(at + 2 + len..at + 6 + len)?.try_into().ok()?);
        at += 6 + len;
        last = Some(name.clone());
        a.counts.insert(name, subs);
    }
    if truncated {
        a.covered_to = Some(last.unwrap_or_default());
    }
    Some((node, a))
}

/// The last announcement of every other node, with when it came.
#[derive(Default)]
pub struct Table {
    nodes: Mutex<HashMap<u64, (Instant, Announced)>>,
}

impl Table {
    /// A heartbeat came (ours and malformed ones are ignored).
    pub fn record(&self, me: u64, m: &[u8]) {
        self.record_at(me, m, Instant::now())
    }

    fn record_at(&self, me: u64, m: &[u8], now: Instant) {
        let Some((node, a)) = decode(m) else { return };
        if node == me {
            return;
        }
        let mut nodes = self.nodes.lock().unwrap();
        nodes.retain(|_, (at, _)| now.duration_since(*at) < EXPIRY);
        if nodes.len() < MAX_NODES || nodes.contains_key(&node) {
            nodes.insert(node, (now, a));
        }
    }

    /// Other nodes heard from within the expiry (the stale ones are forgotten).
    pub fn live(&self) -> usize {
        self.live_at(Instant::now())
    }

    fn live_at(&self, now: Instant) -> usize {
        let mut nodes = self.nodes.lock().unwrap();
        nodes.retain(|_, (at, _)| now.duration_since(*at) < EXPIRY);
        nodes.len()
    }

    /// What the live nodes said about `name`.
    pub fn lookup(&self, me: u64, name: &str) -> RemotePresence {
        self.lookup_at(me, name, Instant::now())
    }

    fn lookup_at(&self, me: u64, name: &str, now: Instant) -> RemotePresence {
        let nodes = self.nodes.lock().unwrap();
        let mut r = RemotePresence {
            me,
            ..Default::default()
        };
        for (id, (at, a)) in nodes.iter() {
            if now.duration_since(*at) >= EXPIRY {
                continue;
            }
            r.live += 1;
            match a.counts.get(name) {
                Some(n) => r.nodes.push((*id, *n as usize)),
                None => r.partial |= a.covered_to.as_deref().is_some_and(|to| name > to),
            }
        }
        r.nodes.sort_unstable();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_round_trip_skip_zeros_and_say_where_they_were_cut() {
        let m = encode(7, &[("a", 3usize), ("b", 0), ("c", 2)]);
        assert!(is_heartbeat(&m));
        let (node, a) = decode(&m).unwrap();
        assert_eq!(node, 7);
        assert_eq!(
            a.counts.len(),
            2,
            "a channel with no subscribers is left out"
        );
        assert_eq!(a.covered_to, None);
        let many: Vec<(String, usize)> = (0..MAX_CHANNELS + 5)
            .map(|i| (format!("c{i:05}"), 1))
            .collect();
        let (_, a) = decode(&encode(1, &many)).unwrap();
        assert_eq!(a.counts.len(), MAX_CHANNELS);
        assert_eq!(a.covered_to.as_deref(), Some("c00999"));
        let long: Vec<(String, usize)> = (0..400).map(|i| (format!("{i:0256}"), 1)).collect();
        let m = encode(1, &long);
        assert!(m.len() < MAX_BYTES + 13 + 6 * 400, "bounded: {}", m.len());
        assert!(decode(&m).unwrap().1.covered_to.is_some());
        assert_eq!(decode(&m[..m.len() - 1]), None, "truncated on the wire");
        assert!(!is_heartbeat(&crate::serve::backplane::wire::encode(
            1,
            &embedded_server::hub::Relay::Channel {
                channel: "a",
                text: "{}"
            },
            false,
        )));
    }

    #[test]
    fn the_table_sums_live_nodes_and_forgets_silent_ones() {
        let t = Table::default();
        let t0 = Instant::now();
        t.record_at(1, &encode(2, &[("room", 3usize)]), t0);
        t.record_at(1, &encode(3, &[("room", 2usize), ("z", 1)]), t0);
        t.record_at(1, &encode(1, &[("room", 100usize)]), t0); // our own: skipped
        let r = t.lookup_at(1, "room", t0);
        assert_eq!((r.subscribers(), r.live, r.partial), (5, 2, false));
        assert_eq!(r.nodes, vec![(2, 3), (3, 2)]);
        let t1 = t0 + EXPIRY / 2;
        t.record_at(1, &encode(3, &[("room", 2usize)]), t1);
        let t2 = t0 + EXPIRY + Duration::from_millis(1);
        assert_eq!(
            t.lookup_at(1, "room", t2).subscribers(),
            2,
            "node 2 went silent"
        );
        assert_eq!(t.live_at(t2), 1);
        let many: Vec<(String, usize)> = (0..MAX_CHANNELS + 1)
            .map(|i| (format!("c{i:05}"), 1))
            .collect();
        t.record_at(1, &encode(4, &many), t2);
        assert!(
            t.lookup_at(1, "zz", t2).partial,
            "past node 4's cut: unknown"
        );
        assert!(!t.lookup_at(1, "c00001", t2).partial);
        assert!(
            !t.lookup_at(1, "a", t2).partial,
            "before the cut and absent: 0 for sure"
        );
    }
}
