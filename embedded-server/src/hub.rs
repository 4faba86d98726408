//! Everything shared by all connections: the registry, broadcast and channels (encode once,
//! write N times), the coarse clock, and the heartbeat sweep.
//!
//! Heartbeats are one task for the whole server, not a timer per connection: once a second it
//! walks the registry, pings connections that have been quiet for an interval (one pre-encoded
//! ping frame shared by all) and closes those silent past the timeout. On an idle server with
//! 10k connections that is a few microseconds of work per second.

//!
//! The channels app's JSON protocol is parsed and authorised in `channels::protocol`; the hub
//! keeps the subscriptions it asks for and fans publishes out.

use crate::budget::Store;
use crate::config::ServerConfig;
use crate::frame::{self, OpCode};
use crate::metrics::Metrics;
use crate::outbox::Shared;
use bytes::Bytes;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Close code for a connection silent past the heartbeat timeout (private-use range).
pub const HEARTBEAT_CLOSE: u16 = 4000;

/// A message this node fanned out locally that other nodes should deliver too (a cluster
/// backplane relays it; see `Hub::set_relay`).
pub enum Relay<'a> {
    /// A broadcast to every connection.
    Broadcast {
        /// Text or binary.
        op: OpCode,
        /// The message.
        payload: &'a [u8],
    },
    /// A channel publish (text).
    Channel {
        /// The channel's name.
        channel: &'a str,
        /// The message, as subscribers receive it.
        text: &'a str,
    },
}

/// One page of presence ([`Hub::channel_page`]).
#[derive(Debug, Clone, Default)]
pub struct ChannelPage {
    /// The channels of the page and their subscribers, in byte order of the names.
    pub counts: Vec<(Arc<str>, usize)>,
    /// Subscriptions on this node, every channel counted (not only the page's).
    pub subscriptions: usize,
    /// Whether more channels match after the page's last.
    pub truncated: bool,
}

/// What one publish's fan-out did on this node ([`Hub::publish_report`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    /// Subscribers the message was queued for (or written to the socket of, when nothing was
    /// waiting). Not a receipt: a subscriber closed later for backpressure loses what was
    /// still queued for it (counted in `ws_backpressure_closes_total`, not here).
    pub queued: u64,
    /// Subscribers it could not be queued for: over their send-queue cap (closed now by
    /// backpressure), already closing, or gone.
    pub dropped: u64,
}

/// What [`Hub::subscribe_capped`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscribed {
    /// Now subscribed.
    Added,
    /// It was already.
    Already,
    /// Not added: the connection holds the most subscriptions allowed.
    Full,
    /// Not added: the names of the connection's subscriptions would pass its byte budget
    /// ([`MAX_SUBSCRIPTION_BYTES`](crate::app_settings::MAX_SUBSCRIPTION_BYTES)).
    NamesFull,
    /// Not added: the server's memory budget has no room for another subscription
    /// ([`Hub::subscribe_within`] only; an application's own subscribes are charged without
    /// a check).
    OverBudget,
    /// Not added: the connection has ended.
    Ended,
}

