//! The `restart` scenario's own parts, outside the generator processes: how the server is
//! disrupted (`Disrupt`, run once, [`RESTART_AT`] into the window), the reconnect figures a
//! generator process reports ([`RestartCounts`]), and those figures added up with the
//! kernel's listen-queue counters into the report's [`RestartReport`].
//!
//! The clients reconnect the way a good client library does: on any close (a close frame, a
//! reset, an end of stream) each waits a random time between 0 and `min(cap, base * 2^n)`
//! before its attempt `n` ("full jitter", from AWS's "Exponential Backoff And Jitter",
//! <https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/>), so a fleet
//! that lost its server at the same instant does not come back in one synchronised wave.

use super::histo::latency;
use super::{Latency, WorkerResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

mod disrupt;
pub use disrupt::{disrupt_later, Disrupt, DisruptFn, Disrupted, RestartAsk, RestartBy};

/// The first reconnect attempt waits up to this long (full jitter's base).
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// No attempt waits longer than this: a client library's cap is a few seconds (Socket.IO's
/// `reconnectionDelayMax` is 5 s); 3 s keeps a restart's tail within what a deploy tolerates.
pub const BACKOFF_CAP: Duration = Duration::from_secs(3);
/// One reconnect attempt (TCP, TLS, upgrade) gives up after this: a SYN dropped by a full
/// accept queue is retransmitted after 1 s and 3 s, so 5 s sees the second retransmission.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// When the server is disrupted, after the clients start holding their connections.
pub const RESTART_AT: Duration = Duration::from_secs(2);
/// Accept-rate buckets: the peak is the best run of ten of them (one second).
pub const BUCKET_MS: u64 = 100;

/// The wait before reconnect attempt `attempt` (0 for the first), full jitter: uniform in
/// `[0, min(cap, base * 2^attempt))`, with `unit` a uniform draw in [0, 1).
pub fn full_jitter(attempt: u32, unit: f64) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
        .min(BACKOFF_CAP);
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

/// The window a restart is measured over: `--secs`, at least 10 s, and one more second per
/// 5,000 connections (the storm's handshake budget), so the whole fleet has time to come
/// back after [`RESTART_AT`]. A server that drains over longer (`--drain-over`) needs
/// `--secs` past its drain.
pub fn window_secs(conns: usize, secs: f64) -> f64 {
    secs.max(10.0) + conns as f64 / super::STORM_BUDGET_PER_SEC
}

/// A failed reconnect attempt's kind: `rst` (refused or reset), `timeout`, `eof` (closed
/// during the upgrade), `http-NNN` (answered with another status than 101), `other`.
pub fn refusal_kind(e: &super::client::ConnectError) -> String {
    use super::client::ConnectError;
    use std::io::ErrorKind;
    match e {
        ConnectError::Io(e) => match e.kind() {
            ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset => "rst".into(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                "eof".into()
            }
            ErrorKind::TimedOut => "timeout".into(),
            _ => "other".into(),
        },
        ConnectError::NotWebSocket(status) => match status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
        {
            Some(code) if (100..600).contains(&code) => format!("http-{code}"),
            _ => "other".into(),
        },
    }
}

/// One generator process's reconnect figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RestartCounts {
    /// Connections the server ended (a close frame, a reset or an end of stream).
    pub closed: u64,
    /// Of those, the ones that ended without a close frame (reset or end of stream).
    pub without_close_frame: u64,
    /// Reconnect attempts made.
    pub attempts: u64,
    /// Reconnects that completed the upgrade.
    pub back: u64,
    /// Connections still down when the window ended.
    pub not_back: u64,
    /// Failed attempts by kind (see [`refusal_kind`]).
    pub refused: BTreeMap<String, u64>,
    /// The last reconnect's upgrade, ms since the Unix epoch.
    pub last_back_unix_ms: Option<u64>,
    /// Reconnect upgrades per [`BUCKET_MS`] of wall-clock time: `[unix_ms / BUCKET_MS, n]`.
    pub upgrades: Vec<(u64, u64)>,
}

