//! Channel history: the bounded store behind stream positions and recovery, with no I/O and
//! no clock of its own (every call is given `now`, in whole seconds), so each rule is a unit
//! test.
//!
//! The model is Centrifugo's (centrifugal.dev/docs/server/history_and_recovery): every
//! publication in a channel gets an `offset`, +1 per publication, and the channel's stream
//! has an `epoch`, a string that changes whenever the stream is lost (a new process, or a
//! stream forgotten once its last publication expired). A client that saw `(offset, epoch)`
//! and comes back with it gets exactly the publications after `offset`, when the stream still
//! has the same epoch and still holds them all; otherwise it is told it cannot (its
//! application reloads state), never handed a stream with a hole in it.
//!
//! Every kept publication stays contiguous: a stream holds offsets `first..=top` and nothing
//! else, so whether a position can be recovered is two comparisons and the missed ones are a
//! slice. Bounds: `size` publications per channel, `ttl_secs` of age, and `max_bytes` over
//! every channel (publications, their bookkeeping and the names), the oldest going first. One
//! queue in publication order (`order`) finds the oldest in O(1), so no bound costs a scan.
//! The same store runs in a server process and, for `serve --processes`, in the supervisor,
//! which assigns positions for all its processes (`insert` copies them into a process).
//!
//! A forgotten stream must not look like one that never existed: a client that saw it, or
//! that subscribed while the channel had no stream, would be told it missed nothing. So a
//! stream that goes leaves a **tombstone** (its epoch, top offset, and when it went), and a
//! channel without a stream answers a position that names this store and when it was given
//! (`Position::is_stamp`): a recovery from it is answered from the stream and tombstone the
//! channel has, and one this store cannot decide (another store's, or older than a tombstone
//! the bound dropped) is `too_old`, never `recovered:true` with nothing.

use crate::app_settings::HistorySettings;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// What one kept publication costs besides its text: its slot, its `Arc` header and its entry
/// in the order queue (channel pointer, offset, generation, time), rounded up.
pub const PUBLICATION_BYTES: usize = 96;
/// What one channel's stream costs besides its name and epoch: its map entry and the stream
/// itself with its queue's header, rounded up.
pub const STREAM_BYTES: usize = 160;
/// What one tombstone costs besides its name and epoch: its map entry and its queue slot,
/// rounded up.
pub const TOMBSTONE_BYTES: usize = 96;
/// One channel may hold this fraction of the history's byte bound (1/8: 8 MiB of the default
/// 64 MiB), its oldest publications going first past it, so one channel's stream cannot push
/// out every other's.
pub const CHANNEL_SHARE: usize = 8;
/// One publisher (a WebSocket connection) may hold this fraction of the history's byte bound
/// (1/16: 4 MiB of the default 64 MiB), its publications and the streams it started, its
/// oldest going first past it, so one connection publishing to many new channel names
/// cannot push out every other channel's stream. Publishes through the HTTP API (the
/// operator's key) and copies of another store's positions have no share of their own.
pub const PUBLISHER_SHARE: usize = 16;
/// Stale entries of the order queue (of publications dropped out of turn) may hold this
/// fraction of the bound before the queue is compacted.
const STALE_SHARE: usize = 16;
/// Who published a kept publication: a connection's id, or [`NO_PUBLISHER`].
pub type Publisher = u64;
/// The publisher of a publication that is nobody's share (the HTTP API, a copy).
pub const NO_PUBLISHER: Publisher = 0;
/// Tombstones may hold this fraction of the history's byte bound (1/8: at the default 64 MiB,
/// 8 MiB, about 60,000 channel names of 40 bytes).
pub const TOMBSTONE_SHARE: usize = 8;

/// A position in a channel's stream: the offset of the last publication and the stream's
/// epoch (offset 0: nothing published yet in this epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The last publication's offset.
    pub offset: u64,
    /// The stream's epoch.
    pub epoch: Arc<str>,
}

/// One stream as [`History::snapshot`] gives it: its channel, position, and kept publications
/// (offset, text) oldest first.
pub type StreamCopy = (Arc<str>, Position, Vec<(u64, Arc<str>)>);

impl Position {
    /// The store and time a stamp names (see [`History::position_if_any`]): None for a
    /// position of a stream.
    pub fn stamp(&self) -> Option<(u64, u64)> {
        if self.offset != 0 {
            return None;
        }
        let (family, ms) = self.epoch.split_once('@')?;
        if family.len() != 16 {
            return None;
        }
        Some((u64::from_str_radix(family, 16).ok()?, ms.parse().ok()?))
    }

    /// Whether this is the position of a channel that had no stream (a stamp).
    pub fn is_stamp(&self) -> bool {
        self.stamp().is_some()
    }
}

/// A forgotten stream, as [`History::graves`] gives it: channel, epoch, top offset, and the
/// Unix time in microseconds by which it was forgotten.
pub type GraveCopy = (Arc<str>, Arc<str>, u64, u64);

