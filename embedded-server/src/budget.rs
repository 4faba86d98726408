//! The server-wide memory budget: every byte a client can make the server hold beyond a
//! connection's fixed state is charged here, whichever part of the server holds it:
//! - the partial frame and the reassembled message a connection's task keeps between reads,
//! - inflate output (also under its own `inflate_budget`, which caps that store alone),
//! - outgoing bytes waiting in a connection's queue (including one frame above the send-queue
//!   cap, which an empty queue takes whole); a broadcast frame waiting in several queues is
//!   one allocation but is charged once per queue, so the budget over-counts fan-out to slow
//!   consumers, and only connections that queue (whose socket is full) are ever refused,
//! - the payload an offloaded job carries until it has run,
//! - channel subscriptions (their names and table entries; a subscribe the budget has no room
//!   for is refused with an error op rather than a close),
//! - channel history (kept publications; bounded by its own cap, so charged, never refused).
//!
//! One budget, not one cap per store: per-store caps multiply (a connection could hold a 16 MiB
//! reassembly, a 4 MiB partial frame and a 17 MiB echo at once, and 300 connections 11 GB),
//! while the budget bounds their sum across every connection. A charge that would pass it is
//! refused and the connection that asked is closed with 1013 (try again later: the server, not
//! the client, is short); a connection past its own share (`ServerConfig::conn_memory_share`)
//! is closed with 1009 (RFC 6455 7.4.1: a message too big to process). Either way its bytes go
//! back at once.
//!
//! One exception keeps a small budget usable: a charge by a caller that holds nothing goes
//! through when nobody else holds anything either, so one message up to the caps always can.
//!
//! The counters are relaxed atomics: a charge is one `fetch_add` and, only when near the
//! limit, one `fetch_sub` to undo it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// What the budget is spent on (a label of `ws_memory_budget_closes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Partial frames and messages being reassembled.
    Input,
    /// Inflate output.
    Inflate,
    /// Outgoing bytes waiting in a connection's queue.
    Queue,
    /// Payloads of offloaded jobs waiting for or running on the pool.
    Offload,
    /// Channel subscriptions: their names and table entries. A refused charge refuses the
    /// subscribe (an error op); the connection stays open.
    Subscriptions,
    /// Channel history (`hub::history`): charged as it grows, never refused (its own
    /// `max_bytes` bounds it, at most a quarter of the budget).
    History,
}

const STORES: [Store; 6] = [
    Store::Input,
    Store::Inflate,
    Store::Queue,
    Store::Offload,
    Store::Subscriptions,
    Store::History,
];

impl Store {
    fn index(self) -> usize {
        self as usize
    }

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Store::Input => "input",
            Store::Inflate => "inflate",
            Store::Queue => "queue",
            Store::Offload => "offload",
            Store::Subscriptions => "subscriptions",
            Store::History => "history",
        }
    }
}

/// The budget and what is charged to it now, per store.
#[derive(Debug)]
pub struct Budget {
    /// Bytes allowed in all (`usize::MAX`: unbounded, until the server sets it).
    limit: AtomicUsize,
    used: AtomicUsize,
    by_store: [AtomicUsize; 6],
    peak: AtomicUsize,
    /// Charges refused, per store (each closed a connection, or refused a subscribe).
    refused: [AtomicU64; 6],
    /// Connections closed for passing their own share.
    share_closes: AtomicU64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            limit: AtomicUsize::new(usize::MAX),
            used: AtomicUsize::new(0),
            by_store: Default::default(),
            peak: AtomicUsize::new(0),
            refused: Default::default(),
            share_closes: AtomicU64::new(0),
        }
    }
}

