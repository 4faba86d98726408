//! The load-test side, resolved: `selftest` (its load, script, thresholds and baseline),
//! `report watch|merge` and `pool`. `load` is shared with `serve --self-test`.

use super::*;

pub fn selftest(a: &SelftestArgs) -> Result<cmd::selftest::Request> {
    let profile = crate::profile::load(&a.profile)?.profile;
    let target = Url::parse(&a.url).map_err(anyhow::Error::msg)?;
    let broadcast = match &a.broadcast_url {
        Some(u) => Url::parse(u).map_err(anyhow::Error::msg)?,
        None => target.clone(),
    };
    for &pid in &a.pid {
        if crate::selftest::sample(pid).is_none() {
            bail!("--pid {pid}: no such process readable in /proc; give the server's pid or leave it out");
        }
    }
    let subscribe = a
        .subscribe_url
        .iter()
        .map(|u| Url::parse(u).map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let mut load = load(&a.load)?;
    // The advice's words come from checking this machine, where the run goes.
    load.host_words =
        crate::engine::selftest::host_words(&a.profile, &crate::host::Machine::live());
    if let Some(path) = &a.script {
        script(path, &mut load)?;
    }
    load.shard = match (&a.shard, &a.start_at) {
        (None, None) => None,
        (Some(_), None) => bail!(
            "--shard needs --start-at: every shard must start its load at the same moment; give \
             them all the same --start-at $(( $(date +%s) + 60 ))"
        ),
        (None, Some(_)) => bail!("--start-at only means something with --shard I/N"),
        (Some(s), Some(at)) => {
            use crate::selftest::shard;
            let (index, count) = shard::parse_index(s).map_err(anyhow::Error::msg)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            Some(shard::Shard {
                index,
                count,
                start_at_unix_ms: shard::parse_start(at, now).map_err(anyhow::Error::msg)?,
                slot_secs: 0.0,
            })
        }
    };
    Ok(cmd::selftest::Request {
        profile,
        target,
        broadcast,
        subscribe,
        pids: a.pid.clone(),
        deflate: a.deflate,
        probe: !a.no_probe,
        load,
    })
}

pub fn report_watch(a: &args::ReportWatchArgs) -> Result<cmd::report::WatchRequest> {
    if let Some(path) = &a.output {
        crate::output::check_writable(path, "--output")?;
    }
    Ok(cmd::report::WatchRequest {
        file: a.file.clone(),
        output: a.output.clone(),
    })
}

pub fn report_merge(a: &args::ReportMergeArgs) -> Result<cmd::report::MergeRequest> {
    if let Some(path) = &a.report {
        crate::output::check_writable(path, "--report")?;
    }
    if let Some(path) = &a.out_prometheus {
        crate::output::check_writable(path, "--out-prometheus")?;
    }
    Ok(cmd::report::MergeRequest {
        files: a.files.clone(),
        partial: a.partial,
        load: Load {
            thresholds: dedup(&a.thresholds),
            no_default_checks: a.no_default_checks,
            accept_noise: a.accept_noise,
            format: a.format,
            report: a.report.clone(),
            out_prometheus: a.out_prometheus.clone(),
            baseline: baseline(a.baseline.as_deref())?,
            ..Load::default()
        },
    })
}

pub fn pool(a: &PoolArgs) -> Result<cmd::pool::Request> {
    use embedded_server::SimulatedWork;
    let host_cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // A host's own count is never refused (it is clamped); a given one past the ceiling is.
    let cores = a.cores.unwrap_or(host_cores.min(crate::pool::MAX_CORES));
    crate::pool::check_cores(cores).map_err(anyhow::Error::msg)?;
    if !(a.secs.is_finite() && a.secs > 0.0 && a.secs <= 600.0) {
        bail!(
            "--secs {}: give more than 0 and at most 600 seconds",
            a.secs
        );
    }
    if a.conns == 0 || a.conns > 100_000 {
        bail!("--conns {}: give 1..=100000 connections", a.conns);
    }
    let handler = match &a.handler {
        Some(h) => Some(SimulatedWork::parse(h).map_err(|e| anyhow::anyhow!("--handler: {e}"))?),
        None => None,
    };
    if let Some(SimulatedWork::Echo) = handler {
        bail!("--handler echo runs inline on the I/O threads: there is no pool to size; give cpu:, block: or both");
    }
    let sizes: Vec<u64> = a
        .sizes
        .split(',')
        .map(|s| match s.trim().parse::<u64>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(n),
            _ => bail!("--sizes: '{s}' is not a pool size 1..=4096 (e.g. --sizes 2,4,8,16)"),
        })
        .collect::<Result<_>>()?;
    if let Some(path) = &a.write_profile {
        // A bad --profile or an unwritable OUT fails before any work.
        crate::profile::load(&a.profile)?;
        crate::output::check_writable(path, "--write-profile")?;
    }
    Ok(cmd::pool::Request {
        blocking_ms: a.blocking_ms,
        cpu_ms: a.cpu_ms,
        cores,
        measure: a.measure,
        sweep: a.sweep,
        handler,
        command: a
            .command
            .as_deref()
            .map(crate::selftest::command::parse)
            .transpose()?,
        message: a.message.clone(),
        user_config: match &a.command {
            Some(_) => Some(serve::profile_server_config(&a.profile)?),
            None => None,
        },
        url: a.url.clone(),
        admin: a.admin.clone(),
        sizes,
        conns: a.conns,
        secs: a.secs,
        profile: a.profile.clone(),
        write_profile: a.write_profile.clone(),
        format: a.format,
    })
}

