//! The workloads the self-test runs, and how long a connection storm may take.

use serde::{Deserialize, Serialize};

/// The workloads. Names are the CLI's and the JSON report's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Closed loop, --storm-concurrency clients at once: connect, TLS handshake, upgrade,
    /// close, again; handshakes per second and per server CPU-second (wss:// only).
    TlsHandshake,
    /// N subscribers; a publisher's timestamped message, time until the last one has it.
    Broadcast,
    /// `--script FILE`: populations running their own steps (send, expect, subscribe,
    /// publish, think, idle); each waiting step timed on its own.
    Script,
    /// N connections held, then the server disrupted (restarted, drained): every client
    /// reconnects with full-jitter backoff; closes, refusals and the time until all are back.
    /// Never in the default list: it restarts the server.
    Restart,
}

impl Scenario {
    /// Whether the scenario runs a warm-up before it measures (the steady-load ones).
    pub fn warms_up(self) -> bool {
        matches!(
            self,
            Scenario::EchoRate | Scenario::Deflate | Scenario::EchoSat | Scenario::TlsHandshake
        )
    }

    /// Whether the scenario opens its connections while it is measured (no connect phase).
    pub fn connects_in_window(self) -> bool {
        matches!(self, Scenario::Storm | Scenario::TlsHandshake)
    }

    /// Whether the scenario's verdict rests on timing (latency, rate, work done before a
    /// deadline), which a host busy with other work distorts: such a scenario is only judged
    /// on a window quiet enough (see `noise`). idle (holding connections) and echo-sat (no
    /// target but finishing cleanly) are reported with their disturbance, and judged anyway.
    pub fn timed(self) -> bool {
        matches!(
            self,
            Scenario::EchoRate
                | Scenario::Deflate
                | Scenario::Storm
                | Scenario::TlsHandshake
                | Scenario::Broadcast
                | Scenario::Script
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
            Scenario::TlsHandshake => "tls-handshake",
            Scenario::Script => "script",
            Scenario::Restart => "restart",
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
pub(super) const CLOSES_PER_SEC: f64 = 20_000.0;

/// The seconds a storm of `conns` clients may take before they give up (`--secs` raises it).
pub fn storm_budget_secs(conns: usize, secs: f64) -> f64 {
    secs.max(STORM_BUDGET_SECS)
        .max(conns as f64 / STORM_BUDGET_PER_SEC)
}
