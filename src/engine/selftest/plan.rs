//! The plan: the load settings validated and sized to this host's limits (generator
//! processes, source addresses, broadcast rounds), and its words before the run starts.

use super::{tls_client, Load};
use crate::profile::Profile;
use crate::selftest::client::Target;
use crate::selftest::report::{self, Judging, Targets};
use crate::selftest::restart::Disrupt;
use crate::selftest::script::Script;
use crate::selftest::shard::Shard;
use crate::selftest::threshold::Scope;
use crate::selftest::{sizing, target_url, RunPlan, Scenario};
use anyhow::{bail, Result};
use std::net::IpAddr;

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
    /// The machine the run measures, made once by the command.
    pub machine: crate::host::Machine,
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
    let conns = shard_conns(load, conns, script.as_ref())?;
    check_settings(load, rate, size, secs)?;
    let workers = generator_processes(load, conns, rate)?;
    let sources = source_addrs(load, &defaults.machine, &target, conns)?;
    let mut scenarios = load.scenarios.clone();
    if scenarios.is_empty() {
        scenarios = defaults.scenarios;
    }
    // A fixed order: idle first, while the server's memory is fresh (an allocator keeps
    // what earlier scenarios freed, which would hide the per-connection cost), then the
    // rate-limited runs before the ones that saturate.
    scenarios.sort_by_key(|s| *s as u8);
    scenarios.dedup();
    check_thresholds(load, &scenarios)?;
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
    let disrupt = disruption(load, &scenarios)?;
    let rate_note = match (rate_note, rounds_note) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    let port = target.addr.port();
    let remote = !on_this_host(target.addr.ip());
    let mut opts = RunPlan {
        machine: defaults.machine,
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

/// A shard's slice of `conns` (or of the script's populations); the whole count unsharded.
fn shard_conns(load: &Load, conns: usize, script: Option<&Script>) -> Result<usize> {
    Ok(match &load.shard {
        Some(s) if script.is_some_and(|sc| sc.conns() == 0) => bail!(
            "--shard {}/{}: the script's populations leave this shard no connection; give \
             each population at least one connection per shard",
            s.index,
            s.count
        ),
        Some(_) if script.is_some() => script.map_or(0, |s| s.conns()),
        Some(s) if s.share(conns) == 0 => bail!(
            "--shard {}/{}: --conns {conns} leaves this shard no connection; give at least one \
             connection per shard",
            s.index,
            s.count
        ),
        Some(s) => s.share(conns),
        None => conns,
    })
}

/// The flags' bounds, and the report paths writable, before anything runs.
fn check_settings(load: &Load, rate: f64, size: usize, secs: f64) -> Result<()> {
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
    Ok(())
}

/// How many generator processes open `conns` connections sending `rate` messages per second
/// each: enough for the open files (`--generators` or the limits), and for the sends.
fn generator_processes(load: &Load, conns: usize, rate: f64) -> Result<usize> {
    // Limits: every generator process may open as many files as this one (raised to its hard
    // limit first); ports per loopback source from the ephemeral range.
    let (soft, _hard) = crate::host::raise_nofile();
    let workers = sizing::workers_for(conns, soft, load.generators).map_err(anyhow::Error::msg)?;
    // Each send is a wake-up of its own (independent arrivals), so one generator process keeps
    // its schedule up to ~15,000 sends/s (77 % of a core on the development VM) and pauses for
    // milliseconds near 25,000/s (93 %): past SENDS_PER_GENERATOR the open-loop load is spread
    // over more processes, as many as the cores this process may run on.
    Ok(if load.generators == 0 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let by_rate = (conns as f64 * rate / SENDS_PER_GENERATOR).ceil() as usize;
        workers.max(by_rate.min(cores).min(conns))
    } else {
        workers
    })
}

/// The source addresses the connections are opened from (`--src-ips`, checked to be this
/// host's, or the loopback addresses `sizing` picks).
fn source_addrs(
    load: &Load,
    machine: &crate::host::Machine,
    target: &Target,
    conns: usize,
) -> Result<Vec<IpAddr>> {
    // Ports for twice the count: the previous scenario's connections are still closing
    // (FIN_WAIT, TIME_WAIT) while the next one opens its own, and 100k of them take seconds
    // to go; sized for one scenario, the second one met EADDRNOTAVAIL at ~99.6%.
    if load.src_ips.is_empty() {
        sizing::sources_for(
            target.addr.ip(),
            conns.saturating_mul(2),
            sizing::ephemeral_ports(machine),
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
            sizing::ephemeral_ports(machine),
        )
    }
    .map_err(anyhow::Error::msg)
}

/// A threshold on a scenario that will not run would never be judged: refused now, before
/// any connection, rather than leaving the run NOT PROVEN after minutes of load.
fn check_thresholds(load: &Load, scenarios: &[Scenario]) -> Result<()> {
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
    Ok(())
}

/// How the restart scenario disrupts the server, refused when it is missing for a run with
/// restart, or given for a run without it.
fn disruption(load: &Load, scenarios: &[Scenario]) -> Result<Option<Disrupt>> {
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
    Ok(disrupt)
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
pub(super) fn duration_words(secs: f64) -> String {
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

/// Whether `ip` is one of this host's addresses: loopback, or one a socket can be bound to
/// (the kernel binds only its own addresses). A self-test of a server elsewhere watches the
/// generator's host, and says so.
fn on_this_host(ip: std::net::IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}
