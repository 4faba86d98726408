//! Serve proper: the configuration -> listeners, admin, cluster or relay ->
//! `embedded_server::Server::run` until SIGTERM/SIGINT drains it; above one process, the
//! supervisor instead (`supervisor`). What it needs from the system comes through
//! `host::signals` and, for the Linux-only supervisor, `supervised`; TLS through `tls`.

mod supervised;
mod tls;

use super::config::{LogFormat, ServeConfig};
use crate::engine::check::{self, HostInputs};
use crate::host::signals;
use crate::outcome::Outcome;
use anyhow::{Context, Result};
use embedded_server::admin::{app_name, Gate};
use embedded_server::{Hub, Server};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use supervised::Inherited;
pub(super) use tls::{tls_config, with_tls};

/// Serve until SIGTERM/SIGINT (drained), or supervise `--processes` server processes.
/// `host`: the host to warn about (process 0 of a supervisor speaks for all).
pub fn run(r: &ServeConfig, host: Option<&HostInputs>) -> Result<Outcome> {
    // First, before any thread: it unsets LISTEN_FDS/LISTEN_PID.
    let mut inherited = supervised::take_inherited()?;
    let tls = tls_config(r)?;
    // A supervised process (started by `--processes`) serves; anyone else may supervise.
    let supervised: Option<u64> = std::env::var(crate::serve::supervisor::ENV_PROCESS)
        .ok()
        .and_then(|v| v.parse().ok());
    if supervised.is_none() {
        if let Some(outcome) = supervise(r, tls.is_some(), &mut inherited)? {
            return Ok(outcome);
        }
    }
    init_logs(r, "info");
    let nofile = crate::host::raise_nofile();
    let rt = runtime(r)?;
    let stopped = rt.block_on(serve(r, host, supervised, tls, inherited, nofile));
    match stopped? {
        // The connections' tasks and the offload pool are left behind, not waited for.
        Some(signal) => {
            rt.shutdown_background();
            Ok(Outcome::Interrupted { signal })
        }
        None => Ok(Outcome::Ok),
    }
}

/// One server process inside its runtime: signals first, then the listeners, the start-up
/// lines, the server until it drained. Some(signal) when a second signal cut the drain short.
async fn serve(
    r: &ServeConfig,
    host: Option<&HostInputs>,
    supervised: Option<u64>,
    tls: Option<tls::Config>,
    inherited: Inherited,
    (soft, hard): (u64, u64),
) -> Result<Option<i32>> {
    // Before anything listens: a SIGTERM right after "listening" must drain, not kill.
    let shutdown =
        embedded_server::shutdown_signal().context("cannot install the SIGTERM/SIGINT handlers")?;
    let Stops { forced, replaced } = Stops::install(supervised.is_some())?;
    let listeners = listeners(r, SocketAddr::new(r.bind, r.port), inherited)?;
    let local = listeners[0].local_addr()?;
    let admin_listener = match r.admin {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await;
            Some(l.map_err(|e| crate::serve::supervisor::admin_listen_error(addr, &e))?)
        }
        None => None,
    };
    // Warnings first, so whoever waits for "listening" has already seen them.
    // One process of a supervisor speaks for all (the others' start-up lines are not shown).
    let speaks = supervised.unwrap_or(0) == 0;
    if speaks {
        host_warnings(host);
    }
    if (soft as usize) < r.server.max_connections + 64 {
        eprintln!(
            "wstune: warning: this process may open {soft} files (hard limit {hard}), fewer than \
             max connections {}: accept() will fail with EMFILE beyond that. Raise LimitNOFILE / \
             ulimit -n (wstune check says how).",
            r.server.max_connections
        );
    }
    if tls.is_some() && speaks {
        if let Some(w) = unlimited_handshakes(&r.server.limits) {
            eprintln!("{w}");
        }
    }
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    announce(r, listeners.len(), scheme, local, admin_addr);
    let server = with_tls(Server::builtin(r.server.clone(), &r.builtin), tls);
    if let Some(cluster) = &r.cluster {
        crate::serve::backplane::start(cluster, server.hub())?;
        eprintln!(
            "wstune serve: cluster backplane on {} ({})",
            cluster.redacted(),
            cluster.describe()
        );
    }
    supervised::join_relay(supervised, server.hub()).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let gate = Arc::new(Gate::new(
        r.secrets.api_key.clone(),
        r.server.max_message_bytes,
    ));
    if let Some(l) = admin_listener {
        let mut rx = stop_rx.clone();
        let stop = async move {
            let _ = rx.changed().await;
        };
        let app = app_name(r.builtin.app);
        tokio::spawn(embedded_server::admin::serve_with(
            l,
            server.hub(),
            gate.clone(),
            app,
            stop,
        ));
    }
    let hub = server.hub();
    let shutdown = or_replaced(shutdown, replaced, hub.clone(), r.replaced_drain_rate);
    tokio::select! {
        r = server.run(listeners, shutdown) => r?,
        signal = forced => {
            eprintln!(
                "wstune serve: {} again while stopping ({}): exiting now, without the rest of the drain: {} connection(s) still open are cut without a close frame (exit code {})",
                signals::signal_name(signal),
                hub.drain().phase().name(),
                hub.registry().len(),
                128 + signal
            );
            return Ok(Some(signal));
        }
    }
    supervised::leave_final_counts(supervised, &hub, &gate);
    let _ = stop_tx.send(true);
    Ok(None)
}

