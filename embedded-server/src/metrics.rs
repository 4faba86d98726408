//! Counters the server keeps (relaxed atomics on the hot path) and their Prometheus text.

use crate::budget::Store;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Why an upgrade was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Malformed or not an upgrade.
    BadRequest,
    /// Not WebSocket version 13.
    Version,
    /// Origin not allowed.
    Origin,
    /// No request within the handshake timeout.
    Timeout,
    /// Request header too large.
    TooLarge,
    /// At max_connections.
    Full,
    /// Shutting down.
    Shutdown,
    /// The application's `Handler::on_upgrade` refused it.
    Handler,
    /// Abuse limits (abuse/): the per-address connection cap (503).
    IpConnectionCap,
    /// The per-address new-connection rate (429).
    IpRateLimit,
    /// The server-wide new-connection rate (429).
    GlobalRateLimit,
    /// A PROXY protocol header from a peer not in the trusted list (400).
    ProxyUntrusted,
    /// A malformed PROXY protocol header from a trusted peer (400).
    ProxyHeader,
    /// A trusted proxy's X-Forwarded-For whose client hop is not an address (400).
    ForwardedFor,
    /// Accept gate (accept/gate.rs): too many connections still in their handshake.
    PendingHandshakes,
    /// Accept gate: the process is within the descriptor reserve of its limit.
    FdReserve,
    /// Accept gate: every pending-handshake place was taken, and this connection, the oldest
    /// one still silent (no complete request), was closed to make room for a newer one.
    PendingEvicted,
}

/// The reasons `ws_handshakes_rejected_total` counts (one per [`Reject`]).
const REJECTS: usize = 17;

const REJECT_NAMES: [&str; REJECTS] = [
    "bad_request",
    "version",
    "origin",
    "timeout",
    "header_too_large",
    "max_connections",
    "shutting_down",
    "handler",
    "ip_connection_cap",
    "ip_rate_limit",
    "global_rate_limit",
    "proxy_untrusted",
    "proxy_header",
    "forwarded_for",
    "pending_handshakes",
    "fd_reserve",
    "pending_evicted",
];
/// Close codes counted individually (1005: a close without a code); others land in "other".
const CLOSE_CODES: [u16; 12] = [
    1000, 1001, 1002, 1003, 1005, 1007, 1008, 1009, 1010, 1011, 1012, 1013,
];

