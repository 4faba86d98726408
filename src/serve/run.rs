//! Serve proper: the configuration -> listeners, admin, cluster or relay ->
//! `embedded_server::Server::run` until SIGTERM/SIGINT drains it; above one process, the
//! supervisor instead (`supervisor`).

use super::config::{LogFormat, ServeConfig};
use crate::engine::check::{self, HostInputs};
use crate::outcome::Outcome;
use anyhow::{Context, Result};
use embedded_server::Server;
use std::net::SocketAddr;

/// Serve until SIGTERM/SIGINT (drained), or supervise `--processes` server processes.
/// `host`: the host to warn about (process 0 of a supervisor speaks for all).
pub fn run(r: &ServeConfig, host: Option<&HostInputs>) -> Result<Outcome> {
    // First, before any thread: it unsets LISTEN_FDS/LISTEN_PID.
    let mut inherited = take_inherited()?;
    let admin = r.admin;
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
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let (soft, hard) = crate::host::raise_nofile();
    let rt = runtime(r)?;
    let stopped = rt.block_on(async move {
        // Before anything listens: a SIGTERM right after "listening" must drain, not kill.
        let shutdown = embedded_server::shutdown_signal()
            .context("cannot install the SIGTERM/SIGINT handlers")?;
        // A second SIGINT/SIGTERM stops at once. Not in a supervised process: a Ctrl-C reaches
        // it from the terminal and again from its supervisor, and the supervisor stops it at
        // once itself (SIGKILL) on a second signal of its own.
        #[cfg(unix)]
        let forced = match supervised {
            None => Some(second_signal().context("cannot install the SIGTERM/SIGINT handlers")?),
            Some(_) => None,
        };
        #[cfg(unix)]
        reload_is_for_the_supervisor(supervised.is_some())?;
        #[cfg(unix)]
        let replaced = match supervised {
            Some(_) => Some(
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
                    .context("cannot install the SIGUSR1 handler")?,
            ),
            None => None,
        };
        let addr = SocketAddr::new(r.bind, r.port);
        let listeners = listeners(r, addr, inherited)?;
        let local = listeners[0].local_addr()?;
        let admin_listener = match admin {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr).await;
                Some(l.map_err(|e| crate::serve::supervisor::admin_listen_error(addr, &e))?)
            }
            None => None,
        };
        // Warnings first, so whoever waits for "listening" has already seen them.
        // One process of a supervisor speaks for all (the others' start-up lines are not shown).
        if supervised.unwrap_or(0) == 0 {
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
        if tls.is_some() && supervised.unwrap_or(0) == 0 {
            if let Some(w) = unlimited_handshakes(&r.server.limits) {
                eprintln!("{w}");
            }
        }
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
        eprintln!(
            "{}",
            crate::report::settings_table(&r.settings, r.workers, listeners.len(), cfg!(windows))
        );
        eprintln!("wstune serve: listening on {scheme}://{local}/");
        if let Some(a) = admin_addr {
            let api = if r.secrets.api_key.is_some() && r.builtin.app == embedded_server::App::Channels {
                format!(" and the API on http://{a}/api/")
            } else {
                String::new()
            };
            eprintln!("wstune serve: admin on http://{a}/healthz and http://{a}/metrics{api}");
        }
        let server = with_tls(Server::builtin(r.server.clone(), &r.builtin), tls);
        if let Some(cluster) = &r.cluster {
            crate::serve::backplane::start(cluster, server.hub())?;
            eprintln!("wstune serve: cluster backplane on {} ({})", cluster.redacted(), cluster.describe());
        }
        #[cfg(target_os = "linux")]
        if let (Some(i), Some(fd)) = (
            supervised,
            std::env::var(crate::serve::supervisor::ENV_RELAY_FD).ok().and_then(|v| v.parse().ok()),
        ) {
            // The pid as the relay's node id: during a rolling restart a process and its
            // replacement share the index, and each must deliver what the other relays.
            let _ = i;
            crate::serve::supervisor::relay::start_child(server.hub(), std::process::id().into(), fd)
                .await
                .context("cannot use the relay socket the supervisor passed")?;
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        use embedded_server::admin::{app_name, Gate};
        let gate = std::sync::Arc::new(Gate::new(
            r.secrets.api_key.clone(),
            r.server.max_message_bytes,
        ));
        if let Some(l) = admin_listener {
            let hub = server.hub();
            let mut rx = stop_rx.clone();
            let gate = gate.clone();
            let app = app_name(r.builtin.app);
            let stop = async move {
                let _ = rx.changed().await;
            };
            tokio::spawn(embedded_server::admin::serve_with(l, hub, gate, app, stop));
        }
        // Under a supervisor, SIGUSR1 says a rolling restart replaced this process: it drains
        // alone, at the node's reconnect rate and without the load balancer's delay.
        #[cfg(unix)]
        let shutdown = {
            let (hub, rate) = (server.hub(), r.replaced_drain_rate);
            async move {
                let replaced = async {
                    match replaced {
                        Some(mut s) => {
                            s.recv().await;
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
        };
        let hub = server.hub();
        #[cfg(unix)]
        let forced = async move {
            match forced {
                Some(f) => f.await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let forced = std::future::pending::<i32>();
        tokio::select! {
            r = server.run(listeners, shutdown) => r?,
            signal = forced => {
                eprintln!(
                    "wstune serve: {} again while stopping ({}): exiting now, without the rest of the drain: {} connection(s) still open are cut without a close frame (exit code {})",
                    signal_name(signal),
                    hub.drain().phase().name(),
                    hub.registry().len(),
                    128 + signal
                );
                return Ok(Some(signal));
            }
        }
        #[cfg(target_os = "linux")]
        if supervised.is_some() {
            // What it counted up to its exit, drain included, for the supervisor's sums.
            let mut m = embedded_server::admin::render(&hub);
            gate.render_counts(&mut m, "ws_api_requests_total");
            crate::serve::supervisor::tally::write_final(&m);
        }
        let _ = stop_tx.send(true);
        Ok::<_, anyhow::Error>(None)
    });
    match stopped? {
        // The connections' tasks and the offload pool are left behind, not waited for.
        Some(signal) => {
            rt.shutdown_background();
            Ok(Outcome::Interrupted { signal })
        }
        None => Ok(Outcome::Ok),
    }
}

/// Completes on the second SIGINT or SIGTERM from now (the first one begins the drain), with
/// its number. The handlers are installed when this is called.
#[cfg(unix)]
pub(super) fn second_signal() -> std::io::Result<impl std::future::Future<Output = i32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        let mut seen = 0;
        loop {
            let sig = tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
            };
            seen += 1;
            if seen >= 2 {
                return sig;
            }
        }
    })
}

/// A stopping signal's name, for the line that says why the process stopped.
pub(super) fn signal_name(signal: i32) -> &'static str {
    match signal {
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// Listening sockets this process inherited: from its supervisor or from systemd (Linux).
#[cfg(target_os = "linux")]
type Inherited = Option<(
    crate::serve::supervisor::listen::Origin,
    Vec<std::os::fd::OwnedFd>,
)>;
#[cfg(not(target_os = "linux"))]
type Inherited = Option<std::convert::Infallible>;

fn take_inherited() -> Result<Inherited> {
    #[cfg(target_os = "linux")]
    return crate::serve::supervisor::listen::take_inherited();
    #[cfg(not(target_os = "linux"))]
    Ok(None)
}

/// The server's listeners: the inherited sockets (the supervisor's or systemd's, which outlive
/// this process), else its own on `addr` (`--acceptors` of them with SO_REUSEPORT).
fn listeners(
    r: &ServeConfig,
    addr: SocketAddr,
    inherited: Inherited,
) -> Result<Vec<tokio::net::TcpListener>> {
    #[cfg(target_os = "linux")]
    if let Some((_, fds)) = inherited {
        return Ok(crate::serve::supervisor::listen::into_tokio(fds)?);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = inherited;
    let acceptors = match (r.reuseport, r.acceptors) {
        (false, _) => 1,
        (true, 0) => r.workers,
        (true, n) => n,
    };
    embedded_server::bind(addr, r.reuseport, acceptors)
        .map_err(|e| crate::serve::supervisor::listen_error(addr, "--bind", &e))
}

/// SIGHUP and SIGUSR2 restart the processes of a supervisor (`systemctl reload`, a terminal's
/// hangup reaching the whole process group): a server process never dies of them (their default
/// action); one serving alone says that a rolling restart needs `--processes`.
#[cfg(unix)]
fn reload_is_for_the_supervisor(supervised: bool) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    for (kind, name) in [
        (SignalKind::hangup(), "SIGHUP"),
        (SignalKind::user_defined2(), "SIGUSR2"),
    ] {
        let mut s = signal(kind).with_context(|| format!("cannot install the {name} handler"))?;
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if !supervised {
                    tracing::warn!("{name} ignored: a rolling restart replaces the processes of `serve --processes 2` or more; one process restarts with systemctl restart (a .socket unit keeps the port listening)");
                }
            }
        });
    }
    Ok(())
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
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (tls, inherited);
        anyhow::bail!("{from} {want}: several processes on one port need Linux (SO_REUSEPORT spreads the connections); run one `wstune serve` per port behind a load balancer");
    }
    #[cfg(target_os = "linux")]
    {
        // One process per core by default, each with its share of the cores (nginx's layout);
        // an explicit --workers or profile io_workers is each process's own.
        let workers = if r.workers_follow_cores {
            (cores / sizing.processes).max(1)
        } else {
            r.workers
        };
        let supervision = crate::serve::supervisor::Supervision {
            sizing,
            addr: SocketAddr::new(r.bind, r.port),
            admin: r.admin,
            config: r.clone(),
            workers,
            relay: r.cluster.is_none(),
            // A process drains (delay, then its closes' window) before the grace begins.
            grace: r.server.shutdown_grace + r.server.drain_delay + r.server.drain_most(),
            scheme: if tls { "wss" } else { "ws" },
            acceptors: r.acceptors,
            // A replaced process drains (delay, window, grace); the margin is its exit.
            old_exit_wait: r.server.shutdown_grace
                + r.server.drain_delay
                + r.server.drain_most()
                + std::time::Duration::from_secs(10),
            inherited: inherited.take().map(|(_, fds)| fds),
        };
        Ok(Some(crate::serve::supervisor::supervise(supervision)?))
    }
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