/// The backplane's hook (see [`Hub::set_relay`]).
pub type RelayFn = Box<dyn Fn(Relay<'_>) + Send + Sync>;

/// Channel subscriptions, both ways: who is in a channel (for a publish) and which channels a
/// connection is in (so that its close leaves them without the connection keeping a list: a
/// connection that never subscribes costs nothing here). A name is stored once (`Arc<str>`,
/// shared by both maps and every subscriber's list).
///
/// `names` orders the channels for presence pages, so that a page costs its own length under
/// the lock and not a scan of every channel; it changes only when a channel gains its first
/// subscriber or loses its last, never on a publish.
#[derive(Default)]
struct Channels {
    subs: HashMap<Arc<str>, HashMap<u64, Arc<Shared>>>,
    by_conn: HashMap<u64, Mine>,
    names: BTreeSet<Arc<str>>,
    /// Subscriptions in all (every channel's members).
    total: usize,
}

/// What one subscription is charged to the memory budget besides its name's bytes: its entry
/// in the channel's member table and in the connection's list (a pointer each, with the
/// tables' slack), rounded up.
const SUBSCRIPTION_ENTRY_BYTES: usize = 64;

/// The budget charge of subscriptions whose names total `name_bytes`.
fn subscription_cost(count: usize, name_bytes: usize) -> usize {
    count * SUBSCRIPTION_ENTRY_BYTES + name_bytes
}

impl Channels {
    /// Take `id` out of `channel`'s members; the channel goes when it was the last.
    fn leave(&mut self, channel: &str, id: u64) -> bool {
        let Some(members) = self.subs.get_mut(channel) else {
            return false;
        };
        let was = members.remove(&id).is_some();
        if was {
            self.total -= 1;
        }
        if members.is_empty() {
            self.subs.remove(channel);
            self.names.remove(channel);
        }
        was
    }
}

/// One connection's subscriptions, and the bytes of their names (its budget).
#[derive(Default)]
struct Mine {
    names: Vec<Arc<str>>,
    bytes: usize,
}

/// A registry entry: a connection's `Shared`, found by the id it holds. A slot of the table is
/// then one pointer, not an id beside it: 9 bytes a slot with the control byte instead of 17,
/// about 13 bytes less per connection at the table's usual load (BENCHMARKS.md, "Idle
/// bytes per connection").
struct Entry(Arc<Shared>);

impl std::ops::Deref for Entry {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Entry {}

impl std::hash::Hash for Entry {
    /// As the id's own hash: `Borrow<u64>` lets the table be searched by id.
    fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
        self.0.id.hash(state)
    }
}

impl std::borrow::Borrow<u64> for Entry {
    fn borrow(&self) -> &u64 {
        &self.0.id
    }
}

/// What every connection shares: the configuration, the metrics, the registry of open
/// connections, channel subscriptions, the offload pool's queue and the cluster relay.
pub struct Hub {
    /// The server's configuration (fixed once the server is built).
    pub config: ServerConfig,
    /// The counters behind /metrics.
    pub metrics: Arc<Metrics>,
    /// The channels app's access-control counters (also in /metrics).
    pub channel_metrics: Arc<crate::app_settings::ChannelMetrics>,
    conns: RwLock<HashSet<Entry>>,
    channels: Mutex<Channels>,
    /// The offload pool's queue, when the server has a pool.
    pub(crate) offload: std::sync::OnceLock<crate::offload::Sender>,
    /// Closes the application asked for outside a callback (`Conn::close`): the code and
    /// reason each connection's task sends, by connection id; `app_close_count` entries.
    app_closes: Mutex<HashMap<u64, (u16, Box<str>)>>,
    app_close_count: AtomicU64,
    next_id: AtomicU64,
    /// When the server started, on the clock `now()` reads (`mono`).
    start: Duration,
    ping: Bytes,
    /// The cluster backplane, when one is configured.
    relay: std::sync::OnceLock<RelayFn>,
}

/// A monotonic clock for `Hub::now`. On Linux the coarse clock (`CLOCK_MONOTONIC_COARSE`, the
/// kernel's last tick: a few ms of resolution, which whole seconds do not need) is a plain vDSO
/// read, without the TSC read and conversion of `Instant::now` (~0.5 % of the server's CPU on an
/// echo, BENCHMARKS.md "The echo path's user space").
#[cfg(target_os = "linux")]
fn mono() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant Linux knows
    // (since 2.6.32), so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        // Cannot happen (above); were it to, a stuck clock would stop every heartbeat timeout.
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return EPOCH.get_or_init(std::time::Instant::now).elapsed();
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn mono() -> Duration {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed()
}

impl Hub {
    /// A hub with no connections (a server builds its own and hands it out with `Server::hub`).
    pub fn new(config: ServerConfig, metrics: Arc<Metrics>) -> Hub {
        let channel_metrics = config.channels.metrics.clone();
        Hub {
            config,
            metrics,
            // The configuration's, so the channels app built from the same configuration
            // counts refused upgrades (before any connection exists) into the hub's counters.
            channel_metrics,
            conns: RwLock::new(HashSet::new()),
            channels: Mutex::new(Channels::default()),
            offload: std::sync::OnceLock::new(),
            app_closes: Mutex::new(HashMap::new()),
            app_close_count: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            start: mono(),
            ping: Bytes::from(frame::encode_message(OpCode::Ping, b"", 125, false)),
            relay: std::sync::OnceLock::new(),
        }
    }

    /// Install the cluster backplane: every `broadcast` and channel publish made on this node
    /// is handed to it after local delivery. Set once.
    pub fn set_relay(&self, f: RelayFn) {
        let _ = self.relay.set(f);
    }

    /// A broadcast that came from another node: local delivery only (never relayed again).
    pub fn deliver_remote_broadcast(&self, op: OpCode, payload: &[u8]) {
        self.metrics.broadcasts.fetch_add(1, Relaxed);
        self.fan_out(op, payload, self.everyone().iter());
    }

    /// A channel message (already `{"channel":..,"data":..}` text) from another node.
    pub fn deliver_remote_channel(&self, channel: &str, text: &str) {
        let subs = self.subscribers(channel);
        self.fan_out(OpCode::Text, text.as_bytes(), subs.iter());
    }

    /// Every connection now. A fan-out writes to the sockets (a send per recipient, see
    /// `Shared::push`), so it works on this copy, not under the registry's lock: a lock held
    /// for a whole fan-out (~1.5 s to 100k here) would stall every accept and close behind it.
    fn everyone(&self) -> Vec<Arc<Shared>> {
        self.conns
            .read()
            .unwrap()
            .iter()
            .map(|e| e.0.clone())
            .collect()
    }

    /// A channel's subscribers now (a copy, for the same reason).
    fn subscribers(&self, channel: &str) -> Vec<Arc<Shared>> {
        let map = self.channels.lock().unwrap();
        map.subs
            .get(channel)
            .map(|subs| subs.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Coarse clock: whole seconds since the server started. Read on every read of every
    /// connection (its `last_seen`), so it reads the cheapest monotonic clock there is.
    pub fn now(&self) -> u32 {
        mono().saturating_sub(self.start).as_secs() as u32
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.conns.read().unwrap().len()
    }

    /// No connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add a connection to the registry (the server does this on upgrade).
    pub fn register(&self) -> Arc<Shared> {
        let id = self.next_id.fetch_add(1, Relaxed);
        let s = Arc::new(Shared::new(
            id,
            self.config.send_queue_bytes,
            self.config.backpressure_close.code(),
            self.now(),
        ));
        self.conns.write().unwrap().insert(Entry(s.clone()));
        self.metrics.connections.fetch_add(1, Relaxed);
        s
    }

    pub(crate) fn put_app_close(&self, id: u64, code: u16, reason: &str) {
        let mut m = self.app_closes.lock().unwrap();
        if m.insert(id, (code, reason.into())).is_none() {
            self.app_close_count.fetch_add(1, Relaxed);
        }
    }

    /// The reason of the application's close of `id` with `code`, taken (once).
    pub(crate) fn take_app_close(&self, id: u64, code: u16) -> Option<Box<str>> {
        if self.app_close_count.load(Relaxed) == 0 {
            return None;
        }
        let mut m = self.app_closes.lock().unwrap();
        let (c, reason) = m.remove(&id)?;
        self.app_close_count.fetch_sub(1, Relaxed);
        (c == code).then_some(reason)
    }

    /// Remove a connection from the registry and from every channel it joined. It is marked
    /// ended first, so a `subscribe` racing with this cannot add it back.
    pub fn unregister(&self, s: &Shared) {
        s.end(&self.metrics);
        if self.conns.write().unwrap().remove(&s.id) {
            self.metrics.connections.fetch_sub(1, Relaxed);
        }
        // A close asked for as the connection ended, never acted on.
        let _ = self.take_app_close(s.id, 0);
        if s.subscribed() {
            let mut map = self.channels.lock().unwrap();
            let mine = map.by_conn.remove(&s.id).unwrap_or_default();
            self.metrics.memory.release(
                Store::Subscriptions,
                subscription_cost(mine.names.len(), mine.bytes),
            );
            for c in mine.names {
                map.leave(&c, s.id);
            }
        }
    }

    /// Add `conn` to `channel`. False when the connection has ended (nothing is added). No
    /// cap: an application subscribing on a client's request should use
    /// [`Hub::subscribe_capped`], as the channels protocol does.
    pub fn subscribe(&self, conn: &Arc<Shared>, channel: &str) -> bool {
        self.subscribe_capped(conn, channel, usize::MAX) != Subscribed::Ended
    }

    /// Add `conn` to `channel` unless it already holds `cap` other subscriptions (checked
    /// under the same lock as the insert, so concurrent subscribes cannot pass the cap). No
    /// budget on the names' bytes: see [`Hub::subscribe_within`].
    pub fn subscribe_capped(&self, conn: &Arc<Shared>, channel: &str, cap: usize) -> Subscribed {
        self.join(conn, channel, cap, usize::MAX, false)
    }

    /// [`Hub::subscribe_capped`], also refusing ([`Subscribed::NamesFull`]) a subscription
    /// that would bring the bytes of the connection's channel names past `max_bytes`, and
    /// ([`Subscribed::OverBudget`]) one the server's memory budget has no room for: what the
    /// channels protocol uses for a client's subscribes.
    pub fn subscribe_within(
        &self,
        conn: &Arc<Shared>,
        channel: &str,
        cap: usize,
        max_bytes: usize,
    ) -> Subscribed {
        self.join(conn, channel, cap, max_bytes, true)
    }

    /// Every subscribe comes here. Each subscription is charged to the memory budget
    /// (`Store::Subscriptions`): checked when a client asks (`checked`), unchecked when the
    /// application does.
    fn join(
        &self,
        conn: &Arc<Shared>,
        channel: &str,
        cap: usize,
        max_bytes: usize,
        checked: bool,
    ) -> Subscribed {
        let mut map = self.channels.lock().unwrap();
        // Checked under the lock `unregister` takes after marking the end: no subscription
        // outlives its connection.
        if conn.ended() {
            return Subscribed::Ended;
        }
        let (held, bytes) = match map.by_conn.get(&conn.id) {
            Some(mine) if mine.names.iter().any(|c| &**c == channel) => return Subscribed::Already,
            Some(mine) => (mine.names.len(), mine.bytes),
            None => (0, 0),
        };
        if held >= cap {
            return Subscribed::Full;
        }
        if bytes.saturating_add(channel.len()) > max_bytes {
            return Subscribed::NamesFull;
        }
        let cost = subscription_cost(1, channel.len());
        if checked {
            if !self
                .metrics
                .memory
                .try_charge(Store::Subscriptions, cost, 0)
            {
                return Subscribed::OverBudget;
            }
        } else {
            self.metrics.memory.charge(Store::Subscriptions, cost);
        }
        conn.set_subscribed();
        let Channels {
            subs,
            by_conn,
            names,
            total,
        } = &mut *map;
        // The channel's own key when it has subscribers already: one allocation per name.
        let name = match subs.get_key_value(channel) {
            Some((k, _)) => k.clone(),
            None => {
                let name: Arc<str> = Arc::from(channel);
                names.insert(name.clone());
                name
            }
        };
        subs.entry(name.clone())
            .or_default()
            .insert(conn.id, conn.clone());
        *total += 1;
        let mine = by_conn.entry(conn.id).or_default();
        mine.bytes += name.len();
        mine.names.push(name);
        Subscribed::Added
    }

    /// Remove `conn` from `channel`; returns whether it was subscribed.
    pub fn unsubscribe(&self, conn: &Shared, channel: &str) -> bool {
        let mut map = self.channels.lock().unwrap();
        let was = map.leave(channel, conn.id);
        if let Some(mine) = map.by_conn.get_mut(&conn.id) {
            if let Some(i) = mine.names.iter().position(|c| &**c == channel) {
                mine.bytes -= channel.len();
                mine.names.swap_remove(i);
                self.metrics
                    .memory
                    .release(Store::Subscriptions, subscription_cost(1, channel.len()));
            }
            if mine.names.is_empty() {
                map.by_conn.remove(&conn.id);
            }
        }
        was
    }

    /// Subscribers of `channel` now.
    pub fn subscriber_count(&self, channel: &str) -> usize {
        let map = self.channels.lock().unwrap();
        map.subs.get(channel).map_or(0, |m| m.len())
    }

    /// One page of presence: the channels whose names start with `prefix`, after `after`, in
    /// byte order, at most `limit`. The ordered index of names is walked from the page's first
    /// name, so the lock is held for the page's length (a reference count and a count per
    /// channel), not for a scan of every channel the node has.
    pub fn channel_page(&self, prefix: &str, after: Option<&str>, limit: usize) -> ChannelPage {
        use std::ops::Bound;
        let map = self.channels.lock().unwrap();
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut counts: Vec<(Arc<str>, usize)> = map
            .names
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|c| c.starts_with(prefix))
            .take(limit.saturating_add(1))
            .map(|c| (c.clone(), map.subs.get(c).map_or(0, HashMap::len)))
            .collect();
        let truncated = counts.len() > limit;
        counts.truncate(limit);
        ChannelPage {
            counts,
            subscriptions: map.total,
            truncated,
        }
    }

    /// Every channel with at least one subscriber on this node, and how many (presence).
    pub fn channel_counts(&self) -> Vec<(String, usize)> {
        let map = self.channels.lock().unwrap();
        map.subs
            .iter()
            .map(|(c, m)| (c.to_string(), m.len()))
            .collect()
    }

    /// Encode `payload` once and queue the same bytes on every connection. Peers that
    /// negotiated permessage-deflate get one compressed frame, compressed once per window size
    /// from a reset context: valid for every such peer whatever its context-takeover setting
    /// (a context-takeover peer's own compressor restarts before its next message, see
    /// `Shared::push_compressed`). The others get the plain frame.
    pub fn broadcast(&self, op: OpCode, payload: &[u8]) {
        self.metrics.broadcasts.fetch_add(1, Relaxed);
        self.fan_out(op, payload, self.everyone().iter());
        if let Some(r) = self.relay.get() {
            r(Relay::Broadcast { op, payload });
        }
    }

    /// Send one message to `recipients`: encoded once for the plain ones, compressed once per
    /// window size for those that negotiated permessage-deflate.
    fn fan_out<'a>(
        &self,
        op: OpCode,
        payload: &[u8],
        recipients: impl Iterator<Item = &'a Arc<Shared>>,
    ) -> Published {
        let plain = Bytes::from(frame::encode_message(
            op,
            payload,
            self.config.fragment_bytes,
            false,
        ));
        let d = &self.config.deflate;
        let compressible = d.enabled && payload.len() >= d.threshold;
        let mut compressed: [Option<(Bytes, bool)>; 16] = Default::default();
        let (mut sent, mut written, mut dropped) = (0, 0, 0);
        for c in recipients {
            let bits = c.shared_deflate_bits.load(Relaxed) as usize;
            let pushed = if bits == 0 || !compressible {
                c.push_tallied(plain.clone(), false, &self.metrics, &mut written)
            } else {
                let (f, rsv1) = compressed[bits].get_or_insert_with(|| {
                    if !crate::deflate::worth_compressing(payload, bits as u8, d.mem_level, d.level)
                    {
                        self.metrics.deflate_skipped.fetch_add(1, Relaxed);
                        return (plain.clone(), false);
                    }
                    let mut z = Vec::new();
                    let created = crate::deflate::compress_fresh(
                        bits as u8,
                        d.mem_level,
                        d.level,
                        payload,
                        &mut z,
                    );
                    crate::deflate::charge_thread(&self.metrics.deflate_memory_bytes, created);
                    if z.len() >= payload.len() {
                        // Incompressible: deflate would only add its framing.
                        self.metrics.deflate_skipped.fetch_add(1, Relaxed);
                        return (plain.clone(), false);
                    }
                    let f = frame::encode_message(op, &z, self.config.fragment_bytes, true);
                    (Bytes::from(f), true)
                });
                c.push_tallied(f.clone(), *rsv1, &self.metrics, &mut written)
            };
            if pushed {
                sent += 1;
            } else {
                dropped += 1;
            }
        }
        crate::outbox::count_written(&self.metrics, written);
        self.metrics.messages_out.fetch_add(sent, Relaxed);
        Published {
            queued: sent,
            dropped,
        }
    }

    /// Queue a frame encoded in advance on every connection: one reference count per recipient,
    /// no copy, no per-recipient encoding. A recipient over its send-queue cap is closed; nobody
    /// waits for it.
    pub fn broadcast_encoded(&self, frame: Bytes) {
        self.metrics.broadcasts.fetch_add(1, Relaxed);
        let (mut sent, mut written) = (0, 0);
        for c in self.everyone() {
            if c.push_tallied(frame.clone(), false, &self.metrics, &mut written) {
                sent += 1;
            }
        }
        crate::outbox::count_written(&self.metrics, written);
        self.metrics.messages_out.fetch_add(sent, Relaxed);
    }

    /// The naive loop the guide warns about: encode (allocate and copy) once per recipient.
    /// Kept as the benchmark's baseline.
    pub fn broadcast_naive(&self, op: OpCode, payload: &[u8]) {
        self.metrics.broadcasts.fetch_add(1, Relaxed);
        let conns = self.conns.read().unwrap();
        for c in conns.iter() {
            let frame = Bytes::from(frame::encode_message(
                op,
                payload,
                self.config.fragment_bytes,
                false,
            ));
            if c.push(frame, &self.metrics) {
                self.metrics.messages_out.fetch_add(1, Relaxed);
            }
        }
    }

    /// Publish to a channel in the channels protocol's envelope
    /// (`{"channel":..,"data":..}`): one encode, then the same frame to each subscriber.
    pub fn publish(&self, channel: &str, data: &serde_json::Value) {
        self.publish_delivered(channel, data);
    }

    /// [`Hub::publish`], answering how many of this node's subscribers the message was
    /// queued for: [`Published::queued`] of [`Hub::publish_report`].
    pub fn publish_delivered(&self, channel: &str, data: &serde_json::Value) -> u64 {
        self.publish_report(channel, data).queued
    }

    /// [`Hub::publish`], answering for how many of this node's subscribers the message was
    /// queued and for how many it could not be (counted by the fan-out itself: a subscriber
    /// that joins or leaves meanwhile is counted as it was served).
    pub fn publish_report(&self, channel: &str, data: &serde_json::Value) -> Published {
        let text = serde_json::json!({"channel": channel, "data": data}).to_string();
        self.publish_text_delivered(channel, &text)
    }

    /// Publish `text` as it is to a channel's subscribers (encoded once), and through the
    /// cluster relay to other nodes' subscribers.
    pub fn publish_text(&self, channel: &str, text: &str) {
        self.publish_text_delivered(channel, text);
    }

    fn publish_text_delivered(&self, channel: &str, text: &str) -> Published {
        let subs = self.subscribers(channel);
        let sent = self.fan_out(OpCode::Text, text.as_bytes(), subs.iter());
        self.metrics
            .publish_dropped
            .fetch_add(sent.dropped, Relaxed);
        if let Some(r) = self.relay.get() {
            r(Relay::Channel { channel, text });
        }
        sent
    }

    /// Publish a binary message to a channel's subscribers on this node (the cluster relay
    /// carries text only).
    pub fn publish_binary(&self, channel: &str, payload: &[u8]) {
        let subs = self.subscribers(channel);
        let sent = self.fan_out(OpCode::Binary, payload, subs.iter());
        self.metrics
            .publish_dropped
            .fetch_add(sent.dropped, Relaxed);
    }

    /// One heartbeat sweep (run once a second).
    pub fn heartbeat(&self) {
        let now = self.now();
        let interval = self.config.heartbeat_interval.as_secs().max(1) as u32;
        let timeout = self.config.heartbeat_timeout.as_secs().max(1) as u32;
        let message_timeout = self.config.message_timeout.as_secs() as u32;
        let drain_timeout = self.config.send_drain_timeout.as_secs() as u32;
        let mut due = Vec::new();
        for c in self.conns.read().unwrap().iter() {
            // Progress, not liveness: a client that answers pings (or sends anything) but
            // never finishes its message, or never reads what it asked for, is closed all the
            // same once the bound passes.
            let since = c.input_since.load(Relaxed);
            if message_timeout > 0 && since != 0 && now.saturating_sub(since) >= message_timeout {
                if c.request_close_why(1008, crate::outbox::CloseWhy::MessageTimeout) {
                    self.metrics.message_timeouts.fetch_add(1, Relaxed);
                }
                continue;
            }
            if drain_timeout > 0 {
                let over = c.over_cap_since.load(Relaxed);
                if c.queued() <= c.send_cap() {
                    if over != 0 {
                        c.over_cap_since.store(0, Relaxed);
                    }
                } else if over == 0 {
                    c.over_cap_since.store(now.max(1), Relaxed);
                } else if now.saturating_sub(over) >= drain_timeout {
                    c.drain_timeout(&self.metrics);
                    continue;
                }
            }
            let seen = c.last_seen.load(Relaxed);
            let idle = now.saturating_sub(seen);
            if idle >= timeout {
                // A dead peer stays in the registry until its close wait ends, and is seen by
                // the sweeps meanwhile: count it once (1,000 half-open clients counted 2,686).
                if c.request_close(HEARTBEAT_CLOSE) {
                    self.metrics.heartbeat_timeouts.fetch_add(1, Relaxed);
                }
            } else if idle >= interval && now.saturating_sub(c.last_ping.load(Relaxed)) >= interval
            {
                c.last_ping.store(now, Relaxed);
                due.push(c.0.clone());
            }
        }
        // The pings are sends (see `Shared::push`): made after the registry lock is released.
        for c in due {
            if c.push(self.ping.clone(), &self.metrics) {
                self.metrics.pings_sent.fetch_add(1, Relaxed);
            }
        }
    }

    /// Ask every connection to close with 1001 (graceful shutdown).
    pub fn close_all(&self, code: u16) {
        for c in self.conns.read().unwrap().iter() {
            let _ = c.request_close(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscription_cap_counts_distinct_channels_and_frees_on_unsubscribe() {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        let c = hub.register();
        assert_eq!(hub.subscribe_capped(&c, "a", 2), Subscribed::Added);
        assert_eq!(hub.subscribe_capped(&c, "a", 2), Subscribed::Already);
        assert_eq!(hub.subscribe_capped(&c, "b", 2), Subscribed::Added);
        assert_eq!(hub.subscribe_capped(&c, "c", 2), Subscribed::Full);
        // A channel already held is not refused at the cap.
        assert_eq!(hub.subscribe_capped(&c, "b", 2), Subscribed::Already);
        assert!(hub.unsubscribe(&c, "a"));
        assert_eq!(hub.subscribe_capped(&c, "c", 2), Subscribed::Added);
        let mut counts = hub.channel_counts();
        counts.sort();
        assert_eq!(counts, vec![("b".to_string(), 1), ("c".to_string(), 1)]);
        hub.unregister(&c);
        assert!(hub.channel_counts().is_empty());
        assert_eq!(hub.subscribe_capped(&c, "d", 2), Subscribed::Ended);
    }

    #[test]
    fn the_names_of_a_connections_subscriptions_have_a_byte_budget_and_are_stored_once() {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        let (c, d) = (hub.register(), hub.register());
        let long = "x".repeat(200);
        assert_eq!(hub.subscribe_within(&c, &long, 10, 300), Subscribed::Added);
        assert_eq!(hub.subscribe_within(&c, "abc", 10, 300), Subscribed::Added);
        assert_eq!(
            hub.subscribe_within(&c, &"y".repeat(98), 10, 300),
            Subscribed::NamesFull
        );
        assert_eq!(
            hub.subscribe_within(&c, &"y".repeat(97), 10, 300),
            Subscribed::Added
        );
        // Unsubscribing gives the bytes back.
        assert!(hub.unsubscribe(&c, &long));
        assert_eq!(
            hub.subscribe_within(&c, &"z".repeat(200), 10, 300),
            Subscribed::Added
        );
        // A second subscriber shares the channel's one copy of the name.
        assert_eq!(hub.subscribe_within(&d, "abc", 10, 300), Subscribed::Added);
        let map = hub.channels.lock().unwrap();
        let key = map.subs.get_key_value("abc").unwrap().0;
        for id in [c.id, d.id] {
            let mine = &map.by_conn[&id];
            let n = mine.names.iter().find(|n| &***n == "abc").unwrap();
            assert!(Arc::ptr_eq(n, key));
        }
        // The member table's key, the presence index and the two connections' lists.
        assert_eq!(Arc::strong_count(key), 4);
    }

    #[test]
    fn subscriptions_are_charged_to_the_budget_and_a_full_budget_refuses_a_clients() {
        let metrics = Arc::new(Metrics::default());
        let hub = Hub::new(ServerConfig::default(), metrics.clone());
        let (c, d) = (hub.register(), hub.register());
        let used = || metrics.memory.used_by(Store::Subscriptions);
        assert_eq!(hub.subscribe_within(&c, "abc", 10, 300), Subscribed::Added);
        assert_eq!(used(), subscription_cost(1, 3));
        // Room for one more: the next client subscribe is refused, and counted.
        metrics
            .memory
            .set_limit(metrics.memory.used() + subscription_cost(1, 4));
        assert_eq!(hub.subscribe_within(&d, "abcd", 10, 300), Subscribed::Added);
        assert_eq!(
            hub.subscribe_within(&d, "e", 10, 300),
            Subscribed::OverBudget
        );
        assert_eq!(metrics.memory.refused(Store::Subscriptions), 1);
        assert!(!hub.channel_counts().iter().any(|(n, _)| n == "e"));
        // The application's own subscribe is charged but never refused.
        assert_eq!(hub.subscribe_capped(&d, "e", 10), Subscribed::Added);
        assert_eq!(used(), subscription_cost(3, 8));
        // An unsubscribe and an end give it all back.
        assert!(hub.unsubscribe(&d, "e"));
        assert_eq!(used(), subscription_cost(2, 7));
        hub.unregister(&c);
        hub.unregister(&d);
        assert_eq!((used(), metrics.memory.used()), (0, 0));
        let map = hub.channels.lock().unwrap();
        assert!(map.names.is_empty() && map.subs.is_empty() && map.total == 0);
    }

    #[test]
    fn a_presence_page_walks_the_index_from_its_first_name() {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        let (c, d) = (hub.register(), hub.register());
        for name in ["a/1", "a/2", "a/3", "b/1", "a"] {
            hub.subscribe(&c, name);
        }
        hub.subscribe(&d, "a/2");
        let names = |p: &ChannelPage| -> Vec<(String, usize)> {
            p.counts.iter().map(|(n, k)| (n.to_string(), *k)).collect()
        };
        let page = hub.channel_page("a/", None, 2);
        assert_eq!(names(&page), [("a/1".into(), 1), ("a/2".into(), 2)]);
        assert!(page.truncated);
        assert_eq!(page.subscriptions, 6);
        let page = hub.channel_page("a/", Some("a/2"), 2);
        assert_eq!(names(&page), [("a/3".into(), 1)]);
        assert!(!page.truncated);
        // An `after` before the prefix starts at the prefix; one after it past every match
        // gives an empty page.
        assert_eq!(hub.channel_page("b/", Some("a/9"), 5).counts.len(), 1);
        assert!(hub.channel_page("a/", Some("a/9"), 5).counts.is_empty());
        assert_eq!(hub.channel_page("", None, 10).counts.len(), 5);
        // A channel that loses its last subscriber leaves the index.
        hub.unsubscribe(&c, "a/1");
        assert_eq!(names(&hub.channel_page("a/", None, 1)), [("a/2".into(), 2)]);
        hub.unregister(&c);
        let page = hub.channel_page("", None, 10);
        assert_eq!(
            (names(&page), page.subscriptions),
            (vec![("a/2".into(), 1)], 1)
        );
    }
}