/// The same threshold given twice is judged (and exported as a Prometheus series) once.
fn dedup(
    given: &[crate::selftest::threshold::Threshold],
) -> Vec<crate::selftest::threshold::Threshold> {
    let mut out: Vec<crate::selftest::threshold::Threshold> = Vec::new();
    for t in given {
        if !out.iter().any(|x| x.text == t.text) {
            out.push(t.clone());
        }
    }
    out
}

/// `--script FILE`: the populations and steps, every problem named with its line before
/// anything connects; the run's scenario, connections, duration, ramp and thresholds follow.
fn script(path: &Path, load: &mut Load) -> Result<()> {
    use crate::selftest::{script, Scenario};
    if !load.scenarios.is_empty() {
        bail!("--script runs its own populations: drop --scenario");
    }
    if load.conns.is_some() {
        bail!("--script gives each population its conns: drop --conns");
    }
    const MAX_SCRIPT_BYTES: u64 = 1 << 20;
    let file = path.display().to_string();
    let text = crate::host::input::read_bounded(path, MAX_SCRIPT_BYTES, None)
        .map_err(|e| anyhow::anyhow!("--script {file}: {}", e.words()))?;
    let tokens = ScriptTokens {
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        env_secret: std::cell::RefCell::new(None),
    };
    let (s, f) = script::parse(&text, &file, &tokens).map_err(anyhow::Error::msg)?;
    load.conns = Some(s.conns());
    load.scenarios = vec![Scenario::scripted()];
    if load.secs.is_none() {
        load.secs = s.stages_secs().or(f.duration.map(|d| d.as_secs_f64()));
    } else if s.stages_secs().is_some() {
        bail!("--script {file}: its stages say how long the run takes: drop --secs");
    }
    if let Some(r) = f.ramp {
        load.ramp = s.conns() as f64 / r.as_secs_f64();
    }
    for t in &f.thresholds {
        let t: crate::selftest::threshold::Threshold = t.parse().map_err(anyhow::Error::msg)?;
        // Given in the file and on the command line: judged (and exported) once.
        if !load.thresholds.iter().any(|x| x.text == t.text) {
            load.thresholds.push(t);
        }
    }
    load.script = Some(s);
    Ok(())
}

/// A script's tokens: files read beside the script, tokens minted as `wstune token` does.
struct ScriptTokens {
    dir: std::path::PathBuf,
    /// `$WSTUNE_AUTH_SECRET`, taken out of the environment once for every population.
    env_secret: std::cell::RefCell<Option<String>>,
}

impl crate::selftest::script::Tokens for ScriptTokens {
    fn read(&self, path: &str) -> std::result::Result<String, String> {
        let p = self.dir.join(path);
        crate::host::input::read_bounded(&p, 64 << 10, None)
            .map(|t| t.trim().to_string())
            .map_err(|e| format!("file {}: {}", p.display(), e.words()))
    }

