//! tls-handshake: a closed loop of connect, TLS handshake, upgrade and close (wss:// only),
//! priced in handshakes per second and per server CPU-second.

use super::Check;
use super::{ByDefault, Figures, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::report::Targets;
use crate::selftest::{RunPlan, ScenarioReport};

/// Closed loop, --storm-concurrency clients at once: connect, TLS handshake, upgrade,
/// close, again; handshakes per second and per server CPU-second (wss:// only).
pub struct TlsHandshake;

impl Workload for TlsHandshake {
    fn name(&self) -> &'static str {
        "tls-handshake"
    }

    fn help(&self) -> Option<&'static str> {
        Some("wss:// only: clients connect, handshake, upgrade and close in a loop; TLS handshakes per server core")
    }

    fn purpose(&self) -> &'static str {
        "Clients connect over TLS, upgrade and close, again and again: TLS handshakes per second and per server core."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::Nothing
    }

    fn figures(&self) -> Figures {
        Figures {
            handshakes_per_core: true,
            ..Figures::MESSAGES
        }
    }

    fn by_default(&self) -> ByDefault {
        ByDefault::WhenServerTls
    }

    fn warms_up(&self) -> bool {
        true
    }

    fn connects_in_window(&self) -> bool {
        true
    }

    fn timed(&self) -> bool {
        true
    }

    fn cycles_connections(&self) -> bool {
        true
    }

    fn plan_line(&self, _n: &str, window: &str, o: &RunPlan) -> String {
        format!(
            "handshake loop, {} in flight, {window}",
            o.storm_concurrency
        )
    }

    fn result_figures(&self, p99: &str, rate: &str) -> String {
        format!(", handshake p99 {p99}, {rate} handshakes/s")
    }

    fn judge(&self, s: &ScenarioReport, _t: &Targets, _defaults: bool) -> Vec<Check> {
        let mut checks = vec![(
            "handshakes made".to_string(),
            s.received > 0,
            format!("{} connect-handshake-close cycles", s.received),
        )];
        if let Some(t) = s.tls.as_ref().filter(|t| t.resume_offered) {
            let all = t.full + t.resumed;
            checks.push((
                "sessions resumed".to_string(),
                all > 0 && t.resumed * 100 >= all * 95,
                format!(
                    "{} of {all} handshakes resumed (--tls-resume: at least 95 %)",
                    t.resumed
                ),
            ));
        }
        checks
    }

    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::latency_chart(
            r,
            s,
            "Connect, TLS, upgrade and close, by percentile",
            false,
        )
    }
}
