//! The self-test pipeline: load settings + profile -> a plan sized to this host's limits ->
//! the scenarios, one after another -> one report -> its outcome. `selftest` runs it against a
//! server it is given; `serve --self-test` around the servers it starts itself.

//!
//! One idea a file: [`plan`] validates the settings and sizes the run (and words it before it
//! starts), [`run`] probes the server and runs the scenarios (measuring a noisy one again),
//! [`outcome`] prints, writes and concludes. This file holds the settings they share.

mod outcome;
mod plan;
mod run;

pub use outcome::finish;
pub use plan::{plan, Defaults, LoadPlan};
pub use run::execute;

use crate::report::ListFormat;
use crate::selftest::client::Target;
use crate::selftest::report;
use crate::selftest::threshold::Threshold;
use crate::selftest::{shard::Shard, Scenario};
use anyhow::{bail, Result};
use std::path::PathBuf;

/// The load generator's settings as the user gave them (`selftest`, `serve --self-test`);
/// None: the command's default (`Defaults`) or the profile's.
#[derive(Debug, Clone, Default)]
pub struct Load {
    pub scenarios: Vec<Scenario>,
    pub conns: Option<usize>,
    pub rate: Option<f64>,
    pub size: Option<usize>,
    pub secs: Option<f64>,
    pub warmup: Option<f64>,
    pub inflight: usize,
    pub rounds: Option<usize>,
    pub generators: usize,
    pub sources: usize,
    pub ramp: f64,
    pub storm_concurrency: usize,
    /// `--src-ips`: the local addresses the connections come from, round-robin (empty: sized
    /// from `sources` for a loopback server, the kernel's choice otherwise).
    pub src_ips: Vec<std::net::IpAddr>,
    /// `--message`: the request a user's server answers (see `WorkerSpec::request`).
    pub message: Option<String>,
    /// `selftest --script FILE`: its populations and steps (the run's one scenario is
    /// `script`, and `conns` is the populations' sum).
    pub script: Option<crate::selftest::script::Script>,
    /// Judge every window as measured, however noisy (no re-measure, no NOT PROVEN for noise).
    pub accept_noise: bool,
    /// The user's pass/fail criteria (`--threshold`), judged beside the profile's checks.
    pub thresholds: Vec<Threshold>,
    /// Leave out the profile's p99 and throughput checks (`--no-default-checks`).
    pub no_default_checks: bool,
    /// `--baseline OLD.json`: an earlier run's figures, shown beside this run's.
    pub baseline: Option<report::Baseline>,
    /// `selftest --shard I/N --start-at T`: this host runs its share of `conns` (the run's
    /// total), in step with the other shards. Its `slot_secs` is the plan's to fill in.
    pub shard: Option<Shard>,
    /// The report on stdout (or in `output`): a table or JSON.
    pub format: ListFormat,
    /// The report is the HTML page instead (`--format html`, or `-o FILE.html`).
    pub html: bool,
    /// `-o FILE`: the report written there (atomically) instead of to stdout.
    pub output: Option<PathBuf>,
    /// The table was asked for by name (`--format table`): kept when piped, where the
    /// summary is otherwise one block per scenario.
    pub table_asked: bool,
    /// Also an HTML page here.
    pub report: Option<PathBuf>,
    /// Also the figures as Prometheus text here (node_exporter's textfile collector).
    pub out_prometheus: Option<PathBuf>,
    /// How the generator does TLS with a wss:// target.
    pub tls: TlsLoad,
    /// restart: how the server is restarted or drained.
    pub restart: crate::selftest::restart::RestartAsk,
    /// The catalog's words for the advice in each scenario's host timeline (see
    /// [`host_words`]); None: the advice names its check ids only.
    pub host_words: Option<std::sync::Arc<crate::watch::advice::Words>>,
}

/// The words of this host's check against `profile` (a built-in name or a file), for the
/// advice the scenarios' host timelines give: the fixes then name the profile's targets, as
/// `wstune check` and `wstune watch` print them, checked on `machine` (where the run goes).
/// None when the check cannot run there.
pub fn host_words(
    profile: &str,
    machine: &crate::host::Machine,
) -> Option<std::sync::Arc<crate::watch::advice::Words>> {
    machine.with(|backend| words_on(profile, backend))
}

fn words_on(
    profile: &str,
    backend: &dyn crate::host::Backend,
) -> Option<std::sync::Arc<crate::watch::advice::Words>> {
    let inputs = super::check::inputs(
        &super::check::Target {
            profile: profile.to_string(),
            pid: None,
            unit: None,
            catalog: None,
            role: None,
        },
        backend,
    )
    .ok()?;
    let report = super::check::report(&inputs, backend, None);
    Some(std::sync::Arc::new(
        crate::watch::advice::Words::from_findings(&report.results),
    ))
}

/// The generator's TLS settings as given (`--ca`, `--insecure`, `--tls-resume`).
#[derive(Debug, Clone, Default)]
pub struct TlsLoad {
    pub ca: Option<PathBuf>,
    /// A CA already in memory, trusted in place of `ca` (`serve --self-test --tls` makes one).
    pub ca_pem: Option<String>,
    pub insecure: bool,
    pub resume: bool,
}

/// The largest `--ca` file read: a system bundle is ~200 KiB.
const MAX_CA_BYTES: u64 = 16 << 20;

/// The generator's TLS client for `target`, checked before anything starts: a wss:// target
/// needs a trust decision, and TLS flags or tls-handshake against ws:// are mistakes.
fn tls_client(
    t: &TlsLoad,
    target: &Target,
    scenarios: &[Scenario],
) -> Result<Option<crate::selftest::tls::TlsClient>> {
    if !target.tls {
        if scenarios.iter().any(|s| s.cycles_connections()) {
            bail!(
                "--scenario tls-handshake measures TLS handshakes, and {} is plain ws://: give a                  wss:// URL (or run `wstune serve --self-test --tls`)",
                target.url()
            );
        }
        if t.ca.is_some() || t.insecure || t.resume {
            bail!(
                "--ca, --insecure and --tls-resume apply to a wss:// server, and {} is plain                  ws://: drop them or give the wss:// URL",
                target.url()
            );
        }
        return Ok(None);
    }
    let ca_pem = match (&t.ca_pem, &t.ca) {
        (Some(pem), _) => Some(pem.clone()),
        (None, Some(path)) => Some(
            crate::host::input::read_bounded(path, MAX_CA_BYTES, None).map_err(|e| {
                anyhow::anyhow!(
                    "--ca {}: cannot be read ({e:?}); give a PEM file of CA certificates",
                    path.display()
                )
            })?,
        ),
        (None, None) => None,
    };
    let client = crate::selftest::tls::TlsClient {
        ca_pem,
        insecure: t.insecure,
        resume: t.resume,
    };
    crate::selftest::tls::Client::new(&client).map_err(anyhow::Error::msg)?;
    Ok(Some(client))
}

impl Load {
    /// Whether any load setting was given (they only mean something with a load test).
    pub fn any_set(&self) -> bool {
        !self.scenarios.is_empty()
            || self.conns.is_some()
            || self.rate.is_some()
            || self.size.is_some()
            || self.secs.is_some()
            || self.report.is_some()
            || self.output.is_some()
            || self.out_prometheus.is_some()
            || self.message.is_some()
            || !self.thresholds.is_empty()
            || self.baseline.is_some()
            || self.tls.ca.is_some()
            || self.tls.insecure
            || self.tls.resume
            || self.restart.any_set()
    }
}
