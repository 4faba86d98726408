//! `serve`'s flags and the profile -> the one [`ServeConfig`]: each flag given, else the
//! profile's value, within its bounds, with the settings table that says which. A child server
//! (`--processes`, the self-test's) does not resolve again: it reads its parent's configuration
//! from the environment ([`crate::serve::config::ENV_CONFIG`]).

mod abuse;
mod channels;
mod cluster;
mod deflate;
mod drain;

use super::{backend, load};
use crate::cli::args::{self, ServeArgs};
use crate::cmd;
use crate::engine::check::{self, HostInputs, Target};
use crate::profile::Profile;
use crate::report::Setting;
use crate::serve::config::{
    LogFormat, Secrets, ServeConfig, TlsFiles, TlsResumption, ENV_API_KEY, ENV_AUTH_SECRET,
    ENV_CONFIG,
};
use crate::serve::config_error::in_flags;
use anyhow::{bail, Context, Result};
use embedded_server::{BackpressureClose, BuiltinConfig, ServerConfig, SimulatedWork};
use std::net::SocketAddr;
use std::time::Duration;

pub fn serve(a: &ServeArgs) -> Result<cmd::serve::Request> {
    // A child server: its parent's configuration, handed over whole.
    if let Some(json) = crate::host::take_env(ENV_CONFIG).map_err(anyhow::Error::msg)? {
        // wstune starts its child servers with no flags; a flag beside an inherited variable
        // would be silently replaced by the variable's configuration, so it is refused. (The
        // flags have no PartialEq; their Debug form says whether any was given.)
        if format!("{a:?}") != format!("{:?}", ServeArgs::default()) {
            bail!(
                "${ENV_CONFIG} is set: it is how wstune hands its own child servers their whole \
                 configuration, and it would replace every flag given here. Unset it \
                 (env -u {ENV_CONFIG} wstune serve ...) to serve with these flags"
            );
        }
        let api_key = match crate::host::take_env(ENV_API_KEY).map_err(anyhow::Error::msg)? {
            Some(k) => Some(
                embedded_server::channels::ApiKey::new(&k)
                    .map_err(|e| anyhow::anyhow!("${ENV_API_KEY}: {e}"))?,
            ),
            None => None,
        };
        let secrets = Secrets {
            api_key,
            auth_secret: crate::host::take_env(ENV_AUTH_SECRET).map_err(anyhow::Error::msg)?,
        };
        let config = ServeConfig::from_json(&json, secrets)?;
        let host = host_inputs(&config.profile, None)?;
        return Ok(cmd::serve::Request {
            config,
            self_test: None,
            host,
        });
    }
    if a.self_test {
        let tls_load = &a.load.tls;
        if a.tls_cert.is_some() && tls_load.ca.is_none() && !tls_load.insecure {
            bail!("--self-test with --tls-cert: the load generator must trust that certificate: add --ca FILE (the CA that signed it, for the name localhost) or --insecure; or drop --tls-cert/--tls-key and give --tls for a certificate made for the run");
        }
        if a.tls_cert.is_none()
            && !a.tls_serve.tls
            && (tls_load.ca.is_some() || tls_load.insecure || tls_load.tls_resume)
        {
            bail!("--ca, --insecure and --tls-resume are for a wss:// server: add --tls (or --tls-cert/--tls-key) to serve the self-test over TLS");
        }
        if a.command.is_some() && (a.tls_serve.tls || a.tls_cert.is_some()) {
            bail!("--self-test --command: your program serves its own TLS, if any; measure it with `wstune selftest --url wss://... --ca FILE` instead of --tls");
        }
        // It starts its own echo and broadcast instances on loopback: flags that choose another
        // app or span nodes would be silently ignored, so they are refused instead.
        if a.command.is_some() && a.processes.is_some() {
            bail!("--self-test --command runs your program as it starts itself (one process, or as many as it forks): drop --processes");
        }
        if a.command.is_some() && a.handler != "echo" {
            bail!("--handler {} simulates work in the built-in echo; with --command your program's own handler runs: drop --handler", a.handler);
        }
        if a.app != args::AppArg::Echo || a.cluster.is_some() || a.reuseport {
            bail!("--self-test starts its own echo and broadcast instances on loopback, so --app, --cluster and --reuseport do not apply; measure such a server with `wstune selftest --url` (and --pid)");
        }
    } else if load(&a.load)?.any_set() {
        bail!(
            "--scenario, --conns, --rate, --size, --secs, --report, --ca, --insecure and \
             --tls-resume only apply to a load test: add --self-test (or measure a running \
             server with `wstune selftest --url`)"
        );
    }
    if a.tls_serve.tls_resumption.is_some() && a.tls_cert.is_none() && !a.tls_serve.tls {
        bail!("--tls-resumption applies to a TLS listener: add --tls-cert/--tls-key (or --self-test --tls)");
    }
    let profile = crate::profile::load(&a.profile)?.profile;
    // `--host-root` is the self-test's stand-in host.
    let host = host_inputs(&a.profile, a.host_root.as_deref().filter(|_| a.self_test))?;
    let command = a
        .command
        .as_deref()
        .map(crate::selftest::command::parse)
        .transpose()?;
    let config = config(&profile, a)?;
    let self_test = match a.self_test {
        true => Some(crate::serve::self_test::SelfTest {
            load: load(&a.load)?,
            profile,
            command,
            tls: a.tls_serve.tls || a.tls_cert.is_some(),
            resumption: resumption(a.tls_serve.tls_resumption),
        }),
        false => None,
    };
    Ok(cmd::serve::Request {
        config,
        self_test,
        host,
    })
}

