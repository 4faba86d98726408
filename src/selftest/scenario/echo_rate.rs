//! echo-rate: the open loop. Every connection sends at the profile's rate and latency counts
//! from when each message was due, so a server that falls behind cannot hide it by slowing
//! the clients down; its p99 is judged against the profile's target.

use super::Check;
use super::{ByDefault, NeedsServer, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::rate_words;
use crate::selftest::report::Report;
use crate::selftest::report::Targets;
use crate::selftest::{RunPlan, ScenarioReport};

/// Open loop: N clients x R msgs/s, latency from each message's scheduled time.
pub struct EchoRate;

impl Workload for EchoRate {
    fn name(&self) -> &'static str {
        "echo-rate"
    }

    fn help(&self) -> Option<&'static str> {
        Some("Open loop: N clients x R msgs/s, latency from each message's scheduled time")
    }

    fn purpose(&self) -> &'static str {
        "Open loop: every connection sends at the profile's rate; latency counts from when each message was due."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::PacedEcho
    }

    fn needs_server(&self) -> NeedsServer {
        NeedsServer::Echo
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::Yes
    }

    fn open_loop(&self) -> bool {
        true
    }

    fn warms_up(&self) -> bool {
        true
    }

    /// One period of the per-connection rate, 1 to 5 s (see `RunPlan::warmup_for`).
    fn default_warmup(&self, rate: f64) -> f64 {
        (1.0 / rate.max(0.001)).clamp(1.0, 5.0)
    }

    fn timed(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, window: &str, o: &RunPlan) -> String {
        format!("{n} connections x {} msgs/s, {window}", rate_words(o.rate))
    }

    fn judge(&self, s: &ScenarioReport, t: &Targets, defaults: bool) -> Vec<Check> {
        judge_open_loop(s, t, defaults)
    }

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::latency_chart(r, s, "Latency by percentile", true)
    }
}

/// An open-loop scenario's checks: the profile's p99 and 95 % of the offered rate (its
/// targets), and every message answered by the end of the run.
pub(super) fn judge_open_loop(s: &ScenarioReport, t: &Targets, defaults: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    if defaults {
        checks.push((
            "p99 latency".to_string(),
            s.latency_ms.count > 0 && s.latency_ms.p99 <= t.p99_ms,
            format!("{:.2} ms (target {} ms)", s.latency_ms.p99, t.p99_ms),
        ));
    }
    checks.push((
        "every message answered".to_string(),
        s.lost == 0,
        format!("{} messages never echoed by the end of the run", s.lost),
    ));
    let offered = s.offered_rate.unwrap_or(0.0);
    if defaults {
        checks.push((
            "throughput".to_string(),
            s.achieved_rate >= offered * 0.95,
            format!("{:.0} of {:.0} msgs/s offered", s.achieved_rate, offered),
        ));
    }
    checks
}
