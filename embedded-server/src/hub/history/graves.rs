//! Tombstones and stamps: what a forgotten stream leaves behind, and the position a channel
//! without a stream answers, so that neither looks like a stream that never existed (the
//! store's documentation says why). Their bytes have their own share of the bound.

use super::*;

impl History {
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
    pub(super) fn bury(&mut self, channel: &Arc<str>, epoch: Arc<str>, top: u64, now: u32) {
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
    pub(super) fn put_tombstone(&mut self, name: Arc<str>, t: Tombstone) {
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
    pub(super) fn trim_tombstones(&mut self) {
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
    pub(super) fn stamp(&mut self, now: u32) -> Position {
        let ms = self.time_us(now, false);
        Position {
            offset: 0,
            epoch: Arc::from(format!("{:016x}@{ms}", self.family)),
        }
    }
}
