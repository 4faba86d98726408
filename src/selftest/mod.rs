//! The load generator behind `wstune selftest` and `wstune serve --self-test`.
//!
//! The orchestrator (this module) sizes the run to the host's limits ([`limits`]), starts one
//! generator process per share of the connections (`wstune selftest-worker`, [`worker`]), starts
//! them together, follows their progress, merges their HDR histograms and counters, samples the
//! server's CPU and memory from /proc, and hands a [`ScenarioReport`] per scenario to
//! [`report`] for the table, JSON, HTML and the verdict.

pub mod arrivals;
pub mod client;
pub mod command;
pub mod noise;
pub mod report;
pub mod server;
pub mod sizing;
pub mod worker;

use anyhow::{bail, Context, Result};
use client::Target;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The workloads. Names are the CLI's and the JSON report's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// N connections held open: server memory per connection and idle CPU.
    Idle,
    /// Open loop: N clients x R msgs/s, latency from each message's scheduled time.
    EchoRate,
    /// echo-rate with permessage-deflate negotiated and JSON payloads.
    Deflate,
    /// Closed loop: a fixed number of messages in flight per connection; maximum throughput.
    EchoSat,
    /// N clients connect at once, send one message, wait for the echo.
    Storm,
    /// N subscribers; a publisher's timestamped message, time until the last one has it.
    Broadcast,
}

impl Scenario {
    /// Whether the scenario runs a warm-up before it measures (the steady-load ones).
    pub fn warms_up(self) -> bool {
        matches!(
            self,
            Scenario::EchoRate | Scenario::Deflate | Scenario::EchoSat
        )
    }

    /// Whether the scenario's verdict rests on timing (latency, rate, work done before a
    /// deadline), which a host busy with other work distorts: such a scenario is only judged
    /// on a window quiet enough (see `noise`). idle (holding connections) and echo-sat (no
    /// target but finishing cleanly) are reported with their disturbance, and judged anyway.
    pub fn timed(self) -> bool {
        matches!(
            self,
            Scenario::EchoRate | Scenario::Deflate | Scenario::Storm | Scenario::Broadcast
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Scenario::EchoRate => "echo-rate",
            Scenario::EchoSat => "echo-sat",
            Scenario::Idle => "idle",
            Scenario::Storm => "storm",
            Scenario::Broadcast => "broadcast",
            Scenario::Deflate => "deflate",
        }
    }
}

/// Seconds a storm may take at least before its clients give up waiting for their echo.
pub const STORM_BUDGET_SECS: f64 = 30.0;

/// Storm handshakes per second the budget allows for at least: 2 cores completed 100k in
/// ~6 s (~17k/s) serving and generating at once, and a million at ~8,600/s (both cores
/// saturated by 61 server and 51 generator processes), so a million clients get 200 s
/// instead of 30.
pub const STORM_BUDGET_PER_SEC: f64 = 5_000.0;

/// Close handshakes per second the end of a run allows for, beside its fixed grace.
const CLOSES_PER_SEC: f64 = 20_000.0;

/// The seconds a storm of `conns` clients may take before they give up (`--secs` raises it).
pub fn storm_budget_secs(conns: usize, secs: f64) -> f64 {
    secs.max(STORM_BUDGET_SECS)
        .max(conns as f64 / STORM_BUDGET_PER_SEC)
}

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

/// Everything a run needs; built by `engine::selftest::plan` (for `selftest` and `serve --self-test`).
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Target,
    /// Where `broadcast` publishes and subscribes (a server that fans out what it receives).
    pub broadcast_target: Target,
    /// broadcast: servers the subscribers connect to, one per generator process in turn (empty:
    /// `broadcast_target`); the publisher always uses `broadcast_target`. Nodes of a cluster.
    pub subscribe_targets: Vec<Target>,
    pub scenarios: Vec<Scenario>,
    pub conns: usize,
    pub rate: f64,
    pub size: usize,
    pub secs: f64,
    /// `--warmup`; None: the default (see `warmup_for`).
    pub warmup: Option<f64>,
    /// Negotiate permessage-deflate (JSON payloads) in every scenario, not only `deflate`.
    pub deflate: bool,
    pub inflight: usize,
    pub rounds: usize,
    /// Generator processes; 0 sizes it from the fd limit (at least one).
    pub workers: usize,
    pub sources: Vec<IpAddr>,
    /// The server's process, for CPU and memory (None: not sampled).
    pub server_pid: Option<u32>,
    /// Sum CPU and memory over `server_pid` and every process below it (a supervisor and its
    /// server processes); false when the generator's processes are below it instead.
    pub server_tree: bool,
    /// The broadcast server's process when it is not `server_pid` (a separate child server).
    pub broadcast_server_pid: Option<u32>,
    pub ramp_per_sec: f64,
    pub storm_concurrency: usize,
    /// The message a user's server answers (`--message`; see `WorkerSpec::request`). None:
    /// the stamped payloads an echo sends back.
    pub request: Option<String>,
}

