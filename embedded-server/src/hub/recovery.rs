//! Stream positions and recovery on the hub: publishes get a position and are kept
//! (`history.rs`), subscribes answer with the channel's position and, given the client's last
//! one, first send what it missed. Off (no position, no copy) unless the channels app enables
//! history ([`HubHistory::enable`]).
//!
//! No gap and no duplicate between what a recovery sends and the live publications after
//! it: a publish assigns its offset, keeps it and takes its recipients under the history's
//! lock, and a recovering subscribe reads the history and joins the channel under the same
//! lock, so each publication is either in what the recovery reads or goes to the new
//! subscriber live, never both nor neither. Order, too: each channel has an ordering lock
//! (one of [`ORDER_LOCKS`], by the name's hash) held from the offset's assignment to the end
//! of its fan-out, and by a subscribe until its reply and missed publications are queued,
//! so a subscriber sees offsets in order. Publishes to different channels still fan out in
//! parallel.
//!
//! Under `serve --processes N` the supervisor assigns the positions
//! ([`HubHistory::sequence_elsewhere`]): a publish goes to it unpositioned
//! ([`Relay::Sequence`]) and comes back to every process, the publisher's included,
//! positioned ([`HubHistory::deliver_positioned`]), so every process holds the same
//! positions. Under `--cluster` Redis does the same for every node, and keeps the history a
//! node that restarted fetches on a recovery it cannot serve
//! ([`HubHistory::fetch_then_subscribe`]).

use super::history::{History, Position, Publisher, Unrecoverable, NO_PUBLISHER};
use super::relay::Relay;
use super::{fanout, Hub, Published, Subscribed};
use crate::app_settings::HistorySettings;
use crate::budget::Store;
use crate::frame::OpCode;
use crate::metrics::Metrics;
use crate::outbox::Shared;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

pub use super::history::Position as StreamPosition;

/// Ordering locks: a channel takes the one its name hashes to (two channels sharing one only
/// wait for each other's fan-out).
pub const ORDER_LOCKS: usize = 64;

/// The hub's history (a field of the hub, set once the channels app enables it): the store,
/// what it has charged to the memory budget, the ordering locks, and whether positions are
/// assigned elsewhere.
pub(super) struct Streams {
    store: Mutex<(History, usize)>,
    order: Vec<Mutex<()>>,
    sequenced: AtomicBool,
    /// Where a recovery this store cannot serve is fetched from (the Redis streams of
    /// `--cluster`), when there is such a place.
    fetch: std::sync::OnceLock<FetchFn>,
}

/// A recovery this node could not serve, handed to the shared store's fetcher
/// ([`HubHistory::set_fetch`]): fetch `channel`'s publications after `from`, merge them
/// ([`HubHistory::merge`]), then finish the subscribe with
/// `channels::protocol::subscribe(hub, &conn, &channel, cap, max_bytes, Some(&from))`, and
/// queue its reply when it returns one ([`Broker::send_text_to`](super::Broker::send_text_to)).
pub struct FetchRequest {
    /// The channel.
    pub channel: String,
    /// The client's last position.
    pub from: Position,
    /// The subscribing connection.
    pub conn: Arc<Shared>,
    /// Its subscription caps (count, names' bytes).
    pub cap: usize,
    /// The bytes its channel names may total.
    pub max_bytes: usize,
}

/// The fetcher [`HubHistory::set_fetch`] installs: it must not block (it spawns).
pub type FetchFn = Box<dyn Fn(FetchRequest) + Send + Sync>;

/// What a subscribe answered (see
/// [`Broker::subscribe_recovering`](super::Broker::subscribe_recovering)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// No recovery was asked for (or the connection was subscribed already).
    NotAsked,
    /// Every publication after the position was queued before any live one.
    Yes(usize),
    /// It could not be: the client reloads its state.
    No(Unrecoverable),
}

