//! Channel history across `serve --processes N`: the supervisor, which outlives its
//! processes, assigns every publication's stream position and keeps the history, so a client
//! that reconnects to another process, or to a process that restarted, recovers with the
//! position it had.
//!
//! A process relays a publish unpositioned (`Relay::Sequence`); the supervisor gives it the
//! channel's next offset, keeps it (`hub::history::History`, the same bounded store a process
//! uses) and relays it positioned to every process, the publisher's included, in one order;
//! each process keeps its copy and delivers it (`hub.history().deliver_positioned`). A process that
//! starts gets the whole history first, in one frame queued before any live one
//! (`encode_snapshot`), and serves no client before it has applied it (`wait_for_snapshot`).
//! The history includes the supervisor's tombstones and stamp family, so a position a process
//! gave before the channel's first publication is decided alike on every process, a restarted
//! one included.
//! The relay's queues stay bounded: a process whose queue is full misses the publication
//! (counted as before), and its copy then has a gap, which makes a recovery across it answer
//! `recovered:false` rather than skip a message.

use embedded_server::channels::HistorySettings;
use embedded_server::hub::history::{GraveCopy, History, Position};
use embedded_server::hub::{envelope, StreamPosition};
use embedded_server::Hub;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The supervisor's history and its clock.
pub struct Sequencer {
    store: Mutex<History>,
    start: Instant,
}

impl Sequencer {
    /// The history for processes that each get `per_process_budget` bytes of memory budget:
    /// bounded as each process bounds its own copy (the smaller of `max_bytes` and a quarter
    /// of that), so the copies hold what the supervisor holds.
    pub fn new(settings: &HistorySettings, per_process_budget: usize) -> Sequencer {
        let mut s = settings.clone();
        s.max_bytes = s.max_bytes.min(per_process_budget / 4);
        let mut store = History::new(s, embedded_server::hub::random_seed());
        let (origin, start) = (embedded_server::hub::unix_us(), Instant::now());
        store.set_origin(origin);
        store.set_clock(Box::new(move || {
            origin + start.elapsed().as_micros() as u64
        }));
        Sequencer {
            store: Mutex::new(store),
            start,
        }
    }

    fn now(&self) -> u32 {
        self.start.elapsed().as_secs() as u32
    }

    /// Position `data` in `channel` and keep it, held to `publisher`'s share (its key
    /// across processes; 0: none); `then` gets the relay frame bodies for every process while
    /// the history stays locked (so frames go out in offset order): the key's frame when there
    /// is one (so every process holds the publication to the same share), then the
    /// positioned publication.
    pub fn position<R>(
        &self,
        channel: &str,
        data: &str,
        publisher: u64,
        then: impl FnOnce(Vec<Vec<u8>>) -> R,
    ) -> R {
        let mut h = self.store.lock().unwrap();
        let (pos, text) = h.append(channel, publisher, self.now(), |o, e| {
            envelope(channel, data, o, e)
        });
        let mut frames = Vec::with_capacity(2);
        if publisher != 0 {
            let named = crate::serve::cluster::encode_publisher(channel, pos.offset, publisher);
            frames.push(named);
        }
        frames.push(crate::serve::cluster::encode_positioned(
            channel, pos.offset, &pos.epoch, &text,
        ));
        then(frames)
    }

    /// The whole history as two relay frame bodies, its tombstones then its streams; `then`
    /// gets them with the history still locked (the new process's queue is added there, so
    /// it misses nothing after it).
    pub fn snapshot<R>(&self, then: impl FnOnce(Vec<u8>, Vec<u8>) -> R) -> R {
        let mut h = self.store.lock().unwrap();
        h.expire(self.now());
        then(encode_graves(&h), encode_snapshot(&h))
    }
}

/// The history's tombstones as a relay frame body: the supervisor's node id (`u64::MAX`) and
/// kind; its stamp family and the Unix µs before which stamps are too old (u64 LE each), the
/// count of tombstones (u32 LE) and per tombstone the name's length (u16 LE) and name, the
/// epoch's length (u8) and epoch, its top offset and when it went (u64 LE each).
pub fn encode_graves(h: &History) -> Vec<u8> {
    let mut v = u64::MAX.to_le_bytes().to_vec();
    v.push(crate::serve::cluster::KIND_GRAVES);
    let (family, known_since, graves) = h.graves();
    v.extend_from_slice(&family.to_le_bytes());
    v.extend_from_slice(&known_since.to_le_bytes());
    v.extend_from_slice(&(graves.len() as u32).to_le_bytes());
    for (name, epoch, top, at) in graves {
        v.extend_from_slice(&(name.len() as u16).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v.push(epoch.len() as u8);
        v.extend_from_slice(epoch.as_bytes());
        v.extend_from_slice(&top.to_le_bytes());
        v.extend_from_slice(&at.to_le_bytes());
    }
    v
}

/// The history as a relay frame body: the supervisor's node id (`u64::MAX`) and kind, then
/// per channel the name's length (u16 LE) and name, its top offset (u64 LE), the epoch's
/// length (u8) and epoch, the count of kept publications (u32 LE), and each one's offset
/// (u64 LE), length (u32 LE) and text.
pub fn encode_snapshot(h: &History) -> Vec<u8> {
    let mut v = u64::MAX.to_le_bytes().to_vec();
    v.push(crate::serve::cluster::KIND_SNAPSHOT);
    for (name, pos, pubs) in h.snapshot() {
        v.extend_from_slice(&(name.len() as u16).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&pos.offset.to_le_bytes());
        v.push(pos.epoch.len() as u8);
        v.extend_from_slice(pos.epoch.as_bytes());
        v.extend_from_slice(&(pubs.len() as u32).to_le_bytes());
        for (offset, text) in pubs {
            v.extend_from_slice(&offset.to_le_bytes());
            v.extend_from_slice(&(text.len() as u32).to_le_bytes());
            v.extend_from_slice(text.as_bytes());
        }
    }
    v
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (b.get(..n)?, b.get(n..)?);
    *b = rest;
    Some(head)
}

fn u64_of(b: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
}

/// A tombstones body (after the node id and kind): the stamp family, the too-old bound and
/// each forgotten stream. None when it is malformed.
pub fn decode_graves(mut b: &[u8]) -> Option<(u64, u64, Vec<GraveCopy>)> {
    let family = u64_of(&mut b)?;
    let known_since = u64_of(&mut b)?;
    let count = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
    let mut graves = Vec::with_capacity(count.min(b.len() / 19));
    for _ in 0..count {
        let n = u16::from_le_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(&mut b, n)?).ok()?;
        let e = take(&mut b, 1)?[0] as usize;
        let epoch = std::str::from_utf8(take(&mut b, e)?).ok()?;
        let (top, at) = (u64_of(&mut b)?, u64_of(&mut b)?);
        graves.push((name.into(), epoch.into(), top, at));
    }
    b.is_empty().then_some((family, known_since, graves))
}

