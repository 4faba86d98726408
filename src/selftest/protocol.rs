//! What the orchestrator and its generator processes say to each other: the spec a worker gets
//! as JSON on its command line, the events it writes line by line while it runs, and the result
//! it ends with.

use super::client::Target;
use super::{arrivals, Scenario};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// What one worker process does (passed as JSON on its command line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub scenario: Scenario,
    pub target: Target,
    pub conns: usize,
    /// Source addresses, used round-robin from `source_offset` (empty: the kernel picks).
    pub sources: Vec<IpAddr>,
    pub source_offset: usize,
    /// Messages per second per connection (echo-rate, deflate).
    pub rate: f64,
    pub size: usize,
    pub secs: f64,
    /// Seconds of load before the measured `secs` (echo-rate, deflate, echo-sat).
    pub warmup: f64,
    /// Messages in flight per connection (echo-sat).
    pub inflight: usize,
    pub deflate: bool,
    /// Connections opened per second by this worker (0: as fast as 256 handshakes in flight go).
    pub ramp_per_sec: f64,
    /// Broadcast rounds to wait for.
    pub rounds: usize,
    /// Storm: handshakes in flight at once.
    pub storm_concurrency: usize,
    /// A user's server (`--command --message`): send this text instead of a stamped echo
    /// payload and take each reply, whatever it says, as the answer to the oldest message not
    /// yet answered (replies come in order on one connection).
    #[serde(default)]
    pub request: Option<String>,
    /// echo-rate and deflate: where this worker's connections sit in the run's send schedule.
    /// Connection `j` of worker `phase_slot` is slot `j * phase_stride + phase_slot` of
    /// `phase_total`, and sends at that fraction of each period, so the workers' schedules
    /// interleave and the run's sends are spread evenly over the period (0: this worker alone).
    #[serde(default)]
    pub phase_slot: usize,
    #[serde(default)]
    pub phase_stride: usize,
    #[serde(default)]
    pub phase_total: usize,
}

impl WorkerSpec {
    /// Connection `j`'s place in one period of the run's schedule, in [0, 1).
    pub fn phase(&self, j: usize) -> f64 {
        if self.phase_total > 0 && self.phase_stride > 0 {
            ((j * self.phase_stride + self.phase_slot) as f64 / self.phase_total as f64).min(1.0)
        } else {
            j as f64 / self.conns.max(1) as f64
        }
    }

    pub fn source(&self, i: usize) -> Option<IpAddr> {
        (!self.sources.is_empty())
            .then(|| self.sources[(self.source_offset + i) % self.sources.len()])
    }
}

/// A worker's report lines (JSON, one per line on its stdout).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    Connecting {
        done: usize,
    },
    Ready {
        connected: usize,
        failed: usize,
        first_error: Option<String>,
    },
    Tick {
        sent: u64,
        received: u64,
    },
    Done(Box<WorkerResult>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerResult {
    pub sent: u64,
    pub received: u64,
    pub errors: u64,
    pub disconnects: u64,
    pub close_codes: BTreeMap<u16, u64>,
    /// HdrHistogram V2, base64: latencies in microseconds.
    pub histogram: String,
    /// echo-rate / deflate: latencies from the actual send (same encoding); None elsewhere.
    #[serde(default)]
    pub service_histogram: Option<String>,
    pub cpu_secs: f64,
    pub elapsed_secs: f64,
    pub rounds: Vec<(u64, u64)>,
    pub last_echo_secs: f64,
    pub lost: u64,
    pub first_error: Option<String>,
    /// The worker's peak resident memory (VmHWM), bytes; None where /proc is unreadable.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// echo-rate / deflate: how spread out this process's sends left (None elsewhere).
    #[serde(default)]
    pub arrivals: Option<arrivals::ArrivalStats>,
}
