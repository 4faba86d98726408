//! The registry of open connections: who is connected, and what is done to all of them at
//! once (broadcast, the heartbeat sweep, a close). Also the closes the application asked for
//! outside a callback, which each connection's task picks up by id.

use super::relay::Relay;
use super::{fanout, Hub};
use crate::frame::{self, OpCode};
use crate::outbox::Shared;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// Close code for a connection silent past the heartbeat timeout (private-use range).
pub const HEARTBEAT_CLOSE: u16 = 4000;

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

/// The registry's state (a field of the hub).
pub(super) struct Conns {
    /// Every open connection, found by its id.
    set: RwLock<HashSet<Entry>>,
    /// The next connection's id (ids are never reused).
    next_id: AtomicU64,
    /// Closes the application asked for outside a callback (`Conn::close`): the code and
    /// reason each connection's task sends, by connection id; `app_close_count` entries.
    app_closes: Mutex<HashMap<u64, (u16, Box<str>)>>,
    app_close_count: AtomicU64,
    /// The heartbeat's ping, encoded once for every connection.
    ping: Bytes,
}

impl Conns {
    /// An empty registry; ids start at 1.
    pub(super) fn new() -> Conns {
        Conns {
            set: RwLock::new(HashSet::new()),
            next_id: AtomicU64::new(1),
            app_closes: Mutex::new(HashMap::new()),
            app_close_count: AtomicU64::new(0),
            ping: Bytes::from(frame::encode_message(OpCode::Ping, b"", 125, false)),
        }
    }
}

/// The hub's registry (`hub.registry()`): a borrow of the hub, free to make.
#[derive(Clone, Copy)]
pub struct Registry<'h> {
    pub(super) hub: &'h Hub,
}

