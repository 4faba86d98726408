//! Args -> one typed request per command: the profile loaded, the catalog for the host's
//! platform, the backend and the journal's store, every flag checked and turned into the
//! library's own types. Every input is validated here, before anything runs, so a bad flag is
//! one clear error; commands (`cmd::*`) receive these values and never see clap's structs.

use super::args::{
    self, ApplyArgs, BenchDeflateArgs, CheckArgs, ExportArgs, ExportFormat, LbArgs, LoadArgs,
    PoolArgs, ProfilesCommand, RollbackArgs, SelftestArgs, SnapshotArgs, TargetArgs,
};
use crate::cmd;

mod serve;
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
            args::Format::Table => report::Format::Table,
            args::Format::Json => report::Format::Json,
            args::Format::Junit => report::Format::Junit,
            args::Format::Prometheus => report::Format::Prometheus,
        },
        strict: a.strict,
        show: match a.show {
            args::ShowArg::Problems => report::Show::Problems,
            args::ShowArg::All => report::Show::All,
        },
        output: a.output.clone(),
        lb,
    })
}

/// `--lb-config FILE` through the one bounded reader: a FIFO or a device named by mistake is
/// refused at once instead of blocking or filling memory.
fn read_lb_config(path: &Path) -> Result<String> {
    use crate::host::input::{io_words, read_bounded, Refused};
    // A proxy configuration with includes inlined stays far below this.
    const MAX_LB_CONFIG_BYTES: u64 = 16 << 20;
    read_bounded(path, MAX_LB_CONFIG_BYTES, None).map_err(|r| {
        let why = match r {
            Refused::Io(e) => io_words(&e),
            Refused::Directory => "is a directory".into(),
            Refused::NotRegular => "not a regular file (a device, pipe or socket)".into(),
            Refused::Outside(real) => format!("resolves to {}", real.display()),
            Refused::TooLarge(cap) => format!("larger than {} MiB", cap >> 20),
            Refused::NotUtf8 => "not UTF-8 text".into(),
        };
        anyhow::anyhow!(
            "--lb-config {}: {why}; give the proxy's configuration file",
            path.display()
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
        },
        nics: a.nics.clone(),
        unit: a.unit.clone(),
        output: a.output.clone(),
    })
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
        },
        output: a.output.clone(),
    })
}

pub fn profiles(p: &ProfilesCommand) -> cmd::profiles::Request {
    match p {
        ProfilesCommand::List { format } => cmd::profiles::Request::List {
            format: list_format(*format),
        },
        ProfilesCommand::Show {
            name,
            format,
            resolved,
        } => cmd::profiles::Request::Show {
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
    Ok(cmd::selftest::Request {
        profile,
        target,
        broadcast,
        subscribe,
        pids: a.pid.clone(),
        deflate: a.deflate,
        load: load(&a.load),
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

fn load(l: &LoadArgs) -> Load {
    Load {
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
        ramp: l.ramp,
        storm_concurrency: l.storm_concurrency,
        message: l.message.clone(),
        accept_noise: l.accept_noise,
        format: list_format(l.format),
        report: l.report.clone(),
        tls: crate::engine::selftest::TlsLoad {
            ca: l.tls.ca.clone(),
            ca_pem: None,
            insecure: l.tls.insecure,
            resume: l.tls.tls_resume,
        },
    }
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
