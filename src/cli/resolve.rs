//! Args -> one typed request per command: the profile loaded, the catalog for the host's
//! platform, the backend and the journal's store, every flag checked and turned into the
//! library's own types. Every input is validated here, before anything runs, so a bad flag is
//! one clear error; commands (`cmd::*`) receive these values and never see clap's structs.

use super::args::{
    self, ApplyArgs, BenchDeflateArgs, CheckArgs, ExportArgs, ExportFormat, LbArgs, LoadArgs,
    PoolArgs, ProfilesArgs, ProfilesCommand, RollbackArgs, SelftestArgs, SnapshotArgs, TargetArgs,
    WatchArgs,
};
use crate::cmd;

mod serve;
use super::args::LoadFormat;
use crate::engine::check::{self, HostInputs, LbConfig, Target};
use crate::engine::selftest::Load;
use crate::host::layout::Layout;
use crate::host::store::Store;
use crate::host::Backend;
use crate::report::{self, ListFormat};
use crate::selftest::client::Target as Url;
use anyhow::{bail, Result};
pub use serve::serve;
use std::path::Path;
use std::time::Duration;

pub fn check(a: &CheckArgs) -> Result<cmd::check::Request> {
    let (backend, store) = host_and_store(a.root.as_deref(), a.prefix.as_deref())?;
    let mut inputs = check::inputs(&target(&a.target), backend.as_ref())?;
    inputs.options.watch = a.watch.map(Duration::from_secs);
    let lb = match &a.lb_config {
        Some(path) => Some(LbConfig {
            path: path.clone(),
            text: read_lb_config(path)?,
            pid: a.lb_pid,
        }),
        None => None,
    };
    Ok(cmd::check::Request {
        host: HostInputs { inputs, backend },
        store,
        format: match a.format {
            None if a.compact => cmd::check::Shape::Blocks,
            None => cmd::check::Shape::Auto,
            Some(args::Format::Table) => cmd::check::Shape::Table,
            Some(args::Format::Json) => cmd::check::Shape::Machine(report::Format::Json),
            Some(args::Format::Junit) => cmd::check::Shape::Machine(report::Format::Junit),
            Some(args::Format::Prometheus) => {
                cmd::check::Shape::Machine(report::Format::Prometheus)
            }
        },
        why: a.why,
        strict: a.strict,
        show: match a.show {
            args::ShowArg::Problems => report::Show::Problems,
            args::ShowArg::All => report::Show::All,
        },
        output: a.output.clone(),
        lb,
    })
}

pub fn explain(a: &args::ExplainArgs) -> cmd::explain::Request {
    cmd::explain::Request {
        query: a.id.clone(),
        json: a.format == args::ListFormat::Json,
        width: crate::terminal::columns().unwrap_or_else(crate::output::table_width),
    }
}

