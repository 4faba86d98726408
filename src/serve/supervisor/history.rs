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
//! (`backplane::snapshot`), and serves no client before it has applied it
//! (`backplane::deliver::wait_for_snapshot`).
//! The history includes the supervisor's tombstones and stamp family, so a position a process
//! gave before the channel's first publication is decided alike on every process, a restarted
//! one included.
//! The relay's queues stay bounded: a process whose queue is full misses the publication
//! (counted as before), and its copy then has a gap, which makes a recovery across it answer
//! `recovered:false` rather than skip a message.

use crate::serve::backplane::snapshot::{encode_graves, encode_snapshot};
use crate::serve::backplane::wire::{encode_positioned, encode_publisher};
use embedded_server::channels::HistorySettings;
use embedded_server::hub::envelope;
use embedded_server::hub::history::History;
use std::sync::Mutex;
use std::time::Instant;

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
            frames.push(encode_publisher(channel, pos.offset, publisher));
        }
        frames.push(encode_positioned(channel, pos.offset, &pos.epoch, &text));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::backplane::snapshot::{decode_graves, decode_snapshot};
    use crate::serve::backplane::wire::{decode, Incoming};

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
        assert_eq!(decode(0, &frames[0]), Some(Incoming::Publisher("a", 4, 9)));
        match decode(0, &frames[1]) {
            Some(Incoming::Positioned(c, o, e, t)) => {
                assert_eq!((c, o, e), ("a", 4, &*pos.epoch));
                assert!(t.contains(r#""data":7,"offset":4"#), "{t}");
            }
            other => panic!("{other:?}"),
        }
    }
}
