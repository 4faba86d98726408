//! The self-test pipeline: load settings + profile -> a plan sized to this host's limits ->
//! the scenarios, one after another -> one report -> its outcome. `selftest` runs it against a
//! server it is given; `serve --self-test` around the servers it starts itself.

use crate::outcome::Outcome;
use crate::profile::Profile;
use crate::report::ListFormat;
use crate::selftest::client::Target;
use crate::selftest::probe;
use crate::selftest::report::{self, Judging, Report, Targets};
use crate::selftest::shard::Shard;
use crate::selftest::threshold::{Scope, Threshold};
use crate::selftest::Refusal;
use crate::selftest::{run_scenario, sizing, target_url, RunPlan, Scenario};
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
/// `wstune check` and `wstune watch` print them. None when the check cannot run here.
pub fn host_words(profile: &str) -> Option<std::sync::Arc<crate::watch::advice::Words>> {
    let backend = crate::host::live(None);
    let inputs = super::check::inputs(
        &super::check::Target {
            profile: profile.to_string(),
            pid: None,
            unit: None,
            catalog: None,
            role: None,
        },
        backend.as_ref(),
    )
    .ok()?;
    let report = super::check::report(&inputs, backend.as_ref(), None);
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

/// A run, sized and validated, before anything starts.
pub struct LoadPlan {
    pub opts: RunPlan,
    /// How the run is judged: `--accept-noise`, thresholds, the profile's checks or not.
    pub judging: Judging,
    pub scenarios: Vec<Scenario>,
    pub targets: Targets,
    pub scaled_down: Vec<String>,
    pub rate_note: Option<String>,
    pub server_processes: Option<usize>,
    pub deflate_conns: Option<usize>,
    pub url: String,
    /// Look at the server before the load (`selftest`, whose server is whatever the URL
    /// names): a scenario it cannot serve is refused before anything runs. `serve --self-test`
    /// starts the servers each scenario needs, and does not look.
    pub probe: bool,
}

/// What a command runs when the flags do not say.
pub struct Defaults {
    /// broadcast: subscriber servers (`selftest --subscribe-url`), empty for the broadcast URL.
    pub subscribe_targets: Vec<Target>,
    /// Negotiate permessage-deflate in every scenario (`selftest --deflate`).
    pub deflate: bool,
    pub conns: usize,
    pub scenarios: Vec<Scenario>,
    pub secs: f64,
    /// Messages per second per connection when --rate does not say (None: the profile's).
    pub rate: Option<f64>,
    /// Why `rate` is below the profile's.
    pub rate_note: Option<String>,
    /// Server processes behind the target (serve --self-test), for the report.
    pub server_processes: Option<usize>,
    /// Measure the server as `server_pid`'s whole process tree (a supervisor).
    pub server_tree: bool,
    /// The deflate scenario's own (lower) count, when memory cannot hold `conns` of it.
    pub deflate_conns: Option<usize>,
    /// The broadcast server's process, when it is another than the echo server's.
    pub broadcast_server_pid: Option<u32>,
    /// Cores the generator and server share (serve --self-test): the broadcast rounds are
    /// paced to what they deliver. None: `--rounds` or 10, as asked.
    pub budget_cores: Option<usize>,
}

/// The open-loop sends per second one generator process is given before the load is spread
/// over another (when `--generators` does not say).
const SENDS_PER_GENERATOR: f64 = 12_000.0;

/// Broadcast rounds when neither the flag nor the CPU budget says otherwise.
const DEFAULT_ROUNDS: usize = 10;

/// Validate the load settings and size the generator to this host's limits.
pub fn plan(
    load: &Load,
    target: Target,
    broadcast_target: Target,
    profile: &Profile,
    defaults: Defaults,
    server_pid: Option<u32>,
    scaled_down: Vec<String>,
) -> Result<LoadPlan> {
    let t = &profile.selftest;
    let conns = load.conns.unwrap_or(defaults.conns);
    let rate = load
        .rate
        .or(defaults.rate)
        .unwrap_or(t.rate_per_client as f64);
    // The flag wins over the CPU budget's rate: then there is nothing to explain.
    let rate_note = if load.rate.is_some() {
        None
    } else {
        defaults.rate_note
    };
    let size = load.size.unwrap_or(t.payload_bytes as usize);
    let secs = load.secs.unwrap_or(defaults.secs);
    if conns == 0 || conns > 10_000_000 {
        bail!("--conns {conns}: give 1..=10000000 connections");
    }
    // A shard runs its slice of the total; the rate per connection stays, so the shards' sum
    // is the run's load.
    let total_conns = conns;
    // A shard of a scripted run takes its share of every population.
    let script = match (&load.script, &load.shard) {
        (Some(s), Some(sh)) => Some(s.share(sh.index, sh.count)),
        (s, _) => s.clone(),
    };
    let conns = match &load.shard {
        Some(s) if script.as_ref().is_some_and(|sc| sc.conns() == 0) => bail!(
            "--shard {}/{}: the script's populations leave this shard no connection; give \
             each population at least one connection per shard",
            s.index,
            s.count
        ),
        Some(_) if script.is_some() => script.as_ref().map_or(0, |s| s.conns()),
        Some(s) if s.share(conns) == 0 => bail!(
            "--shard {}/{}: --conns {conns} leaves this shard no connection; give at least one \
             connection per shard",
            s.index,
            s.count
        ),
        Some(s) => s.share(conns),
        None => conns,
    };
    if !(rate.is_finite() && rate > 0.0 && rate <= 100_000.0) {
        bail!("--rate {rate}: give messages per second per connection, more than 0 and at most 100000");
    }
    if !(16..=16 << 20).contains(&size) {
        bail!("--size {size}: payloads carry a 16-byte timestamp; give 16 bytes .. 16 MiB");
    }
    if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
        bail!("--secs {secs}: give more than 0 and at most 3600 seconds per scenario");
    }
    if let Some(w) = load
        .warmup
        .filter(|w| !(w.is_finite() && (0.0..=600.0).contains(w)))
    {
        bail!("--warmup {w}: give 0..=600 seconds");
    }
    if let Some(path) = &load.report {
        crate::output::check_writable(path, "--report")?;
    }
    if let Some(path) = &load.output {
        crate::output::check_writable(path, "--output")?;
    }
    if let Some(path) = &load.out_prometheus {
        crate::output::check_writable(path, "--out-prometheus")?;
    }
    if !(1..=1024).contains(&load.inflight) {
        bail!(
            "--inflight {}: give 1..=1024 messages in flight per connection",
            load.inflight
        );
    }
    if let Some(r) = load.rounds.filter(|r| !(1..=10_000).contains(r)) {
        bail!("--rounds {r}: give 1..=10000 broadcast rounds");
    }
    // Limits: every generator process may open as many files as this one (raised to its hard
    // limit first); ports per loopback source from the ephemeral range.
    let (soft, _hard) = crate::host::raise_nofile();
    let workers = sizing::workers_for(conns, soft, load.generators).map_err(anyhow::Error::msg)?;
    // Each send is a wake-up of its own (independent arrivals), so one generator process keeps
    // its schedule up to ~15,000 sends/s (77 % of a core on the development VM) and pauses for
    // milliseconds near 25,000/s (93 %): past SENDS_PER_GENERATOR the open-loop load is spread
    // over more processes, as many as the cores this process may run on.
    let workers = if load.generators == 0 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let by_rate = (conns as f64 * rate / SENDS_PER_GENERATOR).ceil() as usize;
        workers.max(by_rate.min(cores).min(conns))
    } else {
        workers
    };
    // Ports for twice the count: the previous scenario's connections are still closing
    // (FIN_WAIT, TIME_WAIT) while the next one opens its own, and 100k of them take seconds
    // to go; sized for one scenario, the second one met EADDRNOTAVAIL at ~99.6%.
    let sources = if load.src_ips.is_empty() {
        sizing::sources_for(
            target.addr.ip(),
            conns.saturating_mul(2),
            sizing::ephemeral_ports(),
            load.sources,
        )
    } else {
        // Each must be an address of this host: a bind to it with any port says so.
        if let Some(a) = load
            .src_ips
            .iter()
            .find(|a| std::net::UdpSocket::bind((**a, 0)).is_err())
        {
            bail!(
                "--src-ips {a}: not an address of this host; add it first (ip addr add {a}/32 \
                 dev IFACE) or leave it out"
            );
        }
        sizing::given_sources(
            &load.src_ips,
            target.addr.ip(),
            conns.saturating_mul(2),
            sizing::ephemeral_ports(),
        )
    }
    .map_err(anyhow::Error::msg)?;
    let mut scenarios = load.scenarios.clone();
    if scenarios.is_empty() {
        scenarios = defaults.scenarios;
    }
    // A fixed order: idle first, while the server's memory is fresh (an allocator keeps
    // what earlier scenarios freed, which would hide the per-connection cost), then the
    // rate-limited runs before the ones that saturate.
    scenarios.sort_by_key(|s| *s as u8);
    scenarios.dedup();
    // A threshold on a scenario that will not run would never be judged: refused now, before
    // any connection, rather than leaving the run NOT PROVEN after minutes of load.
    for th in &load.thresholds {
        if let Scope::Step(step) = &th.scope {
            let known = load
                .script
                .as_ref()
                .map(|s| s.waiting_steps())
                .unwrap_or_default();
            if !known.contains(step) {
                bail!(
                    "threshold '{th}': no waiting step {step} in {}; {}",
                    if load.script.is_some() {
                        "the script"
                    } else {
                        "this run (no --script)"
                    },
                    if known.is_empty() {
                        "a step threshold names a --script population's expect or subscribe step"
                            .to_string()
                    } else {
                        format!("the steps are {}", known.join(", "))
                    }
                );
            }
        }
        if let Scope::One(s) = th.scope {
            if !scenarios.contains(&s) {
                bail!(
                    "threshold '{th}': scenario {} is not in this run ({}); add --scenario {} \
                     or drop the threshold",
                    s.name(),
                    scenarios
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.name()
                );
            }
        }
    }
    if load.no_default_checks && load.thresholds.is_empty() {
        bail!(
            "--no-default-checks drops the profile's p99 and throughput checks for your own: \
             give at least one --threshold"
        );
    }
    // Like the rate, the rounds follow the CPU budget unless the flag says: rounds closer
    // together than one fan-out queue behind each other, and "until the last subscriber"
    // would measure the queue.
    let (rounds, rounds_note) = match (load.rounds, defaults.budget_cores) {
        (Some(r), _) => (r, None),
        (None, Some(cores)) if scenarios.iter().any(|s| s.fans_out()) => {
            sizing::broadcast_rounds(conns, cores, secs, DEFAULT_ROUNDS)
        }
        _ => (DEFAULT_ROUNDS, None),
    };
    let tls = tls_client(&load.tls, &target, &scenarios)?;
    let disrupt = match &load.restart.disrupt {
        Some(d) => Some(d.clone()),
        None => load.restart.external().map_err(anyhow::Error::msg)?,
    };
    match (scenarios.iter().any(|s| s.disrupts_server()), &disrupt) {
        (true, None) => bail!(
            "--scenario restart restarts the server: say how with --restart-cmd 'CMD' (e.g. 'systemctl restart ws') or --drain-url http://ADMIN/api/drain"
        ),
        (false, _) if load.restart.any_set() => bail!(
            "--restart-by, --restart-cmd and --drain-url say how --scenario restart restarts the server: add --scenario restart or drop them"
        ),
        _ => {}
    }
    let rate_note = match (rate_note, rounds_note) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    let port = target.addr.port();
    let remote = !on_this_host(target.addr.ip());
    let mut opts = RunPlan {
        target,
        broadcast_target,
        subscribe_targets: defaults.subscribe_targets,
        scenarios: scenarios.clone(),
        conns,
        rate,
        size,
        secs,
        warmup: load.warmup,
        deflate: defaults.deflate,
        inflight: load.inflight,
        rounds,
        workers,
        sources,
        server_pid,
        server_tree: defaults.server_tree,
        broadcast_server_pid: defaults.broadcast_server_pid,
        ramp_per_sec: load.ramp,
        storm_concurrency: load.storm_concurrency,
        request: load.message.clone(),
        shard: None,
        more_server_pids: Vec::new(),
        script,
        tls,
        disrupt,
        host_watch: Some(crate::selftest::host_watch::HostWatch {
            words: load.host_words.clone().unwrap_or_default(),
            ports: vec![port],
            remote,
        }),
    };
    opts.shard = load.shard.map(|s| Shard {
        slot_secs: crate::selftest::slot::slot_secs(&opts, total_conns),
        ..s
    });
    Ok(LoadPlan {
        judging: Judging {
            accept_noise: load.accept_noise,
            thresholds: load.thresholds.clone(),
            no_default_checks: load.no_default_checks,
        },
        url: target_url(&opts.target),
        opts,
        scenarios,
        targets: Targets {
            profile: profile.name.clone(),
            connections: profile.connections as usize,
            estimate: report::MemoryEstimate::of(profile),
            cpu: report::CpuTarget::of(profile),
            p99_ms: t.p99_ms as f64,
            rate_per_client: rate,
            payload_bytes: size,
            restart: t.restart.clone(),
        },
        scaled_down,
        rate_note,
        server_processes: defaults.server_processes,
        deflate_conns: defaults.deflate_conns,
        probe: false,
    })
}