/// `--tls-resumption` (tickets when not given).
pub fn resumption(r: Option<args::tls::TlsResumption>) -> TlsResumption {
    match r {
        None | Some(args::tls::TlsResumption::Tickets) => TlsResumption::Tickets,
        Some(args::tls::TlsResumption::Cache) => TlsResumption::Cache,
        Some(args::tls::TlsResumption::Off) => TlsResumption::Off,
    }
}

/// The host the server runs on, for its warning (and the self-test's host half): a host that
/// cannot be read gets no warning. A `--host-root` tree that is not one is bad input, not a
/// host that fails every check.
fn host_inputs(profile: &str, root: Option<&std::path::Path>) -> Result<Option<HostInputs>> {
    let backend = match root {
        Some(dir) => Some(
            backend(Some(dir), None).with_context(|| format!("--host-root {}", dir.display()))?,
        ),
        None => backend(None, None).ok(),
    };
    Ok(backend.and_then(|backend| {
        let inputs = check::inputs(&Target::profile(profile), backend.as_ref()).ok()?;
        Some(HostInputs { inputs, backend })
    }))
}

/// The server configuration `wstune serve --profile SPEC` would run with no other flag: what
/// `pool --command` starts the user's server with. Resolved as `serve` resolves it, from the
/// flags' own defaults.
pub fn profile_server_config(spec: &str) -> Result<ServerConfig> {
    let profile = crate::profile::load(spec)?.profile;
    let a = ServeArgs {
        profile: spec.to_string(),
        ..ServeArgs::default()
    };
    Ok(config(&profile, &a)?.server)
}

