//! The workloads the self-test runs, as plug-ins. Each scenario is one file with one type
//! implementing [`Workload`]: its name and help, how its window is shaped (warm-up, connects
//! inside it, judged on timing), its line in the plan and the result, and its HTML chart. The
//! one place that maps a [`Scenario`] to its type is [`Scenario::workload`]; everything else
//! asks the scenario, never matches on it.
//!
//! A new scenario is a new file here and a line in `workload` and in [`Scenario::ALL`] (see
//! docs/internals/extending.md, "A self-test scenario").

mod answers;
mod broadcast;
mod deflate;
mod echo_rate;
mod echo_sat;
mod id;
mod idle;
mod restart;
mod script;
mod storm;
mod tls_handshake;

pub use answers::{ByDefault, Figures, NeedsServer, OnEachConn};
pub use id::Scenario;
pub use storm::{storm_budget_secs, STORM_BUDGET_PER_SEC, STORM_BUDGET_SECS};

use crate::selftest::report::{Report, Targets};

/// One of a scenario's own checks: what is checked, whether it held, the figures behind it.
pub type Check = (String, bool, String);
use crate::selftest::{RunPlan, ScenarioReport};

/// What one scenario is and does, beside the runner's shared machinery. The defaults are the
/// common case (warms up: no; connects inside its window: no; judged on timing: no), so a
/// scenario states only what sets it apart.
pub trait Workload: Sync {
    /// The name on the command line and in the JSON report (serde's spelling of [`Scenario`]).
    fn name(&self) -> &'static str;

    /// `--scenario`'s help for it; None: not chosen by name (run some other way).
    fn help(&self) -> Option<&'static str>;

    /// What it does, in a line a reader new to wstune can follow (the HTML report).
    fn purpose(&self) -> &'static str;

    /// Open loop at the profile's rate: latency counts from each message's due time and its
    /// p99 is held against the profile's target.
    fn open_loop(&self) -> bool {
        false
    }

    /// Closed loop: a fixed number of messages in flight per connection (`--inflight`), each
    /// sent when the last one's answer arrives; priced in echoes per server CPU-second.
    fn closed_loop(&self) -> bool {
        false
    }

    /// Its window lasts until every connection has connected and echoed (bounded by the storm
    /// budget), not `--secs`: its rate is over that time, and it has a storm's figures.
    fn lasts_until_done(&self) -> bool {
        false
    }

    /// Its clients connect, upgrade and close in a loop (`--storm-concurrency` at once): its
    /// rate is handshakes, and its connections are the clients in flight.
    fn cycles_connections(&self) -> bool {
        false
    }

    /// A publisher sends and every connection subscribes, against the broadcast server: its
    /// figures are rounds and deliveries, and its payloads are never compressed.
    fn fans_out(&self) -> bool {
        false
    }

    /// Its connections are held idle: the server's and the kernel's memory per connection are
    /// measured on it.
    fn holds_idle(&self) -> bool {
        false
    }

    /// It negotiates permessage-deflate on every connection (whatever `--deflate` says), and
    /// may be given its own connection count.
    fn negotiates_deflate(&self) -> bool {
        false
    }

    /// It disrupts the server (restart, drain) while it runs: never in the default list, and
    /// needs a way to disrupt it.
    fn disrupts_server(&self) -> bool {
        false
    }

    /// What the generator does on each connection it holds for it.
    fn on_each_conn(&self) -> OnEachConn;

    /// The kind of server it can be measured against.
    fn needs_server(&self) -> NeedsServer {
        NeedsServer::Any
    }

    /// The figures it produces, beyond those every scenario has: what a threshold may name.
    fn figures(&self) -> Figures {
        Figures::MESSAGES
    }

    /// The answers that were due, the base of its `delivered` fraction (a message each, by
    /// default).
    fn due(&self, s: &ScenarioReport) -> u64 {
        s.sent
    }

    /// Whether `serve --self-test` runs it when no scenario is asked for.
    fn by_default(&self) -> ByDefault {
        ByDefault::No
    }

    /// Whether it runs a warm-up before it measures (the steady-load ones).
    fn warms_up(&self) -> bool {
        false
    }

    /// The warm-up without `--warmup`, in seconds, at `rate` msgs/s per connection (see
    /// `RunPlan::warmup_for`); read only when [`Workload::warms_up`].
    fn default_warmup(&self, _rate: f64) -> f64 {
        1.0
    }

    /// Whether its connections open while it is measured (no connect phase).
    fn connects_in_window(&self) -> bool {
        false
    }

    /// Whether its connections open inside the window of this plan (a script with stages
    /// does; see `RunPlan::connects_in_window`).
    fn opens_in_window(&self, _plan: &RunPlan) -> bool {
        self.connects_in_window()
    }

    /// Whether its verdict rests on timing (latency, rate, work done before a deadline), which
    /// a host busy with other work distorts: it is only judged on a window quiet enough (see
    /// `noise`). The others are reported with their disturbance, and judged anyway.
    fn timed(&self) -> bool {
        false
    }

    /// Its line in the plan printed before a run: `n` connections (in words) over `window`.
    fn plan_line(&self, n: &str, window: &str, o: &RunPlan) -> String;