impl Options {
    /// Seconds of unmeasured load before `scenario`'s window: `--warmup`, or by default 1 s,
    /// and for the open-loop scenarios one period of the per-connection rate, at most 5 s. At
    /// 100k connections and 0.1 msg/s each, a 1 s warm-up was shorter than the generator's
    /// start-up (16,667 connections per process beginning their schedules at once), which
    /// spilled into the window: late sends counted from when they were due (p99 145-470 ms).
    /// With 5 s (half the connections have sent once) p99 was 1.2 ms, the same as with 10 s,
    /// and the whole self-test stays within its 3 minutes.
    ///
    /// Deflate warms up for one whole period and a second (at most 15 s): each connection's
    /// first message builds its contexts on both sides (~40 us of server CPU for a compressor
    /// and a decompressor at 11/4), so a 5 s warm-up at 0.1 msg/s left half the connections'
    /// creations in the window, which then measured context creation instead of what a kept
    /// context costs. Creating them is measured on its own: `wstune bench deflate --contexts`.
    pub fn warmup_for(&self, scenario: Scenario) -> f64 {
        match self.warmup {
            _ if !scenario.warms_up() => 0.0,
            Some(w) => w,
            None => default_warmup(scenario, self.rate),
        }
    }
}

/// The warm-up without `--warmup`, for a scenario that warms up (see [`Options::warmup_for`]).
fn default_warmup(scenario: Scenario, rate: f64) -> f64 {
    let period = 1.0 / rate.max(0.001);
    match scenario {
        Scenario::EchoRate => period.clamp(1.0, 5.0),
        Scenario::Deflate => (period + 1.0).clamp(1.0, 15.0),
        _ => 1.0,
    }
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
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

#[derive(Debug, Clone, Default, Serialize)]
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

/// The kernel's socket figures at one moment: /proc/net/sockstat and the slab total.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct KernelSample {
    /// `sockets: used`: every socket of this network namespace.
    pub sockets_used: u64,
    /// `TCP: inuse`: TCP sockets of this network namespace.
    pub tcp_inuse: u64,
    /// `TCP: mem`: pages the whole host's TCP buffers hold (what tcp_mem limits).
    pub tcp_mem_pages: u64,
    /// /proc/meminfo `Slab`: kernel objects, where each socket's tcp_sock, inode, file and
    /// epoll item live (host-wide, so other activity shows up too).
    pub slab_bytes: u64,
}

/// The kernel's socket memory before the idle connections opened and while they were held.
#[derive(Debug, Clone, Serialize)]
pub struct KernelMemory {
    pub before: KernelSample,
    pub during: KernelSample,
    pub page_size: u64,
    /// TCP buffer memory held while idle, bytes (`TCP: mem` during x page size).
    pub tcp_mem_bytes_during: u64,
    /// Slab growth per TCP socket opened: both ends of a loopback connection are sockets of
    /// this host, so this is per socket, not per connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slab_bytes_per_socket: Option<f64>,
}

/// Read /proc/net/sockstat and /proc/meminfo through this host's backend (Linux; None
/// elsewhere).
pub fn kernel_sample() -> Option<KernelSample> {
    use crate::host::procfs::paths;
    // This machine's live backend, not the caller's: the self-test measures the machine it runs
    // on (its own sockets, memory, ports), never a `--root` tree, which has nothing running.
    let host = crate::host::live(None);
    let sockstat = host.read(paths::SOCKSTAT).ok()?;
    let meminfo = host.read(paths::MEMINFO).ok()?;
    Some(parse_kernel_sample(&sockstat, &meminfo))
}

fn parse_kernel_sample(sockstat: &str, meminfo: &str) -> KernelSample {
    use crate::host::procfs;
    let field = |proto, name| {
        procfs::sockstat(sockstat, proto, name)
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0)
    };
    KernelSample {
        sockets_used: field("sockets", "used"),
        tcp_inuse: field("TCP", "inuse"),
        tcp_mem_pages: field("TCP", "mem"),
        slab_bytes: procfs::meminfo_bytes(meminfo, "Slab").unwrap_or(0),
    }
}

fn kernel_memory(
    before: Option<KernelSample>,
    during: Option<KernelSample>,
) -> Option<KernelMemory> {
    let (before, during) = (before?, during?);
    let page_size = page_size();
    let sockets = during.tcp_inuse.saturating_sub(before.tcp_inuse);
    Some(KernelMemory {
        before,
        during,
        page_size,
        tcp_mem_bytes_during: during.tcp_mem_pages * page_size,
        slab_bytes_per_socket: (sockets > 0)
            .then(|| (during.slab_bytes as f64 - before.slab_bytes as f64) / sockets as f64),
    })
}

/// The kernel's TCP drop and memory counters over one scenario (/proc/net/netstat, this
/// network namespace): what names the bound when connections fail at scale.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct KernelDrops {
    /// TcpExt ListenOverflows: a full accept queue (net.core.somaxconn, the listen backlog).
    pub listen_overflows: u64,
    /// TcpExt ListenDrops: every SYN or handshake dropped at a listener (overflows included).
    pub listen_drops: u64,
    /// TcpExt TCPMemoryPressures: times TCP memory entered pressure (net.ipv4.tcp_mem).
    pub memory_pressures: u64,
    /// TcpExt TCPAbortOnMemory: connections reset because TCP memory was spent.
    pub aborts_on_memory: u64,
    /// What bit, in words, when a counter grew; None when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
}