/// The kernel's listen-queue and SYN counters over a restart (this network namespace), as
/// deltas: what a reconnect storm does to the accept queue (`/proc/net/netstat` TcpExt and
/// `/proc/net/snmp` Tcp).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListenCounters {
    /// TcpExt ListenOverflows: a handshake completed into a full accept queue.
    pub listen_overflows: u64,
    /// TcpExt ListenDrops: SYNs and handshakes dropped at a listener (overflows included).
    pub listen_drops: u64,
    /// TcpExt TCPReqQFullDrop: SYNs dropped because the SYN queue was full (no syncookies).
    pub req_q_full_drop: u64,
    /// TcpExt TCPReqQFullDoCookies: SYNs answered with a syncookie because the SYN queue was full.
    pub req_q_full_do_cookies: u64,
    /// TcpExt SyncookiesSent.
    pub syncookies_sent: u64,
    /// Tcp AttemptFails: connects that failed (refused, reset in SYN-RECV).
    pub attempt_fails: u64,
    /// Tcp EstabResets: established connections reset.
    pub estab_resets: u64,
}

/// The counters as read now (Linux; None elsewhere).
pub fn listen_counters(host: &crate::host::Machine) -> Option<[u64; 7]> {
    use crate::host::procfs::{header_values, paths};
    let netstat = host.read(paths::NETSTAT).ok()?;
    let snmp = host.read(paths::SNMP).ok()?;
    let v = |text: &str, group, f| {
        header_values(text, group, f)
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0)
    };
    Some([
        v(&netstat, "TcpExt", "ListenOverflows"),
        v(&netstat, "TcpExt", "ListenDrops"),
        v(&netstat, "TcpExt", "TCPReqQFullDrop"),
        v(&netstat, "TcpExt", "TCPReqQFullDoCookies"),
        v(&netstat, "TcpExt", "SyncookiesSent"),
        v(&snmp, "Tcp", "AttemptFails"),
        v(&snmp, "Tcp", "EstabResets"),
    ])
}

fn counters_delta(before: [u64; 7], after: [u64; 7]) -> ListenCounters {
    let d = |i: usize| after[i].saturating_sub(before[i]);
    ListenCounters {
        listen_overflows: d(0),
        listen_drops: d(1),
        req_q_full_drop: d(2),
        req_q_full_do_cookies: d(3),
        syncookies_sent: d(4),
        attempt_fails: d(5),
        estab_resets: d(6),
    }
}

/// The restart scenario's figures in the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RestartReport {
    /// How the server was disrupted.
    pub restart_by: String,
    /// What the disruption answered (the command ran, the drain was accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<String>,
    /// When, ms since the Unix epoch.
    pub disrupted_unix_ms: u64,
    /// Connections the server ended (close codes in the scenario's `close_codes`).
    pub closed: u64,
    /// Of those, ended by a reset or an end of stream instead of a close frame.
    pub without_close_frame: u64,
    pub attempts: u64,
    pub back: u64,
    /// Connections still down when the window ended.
    pub not_back: u64,
    /// Failed reconnect attempts by kind: rst, timeout, eof, http-503, ...
    pub refused: BTreeMap<String, u64>,
    /// Their sum.
    pub refused_total: u64,
    /// Each reconnect's time from its close to its new upgrade (the scenario's latency).
    pub back_ms: Latency,
    /// From the disruption until the last client was back; None when some never came back
    /// (or none was closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_back_secs: Option<f64>,
    /// Reconnect upgrades per second in the best one-second window.
    pub peak_accept_rate: f64,
    /// The kernel's counters over the window (a server on this host's loopback only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<ListenCounters>,
    /// The upgrade buckets behind `peak_accept_rate`, so shards' reports merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrades: Vec<(u64, u64)>,
    /// The last reconnect, ms since the Unix epoch (for merging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_back_unix_ms: Option<u64>,
}

