//! Everything shared by all connections: the registry, broadcast and channels (encode once,
//! write N times), the coarse clock, and the heartbeat sweep.
//!
//! Heartbeats are one task for the whole server, not a timer per connection: once a second it
//! walks the registry, pings connections that have been quiet for an interval (one pre-encoded
//! ping frame shared by all) and closes those silent past the timeout. On an idle server with
//! 10k connections that is a few microseconds of work per second.
//!
//! The channels app's JSON protocol is parsed and authorised in `channels::protocol`; the hub
//! keeps the subscriptions it asks for (subscriptions.rs: both ways, capped, charged to the
//! memory budget, and presence) and fans publishes out (here, beside broadcast).

pub mod drain;
pub mod history;
mod presence;
mod recovery;
mod subscriptions;

pub use drain::{Drain, SERVICE_RESTART};
pub use presence::{PresenceFn, RemotePresence};
pub use recovery::{
    envelope, random_seed, unix_us, FetchFn, FetchRequest, Recovered, StreamPosition,
};
pub use subscriptions::{ChannelPage, Subscribed};

use crate::config::ServerConfig;
use crate::frame::{self, OpCode};
use crate::metrics::Metrics;
use crate::outbox::Shared;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use subscriptions::Channels;

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
    /// A channel publish whose position the relay's other end assigns (the `--processes`
    /// supervisor, with history on): not delivered here yet; it comes back positioned, to
    /// every process, through [`Hub::deliver_positioned`].
    Sequence {
        /// The channel's name.
        channel: &'a str,
        /// The publication's `data`, as JSON text.
        data: &'a str,
        /// Who published it (a connection's id, or `history::NO_PUBLISHER`), for its share
        /// of the history.
        publisher: history::Publisher,
    },
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

/// The backplane's hook (see [`Hub::set_relay`]).
pub type RelayFn = Box<dyn Fn(Relay<'_>) + Send + Sync>;

/// A registry entry: a connection's `Shared`, found by the id it holds. A slot of the table is
/// then one pointer, not an id beside it: 9 bytes a slot with the control byte instead of 17,
/// about 13 bytes less per connection at the table's usual load
/// (bench/results/2026-12-01-idle-bytes.md).
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
    /// Channel history and stream positions, when the channels app enables them.
    history: std::sync::OnceLock<recovery::HubHistory>,
    /// Readiness (`/readyz`) and the drain's plan: ready from the start, draining once
    /// `begin_drain` is called, never ready again (a drained server is restarted, not revived).
    pub drain: Drain,
    /// What the other nodes of the cluster say about a channel, when a backplane hears them.
    remote_presence: std::sync::OnceLock<PresenceFn>,
}

/// A monotonic clock for `Hub::now`. On Linux the coarse clock (`CLOCK_MONOTONIC_COARSE`, the
/// kernel's last tick: a few ms of resolution, which whole seconds do not need) is a plain vDSO
/// read, without the TSC read and conversion of `Instant::now` (~0.5 % of the server's CPU on an
/// echo, bench/results/2026-12-01-echo-path.md).
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
        Hub {
            config,
            metrics,
            // The channels app is handed these (`Server::builtin`), so refused upgrades
            // (before any connection exists) count here too.
            channel_metrics: Arc::default(),
            conns: RwLock::new(HashSet::new()),
            channels: Mutex::new(Channels::default()),
            offload: std::sync::OnceLock::new(),
            app_closes: Mutex::new(HashMap::new()),
            app_close_count: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            start: mono(),
            ping: Bytes::from(frame::encode_message(OpCode::Ping, b"", 125, false)),
            relay: std::sync::OnceLock::new(),
            history: std::sync::OnceLock::new(),
            drain: Drain::default(),
            remote_presence: std::sync::OnceLock::new(),
        }
    }

    /// Install the cluster backplane: every `broadcast` and channel publish made on this node
    /// is handed to it after local delivery. Set once.
    pub fn set_relay(&self, f: RelayFn) {
        let _ = self.relay.set(f);
    }

    /// Install the backplane's view of the other nodes' subscribers (cluster-wide presence for
    /// `GET /api/channels/NAME`). Set once.
    pub fn set_remote_presence(&self, f: PresenceFn) {
        let _ = self.remote_presence.set(f);
    }

    /// The other nodes' subscribers of `channel`, when a backplane reports them.
    pub fn remote_presence(&self, channel: &str) -> Option<RemotePresence> {
        self.remote_presence.get().map(|f| f(channel))
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
            // The queue alone may hold the connection's whole share while it drains: past
            // it the connection would be closed for its share anyway.
            self.config.conn_memory_share(),
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
            self.leave_all(s);
        }
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

    /// [`Hub::publish`] by connection `conn`: with history on, what it keeps is held to the
    /// connection's share ([`Hub::publish_positioned_by`]).
    pub fn publish_from(&self, conn: &Shared, channel: &str, data: &str) {
        self.publish_positioned_by(conn.id.wrapping_add(1), channel, data);
    }

    /// [`Hub::publish`], answering how many of this node's subscribers the message was
    /// queued for: [`Published::queued`] of [`Hub::publish_report`].
    pub fn publish_delivered(&self, channel: &str, data: &serde_json::Value) -> u64 {
        self.publish_report(channel, data).queued
    }

    /// [`Hub::publish`], answering for how many of this node's subscribers the message was
    /// queued and for how many it could not be (counted by the fan-out itself: a subscriber
    /// that joins or leaves meanwhile is counted as it was served).
    /// With history on, the message carries its position (see [`Hub::publish_with_position`]).
    pub fn publish_report(&self, channel: &str, data: &serde_json::Value) -> Published {
        self.publish_with_position(channel, data).0
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
        // The largest queues above their cap: whom a short memory budget closes first.
        let mut behind: Vec<(usize, Arc<Shared>)> = Vec::new();
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
            let queued = c.queued();
            if queued > c.send_cap() && c.close_requested() == 0 {
                keep_largest(&mut behind, queued, &c.0);
            }
            if drain_timeout > 0 {
                let over = c.over_cap_since.load(Relaxed);
                if queued <= c.send_cap() {
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
        self.metrics.memory.set_candidates(
            behind
                .into_iter()
                .map(|(_, c)| c as Arc<dyn crate::budget::Holder>)
                .collect(),
        );
        // The pings are sends (see `Shared::push`): made after the registry lock is released.
        for c in due {
            if c.push(self.ping.clone(), &self.metrics) {
                self.metrics.pings_sent.fetch_add(1, Relaxed);
            }
        }
    }

    /// Ask every connection to close with `code` at once (a drain spreads them instead:
    /// `spread_closes`).
    pub fn close_all(&self, code: u16) {
        for c in self.conns.read().unwrap().iter() {
            let _ = c.request_close(code);
        }
    }
}

/// Keep `list` the `budget::CANDIDATES` largest queues seen so far, adding `c` (holding
/// `queued`) when it is among them.
fn keep_largest(list: &mut Vec<(usize, Arc<Shared>)>, queued: usize, c: &Arc<Shared>) {
    if list.len() == crate::budget::CANDIDATES {
        match list.iter().enumerate().min_by_key(|(_, (q, _))| *q) {
            Some((i, (q, _))) if *q < queued => {
                list.swap_remove(i);
            }
            _ => return,
        }
    }
    list.push((queued, c.clone()));
}
