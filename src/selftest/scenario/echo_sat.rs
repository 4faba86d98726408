//! echo-sat: the closed loop. A fixed number of messages in flight per connection, each sent
//! when the last one's echo arrives: the most echoes the server sustains. No latency target
//! (queueing is the point), so it is judged on finishing cleanly even on a busy host.

use super::{ByDefault, NeedsServer, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::{RunPlan, ScenarioReport};

/// Closed loop: a fixed number of messages in flight per connection; maximum throughput.
pub struct EchoSat;

impl Workload for EchoSat {
    fn name(&self) -> &'static str {
        "echo-sat"
    }

    fn help(&self) -> Option<&'static str> {
        Some("Closed loop: a fixed number of messages in flight per connection; maximum throughput")
    }

    fn purpose(&self) -> &'static str {
        "Closed loop: every connection sends as soon as its answer arrives; how many echoes the server sustains."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::SaturatedEcho
    }

    fn needs_server(&self) -> NeedsServer {
        NeedsServer::Echo
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::Yes
    }

    fn warms_up(&self) -> bool {
        true
    }

    fn closed_loop(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, window: &str, o: &RunPlan) -> String {
        format!("{n} connections, {} in flight each, {window}", o.inflight)
    }

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::latency_chart(r, s, "Latency by percentile", false)
    }
}