/// A publication as subscribers receive it with history on:
/// `{"channel":..,"data":..,"offset":N,"epoch":"E"}` (`data` is JSON text already).
pub fn envelope(channel: &str, data: &str, offset: u64, epoch: &str) -> String {
    let name = serde_json::to_string(channel).expect("a string serializes");
    let epoch = serde_json::to_string(epoch).expect("a string serializes");
    format!(r#"{{"channel":{name},"data":{data},"offset":{offset},"epoch":{epoch}}}"#)
}

/// The Unix time in microseconds (what history stamps are in; see `History::set_origin`).
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A random seed for this process's epochs (a restarted process gets other ones).
pub fn random_seed() -> u64 {
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

/// The hub's history (`hub.history()`): a borrow of the hub, free to make. Everything but
/// `enable` does nothing (or answers "off") until the channels app enables it.
#[derive(Clone, Copy)]
pub struct HubHistory<'h> {
    pub(super) hub: &'h Hub,
}

impl HubHistory<'_> {
    /// Keep per-channel history with `settings` (once; `size` 0 leaves it off). Its bytes are
    /// charged to the memory budget, and bounded by the smaller of `max_bytes` and a quarter of
    /// the budget, so history never takes what connections need.
    pub fn enable(self, settings: &HistorySettings) {
        if !settings.enabled() {
            return;
        }
        let mut s = settings.clone();
        s.max_bytes = s.max_bytes.min(self.hub.metrics.memory.limit() / 4);
        let mut store = History::new(s, random_seed());
        // Stamps are Unix time: `now` 0 is when this hub started.
        let since_start = super::mono().saturating_sub(self.hub.start).as_micros() as u64;
        let origin = unix_us().saturating_sub(since_start);
        store.set_origin(origin);
        // To the millisecond, from the monotonic clock: a stamp is never later than it was
        // given nor a tombstone earlier than its stream went, whatever the wall clock does.
        let start = self.hub.start;
        store.set_clock(Box::new(move || {
            origin + super::mono().saturating_sub(start).as_micros() as u64
        }));
        let _ = self.hub.history.set(Streams {
            store: Mutex::new((store, 0)),
            order: (0..ORDER_LOCKS).map(|_| Mutex::new(())).collect(),
            sequenced: AtomicBool::new(false),
            fetch: std::sync::OnceLock::new(),
        });
    }

    /// The history's bounds in force (None: off).
    pub fn settings(self) -> Option<HistorySettings> {
        let h = self.hub.history.get()?;
        let store = h.store.lock().unwrap();
        Some(store.0.settings().clone())
    }

    /// Fetch what this node does not keep from a shared store on a recovery (once).
    pub fn set_fetch(self, f: FetchFn) {
        if let Some(h) = self.hub.history.get() {
            let _ = h.fetch.set(f);
        }
    }

    /// A recovery from `from` this node cannot serve (another epoch, or trimmed) while a
    /// shared store may: handed to the fetcher, which finishes the subscribe (true). False
    /// when it is served here (or nowhere better), as a plain subscribe.
    pub fn fetch_then_subscribe(
        self,
        conn: &Arc<Shared>,
        channel: &str,
        from: &Position,
        cap: usize,
        max_bytes: usize,
    ) -> bool {
        let Some(h) = self.hub.history.get() else {
            return false;
        };
        let Some(fetch) = h.fetch.get() else {
            return false;
        };
        // A stamp (or `(0, "")`) is decided by what this node has seen; the shared store
        // keeps no tombstones and cannot tell more.
        if from.is_stamp() || (from.offset == 0 && from.epoch.is_empty()) {
            return false;
        }
        let (kept, local) = {
            let mut store = h.store.lock().unwrap();
            let r = store.0.since(channel, from, usize::MAX, self.hub.now());
            h.settle(&mut store, &self.hub.metrics);
            (store.0.peek(channel).is_some(), r)
        };
        // Nothing here about the channel (this node started after it), or not enough.
        // Kept here under the shared store's epoch: another epoch is not the shared store's
        // either, so only publications older than those kept are worth a read (a client
        // cannot make the node read the shared store by naming epochs that do not exist).
        if kept && !matches!(local, Err(Unrecoverable::TooOld)) {
            return false;
        }
        fetch(FetchRequest {
            channel: channel.to_string(),
            from: from.clone(),
            conn: conn.clone(),
            cap,
            max_bytes,
        });
        true
    }

    /// Take `channel`'s publications fetched from a shared store: its position `top`, and
    /// what it keeps after some offset, oldest first (see `History::merge_older`).
    pub fn merge(self, channel: &str, top: &Position, pubs: Vec<(u64, String)>) {
        let Some(h) = self.hub.history.get() else {
            return;
        };
        let _order = h.order_lock(channel);
        let mut store = h.store.lock().unwrap();
        let pubs = pubs.into_iter().map(|(o, t)| (o, Arc::from(t))).collect();
        store.0.merge_older(channel, top, pubs, self.hub.now());
        h.settle(&mut store, &self.hub.metrics);
    }

    /// Whether publications are positioned and kept.
    pub fn enabled(self) -> bool {
        self.hub.history.get().is_some()
    }

    /// Positions are assigned by the relay's other end (the `--processes` supervisor): a
    /// publish is relayed as [`Relay::Sequence`] and delivered here when it comes back
    /// through [`HubHistory::deliver_positioned`].
    pub fn sequence_elsewhere(self) {
        if let Some(h) = self.hub.history.get() {
            h.sequenced.store(true, Relaxed);
        }
    }

    /// `channel`'s position and the publications it keeps, if it has a stream.
    pub fn peek(self, channel: &str) -> Option<(Position, usize)> {
        let h = self.hub.history.get()?;
        let store = h.store.lock().unwrap();
        store.0.peek(channel)
    }

    /// Take another store's tombstones and stamp family (a new process taking the
    /// supervisor's, see `History::adopt_graves`).
    pub fn restore_graves(
        self,
        family: u64,
        known_since: u64,
        graves: Vec<super::history::GraveCopy>,
    ) {
        let Some(h) = self.hub.history.get() else {
            return;
        };
        let mut store = h.store.lock().unwrap();
        store.0.adopt_graves(family, known_since, graves);
        h.settle(&mut store, &self.hub.metrics);
    }

    /// Publications the history dropped for the channel and publisher shares.
    pub fn evicted(self) -> super::history::Evicted {
        self.hub
            .history
            .get()
            .map_or_else(Default::default, |h| h.store.lock().unwrap().0.evicted())
    }

    /// Tombstones the history keeps now and those dropped for its bound ((0, 0) when off).
    pub fn tombstones(self) -> (usize, u64) {
        self.hub
            .history
            .get()
            .map_or((0, 0), |h| h.store.lock().unwrap().0.tombstones())
    }

    /// Bytes the history holds now (0 when off).
    pub fn bytes(self) -> usize {
        self.hub
            .history
            .get()
            .map_or(0, |h| h.store.lock().unwrap().0.bytes())
    }

    /// A publication positioned elsewhere (the supervisor): kept (by `publisher`, the key
    /// the supervisor gave its publisher, so every copy holds it to the same share), then
    /// delivered to this node's subscribers (never relayed again). A duplicate of one kept
    /// already is dropped. Without history it is delivered as it is.
    pub fn deliver_positioned(
        self,
        channel: &str,
        pos: &Position,
        text: &str,
        publisher: Publisher,
    ) {
        let Some(h) = self.hub.history.get() else {
            return self.hub.relay().deliver_channel(channel, text);
        };
        let _order = h.order_lock(channel);
        let subs = {
            let mut store = h.store.lock().unwrap();
            let kept = store
                .0
                .insert(channel, pos, Arc::from(text), publisher, self.hub.now());
            h.settle(&mut store, &self.hub.metrics);
            if !kept {
                return;
            }
            self.hub.broker().subscribers(channel)
        };
        let sent = fanout::fan_out(self.hub, OpCode::Text, text.as_bytes(), subs.iter());
        self.hub
            .metrics
            .publish_dropped
            .fetch_add(sent.dropped, Relaxed);
    }

    /// Take a copy of another store's stream (a new process filling its history from the
    /// supervisor's): its position, and what it keeps, oldest first. Nothing is delivered.
    pub fn restore(self, channel: &str, pos: &Position, pubs: &[(u64, &str)]) {
        let Some(h) = self.hub.history.get() else {
            return;
        };
        let _order = h.order_lock(channel);
        let mut store = h.store.lock().unwrap();
        let now = self.hub.now();
        let first = pubs.first().map_or(pos.offset, |p| p.0.saturating_sub(1));
        store.0.reset_to(channel, &pos.epoch, first, now);
        for (offset, text) in pubs {
            let at = Position {
                offset: *offset,
                epoch: pos.epoch.clone(),
            };
            store
                .0
                .insert(channel, &at, Arc::from(*text), NO_PUBLISHER, now);
        }
        store.0.reset_to(channel, &pos.epoch, pos.offset, now);
        h.settle(&mut store, &self.hub.metrics);
    }
}

