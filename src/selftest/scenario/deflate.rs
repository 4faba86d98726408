//! deflate: echo-rate with permessage-deflate negotiated and JSON payloads, to price a kept
//! compression context. Warms up longer than echo-rate so context creation stays out of the
//! window.

use super::echo_rate::judge_open_loop;
use super::Check;
use super::{ByDefault, NeedsServer, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::rate_words;
use crate::selftest::report::Report;
use crate::selftest::report::Targets;
use crate::selftest::{RunPlan, ScenarioReport};

/// echo-rate with permessage-deflate negotiated and JSON payloads.
pub struct Deflate;

impl Workload for Deflate {
    fn name(&self) -> &'static str {
        "deflate"
    }

    fn help(&self) -> Option<&'static str> {
        Some("echo-rate with permessage-deflate negotiated and JSON payloads")
    }

    fn purpose(&self) -> &'static str {
        "Echo-rate with permessage-deflate negotiated on every connection."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::PacedEcho
    }

    fn needs_server(&self) -> NeedsServer {
        NeedsServer::Echo
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::WhenServerDeflates
    }

    fn open_loop(&self) -> bool {
        true
    }

    fn warms_up(&self) -> bool {
        true
    }

    /// One whole period and a second, 1 to 15 s: each connection's first message builds its
    /// contexts on both sides, which the window must not measure (see `RunPlan::warmup_for`).
    fn default_warmup(&self, rate: f64) -> f64 {
        (1.0 / rate.max(0.001) + 1.0).clamp(1.0, 15.0)
    }

    fn timed(&self) -> bool {
        true
    }

    fn negotiates_deflate(&self) -> bool {
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
