//! Args -> one typed request per command: the profile loaded, the catalog for the host's
//! platform, the backend and the journal's store, every flag checked and turned into the
//! library's own types. Every input is validated here, before anything runs, so a bad flag is
//! one clear error; commands (`cmd::*`) receive these values and never see clap's structs.

use super::args::{
    self, ApplyArgs, BenchDeflateArgs, CheckArgs, ExportArgs, LbArgs, LoadArgs, PoolArgs,
    ProfilesArgs, ProfilesCommand, RollbackArgs, SelftestArgs, SnapshotArgs, TargetArgs, WatchArgs,
};
use crate::cmd;
use crate::export::Format as ExportFormat;

mod export;
mod selftest;
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
pub use export::export;
use selftest::load;
pub use selftest::{pool, report_merge, report_watch, selftest};
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
        show: a.show,
        output: a.output.clone(),
        lb,
    })
}

pub fn explain(a: &args::ExplainArgs) -> cmd::explain::Request {
    cmd::explain::Request {
        query: a.id.clone(),
        json: a.format == ListFormat::Json,
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
        None => cmd::profiles::Request::List { format: p.format },
        Some(ProfilesCommand::List { format }) => cmd::profiles::Request::List { format: *format },
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
        format: a.format,
    }
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

fn target(t: &TargetArgs) -> Target {
    Target {
        profile: t.profile.clone(),
        pid: t.pid,
        unit: t.unit.clone(),
        catalog: t.catalog.clone(),
        role: t.role,
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