/// The TLS configuration from --tls-cert/--tls-key, if given.
#[cfg(feature = "tls")]
pub(super) fn tls_config(r: &ServeConfig) -> Result<Option<embedded_server::tls::Config>> {
    let Some(t) = &r.tls else {
        return Ok(None);
    };
    let cfg = embedded_server::tls::load_with(&t.cert, &t.key, resumption(t.resumption))
        .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e}"))?;
    // Under a supervisor: its processes' tickets share its keys, so a client resumes on any
    // of them, and after a roll.
    match std::env::var_os(crate::serve::supervisor::ENV_TICKET_KEYS) {
        Some(path) if t.resumption == super::config::TlsResumption::Tickets => Ok(Some(
            embedded_server::shared_tickets::install(&cfg, std::path::Path::new(&path))
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
        _ => Ok(Some(cfg)),
    }
}

/// `--tls-resumption` as the server library takes it.
#[cfg(feature = "tls")]
fn resumption(r: super::config::TlsResumption) -> embedded_server::tls::Resumption {
    use super::config::TlsResumption as R;
    use embedded_server::tls::Resumption;
    match r {
        R::Tickets => Resumption::Tickets,
        // Sessions a process keeps for resumption: ~1 KiB each.
        R::Cache => Resumption::Cache(10_000),
        R::Off => Resumption::Off,
    }
}

#[cfg(not(feature = "tls"))]
pub(super) fn tls_config(r: &ServeConfig) -> Result<Option<std::convert::Infallible>> {
    if r.tls.is_some() {
        anyhow::bail!("this wstune was built without the `tls` feature: rebuild with default features for --tls-cert");
    }
    Ok(None)
}

#[cfg(feature = "tls")]
pub(super) fn with_tls(s: Server, tls: Option<embedded_server::tls::Config>) -> Server {
    match tls {
        Some(c) => s.with_tls(c),
        None => s,
    }
}

#[cfg(not(feature = "tls"))]
pub(super) fn with_tls(s: Server, _tls: Option<std::convert::Infallible>) -> Server {
    s
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