/// The scenarios the server behind the plan's URLs cannot serve, each with what to run
/// instead (see `selftest::probe`). One probe per URL; none for a scenario any WebSocket
/// server serves (idle, tls-handshake, restart).
async fn refusals(p: &LoadPlan) -> Vec<Refusal> {
    use crate::selftest::script::Step;
    let needs = probe::Needs {
        request: p.opts.request.is_some(),
        script_channels: p.opts.script.as_ref().is_some_and(|s| {
            s.populations.iter().any(|pop| {
                pop.steps
                    .iter()
                    .any(|st| matches!(st, Step::Send { text } if probe::is_channels_request(text)))
            })
        }),
    };
    let mut seen: Vec<(String, Option<probe::Kind>)> = Vec::new();
    let mut out = Vec::new();
    for &s in &p.scenarios {
        if !probe::depends_on_kind(s) {
            continue;
        }
        let target = if s.fans_out() {
            &p.opts.broadcast_target
        } else {
            &p.opts.target
        };
        let url = target_url(target);
        let kind = match seen.iter().find(|(u, _)| *u == url) {
            Some((_, k)) => *k,
            None => {
                let k = probe::kind(target, p.opts.tls.as_ref()).await;
                seen.push((url.clone(), k));
                k
            }
        };
        if let Some(r) = kind.and_then(|k| probe::refusal(s, k, &url, &needs)) {
            out.push(r);
        }
    }
    out
}

