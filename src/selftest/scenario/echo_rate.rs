//! echo-rate: the open loop. Every connection sends at the profile's rate and latency counts
//! from when each message was due, so a server that falls behind cannot hide it by slowing
//! the clients down; its p99 is judged against the profile's target.

use super::Workload;
use crate::selftest::report::html::charts;
use crate::selftest::report::rate_words;
use crate::selftest::report::Report;
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

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::latency_chart(r, s, "Latency by percentile", true)
    }
}