/// The start-up lines: the settings in force, where it listens, and the admin endpoints.
fn announce(
    r: &ServeConfig,
    listeners: usize,
    scheme: &str,
    local: SocketAddr,
    admin: Option<SocketAddr>,
) {
    eprintln!(
        "{}",
        crate::report::settings_table(&r.settings, r.workers, listeners, crate::host::IS_WINDOWS)
    );
    eprintln!("wstune serve: listening on {scheme}://{local}/");
    if let Some(a) = admin {
        let api = if r.secrets.api_key.is_some() && r.builtin.app == embedded_server::App::Channels
        {
            format!(" and the API on http://{a}/api/")
        } else {
            String::new()
        };
        eprintln!("wstune serve: admin on http://{a}/healthz and http://{a}/metrics{api}");
    }
}

/// The signals that end a server process other than its drain, installed before it listens.
struct Stops {
    /// A second SIGINT/SIGTERM: stop at once. Not in a supervised process: a Ctrl-C reaches
    /// it from the terminal and again from its supervisor, and the supervisor stops it at
    /// once itself (SIGKILL) on a second signal of its own. Never completes when not armed.
    forced: Stop<i32>,
    /// Under a supervisor, SIGUSR1: a rolling restart replaced this process.
    replaced: Option<Stop<()>>,
}

impl Stops {
    fn install(supervised: bool) -> Result<Stops> {
        let forced: Stop<i32> = if supervised {
            Box::pin(std::future::pending())
        } else {
            let second = signals::second_signal();
            Box::pin(second.context("cannot install the SIGTERM/SIGINT handlers")?)
        };
        // SIGHUP and SIGUSR2 restart the processes of a supervisor (`systemctl reload`, a
        // terminal's hangup reaching the whole process group): a server process never dies
        // of them; one serving alone says that a rolling restart needs `--processes`.
        let seen: fn(&'static str) = if supervised {
            |_| {}
        } else {
            reload_needs_processes
        };
        signals::survive_reload(seen).map_err(|e| {
            anyhow::Error::new(e.source).context(format!("cannot install the {} handler", e.name))
        })?;
        let replaced = match supervised {
            true => {
                let usr1 = signals::replaced().context("cannot install the SIGUSR1 handler")?;
                Some(Box::pin(usr1) as Stop<()>)
            }
            false => None,
        };
        Ok(Stops { forced, replaced })
    }
}

/// A future that ends the process's run, boxed: which one is armed is decided at start-up.
type Stop<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