/// Each stream of a snapshot body (after the node id and kind): its name, position and kept
/// publications. None when the body is malformed.
#[allow(clippy::type_complexity)]
pub fn decode_snapshot(mut b: &[u8]) -> Option<Vec<(&str, Position, Vec<(u64, &str)>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = u16::from_le_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(&mut b, n)?).ok()?;
        let top = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
        let e = take(&mut b, 1)?[0] as usize;
        let epoch = std::str::from_utf8(take(&mut b, e)?).ok()?;
        let count = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        let mut pubs = Vec::with_capacity(count.min(b.len() / 12));
        for _ in 0..count {
            let offset = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
            let len = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
            pubs.push((offset, std::str::from_utf8(take(&mut b, len)?).ok()?));
        }
        let pos = StreamPosition {
            offset: top,
            epoch: epoch.into(),
        };
        out.push((name, pos, pubs));
    }
    Some(out)
}

/// In a process: take the supervisor's tombstones and stamp family (the frame just before its
/// history).
pub fn restore_graves(hub: &Hub, body: &[u8]) {
    match decode_graves(body) {
        Some((family, known_since, graves)) => {
            hub.history().restore_graves(family, known_since, graves)
        }
        None => tracing::warn!("channel history: malformed tombstones from the supervisor"),
    }
}

/// Set once this process has applied the supervisor's history.
static LOADED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// In a process: take the supervisor's history (a snapshot frame's body after the node id
/// and kind), then let the server start serving.
pub fn restore(hub: &Hub, body: &[u8]) {
    match decode_snapshot(body) {
        Some(streams) => {
            for (name, pos, pubs) in &streams {
                hub.history().restore(name, pos, pubs);
            }
            tracing::debug!(
                "channel history: {} streams from the supervisor",
                streams.len()
            );
        }
        None => tracing::warn!("channel history: a malformed snapshot from the supervisor"),
    }
    LOADED.notify_one();
}

/// Wait (at most `limit`) until the supervisor's history is applied: a client that recovers
/// at once must find it. False when it did not come in time (the process serves anyway;
/// recoveries then answer `recovered:false` until the history fills again).
pub async fn wait_for_snapshot(limit: Duration) -> bool {
    tokio::time::timeout(limit, LOADED.notified()).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_and_a_truncated_one_is_refused() {
        let seq = Sequencer::new(
            &HistorySettings {
                size: 10,
                ..HistorySettings::default()
            },
            1 << 30,
        );
        for i in 0..3 {
            seq.position("a", &i.to_string(), 0, |_| ());
        }
        seq.position("b", "\"x\"", 0, |_| ());
        let (graves, body) = seq.snapshot(|g, b| (g, b));
        assert_eq!(decode_graves(&graves[9..]).unwrap().2.len(), 0);
        let mut streams = decode_snapshot(&body[9..]).unwrap();
        streams.sort_by_key(|s| s.0);
        assert_eq!(streams.len(), 2);
        let (name, pos, pubs) = &streams[0];
        assert_eq!((*name, pos.offset, pubs.len()), ("a", 3, 3));
        let v: serde_json::Value = serde_json::from_str(pubs[2].1).unwrap();
        assert_eq!(v["data"], 2);
        assert_eq!(v["offset"], 3);
        assert_eq!(v["epoch"], &*pos.epoch);
        assert!(decode_snapshot(&body[9..body.len() - 1]).is_none());
        // The positioned frame every process gets decodes as one.
        let frames = seq.position("a", "7", 9, |f| f);
        assert_eq!(
            crate::serve::cluster::decode(0, &frames[0]),
            Some(crate::serve::cluster::Incoming::Publisher("a", 4, 9))
        );
        match crate::serve::cluster::decode(0, &frames[1]) {
            Some(crate::serve::cluster::Incoming::Positioned(c, o, e, t)) => {
                assert_eq!((c, o, e), ("a", 4, &*pos.epoch));
                assert!(t.contains(r#""data":7,"offset":4"#), "{t}");
            }
            other => panic!("{other:?}"),
        }
    }
}