/// The seconds a scenario of the plan takes, about: its connections opened, the warm-up, the
/// window, and the closing and settling after it.
fn scenario_secs(p: &LoadPlan, s: Scenario) -> f64 {
    let conns = match p.deflate_conns {
        Some(n) if s.negotiates_deflate() => n,
        _ => p.opts.conns,
    } as f64;
    // ~10,000 handshakes/s with the generator and the server on one 2-core host (README's
    // self-test measured 12,900/s at 100k), and about five times that to close them.
    const CONNECTS_PER_SEC: f64 = 10_000.0;
    let connect = if p.opts.connects_in_window(s) {
        0.0
    } else {
        0.5 + conns / CONNECTS_PER_SEC
    };
    let window = if s.lasts_until_done() {
        (conns / CONNECTS_PER_SEC).max(1.0)
    } else {
        p.opts.secs
    };
    connect + p.opts.warmup_for(s) + window + 1.0 + conns / (5.0 * CONNECTS_PER_SEC)
}

/// "0.5 s", "40 s", "2 min 10 s".
fn duration_words(secs: f64) -> String {
    if secs < 10.0 && secs.fract() != 0.0 {
        return format!("{secs:.1} s");
    }
    let s = secs.round().max(1.0) as u64;
    if s < 120 {
        format!("{s} s")
    } else if s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// What the run will do, before it starts (on stderr): each scenario in order with its
/// connections and durations, and about how long the whole run takes.
pub fn plan_text(p: &LoadPlan) -> String {
    use crate::output::thousands;
    let total: f64 = p.scenarios.iter().map(|&s| scenario_secs(p, s)).sum();
    let o = &p.opts;
    let mut out = format!(
        "wstune: self-test of {}, profile {}: {} scenario{}, about {} (longer if a noisy \
         window is measured again)\n",
        p.url,
        p.targets.profile,
        p.scenarios.len(),
        if p.scenarios.len() == 1 { "" } else { "s" },
        duration_words(total)
    );
    let width = p
        .scenarios
        .iter()
        .map(|s| s.name().len())
        .max()
        .unwrap_or(0);
    for (i, &s) in p.scenarios.iter().enumerate() {
        let conns = match p.deflate_conns {
            Some(n) if s.negotiates_deflate() => n,
            _ => o.conns,
        };
        let n = thousands(conns as u64);
        let warm = o.warmup_for(s);
        let window = if warm > 0.0 {
            format!(
                "{} warm-up + {}",
                duration_words(warm),
                duration_words(o.secs)
            )
        } else {
            duration_words(o.secs)
        };
        let what = s.workload().plan_line(&n, &window, o);
        out.push_str(&format!("  {}. {:<width$}  {what}\n", i + 1, s.name()));
    }
    out
}

/// Where progress goes: a line per scenario's start and result when standard error is not a
/// terminal (a CI log), where the progress bars are hidden.
fn progress_lines() -> bool {
    use std::io::IsTerminal;
    !std::io::stderr().is_terminal()
}

/// One scenario's result in a line: its word (from its own checks), its key figures.
fn result_line(r: &crate::selftest::ScenarioReport, p: &LoadPlan, took: f64) -> String {
    let v = report::verdict(std::slice::from_ref(r), &p.targets, &p.judging);
    let own: Vec<&report::Check> = v
        .checks
        .iter()
        .filter(|c| c.scenario == r.scenario)
        .collect();
    let missed: Vec<&str> = own
        .iter()
        .filter(|c| c.judged && !c.ok)
        .map(|c| c.what.as_str())
        .collect();
    let word = if !missed.is_empty() {
        format!("MISS ({})", missed.join(", "))
    } else if own.iter().any(|c| !c.judged) {
        "NOT PROVEN".to_string()
    } else {
        "ok".to_string()
    };
    // Each scenario's own figures under their own names: a storm's rate is handshakes, a
    // broadcast's deliveries, and an idle run has neither.
    let p99 = report::ms_words(r.latency_ms.p99);
    let rate = report::rate_words(r.achieved_rate);
    let figures = r.scenario.workload().result_figures(&p99, &rate);
    format!(
        "{word} in {}: {}/{} connected{figures}, {} errors",
        duration_words(took),
        crate::output::thousands(r.conns_connected as u64),
        crate::output::thousands(r.conns_requested as u64),
        crate::output::thousands(r.errors)
    )
}

/// Run the scenarios in order. A scenario that cannot start (nothing connects) ends the run:
/// the report holds what was measured before it, and the error says why.
pub async fn execute(p: &LoadPlan) -> (Report, Option<anyhow::Error>) {
    let mut done = Vec::new();
    let mut error = None;
    let refused = if p.probe {
        refusals(p).await
    } else {
        Vec::new()
    };
    let lines = progress_lines();
    if refused.is_empty() {
        eprint!("{}", plan_text(p));
    }
    let n = p.scenarios.len();
    let run = if refused.is_empty() {
        &p.scenarios[..]
    } else {
        &[]
    };
    for (i, &s) in run.iter().enumerate() {
        if i > 0 {
            settle(&p.opts).await;
        }
        let started = std::time::Instant::now();
        if lines {
            eprintln!("wstune: [{}/{n}] {}: started", i + 1, s.name());
        }
        let before = done.len();
        let opts = match p.deflate_conns {
            Some(n) if s.negotiates_deflate() => RunPlan {
                conns: n,
                ..p.opts.clone()
            },
            _ => p.opts.clone(),
        };
        match run_scenario(&opts, s).await {
            // A shard never measures twice: the others would run on without it.
            Ok(r) if p.opts.shard.is_none() && needs_remeasure(&r, p.judging.accept_noise) => {
                // Too noisy to judge: measured once more, after the host had a moment. The
                // last measurement is the one judged; the first stays in `attempts`, so the
                // run-to-run spread is in the report.
                settle(&p.opts).await;
                let first = r;
                match run_scenario(&opts, s).await {
                    Ok(mut again) => {
                        again.attempts.push(attempt(&first, &p.targets, &p.judging));
                        done.push(again);
                    }
                    Err(_) => done.push(first),
                }
            }
            Ok(r) => done.push(r),
            Err(e) => {
                error = Some(e.context(format!("scenario {}", s.name())));
                break;
            }
        }
        if let (true, Some(r)) = (lines && done.len() > before, done.last()) {
            eprintln!(
                "wstune: [{}/{n}] {}: {}",
                i + 1,
                s.name(),
                result_line(r, p, started.elapsed().as_secs_f64())
            );
        }
    }
    let verdict = report::verdict(&done, &p.targets, &p.judging);
    let report = Report {
        schema_version: report::SCHEMA_VERSION,
        url: p.url.clone(),
        program: None,
        skipped: Vec::new(),
        refused,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        targets: p.targets.clone(),
        conns: p.opts.conns,
        scaled_down: p.scaled_down.clone(),
        rate_note: p.rate_note.clone(),
        server_processes: p.server_processes,
        memory: report::MemoryReport::of(&done, &p.targets.estimate),
        capacity: report::CapacityReport::of(
            &done,
            &p.targets.cpu,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
        memory_budget: None,
        host_check: None,
        shard: p.opts.shard,
        merged_from: None,
        baseline: None,
        scenarios: done,
        verdict,
    };
    (report, error)
}

/// A timed scenario whose window was too noisy to judge is measured once more (never more:
/// a host that stays busy gets NOT PROVEN, and the run stays bounded).
fn needs_remeasure(r: &crate::selftest::ScenarioReport, accept_noise: bool) -> bool {
    !accept_noise
        && r.scenario.timed()
        && r.incomplete.is_none()
        && r.disturbance.as_ref().is_some_and(|d| d.too_noisy)
}

/// The figures of a measurement that was repeated, for the report's run-to-run spread.
fn attempt(
    r: &crate::selftest::ScenarioReport,
    t: &Targets,
    j: &Judging,
) -> crate::selftest::Attempt {
    let all = Judging {
        accept_noise: true,
        ..j.clone()
    };
    let judged = report::verdict(std::slice::from_ref(r), t, &all);
    crate::selftest::Attempt {
        p99_ms: r.latency_ms.p99,
        service_p99_ms: r.service_latency_ms.as_ref().map(|l| l.p99),
        achieved_rate: r.achieved_rate,
        server_cpu_pct: r.server.as_ref().map(|s| s.cpu_pct),
        disturbance: r.disturbance.clone(),
        missed: judged
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.clone())
            .collect(),
    }
}

/// Wait (at most 20 s) until the previous scenario's sockets are mostly gone and the server is
/// quiet again: at 100k connections their closes take seconds, and the next scenario would
/// otherwise open its connections (and measure the server) while the kernel and the server
/// still tear them down.
async fn settle(o: &crate::selftest::RunPlan) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_for_sockets(o.conns, deadline).await;
    crate::selftest::quiesce(o, deadline - tokio::time::Instant::now()).await;
}