impl Budget {
    /// Set the limit (once, when the server starts).
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Relaxed);
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// Bytes charged now to one store.
    pub fn used_by(&self, store: Store) -> usize {
        self.by_store[store.index()].load(Relaxed)
    }

    /// The most charged at once since the server started.
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed)
    }

    /// Charges refused for `store`.
    pub fn refused(&self, store: Store) -> u64 {
        self.refused[store.index()].load(Relaxed)
    }

    /// Connections closed for passing their share.
    pub fn share_closes(&self) -> u64 {
        self.share_closes.load(Relaxed)
    }

    pub(crate) fn count_share_close(&self) {
        self.share_closes.fetch_add(1, Relaxed);
    }

    /// Charge `n` bytes to `store` for a caller that already holds `holds` bytes of the
    /// budget. Refused (nothing charged, the refusal counted) when the total would pass the
    /// limit, unless nobody but the caller holds anything.
    pub fn try_charge(&self, store: Store, n: usize, holds: usize) -> bool {
        if n == 0 {
            return true;
        }
        let before = self.used.fetch_add(n, Relaxed);
        let after = before.saturating_add(n);
        if after > self.limit() && before.saturating_sub(holds) > 0 {
            self.used.fetch_sub(n, Relaxed);
            self.refused[store.index()].fetch_add(1, Relaxed);
            return false;
        }
        self.by_store[store.index()].fetch_add(n, Relaxed);
        self.peak.fetch_max(after, Relaxed);
        true
    }

    /// Charge without a check: bytes the server must hold to close properly (a close frame).
    pub fn charge(&self, store: Store, n: usize) {
        if n > 0 {
            let after = self.used.fetch_add(n, Relaxed) + n;
            self.by_store[store.index()].fetch_add(n, Relaxed);
            self.peak.fetch_max(after, Relaxed);
        }
    }

    /// Give back `n` bytes charged to `store`.
    pub fn release(&self, store: Store, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Relaxed);
            self.by_store[store.index()].fetch_sub(n, Relaxed);
        }
    }

    /// Charge or release so that `store` holds `now` bytes for a caller whose charge was
    /// `*held`; `*held` follows. Returns false (and changes nothing) when growing was refused.
    pub fn settle(&self, store: Store, held: &mut usize, now: usize, holds_total: usize) -> bool {
        if now > *held {
            if !self.try_charge(store, now - *held, holds_total) {
                return false;
            }
        } else {
            self.release(store, *held - now);
        }
        *held = now;
        true
    }

    /// Every store with its bytes now, for /metrics.
    pub fn stores(&self) -> impl Iterator<Item = (Store, usize, u64)> + '_ {
        STORES
            .iter()
            .map(|&s| (s, self.used_by(s), self.refused(s)))
    }
}

/// The budget when none is set: an eighth of the memory the host has beyond what
/// `connections` idle connections need (`idle_bytes` each, server and kernel), and at least
/// 64 MiB. An eighth because the budget holds what clients cause in bursts, on top of the
/// steady state, on a host that runs more than this server; the operator sets it
/// (`--memory-budget`) where the host is dedicated.
pub fn default_budget(total_memory: u64, connections: usize, idle_bytes: u64) -> usize {
    let steady = (connections as u64).saturating_mul(idle_bytes);
    let spare = total_memory.saturating_sub(steady) / 8;
    spare.max(64 << 20).min(usize::MAX as u64) as usize
}

/// The host's memory in bytes (Linux: /proc/meminfo's MemTotal), or None where unknown.
pub fn host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_past_the_limit_are_refused_and_counted() {
        let b = Budget::default();
        b.set_limit(100);
        assert!(b.try_charge(Store::Queue, 60, 0));
        assert!(!b.try_charge(Store::Input, 50, 0));
        assert_eq!(b.refused(Store::Input), 1);
        assert_eq!(b.used(), 60);
        assert!(b.try_charge(Store::Input, 40, 0));
        assert_eq!(b.used(), 100);
        b.release(Store::Queue, 60);
        assert_eq!((b.used(), b.used_by(Store::Queue)), (40, 0));
        assert_eq!(b.peak(), 100);
    }

    #[test]
    fn a_sole_holder_may_pass_a_small_budget() {
        let b = Budget::default();
        b.set_limit(10);
        // Nobody holds anything: one message above the budget still goes.
        assert!(b.try_charge(Store::Inflate, 50, 0));
        // The same caller growing further, still alone, goes too.
        assert!(b.try_charge(Store::Inflate, 50, 50));
        // Someone else is refused while it holds that.
        assert!(!b.try_charge(Store::Queue, 1, 0));
    }

    #[test]
    fn settle_follows_a_buffer_up_and_down() {
        let b = Budget::default();
        b.set_limit(1000);
        let mut held = 0;
        assert!(b.settle(Store::Input, &mut held, 600, 0));
        assert!(b.try_charge(Store::Queue, 300, 0));
        assert!(!b.settle(Store::Input, &mut held, 800, 600));
        assert_eq!(held, 600, "a refused growth changes nothing");
        assert!(b.settle(Store::Input, &mut held, 10, 600));
        assert_eq!((b.used(), held), (310, 10));
    }

    #[test]
    fn the_default_leaves_the_steady_state_out_and_has_a_floor() {
        let gib = 1u64 << 30;
        assert_eq!(default_budget(24 * gib, 0, 0), 3 << 30);
        // 100k connections at 8 KiB each leave ~23.2 GiB: an eighth.
        let b = default_budget(24 * gib, 100_000, 8 << 10) as u64;
        assert_eq!(b, (24 * gib - 100_000 * 8192) / 8);
        assert_eq!(default_budget(gib, 1_000_000, 8 << 10), 64 << 20);
    }
}