impl Streams {
    /// The ordering lock of `channel` (see the module's documentation).
    fn order_lock(&self, channel: &str) -> MutexGuard<'_, ()> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let i = BuildHasherDefault::<DefaultHasher>::default().hash_one(channel) as usize;
        // A poisoned lock guards nothing of its own (the data is in the store).
        self.order[i % ORDER_LOCKS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Bring the budget's charge to what the store holds now.
    fn settle(&self, store: &mut (History, usize), metrics: &Metrics) {
        let now = store.0.bytes();
        let was = std::mem::replace(&mut store.1, now);
        if now > was {
            metrics.memory.charge(Store::History, now - was);
        } else {
            metrics.memory.release(Store::History, was - now);
        }
    }

    /// [`Broker::publish_positioned_by`](super::Broker::publish_positioned_by) with history
    /// on: the publication gets its position and is kept, then fans out, in the order the
    /// module's documentation sets.
    pub(super) fn publish(
        &self,
        hub: &Hub,
        publisher: Publisher,
        channel: &str,
        data: &str,
    ) -> (Published, Option<Position>) {
        let h = self;
        // While the relay is down this node positions its own (an epoch of its own, which the
        // relay's replaces once it is back): delivered here rather than lost.
        if h.sequenced.load(Relaxed) && hub.metrics.backplane_up.load(Relaxed) == 1 {
            if let Some(r) = hub.relay.get() {
                r(Relay::Sequence {
                    channel,
                    data,
                    publisher,
                });
                return (Published::default(), None);
            }
        }
        let _order = h.order_lock(channel);
        let now = hub.now();
        let (pos, text, subs) = {
            let mut store = h.store.lock().unwrap();
            let (pos, text) = store.0.append(channel, publisher, now, |o, e| {
                envelope(channel, data, o, e)
            });
            h.settle(&mut store, &hub.metrics);
            (pos, text, hub.broker().subscribers(channel))
        };
        let sent = fanout::fan_out(hub, OpCode::Text, text.as_bytes(), subs.iter());
        hub.metrics.publish_dropped.fetch_add(sent.dropped, Relaxed);
        hub.relay().send(Relay::Channel {
            channel,
            text: &text,
        });
        (sent, Some(pos))
    }

    /// [`Broker::subscribe_recovering`](super::Broker::subscribe_recovering) with history on:
    /// joined, answered and sent what it missed under the channel's ordering lock, so no
    /// publish to it fans out in between.
    pub(super) fn subscribe(
        &self,
        hub: &Hub,
        conn: &Arc<Shared>,
        channel: &str,
        (cap, max_bytes): (usize, usize),
        from: Option<&Position>,
    ) -> Result<Recovered, Subscribed> {
        let h = self;
        let _order = h.order_lock(channel);
        let now = hub.now();
        let (reply, missed, recovered) = {
            let mut store = h.store.lock().unwrap();
            let joined = hub.broker().join(conn, channel, cap, max_bytes, true);
            let from = match joined {
                Subscribed::Added => from,
                // Subscribed already: it has had every publication since, live.
                Subscribed::Already => None,
                refused => return Err(refused),
            };
            // A channel nobody published to yet has no stream, and a subscribe makes none:
            // streams cost bytes of the history's bound, and subscribes to made-up names
            // would otherwise push out the publications other channels keep. It answers a
            // stamp, from which a recovery gets every publication since (or `too_old`).
            let pos = store.0.position_if_any(channel, now);
            let mut reply = serde_json::json!({
                "op": "subscribed",
                "channel": channel,
                "offset": pos.offset,
                "epoch": &*pos.epoch,
            });
            let (missed, recovered) = match from {
                None => (Vec::new(), Recovered::NotAsked),
                Some(from) => {
                    match store
                        .0
                        .since(channel, from, hub.config.send_queue_bytes / 2, now)
                    {
                        Ok(missed) => {
                            reply["recovered"] = true.into();
                            let n = missed.len();
                            (missed, Recovered::Yes(n))
                        }
                        Err(why) => {
                            reply["recovered"] = false.into();
                            reply["reason"] = why.reason().into();
                            (Vec::new(), Recovered::No(why))
                        }
                    }
                }
            };
            h.settle(&mut store, &hub.metrics);
            (reply.to_string(), missed, recovered)
        };
        let m = &hub.channel_metrics;
        match &recovered {
            Recovered::NotAsked => {}
            Recovered::Yes(n) => {
                m.recovery("recovered");
                m.recovered_publications.fetch_add(*n as u64, Relaxed);
            }
            Recovered::No(why) => m.recovery(why.reason()),
        }
        // Queued under the ordering lock: no publish to this channel fans out before these.
        let me = std::iter::once(conn);
        fanout::fan_out(hub, OpCode::Text, reply.as_bytes(), me.clone());
        for text in &missed {
            fanout::fan_out(hub, OpCode::Text, text.as_bytes(), me.clone());
        }
        Ok(recovered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;
    use crate::metrics::Metrics;

    fn hub() -> Hub {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        hub.history().enable(&HistorySettings {
            size: 100,
            ..HistorySettings::default()
        });
        hub
    }

    #[test]
    fn the_envelope_carries_the_position_after_the_data() {
        assert_eq!(
            envelope("a\"b", "{\"x\":1}", 7, "e1"),
            r#"{"channel":"a\"b","data":{"x":1},"offset":7,"epoch":"e1"}"#
        );
    }

    #[test]
    fn publishes_get_positions_kept_and_charged_to_the_budget() {
        let hub = hub();
        let (_, p1) = hub
            .broker()
            .publish_with_position("a", &serde_json::json!(1));
        let (_, p2) = hub
            .broker()
            .publish_with_position("a", &serde_json::json!(2));
        let (p1, p2) = (p1.unwrap(), p2.unwrap());
        assert_eq!((p1.offset, p2.offset), (1, 2));
        assert_eq!(p1.epoch, p2.epoch);
        assert_eq!(hub.history().peek("a").unwrap(), (p2, 2));
        let held = hub.metrics.memory.used_by(Store::History);
        assert!(held > 0 && held == hub.history().bytes());
        // Off: no position.
        let off = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        assert_eq!(
            off.broker()
                .publish_with_position("a", &serde_json::json!(1))
                .1,
            None
        );
    }

    #[test]
    fn a_recovering_subscribe_is_told_what_it_can_have() {
        let hub = hub();
        let c = hub.registry().register();
        for i in 0..3 {
            hub.broker()
                .publish_with_position("a", &serde_json::json!(i));
        }
        let (pos, _) = hub.history().peek("a").unwrap();
        let from = Position {
            offset: 1,
            epoch: pos.epoch.clone(),
        };
        assert_eq!(
            hub.broker()
                .subscribe_recovering(&c, "a", 10, 1000, Some(&from)),
            Ok(Recovered::Yes(2))
        );
        // Subscribed already: nothing replayed twice.
        assert_eq!(
            hub.broker()
                .subscribe_recovering(&c, "a", 10, 1000, Some(&from)),
            Ok(Recovered::NotAsked)
        );
        let d = hub.registry().register();
        let wrong = Position {
            offset: 1,
            epoch: Arc::from("not-this-one"),
        };
        assert_eq!(
            hub.broker()
                .subscribe_recovering(&d, "a", 10, 1000, Some(&wrong)),
            Ok(Recovered::No(Unrecoverable::Epoch))
        );
        assert_eq!(
            hub.broker().subscribe_recovering(&d, "b", 0, 1000, None),
            Err(Subscribed::Full)
        );
    }
}