/// The server's shutdown: the drain's signal, or, once SIGUSR1 says a rolling restart
/// replaced this process, a drain alone at the node's reconnect rate and without the load
/// balancer's delay.
async fn or_replaced(
    shutdown: impl Future<Output = ()>,
    replaced: Option<Stop<()>>,
    hub: Arc<Hub>,
    rate: u32,
) {
    let replaced = async {
        match replaced {
            Some(s) => {
                s.await;
                let _ = hub.drain().begin_replaced(rate);
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = shutdown => {}
        _ = replaced => {}
    }
}

/// What a server process serving alone says to SIGHUP or SIGUSR2.
fn reload_needs_processes(name: &'static str) {
    tracing::warn!("{name} ignored: a rolling restart replaces the processes of `serve --processes 2` or more; one process restarts with systemctl restart (a .socket unit keeps the port listening)");
}

/// The server's listeners: the inherited sockets (the supervisor's or systemd's, which outlive
/// this process), else its own on `addr` (`--acceptors` of them with SO_REUSEPORT).
fn listeners(
    r: &ServeConfig,
    addr: SocketAddr,
    inherited: Inherited,
) -> Result<Vec<tokio::net::TcpListener>> {
    if let Some(listeners) = supervised::listeners(inherited)? {
        return Ok(listeners);
    }
    let acceptors = match (r.reuseport, r.acceptors) {
        (false, _) => 1,
        (true, 0) => r.workers,
        (true, n) => n,
    };
    embedded_server::bind(addr, r.reuseport, acceptors)
        .map_err(|e| crate::serve::supervisor::listen_error(addr, "--bind", &e))
}

/// `--processes` (or the profile's `server.processes`) above one: run the supervisor, and
/// return its outcome. None when this process serves alone.
fn supervise(r: &ServeConfig, tls: bool, inherited: &mut Inherited) -> Result<Option<Outcome>> {
    use crate::profile::Processes;
    let (want, from) = (r.processes, r.processes_from.as_str());
    if want == Processes::Count(1) {
        return Ok(None);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (_, hard) = crate::host::raise_nofile();
    let sizing = crate::profile::size_processes(want, from, r.server.max_connections, hard, cores)
        .map_err(anyhow::Error::msg)?;
    if sizing.processes == 1 {
        return Ok(None);
    }
    Ok(Some(supervised::supervise(
        r, sizing, cores, tls, inherited,
    )?))
}

/// The start-up warning of a TLS listener whose handshakes nothing rate limits: a full
/// handshake is the dearest thing a client can ask of the server (0.7-1.8 ms of a core on the
/// development VM), and a client replaying ClientHellos pays almost nothing for each, so without
/// a rate at accept one address can keep cores busy. The profiles leave the rates off (the
/// right values depend on the clients' NAT and on what is in front), so the operator is told
/// plainly, with the settings that bound it.
fn unlimited_handshakes(limits: &embedded_server::LimitSettings) -> Option<String> {
    (limits.connection_rate_per_ip.is_none() && limits.connection_rate.is_none()).then(|| {
        "wstune: warning: TLS handshakes are not rate limited: each full handshake costs the \
         server about a millisecond of a core, and a client replaying ClientHellos can ask for \
         thousands a second. Where this port faces clients directly, set server.limits.connection_rate_per_ip \
         and server.limits.connection_rate in the profile (--conn-rate-per-ip, --conn-rate); where a load \
         balancer in front terminates or limits them, name it in server.limits.exempt."
            .to_string()
    })
}

/// Name what would cap this server: the same findings `wstune check --profile P` reports,
/// limited to failures.
fn host_warnings(host: Option<&HostInputs>) {
    let Some(h) = host else { return };
    let c = check::host_check(&check::report(&h.inputs, h.backend.as_ref(), None));
    if !c.failed.is_empty() {
        tracing::warn!("this host fails {} check(s) for profile {}: {}; `wstune check --profile {}` says how to fix them", c.failed.len(), c.profile, c.failed.join(", "), c.profile);
    }
}

/// Logs to stderr, as text or JSON lines; the level from --log-level, else RUST_LOG, else
/// `default`. A log line that cannot be written is dropped silently: the default reports it
/// with eprintln!, which panics on a closed stderr, and a supervised process whose supervisor
/// was killed (its stderr pipe gone) must still drain its clients.
/// The server's runtime: its I/O threads, each waiting up to the resolved coalescing window
/// before it sleeps when its traffic is dense (`embedded_server::coalesce`).
pub(super) fn runtime(r: &ServeConfig) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(r.workers).enable_all();
    embedded_server::coalesce::install(&mut b, r.coalesce);
    b.build()
}

pub(super) fn init_logs(a: &ServeConfig, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = match &a.log_level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into()),
    };
    let base = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .with_env_filter(filter);
    let _ = match a.log_format {
        LogFormat::Text => base.with_ansi(crate::output::colour_on_stderr()).try_init(),
        // Span fields (a connection's id and peer) are flattened into each event's object.
        LogFormat::Json => base
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