/// `serve`'s configuration: each flag given, else the profile's value, within its bounds.
pub fn config(p: &Profile, a: &ServeArgs) -> Result<ServeConfig> {
    let s = &p.server;
    let mut table: Vec<Setting> = Vec::new();
    let n = sizes(s, a, &mut table)?;
    let handler =
        SimulatedWork::parse(&a.handler).map_err(|e| anyhow::anyhow!("--handler: {e}"))?;
    let app = match a.app {
        args::AppArg::Echo => embedded_server::App::Echo,
        args::AppArg::Broadcast => embedded_server::App::Broadcast,
        args::AppArg::Channels => embedded_server::App::Channels,
    };
    table.push(("app", format!("{:?}", app).to_lowercase(), "flag"));
    table.push(("handler", a.handler.clone(), "flag"));
    let deflate = deflate::resolve(&s.deflate, a, n.max_message_bytes, &mut table);
    let budget = budget(&s.budget, a, &mut table);
    let drain = drain::resolve(&s.drain, a, &mut table);
    let limits = abuse::resolve(&s.limits, &a.limits, &mut table)?;
    let channels = channels::resolve(
        &s.channels,
        &a.channels,
        app == embedded_server::App::Channels,
        &mut table,
    )?;
    let cluster = cluster::resolve(a.cluster.as_deref(), &channels.settings.history)?;
    let builtin = BuiltinConfig {
        app,
        handler,
        channels: channels.settings,
    };
    let server = ServerConfig {
        limits,
        deflate: deflate.settings,
        max_connections: n.max_connections,
        max_frame_bytes: n.max_frame_bytes,
        max_message_bytes: n.max_message_bytes,
        fragment_bytes: n.fragment_bytes,
        send_queue_bytes: n.send_queue_bytes,
        notsent_lowat_bytes: n.notsent_lowat_bytes,
        backpressure_close: if a.backpressure_close == 1013 {
            BackpressureClose::TryAgain
        } else {
            BackpressureClose::Policy
        },
        heartbeat_interval: Duration::from_secs(n.hb_interval as u64),
        heartbeat_timeout: Duration::from_secs(n.hb_timeout as u64),
        handshake_timeout: Duration::from_secs(a.handshake_timeout.max(1)),
        max_header_bytes: 8 << 10,
        allowed_origins: a.origins.clone(),
        subprotocols: a.subprotocols.clone(),
        offload_pool_size: n.offload_pool_size,
        offload_queue_size: n.offload_queue_size.max(1),
        shutdown_grace: Duration::from_secs(a.shutdown_grace),
        drain_over: drain.over,
        drain_rate: drain.rate,
        drain_delay: drain.delay,
        inflate_budget: Some(deflate.inflate_budget),
        memory_budget: None,
        conn_memory_share: budget.conn_share,
        message_timeout: budget.message_timeout,
        send_drain_timeout: budget.drain_timeout,
        inflate_ratio_limit: budget.ratio,
        inflate_rate: budget.rate,
    };
    // The memory budget's default follows the connection count; shown as resolved.
    let server = ServerConfig {
        memory_budget: Some(budget.memory.unwrap_or_else(|| server.memory_budget())),
        ..server
    };
    table.push((
        "memory budget bytes",
        server.memory_budget().to_string(),
        budget.memory_from,
    ));
    table.push((
        "memory share per connection bytes",
        server.conn_memory_share().to_string(),
        if budget.conn_share.is_some() {
            "flag/profile"
        } else {
            "default"
        },
    ));
    // Every bound lives in ServerConfig::validate; only where the budget came from is ours.
    server
        .validate()
        .map_err(|e| in_flags(e.with_origin(deflate.budget_from)))?;
    builtin.validate().map_err(in_flags)?;
    let admin = admin(a)?;
    let (processes, processes_from) = match a.processes {
        Some(n) => (n, "--processes"),
        None => (s.processes, "server.processes"),
    };
    let mut resolved = ServeConfig {
        profile: a.profile.clone(),
        bind: a.bind,
        port: a.port,
        admin,
        reuseport: a.reuseport,
        acceptors: a.acceptors,
        workers: n.workers,
        workers_follow_cores: a.workers.is_none() && s.io_workers == 0,
        coalesce: Duration::from_micros(n.coalesce_us as u64),
        processes,
        processes_from: processes_from.into(),
        tls: match (&a.tls_cert, &a.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                resumption: resumption(a.tls_serve.tls_resumption),
            }),
            _ => None,
        },
        log_format: match a.log_format {
            args::LogFormat::Text => LogFormat::Text,
            args::LogFormat::Json => LogFormat::Json,
        },
        log_level: a.log_level.clone(),
        cluster,
        replaced_drain_rate: 0,
        server,
        builtin,
        settings: table
            .into_iter()
            .map(|(k, v, f)| (k.to_string(), v, f.to_string()))
            .collect(),
        memory_budget_derived: budget.memory.is_none(),
        token_auth: channels.token_auth,
        secrets: Secrets {
            api_key: channels.api_key,
            auth_secret: channels.auth_secret,
        },
    };
    resolved.refresh_drain_row();
    Ok(resolved)
}

