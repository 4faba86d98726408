//! script: `--script FILE`'s populations, each connecting its own way and running its own
//! steps; every waiting step is timed on its own. Never chosen by name.

use super::Check;
use super::{Figures, NeedsServer, OnEachConn, Workload};
use crate::selftest::report::html::charts;
use crate::selftest::report::Report;
use crate::selftest::report::Targets;
use crate::selftest::{RunPlan, ScenarioReport};

/// `--script FILE`: populations running their own steps (send, expect, subscribe,
/// publish, think, idle); each waiting step timed on its own.
pub struct Script;

impl Workload for Script {
    fn name(&self) -> &'static str {
        "script"
    }

    /// Run by --script FILE, not chosen by name: not among `--scenario`'s values.
    fn help(&self) -> Option<&'static str> {
        None
    }

    fn purpose(&self) -> &'static str {
        "Scripted sessions: each population connects its own way and runs its steps; every waiting step timed from the last message sent."
    }

    fn on_each_conn(&self) -> OnEachConn {
        OnEachConn::ScriptSession
    }

    fn needs_server(&self) -> NeedsServer {
        NeedsServer::Scripted
    }

    fn figures(&self) -> Figures {
        Figures {
            steps: true,
            ..Figures::MESSAGES
        }
    }

    /// A script with stages opens its connections as its stages go, inside the window.
    fn opens_in_window(&self, plan: &RunPlan) -> bool {
        plan.script.as_ref().is_some_and(|s| !s.stages.is_empty())
    }

    fn timed(&self) -> bool {
        true
    }

    fn plan_line(&self, n: &str, window: &str, _o: &RunPlan) -> String {
        format!("{n} scripted connections, {window}")
    }

    /// Every waiting step must have met its expectations: a wrong expectation (or a server
    /// that does not answer) is named by its step.
    fn judge(&self, s: &ScenarioReport, _t: &Targets, _defaults: bool) -> Vec<Check> {
        s.steps
            .iter()
            .map(|st| {
                (
                    format!("step {}: every expectation met", st.name),
                    st.timeouts == 0 && st.matched > 0,
                    format!(
                        "{} met, {} timed out ({} other messages while waiting)",
                        st.matched, st.timeouts, st.other
                    ),
                )
            })
            .collect()
    }

    fn chart(&self, _r: &Report, s: &ScenarioReport) -> Option<String> {
        charts::step_chart(s)
    }
}
