//! How the generator's sends are spread in time, measured where they leave it.
//!
//! Real clients are independent, so their messages reach a server spread out. A generator
//! whose sends leave in bursts (every send due within one timer tick at once) lets the server
//! read many sockets per wake-up and look cheaper than it is. Each generator process records
//! the gaps between its consecutive sends (any connection) and the number of sends in each
//! 1 ms slot of the measured window; the report shows both, so a bursty schedule is seen.

use serde::{Deserialize, Serialize};

/// Slots holding this many sends or more share the last bucket.
const MAX_PER_SLOT: usize = 1024;

/// One generator process's record of its sends (microseconds since its epoch).
#[derive(Debug, Default)]
pub struct Recorder {
    last_us: Option<u64>,
    /// Welford's running mean and sum of squared deviations of the gaps, in us.
    gaps: u64,
    mean: f64,
    m2: f64,
    slot: u64,
    in_slot: usize,
    /// `per_slot[k]`: 1 ms slots with k sends, from the first send's slot to the last's.
    per_slot: Vec<u64>,
}

impl Recorder {
    /// One send, at `us`. Sends must come in time order (one thread stamps them).
    pub fn sent(&mut self, us: u64) {
        let slot = us / 1000;
        match self.last_us {
            None => {
                self.slot = slot;
                self.in_slot = 0;
            }
            Some(last) => {
                let gap = us.saturating_sub(last) as f64;
                self.gaps += 1;
                let d = gap - self.mean;
                self.mean += d / self.gaps as f64;
                self.m2 += d * (gap - self.mean);
                if slot > self.slot {
                    self.close_slot();
                    // The slots in between had no send at all.
                    self.add(0, slot - self.slot - 1);
                    self.slot = slot;
                    self.in_slot = 0;
                }
            }
        }
        self.in_slot += 1;
        self.last_us = Some(us.max(self.last_us.unwrap_or(0)));
    }

    fn add(&mut self, k: usize, n: u64) {
        if n == 0 {
            return;
        }
        let k = k.min(MAX_PER_SLOT);
        if self.per_slot.len() <= k {
            self.per_slot.resize(k + 1, 0);
        }
        self.per_slot[k] += n;
    }

    fn close_slot(&mut self) {
        let k = self.in_slot;
        self.add(k, 1);
    }

    /// What was recorded, the slot in progress included (None: fewer than two sends).
    pub fn finish(mut self) -> Option<ArrivalStats> {
        self.last_us?;
        self.close_slot();
        (self.gaps > 0).then(|| ArrivalStats {
            gaps: self.gaps,
            gap_mean_us: self.mean,
            gap_sd_us: (self.m2 / self.gaps as f64).sqrt(),
            per_slot: self.per_slot,
        })
    }
}

/// One process's send spacing; added up over processes by [`ArrivalStats::merge`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ArrivalStats {
    /// Gaps measured (sends less one, per process).
    pub gaps: u64,
    pub gap_mean_us: f64,
    pub gap_sd_us: f64,
    /// `per_slot[k]`: 1 ms slots in which k messages were sent.
    pub per_slot: Vec<u64>,
}

impl ArrivalStats {
    /// The processes' figures together: gaps pooled (each process's gaps are its own stream),
    /// slot counts added.
    pub fn merge(all: &[&ArrivalStats]) -> Option<ArrivalStats> {
        let gaps: u64 = all.iter().map(|a| a.gaps).sum();
        if gaps == 0 {
            return None;
        }
        let mean = all
            .iter()
            .map(|a| a.gap_mean_us * a.gaps as f64)
            .sum::<f64>()
            / gaps as f64;
        // Pooled variance: within-process spread plus the spread of the process means.
        let var = all
            .iter()
            .map(|a| a.gaps as f64 * (a.gap_sd_us.powi(2) + (a.gap_mean_us - mean).powi(2)))
            .sum::<f64>()
            / gaps as f64;
        let mut per_slot = Vec::new();
        for a in all {
            if per_slot.len() < a.per_slot.len() {
                per_slot.resize(a.per_slot.len(), 0);
            }
            for (k, n) in a.per_slot.iter().enumerate() {
                per_slot[k] += n;
            }
        }
        Some(ArrivalStats {
            gaps,
            gap_mean_us: mean,
            gap_sd_us: var.sqrt(),
            per_slot,
        })
    }

    /// The coefficient of variation of the gaps between sends: 0 for sends evenly spaced, 1
    /// for Poisson arrivals, far above 1 for bursts (n sends at once, then a pause: ~sqrt(n)).
    pub fn gap_cv(&self) -> f64 {
        if self.gap_mean_us > 0.0 {
            self.gap_sd_us / self.gap_mean_us
        } else {
            0.0
        }
    }

