//! Reading the store back: what a client that comes back with a position gets (every
//! publication it missed, or why it cannot), and merging older publications fetched from a
//! shared store into a stream.

use super::*;

impl History {
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
    pub(super) fn unknown(&self, channel: &str, from: &Position) -> Unrecoverable {
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
    pub(super) fn since_stamp(
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
    pub(super) fn after(
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
}