pub fn watch(a: &WatchArgs) -> Result<cmd::watch::Request> {
    let backend = open(&crate::host::layout(None, None))?;
    // A --pid that names no process is a note in every frame, not an error: a watch started
    // before a restart, or with a stale PID, still shows the host while the operator looks
    // again. Only the checks' own view of the process is left out.
    let t = Target {
        profile: a.profile.clone(),
        pid: a.pid.filter(|p| backend.process_exists(*p)),
        unit: None,
        catalog: a.catalog.clone(),
        role: None,
    };
    let inputs = check::inputs(&t, backend.as_ref())?;
    let scraper = match &a.admin {
        Some(spec) => Some(crate::watch::server::Scraper::new(spec).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let serve = match &a.serve {
        Some(addr) => Some(addr.parse::<std::net::SocketAddr>().map_err(|_| {
            anyhow::anyhow!("--serve {addr}: not an address; give host:port, e.g. 127.0.0.1:9977")
        })?),
        None => None,
    };
    if let Some(path) = &a.record {
        if path.is_dir() {
            bail!(
                "--record {}: is a directory; give a file to write the recording to",
                path.display()
            );
        }
    }
    use std::io::IsTerminal;
    let view = if serve.is_some() {
        cmd::watch::ViewKind::Headless
    } else if a.format.is_some() {
        cmd::watch::ViewKind::Json
    } else if a.plain || !std::io::stdout().is_terminal() {
        cmd::watch::ViewKind::Plain
    } else {
        cmd::watch::ViewKind::Screen
    };
    Ok(cmd::watch::Request {
        host: HostInputs { inputs, backend },
        scope: crate::watch::sample::Scope {
            ports: a.port.clone(),
            pid: a.pid,
            no_connection_walk: false,
        },
        scraper,
        interval: Duration::from_secs_f64(a.interval),
        count: a.count,
        view,
        record: a.record.clone(),
        serve,
    })
}

/// `--lb-config FILE` through the one bounded reader: a FIFO or a device named by mistake is
/// refused at once instead of blocking or filling memory.
fn read_lb_config(path: &Path) -> Result<String> {
    use crate::host::input::read_bounded;
    // A proxy configuration with includes inlined stays far below this.
    const MAX_LB_CONFIG_BYTES: u64 = 16 << 20;
    read_bounded(path, MAX_LB_CONFIG_BYTES, None).map_err(|r| {
        anyhow::anyhow!(
            "--lb-config {}: {}; give the proxy's configuration file",
            path.display(),
            r.words()
        )
    })
}

pub fn apply(a: &ApplyArgs) -> Result<cmd::apply::Request> {
    let (backend, store) = host_and_store(a.root.as_deref(), a.prefix.as_deref())?;
    let mut inputs = check::inputs(&target(&a.target), backend.as_ref())?;
    inputs.options.watch = a.watch.map(Duration::from_secs);
    refuse_unit_without_systemd(a.target.unit.as_deref(), backend.as_ref())?;
    Ok(cmd::apply::Request {
        nics: a.nic.clone(),
        host: HostInputs { inputs, backend },
        store,
        scope: crate::apply::plan::Scope {
            runtime: !a.persist_only,
            persist: !a.runtime_only,
        },
        dry_run: a.dry_run,
        yes: a.yes,
    })
}

/// `--unit` on a host where systemd cannot be asked (not running, or a captured tree without
/// the unit): a drop-in would be planned for nothing, so say so instead of planning nothing.
fn refuse_unit_without_systemd(unit: Option<&str>, backend: &dyn Backend) -> Result<()> {
    let Some(unit) = unit else {
        return Ok(());
    };
    match backend.systemd_property(unit, "LimitNOFILE") {
        Err(crate::host::ReadError::NotFound(what)) | Err(crate::host::ReadError::Unsupported(what)) => bail!(
            "--unit {unit}: {what} does not exist, so there is no unit to give a LimitNOFILE drop-in; drop --unit and raise the server's limit in whatever starts it (or pass --pid PID for the running process). Nothing was changed."
        ),
        _ => Ok(()),
    }
}

pub fn rollback(a: &RollbackArgs) -> Result<cmd::rollback::Request> {
    let layout = crate::host::layout(a.root.as_deref(), a.prefix.as_deref());
    // Listing reads only the journal: a --root that is no host tree does not stop it.
    let action = if a.list {
        cmd::rollback::Action::List
    } else {
        cmd::rollback::Action::Restore {
            backend: open(&layout)?,
            id: a.id.clone(),
            yes: a.yes,
            force: a.force,
            keep: a.keep.clone(),
        }
    };
    Ok(cmd::rollback::Request {
        store: Store::with_layout(layout),
        action,
    })
}

pub fn export(a: &ExportArgs) -> Result<cmd::export::Request> {
    use crate::export::Format;
    let backend = backend(a.root.as_deref(), None)?;
    let t = Target {
        profile: a.profile.clone(),
        catalog: a.catalog.clone(),
        role: a.role.map(Into::into),
        ..Target::default()
    };
    let inputs = check::inputs(&t, backend.as_ref())?;
    if inputs.catalog.platform != crate::host::Platform::Linux {
        bail!(
            "export writes Linux settings; {} is not a Linux host (use `wstune apply` on Windows)",
            backend.describe().source
        );
    }
    if a.unit.is_empty() || a.unit.contains('/') {
        bail!(
            "--unit '{}': not a systemd unit name; pass e.g. --unit myserver.service",
            a.unit
        );
    }
    if !a.nics.is_empty() && !matches!(a.to, ExportFormat::Nic | ExportFormat::Ansible) {
        bail!("--nic renders a NIC's boot files, which only --to nic and --to ansible carry: drop --nic, or pass --to nic");
    }
    Ok(cmd::export::Request {
        host: HostInputs { inputs, backend },
        to: match a.to {
            ExportFormat::Sysctl => Format::Sysctl,
            ExportFormat::Limits => Format::Limits,
            ExportFormat::Systemd => Format::Systemd,
            ExportFormat::SystemdUnit => Format::SystemdUnit,
            ExportFormat::Ansible => Format::Ansible,
            ExportFormat::Kubernetes => Format::Kubernetes,
            ExportFormat::Docker => Format::Docker,
            ExportFormat::Compose => Format::Compose,
            ExportFormat::Json => Format::Json,
            ExportFormat::Nic => Format::Nic,
            ExportFormat::SelftestJob => Format::SelftestJob,
            ExportFormat::SelftestAnsible => Format::SelftestAnsible,
            ExportFormat::WatchSystemd => Format::WatchSystemd,
            ExportFormat::WatchDaemonset => Format::WatchDaemonset,
        },
        nics: a.nics.clone(),
        unit: a.unit.clone(),
        output: a.output.clone(),
        shards: shard_run(a)?,
        image: a.image.clone(),
    })
}

/// The shards' run of `--to selftest-job|selftest-ansible`: the selftest flags parsed as
/// `wstune selftest` would, so a typo fails here and not in fifty pods.
fn shard_run(a: &ExportArgs) -> Result<Option<crate::export::shards::ShardRun>> {
    let wants = matches!(
        a.to,
        ExportFormat::SelftestJob | ExportFormat::SelftestAnsible
    );
    if !wants {
        if a.shards.is_some() || !a.selftest_args.is_empty() {
            bail!("--shards and selftest flags after -- belong to --to selftest-job or selftest-ansible");
        }
        return Ok(None);
    }
    let count = match a.shards {
        Some(n) if (1..=1024).contains(&n) => n,
        Some(n) => bail!("--shards {n}: give 1..=1024 generator hosts"),
        None => bail!(
            "--to {}: give --shards N, the number of generator hosts",
            if a.to == ExportFormat::SelftestJob {
                "selftest-job"
            } else {
                "selftest-ansible"
            }
        ),
    };
    if let Some(f) = a.selftest_args.iter().find(|f| {
        ["--shard", "--start-at", "--format", "-f"]
            .iter()
            .any(|n| *f == *n || f.starts_with(&format!("{n}=")))
    }) {
        bail!("{f}: the export sets --shard, --start-at and --format json for each shard; leave it out of the selftest flags");
    }
    let argv = ["wstune", "selftest"]
        .into_iter()
        .map(String::from)
        .chain(a.selftest_args.iter().cloned());
    use clap::Parser as _;
    match args::Cli::try_parse_from(argv) {
        Ok(cli) => {
            if let args::Command::Selftest(s) = cli.command {
                if !s.pid.is_empty() {
                    bail!("--pid names a process of this host, not of the generator hosts: leave it out of the shards' flags");
                }
                if s.load.conns.is_some_and(|c| c < count) {
                    bail!("--conns {} over --shards {count} leaves a shard without a connection; give at least one per shard", s.load.conns.unwrap_or(0));
                }
                // Resolved too (profile, URLs, thresholds), as each shard will.
                selftest(&s)?;
            }
        }
        Err(e) => bail!(
            "the selftest flags after -- are not valid: {}",
            e.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
        ),
    }
    if !(10..=86_400).contains(&a.start_in) {
        bail!("--start-in {}: give 10..=86400 seconds", a.start_in);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(Some(crate::export::shards::ShardRun {
        count,
        image: a.image.clone(),
        args: a.selftest_args.clone(),
        start_at: now + a.start_in,
        start_in: a.start_in,
    }))
}

pub fn snapshot(a: &SnapshotArgs) -> cmd::snapshot::Request {
    cmd::snapshot::Request {
        out_dir: a.out_dir.clone(),
        target: target(&a.target),
    }
}

pub fn lb(a: &LbArgs) -> Result<cmd::lb::Request> {
    let profile = crate::profile::load(&a.profile)?.profile;
    let backends = crate::lb::parse_backends(&a.backends).map_err(anyhow::Error::msg)?;
    Ok(cmd::lb::Request {
        kind: a.kind,
        profile,
        options: crate::lb::ProxySpec {
            backends,
            bind: crate::lb::parse_bind(&a.bind).map_err(anyhow::Error::msg)?,
            tls_cert: a.tls_cert.clone(),
            tls_key: a.tls_key.clone(),
            sticky: a.sticky,
            check_port: a.check_port,
        },
        output: a.output.clone(),
    })
}

pub fn profiles(p: &ProfilesArgs) -> cmd::profiles::Request {
    match &p.command {
        None => cmd::profiles::Request::List {
            format: list_format(p.format),
        },
        Some(ProfilesCommand::List { format }) => cmd::profiles::Request::List {
            format: list_format(*format),
        },
        Some(ProfilesCommand::Show {
            name,
            format,
            resolved,
        }) => cmd::profiles::Request::Show {
            name: name.clone(),
            json: *format == args::ShowFormat::Json,
            resolved: *resolved,
        },
    }
}

pub fn bench_deflate(a: &BenchDeflateArgs) -> cmd::bench::DeflateRequest {
    cmd::bench::DeflateRequest {
        sizes: a.sizes.clone(),
        iterations: a.iterations,
        window_bits: a.window_bits,
        mem_level: a.mem_level,
        level: a.level,
        broadcast: a.broadcast,
        contexts: a.contexts,
        format: list_format(a.format),
    }
}

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
    load.host_words = crate::engine::selftest::host_words(&a.profile);
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

pub fn token(a: &args::TokenArgs) -> Result<cmd::token::Request> {
    use crate::serve::config::ENV_AUTH_SECRET;
    let (secret, secret_from) = match &a.secret_file {
        Some(p) => (
            crate::host::read_secret_file(p).map_err(|e| {
                anyhow::anyhow!(
                    "--secret-file {}: cannot read it ({e}); write the secret alone in that file",
                    p.display()
                )
            })?,
            format!("--secret-file {}", p.display()),
        ),
        None => match crate::host::take_env(ENV_AUTH_SECRET).map_err(anyhow::Error::msg)? {
            Some(s) => (s, format!("${ENV_AUTH_SECRET}")),
            None => bail!(
                "no secret: give --secret-file FILE (the server's --auth-secret-file) or set \
                 ${ENV_AUTH_SECRET}"
            ),
        },
    };
    let ttl_secs = humantime::parse_duration(a.ttl.trim())
        .map(|d| d.as_secs())
        .or_else(|_| a.ttl.trim().parse::<u64>())
        .ok()
        .filter(|s| (1..=366 * 86_400).contains(s))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--ttl {}: give a lifetime of 1 s to 366 days (90s, 15m, 1h, 7d)",
                a.ttl
            )
        })?;
    if a.max_lifetime == Some(0) {
        bail!("--max-lifetime 0 would refuse every token; give the server's --auth-max-lifetime");
    }
    Ok(cmd::token::Request {
        // As the server reads its secret file: without the line's end.
        secret: secret.trim_end_matches(['\n', '\r']).to_string(),
        secret_from,
        channels: a.channels.clone(),
        publish: a.publish.clone(),
        ttl_secs,
        aud: a.aud.clone(),
        sub: a.sub.clone(),
        max_lifetime: a.max_lifetime,
        now: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
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
            format: list_format(a.format),
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
        format: list_format(a.format),
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

fn load(l: &LoadArgs) -> Result<Load> {
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

fn list_format(f: args::ListFormat) -> ListFormat {
    match f {
        args::ListFormat::Table => ListFormat::Table,
        args::ListFormat::Json => ListFormat::Json,
    }
}

fn target(t: &TargetArgs) -> Target {
    Target {
        profile: t.profile.clone(),
        pid: t.pid,
        unit: t.unit.clone(),
        catalog: t.catalog.clone(),
        role: t.role.map(Into::into),
    }
}

/// The host to read and write: a captured tree or the live host, with `--prefix` moving the
/// files wstune owns.
pub fn backend(root: Option<&Path>, prefix: Option<&Path>) -> Result<Box<dyn Backend>> {
    open(&crate::host::layout(root, prefix))
}

/// The backend for `layout` (a `--prefix` that is no directory refused first).
fn open(layout: &Layout) -> Result<Box<dyn Backend>> {
    if let Some(p) = layout.prefix() {
        if !p.is_dir() {
            bail!(
                "--prefix {}: no such directory; create it first (mkdir -p {})",
                p.display(),
                p.display()
            );
        }
    }
    Ok(crate::host::open(layout)?)
}

/// The backend and the store of wstune's own files (`--prefix`, else the `--root` tree, else
/// `/`; on a live Windows host the journal in `%ProgramData%\wstune`), both from the one
/// layout `--root` and `--prefix` make.
fn host_and_store(root: Option<&Path>, prefix: Option<&Path>) -> Result<(Box<dyn Backend>, Store)> {
    let layout = crate::host::layout(root, prefix);
    Ok((open(&layout)?, Store::with_layout(layout)))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The backend and the store come from one layout: what the store writes under
    /// `--prefix` is what the backend of a `--root` tree reads back, and the tree's own files
    /// stay the tree's.
    #[test]
    fn the_backend_and_the_store_place_files_alike() {
        let prefix = tempfile::tempdir().unwrap();
        let root = Path::new("tests/fixtures/default");
        let (backend, store) = host_and_store(Some(root), Some(prefix.path())).unwrap();
        let file = crate::host::owned::SYSCTL_FILE;
        assert!(store.path(file).starts_with(prefix.path()));
        std::fs::create_dir_all(store.path(file).parent().unwrap()).unwrap();
        std::fs::write(store.path(file), "net.core.somaxconn = 1\n").unwrap();
        assert_eq!(backend.read(file).unwrap(), "net.core.somaxconn = 1\n");
        assert_eq!(
            backend.read("/proc/sys/net/core/somaxconn").unwrap(),
            std::fs::read_to_string(root.join("proc/sys/net/core/somaxconn")).unwrap()
        );
        let missing = prefix.path().join("nope");
        let e = host_and_store(Some(root), Some(&missing)).err().unwrap();
        assert!(e.to_string().contains("no such directory"), "{e}");
    }

    /// `--lb-config` named a FIFO: `check` blocked forever on the read (found while moving the
    /// read here); now it is refused at once with the reason, like a missing file.
    #[test]
    fn an_lb_config_that_is_no_regular_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("haproxy.cfg");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read_lb_config(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file") && e.contains("--lb-config"),
            "{e}"
        );
        let e = read_lb_config(&dir.path().join("missing.cfg"))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("no such file; give the proxy's configuration file"),
            "{e}"
        );
        let ok = dir.path().join("ok.cfg");
        std::fs::write(&ok, "global\n").unwrap();
        assert_eq!(read_lb_config(&ok).unwrap(), "global\n");
    }
}
