//! `wstune serve`: profile + flags -> ServerConfig -> embedded_server::Server::run; with
//! `--self-test`, the host half of the check pipeline and the self-test pipeline around the
//! servers it starts.

use crate::engine::check::{self, Resolved as HostInputs};
use crate::engine::selftest::Load;
use crate::outcome::Outcome;
use crate::profile::Profile;
use crate::selftest::report::BudgetReport;
use crate::serve::config::{LogFormat, ServeConfig};
use anyhow::{Context, Result};
use embedded_server::{Server, ServerConfig};
use std::net::SocketAddr;
use std::sync::Arc;

/// `serve`, resolved: the one configuration, and the host to judge.
pub struct Request {
    pub config: ServeConfig,
    /// `--self-test`: the load and the profile it is sized by; None: serve.
    pub self_test: Option<SelfTest>,
    /// The host the server will run on (or, for the self-test, `--host-root`'s tree), with the
    /// inputs the check pipeline needs; None when they cannot be loaded (no host warning then).
    pub host: Option<HostInputs>,
}

/// `serve --self-test`'s own inputs.
pub struct SelfTest {
    /// The load settings.
    pub load: Load,
    /// The profile the scenarios are sized by and judged against.
    pub profile: Profile,
    /// `--command`: the user's server to start instead of the built-in apps.
    pub command: Option<Vec<String>>,
}

/// Make glibc give large freed blocks back to the kernel at once. By default its mmap
/// threshold rises to the size of the largest block freed (up to 32 MiB), after which
/// multi-megabyte inflate and compression buffers come from the heap and stay resident when
/// freed: one 15 MiB deflate message per connection left ~1.5 MiB RSS per idle connection this
/// way, after the buffers themselves were released. A fixed threshold (1 MiB) keeps every
/// block of that size an mmap, unmapped on free; an operator's MALLOC_MMAP_THRESHOLD_ or
/// GLIBC_TUNABLES still wins.
fn release_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none()
        && std::env::var_os("GLIBC_TUNABLES").is_none()
    {
        // SAFETY: mallopt only changes allocator parameters; called before any server thread.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) };
    }
}