/// The TcpExt counters `KernelDrops` follows, as read now (Linux; None elsewhere).
fn drop_counters() -> Option<[u64; 4]> {
    use crate::host::procfs::{header_values, paths};
    let text = crate::host::live(None).read(paths::NETSTAT).ok()?;
    let v = |f| header_values(&text, "TcpExt", f).and_then(|v| u64::try_from(v).ok());
    Some([
        v("ListenOverflows")?,
        v("ListenDrops")?,
        v("TCPMemoryPressures").unwrap_or(0),
        v("TCPAbortOnMemory").unwrap_or(0),
    ])
}

/// The counters' growth from `before` to `after`, and the bound they name: the sysctls that
/// set it are read from this host so the words say what to raise.
fn kernel_drops(before: Option<[u64; 4]>, after: Option<[u64; 4]>) -> Option<KernelDrops> {
    let (b, a) = (before?, after?);
    let d: Vec<u64> = a.iter().zip(b).map(|(a, b)| a.saturating_sub(b)).collect();
    let sysctl = |p: &str| {
        crate::host::live(None)
            .read(p)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "?".into())
    };
    let mut bound = Vec::new();
    if d[0] > 0 || d[1] > 0 {
        bound.push(format!(
            "the accept queues overflowed: {} SYNs or handshakes dropped at the listeners \
             (TcpExt ListenOverflows +{}, ListenDrops +{}; `nstat -az TcpExtListenDrops`), \
             with net.core.somaxconn {} and net.ipv4.tcp_max_syn_backlog {} here \
             (`wstune check` names the fix)",
            d[1].max(d[0]),
            d[0],
            d[1],
            sysctl("/proc/sys/net/core/somaxconn"),
            sysctl("/proc/sys/net/ipv4/tcp_max_syn_backlog")
        ));
    }
    if d[2] > 0 || d[3] > 0 {
        bound.push(format!(
            "TCP memory ran short: pressure entered {} times, {} connections reset for memory \
             (TcpExt TCPMemoryPressures, TCPAbortOnMemory), with net.ipv4.tcp_mem {} pages here",
            d[2],
            d[3],
            sysctl("/proc/sys/net/ipv4/tcp_mem")
        ));
    }
    Some(KernelDrops {
        listen_overflows: d[0],
        listen_drops: d[1],
        memory_pressures: d[2],
        aborts_on_memory: d[3],
        bound: (!bound.is_empty()).then(|| bound.join("; ")),
    })
}

/// This host's memory page size (what `TCP: mem` counts in), from its backend.
fn page_size() -> u64 {
    // This machine's live backend, not the caller's: the self-test measures the machine it runs
    // on (its own sockets, memory, ports), never a `--root` tree, which has nothing running.
    crate::host::live(None).page_size()
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TimelinePoint {
    pub t: u32,
    pub sent_per_sec: u64,
    pub received_per_sec: u64,
}

#[derive(Debug, Clone, Serialize)]
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Why the run stopped short (a worker died, the server went away); the figures are partial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// One earlier measurement of a scenario that was measured again.
#[derive(Debug, Clone, Serialize)]
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

/// The server's CPU time and RSS: its process, or its whole process tree.
fn server_sample(o: &Options, scenario: Scenario) -> Option<(f64, u64)> {
    let pid = match scenario {
        Scenario::Broadcast => o.broadcast_server_pid.or(o.server_pid)?,
        _ => o.server_pid?,
    };
    if o.server_tree {
        server::sample_tree(pid)
    } else {
        sample(pid)
    }
}

/// A process's peak resident memory (VmHWM), Linux (read by host/).
pub fn peak_rss(pid: u32) -> Option<u64> {
    crate::host::process::peak_rss(pid)
}

/// Wait, at most `limit`, until the server processes measured here are quiet: under 5 % of
/// one core over a quarter of a second. At 100k connections a server spends seconds on the
/// last handshakes after a connect phase, and on closing a scenario's connections after its
/// clients left; a measurement started meanwhile charges that work to the next scenario (after
/// the idle scenario, echo-rate's p99 at 100k was 240-1000 ms with the cores saturated by the
/// teardown, 1.2 ms when it ran first). Every call takes at least one quarter-second sample;
/// a server measured only by URL (no pid) costs just that one.
pub async fn quiesce(o: &Options, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    let pids: Vec<u32> = [o.server_pid, o.broadcast_server_pid]
        .into_iter()
        .flatten()
        .collect();
    let cpu = || -> Option<f64> {
        pids.iter()
            .map(|&pid| {
                if o.server_tree {
                    server::sample_tree(pid)
                } else {
                    sample(pid)
                }
                .map(|s| s.0)
            })
            .sum()
    };
    loop {
        let before = cpu();
        tokio::time::sleep(Duration::from_millis(250)).await;
        match (before, cpu()) {
            (Some(a), Some(b)) if b - a >= 0.0125 && tokio::time::Instant::now() < deadline => {}
            _ => return,
        }
    }
}

/// A process's CPU time and resident memory (Linux /proc via host/; None elsewhere or when it
/// is gone).
pub fn sample(pid: u32) -> Option<(f64, u64)> {
    crate::host::process::sample(pid)
}

fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let curve = [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 100.0]
        .iter()
        .map(|&p| (p, ms(h.value_at_quantile(p / 100.0))))
        .collect();
    Latency {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        mean: h.mean() / 1000.0,
        curve,
    }
}

/// What the orchestrator shows while a scenario runs (hidden when stderr is not a terminal).
fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    pb.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

