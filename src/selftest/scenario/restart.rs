//! restart: connections held while the server is restarted or drained; every client
//! reconnects with full-jitter backoff, and the figures are the closes, the refusals and the
//! time until every client is back. Never in the default list: it disrupts the server.

use super::Check;
use super::{Figures, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::report::{restart_checks, Targets};
use crate::selftest::{RunPlan, ScenarioReport};

/// N connections held, then the server disrupted (restarted, drained): every client
/// reconnects with full-jitter backoff; closes, refusals and the time until all are back.
/// Never in the default list: it restarts the server.
pub struct Restart;

impl Workload for Restart {
    fn name(&self) -> &'static str {
        "restart"
    }

    fn help(&self) -> Option<&'static str> {
        Some("N connections held, the server restarted or drained; reconnects with backoff, refusals, time until every client is back (not in the default list)")
    }

    fn purpose(&self) -> &'static str {
        "Connections held while the server restarts: every client reconnects with jittered backoff; the time from each close to its new upgrade."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::Reconnect
    }

    fn figures(&self) -> Figures {
        Figures {
            disruption: true,
            ..Figures::MESSAGES
        }
    }

    fn disrupts_server(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, window: &str, _o: &RunPlan) -> String {
        format!("{n} connections, the server restarted, {window}")
    }

    /// Whether the clients came back: its closes are what it measures, not a fault.
    fn judge(&self, s: &ScenarioReport, t: &Targets, defaults: bool) -> Vec<Check> {
        restart_checks(s, &t.restart, defaults)
            .into_iter()
            .map(|(what, ok, detail)| (what.to_string(), ok, detail))
            .collect()
    }

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::latency_chart(r, s, "Close to new upgrade, by percentile", false)
    }
}