/// The plan `scenario` runs with: a restart's window is [`window_secs`], the others' the plan's.
pub(super) fn plan_for(
    o: &super::RunPlan,
    scenario: super::Scenario,
) -> std::borrow::Cow<'_, super::RunPlan> {
    if !scenario.disrupts_server() {
        return std::borrow::Cow::Borrowed(o);
    }
    std::borrow::Cow::Owned(super::RunPlan {
        secs: window_secs(o.conns, o.secs) + o.disrupt.as_ref().map_or(0.0, |d| d.lasts_secs),
        ..o.clone()
    })
}

/// A restart scenario's disruption and kernel counters, followed from "go" to the report.
pub(super) struct Watch {
    /// A restart scenario (its figures are reported on every shard).
    restart: bool,
    /// The disruption, run by this host (shard 0 of a sharded run: one restart for all).
    disruption: Option<tokio::task::JoinHandle<Disrupted>>,
    /// The counters at "go" and when the window ended (a server on this host only).
    kernel: (Option<[u64; 7]>, Option<[u64; 7]>),
}

impl Watch {
    /// Started with the load: the disruption comes [`RESTART_AT`] later. Nothing for the
    /// other scenarios.
    pub(super) fn start(
        o: &super::RunPlan,
        scenario: super::Scenario,
        target: &super::client::Target,
    ) -> Watch {
        if !scenario.disrupts_server() {
            return Watch {
                restart: false,
                disruption: None,
                kernel: (None, None),
            };
        }
        // The kernel's counters are this host's: they describe the server's listener only
        // when the server is here (loopback, or a process this run measures).
        let local = target.addr.ip().is_loopback() || o.server_pid.is_some();
        let disrupts = o.shard.is_none_or(|s| s.index == 0);
        Watch {
            restart: true,
            disruption: o.disrupt.clone().filter(|_| disrupts).map(disrupt_later),
            kernel: (local.then(|| listen_counters(&o.machine)).flatten(), None),
        }
    }

    pub(super) fn window_ended(&mut self, machine: &crate::host::Machine) {
        if self.kernel.0.is_some() {
            self.kernel.1 = listen_counters(machine);
        }
    }

    /// The report, and why the run is incomplete when the disruption failed or never ran.
    pub(super) async fn finish(
        self,
        results: &[&WorkerResult],
        back: &hdrhistogram::Histogram<u64>,
    ) -> (Option<RestartReport>, Option<String>) {
        if !self.restart {
            return (None, None);
        }
        let d = match self.disruption {
            Some(h) => h.await.ok(),
            // Another shard restarted the server: `report merge` takes its time.
            None => Some(Disrupted {
                by: "shard 0".into(),
                at_unix_ms: 0,
                outcome: Ok("restarted by shard 0 of this run".into()),
            }),
        };
        let failed = match &d {
            Some(Disrupted {
                outcome: Err(e), ..
            }) => Some(format!("the restart failed: {e}")),
            None => Some("the restart never ran".to_string()),
            _ => None,
        };
        let kernel = match self.kernel {
            (Some(b), Some(a)) => Some((b, a)),
            _ => None,
        };
        (Some(report(results, back, d, kernel)), failed)
    }
}

/// The best sum of ten consecutive buckets (one second), from `[bucket, count]` pairs.
pub fn peak_per_sec(upgrades: &[(u64, u64)]) -> f64 {
    let per_sec = 1000 / BUCKET_MS;
    let m: BTreeMap<u64, u64> = upgrades.iter().fold(BTreeMap::new(), |mut m, (b, n)| {
        *m.entry(*b).or_insert(0) += n;
        m
    });
    m.keys()
        .map(|&from| m.range(from..from + per_sec).map(|(_, n)| n).sum::<u64>())
        .max()
        .unwrap_or(0) as f64
}

/// Counts added together: the generator processes' (or the shards' reports').
pub fn add(a: &mut RestartCounts, b: &RestartCounts) {
    a.closed += b.closed;
    a.without_close_frame += b.without_close_frame;
    a.attempts += b.attempts;
    a.back += b.back;
    a.not_back += b.not_back;
    for (k, v) in &b.refused {
        *a.refused.entry(k.clone()).or_default() += v;
    }
    a.last_back_unix_ms = a.last_back_unix_ms.max(b.last_back_unix_ms);
    a.upgrades.extend_from_slice(&b.upgrades);
}