/// What is left of a forgotten stream: enough to tell a client holding one of its positions
/// that it is too old, and one holding a stamp from before it that it missed publications.
struct Tombstone {
    epoch: Arc<str>,
    top: u64,
    /// Unix microseconds by which it was forgotten (rounded up: never earlier than it was).
    at: u64,
}

/// Why a position cannot be recovered (the `reason` of `"recovered":false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrecoverable {
    /// The stream is not the one the position is from (reset, expired, or never seen here).
    Epoch,
    /// Publications after the position are no longer kept (trimmed by count, age or bytes).
    TooOld,
    /// More publications were missed than one recovery returns (`recover_max`).
    TooMany,
    /// The missed publications are more bytes than the connection may have queued.
    TooLarge,
}

impl Unrecoverable {
    /// The stable word clients read.
    pub fn reason(self) -> &'static str {
        match self {
            Unrecoverable::Epoch => "epoch",
            Unrecoverable::TooOld => "too_old",
            Unrecoverable::TooMany => "too_many",
            Unrecoverable::TooLarge => "too_large",
        }
    }
}

struct Kept {
    offset: u64,
    text: Arc<str>,
    publisher: Publisher,
}

/// What one publisher holds: bytes, items (publications and streams it started), and its
/// items oldest first as (channel, offset or 0 for a stream's start, generation); items
/// dropped otherwise stay queued (stale) until the queue is compacted.
#[derive(Default)]
struct Share {
    bytes: usize,
    items: usize,
    queue: VecDeque<(Arc<str>, u64, u64)>,
}

/// Publications dropped for a share (metrics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    /// Past their channel's share of the byte bound.
    pub channel: u64,
    /// Past their publisher's share of the byte bound.
    pub publisher: u64,
}

struct Stream {
    epoch: Arc<str>,
    /// The last offset assigned (0: none in this epoch).
    top: u64,
    /// Offsets `top - pubs.len() + 1 ..= top`, oldest first.
    pubs: VecDeque<Kept>,
    /// Which life of this channel's stream this is: `order` entries of an earlier one are
    /// stale.
    generation: u64,
    /// `order` entries of this generation not yet taken out: the stream goes when it has
    /// neither publications nor entries.
    entries: usize,
    /// Bytes of the kept publications (text and bookkeeping), for the channel's share.
    bytes: usize,
    /// The publisher whose share the stream itself is charged to.
    creator: Publisher,
}

/// Offsets from another store (the supervisor's relay, Redis) are taken only from 1 to
/// 2^62: no stream reaches that, and below it the offset arithmetic here cannot overflow,
/// whatever a peer on the backplane sends.
fn plausible(offset: u64) -> bool {
    (1..1 << 62).contains(&offset)
}

/// What a stream costs its creator's share: itself, its name and epoch, its creation entry.
fn stream_cost(name: &str, epoch: &str) -> usize {
    STREAM_BYTES + name.len() + epoch.len() + PUBLICATION_BYTES
}

/// Whether `publisher`'s item (see [`Share`]) is still held: the stream's start while the
/// stream is its own, a publication while it is kept.
fn held(
    streams: &HashMap<Arc<str>, Stream>,
    publisher: Publisher,
    name: &str,
    offset: u64,
    generation: u64,
) -> bool {
    let Some(s) = streams.get(name).filter(|s| s.generation == generation) else {
        return false;
    };
    if offset == 0 {
        return s.creator == publisher;
    }
    s.pubs.front().is_some_and(|k| k.offset <= offset) && offset <= s.top
}

impl Stream {
    /// The oldest offset kept (`top + 1` when none is).
    fn first(&self) -> u64 {
        self.top + 1 - self.pubs.len() as u64
    }
}

/// One publication (or a stream's creation, offset 0) in the order they happened.
struct Entry {
    channel: Arc<str>,
    offset: u64,
    generation: u64,
    at: u32,
}

/// Every channel's history (see the module's documentation).
pub struct History {
    settings: HistorySettings,
    streams: HashMap<Arc<str>, Stream>,
    order: VecDeque<Entry>,
    bytes: usize,
    generations: u64,
    /// Makes this store's epochs differ from another process's.
    seed: u64,
    /// The last forgotten stream of each channel that had one, and the order they were made
    /// in (the first is dropped first when they pass their share of the bound).
    tombstones: HashMap<Arc<str>, Tombstone>,
    graves: VecDeque<Arc<str>>,
    tombstone_bytes: usize,
    /// Tombstones dropped for the bound (a metric).
    tombstones_dropped: u64,
    /// What each publisher holds.
    shares: HashMap<Publisher, Share>,
    /// About how many `order` entries are stale (their publication or stream gone).
    stale: usize,
    evicted: Evicted,
    /// Names the stamps this store gives and takes: its own, or, in a `--processes` server
    /// process, the supervisor's (whose tombstones it holds).
    family: u64,
    /// Unix microseconds at `now` 0 (stamps and tombstones are in Unix time, so processes of
    /// one host compare them).
    origin_us: u64,
    /// The Unix time in microseconds, from a clock that never goes back, when the owner has
    /// one (`set_clock`): stamps and tombstones to the microsecond. Without it (tests) they
    /// are whole seconds of `now`, rounded the safe way (stamps down, tombstones up).
    clock: Option<Box<dyn Fn() -> u64 + Send>>,
    /// The clock's last reading.
    last_us: u64,
    /// Stamps before this (Unix microseconds) are too old: a tombstone of a stream forgotten
    /// then was dropped, so whether the channel lost publications since is unknown.
    known_since: u64,
}

