//! idle: connections opened and held, nothing sent. What it measures is what a held
//! connection costs (server memory per connection, kernel memory per socket, idle CPU), so it
//! neither warms up nor is judged on timing.

use super::{ByDefault, Figures, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::{RunPlan, ScenarioReport};

/// N connections held open: server memory per connection and idle CPU.
pub struct Idle;

impl Workload for Idle {
    fn name(&self) -> &'static str {
        "idle"
    }

    fn help(&self) -> Option<&'static str> {
        Some("N connections held open: server memory per connection and idle CPU")
    }

    fn purpose(&self) -> &'static str {
        "Connections opened and held without traffic: what each one costs the server and the kernel."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::Hold
    }

    fn figures(&self) -> Figures {
        Figures::default()
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::Yes
    }

    fn holds_idle(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, window: &str, _o: &RunPlan) -> String {
        format!("{n} connections held for {window}")
    }

    fn result_figures(&self, _p99: &str, _rate: &str) -> String {
        String::new()
    }

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::idle_chart(r, s)
    }
}