struct WorkerProc {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    stdin: tokio::process::ChildStdin,
    ticks: Vec<(u64, u64)>,
    result: Option<WorkerResult>,
    /// The last line it wrote that is not an event (and why), for the report if it then ends
    /// without a result.
    garbled: Option<String>,
}

/// Why generator process `i` of `n` stopped before its result, in words an operator can act
/// on: how it ended (its exit status, or the signal that ended it) and the last line it wrote
/// that could not be read as an event. A bare "exited" left a run's miss unexplained.
async fn ended_early(p: &mut WorkerProc, i: usize, n: usize, before: &str) -> String {
    let how = match tokio::time::timeout(Duration::from_secs(2), p.child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => format!("its exit status cannot be read: {e}"),
        Err(_) => "its output closed, the process still running".into(),
    };
    let garbled = p
        .garbled
        .as_deref()
        .map(|g| format!("; the last line it wrote that is not an event: {g}"))
        .unwrap_or_default();
    format!("generator process {i} of {n} ended ({how}) {before}{garbled}")
}

/// Note a line that is not an event: kept (shortened) for [`ended_early`].
fn garbled(line: &str, e: &dyn std::fmt::Display) -> String {
    let mut end = line.len().min(200);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < line.len() { "..." } else { "" };
    format!("{e}: {}{more}", &line[..end])
}

/// Run one scenario end to end. An error means nothing could be measured (no connection
/// opened); a partial run comes back as a report with `incomplete` set.
pub async fn run_scenario(o: &Options, scenario: Scenario) -> Result<ScenarioReport> {
    let target = if scenario == Scenario::Broadcast {
        &o.broadcast_target
    } else {
        &o.target
    };
    let rss_before = server_sample(o, scenario).map(|s| s.1);
    let kernel_before = (scenario == Scenario::Idle).then(kernel_sample).flatten();
    let drops_before = drop_counters();
    let mut procs = spawn_workers(o, scenario, target)?;
    let workers = procs.len();
    let (connected, first_error) = connect_phase(&mut procs, o, scenario, target).await?;
    // Let the server settle (the last handshakes done, idle memory steady) before measuring.
    if scenario != Scenario::Storm {
        quiesce(o, Duration::from_secs(10)).await;
    }
    let rss_after_connect = server_sample(o, scenario).map(|s| s.1);
    let kernel_during = (scenario == Scenario::Idle).then(kernel_sample).flatten();
    let warmup = o.warmup_for(scenario);
    // The server's CPU is read when the measured window starts (after the warm-up).
    let server0 = {
        let o = o.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
            (
                server_sample(&o, scenario).map(|s| (s, Instant::now())),
                noise::sample(),
            )
        })
    };
    let t0 = Instant::now();
    for p in procs.iter_mut() {
        let _ = p.stdin.write_all(b"go\n").await;
        let _ = p.stdin.flush().await;
    }

    let publisher = if scenario == Scenario::Broadcast {
        Some(start_publisher(o, target).await?)
    } else {
        None
    };
    let (mut incomplete, server_end, noise_end) =
        run_phase(&mut procs, o, scenario, warmup, t0).await;
    let drops = kernel_drops(drops_before, drop_counters());
    if let Some(p) = publisher {
        let _ = p.await;
    }
    // Each generator closes its connections (1000, Normal Closure) after its result and then
    // exits: a server's close counters see clean closes, not resets. The server's figures were
    // read before (`server_end`), so the closes are outside the measured window. A generator
    // still running after CLOSE_GRACE is killed.
    let grace = tokio::time::Instant::now() + CLOSE_GRACE;
    for p in procs.iter_mut() {
        if p.result.is_none()
            || tokio::time::timeout_at(grace, p.child.wait())
                .await
                .is_err()
        {
            let _ = p.child.start_kill();
        }
        let _ = p.child.wait().await;
    }
    let results: Vec<&WorkerResult> = procs.iter().filter_map(|p| p.result.as_ref()).collect();
    if results.is_empty() && incomplete.is_none() {
        incomplete = Some("no generator process reported a result".into());
    }

    let Merged {
        hist,
        service,
        sent,
        received,
        mut errors,
        disconnects,
        lost,
        close_codes,
        gen_cpu,
        gen_rss,
        elapsed,
        last_echo,
        rounds,
        first_error,
    } = merge(&results, o.rounds, first_error);
    if scenario != Scenario::Storm && connected < o.conns {
        errors += (o.conns - connected) as u64;
    }
    let wall = o.secs.max(0.001);
    let run_wall = if scenario == Scenario::Storm {
        last_echo.max(0.001)
    } else {
        elapsed.max(wall)
    };
    let (server0, noise0) = match server0.await {
        Ok((s, n)) => (s, Some(n)),
        Err(_) => (None, None),
    };
    let disturbance = match (noise0, noise_end) {
        (Some(a), Some(b)) => Some(disturbance_of(o, target, &a, &b)),
        _ => None,
    };
    let server = match (server0, server_end) {
        (Some(((c0, _), from)), Some(((c1, rss1), to))) => {
            let secs = to.duration_since(from).as_secs_f64().max(0.001);
            let per_conn = match (rss_before, rss_after_connect) {
                (Some(b), Some(a)) if connected > 0 => {
                    Some((a as f64 - b as f64) / connected as f64)
                }
                _ => None,
            };
            Some(ProcFigures {
                // A tree's figure can step back (see `server::sample_tree`): never negative.
                cpu_secs: (c1 - c0).max(0.0),
                cpu_pct: (c1 - c0).max(0.0) / secs * 100.0,
                rss_before_bytes: rss_before,
                rss_after_bytes: rss_after_connect.or(Some(rss1)),
                rss_per_conn_bytes: if scenario == Scenario::Idle {
                    per_conn
                } else {
                    None
                },
                peak_rss_bytes: None,
            })
        }
        _ => None,
    };
    let timeline = timeline(&procs);
    let echo_like = matches!(scenario, Scenario::EchoRate | Scenario::Deflate);
    let mut round_hist = worker::histogram();
    for (n, last) in &rounds {
        if *n > 0 {
            let _ = round_hist.record((*last).max(1));
        }
    }
    Ok(ScenarioReport {
        scenario,
        conns_requested: o.conns,
        conns_connected: if scenario == Scenario::Storm {
            hist.len() as usize
        } else {
            connected
        },
        workers,
        sources: o.sources.len().max(1),
        secs: if scenario == Scenario::Storm {
            run_wall
        } else {
            o.secs
        },
        warmup_secs: warmup,
        payload_bytes: o.size,
        offered_rate: echo_like.then_some(o.rate * o.conns as f64),
        inflight: (scenario == Scenario::EchoSat).then_some(o.inflight),
        sent,
        received,
        achieved_rate: received as f64
            / run_wall.min(if scenario == Scenario::Storm {
                f64::MAX
            } else {
                wall
            }),
        errors,
        disconnects,
        lost,
        close_codes,
        latency_ms: latency(&hist),
        service_latency_ms: echo_like.then(|| latency(&service)),
        arrivals: echo_like
            .then(|| {
                let each: Vec<_> = results.iter().filter_map(|r| r.arrivals.as_ref()).collect();
                arrivals::ArrivalStats::merge(&each)
            })
            .flatten()
            .map(|a| a.summary("even", crate::host::timer::RESOLUTION_US)),
        server_cpu_us_per_msg: match &server {
            Some(s) if echo_like && received > 0 => Some(1e6 * s.cpu_secs / received as f64),
            _ => None,
        },
        echoes_per_server_cpu_sec: match (&server, scenario) {
            (Some(s), Scenario::EchoSat) if s.cpu_secs > 0.0 => Some(received as f64 / s.cpu_secs),
            _ => None,
        },
        server,
        generator: ProcFigures {
            cpu_secs: gen_cpu,
            cpu_pct: gen_cpu / run_wall * 100.0,
            peak_rss_bytes: gen_rss,
            ..ProcFigures::default()
        },
        kernel: kernel_memory(kernel_before, kernel_during),
        kernel_drops: drops,
        storm_secs: (scenario == Scenario::Storm).then_some(last_echo),
        connects_per_sec: (scenario == Scenario::Storm && last_echo > 0.0)
            .then(|| hist.len() as f64 / last_echo),
        broadcast_last_ms: (scenario == Scenario::Broadcast).then(|| latency(&round_hist)),
        broadcast_rounds: (scenario == Scenario::Broadcast).then_some(o.rounds),
        timeline,
        disturbance,
        attempts: Vec::new(),
        incomplete,
        first_error,
    })
}

