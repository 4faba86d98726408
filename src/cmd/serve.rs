//! `wstune serve`: profile + flags -> ServerConfig -> embedded_server::Server::run; with
//! `--self-test`, the host half of the check pipeline and the self-test pipeline around the
//! servers it starts.

use crate::engine::check::{self, Resolved as HostInputs};
use crate::engine::selftest::Load;
use crate::outcome::Outcome;
use crate::profile::Profile;
use crate::selftest::report::BudgetReport;
use anyhow::{Context, Result};
use embedded_server::{App, BackpressureClose, Server, ServerConfig, SimulatedWork};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `serve`, resolved: the profile loaded once, the server flags as given, and the host to
/// judge. The flags stay as given (None: the profile's) because a `--processes` supervisor
/// and `--self-test` pass them on to child servers.
pub struct Request {
    pub profile: Profile,
    pub flags: Flags,
    /// `--self-test`'s load settings; None: serve.
    pub self_test: Option<Load>,
    /// `--self-test --command`: the user's server to start instead of the built-in apps.
    pub command: Option<Vec<String>>,
    /// The host the server will run on (or, for the self-test, `--host-root`'s tree), with the
    /// inputs the check pipeline needs; None when they cannot be loaded (no host warning then).
    pub host: Option<HostInputs>,
}

/// Log lines for people or for log shippers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `serve`'s flags (`wstune serve --help` documents each); None takes the profile's value.
#[derive(Debug, Clone)]
pub struct Flags {
    /// The profile as named (children are started with the same name).
    pub profile: String,
    pub bind: std::net::IpAddr,
    pub port: u16,
    pub app: App,
    pub handler: String,
    pub workers: Option<usize>,
    pub coalesce_us: Option<u64>,
    pub offload_pool: Option<usize>,
    pub offload_queue: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_frame: Option<usize>,
    pub max_message: Option<usize>,
    pub fragment: Option<usize>,
    pub send_queue: Option<usize>,
    pub backpressure_close: u16,
    pub heartbeat_interval: Option<u64>,
    pub heartbeat_timeout: Option<u64>,
    pub handshake_timeout: u64,
    pub origins: Vec<String>,
    pub subprotocols: Vec<String>,
    /// An address, or "off".
    pub admin: String,
    pub reuseport: bool,
    pub acceptors: usize,
    pub processes: Option<crate::profile::Processes>,
    pub deflate: bool,
    pub no_deflate: bool,
    pub deflate_window_bits: Option<u8>,
    pub deflate_mem_level: Option<u8>,
    pub deflate_level: Option<u8>,
    pub deflate_threshold: Option<usize>,
    pub deflate_no_context_takeover: bool,
    pub inflate_budget: Option<usize>,
    pub memory_budget: Option<usize>,
    pub conn_memory_share: Option<usize>,
    pub message_timeout: Option<u64>,
    pub drain_timeout: Option<u64>,
    pub inflate_ratio_limit: Option<u32>,
    pub inflate_rate: Option<u64>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub shutdown_grace: u64,
    pub log_format: LogFormat,
    pub log_level: Option<String>,
    pub cluster: Option<String>,
    /// The abuse-limit flags (see `server_limits`).
    pub limits: crate::server_limits::LimitArgs,
    /// The channels app's flags (see `channel_args`).
    pub channels: crate::channel_args::ChannelArgs,
}

