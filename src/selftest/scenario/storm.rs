//! storm: every connection opened at once, each sending one message and waiting for its echo.
//! The connections open inside the window, so there is no connect phase, and the window is
//! as long as the storm takes (see `storm_budget_secs`).

use super::{ByDefault, Figures, NeedsServer, OnEachConn, Workload};
use crate::selftest::report::count;
use crate::selftest::report::html::chart::{self, Series, BLUE, GREY};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::{RunPlan, ScenarioReport};

/// N clients connect at once, send one message, wait for the echo.
pub struct Storm;

/// Seconds a storm may take at least before its clients give up waiting for their echo.
pub const STORM_BUDGET_SECS: f64 = 30.0;

/// Storm handshakes per second the budget allows for at least: 2 cores completed 100k in
/// ~6 s (~17k/s) serving and generating at once, and a million at ~8,600/s (both cores
/// saturated by 61 server and 51 generator processes), so a million clients get 200 s
/// instead of 30.
pub const STORM_BUDGET_PER_SEC: f64 = 5_000.0;

/// The seconds a storm of `conns` clients may take before they give up (`--secs` raises it).
pub fn storm_budget_secs(conns: usize, secs: f64) -> f64 {
    secs.max(STORM_BUDGET_SECS)
        .max(conns as f64 / STORM_BUDGET_PER_SEC)
}

impl Workload for Storm {
    fn name(&self) -> &'static str {
        "storm"
    }

    fn help(&self) -> Option<&'static str> {
        Some("N clients connect at once, send one message, wait for the echo")
    }

    fn purpose(&self) -> &'static str {
        "Reconnect storm: every connection opened at once, each with a handshake and a first echo."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::Nothing
    }

    fn needs_server(&self) -> NeedsServer {
        NeedsServer::Echo
    }

    fn figures(&self) -> Figures {
        Figures {
            connect_rate: true,
            ..Figures::MESSAGES
        }
    }

    fn due(&self, s: &ScenarioReport) -> u64 {
        // Each client sends one message, once it is connected.
        s.conns_requested as u64
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::Yes
    }

    fn connects_in_window(&self) -> bool {
        true
    }

    fn timed(&self) -> bool {
        true
    }

    fn lasts_until_done(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, _window: &str, o: &RunPlan) -> String {
        format!(
            "{n} connections at once ({} handshakes in flight)",
            o.storm_concurrency
        )
    }

    fn result_figures(&self, p99: &str, rate: &str) -> String {
        format!(", handshake p99 {p99}, {rate} handshakes/s")
    }

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        // A timeline of one second is a dot, not a curve: the percentiles say more.
        if s.timeline.len() < 2 {
            return charts::latency_chart(r, s, "Connect and first echo, by percentile", false);
        }
        let pts = charts::over_time(s, true);
        let last = pts.last().map_or(1.0, |p| p.0);
        chart::line_chart(
            "Connections open during the storm",
            "second of the storm",
            "connections",
            &[
                Series {
                    label: "connected and echoed".into(),
                    colour: BLUE,
                    dashed: false,
                    points: pts,
                },
                Series {
                    label: format!("asked {}", count(s.conns_requested)),
                    colour: GREY,
                    dashed: true,
                    points: vec![
                        (0.0, s.conns_requested as f64),
                        (last, s.conns_requested as f64),
                    ],
                },
            ],
            &chart::second_ticks(last),
        )
    }
}
