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
//! while the budget bounds their sum across every connection. A charge that would pass it first
//! reclaims: the connections that hold the most unread output (their send queue above its cap,
//! more than the asker holds) are closed with 1013 and their queues given back at once, the
//! largest first, so a client that reads what it is sent is not refused because others do not.
//! Only when that frees too little is the charge refused and the connection that asked closed
//! with 1013 (try again later: the server, not the client, is short); a connection past its own
//! share (`ServerConfig::conn_memory_share`) is closed with 1009 (RFC 6455 7.4.1: a message too
//! big to process). Either way its bytes go back at once.
//!
//! The candidates are a short list the heartbeat sweep refreshes once a second from the
//! connections it visits anyway (`set_candidates`): a refused charge looks at those few, never
//! at every connection.
//!
//! One exception keeps a small budget usable: a charge by a caller that holds nothing goes
//! through when nobody else holds anything either, so one message up to the caps always can.
//!
//! The counters are relaxed atomics: a charge is one `fetch_add` and, only when near the
//! limit, one `fetch_sub` to undo it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Candidates kept for reclaiming: enough to free a large shortfall from the worst holders,
/// few enough that a refused charge looks at them all.
pub const CANDIDATES: usize = 16;

/// Victims closed for one charge at most: a charge that needs more is refused.
const VICTIMS_PER_CHARGE: usize = 4;

/// A connection the budget may close to give its unread output back (`outbox::Shared`).
pub trait Holder: Send + Sync {
    /// Bytes it would give back if closed now, when it is a fair victim (its unread output is
    /// above its cap and no close is under way); 0 otherwise.
    fn behind(&self) -> usize;
    /// Close it and give back what its queue holds (through `budget.release`), unless it is
    /// busy or already closing: None when it was not closed by this call, else the bytes
    /// given back now.
    fn reclaim(&self, budget: &Budget) -> Option<usize>;
}

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
    /// Connections closed to give their unread output back to a charge.
    reclaims: AtomicU64,
    /// Whom a short budget may close (the largest unread queues the sweep saw last).
    candidates: Mutex<Vec<Arc<dyn Holder>>>,
    /// `candidates` is not empty (read before taking its lock).
    has_candidates: AtomicBool,
}