pub fn run(req: Request) -> Result<Outcome> {
    release_large_frees();
    if let Some(t) = &req.self_test {
        return self_test(&req.config, t, req.host.as_ref());
    }
    let r = &req.config;
    if let Some(url) = &r.cluster {
        crate::cluster::client(url)?;
    }
    let admin = r.admin;
    let tls = tls_config(r)?;
    // A supervised process (started by `--processes`) serves; anyone else may supervise.
    let supervised: Option<u64> = std::env::var(crate::supervisor::ENV_PROCESS)
        .ok()
        .and_then(|v| v.parse().ok());
    if supervised.is_none() {
        if let Some(outcome) = supervise(r, tls.is_some())? {
            return Ok(outcome);
        }
    }
    init_logs(r, "info");
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let (soft, hard) = crate::host::raise_nofile();
    let rt = runtime(r)?;
    rt.block_on(async move {
        // Before anything listens: a SIGTERM right after "listening" must drain, not kill.
        let shutdown = embedded_server::shutdown_signal()
            .context("cannot install the SIGTERM/SIGINT handlers")?;
        let addr = SocketAddr::new(r.bind, r.port);
        let acceptors = match (r.reuseport, r.acceptors) {
            (false, _) => 1,
            (true, 0) => r.workers,
            (true, n) => n,
        };
        let listeners = embedded_server::bind(addr, r.reuseport, acceptors);
        let listeners = listeners.map_err(|e| crate::supervisor::listen_error(addr, "--bind", &e))?;
        let local = listeners[0].local_addr()?;
        let admin_listener = match admin {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr).await;
                Some(l.with_context(|| format!("cannot listen on --admin {addr}"))?)
            }
            None => None,
        };
        // Warnings first, so whoever waits for "listening" has already seen them.
        // One process of a supervisor speaks for all (the others' start-up lines are not shown).
        if supervised.unwrap_or(0) == 0 {
            host_warnings(req.host.as_ref());
        }
        if (soft as usize) < r.server.max_connections + 64 {
            eprintln!(
                "wstune: warning: this process may open {soft} files (hard limit {hard}), fewer than \
                 max connections {}: accept() will fail with EMFILE beyond that. Raise LimitNOFILE / \
                 ulimit -n (wstune check says how).",
                r.server.max_connections
            );
        }
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
        eprintln!(
            "{}",
            crate::report::settings_table(&r.settings, r.workers, listeners.len(), cfg!(windows))
        );
        eprintln!("wstune serve: listening on {scheme}://{local}/");
        if let Some(a) = admin_addr {
            let api = if r.secrets.api_key.is_some() && r.server.app == embedded_server::App::Channels {
                format!(" and the API on http://{a}/api/")
            } else {
                String::new()
            };
            eprintln!("wstune serve: admin on http://{a}/healthz and http://{a}/metrics{api}");
        }
        let server = with_tls(Server::new(r.server.clone()), tls);
        if let Some(url) = &r.cluster {
            crate::cluster::start(url, server.hub())?;
            eprintln!("wstune serve: cluster backplane on {url} (channel {})", crate::cluster::CHANNEL);
        }
        #[cfg(target_os = "linux")]
        if let (Some(i), Some(fd)) = (
            supervised,
            std::env::var(crate::supervisor::ENV_RELAY_FD).ok().and_then(|v| v.parse().ok()),
        ) {
            crate::supervisor::relay::start_child(server.hub(), i, fd)
                .context("cannot use the relay socket the supervisor passed")?;
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        if let Some(l) = admin_listener {
            let hub = server.hub();
            let mut rx = stop_rx.clone();
            let max_body = r.server.max_message_bytes;
            use embedded_server::admin::{app_name, Gate};
            let gate = std::sync::Arc::new(Gate::new(r.secrets.api_key.clone(), max_body));
            let app = app_name(&hub);
            let stop = async move {
                let _ = rx.changed().await;
            };
            tokio::spawn(embedded_server::admin::serve_with(l, hub, gate, app, stop));
        }
        server
            .run(listeners, shutdown)
            .await?;
        let _ = stop_tx.send(true);
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(Outcome::Ok)
}

/// `--processes` (or the profile's `server.processes`) above one: run the supervisor, and
/// return its outcome. None when this process serves alone.
fn supervise(r: &ServeConfig, tls: bool) -> Result<Option<Outcome>> {
    use crate::profile::Processes;
    let (want, from) = (r.processes, r.processes_from.as_str());
    if want == Processes::Count(1) {
        return Ok(None);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (_, hard) = crate::host::raise_nofile();
    let sizing = crate::supervisor::size(want, from, r.server.max_connections, hard, cores)
        .map_err(anyhow::Error::msg)?;
    if sizing.processes == 1 {
        return Ok(None);
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = tls;
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
        let plan = crate::supervisor::Plan {
            sizing,
            addr: SocketAddr::new(r.bind, r.port),
            admin: r.admin,
            config: r.clone(),
            workers,
            relay: r.cluster.is_none(),
            grace: r.server.shutdown_grace,
            scheme: if tls { "wss" } else { "ws" },
        };
        Ok(Some(crate::supervisor::supervise(plan)?))
    }
}

/// The TLS configuration from --tls-cert/--tls-key, if given.
#[cfg(feature = "tls")]
fn tls_config(r: &ServeConfig) -> Result<Option<embedded_server::tls::Config>> {
    match &r.tls {
        Some(t) => Ok(Some(
            embedded_server::tls::load(&t.cert, &t.key)
                .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e}"))?,
        )),
        None => Ok(None),
    }
}

#[cfg(not(feature = "tls"))]
fn tls_config(r: &ServeConfig) -> Result<Option<std::convert::Infallible>> {
    if r.tls.is_some() {
        anyhow::bail!("this wstune was built without the `tls` feature: rebuild with default features for --tls-cert");
    }
    Ok(None)
}

#[cfg(feature = "tls")]
fn with_tls(s: Server, tls: Option<embedded_server::tls::Config>) -> Server {
    match tls {
        Some(c) => s.with_tls(c),
        None => s,
    }
}

#[cfg(not(feature = "tls"))]
fn with_tls(s: Server, _tls: Option<std::convert::Infallible>) -> Server {
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

/// `serve --self-test`: check the host, start the tuned server (an echo instance with the
/// configured handler, and a broadcast instance) on loopback, run the scenarios sized to this
/// host against it, print one report and exit with its verdict.
fn self_test(r: &ServeConfig, t: &SelfTest, host: Option<&HostInputs>) -> Result<Outcome> {
    use crate::selftest::{client::Target, limits, Scenario};
    let (load, profile) = (&t.load, &t.profile);
    init_logs(r, "warn");
    let host = host.map(|h| check::host_check(&check::report(&h.inputs, h.backend.as_ref(), None)));
    let (soft, _hard) = crate::host::raise_nofile();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let profile_rate = profile.selftest.rate_per_client as f64;
    // Beyond one process's fd limit the server runs as a child `serve --processes N` (the
    // supervisor, Linux); `--processes` (or the profile's server.processes) fixes N instead.
    let want = (r.processes_from == "--processes"
        || r.processes != crate::profile::Processes::Count(1))
    .then_some((r.processes, r.processes_from.as_str()));
    let max_server_processes = match want {
        // The user's program is one process as far as the sizing knows (it may fork more;
        // they are measured as its process tree).
        _ if t.command.is_some() => 1,
        _ if !cfg!(target_os = "linux") => 1,
        Some((crate::profile::Processes::Count(n), _)) => n.max(1) as usize,
        _ => limits::MAX_SERVER_PROCESSES,
    };
    let room = limits::HostRoom {
        server_nofile: soft,
        max_server_processes,
        mem_available: limits::mem_available(),
        ephemeral_ports: limits::ephemeral_ports(),
        cores,
    };
    // The scenarios' connections are plain ones (the deflate scenario's own count, with its
    // contexts, is sized below): counting every connection's deflate contexts and in-flight
    // buffers sized a million-connection profile down to 421k on a host that holds 1M.
    let sized = limits::size_self_test(
        profile.connections as usize,
        profile_rate,
        profile.estimate().plain_bytes_per_conn(),
        &room,
    );
    // --conns is the operator's choice: no scale-down to explain (and the verdict still says
    // when it is below the profile's count); the rate still follows the CPU budget.
    let (conns, scaled) = match load.conns {
        Some(n) => (n, Vec::new()),
        None => (sized.conns, sized.scaled_down.clone()),
    };
    let server_max = limits::server_max(conns);
    // The supervisor's own sizing, so the report names what it will start (its errors are
    // bad input: `--processes 1` with more connections than one process may hold, ...).
    let processes = match want {
        _ if max_server_processes == 1 => 1,
        Some((w, from)) => {
            crate::supervisor::size(w, from, server_max, soft, cores)
                .map_err(anyhow::Error::msg)?
                .processes
        }
        None => crate::profile::processes_needed(server_max as u64, soft)
            .map_or(1, |n| n as usize)
            .min(limits::MAX_SERVER_PROCESSES),
    };
    // The deflate scenario alone may need a lower count: its contexts on both sides.
    let (deflate_conns, mut scaled) = (
        limits::deflate_conns(
            conns,
            profile.estimate().bytes_per_conn(),
            r.server.deflate.window_bits,
            room.mem_available,
        )
        // Only said when the deflate scenario runs (named, or among the defaults).
        .filter(|_| {
            r.server.deflate.enabled
                && load.conns.is_none()
                && (load.scenarios.is_empty() || load.scenarios.contains(&Scenario::Deflate))
        }),
        scaled,
    );
    if let Some((_, why)) = &deflate_conns {
        scaled.push(why.clone());
    }
    let sized = if load.conns.is_some() {
        limits::size_self_test(
            conns,
            profile_rate,
            0,
            &limits::HostRoom {
                server_nofile: u64::MAX,
                max_server_processes: 1,
                mem_available: None,
                ephemeral_ports: u32::MAX,
                ..room
            },
        )
    } else {
        sized
    };
    let mut defaults = vec![
        Scenario::Idle,
        Scenario::EchoRate,
        Scenario::EchoSat,
        Scenario::Storm,
        Scenario::Broadcast,
    ];
    if r.server.deflate.enabled {
        defaults.push(Scenario::Deflate);
    }
    // A user's server: broadcast needs an app that sends every message it gets to every
    // connection, which an application cannot be assumed to do; it runs when asked for.
    let mut skipped = Vec::new();
    if t.command.is_some() && load.scenarios.is_empty() {
        defaults.retain(|s| *s != Scenario::Broadcast);
        skipped.push(
            "broadcast: your server is not assumed to send each message to every connection; \
             add --scenario broadcast (with the other scenarios you want) if it does"
                .to_string(),
        );
    }
    let rt = runtime(r)?;
    let run = async {
        let mut config = r.server.clone();
        config.max_connections = config.max_connections.max(conns + 16);
        crate::serve::config::exempt_self_test(&mut config.limits);
        let start = |app: embedded_server::App| {
            crate::selftest::server::start_in_process(ServerConfig {
                app,
                ..config.clone()
            })
            .map(|(addr, hub, stop)| (addr, stop, hub.metrics.clone()))
        };
        enum Running {
            InProcess(
                tokio::sync::oneshot::Sender<()>,
                Arc<embedded_server::metrics::Metrics>,
            ),
            Child(Box<crate::selftest::server::ChildServer>),
            User(Box<crate::selftest::command::UserServer>),
        }
        let (echo, fanout, servers, server_pid, fanout_pid) = if let Some(words) = &t.command {
            let u = crate::selftest::command::UserServer::start(words, &config, false).await?;
            eprintln!(
                "wstune serve --self-test: your server `{}` listens on ws://{}/ (pid {})",
                u.program, u.addr, u.pid
            );
            let (addr, pid) = (u.addr, u.pid);
            (addr, addr, vec![Running::User(Box::new(u))], pid, None)
        } else if processes > 1 {
            let child = |app| r.for_self_test_child(app, processes, server_max);
            let e = crate::selftest::server::ChildServer::start(&child(embedded_server::App::Echo))
                .await?;
            let b = crate::selftest::server::ChildServer::start(&child(
                embedded_server::App::Broadcast,
            ))
            .await?;
            let (pid, bpid) = (e.pid, b.pid);
            (
                e.addr,
                b.addr,
                vec![Running::Child(Box::new(e)), Running::Child(Box::new(b))],
                pid,
                Some(bpid),
            )
        } else {
            let (e, stop_e, m_e) = start(embedded_server::App::Echo)?;
            let (b, stop_b, m_b) = start(embedded_server::App::Broadcast)?;
            (
                e,
                b,
                vec![
                    Running::InProcess(stop_e, m_e),
                    Running::InProcess(stop_b, m_b),
                ],
                std::process::id(),
                None,
            )
        };
        let target = |addr: SocketAddr| Target {
            addr,
            host: addr.to_string(),
            path: "/".into(),
        };
        // Short scenarios: this is the quick start's command, and 5 s of steady load per
        // scenario gives stable medians on the sizes it picks.
        let plan = crate::engine::selftest::plan(
            load,
            target(echo),
            target(fanout),
            profile,
            crate::engine::selftest::Defaults {
                subscribe_targets: Vec::new(),
                deflate: false,
                conns,
                scenarios: defaults,
                secs: 5.0,
                rate: Some(sized.rate),
                rate_note: sized.rate_note.clone(),
                server_processes: Some(processes),
                // The user's program: whatever processes it starts count too.
                server_tree: processes > 1 || t.command.is_some(),
                deflate_conns: deflate_conns.map(|d| d.0),
                broadcast_server_pid: fanout_pid,
                budget_cores: Some(room.cores),
            },
            Some(server_pid),
            scaled,
        )?;
        eprintln!(
            "wstune serve --self-test: profile {}, {} connections, {} server process(es), {} scenario(s) of {} s against ws://{echo}/",
            profile.name, plan.opts.conns, processes, plan.scenarios.len(), plan.opts.secs
        );
        for s in &plan.scaled_down {
            eprintln!("wstune serve --self-test: scaled down: {s}");
        }
        let (mut report, mut error) = crate::engine::selftest::execute(&plan).await;
        // The budget, read before the servers stop (a supervised server's admin goes with it).
        let mut budget: Option<BudgetReport> = None;
        let mut add = |b: Option<BudgetReport>| {
            if let Some(b) = b {
                budget = Some(budget.map_or(b, |a| a + b));
            }
        };
        for s in &servers {
            let admin = match s {
                Running::InProcess(_, m) => {
                    add(Some(budget_of(m)));
                    None
                }
                Running::Child(c) => c.admin,
                Running::User(u) => u.admin,
            };
            if let Some(a) = admin {
                add(crate::selftest::server::budget_at(a).await);
            }
        }
        report.memory_budget = budget;
        for s in servers {
            match s {
                Running::InProcess(stop, _) => {
                    let _ = stop.send(());
                }
                Running::Child(c) => c.stop().await,
                Running::User(mut u) => {
                    // A server that died under load: say so rather than leave only the
                    // scenarios' connection errors.
                    if let Some(why) = u.exited() {
                        let e = anyhow::anyhow!("your server stopped during the self-test: {why}");
                        error = Some(match error {
                            Some(first) => e.context(format!("{first:#}")),
                            None => e,
                        });
                    }
                    u.stop().await
                }
            }
        }
        Ok::<_, anyhow::Error>((report, error))
    };
    // Ctrl-C drops the run: the generators (kill_on_drop) and the user's server (its process
    // group) go with it.
    let (mut report, error) = rt.block_on(async {
        // Biased: the Ctrl-C handler is in place (first poll) before anything starts.
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted (Ctrl-C): the self-test and its servers were stopped"),
            r = run => r,
        }
    })?;
    report.program = t.command.as_ref().map(|w| w.join(" "));
    report.skipped = skipped;
    report.host_check = host;
    crate::selftest::report::combine(&mut report, true);
    crate::engine::selftest::finish(&report, error, load)
}

/// An in-process server's budget, as the self-test reports it.
fn budget_of(m: &embedded_server::metrics::Metrics) -> BudgetReport {
    let b = &m.memory;
    BudgetReport {
        limit_bytes: b.limit() as u64,
        peak_bytes: b.peak() as u64,
        budget_closes: b.stores().map(|(_, _, refused)| refused).sum(),
        share_closes: b.share_closes(),
    }
}

/// Logs to stderr, as text or JSON lines; the level from --log-level, else RUST_LOG, else
/// `default`. A log line that cannot be written is dropped silently: the default reports it
/// with eprintln!, which panics on a closed stderr, and a supervised process whose supervisor
/// was killed (its stderr pipe gone) must still drain its clients.
/// The server's runtime: its I/O threads, each waiting up to the resolved coalescing window
/// before it sleeps when its traffic is dense (`embedded_server::coalesce`).
fn runtime(r: &ServeConfig) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(r.workers).enable_all();
    embedded_server::coalesce::install(&mut b, r.coalesce);
    b.build()
}

fn init_logs(a: &ServeConfig, default: &str) {
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
        LogFormat::Text => base
            .with_ansi(
                std::io::IsTerminal::is_terminal(&std::io::stderr())
                    && std::env::var_os("NO_COLOR").is_none(),
            )
            .try_init(),
        // Span fields (a connection's id and peer) are flattened into each event's object.
        LogFormat::Json => base
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