    fn mint(
        &self,
        m: &crate::selftest::script::MintFile,
        secret_file: Option<&str>,
    ) -> std::result::Result<String, String> {
        use crate::serve::config::ENV_AUTH_SECRET;
        let (secret, from) = match secret_file {
            Some(f) => {
                let p = self.dir.join(f);
                let s = crate::host::read_secret_file(&p)
                    .map_err(|e| format!("secret_file {}: {e}", p.display()))?;
                (s, format!("secret_file {}", p.display()))
            }
            None => {
                let mut cached = self.env_secret.borrow_mut();
                if cached.is_none() {
                    *cached = crate::host::take_env(ENV_AUTH_SECRET)?;
                }
                let s = cached.clone().ok_or(
                    "mint needs the server's secret: give secret_file or set $WSTUNE_AUTH_SECRET",
                )?;
                (s, format!("${ENV_AUTH_SECRET}"))
            }
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        cmd::token::mint(&cmd::token::Request {
            secret: secret.trim_end_matches(['\n', '\r']).to_string(),
            secret_from: from,
            channels: m.channels.clone(),
            publish: m.publish.clone(),
            ttl_secs: m.ttl.map_or(3600, |d| d.as_secs().max(1)),
            aud: None,
            sub: None,
            max_lifetime: None,
            now,
        })
        .map_err(|e| format!("{e:#}"))
    }
}

/// `--baseline FILE`: an earlier self-test's JSON report, read and checked now, before any
/// connection.
fn baseline(path: Option<&Path>) -> Result<Option<crate::selftest::report::Baseline>> {
    use crate::selftest::report;
    const MAX_REPORT_BYTES: u64 = 64 << 20;
    let Some(path) = path else { return Ok(None) };
    let file = path.display().to_string();
    let text = crate::host::input::read_bounded(path, MAX_REPORT_BYTES, None)
        .map_err(|e| anyhow::anyhow!("--baseline {file}: {}", e.words()))?;
    let old = report::parse(&text).map_err(|e| {
        anyhow::anyhow!(
            "--baseline {file}: not a self-test JSON report ({e}); give the output of an earlier \
             `wstune selftest --format json`"
        )
    })?;
    Ok(Some(
        report::Baseline::of(&old, &file).map_err(anyhow::Error::msg)?,
    ))
}

pub(super) fn load(l: &LoadArgs) -> Result<Load> {
    Ok(Load {
        scenarios: l.scenarios.clone(),
        conns: l.conns,
        rate: l.rate,
        size: l.size,
        secs: l.secs,
        warmup: l.warmup,
        inflight: l.inflight,
        rounds: l.rounds,
        generators: l.generators,
        sources: l.sources,
        src_ips: l.src_ips.clone(),
        ramp: l.ramp,
        storm_concurrency: l.storm_concurrency,
        message: l.message.clone(),
        accept_noise: l.accept_noise,
        thresholds: dedup(&l.thresholds),
        no_default_checks: l.no_default_checks,
        shard: None,
        format: match load_format(l) {
            LoadFormat::Json => ListFormat::Json,
            LoadFormat::Table | LoadFormat::Html => ListFormat::Table,
        },
        html: load_format(l) == LoadFormat::Html,
        output: l.output.clone(),
        table_asked: l.format == Some(LoadFormat::Table),
        report: l.report.clone(),
        baseline: baseline(l.baseline.as_deref())?,
        script: None,
        out_prometheus: l.out_prometheus.clone(),
        tls: crate::engine::selftest::TlsLoad {
            ca: l.tls.ca.clone(),
            ca_pem: None,
            insecure: l.tls.insecure,
            resume: l.tls.tls_resume,
        },
        restart: crate::selftest::restart::RestartAsk {
            by: l.restart_by.clone().or_else(|| {
                l.restart_cmd
                    .clone()
                    .map(crate::selftest::restart::RestartBy::Command)
            }),
            drain_url: l.drain_url.clone(),
            disrupt: None,
        },
        // Filled in by the command that knows the profile (`selftest`, `serve --self-test`).
        host_words: None,
    })
}

/// The self-test report's format: `--format`, else the `-o` file's extension, else a table.
fn load_format(l: &LoadArgs) -> LoadFormat {
    l.format
        .or_else(|| l.output.as_deref().and_then(LoadFormat::of_path))
        .unwrap_or(LoadFormat::Table)
}