    /// Sends in a 1 ms slot at quantile `q` (0..=1) of the slots.
    pub fn per_slot_quantile(&self, q: f64) -> usize {
        let total: u64 = self.per_slot.iter().sum();
        if total == 0 {
            return 0;
        }
        let want = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (k, n) in self.per_slot.iter().enumerate() {
            seen += n;
            if seen >= want {
                return k;
            }
        }
        self.per_slot.len().saturating_sub(1)
    }

    pub fn summary(&self, model: &str, timer_us: u64) -> Arrivals {
        let slots: u64 = self.per_slot.iter().sum();
        let sends: u64 = self
            .per_slot
            .iter()
            .enumerate()
            .map(|(k, n)| k as u64 * n)
            .sum();
        Arrivals {
            model: model.to_string(),
            timer_resolution_us: timer_us,
            gap_mean_us: self.gap_mean_us,
            gap_cv: self.gap_cv(),
            sends_per_ms_mean: if slots > 0 {
                sends as f64 / slots as f64
            } else {
                0.0
            },
            sends_per_ms_p50: self.per_slot_quantile(0.5),
            sends_per_ms_p99: self.per_slot_quantile(0.99),
            sends_per_ms_max: self.per_slot_quantile(1.0),
        }
    }
}

/// The report's view: how the sends were scheduled and how spread out they left (per
/// generator process: the server sees the processes' streams interleaved).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Arrivals {
    /// "even": each connection sends on its own fixed schedule, the connections' phases spread
    /// evenly over the period.
    pub model: String,
    /// The generator's timer: 1 us (timerfd), or 1000 where only a 1 ms timer exists.
    pub timer_resolution_us: u64,
    pub gap_mean_us: f64,
    /// Coefficient of variation of the gaps between one process's sends (0 even, 1 Poisson).
    pub gap_cv: f64,
    pub sends_per_ms_mean: f64,
    pub sends_per_ms_p50: usize,
    pub sends_per_ms_p99: usize,
    pub sends_per_ms_max: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(stamps: impl IntoIterator<Item = u64>) -> ArrivalStats {
        let mut r = Recorder::default();
        for s in stamps {
            r.sent(s);
        }
        r.finish().unwrap()
    }

    #[test]
    fn evenly_spaced_sends_have_no_spread() {
        // 40 us apart for 100 ms: 25 per 1 ms slot, every slot.
        let a = record((0..2500).map(|i| i * 40));
        assert!(a.gap_cv() < 1e-9, "cv {}", a.gap_cv());
        assert!((a.gap_mean_us - 40.0).abs() < 1e-9);
        assert_eq!(a.per_slot_quantile(0.5), 25);
        assert_eq!(a.per_slot_quantile(1.0), 25);
    }

    #[test]
    fn one_burst_per_millisecond_is_seen_as_bursty() {
        // The 1 ms timer's shape: 25 sends in the same microsecond, then nothing for 1 ms.
        let a = record((0..100u64).flat_map(|ms| std::iter::repeat_n(ms * 1000, 25)));
        assert!(a.gap_cv() > 4.0, "cv {}", a.gap_cv());
        // The same count per slot as the even schedule: the slot figure alone cannot tell
        // them apart, the gaps can.
        assert_eq!(a.per_slot_quantile(0.5), 25);
    }

    #[test]
    fn empty_slots_count_and_processes_merge() {
        // Sends at 0 and 3.5 ms: slots 0 and 3 hold one each, 1 and 2 none.
        let a = record([0, 3500]);
        assert_eq!(a.per_slot, vec![2, 2]);
        assert_eq!(a.per_slot_quantile(0.5), 0);
        assert_eq!(a.per_slot_quantile(1.0), 1);
        let b = record((0..11).map(|i| i * 100));
        let m = ArrivalStats::merge(&[&a, &b]).unwrap();
        assert_eq!(m.gaps, 11);
        assert!((m.gap_mean_us - (3500.0 + 10.0 * 100.0) / 11.0).abs() < 1e-6);
        // Pooled: the variance of all 11 gaps together.
        let gaps: Vec<f64> = std::iter::once(3500.0).chain([100.0; 10]).collect();
        let mean = gaps.iter().sum::<f64>() / 11.0;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / 11.0).sqrt();
        assert!((m.gap_sd_us - sd).abs() < 1e-6, "{} vs {sd}", m.gap_sd_us);
        assert_eq!(m.per_slot.iter().sum::<u64>(), 4 + 2);
        assert!(ArrivalStats::merge(&[]).is_none());
        assert!(Recorder::default().finish().is_none());
    }
}