/// Upper bounds (seconds) of the handler-time histograms: 100 us to 10 s.
pub const HANDLER_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A Prometheus histogram with fixed buckets, lock-free.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Cumulative counts are made at render time; these are per bucket (+Inf last).
    buckets: [AtomicU64; 17],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// Count one observation.
    pub fn observe(&self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        let i = HANDLER_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(HANDLER_BUCKETS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(d.as_nanos() as u64, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// (sum in seconds, count).
    pub fn totals(&self) -> (f64, u64) {
        (
            self.sum_ns.load(Relaxed) as f64 / 1e9,
            self.count.load(Relaxed),
        )
    }

    fn render(&self, o: &mut String, name: &str, help: &str) {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, b) in HANDLER_BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Relaxed);
            let _ = writeln!(o, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        cum += self.buckets[HANDLER_BUCKETS.len()].load(Relaxed);
        let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {cum}");
        let (sum, count) = self.totals();
        let _ = writeln!(o, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// The server's counters (relaxed atomics), rendered as Prometheus text by `render`.
#[derive(Debug)]
pub struct Metrics {
    /// Open connections.
    pub connections: AtomicI64,
    /// Upgrades accepted.
    pub accepted: AtomicU64,
    rejected: [AtomicU64; REJECTS],
    /// Data messages received.
    pub messages_in: AtomicU64,
    /// Data messages sent (a broadcast counts once per recipient).
    pub messages_out: AtomicU64,
    /// Payload bytes received.
    pub bytes_in: AtomicU64,
    /// Bytes written to sockets.
    pub bytes_out: AtomicU64,
    /// Close codes the server sent, by code.
    closes_sent: [AtomicU64; 13],
    /// Close codes peers sent.
    closes_received: [AtomicU64; 13],
    /// Consumers closed for exceeding their send-queue cap.
    pub backpressure_closes: AtomicU64,
    /// Connections closed for silence past the heartbeat timeout.
    pub heartbeat_timeouts: AtomicU64,
    /// Heartbeat pings sent.
    pub pings_sent: AtomicU64,
    /// Jobs queued on the offload pool, not yet started.
    pub offload_queue_depth: AtomicI64,
    /// Jobs the offload pool has run.
    pub offload_jobs: AtomicU64,
    /// Microseconds the offload pool spent running handlers.
    pub offload_busy_us: AtomicU64,
    /// Threads in the offload pool (0: handlers run inline).
    pub offload_threads: AtomicU64,
    /// Per handled message: wall time of the handler, and its on-CPU time (thread CPU clock).
    /// Wall minus CPU is the time it blocked: the ratio `wstune pool` sizes the pool from.
    pub handler_wall: Histogram,
    /// Per job: on-CPU time (thread clock).
    pub handler_cpu: Histogram,
    /// Time the handler's thread waited for a core (Linux schedstat); empty where unknown.
    pub handler_runqueue: Histogram,
    /// Cluster backplane: 1 connected, 0 down (reconnecting), absent when not configured
    /// (-1 is stored then; see `backplane_state`).
    pub backplane_up: AtomicI64,
    /// Messages published to the backplane.
    pub backplane_published: AtomicU64,
    /// Messages received from the backplane.
    pub backplane_received: AtomicU64,
    /// Messages not relayed because the backplane was down or its queue full (delivered
    /// locally only).
    pub backplane_dropped: AtomicU64,
    /// Nodes of the cluster heard from within the presence expiry, this one included (0
    /// until the backplane first connects).
    pub backplane_nodes: AtomicI64,
    /// Broadcasts made (each counts once).
    pub broadcasts: AtomicU64,
    /// Memory held by live permessage-deflate contexts (zlib's formula, see memory.rs). An
    /// `Arc` so a thread's shared no-context contexts can give their charge back when the
    /// thread ends (`deflate::charge_thread`).
    pub deflate_memory_bytes: std::sync::Arc<AtomicI64>,
    /// Capacity of inflate output buffers held now, server-wide, charged against
    /// `ServerConfig::inflate_budget`.
    pub inflate_buffer_bytes: AtomicU64,
    /// The inflate budget in bytes (exported beside the gauge).
    pub inflate_budget_bytes: AtomicU64,
    /// Compressed messages refused (1013) because the inflate budget was spent.
    pub inflate_budget_closes: AtomicU64,
    /// Connections closed for going over their message rate (abuse/).
    pub message_rate_closes: AtomicU64,
    /// The server-wide memory budget and what is charged to it (budget.rs).
    pub memory: crate::budget::Budget,
    /// Connections closed because a message or frame did not arrive whole within the message
    /// timeout.
    pub message_timeouts: AtomicU64,
    /// Connections closed because their queue stayed above the cap past the drain timeout.
    pub drain_timeouts: AtomicU64,
    /// Compressed messages refused for inflating past the ratio limit.
    pub inflate_ratio_closes: AtomicU64,
    /// Times a connection's reading paused because it passed its inflate rate.
    pub inflate_rate_pauses: AtomicU64,
    /// Messages that went out uncompressed because deflate would have made them larger.
    pub deflate_skipped: AtomicU64,

    // Handshakes that did not finish, and the accept loop's errors (accept/).
    /// Handshakes abandoned during TLS: a failed TLS handshake, or a peer that timed out or
    /// left before it finished.
    pub aborted_tls: AtomicU64,
    /// Upgrade requests that timed out, were malformed or too large, or whose peer left
    /// before sending one whole.
    pub aborted_http: AtomicU64,
    /// Accept calls that failed (out of descriptors, most often); each is followed by a
    /// short back-off instead of an immediate retry.
    pub accept_errors: AtomicU64,

    // Channel publishes (hub/): recipients a publish could not be queued for.
    /// Subscribers a publish found but could not queue the message for: closed by
    /// backpressure (over the send-queue cap), closing, or gone.
    pub publish_dropped: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            connections: AtomicI64::new(0),
            accepted: AtomicU64::new(0),
            rejected: Default::default(),
            messages_in: AtomicU64::new(0),
            messages_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            closes_sent: Default::default(),
            closes_received: Default::default(),
            backpressure_closes: AtomicU64::new(0),
            heartbeat_timeouts: AtomicU64::new(0),
            pings_sent: AtomicU64::new(0),
            offload_queue_depth: AtomicI64::new(0),
            offload_jobs: AtomicU64::new(0),
            offload_busy_us: AtomicU64::new(0),
            offload_threads: AtomicU64::new(0),
            handler_wall: Histogram::default(),
            handler_cpu: Histogram::default(),
            handler_runqueue: Histogram::default(),
            backplane_up: AtomicI64::new(-1),
            backplane_published: AtomicU64::new(0),
            backplane_received: AtomicU64::new(0),
            backplane_dropped: AtomicU64::new(0),
            backplane_nodes: AtomicI64::new(0),
            broadcasts: AtomicU64::new(0),
            deflate_memory_bytes: std::sync::Arc::new(AtomicI64::new(0)),
            inflate_buffer_bytes: AtomicU64::new(0),
            inflate_budget_bytes: AtomicU64::new(0),
            inflate_budget_closes: AtomicU64::new(0),
            message_rate_closes: AtomicU64::new(0),
            memory: Default::default(),
            message_timeouts: AtomicU64::new(0),
            drain_timeouts: AtomicU64::new(0),
            inflate_ratio_closes: AtomicU64::new(0),
            inflate_rate_pauses: AtomicU64::new(0),
            deflate_skipped: AtomicU64::new(0),
            aborted_tls: AtomicU64::new(0),
            aborted_http: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            publish_dropped: AtomicU64::new(0),
        }
    }
}

fn slot(code: u16) -> usize {
    CLOSE_CODES
        .iter()
        .position(|c| *c == code)
        .unwrap_or(CLOSE_CODES.len())
}

impl Metrics {
    /// Count a refused upgrade.
    pub fn reject(&self, r: Reject) {
        self.rejected[r as usize].fetch_add(1, Relaxed);
    }
    /// Refused upgrades for this reason.
    pub fn rejected(&self, r: Reject) -> u64 {
        self.rejected[r as usize].load(Relaxed)
    }
    /// Count a close frame sent.
    pub fn close_sent(&self, code: u16) {
        self.closes_sent[slot(code)].fetch_add(1, Relaxed);
    }
    /// Count a close frame received.
    pub fn close_received(&self, code: u16) {
        self.closes_received[slot(code)].fetch_add(1, Relaxed);
    }
    /// Close frames sent with this code.
    pub fn closes_sent(&self, code: u16) -> u64 {
        self.closes_sent[slot(code)].load(Relaxed)
    }

    /// Prometheus text exposition. `workers` is per-I/O-worker busy time in seconds; `extra`
    /// are gauges the caller adds (name, help, value), exposed after the server's own.
    pub fn render(&self, workers: &[f64], extra: &[(&str, &str, f64)]) -> String {
        let mut o = String::new();
        let s = Sample {
            m: self,
            co: crate::coalesce::stats(),
        };
        plain(&mut o, &s, PLAIN);
        // Only a cluster node has a backplane: -1 says there is none.
        if self.backplane_up.load(Relaxed) >= 0 {
            plain(&mut o, &s, BACKPLANE);
        }
        plain(&mut o, &s, &[OFFLOAD_THREADS]);
        for (name, help, v) in extra {
            series(&mut o, name, help, "gauge", *v);
        }
        self.render_handler_times(&mut o);
        self.render_handshakes(&mut o);
        self.render_closes(&mut o);
        self.render_budget_stores(&mut o);
        let _ = writeln!(o, "# HELP ws_worker_busy_seconds_total Time each I/O worker spent running tasks.\n# TYPE ws_worker_busy_seconds_total counter");
        for (i, s) in workers.iter().enumerate() {
            let _ = writeln!(o, "ws_worker_busy_seconds_total{{worker=\"{i}\"}} {s}");
        }
        o
    }

    /// The offloaded handlers' wall, CPU and (where schedstat reports it) run-queue times.
    fn render_handler_times(&self, o: &mut String) {
        self.handler_wall.render(
            o,
            "ws_handler_wall_seconds",
            "Wall time of the handler per offloaded message.",
        );
        self.handler_cpu.render(
            o,
            "ws_handler_cpu_seconds",
            "On-CPU time of the handler per offloaded message (thread CPU clock).",
        );
        if self.handler_runqueue.totals().1 > 0 {
            self.handler_runqueue.render(
                o,
                "ws_handler_runqueue_seconds",
                "Time the handler's thread was runnable but waiting for a core, per offloaded \
                 message (schedstat): part of the wall time that is not blocking.",
            );
        }
    }

    /// Handshakes that did not finish (accept/), by stage, and upgrades refused, by reason.
    fn render_handshakes(&self, o: &mut String) {
        let _ = writeln!(o, "# HELP ws_handshakes_aborted_total Handshakes that did not finish, by stage: tls (failed or abandoned TLS handshake), http (upgrade request timed out, malformed, too large or cut off).\n# TYPE ws_handshakes_aborted_total counter");
        for (stage, v) in [("tls", &self.aborted_tls), ("http", &self.aborted_http)] {
            let _ = writeln!(
                o,
                "ws_handshakes_aborted_total{{stage=\"{stage}\"}} {}",
                v.load(Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP ws_handshakes_rejected_total Upgrades refused, by reason.\n# TYPE ws_handshakes_rejected_total counter");
        for (i, n) in REJECT_NAMES.iter().enumerate() {
            let _ = writeln!(
                o,
                "ws_handshakes_rejected_total{{reason=\"{n}\"}} {}",
                self.rejected[i].load(Relaxed)
            );
        }
    }

    /// Close frames sent and received, by code.
    fn render_closes(&self, o: &mut String) {
        for (name, arr, help) in [
            (
                "ws_closes_sent_total",
                &self.closes_sent,
                "Close frames sent, by code.",
            ),
            (
                "ws_closes_received_total",
                &self.closes_received,
                "Close frames received, by code (1005: none given).",
            ),
        ] {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
            for (i, v) in arr.iter().enumerate() {
                let label = CLOSE_CODES
                    .get(i)
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "other".into());
                let _ = writeln!(o, "{name}{{code=\"{label}\"}} {}", v.load(Relaxed));
            }
        }
    }

    /// The memory budget by store: what each holds now, and the charges it refused.
    fn render_budget_stores(&self, o: &mut String) {
        let budget = &self.memory;
        let _ = writeln!(
            o,
            "# HELP ws_memory_budget_store_bytes Bytes charged to the memory budget now, by store.\n# TYPE ws_memory_budget_store_bytes gauge"
        );
        for (store, bytes, _) in budget.stores() {
            let _ = writeln!(
                o,
                "ws_memory_budget_store_bytes{{store=\"{}\"}} {bytes}",
                store.name()
            );
        }
        let _ = writeln!(
            o,
            "# HELP ws_memory_budget_closes_total Charges to this store refused because they would pass the memory budget: each closed its connection with 1013 (for subscriptions: refused the subscribe with an error op; for an HTTP API body, counted under input: answered 503).\n# TYPE ws_memory_budget_closes_total counter"
        );
        for (store, _, refused) in budget.stores() {
            let _ = writeln!(
                o,
                "ws_memory_budget_closes_total{{store=\"{}\"}} {refused}",
                store.name()
            );
        }
    }
}

/// What one exposition reads: the server's counters, and the process's coalescing figures
/// taken once so the four series that show them agree.
struct Sample<'a> {
    /// The server's counters.
    m: &'a Metrics,
    /// This process's coalescing figures (coalesce.rs).
    co: crate::coalesce::Stats,
}

/// One unlabelled series: its name, HELP text, TYPE, and its value in a sample.
type Plain = (&'static str, &'static str, &'static str, fn(&Sample) -> f64);

/// Write one unlabelled series with its HELP and TYPE lines.
fn series(o: &mut String, name: &str, help: &str, kind: &str, v: f64) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
}

/// Write every series of `table`, in its order.
fn plain(o: &mut String, s: &Sample, table: &[Plain]) {
    for (name, help, kind, value) in table {
        series(o, name, help, kind, value(s));
    }
}

/// The unlabelled series every server exposes, in the exposition's order: traffic, the
/// offload pool, coalescing, deflate and the inflate budget, the memory budget, the
/// per-connection deadlines, the accept gate and channel publishes.
#[rustfmt::skip]
const PLAIN: &[Plain] = &[
    ("ws_connections", "Open WebSocket connections.", "gauge", |s| s.m.connections.load(Relaxed) as f64),
    ("ws_handshakes_accepted_total", "Upgrades accepted.", "counter", |s| s.m.accepted.load(Relaxed) as f64),
    ("ws_messages_in_total", "Messages received.", "counter", |s| s.m.messages_in.load(Relaxed) as f64),
    ("ws_messages_out_total", "Messages sent (a broadcast counts once per recipient).", "counter", |s| s.m.messages_out.load(Relaxed) as f64),
    ("ws_bytes_in_total", "Payload bytes received.", "counter", |s| s.m.bytes_in.load(Relaxed) as f64),
    ("ws_bytes_out_total", "Bytes written to sockets.", "counter", |s| s.m.bytes_out.load(Relaxed) as f64),
    ("ws_backpressure_closes_total", "Slow consumers closed for exceeding the send-queue cap.", "counter", |s| s.m.backpressure_closes.load(Relaxed) as f64),
    ("ws_heartbeat_timeouts_total", "Connections closed for silence past the heartbeat timeout.", "counter", |s| s.m.heartbeat_timeouts.load(Relaxed) as f64),
    ("ws_pings_sent_total", "Heartbeat pings sent.", "counter", |s| s.m.pings_sent.load(Relaxed) as f64),
    ("ws_offload_queue_depth", "Jobs waiting for the offload pool: the early-warning signal.", "gauge", |s| s.m.offload_queue_depth.load(Relaxed) as f64),
    ("ws_offload_jobs_total", "Handler jobs run on the offload pool.", "counter", |s| s.m.offload_jobs.load(Relaxed) as f64),
    ("ws_offload_busy_seconds_total", "Time the offload pool spent in handlers.", "counter", |s| s.m.offload_busy_us.load(Relaxed) as f64 / 1e6),
    ("ws_coalesce_threads_waiting", "I/O threads of this process that now wait out the coalescing window before they sleep, because waiting measurably saves CPU without slowing the clients (the runtime decides for all its threads).", "gauge", |s| s.co.threads_waiting as f64),
    ("ws_coalesce_probe_cpu_ratio", "The last coalescing probe's CPU per read with waiting as a share of without it: waiting starts at 0.85 or less and is kept at 0.95 or less, while the read rate holds (0 before the first probe).", "gauge", |s| s.co.probe.map_or(0.0, |p| p.0)),
    ("ws_coalesce_probe_rate_ratio", "The last coalescing probe's read rate with waiting as a share of without it: below 0.95 the clients were waiting on the replies, and waiting is declined (0 before the first probe).", "gauge", |s| s.co.probe.map_or(0.0, |p| p.1)),
    ("ws_coalesce_waits_total", "Coalescing windows waited out by this process's I/O threads.", "counter", |s| s.co.waits as f64),
    ("ws_broadcasts_total", "Broadcast calls.", "counter", |s| s.m.broadcasts.load(Relaxed) as f64),
    ("ws_deflate_memory_bytes", "Memory held by permessage-deflate contexts (zlib's formula): per-connection ones plus each thread's shared no-context-takeover ones.", "gauge", |s| s.m.deflate_memory_bytes.load(Relaxed) as f64),
    ("ws_inflate_buffer_bytes", "Inflate output buffers held now, server-wide (charged against the inflate budget).", "gauge", |s| s.m.inflate_buffer_bytes.load(Relaxed) as f64),
    ("ws_inflate_budget_bytes", "The server-wide inflate budget (--inflate-budget).", "gauge", |s| s.m.inflate_budget_bytes.load(Relaxed) as f64),
    ("ws_inflate_budget_closes_total", "Compressed messages refused with 1013 because the inflate budget was spent.", "counter", |s| s.m.inflate_budget_closes.load(Relaxed) as f64),
    ("ws_message_rate_closes_total", "Connections closed for going over their message rate (the limits' close code).", "counter", |s| s.m.message_rate_closes.load(Relaxed) as f64),
    ("ws_memory_budget_bytes", "The server-wide memory budget for what clients cause (--memory-budget).", "gauge", |s| s.m.memory.limit() as f64),
    ("ws_memory_budget_used_bytes", "Bytes charged to the memory budget now: partial frames, reassembly, inflate output, queued output, offloaded payloads.", "gauge", |s| s.m.memory.used() as f64),
    ("ws_memory_budget_peak_bytes", "The most charged to the memory budget at once since the server started.", "gauge", |s| s.m.memory.peak() as f64),
    ("ws_memory_share_closes_total", "Connections closed with 1009 for holding more than their share of the memory budget.", "counter", |s| s.m.memory.share_closes() as f64),
    ("ws_memory_budget_reclaims_total", "Connections closed (1013, or dropped when a frame was partly sent) to give their unread send queue back when the memory budget was short.", "counter", |s| s.m.memory.reclaims() as f64),
    // The queue store of the budget is exactly what every queue holds.
    ("ws_send_queue_bytes", "Outgoing bytes queued now, over every connection.", "gauge", |s| s.m.memory.used_by(Store::Queue) as f64),
    ("ws_message_timeouts_total", "Connections closed because a message or frame did not arrive whole within the message timeout.", "counter", |s| s.m.message_timeouts.load(Relaxed) as f64),
    ("ws_drain_timeouts_total", "Connections closed because their send queue stayed above its cap past the drain timeout.", "counter", |s| s.m.drain_timeouts.load(Relaxed) as f64),
    ("ws_inflate_ratio_closes_total", "Compressed messages refused with 1009 for inflating past the ratio limit.", "counter", |s| s.m.inflate_ratio_closes.load(Relaxed) as f64),
    ("ws_inflate_rate_pauses_total", "Times a connection's reading paused for passing its inflate rate.", "counter", |s| s.m.inflate_rate_pauses.load(Relaxed) as f64),
    ("ws_deflate_skipped_total", "Messages sent uncompressed because deflate would have made them larger.", "counter", |s| s.m.deflate_skipped.load(Relaxed) as f64),
    // Accept gate (accept/gate.rs) and channel publishes (hub/).
    ("ws_accept_errors_total", "Accept calls that failed (out of descriptors, most often), each followed by a short back-off.", "counter", |s| s.m.accept_errors.load(Relaxed) as f64),
    ("ws_publish_dropped_total", "Channel publish recipients the message could not be queued for (closed by backpressure, closing or gone).", "counter", |s| s.m.publish_dropped.load(Relaxed) as f64),
];

/// A cluster node's backplane (serve/backplane in the binary).
#[rustfmt::skip]
const BACKPLANE: &[Plain] = &[
    ("ws_backplane_up", "1 while the cluster backplane is connected, 0 while it reconnects.", "gauge", |s| s.m.backplane_up.load(Relaxed) as f64),
    ("ws_backplane_published_total", "Messages relayed to other nodes.", "counter", |s| s.m.backplane_published.load(Relaxed) as f64),
    ("ws_backplane_received_total", "Messages from other nodes delivered here.", "counter", |s| s.m.backplane_received.load(Relaxed) as f64),
    ("ws_backplane_dropped_total", "Messages delivered locally only: the backplane was down or its queue full.", "counter", |s| s.m.backplane_dropped.load(Relaxed) as f64),
    ("ws_backplane_nodes", "Nodes of the cluster heard from within the presence expiry, this one included.", "gauge", |s| s.m.backplane_nodes.load(Relaxed) as f64),
];

/// The offload pool's size: after the backplane's series, where the exposition has always had it.
const OFFLOAD_THREADS: Plain = (
    "ws_offload_threads",
    "Threads in the offload pool.",
    "gauge",
    |s| s.m.offload_threads.load(Relaxed) as f64,
);