impl std::fmt::Debug for dyn Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Holder({})", self.behind())
    }
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
            reclaims: AtomicU64::new(0),
            candidates: Mutex::new(Vec::new()),
            has_candidates: AtomicBool::new(false),
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

    /// Connections closed to give their unread output back to a charge.
    pub fn reclaims(&self) -> u64 {
        self.reclaims.load(Relaxed)
    }

    /// Replace the connections a short budget may close (the sweep's pick: the largest unread
    /// queues above their cap, at most `CANDIDATES`).
    pub fn set_candidates(&self, list: Vec<Arc<dyn Holder>>) {
        if list.is_empty() && !self.has_candidates.load(Relaxed) {
            return;
        }
        let mut c = self.candidates.lock().unwrap_or_else(|e| e.into_inner());
        self.has_candidates.store(!list.is_empty(), Relaxed);
        *c = list;
    }

    /// Offer a connection whose queue is above its cap (its task does, when a write leaves it
    /// there), so a short budget finds it before the next sweep: kept when the list has room
    /// or it holds more than the smallest listed. Never waits for the list.
    pub fn offer<H: Holder + 'static>(&self, holder: &Arc<H>) {
        let behind = holder.behind();
        if behind == 0 {
            return;
        }
        let Ok(mut list) = self.candidates.try_lock() else {
            return;
        };
        let me = Arc::as_ptr(holder) as *const ();
        if list.iter().any(|h| Arc::as_ptr(h) as *const () == me) {
            return;
        }
        if list.len() >= CANDIDATES {
            let smallest = list.iter().enumerate().map(|(i, h)| (h.behind(), i)).min();
            match smallest {
                Some((b, i)) if b < behind => {
                    list.swap_remove(i);
                }
                _ => return,
            }
        }
        list.push(holder.clone());
        self.has_candidates.store(true, Relaxed);
    }

    /// Charge `n` bytes to `store` for a caller that already holds `holds` bytes of the
    /// budget. When the total would pass the limit (and someone but the caller holds
    /// anything), the largest unread queues holding more than the caller are closed to make
    /// room; refused (nothing charged, the refusal counted) when that frees too little.
    pub fn try_charge(&self, store: Store, n: usize, holds: usize) -> bool {
        if n == 0 {
            return true;
        }
        let mut reclaimed = false;
        loop {
            let before = self.used.fetch_add(n, Relaxed);
            let after = before.saturating_add(n);
            let limit = self.limit();
            if after > limit && before.saturating_sub(holds) > 0 {
                self.used.fetch_sub(n, Relaxed);
                if !reclaimed && self.reclaim(after - limit, holds) > 0 {
                    reclaimed = true;
                    continue;
                }
                self.refused[store.index()].fetch_add(1, Relaxed);
                return false;
            }
            self.by_store[store.index()].fetch_add(n, Relaxed);
            self.peak.fetch_max(after, Relaxed);
            return true;
        }
    }

    /// Close candidates holding more than `holds`, the largest first, until `need` bytes came
    /// back (or `VICTIMS_PER_CHARGE` were closed); the bytes that came back.
    fn reclaim(&self, need: usize, holds: usize) -> usize {
        if !self.has_candidates.load(Relaxed) {
            return 0;
        }
        let mut list = self.candidates.lock().unwrap_or_else(|e| e.into_inner());
        // Largest first, by what each holds now (the sweep's order is up to a second old).
        let mut by_size: Vec<(usize, usize)> = list
            .iter()
            .enumerate()
            .map(|(i, h)| (h.behind(), i))
            .filter(|&(b, _)| b > holds)
            .collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        let (mut freed, mut closed) = (0, 0);
        for (_, i) in by_size {
            if freed >= need || closed == VICTIMS_PER_CHARGE {
                break;
            }
            if let Some(n) = list[i].reclaim(self) {
                self.reclaims.fetch_add(1, Relaxed);
                freed += n;
                closed += 1;
            }
        }
        list.retain(|h| h.behind() > 0);
        self.has_candidates.store(!list.is_empty(), Relaxed);
        freed
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

    /// A stand-in connection: `held` bytes behind, given back when reclaimed.
    struct Hog {
        held: AtomicUsize,
    }

    impl Holder for Hog {
        fn behind(&self) -> usize {
            self.held.load(Relaxed)
        }
        fn reclaim(&self, budget: &Budget) -> Option<usize> {
            let n = self.held.swap(0, Relaxed);
            (n > 0).then(|| {
                budget.release(Store::Queue, n);
                n
            })
        }
    }

    fn hog(b: &Budget, n: usize) -> Arc<Hog> {
        b.charge(Store::Queue, n);
        Arc::new(Hog {
            held: AtomicUsize::new(n),
        })
    }

    #[test]
    fn a_short_budget_closes_the_largest_holders_not_the_asker() {
        let b = Budget::default();
        b.set_limit(1000);
        let (small, large) = (hog(&b, 300), hog(&b, 600));
        // Offered by their tasks (no sweep yet): the smaller is kept while there is room.
        b.offer(&small);
        b.offer(&large);
        b.offer(&large);
        assert_eq!(b.candidates.lock().unwrap().len(), 2, "each listed once");
        // 200 more do not fit: the largest holder goes, the asker is served.
        assert!(b.try_charge(Store::Input, 200, 0));
        assert_eq!((large.behind(), small.behind()), (0, 300));
        assert_eq!(
            (b.used(), b.reclaims(), b.refused(Store::Input)),
            (500, 1, 0)
        );
        // A caller holding more than every candidate is refused: nobody is closed for it.
        b.charge(Store::Input, 400);
        assert!(!b.try_charge(Store::Input, 200, 600));
        assert_eq!((small.behind(), b.refused(Store::Input)), (300, 1));
        // The sweep's list replaces the offers; an empty one is remembered as empty.
        b.set_candidates(Vec::new());
        assert!(!b.try_charge(Store::Queue, 200, 0));
        assert_eq!(small.behind(), 300);
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
