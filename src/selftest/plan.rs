//! What one self-test run is asked to do: the targets, the load, the server to watch, and
//! the scenarios in order. Built once by `engine::selftest::plan` (for `selftest` and `serve
//! --self-test`, and `pool`'s sweep), then read by the runner, the shards' slots and the
//! samplers. Data, below the runner, so that nothing under it climbs back up to `run`.

use super::client::Target;
use super::{shard, Scenario};
use std::net::IpAddr;
use std::time::Duration;

/// Everything a run needs; built by `engine::selftest::plan` (for `selftest` and `serve --self-test`).
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub target: Target,
    /// The machine the run measures (its kernel's counters, memory and processes), made once
    /// by the command.
    pub machine: crate::host::Machine,
    /// Where `broadcast` publishes and subscribes (a server that fans out what it receives).
    pub broadcast_target: Target,
    /// broadcast: servers the subscribers connect to, one per generator process in turn (empty:
    /// `broadcast_target`); the publisher always uses `broadcast_target`. Nodes of a cluster.
    pub subscribe_targets: Vec<Target>,
    pub scenarios: Vec<Scenario>,
    pub conns: usize,
    pub rate: f64,
    pub size: usize,
    pub secs: f64,
    /// `--warmup`; None: the default (see `warmup_for`).
    pub warmup: Option<f64>,
    /// Negotiate permessage-deflate (JSON payloads) in every scenario, not only `deflate`.
    pub deflate: bool,
    pub inflight: usize,
    pub rounds: usize,
    /// Generator processes; 0 sizes it from the fd limit (at least one).
    pub workers: usize,
    pub sources: Vec<IpAddr>,
    /// The server's process, for CPU and memory (None: not sampled).
    pub server_pid: Option<u32>,
    /// More processes that are the server too (`selftest --pid` again: a TLS proxy in front of
    /// the backend): their CPU and memory are added to `server_pid`'s, and they are the run's
    /// own in the noise accounting, not other processes.
    pub more_server_pids: Vec<u32>,
    /// Sum CPU and memory over `server_pid` and every process below it (a supervisor and its
    /// server processes); false when the generator's processes are below it instead.
    pub server_tree: bool,
    /// The broadcast server's process when it is not `server_pid` (a separate child server).
    pub broadcast_server_pid: Option<u32>,
    pub ramp_per_sec: f64,
    pub storm_concurrency: usize,
    /// The message a user's server answers (`--message`; see `WorkerSpec::request`). None:
    /// the stamped payloads an echo sends back.
    pub request: Option<String>,
    /// This run is one slice of a run over several hosts (`--shard`): `conns` is its share,
    /// each scenario starts at its slot's wall-clock time, and only shard 0 publishes.
    pub shard: Option<shard::Shard>,
    /// wss:// targets: whom the generator trusts, whether it resumes sessions.
    pub tls: Option<super::tls::TlsClient>,
    /// The host's counters read during each scenario (the report's `host_timeline`).
    pub host_watch: Option<super::host_watch::HostWatch>,
    /// `--script`: the populations and their steps (the `script` scenario).
    pub script: Option<super::script::Script>,
    /// restart: how the server is disrupted (None: the scenario cannot run).
    pub disrupt: Option<super::restart::Disrupt>,
}

impl RunPlan {
    /// Whether `scenario`'s connections open inside the measured window (storm,
    /// tls-handshake, a script with stages): no connect phase before it.
    pub fn connects_in_window(&self, scenario: Scenario) -> bool {
        scenario.workload().opens_in_window(self)
    }

    /// Seconds of unmeasured load before `scenario`'s window: `--warmup`, or by default 1 s,
    /// and for the open-loop scenarios one period of the per-connection rate, at most 5 s. At
    /// 100k connections and 0.1 msg/s each, a 1 s warm-up was shorter than the generator's
    /// start-up (16,667 connections per process beginning their schedules at once), which
    /// spilled into the window: late sends counted from when they were due (p99 145-470 ms).
    /// With 5 s (half the connections have sent once) p99 was 1.2 ms, the same as with 10 s,
    /// and the whole self-test stays within its 3 minutes.
    ///
    /// Deflate warms up for one whole period and a second (at most 15 s): each connection's
    /// first message builds its contexts on both sides (~40 us of server CPU for a compressor
    /// and a decompressor at 11/4), so a 5 s warm-up at 0.1 msg/s left half the connections'
    /// creations in the window, which then measured context creation instead of what a kept
    /// context costs. Creating them is measured on its own: `wstune bench deflate --contexts`.
    pub fn warmup_for(&self, scenario: Scenario) -> f64 {
        match self.warmup {
            _ if !scenario.warms_up() => 0.0,
            Some(w) => w,
            None => default_warmup(scenario, self.rate),
        }
    }

    /// tls-handshake: the simulated clients cycling at once, over all generator processes:
    /// `--storm-concurrency`, at most `--conns` (the count the server was sized for), split
    /// evenly.
    pub(super) fn clients_in_flight(&self, workers: usize) -> usize {
        let workers = workers.max(1);
        (self.storm_concurrency.min(self.conns) / workers).max(1) * workers
    }
}

/// The warm-up without `--warmup`, for a scenario that warms up (see [`RunPlan::warmup_for`]).
fn default_warmup(scenario: Scenario, rate: f64) -> f64 {
    scenario.workload().default_warmup(rate)
}

/// How long the generators may take to close their connections after their results.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn deflate_warms_up_until_every_connection_has_built_its_contexts() {
        // 100k profile: 0.1 msg/s each. Echo-rate's 5 s cap stays; deflate waits a whole
        // period (every connection's first message) and a second.
        assert_eq!(default_warmup(Scenario::EchoRate, 0.1), 5.0);
        assert_eq!(default_warmup(Scenario::Deflate, 0.1), 11.0);
        // Fast rates: the 1 s floor; a very slow rate: capped, the run stays bounded.
        assert_eq!(default_warmup(Scenario::EchoRate, 10.0), 1.0);
        assert_eq!(default_warmup(Scenario::Deflate, 10.0), 1.1);
        assert_eq!(default_warmup(Scenario::Deflate, 0.001), 15.0);
        assert_eq!(default_warmup(Scenario::EchoSat, 0.1), 1.0);
    }
}
