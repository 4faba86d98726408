//! The bounds: the shares of the byte bound each channel and each publisher may hold, the
//! count and age bounds, and the order queue that finds the oldest publication in O(1).
//! Every way a publication or a stream leaves the store passes through here, so the bytes
//! charged and the bytes held never part.

use super::*;

impl History {
    /// Charge `bytes` to `publisher`'s share for `item` (see [`Share`]).
    pub(super) fn charge(
        &mut self,
        publisher: Publisher,
        bytes: usize,
        item: (Arc<str>, u64, u64),
    ) {
        let share = self.shares.entry(publisher).or_default();
        share.bytes += bytes;
        share.items += 1;
        share.queue.push_back(item);
    }

    /// Give `bytes` of one item back to `publisher`'s share (nothing for [`NO_PUBLISHER`]).
    pub(super) fn credit(&mut self, publisher: Publisher, bytes: usize) {
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
    pub(super) fn release(&mut self, dropped: Vec<Kept>) {
        for k in dropped {
            self.stale += 1;
            self.credit(k.publisher, k.text.len() + PUBLICATION_BYTES);
        }
    }

    /// Forget `channel`'s stream now (its publisher passed its share): its publications go,
    /// it leaves a tombstone, and its queued entries are stale.
    pub(super) fn forget(&mut self, channel: &str, now: u32) {
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
    pub(super) fn enforce_share(&mut self, publisher: Publisher, now: u32) {
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
    pub(super) fn compact(&mut self, now: u32) {
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

    /// Hold `channel`'s stream to its count and its share of the bytes, oldest first (the
    /// newest too when it alone is past the share: it is delivered, not kept).
    pub(super) fn trim(&mut self, channel: &str) {
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
    pub(super) fn take_oldest(&mut self, now: u32) -> bool {
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
}