/// The counts and sizes: each flag given, else the profile's value.
struct Sizes {
    /// I/O threads in force (0 in the flag or the profile: one per core).
    workers: usize,
    coalesce_us: usize,
    offload_pool_size: usize,
    offload_queue_size: usize,
    max_connections: usize,
    max_frame_bytes: usize,
    max_message_bytes: usize,
    fragment_bytes: usize,
    send_queue_bytes: usize,
    notsent_lowat_bytes: usize,
    hb_interval: usize,
    hb_timeout: usize,
}

fn sizes(
    s: &crate::profile::ServerSettings,
    a: &ServeArgs,
    table: &mut Vec<Setting>,
) -> Result<Sizes> {
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
        bail!(
            "--coalesce-us {coalesce_us}: at most {max_window} microseconds (0 serves every \
             message the moment it arrives)"
        );
    }
    Ok(Sizes {
        workers,
        coalesce_us,
        offload_pool_size: pick(
            "offload pool (0 = cores)",
            a.offload_pool,
            s.offload_pool_size,
        ),
        offload_queue_size: pick("offload queue", a.offload_queue, s.offload_queue_size),
        max_connections: pick("max connections", a.max_connections, s.max_connections),
        max_frame_bytes: pick("max frame bytes", a.max_frame, s.max_frame_bytes),
        max_message_bytes: pick("max message bytes", a.max_message, s.max_message_bytes),
        fragment_bytes: pick("fragment bytes", a.fragment, s.fragment_bytes),
        send_queue_bytes: pick("send queue cap bytes", a.send_queue, s.send_queue_bytes),
        notsent_lowat_bytes: pick(
            "unsent bytes per socket (TCP_NOTSENT_LOWAT; 0 = system's)",
            None,
            s.notsent_lowat_bytes,
        ),
        hb_interval: pick(
            "heartbeat interval s",
            a.heartbeat_interval.map(|v| v as usize),
            s.heartbeat.interval_secs,
        ),
        hb_timeout: pick(
            "heartbeat timeout s",
            a.heartbeat_timeout.map(|v| v as usize),
            s.heartbeat.timeout_secs,
        ),
    })
}
/// `--admin ADDR` or `off`. The self-test starts its servers with their own admin listeners:
/// its --admin is unused, so an unreadable one is no error there.
fn admin(a: &ServeArgs) -> Result<Option<SocketAddr>> {
    Ok(match a.admin.as_str() {
        "off" => None,
        s => match s.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) if a.self_test => None,
            Err(_) => bail!("--admin {s}: not an address like 127.0.0.1:9002 (or off)"),
        },
    })
}

/// `server.budget` with its flags over it (0 in the profile: the server's derived default).
struct Budget {
    memory: Option<usize>,
    memory_from: &'static str,
    conn_share: Option<usize>,
    message_timeout: Duration,
    drain_timeout: Duration,
    ratio: u32,
    rate: u64,
}

fn budget(p: &crate::profile::BudgetProfile, a: &ServeArgs, table: &mut Vec<Setting>) -> Budget {
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
    Budget {
        memory,
        memory_from,
        conn_share: a.conn_memory_share.or(nonzero(p.conn_share_bytes)),
        message_timeout: Duration::from_secs(message_timeout),
        drain_timeout: Duration::from_secs(drain_timeout),
        ratio,
        rate,
    }
}

#[cfg(test)]
mod tests;
