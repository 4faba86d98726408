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

mod bounds;
mod graves;
mod recover;

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