async fn wait_for_sockets(conns: usize, deadline: tokio::time::Instant) {
    let Some(start) = crate::selftest::kernel_sample() else {
        return;
    };
    // Both ends of each loopback connection are sockets here; a tenth of them may linger.
    let quiet = (conns as u64 / 5).max(200);
    let mut now = start;
    while now.tcp_inuse > quiet && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        match crate::selftest::kernel_sample() {
            Some(k) => now = k,
            None => return,
        }
    }
}

/// Print the report, write the HTML page and the Prometheus file, and conclude: Ok on a pass, Failed on a miss (or a
/// partial run), an error when nothing could be measured.
pub fn finish(report: &Report, error: Option<anyhow::Error>, load: &Load) -> Result<Outcome> {
    let owned;
    let report = if load.baseline.is_some() || !report.refused.is_empty() {
        let mut r = report.clone();
        if let Some(b) = &load.baseline {
            r.baseline = Some(b.clone());
        }
        if !r.refused.is_empty() {
            // Nothing ran: no verdict of the load's (combined with the host's or not) stands.
            let v = &mut r.verdict;
            v.pass = false;
            v.load_pass = false;
            v.inconclusive = false;
            v.summary = format!(
                "NOT RUN: {}",
                r.refused
                    .iter()
                    .map(|x| x.line())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        owned = r;
        &owned
    } else {
        report
    };
    if report.scenarios.is_empty() && report.refused.is_empty() {
        if let Some(e) = error {
            return Err(e);
        }
    }
    let stopped = error.as_ref().map(|e| format!("{e:#}"));
    let text = if load.html {
        report::html(report, stopped.as_deref())
    } else {
        match load.format {
            ListFormat::Json => serde_json::to_string_pretty(report)? + "\n",
            ListFormat::Table => report::table(report, &table_layout(load)),
        }
    };
    // A refusal is the error's to say on a terminal; a file or JSON carries it too.
    let refused_table = !report.refused.is_empty()
        && !load.html
        && load.format == ListFormat::Table
        && load.output.is_none();
    if !refused_table {
        crate::output::emit(load.output.as_deref(), &text)?;
    }
    if let Some(path) = &load.output {
        eprintln!("wstune: wrote {}", path.display());
    }
    if let Some(path) = &load.report {
        crate::output::write_atomic(path, &report::html(report, stopped.as_deref()))?;
        eprintln!("wstune: wrote {}", path.display());
    }
    if let Some(path) = &load.out_prometheus {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        crate::output::write_atomic(path, &report::prometheus(report, stopped.as_deref(), now))?;
        eprintln!("wstune: wrote {}", path.display());
    }
    if !report.refused.is_empty() {
        // Nothing ran: the command as given cannot work against this server (a usage error,
        // exit 3, as an unreachable URL is), not a run that could not be judged (4).
        bail!(
            "{}\nnothing was run: one message to the server before the load showed it",
            report
                .refused
                .iter()
                .map(|r| r.message())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    if let Some(e) = error {
        eprintln!("wstune: error: {e:#}");
        eprintln!("  the report above covers the scenarios that ran before it");
        return Ok(Outcome::Failed);
    }
    Ok(if report.verdict.pass {
        Outcome::Ok
    } else if report.verdict.inconclusive {
        Outcome::Inconclusive
    } else {
        Outcome::Failed
    })
}

/// The summary's layout: the terminal's width on one (the table where it fits, else a block
/// per scenario, every line fitting it); piped or in a file, blocks unless `--format table`
/// asked for the table ($COLUMNS or 160 columns wide), lines kept whole for grep.
fn table_layout(load: &Load) -> report::Layout {
    use std::io::IsTerminal;
    let tty = load.output.is_none() && std::io::stdout().is_terminal();
    let width = if tty {
        comfy_table::Table::new()
            .width()
            .unwrap_or_else(crate::output::table_width)
    } else {
        crate::output::table_width()
    };
    report::Layout {
        wrap: tty,
        ..report::Layout::for_width(width as usize, tty || load.table_asked)
    }
}

/// Whether `ip` is one of this host's addresses: loopback, or one a socket can be bound to
/// (the kernel binds only its own addresses). A self-test of a server elsewhere watches the
/// generator's host, and says so.
fn on_this_host(ip: std::net::IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}