impl History {
    /// An empty store with these bounds; `seed` makes its epochs its own (a random number).
    pub fn new(settings: HistorySettings, seed: u64) -> History {
        History {
            settings,
            streams: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            generations: 0,
            seed,
            tombstones: HashMap::new(),
            graves: VecDeque::new(),
            tombstone_bytes: 0,
            tombstones_dropped: 0,
            shares: HashMap::new(),
            stale: 0,
            evicted: Evicted::default(),
            family: (seed ^ 0xA076_1D64_78BD_642F).wrapping_mul(0xE703_7ED1_A0B4_28DB),
            origin_us: 0,
            clock: None,
            last_us: 0,
            known_since: 0,
        }
    }

    /// Tie `now` to the Unix clock: `unix_us` is the Unix time in microseconds at `now` 0.
    /// Without it `now` 0 is the Unix epoch (tests).
    pub fn set_origin(&mut self, unix_us: u64) {
        self.origin_us = unix_us;
    }

    /// Read stamps' and tombstones' times from `clock` (Unix µs, never going back).
    pub fn set_clock(&mut self, clock: Box<dyn Fn() -> u64 + Send>) {
        self.clock = Some(clock);
    }

    /// The time now in Unix µs, never later than it is (`up`: never earlier). With a clock,
    /// each reading is later than the one before, so whatever happens here after a stamp was
    /// given reads later than the stamp, and whatever happened before, earlier.
    fn time_us(&mut self, now: u32, up: bool) -> u64 {
        match &self.clock {
            Some(clock) => {
                let t = clock().max(self.last_us + 1);
                self.last_us = t;
                t
            }
            None => self.origin_us + (now as u64 + up as u64) * 1_000_000,
        }
    }

    /// Bytes the tombstones hold now (part of [`History::bytes`]).
    pub fn tombstone_bytes(&self) -> usize {
        self.tombstone_bytes
    }

    /// Tombstones kept now, and how many were dropped for the bound since the start.
    pub fn tombstones(&self) -> (usize, u64) {
        (self.tombstones.len(), self.tombstones_dropped)
    }

    /// Remember that `channel`'s stream `epoch` went with `top` (nothing when it never had a
    /// publication), then keep the tombstones within their share of the bound.
    fn bury(&mut self, channel: &Arc<str>, epoch: Arc<str>, top: u64, now: u32) {
        if top == 0 {
            return;
        }
        let at = self.time_us(now, true);
        self.put_tombstone(channel.clone(), Tombstone { epoch, top, at });
        self.trim_tombstones();
    }

    /// Keep `t` as `name`'s tombstone unless it has a later one. A newer one replaces the
    /// channel's last in place and keeps its turn in the queue, so a channel forgotten over
    /// and over holds one slot.
    fn put_tombstone(&mut self, name: Arc<str>, t: Tombstone) {
        let grown = t.epoch.len();
        match self.tombstones.get_mut(&name) {
            Some(old) if old.at > t.at => {}
            Some(old) => {
                let old = std::mem::replace(old, t);
                self.tombstone_bytes = self.tombstone_bytes + grown - old.epoch.len();
                self.bytes = self.bytes + grown - old.epoch.len();
            }
            None => {
                let cost = TOMBSTONE_BYTES + name.len() + grown;
                self.tombstones.insert(name.clone(), t);
                self.graves.push_back(name);
                self.tombstone_bytes += cost;
                self.bytes += cost;
            }
        }
    }

    /// Drop the oldest tombstones past their share of the bound: a stamp from before one
    /// that went is too old from then on (whether its channel lost publications is unknown).
    fn trim_tombstones(&mut self) {
        let share = self.settings.max_bytes / TOMBSTONE_SHARE;
        while self.tombstone_bytes > share {
            let Some(name) = self.graves.pop_front() else {
                break;
            };
            let t = self.tombstones.remove(&name).expect("queued once");
            let cost = TOMBSTONE_BYTES + name.len() + t.epoch.len();
            self.tombstone_bytes -= cost;
            self.bytes -= cost;
            self.tombstones_dropped += 1;
            self.known_since = self.known_since.max(t.at);
        }
    }

    /// Every tombstone, this store's stamp family and the stamps it cannot decide (up to
    /// Unix µs `known_since`): what a new `--processes` server process takes from the
    /// supervisor with its streams ([`History::adopt_graves`]).
    pub fn graves(&self) -> (u64, u64, Vec<GraveCopy>) {
        let graves = self
            .graves
            .iter()
            .map(|name| {
                let t = &self.tombstones[name];
                (name.clone(), t.epoch.clone(), t.top, t.at)
            })
            .collect();
        (self.family, self.known_since, graves)
    }