/// How disturbed the window between `a` and `b` was: this process, the servers measured by pid
/// and everything below them are the run's own; every other process's CPU is noise.
fn disturbance_of(
    o: &Options,
    target: &Target,
    a: &noise::Sample,
    b: &noise::Sample,
) -> noise::Disturbance {
    let roots: Vec<u32> = [
        Some(std::process::id()),
        o.server_pid,
        o.broadcast_server_pid,
    ]
    .into_iter()
    .flatten()
    .collect();
    // A server on another host does not share this one's CPU with anything here.
    let server_known = o.server_pid.is_some() || !target.addr.ip().is_loopback();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    noise::between(
        a,
        b,
        &noise::Ours {
            roots: &roots,
            server_known,
        },
        cores,
        crate::host::process::ticks_per_second(),
    )
}

pub fn target_url(t: &Target) -> String {
    format!("ws://{}{}", t.host, t.path)
}

/// Start the generator processes, each with its share of the connections.
fn spawn_workers(o: &Options, scenario: Scenario, target: &Target) -> Result<Vec<WorkerProc>> {
    let exe =
        std::env::current_exe().context("cannot find this program to start generator processes")?;
    let spread = if scenario == Scenario::Broadcast {
        o.subscribe_targets.len()
    } else {
        0
    };
    let workers = o.workers.max(spread).max(1).min(o.conns.max(1));
    let mut procs = Vec::new();
    let mut assigned = 0;
    for w in 0..workers {
        let n = o.conns / workers + usize::from(w < o.conns % workers);
        let spec = WorkerSpec {
            scenario,
            target: if spread > 0 {
                o.subscribe_targets[w % spread].clone()
            } else {
                target.clone()
            },
            conns: n,
            sources: o.sources.clone(),
            source_offset: assigned,
            rate: o.rate,
            size: o.size,
            // A storm is measured by how long it takes: --secs bounds it only from below, or
            // 100k clients on 2 cores were cut off at 5 s with a third still connecting.
            secs: if scenario == Scenario::Storm {
                storm_budget_secs(o.conns, o.secs)
            } else {
                o.secs
            },
            warmup: o.warmup_for(scenario),
            inflight: o.inflight,
            // The broadcast publisher sends binary stamps, so its subscribers stay plain.
            deflate: scenario == Scenario::Deflate
                || (o.deflate && scenario != Scenario::Broadcast),
            ramp_per_sec: o.ramp_per_sec / workers as f64,
            rounds: o.rounds,
            storm_concurrency: (o.storm_concurrency / workers).max(1),
            // The broadcast scenario's stamps must come back as sent.
            request: o
                .request
                .clone()
                .filter(|_| scenario != Scenario::Broadcast),
            phase_slot: w,
            phase_stride: workers,
            phase_total: o.conns,
        };
        assigned += n;
        let mut cmd = tokio::process::Command::new(&exe);
        // A generator of a self-test killed outright must not go on loading the server.
        cmd.arg("selftest-worker")
            .arg(serde_json::to_string(&spec)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = crate::serve::supervisor::spawn_dying_with_this_process(cmd)
            .with_context(|| format!("cannot start a generator process ({})", exe.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take().expect("piped stdin");
        procs.push(WorkerProc {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
            stdin,
            ticks: Vec::new(),
            result: None,
            garbled: None,
        });
    }

    Ok(procs)
}

/// Wait for every worker's "ready" (bounded). Returns the connections opened and the first
/// error a worker met; an error when nothing connected (except for storm, which connects later).
async fn connect_phase(
    procs: &mut [WorkerProc],
    o: &Options,
    scenario: Scenario,
    target: &Target,
) -> Result<(usize, Option<String>)> {
    let pb = progress_bar(o.conns as u64, "connect");
    let connect_budget = Duration::from_secs(30 + (o.conns / 2000) as u64)
        + Duration::from_secs_f64(if o.ramp_per_sec > 0.0 {
            o.conns as f64 / o.ramp_per_sec
        } else {
            0.0
        });
    let deadline = tokio::time::Instant::now() + connect_budget;
    let mut connected = 0;
    let mut first_error: Option<String> = None;
    let mut done_counts = vec![0usize; procs.len()];
    let procs_len = procs.len();
    for (i, p) in procs.iter_mut().enumerate() {
        loop {
            let line = match tokio::time::timeout_at(deadline, p.lines.next_line()).await {
                Ok(Ok(Some(l))) => l,
                Ok(Ok(None)) => {
                    bail!(
                        "{}",
                        ended_early(p, i, procs_len, "before its connections were open").await
                    )
                }
                Ok(Err(e)) => bail!("cannot read generator process {i}'s output: {e}"),
                Err(_) => bail!(
                    "connections were still opening after {} s: {} of {} handshakes done, {} \
                     generator process(es) of {} ready, first error so far: {}; is the server \
                     accepting? (fewer --conns or a slower --ramp may help)",
                    connect_budget.as_secs(),
                    done_counts.iter().sum::<usize>(),
                    o.conns,
                    i,
                    procs_len,
                    first_error.as_deref().unwrap_or("none reported")
                ),
            };
            match serde_json::from_str::<Event>(&line) {
                Err(e) => p.garbled = Some(garbled(&line, &e)),
                Ok(Event::Connecting { done }) => {
                    done_counts[i] = done;
                    pb.set_position(done_counts.iter().sum::<usize>() as u64);
                }
                Ok(Event::Ready {
                    connected: c,
                    first_error: e,
                    ..
                }) => {
                    connected += c;
                    if first_error.is_none() {
                        first_error = e;
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    pb.finish_and_clear();
    if scenario != Scenario::Storm && connected == 0 {
        bail!(
            "no connection to {} could be opened: {}",
            target_url(target),
            first_error.unwrap_or_else(|| "unknown reason".into())
        );
    }
    Ok((connected, first_error))
}

/// The broadcast publisher: the orchestrator's own connection, one message per round.
async fn start_publisher(o: &Options, target: &Target) -> Result<tokio::task::JoinHandle<()>> {
    let mut c = client::connect(target, None, false).await.map_err(|e| {
        anyhow::anyhow!(
            "the publisher cannot connect to {}: {e}",
            target_url(target)
        )
    })?;
    let rounds = o.rounds;
    let gap = Duration::from_secs_f64((o.secs / (rounds as f64 + 1.0)).max(0.05));
    let size = o.size;
    Ok(tokio::spawn(async move {
        // Drain what the server sends back to the publisher itself.
        let mut reader = c.reader;
        let drain = tokio::spawn(async move {
            while let Ok(x) = reader.next().await {
                if matches!(x, client::Incoming::Closed(_)) {
                    break;
                }
            }
        });
        for r in 0..rounds {
            tokio::time::sleep(gap).await;
            let p = worker::broadcast_payload(r, size);
            if c.writer
                .send(embedded_server::frame::OpCode::Binary, &p)
                .await
                .is_err()
            {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = c.writer.close().await;
        drain.abort();
    }))
}

/// Follow the workers' ticks and collect their results (bounded: the run plus a drain).
/// Returns why the run stopped short, if it did, and the server's CPU and RSS at the first
/// result.
/// How long the generators may take to close their connections after their results.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

async fn run_phase(
    procs: &mut [WorkerProc],
    o: &Options,
    scenario: Scenario,
    warmup: f64,
    t0: Instant,
) -> (
    Option<String>,
    Option<((f64, u64), Instant)>,
    Option<noise::Sample>,
) {
    let pb = progress_bar(o.secs.ceil() as u64, scenario.name());
    let run_deadline = tokio::time::Instant::now()
        + Duration::from_secs_f64(if scenario == Scenario::Storm {
            storm_budget_secs(o.conns, o.secs)
        } else {
            o.secs + warmup
        })
        + Duration::from_secs(if scenario == Scenario::Storm { 60 } else { 15 })
        // Then every connection closes before its generator reports: at a million idle
        // connections on 2 cores the close handshakes outlasted a fixed 15 s.
        + Duration::from_secs_f64(o.conns as f64 / CLOSES_PER_SEC)
        // Broadcast subscribers wait one round gap past the window for the last round.
        + Duration::from_secs_f64(if scenario == Scenario::Broadcast {
            o.secs / (o.rounds as f64 + 1.0)
        } else {
            0.0
        });
    let mut incomplete: Option<String> = None;
    let mut server_end = None;
    let mut noise_end = None;
    // Scenarios measured over a fixed window read the server when the window ends, before the
    // generator closes its connections: at 100k the close handshakes cost the server more CPU
    // than a minute of idling, and counting them made "idle" look busy (27 % instead of under
    // 1 %). Storm and broadcast are measured until their work is done (the first result).
    let window_end = (!matches!(scenario, Scenario::Storm | Scenario::Broadcast)).then(|| {
        let o = o.clone();
        let at = t0 + Duration::from_secs_f64(warmup + o.secs);
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            (
                server_sample(&o, scenario).map(|s| (s, Instant::now())),
                noise::sample(),
            )
        })
    });
    {
        let n = procs.len();
        let mut pending: Vec<usize> = (0..n).collect();
        while !pending.is_empty() {
            let mut next = Vec::new();
            for &i in &pending {
                let p = &mut procs[i];
                let line = match tokio::time::timeout_at(run_deadline, p.lines.next_line()).await {
                    Ok(Ok(Some(l))) => l,
                    Ok(Ok(None)) => {
                        let why = ended_early(p, i, n, "without a result").await;
                        incomplete.get_or_insert(why);
                        continue;
                    }
                    Ok(Err(e)) => {
                        incomplete.get_or_insert(format!(
                            "cannot read generator process {i}'s output: {e}"
                        ));
                        continue;
                    }
                    Err(_) => {
                        incomplete.get_or_insert(
                            "the run did not finish in time; the figures cover what arrived".into(),
                        );
                        continue;
                    }
                };
                match serde_json::from_str::<Event>(&line) {
                    Ok(Event::Tick { sent, received }) => {
                        p.ticks.push((sent, received));
                        next.push(i);
                    }
                    Ok(Event::Done(r)) => {
                        if noise_end.is_none() {
                            server_end = server_sample(o, scenario).map(|s| (s, Instant::now()));
                            noise_end = Some(noise::sample());
                        }
                        p.result = Some(*r);
                    }
                    Err(e) => {
                        p.garbled = Some(garbled(&line, &e));
                        next.push(i);
                    }
                    _ => next.push(i),
                }
            }
            pending = next;
            let secs_done = (t0.elapsed().as_secs_f64() - warmup).clamp(0.0, o.secs.ceil()) as u64;
            pb.set_position(secs_done);
            let (s, r) = procs
                .iter()
                .filter_map(|p| p.ticks.last())
                .fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1));
            pb.set_message(format!("sent {s}, received {r}"));
        }
    }
    pb.finish_and_clear();
    if let Some(h) = window_end.as_ref().filter(|_| incomplete.is_some()) {
        // The load stopped early: no window to wait out (a --secs 3600 run would idle here).
        h.abort();
    }
    if let Some(Ok((at_end, n))) = match window_end {
        Some(h) => Some(h.await),
        None => None,
    } {
        if at_end.is_some() {
            server_end = at_end;
        }
        noise_end = Some(n);
    }
    (incomplete, server_end, noise_end)
}

/// The workers' results added up.
struct Merged {
    hist: Histogram<u64>,
    service: Histogram<u64>,
    sent: u64,
    received: u64,
    errors: u64,
    disconnects: u64,
    lost: u64,
    close_codes: BTreeMap<u16, u64>,
    gen_cpu: f64,
    gen_rss: Option<u64>,
    elapsed: f64,
    last_echo: f64,
    /// Broadcast: per round, (deliveries, latest delivery in us).
    rounds: Vec<(u64, u64)>,
    first_error: Option<String>,
}

fn merge(results: &[&WorkerResult], n_rounds: usize, mut first_error: Option<String>) -> Merged {
    let mut hist = worker::histogram();
    let mut service = worker::histogram();
    let (mut sent, mut received, mut errors, mut disconnects, mut lost) = (0, 0, 0, 0, 0);
    let mut close_codes = BTreeMap::new();
    let mut gen_cpu = 0.0;
    let mut gen_rss: Option<u64> = None;
    let mut elapsed: f64 = 0.0;
    let mut last_echo: f64 = 0.0;
    let mut rounds = vec![(0u64, 0u64); n_rounds];
    use base64::Engine;
    for r in results {
        sent += r.sent;
        received += r.received;
        errors += r.errors;
        disconnects += r.disconnects;
        lost += r.lost;
        for (k, v) in &r.close_codes {
            *close_codes.entry(*k).or_insert(0) += v;
        }
        gen_cpu += r.cpu_secs;
        if let Some(b) = r.peak_rss_bytes {
            gen_rss = Some(gen_rss.unwrap_or(0) + b);
        }
        elapsed = elapsed.max(r.elapsed_secs);
        last_echo = last_echo.max(r.last_echo_secs);
        if first_error.is_none() {
            first_error = r.first_error.clone();
        }
        if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&r.histogram) {
            if let Ok(h) = hdrhistogram::serialization::Deserializer::new()
                .deserialize::<u64, _>(&mut &bytes[..])
            {
                let _ = hist.add(h);
            }
        }
        if let Some(Ok(bytes)) = r
            .service_histogram
            .as_ref()
            .map(|s| base64::engine::general_purpose::STANDARD.decode(s))
        {
            if let Ok(h) = hdrhistogram::serialization::Deserializer::new()
                .deserialize::<u64, _>(&mut &bytes[..])
            {
                let _ = service.add(h);
            }
        }
        for (i, (n, last)) in r.rounds.iter().enumerate() {
            if let Some(slot) = rounds.get_mut(i) {
                slot.0 += n;
                slot.1 = slot.1.max(*last);
            }
        }
    }
    Merged {
        hist,
        service,
        sent,
        received,
        errors,
        disconnects,
        lost,
        close_codes,
        gen_cpu,
        gen_rss,
        elapsed,
        last_echo,
        rounds,
        first_error,
    }
}

/// The workers' cumulative counts summed per second, then differenced.
fn timeline(procs: &[WorkerProc]) -> Vec<TimelinePoint> {
    let n_ticks = procs.iter().map(|p| p.ticks.len()).max().unwrap_or(0);
    let mut timeline = Vec::new();
    let mut prev = (0u64, 0u64);
    for t in 0..n_ticks {
        let cum = procs.iter().fold((0u64, 0u64), |a, p| {
            let x = p.ticks.get(t).or(p.ticks.last()).copied().unwrap_or((0, 0));
            (a.0 + x.0, a.1 + x.1)
        });
        timeline.push(TimelinePoint {
            t: t as u32 + 1,
            sent_per_sec: cum.0.saturating_sub(prev.0),
            received_per_sec: cum.1.saturating_sub(prev.1),
        });
        prev = cum;
    }
    timeline
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_drops_name_the_accept_queue_and_tcp_memory_only_when_they_grew() {
        let quiet = super::kernel_drops(Some([5, 7, 1, 0]), Some([5, 7, 1, 0])).unwrap();
        assert_eq!(quiet.bound, None);
        let full = super::kernel_drops(Some([5, 7, 1, 0]), Some([105, 120, 3, 4])).unwrap();
        assert_eq!(
            (
                full.listen_overflows,
                full.listen_drops,
                full.memory_pressures,
                full.aborts_on_memory
            ),
            (100, 113, 2, 4)
        );
        let b = full.bound.unwrap();
        assert!(
            b.contains("accept queues overflowed: 113") && b.contains("somaxconn"),
            "{b}"
        );
        assert!(
            b.contains("TCP memory ran short") && b.contains("tcp_mem"),
            "{b}"
        );
        // A counter that went back (a namespace's counters reset) is no growth, not a wrap.
        let back = super::kernel_drops(Some([9, 9, 9, 9]), Some([1, 1, 1, 1])).unwrap();
        assert_eq!(back.bound, None);
    }

    use super::*;

    #[test]
    fn deflate_warms_up_until_every_connection_has_built_its_contexts() {
        // 100k profile: 0.1 msg/s each. Echo-rate's 5 s cap stays; deflate waits a whole
        // period (every connection's first message) and a second.
        assert_eq!(default_warmup(Scenario::EchoRate, 0.1), 5.0);
        assert_eq!(default_warmup(Scenario::Deflate, 0.1), 11.0);
        // Fast rates: the 1 s floor; a very slow rate: capped, the run stays bounded.
        assert_eq!(default_warmup(Scenario::EchoRate, 10.0), 1.0);
        assert_eq!(default_warmup(Scenario::Deflate, 10.0), 1.1);
        assert_eq!(default_warmup(Scenario::Deflate, 0.001), 15.0);
        assert_eq!(default_warmup(Scenario::EchoSat, 0.1), 1.0);
    }

    #[test]
    fn sockstat_and_slab_are_read() {
        let k = parse_kernel_sample(
            "sockets: used 1234\nTCP: inuse 200 orphan 0 tw 3 alloc 210 mem 57\nUDP: inuse 2 mem 1\n",
            "MemTotal:       24000000 kB\nSlab:             512000 kB\n",
        );
        assert_eq!(
            k,
            KernelSample {
                sockets_used: 1234,
                tcp_inuse: 200,
                tcp_mem_pages: 57,
                slab_bytes: 512_000 * 1024
            }
        );
        let mut during = k;
        during.tcp_inuse += 100;
        during.slab_bytes += 400 * 1024;
        let m = kernel_memory(Some(k), Some(during)).unwrap();
        assert_eq!(m.slab_bytes_per_socket, Some(4096.0));
    }
}
