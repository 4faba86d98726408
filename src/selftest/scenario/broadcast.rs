//! broadcast: one publisher, every connection subscribed; each round's time is until its last
//! subscriber has it.

use super::Check;
use super::{ByDefault, Figures, NeedsServer, OnEachConn, Workload};
use crate::selftest::report::count;
use crate::selftest::report::html::chart::{self, Series, TEAL};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::report::Targets;
use crate::selftest::{RunPlan, ScenarioReport};

/// N subscribers; a publisher's timestamped message, time until the last one has it.
pub struct Broadcast;

impl Workload for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn help(&self) -> Option<&'static str> {
        Some("N subscribers; a publisher's timestamped message, time until the last one has it")
    }

    fn purpose(&self) -> &'static str {
        "One publisher, every connection subscribed: each round must reach every subscriber."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::Subscribe
    }

    fn needs_server(&self) -> NeedsServer {
        NeedsServer::FanOut
    }

    fn figures(&self) -> Figures {
        Figures {
            rounds: true,
            ..Figures::MESSAGES
        }
    }

    fn due(&self, s: &ScenarioReport) -> u64 {
        // Every round is due at every subscriber that connected.
        s.conns_connected as u64 * s.broadcast_rounds.unwrap_or(0) as u64
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::Yes
    }

    fn timed(&self) -> bool {
        true
    }

    fn fans_out(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, window: &str, o: &RunPlan) -> String {
        format!("{n} subscribers, {} rounds over {window}", o.rounds)
    }

    fn result_figures(&self, p99: &str, rate: &str) -> String {
        format!(", delivery p99 {p99}, {rate} deliveries/s")
    }

    fn judge(&self, s: &ScenarioReport, _t: &Targets, _defaults: bool) -> Vec<Check> {
        let want = s.conns_connected as u64 * s.broadcast_rounds.unwrap_or(0) as u64;
        vec![(
            "every subscriber, every round".to_string(),
            want > 0 && s.received >= want,
            format!("{} of {want} deliveries", s.received),
        )]
    }

    fn chart(&self, _r: &Report, s: &ScenarioReport) -> Option<String> {
        if s.timeline.len() >= 2 && s.timeline.iter().any(|p| p.received_per_sec > 0) {
            let pts = charts::over_time(s, false);
            let last = pts.last().map_or(1.0, |p| p.0);
            return chart::line_chart(
                "Deliveries per second",
                "second of the run",
                "deliveries/s",
                &[Series {
                    label: format!(
                        "to {} subscribers, {} rounds",
                        count(s.conns_connected),
                        s.broadcast_rounds.unwrap_or(0)
                    ),
                    colour: TEAL,
                    dashed: false,
                    points: pts,
                }],
                &chart::second_ticks(last),
            );
        }
        s.broadcast_last_ms.as_ref().and_then(|l| {
            chart::line_chart(
                "Time until the last subscriber had the round, by percentile",
                "percentile of rounds",
                "ms",
                &[charts::latency_series(l, "last subscriber", TEAL, false)],
                &chart::percentile_ticks(),
            )
        })
    }
}