impl Registry<'_> {
    /// Every connection now. A fan-out writes to the sockets (a send per recipient, see
    /// `Shared::push`), so it works on this copy, not under the registry's lock: a lock held
    /// for a whole fan-out (~1.5 s to 100k here) would stall every accept and close behind it.
    pub(crate) fn everyone(self) -> Vec<Arc<Shared>> {
        self.hub
            .registry
            .set
            .read()
            .unwrap()
            .iter()
            .map(|e| e.0.clone())
            .collect()
    }

    /// Open connections.
    pub fn len(self) -> usize {
        let hub = self.hub;
        hub.registry.set.read().unwrap().len()
    }

    /// No connection is open.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Add a connection to the registry (the server does this on upgrade).
    pub fn register(self) -> Arc<Shared> {
        let hub = self.hub;
        let id = hub.registry.next_id.fetch_add(1, Relaxed);
        let s = Arc::new(Shared::new(
            id,
            hub.config.send_queue_bytes,
            // The queue alone may hold the connection's whole share while it drains: past
            // it the connection would be closed for its share anyway.
            hub.config.conn_memory_share(),
            hub.config.backpressure_close.code(),
            hub.now(),
        ));
        hub.registry.set.write().unwrap().insert(Entry(s.clone()));
        hub.metrics.connections.fetch_add(1, Relaxed);
        s
    }

    /// Remember the application's close of `id` (code and reason) for its task to send.
    pub(crate) fn put_app_close(self, id: u64, code: u16, reason: &str) {
        let hub = self.hub;
        let mut m = hub.registry.app_closes.lock().unwrap();
        if m.insert(id, (code, reason.into())).is_none() {
            hub.registry.app_close_count.fetch_add(1, Relaxed);
        }
    }

    /// The reason of the application's close of `id` with `code`, taken (once).
    pub(crate) fn take_app_close(self, id: u64, code: u16) -> Option<Box<str>> {
        let hub = self.hub;
        if hub.registry.app_close_count.load(Relaxed) == 0 {
            return None;
        }
        let mut m = hub.registry.app_closes.lock().unwrap();
        let (c, reason) = m.remove(&id)?;
        hub.registry.app_close_count.fetch_sub(1, Relaxed);
        (c == code).then_some(reason)
    }

    /// Remove a connection from the registry and from every channel it joined. It is marked
    /// ended first, so a `subscribe` racing with this cannot add it back.
    pub fn unregister(self, s: &Shared) {
        let hub = self.hub;
        s.end(&hub.metrics);
        if hub.registry.set.write().unwrap().remove(&s.id) {
            hub.metrics.connections.fetch_sub(1, Relaxed);
        }
        // A close asked for as the connection ended, never acted on.
        let _ = self.take_app_close(s.id, 0);
        if s.subscribed() {
            hub.broker().leave_all(s);
        }
    }

    /// Encode `payload` once and queue the same bytes on every connection. Peers that
    /// negotiated permessage-deflate get one compressed frame, compressed once per window size
    /// from a reset context: valid for every such peer whatever its context-takeover setting
    /// (a context-takeover peer's own compressor restarts before its next message, see
    /// `Shared::push_compressed`). The others get the plain frame.
    pub fn broadcast(self, op: OpCode, payload: &[u8]) {
        let hub = self.hub;
        hub.metrics.broadcasts.fetch_add(1, Relaxed);
        fanout::fan_out(hub, op, payload, self.everyone().iter());
        hub.relay().send(Relay::Broadcast { op, payload });
    }

    /// Queue a frame encoded in advance on every connection: one reference count per recipient,
    /// no copy, no per-recipient encoding. A recipient over its send-queue cap is closed; nobody
    /// waits for it.
    pub fn broadcast_encoded(self, frame: Bytes) {
        let hub = self.hub;
        hub.metrics.broadcasts.fetch_add(1, Relaxed);
        let (mut sent, mut written) = (0, 0);
        for c in self.everyone() {
            if c.push_tallied(frame.clone(), false, &hub.metrics, &mut written) {
                sent += 1;
            }
        }
        crate::outbox::count_written(&hub.metrics, written);
        hub.metrics.messages_out.fetch_add(sent, Relaxed);
    }

    /// The naive loop the guide warns about: encode (allocate and copy) once per recipient.
    /// Kept as the benchmark's baseline.
    pub fn broadcast_naive(self, op: OpCode, payload: &[u8]) {
        let hub = self.hub;
        hub.metrics.broadcasts.fetch_add(1, Relaxed);
        let conns = hub.registry.set.read().unwrap();
        for c in conns.iter() {
            let frame = Bytes::from(frame::encode_message(
                op,
                payload,
                hub.config.fragment_bytes,
                false,
            ));
            if c.push(frame, &hub.metrics) {
                hub.metrics.messages_out.fetch_add(1, Relaxed);
            }
        }
    }

    /// One heartbeat sweep (run once a second).
    pub fn heartbeat(self) {
        let hub = self.hub;
        let now = hub.now();
        let interval = hub.config.heartbeat_interval.as_secs().max(1) as u32;
        let timeout = hub.config.heartbeat_timeout.as_secs().max(1) as u32;
        let message_timeout = hub.config.message_timeout.as_secs() as u32;
        let drain_timeout = hub.config.send_drain_timeout.as_secs() as u32;
        let mut due = Vec::new();
        // The largest queues above their cap: whom a short memory budget closes first.
        let mut behind: Vec<(usize, Arc<Shared>)> = Vec::new();
        for c in hub.registry.set.read().unwrap().iter() {
            // Progress, not liveness: a client that answers pings (or sends anything) but
            // never finishes its message, or never reads what it asked for, is closed all the
            // same once the bound passes.
            let since = c.input_since.load(Relaxed);
            if message_timeout > 0 && since != 0 && now.saturating_sub(since) >= message_timeout {
                if c.request_close_why(1008, crate::outbox::CloseWhy::MessageTimeout) {
                    hub.metrics.message_timeouts.fetch_add(1, Relaxed);
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
                    c.drain_timeout(&hub.metrics);
                    continue;
                }
            }
            let seen = c.last_seen.load(Relaxed);
            let idle = now.saturating_sub(seen);
            if idle >= timeout {
                // A dead peer stays in the registry until its close wait ends, and is seen by
                // the sweeps meanwhile: count it once (1,000 half-open clients counted 2,686).
                if c.request_close(HEARTBEAT_CLOSE) {
                    hub.metrics.heartbeat_timeouts.fetch_add(1, Relaxed);
                }
            } else if idle >= interval && now.saturating_sub(c.last_ping.load(Relaxed)) >= interval
            {
                c.last_ping.store(now, Relaxed);
                due.push(c.0.clone());
            }
        }
        hub.metrics.memory.set_candidates(
            behind
                .into_iter()
                .map(|(_, c)| c as Arc<dyn crate::budget::Holder>)
                .collect(),
        );
        // The pings are sends (see `Shared::push`): made after the registry lock is released.
        for c in due {
            if c.push(hub.registry.ping.clone(), &hub.metrics) {
                hub.metrics.pings_sent.fetch_add(1, Relaxed);
            }
        }
    }

    /// Ask every connection to close with `code` at once (a drain spreads them instead:
    /// `spread_closes`).
    pub fn close_all(self, code: u16) {
        let hub = self.hub;
        for c in hub.registry.set.read().unwrap().iter() {
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