/// The report from the processes' counts, the back-time histogram, the disruption and the
/// kernel counters around the window.
pub fn report(
    results: &[&WorkerResult],
    back: &hdrhistogram::Histogram<u64>,
    d: Option<Disrupted>,
    kernel: Option<([u64; 7], [u64; 7])>,
) -> RestartReport {
    let mut c = RestartCounts::default();
    for r in results {
        if let Some(x) = r.own.restart() {
            add(&mut c, x);
        }
    }
    let (by, at, disruption) = match d {
        Some(d) => (d.by, d.at_unix_ms, d.outcome.ok()),
        None => ("none".into(), 0, None),
    };
    from_counts(
        c,
        latency(back),
        by,
        at,
        disruption,
        kernel.map(|(b, a)| counters_delta(b, a)),
    )
}

/// [`RestartReport`] from summed counts (also `report merge`'s).
pub fn from_counts(
    c: RestartCounts,
    back_ms: Latency,
    restart_by: String,
    disrupted_unix_ms: u64,
    disruption: Option<String>,
    kernel: Option<ListenCounters>,
) -> RestartReport {
    let mut upgrades: BTreeMap<u64, u64> = BTreeMap::new();
    for (b, n) in &c.upgrades {
        *upgrades.entry(*b).or_default() += n;
    }
    let upgrades: Vec<(u64, u64)> = upgrades.into_iter().collect();
    RestartReport {
        all_back_secs: match c.last_back_unix_ms {
            Some(last) if c.not_back == 0 && c.back > 0 && disrupted_unix_ms > 0 => {
                Some(last.saturating_sub(disrupted_unix_ms) as f64 / 1000.0)
            }
            _ => None,
        },
        peak_accept_rate: peak_per_sec(&upgrades),
        restart_by,
        disruption,
        disrupted_unix_ms,
        closed: c.closed,
        without_close_frame: c.without_close_frame,
        attempts: c.attempts,
        back: c.back,
        not_back: c.not_back,
        refused_total: c.refused.values().sum(),
        refused: c.refused,
        back_ms,
        kernel,
        upgrades,
        last_back_unix_ms: c.last_back_unix_ms,
    }
}

/// Shards' restart figures as one (`report merge`): counts and buckets added, the first
/// disruption and the last reconnect kept, the kernel counters added (each host's own).
/// None when no shard has them.
pub fn merge_reports(each: &[&RestartReport], back_ms: Latency) -> Option<RestartReport> {
    let first = each
        .iter()
        .find(|r| r.disrupted_unix_ms > 0)
        .or(each.first())?;
    let mut c = RestartCounts::default();
    let mut kernel: Option<ListenCounters> = None;
    for r in each {
        add(
            &mut c,
            &RestartCounts {
                closed: r.closed,
                without_close_frame: r.without_close_frame,
                attempts: r.attempts,
                back: r.back,
                not_back: r.not_back,
                refused: r.refused.clone(),
                last_back_unix_ms: r.last_back_unix_ms,
                upgrades: r.upgrades.clone(),
            },
        );
        if let Some(k) = &r.kernel {
            let a = kernel.get_or_insert_with(Default::default);
            a.listen_overflows += k.listen_overflows;
            a.listen_drops += k.listen_drops;
            a.req_q_full_drop += k.req_q_full_drop;
            a.req_q_full_do_cookies += k.req_q_full_do_cookies;
            a.syncookies_sent += k.syncookies_sent;
            a.attempt_fails += k.attempt_fails;
            a.estab_resets += k.estab_resets;
        }
    }
    let at = each
        .iter()
        .map(|r| r.disrupted_unix_ms)
        .filter(|t| *t > 0)
        .min()
        .unwrap_or(0);
    Some(from_counts(
        c,
        back_ms,
        first.restart_by.clone(),
        at,
        first.disruption.clone(),
        kernel,
    ))
}

#[cfg(test)]
mod tests;
