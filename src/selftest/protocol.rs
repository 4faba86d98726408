//! What the orchestrator and its generator processes say to each other: the spec a worker gets
//! as JSON on its input, the events it writes line by line while it runs, and the result
//! it ends with.

use super::client::Target;
use super::tls::TlsClient;
use super::{arrivals, OwnCounts, Scenario};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// What one worker process does (passed as JSON, the first line of its input).
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
    /// A wss:// target: whom to trust and whether to resume sessions.
    #[serde(default)]
    pub tls: Option<TlsClient>,
    /// A sharded run (`--shard I/N`): each shard's schedule sits `I/N` of one slot later, so
    /// the shards' sends interleave as one host's would instead of leaving together.
    #[serde(default)]
    pub shard_slot: usize,
    #[serde(default = "one")]
    pub shard_count: usize,
    /// A scripted session (`--script`): this process's share of each population.
    #[serde(default)]
    pub script: Option<super::script::Script>,
}

fn one() -> usize {
    1
}

impl WorkerSpec {
    /// Connection `j`'s place in one period of the run's schedule, in [0, 1).
    pub fn phase(&self, j: usize) -> f64 {
        if self.phase_total > 0 && self.phase_stride > 0 {
            let n = self.shard_count.max(1);
            (((j * self.phase_stride + self.phase_slot) * n + self.shard_slot) as f64
                / (self.phase_total * n) as f64)
                .min(1.0)
        } else {
            j as f64 / self.conns.max(1) as f64
        }
    }

    /// Connection `i`'s number in the whole run (a script's `{{conn}}`): unique over the
    /// processes and the shards (the shards' numbers interleave).
    pub fn conn_number(&self, i: usize) -> usize {
        (self.source_offset + i) * self.shard_count.max(1) + self.shard_slot
    }

    /// Whether the connections open inside the measured window (storm, tls-handshake, a script
    /// with stages) instead of before it.
    pub fn connects_in_window(&self) -> bool {
        self.scenario.connects_in_window()
            || self.script.as_ref().is_some_and(|s| !s.stages.is_empty())
    }

    /// Connection `i`'s target: a script's population connects with its own path and headers.
    pub fn target_of(&self, i: usize) -> Target {
        let Some(p) = self
            .script
            .as_ref()
            .and_then(|s| Some(&s.populations[s.population_of(i)?]))
        else {
            return self.target.clone();
        };
        Target {
            path: if p.path.is_empty() {
                self.target.path.clone()
            } else {
                p.path.clone()
            },
            headers: p.headers.clone(),
            ..self.target.clone()
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

/// A scripted session's waiting step, in one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepResult {
    /// `POPULATION.STEP`.
    pub name: String,
    /// HdrHistogram V2, base64: from the last send to the match, microseconds.
    pub histogram: String,
    pub matched: u64,
    pub timeouts: u64,
    /// Messages that arrived while it waited and did not match.
    pub other: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerResult {
    pub sent: u64,
    pub received: u64,
    pub errors: u64,
    pub disconnects: u64,
    /// Close codes the server sent, with their counts. Written as `[code, count]` pairs: the
    /// result travels inside the internally tagged `Event`, which serde reads through a buffer
    /// that cannot turn a JSON object's string keys back into numbers, so a map here made every
    /// result with a close code in it unreadable (the worker counted as ended without one).
    #[serde(with = "code_pairs")]
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
    /// Connection opening times (TCP + TLS + upgrade), same encoding as `histogram`.
    #[serde(default)]
    pub connect_histogram: Option<String>,
    /// wss://: the TLS handshakes' own times (same encoding).
    #[serde(default)]
    pub tls_histogram: Option<String>,
    /// wss://: what the handshakes were.
    #[serde(default)]
    pub tls: Option<TlsCounts>,
    /// A scripted session's waiting steps (empty elsewhere).
    #[serde(default)]
    pub steps: Vec<StepResult>,
    /// What only this scenario counts (restart's closes, reconnects and refusals).
    #[serde(flatten)]
    pub own: OwnCounts,
}

/// A generator process's TLS handshakes (counted in the measured window for tls-handshake,
/// every one elsewhere).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TlsCounts {
    pub version: String,
    pub cipher: String,
    pub signature_scheme: Option<String>,
    pub full: u64,
    pub resumed: u64,
}

/// `BTreeMap<u16, u64>` as a list of `[key, value]` pairs (see `WorkerResult::close_codes`).
mod code_pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer>(m: &BTreeMap<u16, u64>, s: S) -> Result<S::Ok, S::Error> {
        m.iter().collect::<Vec<_>>().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u16, u64>, D::Error> {
        Ok(Vec::<(u16, u64)>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's last line, with the close codes a server sent, reads back whole: as a map
    /// inside the tagged `Event` it failed with `invalid type: string "4000", expected u16`.
    #[test]
    fn a_done_event_with_close_codes_reads_back() {
        let result = WorkerResult {
            sent: 0,
            received: 0,
            errors: 5312,
            disconnects: 68,
            close_codes: BTreeMap::from([(4000, 68), (1001, 2)]),
            histogram: String::new(),
            service_histogram: None,
            cpu_secs: 0.5,
            elapsed_secs: 1.0,
            rounds: Vec::new(),
            last_echo_secs: 0.0,
            lost: 0,
            first_error: None,
            peak_rss_bytes: None,
            arrivals: None,
            connect_histogram: None,
            tls_histogram: None,
            tls: None,
            steps: Vec::new(),
            own: OwnCounts::Common,
        };
        let line = serde_json::to_string(&Event::Done(Box::new(result))).unwrap();
        let Event::Done(back) = serde_json::from_str::<Event>(&line).unwrap() else {
            panic!("not a done event: {line}")
        };
        assert_eq!(back.close_codes, BTreeMap::from([(1001, 2), (4000, 68)]));
        assert_eq!(back.disconnects, 68);
    }
}
