//! What one scenario measured, as the report renders it: latency, the processes' CPU and
//! memory, the kernel's figures, the timeline, earlier attempts.

use super::{arrivals, noise, KernelDrops, KernelMemory, OwnFigures, Scenario};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
    /// (percentile, ms) points for the chart.
    pub curve: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcFigures {
    pub cpu_secs: f64,
    /// CPU time over wall time, percent of one core.
    pub cpu_pct: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_before_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_after_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_per_conn_bytes: Option<f64>,
    /// Generator: the peak resident memory of its processes, summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t: u32,
    pub sent_per_sec: u64,
    pub received_per_sec: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioReport {
    pub scenario: Scenario,
    pub conns_requested: usize,
    pub conns_connected: usize,
    pub workers: usize,
    pub sources: usize,
    pub secs: f64,
    /// Seconds of unmeasured load before `secs` (echo-rate, deflate, echo-sat).
    pub warmup_secs: f64,
    pub payload_bytes: usize,
    /// echo-rate / deflate: messages per second offered in total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inflight: Option<usize>,
    pub sent: u64,
    pub received: u64,
    /// Echoes (or deliveries) per second over the run.
    pub achieved_rate: f64,
    pub errors: u64,
    pub disconnects: u64,
    /// Messages never echoed by the end of the run; they are in the latency histogram with
    /// the time they had waited (a lower bound).
    pub lost: u64,
    pub close_codes: BTreeMap<u16, u64>,
    pub latency_ms: Latency,
    /// echo-rate / deflate: latency from the actual send. `latency_ms` counts from when each
    /// message was due, so a generator running behind its schedule inflates it; a server
    /// stall shows in both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_latency_ms: Option<Latency>,
    /// echo-rate / deflate: how the sends were scheduled and how spread out they left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<arrivals::Arrivals>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ProcFigures>,
    pub generator: ProcFigures,
    /// idle: the kernel's socket memory before and while the connections were held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelMemory>,
    /// The kernel's drop and memory counters over the scenario (Linux; None elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_drops: Option<KernelDrops>,
    /// echo-sat: echoes per CPU-second of the server, the efficiency figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echoes_per_server_cpu_sec: Option<f64>,
    /// echo-rate and deflate: the server's CPU (all its processes) per message received back
    /// in the measured window, in microseconds: the cost the capacity estimate budgets
    /// (`server.cpu_ns_per_message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_us_per_msg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storm_secs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connects_per_sec: Option<f64>,
    /// Broadcast: per round, the time until the last subscriber had it (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broadcast_last_ms: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broadcast_rounds: Option<usize>,
    pub timeline: Vec<TimelinePoint>,
    /// How disturbed the measured window was: steal, other processes' CPU (None: the window
    /// was not sampled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disturbance: Option<noise::Disturbance>,
    /// Earlier measurements of this scenario, when a window too noisy to judge was measured
    /// again; this report is the last one. The spread between them is the run-to-run spread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Why the run stopped short (a worker died, the server went away); the figures are partial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// How long opening a connection took: TCP, TLS (wss://) and the upgrade, together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<Latency>,
    /// wss://: the TLS handshakes the scenario made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsReport>,
    /// tls-handshake: connect + TLS + upgrade + close cycles completed per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshakes_per_sec: Option<f64>,
    /// tls-handshake: cycles per CPU-second of the server (all its processes): what one core
    /// terminates. The certificate's key type decides much of it (see `tls.signature_scheme`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshakes_per_server_core_sec: Option<f64>,
    /// A script's waiting steps (`POPULATION.STEP`), each timed from the connection's last
    /// send to the message that matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
    /// What only this scenario measures (restart's closes, refusals and reconnects), one key
    /// of its own in the JSON, absent for a scenario with none.
    #[serde(flatten)]
    pub own: OwnFigures,
    /// A shard's run: when its measured load started, ms since the Unix epoch (the shards'
    /// differences are the skew `report merge` prints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ms: Option<u64>,
    /// The host's connection counters during the scenario, as `wstune watch` reads them: per
    /// listener the deepest accept queue and the seconds it was full, the counters that moved,
    /// and the advice that fired, with seconds since the scenario started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_timeline: Option<crate::watch::timeline::Timeline>,
    /// The distributions behind the latency figures, so reports of shards run on several hosts
    /// merge exactly (`wstune report merge`). Last, being the longest and the least read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<Histograms>,
}

/// A scenario's raw latencies: HdrHistogram V2 + DEFLATE, base64, in microseconds, 1 us ..
/// 10 min at 3 significant figures (any HdrHistogram library reads them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histograms {
    /// `latency_ms`'s samples.
    pub latency: String,
    /// `service_latency_ms`'s samples (echo-rate, deflate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// `connect_ms`'s samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<String>,
    /// `tls.handshake_ms`'s samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshake: Option<String>,
    /// broadcast: per round, [deliveries, the last delivery's latency in us]; merged shards
    /// add the deliveries and keep the latest, which `broadcast_last_ms` is made from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<(u64, u64)>,
}

/// One waiting step of a scripted session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    /// `POPULATION.STEP`.
    pub name: String,
    pub latency_ms: Latency,
    /// Expectations met.
    pub matched: u64,
    /// Expectations that timed out (a wrong expectation, or a server that did not answer).
    pub timeouts: u64,
    /// Messages that arrived while it waited and did not match.
    pub other: u64,
    /// The latencies, as `histograms`' (HdrHistogram V2 + DEFLATE, base64, us), for merging.
    pub histogram: String,
}

/// The TLS handshakes of a scenario against a wss:// server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TlsReport {
    /// The protocol version negotiated (TLSv1_3, TLSv1_2).
    pub version: String,
    pub cipher: String,
    /// The scheme the server signed its full handshakes with (its key type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_scheme: Option<String>,
    /// Handshakes with a certificate and key exchange (the expensive kind).
    pub full: u64,
    /// Handshakes that resumed an earlier session (`--tls-resume`).
    pub resumed: u64,
    /// The clients offered their earlier sessions (`--tls-resume`).
    pub resume_offered: bool,
    /// The TLS handshake's own time (after TCP, before the upgrade).
    pub handshake_ms: Latency,
}

/// One earlier measurement of a scenario that was measured again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub p99_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_p99_ms: Option<f64>,
    pub achieved_rate: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disturbance: Option<noise::Disturbance>,
    /// The checks this measurement missed (empty: it passed).
    pub missed: Vec<String>,
}
