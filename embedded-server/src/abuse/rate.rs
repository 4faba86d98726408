//! Rates as GCRA (the generic cell rate algorithm: a token bucket kept as one timestamp, the
//! "theoretical arrival time"): the connection rates' arithmetic, and a connection's message
//! bucket, a single `AtomicU64` that is zero (a full bucket) when created and costs one load
//! and one store per message.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A rate: `per_sec` events a second on average, up to `burst` at once after a quiet spell.
/// In a configuration file, `[per_sec, burst]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "(u32, u32)", try_from = "(u32, u32)")]
pub struct Rate {
    /// Events a second on average.
    pub per_sec: u32,
    /// Events at once after a quiet spell.
    pub burst: u32,
}

impl From<Rate> for (u32, u32) {
    fn from(r: Rate) -> (u32, u32) {
        (r.per_sec, r.burst)
    }
}

impl TryFrom<(u32, u32)> for Rate {
    type Error = String;
    fn try_from((per_sec, burst): (u32, u32)) -> Result<Rate, String> {
        Rate::new(per_sec, burst)
            .ok_or_else(|| "a rate of 0 per second: write null to turn the limit off".into())
    }
}

impl Rate {
    /// `N` (a burst of one second's worth) or `N:BURST`, per second. 0 means off (None).
    pub fn parse(s: &str) -> Result<Option<Rate>, String> {
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' is not a rate: write PER_SECOND or PER_SECOND:BURST, whole numbers (0 turns it off)"))
        };
        let (rate, burst) = match s.split_once(':') {
            Some((r, b)) => (num(r)?, num(b)?),
            None => (num(s)?, 0),
        };
        Ok(Rate::new(rate, burst))
    }

    /// None when `per_sec` is 0 (off); a burst of 0 means one second's worth.
    pub fn new(per_sec: u32, burst: u32) -> Option<Rate> {
        (per_sec > 0).then_some(Rate {
            per_sec,
            burst: if burst == 0 { per_sec } else { burst },
        })
    }

    /// Nanoseconds between events at the steady rate.
    fn interval_ns(self) -> u64 {
        1_000_000_000 / self.per_sec as u64
    }

    /// GCRA on a stored theoretical arrival time: `Ok(new tat)` when an event may happen at
    /// `now` (store it), `Err(wait)` when the bucket is empty, with how long until it may.
    pub(super) fn admit(self, tat: u64, now: u64) -> Result<u64, Duration> {
        let t = self.interval_ns();
        let new = tat.max(now) + t;
        let allowance = t * self.burst as u64;
        if new - now <= allowance {
            Ok(new)
        } else {
            Err(Duration::from_nanos(new - now - allowance))
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/s burst {}", self.per_sec, self.burst)
    }
}

/// Nanoseconds since the first call: the clock every GCRA timestamp is on. Starts above zero so
/// that a stored 0 (a new connection's bucket) is always in the past, i.e. a full bucket.
pub(super) fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| Instant::now() - Duration::from_secs(1));
    epoch.elapsed().as_nanos() as u64
}

#[doc(hidden)]
/// A per-connection message bucket: the theoretical arrival time, 0 when new (full), or
/// `EXEMPT` for a connection from an exempt address. Lives in `outbox::Shared`; only the
/// connection's own task touches it, so relaxed loads and stores suffice.
#[derive(Debug, Default)]
pub struct MessageBucket(AtomicU64);

const EXEMPT: u64 = u64::MAX;

impl MessageBucket {
    /// Mark a connection from an exempt address: never limited.
    pub fn exempt(&self) {
        self.0.store(EXEMPT, Relaxed);
    }

    /// One message arrived: false when it is over `rate`.
    pub fn allow(&self, rate: Rate) -> bool {
        let tat = self.0.load(Relaxed);
        if tat == EXEMPT {
            return true;
        }
        match rate.admit(tat, now_ns()) {
            Ok(new) => {
                self.0.store(new, Relaxed);
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_specs() {
        assert_eq!(Rate::parse("0"), Ok(None));
        assert_eq!(
            Rate::parse("10"),
            Ok(Some(Rate {
                per_sec: 10,
                burst: 10
            }))
        );
        assert_eq!(
            Rate::parse("10:50"),
            Ok(Some(Rate {
                per_sec: 10,
                burst: 50
            }))
        );
        for bad in ["", "x", "1:x", "-1", "1.5"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_token_bucket_allows_the_burst_then_the_rate() {
        let r = Rate {
            per_sec: 10,
            burst: 3,
        };
        let s = 1_000_000_000u64;
        let mut tat = 0;
        let now = 5 * s;
        for _ in 0..3 {
            tat = r.admit(tat, now).unwrap();
        }
        let wait = r.admit(tat, now).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_millis(100),
            "one interval until a token"
        );
        // 100 ms later exactly one more fits.
        tat = r.admit(tat, now + s / 10).unwrap();
        assert!(r.admit(tat, now + s / 10).is_err());
        // After a quiet second the whole burst is back, never more.
        let later = now + 2 * s;
        for _ in 0..3 {
            tat = r.admit(tat, later).unwrap();
        }
        assert!(r.admit(tat, later).is_err());
    }

    #[test]
    fn a_message_bucket_starts_full_and_exempt_never_empties() {
        let r = Rate::new(1, 2).unwrap();
        let b = MessageBucket::default();
        assert!(b.allow(r) && b.allow(r));
        assert!(!b.allow(r));
        let e = MessageBucket::default();
        e.exempt();
        assert!((0..1000).all(|_| e.allow(r)));
    }
}