    /// Its key figures in the one-line result, under its own names (a storm's rate is
    /// handshakes, a broadcast's deliveries); `p99` and `rate` are already in words.
    fn result_figures(&self, p99: &str, rate: &str) -> String {
        format!(", p99 {p99}, {rate} msgs/s")
    }

    /// Its own checks in the verdict, after the ones every scenario has (finished, no errors,
    /// no server closes): `(what, ok, detail)`. `defaults`: the profile's targets are held
    /// (not `--no-default-checks`).
    fn judge(&self, _s: &ScenarioReport, _t: &Targets, _defaults: bool) -> Vec<Check> {
        Vec::new()
    }

    /// Its one chart in the HTML report, from the data its report holds; None when it holds none.
    fn chart(&self, r: &Report, s: &ScenarioReport) -> Option<String>;
}

impl Scenario {
    /// Every scenario, in the order `--scenario` lists them.
    pub const ALL: [Scenario; 9] = [
        Scenario::Idle,
        Scenario::EchoRate,
        Scenario::Deflate,
        Scenario::EchoSat,
        Scenario::Storm,
        Scenario::TlsHandshake,
        Scenario::Broadcast,
        Scenario::Script,
        Scenario::Restart,
    ];

    /// The registry: the one match from a scenario's name to what it does.
    pub fn workload(self) -> &'static dyn Workload {
        match self {
            Scenario::Idle => &idle::Idle,
            Scenario::EchoRate => &echo_rate::EchoRate,
            Scenario::Deflate => &deflate::Deflate,
            Scenario::EchoSat => &echo_sat::EchoSat,
            Scenario::Storm => &storm::Storm,
            Scenario::TlsHandshake => &tls_handshake::TlsHandshake,
            Scenario::Broadcast => &broadcast::Broadcast,
            Scenario::Script => &script::Script,
            Scenario::Restart => &restart::Restart,
        }
    }

    /// The scenario `--script FILE` runs.
    pub fn scripted() -> Scenario {
        Scenario::Script
    }

    /// The scenarios `serve --self-test` runs when none is asked for, against a server that
    /// negotiates permessage-deflate or not (`deflate`) and speaks TLS or not (`tls`): those
    /// it always runs, then those the server's configuration adds, each group in [`Self::ALL`]'s
    /// order.
    pub fn by_default(deflate: bool, tls: bool) -> Vec<Scenario> {
        let when = |s: &Scenario| s.workload().by_default();
        let always = Self::ALL.into_iter().filter(|s| when(s) == ByDefault::Yes);
        let added = Self::ALL.into_iter().filter(|s| match when(s) {
            ByDefault::WhenServerDeflates => deflate,
            ByDefault::WhenServerTls => tls,
            ByDefault::Yes | ByDefault::No => false,
        });
        always.chain(added).collect()
    }

    pub fn name(self) -> &'static str {
        self.workload().name()
    }

    /// See [`Workload::open_loop`].
    pub fn open_loop(self) -> bool {
        self.workload().open_loop()
    }

    /// See [`Workload::closed_loop`].
    pub fn closed_loop(self) -> bool {
        self.workload().closed_loop()
    }

    /// See [`Workload::lasts_until_done`].
    pub fn lasts_until_done(self) -> bool {
        self.workload().lasts_until_done()
    }

    /// See [`Workload::cycles_connections`].
    pub fn cycles_connections(self) -> bool {
        self.workload().cycles_connections()
    }

    /// See [`Workload::fans_out`].
    pub fn fans_out(self) -> bool {
        self.workload().fans_out()
    }

    /// See [`Workload::holds_idle`].
    pub fn holds_idle(self) -> bool {
        self.workload().holds_idle()
    }

    /// See [`Workload::negotiates_deflate`].
    pub fn negotiates_deflate(self) -> bool {
        self.workload().negotiates_deflate()
    }

    /// See [`Workload::disrupts_server`].
    pub fn disrupts_server(self) -> bool {
        self.workload().disrupts_server()
    }

    /// See [`Workload::warms_up`].
    pub fn warms_up(self) -> bool {
        self.workload().warms_up()
    }

    /// See [`Workload::connects_in_window`].
    pub fn connects_in_window(self) -> bool {
        self.workload().connects_in_window()
    }

    /// See [`Workload::timed`].
    pub fn timed(self) -> bool {
        self.workload().timed()
    }
}

/// Close handshakes per second the end of a run allows for, beside its fixed grace.
pub(super) const CLOSES_PER_SEC: f64 = 20_000.0;

#[cfg(test)]
mod tests {
    use super::Scenario::{self, *};

    /// The list `serve --self-test` runs unasked, and its order (the order the results print).
    #[test]
    fn the_default_list_is_the_steady_ones_then_what_the_server_adds() {
        let plain = vec![Idle, EchoRate, EchoSat, Storm, Broadcast];
        assert_eq!(Scenario::by_default(false, false), plain);
        let mut all = plain.clone();
        all.extend([Deflate, TlsHandshake]);
        assert_eq!(Scenario::by_default(true, true), all);
        assert!(!Scenario::by_default(true, true).contains(&Restart));
    }

    #[test]
    fn every_name_is_unique_and_parses_back() {
        for s in Scenario::ALL {
            let json = format!("\"{}\"", s.name());
            assert_eq!(serde_json::from_str::<Scenario>(&json).unwrap(), s);
        }
    }
}
