//! One slice of a run spread over several generator hosts (`selftest --shard I/N`): which
//! connections it opens, when its run starts, and what its report says about it (when each
//! scenario starts is `slot`'s).
//!
//! The shards are started by engines operators already run (a Kubernetes Indexed Job, an
//! Ansible play: `wstune export selftest-job|selftest-ansible`), not by a coordinator of
//! wstune's own, so they agree on time by the wall clock: every shard is given the same
//! `--start-at`, and scenario k of the run starts at `start_at + k * slot` on each of them,
//! `slot` being computed from the flags they share. Hosts need a synchronised clock (NTP,
//! chrony); each report records when its scenarios started, and `report merge` prints the skew.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based.
    pub index: usize,
    pub count: usize,
    /// When the first scenario's measured load starts, milliseconds since the Unix epoch.
    pub start_at_unix_ms: u64,
    /// Seconds between the scenarios' starts: room for the slowest one to connect, run, close
    /// and settle on any shard (see `slot::slot_secs`).
    pub slot_secs: f64,
}

impl Shard {
    /// This shard's share of `total`: an even split, the first `total % count` shards one more.
    pub fn share(&self, total: usize) -> usize {
        total / self.count + usize::from(self.index < total % self.count)
    }

    /// When scenario number `k` (of the run's list) starts, ms since the epoch.
    pub fn start_of(&self, k: usize) -> u64 {
        self.start_at_unix_ms + (k as f64 * self.slot_secs * 1000.0).round() as u64
    }

    pub fn label(&self) -> String {
        format!("shard {}/{}", self.index, self.count)
    }
}

/// `I/N` with 0 <= I < N <= 1024.
pub fn parse_index(s: &str) -> Result<(usize, usize), String> {
    let bad = || {
        format!(
            "--shard {s}: give INDEX/COUNT with 0 <= INDEX < COUNT <= 1024 (0/4 .. 3/4 for four \
             hosts)"
        )
    };
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || n > 1024 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// `--start-at`: Unix seconds (fractions allowed), or `+SECS` from now. Returns ms since the
/// epoch; `now_ms` is the caller's clock.
pub fn parse_start(s: &str, now_ms: u64) -> Result<u64, String> {
    let bad = || {
        format!(
            "--start-at {s}: give Unix seconds (date +%s, the same value on every shard) or +SECS \
             from now"
        )
    };
    let secs = |t: &str| {
        t.trim()
            .parse::<f64>()
            .ok()
            // Up to the year 2286: the milliseconds below never overflow.
            .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 1e10)
            .ok_or_else(bad)
    };
    let at = match s.strip_prefix('+') {
        Some(rel) => now_ms + (secs(rel)? * 1000.0) as u64,
        None => (secs(s)? * 1000.0) as u64,
    };
    if at + 1000 < now_ms {
        return Err(format!(
            "--start-at {s}: that is {:.0} s in the past; give a time every shard can still \
             connect before (e.g. $(( $(date +%s) + 60 )))",
            (now_ms - at) as f64 / 1000.0
        ));
    }
    if at > now_ms + 86_400_000 {
        return Err(format!(
            "--start-at {s}: more than a day away; give a time within 24 h"
        ));
    }
    Ok(at)
}

/// Now, in ms since the Unix epoch: the clock the shards agree on.
pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_total() {
        for total in [1, 7, 1000, 100_001] {
            for count in [1, 2, 3, 4, 7] {
                let sum: usize = (0..count)
                    .map(|index| {
                        Shard {
                            index,
                            count,
                            start_at_unix_ms: 0,
                            slot_secs: 1.0,
                        }
                        .share(total)
                    })
                    .sum();
                assert_eq!(sum, total, "{total} over {count}");
            }
        }
    }

    #[test]
    fn indexes_and_start_times_are_checked() {
        assert_eq!(parse_index("2/4"), Ok((2, 4)));
        assert!(parse_index("4/4")
            .unwrap_err()
            .contains("0 <= INDEX < COUNT"));
        assert!(parse_index("1").is_err() && parse_index("a/2").is_err());
        let now = 1_800_000_000_000;
        assert_eq!(parse_start("+30", now), Ok(now + 30_000));
        assert_eq!(parse_start("1800000060.5", now), Ok(1_800_000_060_500));
        assert!(parse_start("1700000000", now)
            .unwrap_err()
            .contains("in the past"));
        assert!(parse_start("soon", now).unwrap_err().contains("date +%s"));
        assert!(parse_start("+1e17", now).is_err() && parse_start("1e300", now).is_err());
    }
}