/// Settings resolved from the profile and flags, with where each came from.
pub struct Resolved {
    pub config: ServerConfig,
    pub workers: usize,
    /// The I/O threads' wake-up coalescing window (`embedded_server::coalesce`).
    pub coalesce: Duration,
    pub table: Vec<crate::report::Setting>,
    /// The admin listener's HTTP API key (None: the API is off).
    pub api_key: Option<embedded_server::channels::ApiKey>,
    /// Secrets for a supervisor's server processes' environment (`channel_args::Resolved`).
    pub child_env: Vec<(&'static str, String)>,
}

/// The server's configuration: each flag given, else the profile's value, within its bounds.
pub fn resolve(p: &Profile, a: &Flags) -> Result<Resolved> {
    let s = &p.server;
    let mut table = Vec::new();
    let mut pick = |name: &'static str, flag: Option<usize>, prof: u64| -> usize {
        let (v, from) = match flag {
            Some(v) => (v, "flag"),
            None => (prof as usize, "profile"),
        };
        table.push((name, v.to_string(), from));
        v
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let workers = match pick("io workers (0 = cores)", a.workers, s.io_workers) {
        0 => cores,
        n => n,
    };
    let coalesce_us = pick(
        "wake-up coalescing us (0 = off)",
        a.coalesce_us.map(|v| v as usize),
        s.coalesce_us,
    );
    let max_window = embedded_server::coalesce::MAX_WINDOW.as_micros() as usize;
    if coalesce_us > max_window {
        anyhow::bail!(
            "--coalesce-us {coalesce_us}: at most {max_window} microseconds (0 serves every \
             message the moment it arrives)"
        );
    }
    let offload_pool_size = pick(
        "offload pool (0 = cores)",
        a.offload_pool,
        s.offload_pool_size,
    );
    let offload_queue_size = pick("offload queue", a.offload_queue, s.offload_queue_size);
    let max_connections = pick("max connections", a.max_connections, s.max_connections);
    let max_frame_bytes = pick("max frame bytes", a.max_frame, s.max_frame_bytes);
    let max_message_bytes = pick("max message bytes", a.max_message, s.max_message_bytes);
    let fragment_bytes = pick("fragment bytes", a.fragment, s.fragment_bytes);
    let send_queue_bytes = pick("send queue cap bytes", a.send_queue, s.send_queue_bytes);
    let notsent_lowat_bytes = pick(
        "unsent bytes per socket (TCP_NOTSENT_LOWAT; 0 = system's)",
        None,
        s.notsent_lowat_bytes,
    );
    let hb_interval = pick(
        "heartbeat interval s",
        a.heartbeat_interval.map(|v| v as usize),
        s.heartbeat.interval_secs,
    );
    let hb_timeout = pick(
        "heartbeat timeout s",
        a.heartbeat_timeout.map(|v| v as usize),
        s.heartbeat.timeout_secs,
    );
    let handler =
        SimulatedWork::parse(&a.handler).map_err(|e| anyhow::anyhow!("--handler: {e}"))?;
    let app = a.app;
    table.push(("app", format!("{:?}", app).to_lowercase(), "flag"));
    table.push(("handler", a.handler.clone(), "flag"));
    let pd = &s.deflate;
    let from_profile = embedded_server::DeflateSettings::from(pd);
    let deflate = embedded_server::DeflateSettings {
        enabled: (from_profile.enabled || a.deflate) && !a.no_deflate,
        window_bits: a.deflate_window_bits.unwrap_or(from_profile.window_bits),
        mem_level: a.deflate_mem_level.unwrap_or(from_profile.mem_level),
        level: a.deflate_level.unwrap_or(from_profile.level),
        threshold: a.deflate_threshold.unwrap_or(from_profile.threshold),
        context_takeover: from_profile.context_takeover && !a.deflate_no_context_takeover,
    };
    let from = |flag: bool| if flag { "flag" } else { "profile" };
    table.push((
        "permessage-deflate",
        if deflate.enabled {
            "on".into()
        } else {
            "off".into()
        },
        from(a.deflate || a.no_deflate),
    ));
    if deflate.enabled {
        table.push((
            "deflate window bits / memLevel / level",
            format!(
                "{} / {} / {}",
                deflate.window_bits, deflate.mem_level, deflate.level
            ),
            from(
                a.deflate_window_bits.is_some()
                    || a.deflate_mem_level.is_some()
                    || a.deflate_level.is_some(),
            ),
        ));
        table.push((
            "deflate threshold bytes",
            deflate.threshold.to_string(),
            from(a.deflate_threshold.is_some()),
        ));
        table.push((
            "deflate context takeover",
            deflate.context_takeover.to_string(),
            from(a.deflate_no_context_takeover),
        ));
    }
    let (inflate_budget, budget_from) = match (a.inflate_budget, pd.inflate_budget_bytes) {
        (Some(b), _) => (b, "flag"),
        (None, Some(b)) => (b as usize, "profile"),
        (None, None) => (
            embedded_server::config::default_inflate_budget(max_message_bytes),
            "default",
        ),
    };
    if deflate.enabled {
        table.push((
            "inflate budget bytes",
            inflate_budget.to_string(),
            budget_from,
        ));
    }
    let budget = resolve_budget(&s.budget, a, &mut table);
    let limits = crate::server_limits::resolve(&s.limits, &a.limits, &mut table)?;
    let channels = crate::channel_args::resolve(
        &s.channels,
        &a.channels,
        app == embedded_server::App::Channels,
        &mut table,
    )?;
    let config = ServerConfig {
        limits,
        channels: channels.settings,
        deflate,
        app,
        handler,
        max_connections,
        max_frame_bytes,
        max_message_bytes,
        fragment_bytes,
        send_queue_bytes,
        notsent_lowat_bytes,
        backpressure_close: if a.backpressure_close == 1013 {
            BackpressureClose::TryAgain
        } else {
            BackpressureClose::Policy
        },
        heartbeat_interval: Duration::from_secs(hb_interval as u64),
        heartbeat_timeout: Duration::from_secs(hb_timeout as u64),
        handshake_timeout: Duration::from_secs(a.handshake_timeout.max(1)),
        max_header_bytes: 8 << 10,
        allowed_origins: a.origins.clone(),
        subprotocols: a.subprotocols.clone(),
        offload_pool_size,
        offload_queue_size: offload_queue_size.max(1),
        shutdown_grace: Duration::from_secs(a.shutdown_grace),
        inflate_budget: Some(inflate_budget),
        memory_budget: None,
        conn_memory_share: budget.conn_share,
        message_timeout: budget.message_timeout,
        send_drain_timeout: budget.drain_timeout,
        inflate_ratio_limit: budget.ratio,
        inflate_rate: budget.rate,
    };
    // The memory budget's default follows the connection count; shown as resolved.
    let config = ServerConfig {
        memory_budget: Some(budget.memory.unwrap_or_else(|| config.memory_budget())),
        ..config
    };
    table.push((
        "memory budget bytes",
        config.memory_budget().to_string(),
        budget.memory_from,
    ));
    table.push((
        "memory share per connection bytes",
        config.conn_memory_share().to_string(),
        if budget.conn_share.is_some() {
            "flag/profile"
        } else {
            "default"
        },
    ));
    // Every bound lives in ServerConfig::validate; only where the budget came from is ours.
    config
        .validate()
        .map_err(|e| anyhow::Error::new(e.with_origin(budget_from)))?;
    Ok(Resolved {
        config,
        workers,
        coalesce: Duration::from_micros(coalesce_us as u64),
        table,
        api_key: channels.api_key,
        child_env: channels.child_env,
    })
}

/// `server.budget` with its flags over it (0 in the profile: the server's derived default).
struct BudgetResolved {
    memory: Option<usize>,
    memory_from: &'static str,
    conn_share: Option<usize>,
    message_timeout: Duration,
    drain_timeout: Duration,
    ratio: u32,
    rate: u64,
}

fn resolve_budget(
    p: &crate::profile::BudgetProfile,
    a: &Flags,
    table: &mut Vec<crate::report::Setting>,
) -> BudgetResolved {
    let nonzero = |v: u64| (v > 0).then_some(v as usize);
    let (memory, memory_from) = match (a.memory_budget, nonzero(p.memory_bytes)) {
        (Some(b), _) => (Some(b), "flag"),
        (None, Some(b)) => (Some(b), "profile"),
        (None, None) => (None, "default"),
    };
    let from = |flag: bool| if flag { "flag" } else { "profile" };
    let message_timeout = a.message_timeout.unwrap_or(p.message_timeout_secs);
    let drain_timeout = a.drain_timeout.unwrap_or(p.drain_timeout_secs);
    let ratio = a
        .inflate_ratio_limit
        .unwrap_or(u32::try_from(p.inflate_ratio_limit).unwrap_or(u32::MAX));
    let rate = a.inflate_rate.unwrap_or(p.inflate_rate_bytes);
    table.push((
        "message timeout secs (0 = none)",
        message_timeout.to_string(),
        from(a.message_timeout.is_some()),
    ));
    table.push((
        "send drain timeout secs (0 = none)",
        drain_timeout.to_string(),
        from(a.drain_timeout.is_some()),
    ));
    table.push((
        "inflate ratio limit / rate bytes per s",
        format!("{ratio} / {rate}"),
        from(a.inflate_ratio_limit.is_some() || a.inflate_rate.is_some()),
    ));
    BudgetResolved {
        memory,
        memory_from,
        conn_share: a.conn_memory_share.or(nonzero(p.conn_share_bytes)),
        message_timeout: Duration::from_secs(message_timeout),
        drain_timeout: Duration::from_secs(drain_timeout),
        ratio,
        rate,
    }
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
    if let Some(load) = &req.self_test {
        return self_test(&req, load);
    }
    let a = &req.flags;
    let r = resolve(&req.profile, a)?;
    if let Some(url) = &a.cluster {
        crate::cluster::client(url)?;
    }
    let admin: Option<SocketAddr> = match a.admin.as_str() {
        "off" => None,
        s => Some(s.parse().with_context(|| {
            format!("--admin {s}: not an address like 127.0.0.1:9002 (or off)")
        })?),
    };
    let tls = tls_config(a)?;
    // A supervised process (started by `--processes`) serves; anyone else may supervise.
    let supervised: Option<u64> = std::env::var(crate::supervisor::ENV_PROCESS)
        .ok()
        .and_then(|v| v.parse().ok());
    if supervised.is_none() {
        if let Some(outcome) = supervise(&req.profile, a, &r, admin, tls.is_some())? {
            return Ok(outcome);
        }
    }
    init_logs(a, "info");
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let (soft, hard) = crate::host::raise_nofile();
    let rt = runtime(&r)?;
    rt.block_on(async move {
        // Before anything listens: a SIGTERM right after "listening" must drain, not kill.
        let shutdown = embedded_server::shutdown_signal()
            .context("cannot install the SIGTERM/SIGINT handlers")?;
        let addr = SocketAddr::new(a.bind, a.port);
        let acceptors = match (a.reuseport, a.acceptors) {
            (false, _) => 1,
            (true, 0) => r.workers,
            (true, n) => n,
        };
        let listeners = embedded_server::bind(addr, a.reuseport, acceptors);
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
        if (soft as usize) < r.config.max_connections + 64 {
            eprintln!(
                "wstune: warning: this process may open {soft} files (hard limit {hard}), fewer than \
                 max connections {}: accept() will fail with EMFILE beyond that. Raise LimitNOFILE / \
                 ulimit -n (wstune check says how).",
                r.config.max_connections
            );
        }
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
        eprintln!(
            "{}",
            crate::report::settings_table(&r.table, r.workers, listeners.len(), cfg!(windows))
        );
        eprintln!("wstune serve: listening on {scheme}://{local}/");
        if let Some(a) = admin_addr {
            let api = if r.api_key.is_some() && r.config.app == embedded_server::App::Channels {
                format!(" and the API on http://{a}/api/")
            } else {
                String::new()
            };
            eprintln!("wstune serve: admin on http://{a}/healthz and http://{a}/metrics{api}");
        }
        let server = with_tls(Server::new(r.config.clone()), tls);
        if let Some(url) = &a.cluster {
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
            let max_body = r.config.max_message_bytes;
            use embedded_server::admin::{app_name, Gate};
            let gate = std::sync::Arc::new(Gate::new(r.api_key.clone(), max_body));
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
fn supervise(
    prof: &Profile,
    a: &Flags,
    r: &Resolved,
    admin: Option<SocketAddr>,
    tls: bool,
) -> Result<Option<Outcome>> {
    use crate::profile::Processes;
    let (want, from) = match a.processes {
        Some(p) => (p, "--processes"),
        None => (prof.server.processes, "server.processes"),
    };
    if want == Processes::Count(1) {
        return Ok(None);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (_, hard) = crate::host::raise_nofile();
    let sizing = crate::supervisor::size(want, from, r.config.max_connections, hard, cores)
        .map_err(anyhow::Error::msg)?;
    if sizing.processes == 1 {
        return Ok(None);
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (admin, tls);
        anyhow::bail!("{from} {want}: several processes on one port need Linux (SO_REUSEPORT spreads the connections); run one `wstune serve` per port behind a load balancer");
    }
    #[cfg(target_os = "linux")]
    {
        // One process per core by default, each with its share of the cores (nginx's layout);
        // an explicit --workers or profile io_workers is each process's own.
        let workers = if a.workers.is_none() && prof.server.io_workers == 0 {
            (cores / sizing.processes).max(1)
        } else {
            r.workers
        };
        let plan = crate::supervisor::Plan {
            sizing,
            addr: SocketAddr::new(a.bind, a.port),
            admin,
            args: std::env::args().skip(1).collect(),
            workers,
            relay: a.cluster.is_none(),
            api_key: r.api_key.clone(),
            child_env: r.child_env.clone(),
            max_body: r.config.max_message_bytes,
            memory_budget: r.config.memory_budget(),
            grace: Duration::from_secs(a.shutdown_grace),
            scheme: if tls { "wss" } else { "ws" },
        };
        Ok(Some(crate::supervisor::supervise(plan)?))
    }
}

/// The TLS configuration from --tls-cert/--tls-key, if given.
#[cfg(feature = "tls")]
fn tls_config(a: &Flags) -> Result<Option<embedded_server::tls::Config>> {
    match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => {
            Ok(Some(embedded_server::tls::load(c, k).map_err(|e| {
                anyhow::anyhow!("--tls-cert/--tls-key: {e}")
            })?))
        }
        _ => Ok(None),
    }
}

#[cfg(not(feature = "tls"))]
fn tls_config(a: &Flags) -> Result<Option<std::convert::Infallible>> {
    if a.tls_cert.is_some() {
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

/// The command line of a child `wstune serve` with this run's server settings: `app` on a
/// free loopback port, as `processes` processes holding `max_connections` in all, no admin.
fn child_args(
    a: &Flags,
    limits: &crate::profile::LimitsProfile,
    app: &str,
    processes: usize,
    max_connections: usize,
) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--profile".into(),
        a.profile.clone(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "0".into(),
        // On loopback, on a free port: the self-test reads the budget from its /metrics.
        "--admin".into(),
        "127.0.0.1:0".into(),
        "--app".into(),
        app.into(),
        "--processes".into(),
        processes.to_string(),
        "--max-connections".into(),
        max_connections.to_string(),
        "--backpressure-close".into(),
        a.backpressure_close.to_string(),
        "--handshake-timeout".into(),
        a.handshake_timeout.to_string(),
        "--shutdown-grace".into(),
        a.shutdown_grace.to_string(),
    ];
    if app == "echo" {
        v.extend(["--handler".into(), a.handler.clone()]);
    }
    // A flag the operator gave goes on to the child as given; one left out keeps its default.
    fn opt<T: ToString>(v: &mut Vec<String>, flag: &str, x: Option<T>) {
        if let Some(x) = x {
            v.extend([flag.to_string(), x.to_string()]);
        }
    }
    opt(&mut v, "--workers", a.workers);
    opt(&mut v, "--coalesce-us", a.coalesce_us);
    opt(&mut v, "--offload-pool", a.offload_pool);
    opt(&mut v, "--offload-queue", a.offload_queue);
    opt(&mut v, "--max-frame", a.max_frame);
    opt(&mut v, "--max-message", a.max_message);
    opt(&mut v, "--fragment", a.fragment);
    opt(&mut v, "--send-queue", a.send_queue);
    opt(&mut v, "--heartbeat-interval", a.heartbeat_interval);
    opt(&mut v, "--heartbeat-timeout", a.heartbeat_timeout);
    opt(&mut v, "--deflate-window-bits", a.deflate_window_bits);
    opt(&mut v, "--deflate-mem-level", a.deflate_mem_level);
    opt(&mut v, "--deflate-level", a.deflate_level);
    opt(&mut v, "--deflate-threshold", a.deflate_threshold);
    opt(&mut v, "--inflate-budget", a.inflate_budget);
    opt(&mut v, "--memory-budget", a.memory_budget);
    opt(&mut v, "--conn-memory-share", a.conn_memory_share);
    opt(&mut v, "--message-timeout", a.message_timeout);
    opt(&mut v, "--drain-timeout", a.drain_timeout);
    opt(&mut v, "--inflate-ratio-limit", a.inflate_ratio_limit);
    opt(&mut v, "--inflate-rate", a.inflate_rate);
    // The self-test's children exempt its loopback sources from the abuse limits.
    v.extend(crate::server_limits::self_test_child_args(
        &a.limits, limits,
    ));
    for o in &a.origins {
        v.extend(["--origin".into(), o.clone()]);
    }
    for p in &a.subprotocols {
        v.extend(["--subprotocol".into(), p.clone()]);
    }
    for (set, flag) in [
        (a.deflate, "--deflate"),
        (a.no_deflate, "--no-deflate"),
        (
            a.deflate_no_context_takeover,
            "--deflate-no-context-takeover",
        ),
    ] {
        if set {
            v.push(flag.into());
        }
    }
    v
}

/// `serve --self-test`: check the host, start the tuned server (an echo instance with the
/// configured handler, and a broadcast instance) on loopback, run the scenarios sized to this
/// host against it, print one report and exit with its verdict.
fn self_test(req: &Request, load: &Load) -> Result<Outcome> {
    use crate::selftest::{client::Target, limits, Scenario};
    let a = &req.flags;
    let profile = &req.profile;
    let r = resolve(profile, a)?;
    init_logs(a, "warn");
    let host = req
        .host
        .as_ref()
        .map(|h| check::host_check(&check::report(&h.inputs, h.backend.as_ref(), None)));
    let (soft, _hard) = crate::host::raise_nofile();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let profile_rate = profile.selftest.rate_per_client as f64;
    // Beyond one process's fd limit the server runs as a child `serve --processes N` (the
    // supervisor, Linux); `--processes` (or the profile's server.processes) fixes N instead.
    let want = match (a.processes, profile.server.processes) {
        (Some(p), _) => Some((p, "--processes")),
        (None, crate::profile::Processes::Count(1)) => None,
        (None, p) => Some((p, "server.processes")),
    };
    let max_server_processes = match want {
        // The user's program is one process as far as the sizing knows (it may fork more;
        // they are measured as its process tree).
        _ if req.command.is_some() => 1,
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
            r.config.deflate.window_bits,
            room.mem_available,
        )
        // Only said when the deflate scenario runs (named, or among the defaults).
        .filter(|_| {
            r.config.deflate.enabled
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
    if r.config.deflate.enabled {
        defaults.push(Scenario::Deflate);
    }
    // A user's server: broadcast needs an app that sends every message it gets to every
    // connection, which an application cannot be assumed to do; it runs when asked for.
    let mut skipped = Vec::new();
    if req.command.is_some() && load.scenarios.is_empty() {
        defaults.retain(|s| *s != Scenario::Broadcast);
        skipped.push(
            "broadcast: your server is not assumed to send each message to every connection; \
             add --scenario broadcast (with the other scenarios you want) if it does"
                .to_string(),
        );
    }
    let rt = runtime(&r)?;
    let run = async {
        let mut config = r.config.clone();
        config.max_connections = config.max_connections.max(conns + 16);
        crate::server_limits::exempt_self_test(&mut config.limits);
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
        let (echo, fanout, servers, server_pid, fanout_pid) = if let Some(words) = &req.command {
            let u = crate::selftest::command::UserServer::start(words, &config, false).await?;
            eprintln!(
                "wstune serve --self-test: your server `{}` listens on ws://{}/ (pid {})",
                u.program, u.addr, u.pid
            );
            let (addr, pid) = (u.addr, u.pid);
            (addr, addr, vec![Running::User(Box::new(u))], pid, None)
        } else if processes > 1 {
            let e = crate::selftest::server::ChildServer::start(&child_args(
                a,
                &profile.server.limits,
                "echo",
                processes,
                server_max,
            ))
            .await?;
            let b = crate::selftest::server::ChildServer::start(&child_args(
                a,
                &profile.server.limits,
                "broadcast",
                processes,
                server_max,
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
                server_tree: processes > 1 || req.command.is_some(),
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
    report.program = req.command.as_ref().map(|w| w.join(" "));
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
fn runtime(r: &Resolved) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(r.workers).enable_all();
    embedded_server::coalesce::install(&mut b, r.coalesce);
    b.build()
}

fn init_logs(a: &Flags, default: &str) {
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