    /// Take another store's tombstones and stamp family (the supervisor's, in a process that
    /// starts): its stamps are decided here as there. Stamps this store gave before are
    /// another family's from then on (too old), never trusted wrongly.
    pub fn adopt_graves(&mut self, family: u64, known_since: u64, graves: Vec<GraveCopy>) {
        self.family = family;
        self.known_since = self.known_since.max(known_since);
        for (name, epoch, top, at) in graves {
            self.put_tombstone(name, Tombstone { epoch, top, at });
        }
        self.trim_tombstones();
    }

    /// The position of a channel without a stream: this store's family and the Unix time
    /// (never later than now), `offset` 0.
    fn stamp(&mut self, now: u32) -> Position {
        let ms = self.time_us(now, false);
        Position {
            offset: 0,
            epoch: Arc::from(format!("{:016x}@{ms}", self.family)),
        }
    }

    /// The bounds in force.
    pub fn settings(&self) -> &HistorySettings {
        &self.settings
    }

    /// Bytes held now (what the memory budget is charged).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Channels with a stream now.
    pub fn channels(&self) -> usize {
        self.streams.len()
    }

    /// A fresh epoch: 16 hex digits of this store's seed mixed with the generation.
    fn new_epoch(&mut self) -> (u64, Arc<str>) {
        self.generations += 1;
        let g = self.generations;
        let mixed =
            (self.seed ^ g.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        (g, Arc::from(format!("{:016x}", mixed ^ (mixed >> 31))))
    }

    /// `channel`'s stream and its name, created (with a fresh epoch, or `epoch` when given)
    /// when absent.
    fn stream(&mut self, channel: &str, epoch: Option<&str>, now: u32) -> (Arc<str>, &mut Stream) {
        if !self.streams.contains_key(channel) {
            let (generation, fresh) = self.new_epoch();
            let epoch: Arc<str> = epoch.map(Arc::from).unwrap_or(fresh);
            let name: Arc<str> = Arc::from(channel);
            self.bytes += STREAM_BYTES + name.len() + epoch.len();
            // Its creation is an entry too, so a stream that never gets a publication is
            // forgotten once it is as old as the history's age bound.
            self.order.push_back(Entry {
                channel: name.clone(),
                offset: 0,
                generation,
                at: now,
            });
            self.bytes += PUBLICATION_BYTES;
            self.streams.insert(
                name,
                Stream {
                    epoch,
                    top: 0,
                    pubs: VecDeque::new(),
                    generation,
                    entries: 1,
                    bytes: 0,
                    creator: NO_PUBLISHER,
                },
            );
        }
        let name = self
            .streams
            .get_key_value(channel)
            .expect("present")
            .0
            .clone();
        (name, self.streams.get_mut(channel).expect("present"))
    }

    /// `channel`'s position now, creating its stream when absent (a subscribe: the client
    /// learns the epoch its later publications will carry).
    pub fn position(&mut self, channel: &str, now: u32) -> Position {
        self.expire(now);
        let (_, s) = self.stream(channel, None, now);
        Position {
            offset: s.top,
            epoch: s.epoch.clone(),
        }
    }

    /// `channel`'s position, or a stamp when it has no stream (offset 0, an epoch naming this
    /// store's family and the time): no stream is made (where positions are assigned
    /// elsewhere, an epoch made here would not be theirs). A recovery from the stamp asks for
    /// every publication since (see [`History::since`]).
    pub fn position_if_any(&mut self, channel: &str, now: u32) -> Position {
        self.expire(now);
        match self.peek(channel) {
            Some(p) => p.0,
            None => self.stamp(now),
        }
    }

    /// `channel`'s position and how many publications it keeps, if it has a stream (for the
    /// HTTP API; creates nothing).
    pub fn peek(&self, channel: &str) -> Option<(Position, usize)> {
        self.streams.get(channel).map(|s| {
            (
                Position {
                    offset: s.top,
                    epoch: s.epoch.clone(),
                },
                s.pubs.len(),
            )
        })
    }

    /// Give `channel`'s next publication by `publisher` its position, keep the text
    /// `text(offset, epoch)` builds, and return both.
    pub fn append(
        &mut self,
        channel: &str,
        publisher: Publisher,
        now: u32,
        text: impl FnOnce(u64, &str) -> String,
    ) -> (Position, Arc<str>) {
        self.expire(now);
        let created = !self.streams.contains_key(channel);
        let (name, s) = self.stream(channel, None, now);
        let offset = s.top + 1;
        let epoch = s.epoch.clone();
        if created && publisher != NO_PUBLISHER {
            // The stream it starts is its own: names no one else publishes to are its share.
            s.creator = publisher;
            let item = (name.clone(), 0, s.generation);
            self.charge(publisher, stream_cost(&name, &epoch), item);
        }
        let text: Arc<str> = Arc::from(text(offset, &epoch));
        self.keep(channel, offset, text.clone(), publisher, now);
        (Position { offset, epoch }, text)
    }

    /// Charge `bytes` to `publisher`'s share for `item` (see [`Share`]).
    fn charge(&mut self, publisher: Publisher, bytes: usize, item: (Arc<str>, u64, u64)) {
        let share = self.shares.entry(publisher).or_default();
        share.bytes += bytes;
        share.items += 1;
        share.queue.push_back(item);
    }

    /// Give `bytes` of one item back to `publisher`'s share (nothing for [`NO_PUBLISHER`]).
    fn credit(&mut self, publisher: Publisher, bytes: usize) {
        if publisher == NO_PUBLISHER {
            return;
        }
        let Some(share) = self.shares.get_mut(&publisher) else {
            return;
        };
        share.bytes = share.bytes.saturating_sub(bytes);
        share.items = share.items.saturating_sub(1);
        if share.items == 0 {
            self.shares.remove(&publisher);
        } else if share.queue.len() > 2 * share.items + 32 {
            // Mostly stale: keep what is still this publisher's (amortized O(1) an item).
            let streams = &self.streams;
            share.queue.retain(|(name, offset, generation)| {
                held(streams, publisher, name, *offset, *generation)
            });
        }
    }

    /// Drop publications taken out of their stream (not through the order queue, whose
    /// entries for them are now stale): their publishers get their shares back.
    fn release(&mut self, dropped: Vec<Kept>) {
        for k in dropped {
            self.stale += 1;
            self.credit(k.publisher, k.text.len() + PUBLICATION_BYTES);
        }
    }

    /// Forget `channel`'s stream now (its publisher passed its share): its publications go,
    /// it leaves a tombstone, and its queued entries are stale.
    fn forget(&mut self, channel: &str, now: u32) {
        let Some((name, s)) = self.streams.remove_entry(channel) else {
            return;
        };
        self.stale += s.entries;
        let freed: usize = s.pubs.iter().map(|k| k.text.len()).sum();
        self.bytes -= freed + STREAM_BYTES + name.len() + s.epoch.len();
        // Its creation entry keeps its own bytes until taken out, like every entry.
        self.credit(s.creator, stream_cost(&name, &s.epoch));
        let dropped: Vec<Kept> = s.pubs.into_iter().collect();
        self.evicted.publisher += dropped.len() as u64;
        self.release(dropped);
        self.bury(&name, s.epoch, s.top, now);
    }

    /// While `publisher` holds more than its share, drop its oldest: a publication (with
    /// any older of its stream, which stays contiguous), or a stream it started (which goes
    /// unless publications of others keep it; it is then no longer its share).
    fn enforce_share(&mut self, publisher: Publisher, now: u32) {
        let limit = self.settings.max_bytes / PUBLISHER_SHARE;
        loop {
            let Some(share) = self.shares.get_mut(&publisher) else {
                return;
            };
            if share.bytes <= limit {
                return;
            }
            let Some((name, offset, generation)) = share.queue.pop_front() else {
                return;
            };
            if !held(&self.streams, publisher, &name, offset, generation) {
                continue;
            }
            let s = self.streams.get_mut(&*name).expect("held");
            if offset == 0 {
                if s.pubs.iter().any(|k| k.publisher != publisher) {
                    s.creator = NO_PUBLISHER;
                    let cost = stream_cost(&name, &s.epoch);
                    self.credit(publisher, cost);
                } else {
                    self.forget(&name, now);
                }
                continue;
            }
            let mut dropped = Vec::new();
            while s.pubs.front().is_some_and(|k| k.offset <= offset) {
                let k = s.pubs.pop_front().expect("front");
                s.bytes -= k.text.len() + PUBLICATION_BYTES;
                self.bytes -= k.text.len();
                dropped.push(k);
            }
            let empty_and_mine = s.pubs.is_empty() && s.creator == publisher;
            self.evicted.publisher += dropped.len() as u64;
            self.release(dropped);
            if empty_and_mine {
                self.forget(&name, now);
            }
        }
    }

    /// Take stale entries out of the order queue once they hold their share of the bound
    /// (O(queue) each time, so amortized O(1) an entry): publications dropped out of turn
    /// must not hold bytes of the bound until they age out.
    fn compact(&mut self, now: u32) {
        if self.stale * PUBLICATION_BYTES <= self.settings.max_bytes / STALE_SHARE {
            return;
        }
        let streams = &mut self.streams;
        let mut removed = 0;
        let mut orphans = Vec::new();
        self.order.retain(|e| {
            let Some(s) = streams.get_mut(&*e.channel) else {
                removed += 1;
                return false;
            };
            if s.generation != e.generation {
                removed += 1;
                return false;
            }
            let live = e.offset == 0
                || (s.pubs.front().is_some_and(|k| k.offset <= e.offset) && e.offset <= s.top);
            if !live {
                removed += 1;
                s.entries -= 1;
                if s.entries == 0 && s.pubs.is_empty() {
                    orphans.push(e.channel.clone());
                }
            }
            live
        });
        self.bytes -= removed * PUBLICATION_BYTES;
        self.stale = 0;
        for name in orphans {
            self.forget(&name, now);
        }
    }

    /// Publications dropped for the channel and publisher shares since the start.
    pub fn evicted(&self) -> Evicted {
        self.evicted
    }

    /// Keep a publication whose position was assigned elsewhere (the supervisor's, in a
    /// server process). A position from another epoch replaces the stream; one past a gap
    /// drops what came before the gap (a recovery across it would miss publications); one
    /// already kept is not kept again. False for that last case (a duplicate).
    pub fn insert(
        &mut self,
        channel: &str,
        pos: &Position,
        text: Arc<str>,
        publisher: Publisher,
        now: u32,
    ) -> bool {
        if !plausible(pos.offset) {
            return false;
        }
        self.expire(now);
        self.reset_to(channel, &pos.epoch, pos.offset.saturating_sub(1), now);
        let s = self.streams.get(channel).expect("reset_to creates it");
        if pos.offset <= s.top {
            return false;
        }
        let created = s.top == 0 && s.pubs.is_empty() && s.creator == NO_PUBLISHER;
        if created && publisher != NO_PUBLISHER && pos.offset == 1 {
            // A copy of a stream this publisher started (its first publication).
            let (name, s) = self.stream(channel, None, now);
            s.creator = publisher;
            let item = (name.clone(), 0, s.generation);
            let cost = stream_cost(&name, &s.epoch);
            self.charge(publisher, cost, item);
        }
        self.keep(channel, pos.offset, text, publisher, now);
        true
    }

    /// Make `channel`'s stream `epoch` with nothing after `top` missing: a stream of another
    /// epoch is replaced, one behind `top` drops what it keeps (it cannot be continued).
    pub fn reset_to(&mut self, channel: &str, epoch: &str, top: u64, now: u32) {
        let other_epoch = match self.streams.get(channel) {
            None => {
                self.stream(channel, Some(epoch), now).1.top = top;
                return;
            }
            Some(s) if &*s.epoch == epoch && s.top >= top => return,
            Some(s) => &*s.epoch != epoch,
        };
        let generation = other_epoch.then(|| self.new_epoch().0);
        let (name, s) = self.stream(channel, None, now);
        let freed: usize = s.pubs.iter().map(|p| p.text.len()).sum();
        // The entries of the dropped publications stay queued (stale) and keep their own
        // bytes until they are taken out.
        let dropped: Vec<Kept> = s.pubs.drain(..).collect();
        s.bytes = 0;
        let mut grown = 0;
        let mut buried = None;
        let mut creator = None;
        let old_top = std::mem::replace(&mut s.top, top);
        if let Some(g) = generation {
            // Another stream now: no longer its creator's share.
            creator = Some((
                std::mem::replace(&mut s.creator, NO_PUBLISHER),
                stream_cost(&name, &s.epoch),
            ));
            grown = epoch.len();
            let old = std::mem::replace(&mut s.epoch, Arc::from(epoch));
            s.generation = g;
            // The stale entries are of the old generation; this one gets its own, so it is
            // forgotten in time like any other stream.
            s.entries = 1;
            self.bytes -= old.len();
            buried = Some((name.clone(), old));
            self.order.push_back(Entry {
                channel: name,
                offset: 0,
                generation: g,
                at: now,
            });
            grown += PUBLICATION_BYTES;
        }
        self.bytes = self.bytes + grown - freed;
        self.release(dropped);
        if let Some((publisher, cost)) = creator {
            self.credit(publisher, cost);
        }
        // A stream replaced by another epoch is forgotten like one that expired.
        if let Some((name, old)) = buried {
            self.bury(&name, old, old_top, now);
        }
    }

    /// Keep `text` as `channel`'s publication `offset` (= its top + 1) by `publisher`, then
    /// apply the bounds: the channel's count and share, the publisher's share, the whole.
    fn keep(&mut self, channel: &str, offset: u64, text: Arc<str>, publisher: Publisher, now: u32) {
        let cost = text.len() + PUBLICATION_BYTES;
        let (name, s) = self.stream(channel, None, now);
        debug_assert_eq!(offset, s.top + 1);
        s.top = offset;
        s.pubs.push_back(Kept {
            offset,
            text,
            publisher,
        });
        s.bytes += cost;
        s.entries += 1;
        let generation = s.generation;
        self.bytes += cost;
        self.order.push_back(Entry {
            channel: name.clone(),
            offset,
            generation,
            at: now,
        });
        if publisher != NO_PUBLISHER {
            self.charge(publisher, cost, (name, offset, generation));
        }
        self.trim(channel);
        if publisher != NO_PUBLISHER {
            self.enforce_share(publisher, now);
        }
        while self.bytes > self.settings.max_bytes && self.take_oldest(now) {}
        self.compact(now);
    }

    /// Hold `channel`'s stream to its count and its share of the bytes, oldest first (the
    /// newest too when it alone is past the share: it is delivered, not kept).
    fn trim(&mut self, channel: &str) {
        let size = self.settings.size.max(1);
        let share = self.settings.max_bytes / CHANNEL_SHARE;
        let Some(s) = self.streams.get_mut(channel) else {
            return;
        };
        let mut dropped = Vec::new();
        while s.pubs.len() > size || (s.bytes > share && !s.pubs.is_empty()) {
            if s.pubs.len() <= size {
                self.evicted.channel += 1;
            }
            let old = s.pubs.pop_front().expect("not empty");
            // Its entry stays queued (stale) and keeps its own bytes until taken out.
            s.bytes -= old.text.len() + PUBLICATION_BYTES;
            self.bytes -= old.text.len();
            dropped.push(old);
        }
        self.release(dropped);
    }

    /// Drop what has passed the age bound (oldest first; each call costs what it drops).
    pub fn expire(&mut self, now: u32) {
        let ttl = self.settings.ttl_secs.max(1).min(u32::MAX as u64) as u32;
        while self
            .order
            .front()
            .is_some_and(|e| now.saturating_sub(e.at) >= ttl)
        {
            self.take_oldest(now);
        }
    }

    /// Take the oldest entry out: its publication goes if still kept, and its stream too once
    /// it holds nothing and nothing queued refers to it. False when the queue is empty.
    fn take_oldest(&mut self, now: u32) -> bool {
        let Some(e) = self.order.pop_front() else {
            return false;
        };
        self.bytes -= PUBLICATION_BYTES;
        let Some(s) = self
            .streams
            .get_mut(&*e.channel)
            .filter(|s| s.generation == e.generation)
        else {
            self.stale = self.stale.saturating_sub(1);
            return true;
        };
        s.entries -= 1;
        let mut dropped = Vec::new();
        // A publication older than this entry's must not stay behind a gap: drop through it
        // (the queue is in offset order per stream, so that is this entry's alone).
        while e.offset != 0 && s.pubs.front().is_some_and(|p| p.offset <= e.offset) {
            let p = s.pubs.pop_front().expect("front");
            s.bytes -= p.text.len() + PUBLICATION_BYTES;
            self.bytes -= p.text.len();
            dropped.push(p);
        }
        let gone = s.pubs.is_empty() && s.entries == 0;
        if dropped.is_empty() {
            self.stale = self.stale.saturating_sub(1);
        }
        for p in dropped {
            self.credit(p.publisher, p.text.len() + PUBLICATION_BYTES);
        }
        if gone {
            let (name, s) = self.streams.remove_entry(&*e.channel).expect("present");
            self.bytes -= STREAM_BYTES + name.len() + s.epoch.len();
            self.credit(s.creator, stream_cost(&name, &s.epoch));
            self.bury(&name, s.epoch, s.top, now);
        }
        true
    }

    /// The publications after `from` in `channel`, if `from` is of this stream (or is a
    /// stamp this store can decide, see `since_stamp`) and every one after it is kept: at most
    /// `recover_max` of them and `max_bytes` bytes in all.
    pub fn since(
        &mut self,
        channel: &str,
        from: &Position,
        max_bytes: usize,
        now: u32,
    ) -> Result<Vec<Arc<str>>, Unrecoverable> {
        self.expire(now);
        if let Some((family, ms)) = from.stamp() {
            return self.since_stamp(channel, family, ms, max_bytes, now);
        }
        let Some(s) = self.streams.get(channel).filter(|s| s.epoch == from.epoch) else {
            return Err(self.unknown(channel, from));
        };
        if from.offset > s.top {
            return Err(Unrecoverable::Epoch);
        }
        if from.offset + 1 < s.first() {
            return Err(Unrecoverable::TooOld);
        }
        self.after(s, from.offset, max_bytes)
    }

    /// Why a position of no stream kept here cannot be recovered: `too_old` when it is of the
    /// channel's forgotten stream (or is `(0, "")`, which names no time), `epoch` otherwise
    /// (another stream, a restart, a position from the future).
    fn unknown(&self, channel: &str, from: &Position) -> Unrecoverable {
        let forgotten = self
            .tombstones
            .get(channel)
            .is_some_and(|t| t.epoch == from.epoch && from.offset <= t.top);
        if forgotten || (from.offset == 0 && from.epoch.is_empty()) {
            Unrecoverable::TooOld
        } else {
            Unrecoverable::Epoch
        }
    }

    /// A recovery from a stamp (the channel had no stream at Unix µs `ms`): every publication
    /// since, if this store can tell. It cannot for another family's stamp (another server,
    /// or before a restart) nor one up to a dropped tombstone: `too_old`. A stream of the
    /// channel forgotten since took publications with it: `too_old`. Otherwise the stream now
    /// (made since, or one this store had that the stamp's giver had not seen yet: more than
    /// missed, never less) from offset 1, or nothing when there is none.
    fn since_stamp(
        &mut self,
        channel: &str,
        family: u64,
        ms: u64,
        max_bytes: usize,
        now: u32,
    ) -> Result<Vec<Arc<str>>, Unrecoverable> {
        let dropped_since = ms < self.known_since;
        if family != self.family || dropped_since {
            return Err(Unrecoverable::TooOld);
        }
        if ms > self.time_us(now, true) + 2_000_000 {
            return Err(Unrecoverable::Epoch);
        }
        // `at` is never before the stream went and `ms` never after the stamp was given: a
        // stream that went before `ms` went before the client was there.
        if self.tombstones.get(channel).is_some_and(|t| t.at > ms) {
            return Err(Unrecoverable::TooOld);
        }
        match self.streams.get(channel) {
            None => Ok(Vec::new()),
            Some(s) if s.first() > 1 => Err(Unrecoverable::TooOld),
            Some(s) => self.after(s, 0, max_bytes),
        }
    }

    /// The publications of `s` after `from` (every one kept), bounded as [`History::since`].
    fn after(
        &self,
        s: &Stream,
        from: u64,
        max_bytes: usize,
    ) -> Result<Vec<Arc<str>>, Unrecoverable> {
        let missed = (s.top - from) as usize;
        if missed > self.settings.recover_max {
            return Err(Unrecoverable::TooMany);
        }
        let skip = s.pubs.len() - missed;
        let mut bytes = 0;
        let mut out = Vec::with_capacity(missed);
        for p in s.pubs.iter().skip(skip) {
            bytes += p.text.len();
            if bytes > max_bytes {
                return Err(Unrecoverable::TooLarge);
            }
            out.push(p.text.clone());
        }
        Ok(out)
    }

    /// Take older publications of `channel` from another store (the shared one in Redis,
    /// on a recovery this store could not serve): `top` is that store's position and `pubs`
    /// what it keeps after some offset, oldest first. A stream of another epoch, or one
    /// that has nothing `pubs` does not, is replaced by them; one that keeps newer
    /// publications (delivered while they were fetched) gets them in front when they join
    /// up. Bounds apply as to any publication.
    pub fn merge_older(
        &mut self,
        channel: &str,
        top: &Position,
        pubs: Vec<(u64, Arc<str>)>,
        now: u32,
    ) {
        if !plausible(top.offset.max(1)) || pubs.iter().any(|p| !plausible(p.0)) {
            return;
        }
        self.expire(now);
        let contiguous = pubs.windows(2).all(|w| w[1].0 == w[0].0 + 1)
            && pubs.last().is_none_or(|p| p.0 == top.offset);
        if !contiguous {
            return;
        }
        let first = pubs.first().map_or(top.offset + 1, |p| p.0);
        let replace = match self.streams.get(channel) {
            None => true,
            Some(s) => s.epoch != top.epoch || s.top <= top.offset,
        };
        if replace {
            // Drop what this store keeps (of another epoch, or nothing the fetched lack),
            // then take the fetched as they are.
            if let Some(s) = self.streams.get(channel) {
                if s.epoch == top.epoch {
                    let e = Arc::from("");
                    self.reset_to(channel, &e, 0, now);
                }
            }
            self.reset_to(channel, &top.epoch, first - 1, now);
            for (offset, text) in pubs {
                let at = Position {
                    offset,
                    epoch: top.epoch.clone(),
                };
                self.insert(channel, &at, text, NO_PUBLISHER, now);
            }
            self.reset_to(channel, &top.epoch, top.offset, now);
            return;
        }
        // Same epoch, this store is ahead: put the older in front if they join up.
        let (name, s) = self.stream(channel, None, now);
        let have = s.first();
        if first >= have || pubs.last().is_none_or(|p| p.0 + 1 < have) {
            return;
        }
        let generation = s.generation;
        let older: Vec<(u64, Arc<str>)> = pubs.into_iter().filter(|p| p.0 < have).collect();
        let mut grown = 0;
        let mut entries = Vec::with_capacity(older.len());
        for (offset, text) in older.into_iter().rev() {
            grown += text.len() + PUBLICATION_BYTES;
            s.bytes += text.len() + PUBLICATION_BYTES;
            s.pubs.push_front(Kept {
                offset,
                text,
                publisher: NO_PUBLISHER,
            });
            s.entries += 1;
            entries.push(Entry {
                channel: name.clone(),
                offset,
                generation,
                at: now,
            });
        }
        self.order.extend(entries.into_iter().rev());
        self.bytes += grown;
        self.trim(channel);
        while self.bytes > self.settings.max_bytes && self.take_oldest(now) {}
        self.compact(now);
    }

    /// Every stream as (channel, position, kept publications oldest first): what a new
    /// server process copies from the supervisor.
    pub fn snapshot(&self) -> Vec<StreamCopy> {
        self.streams
            .iter()
            .map(|(name, s)| {
                (
                    name.clone(),
                    Position {
                        offset: s.top,
                        epoch: s.epoch.clone(),
                    },
                    s.pubs.iter().map(|p| (p.offset, p.text.clone())).collect(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
