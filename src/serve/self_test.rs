//! `serve --self-test`: the host half of the check pipeline and the self-test pipeline
//! around the servers it starts (in this process, as a child `serve --processes N` handed
//! this configuration, or the user's program), sized by `selftest::sizing::size_serve`.

use super::config::ServeConfig;
use super::run::{init_logs, runtime};
use crate::engine::check::{self, HostInputs};
use crate::engine::selftest::Load;
use crate::outcome::Outcome;
use crate::profile::Profile;
use crate::selftest::report::BudgetReport;
use anyhow::Result;
use std::net::SocketAddr;
use std::sync::Arc;

/// `serve --self-test`'s own inputs.
pub struct SelfTest {
    /// The load settings.
    pub load: Load,
    /// The profile the scenarios are sized by and judged against.
    pub profile: Profile,
    /// `--command`: the user's server to start instead of the built-in apps.
    pub command: Option<Vec<String>>,
    /// Serve and measure wss:// (`--tls`, or `--tls-cert`): with the configuration's
    /// certificate, else one made for the run.
    pub tls: bool,
    /// `--tls-resumption`, for the certificate made for the run.
    pub resumption: super::config::TlsResumption,
}

/// The run's own CA and certificate (`--tls` without `--tls-cert`): the server reads them
/// from a private directory that goes when the run ends; the generator trusts the CA alone.
#[cfg(feature = "tls")]
fn run_certificate(
    r: &mut ServeConfig,
    load: &mut Load,
    resumption: super::config::TlsResumption,
) -> Result<Option<tempfile::TempDir>> {
    if r.tls.is_some() {
        return Ok(None);
    }
    let g =
        crate::selftest::tls::generate(&["localhost", "127.0.0.1"]).map_err(anyhow::Error::msg)?;
    let dir = crate::host::temp::private_dir()?;
    let cert = crate::host::temp::write_private(dir.path(), "cert.pem", g.cert_pem.as_bytes())?;
    let key = crate::host::temp::write_private(dir.path(), "key.pem", g.key_pem.as_bytes())?;
    r.tls = Some(super::config::TlsFiles {
        cert,
        key,
        resumption,
    });
    load.tls.ca_pem = Some(g.ca_pem);
    Ok(Some(dir))
}

#[cfg(not(feature = "tls"))]
fn run_certificate(
    _: &mut ServeConfig,
    _: &mut Load,
    _: super::config::TlsResumption,
) -> Result<Option<std::convert::Infallible>> {
    anyhow::bail!(
        "--tls: this wstune was built without the `tls` feature; rebuild it with default features"
    )
}

/// `serve --self-test`: check the host, start the tuned server (an echo instance with the
/// configured handler, and a broadcast instance) on loopback, run the scenarios sized to this
/// host against it, print one report and exit with its verdict.
pub fn run(r: &ServeConfig, t: &SelfTest, host: Option<&HostInputs>) -> Result<Outcome> {
    use crate::selftest::{client::Target, Scenario};
    let (mut r, mut load) = (r.clone(), t.load.clone());
    let _certificate = if t.tls {
        run_certificate(&mut r, &mut load, t.resumption)?
    } else {
        None
    };
    init_logs(&r, "warn");
    let checked = host.map(|h| check::report(&h.inputs, h.backend.as_ref(), None));
    // The same findings word the advice of each scenario's host timeline.
    load.host_words = checked
        .as_ref()
        .map(|c| std::sync::Arc::new(crate::watch::advice::Words::from_findings(&c.results)));
    let (r, load, profile) = (&r, &load, &t.profile);
    let host = checked.as_ref().map(check::host_check);
    // The machine the servers and the load share: what the sizing and the run read.
    let machine = crate::host::Machine::live();
    let size = size_run(r, t, load, profile, &machine)?;
    let (conns, processes, server_max) = (size.conns, size.processes, size.server_max);
    let mut defaults = Scenario::by_default(r.server.deflate.enabled, t.tls);
    let tls_server = super::run::tls_config(r)?;
    // A user's server: broadcast needs an app that sends every message it gets to every
    // connection, which an application cannot be assumed to do; it runs when asked for.
    let mut skipped = Vec::new();
    if t.command.is_some() && load.scenarios.is_empty() {
        defaults.retain(|s| !s.fans_out());
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
            let app = embedded_server::BuiltinConfig {
                app,
                ..r.builtin.clone()
            };
            let tls = tls_server.clone();
            crate::selftest::server::start_in_process_with(config.clone(), &app, |s| {
                super::run::with_tls(s, tls)
            })
        };
        let Servers {
            echo,
            fanout,
            running: servers,
            pid: server_pid,
            fanout_pid,
        } = start_servers(
            r,
            t.command.as_deref(),
            &config,
            (processes, server_max),
            start,
        )
        .await?;
        let target = |addr: SocketAddr| match t.tls {
            // The name the run's certificate (or the user's, with --ca) is for.
            true => Target {
                host: format!("localhost:{}", addr.port()),
                server_name: "localhost".into(),
                tls: true,
                ..Target::plain(addr)
            },
            false => Target::plain(addr),
        };
        // restart: how the server just started is disrupted (never in the default list).
        let mut load = load.clone();
        // (--drain-url: the plan posts to it, as `selftest` does.)
        if load.scenarios.iter().any(|s| s.disrupts_server()) && load.restart.drain_url.is_none() {
            let start_again = || -> StartAgain {
                let app = embedded_server::BuiltinConfig {
                    app: embedded_server::App::Echo,
                    ..r.builtin.clone()
                };
                let (config, tls) = (config.clone(), tls_server.clone());
                Arc::new(move |addr| {
                    let tls = tls.clone();
                    crate::selftest::server::start_in_process_on(addr, config.clone(), &app, |s| {
                        super::run::with_tls(s, tls)
                    })
                })
            };
            let server = restartable(&servers[0], r, conns, processes, echo, start_again);
            load.restart.disrupt = Some(super::self_test_restart::disrupt(
                load.restart.by.as_ref(),
                server,
            )?);
        }
        let load = &load;
        // Short scenarios: this is the quick start's command, and 5 s of steady load per
        // scenario gives stable medians on the sizes it picks.
        let plan = crate::engine::selftest::plan(
            load,
            target(echo),
            target(fanout),
            profile,
            crate::engine::selftest::Defaults {
                machine,
                subscribe_targets: Vec::new(),
                deflate: false,
                conns,
                scenarios: defaults,
                secs: 5.0,
                rate: Some(size.rate),
                rate_note: size.rate_note.clone(),
                server_processes: Some(processes),
                // The user's program: whatever processes it starts count too.
                server_tree: processes > 1 || t.command.is_some(),
                deflate_conns: size.deflate_conns,
                broadcast_server_pid: fanout_pid,
                budget_cores: Some(size.cores),
            },
            Some(server_pid),
            size.scaled_down.clone(),
        )?;
        eprintln!(
            "wstune serve --self-test: profile {}, {} connections, {} server process(es), {} scenario(s) of {} s against {}",
            profile.name, plan.opts.conns, processes, plan.scenarios.len(), plan.opts.secs, plan.url
        );
        for s in &plan.scaled_down {
            eprintln!("wstune serve --self-test: scaled down: {s}");
        }
        let (mut report, mut error) = crate::engine::selftest::execute(&plan).await;
        stop_servers(servers, &mut report, &mut error).await;
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

/// The run sized to this host: its connections, the server's processes, the rate the cores
/// allow (see `selftest::sizing::size_serve`).
fn size_run(
    r: &ServeConfig,
    t: &SelfTest,
    load: &Load,
    profile: &Profile,
    machine: &crate::host::Machine,
) -> Result<crate::selftest::sizing::ServeSize> {
    use crate::selftest::sizing;
    let (soft, _hard) = crate::host::raise_nofile();
    // Beyond one process's fd limit the server runs as a child `serve --processes N` (the
    // supervisor, Linux); `--processes` (or the profile's server.processes) fixes N instead.
    sizing::size_serve(&sizing::ServeAsk {
        host: machine,
        profile,
        conns: load.conns,
        scenarios: &load.scenarios,
        processes: (r.processes_from == "--processes"
            || r.processes != crate::profile::Processes::Count(1))
        .then_some((r.processes, r.processes_from.as_str())),
        user_program: t.command.is_some(),
        deflate_window_bits: r
            .server
            .deflate
            .enabled
            .then_some(r.server.deflate.window_bits),
        tls: t.tls,
        nofile: soft,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
    .map_err(anyhow::Error::msg)
}

/// The servers one run measures: the echo server's and the broadcast server's addresses (the
/// same for a user's program), what stops them, and the processes measured.
struct Servers {
    echo: SocketAddr,
    fanout: SocketAddr,
    running: Vec<Running>,
    /// The echo server's process (the supervisor's, for a child with processes).
    pid: u32,
    /// The broadcast server's, when it is another process.
    fanout_pid: Option<u32>,
}

/// Start the run's servers: the user's program (`command`), a child `serve --processes N`
/// for each app (`processes` over 1, each process holding up to `server_max`), or both apps
/// in this process (`start`).
async fn start_servers(
    r: &ServeConfig,
    command: Option<&[String]>,
    config: &embedded_server::ServerConfig,
    (processes, server_max): (usize, usize),
    start: impl Fn(embedded_server::App) -> crate::selftest::server::InProcess,
) -> Result<Servers> {
    Ok(if let Some(words) = command {
        let u = crate::selftest::command::UserServer::start(words, config, false).await?;
        eprintln!(
            "wstune serve --self-test: your server `{}` listens on ws://{}/ (pid {})",
            u.program, u.addr, u.pid
        );
        let (addr, pid) = (u.addr, u.pid);
        Servers {
            echo: addr,
            fanout: addr,
            running: vec![Running::User(Box::new(u))],
            pid,
            fanout_pid: None,
        }
    } else if processes > 1 {
        let child = |app| r.for_self_test_child(app, processes, server_max);
        let e = super::child::ChildServer::start(&child(embedded_server::App::Echo)).await?;
        let b = super::child::ChildServer::start(&child(embedded_server::App::Broadcast)).await?;
        let (pid, bpid) = (e.pid, b.pid);
        Servers {
            echo: e.addr,
            fanout: b.addr,
            running: vec![Running::Child(Box::new(e)), Running::Child(Box::new(b))],
            pid,
            fanout_pid: Some(bpid),
        }
    } else {
        let (e, hub_e, stop_e) = start(embedded_server::App::Echo)?;
        let (b, hub_b, stop_b) = start(embedded_server::App::Broadcast)?;
        let slot = |tx| Arc::new(std::sync::Mutex::new(Some(tx)));
        Servers {
            echo: e,
            fanout: b,
            running: vec![
                Running::InProcess(slot(stop_e), hub_e.metrics.clone()),
                Running::InProcess(slot(stop_b), hub_b.metrics.clone()),
            ],
            pid: std::process::id(),
            fanout_pid: None,
        }
    })
}

/// A server the self-test started, and what stopping it takes.
enum Running {
    /// In this process: its stop signal (the restart scenario swaps in its successor's) and
    /// its metrics, where the memory budget is read.
    InProcess(
        super::self_test_restart::StopSlot,
        Arc<embedded_server::metrics::Metrics>,
    ),
    /// A child `serve --processes N` (a supervisor and its processes).
    Child(Box<super::child::ChildServer>),
    /// The user's program (`--command`).
    User(Box<crate::selftest::command::UserServer>),
}

/// How the restart scenario starts an in-process echo server again, on the same address.
type StartAgain = Arc<dyn Fn(SocketAddr) -> crate::selftest::server::InProcess + Send + Sync>;

/// How the restart scenario can disrupt `server`, the echo server the run started (`conns`
/// connections over `processes` processes at `echo`); `start_again` is asked only for a
/// server in this process.
fn restartable(
    server: &Running,
    r: &ServeConfig,
    conns: usize,
    processes: usize,
    echo: SocketAddr,
    start_again: impl FnOnce() -> StartAgain,
) -> super::self_test_restart::Restartable {
    use super::self_test_restart::Restartable;
    match server {
        Running::User(_) => Restartable::User,
        Running::Child(c) => {
            let sv = &r.server;
            // Drain windows at the node's reconnect rate (a process's share of the
            // connections at its share of the rate lasts as long as the node's).
            let at_rate = |n: usize| {
                embedded_server::config::drain_window(n, sv.drain_over, sv.drain_rate).as_secs_f64()
            };
            Restartable::Supervisor {
                pid: c.pid,
                admin: c.admin,
                api_key: r.secrets.api_key.as_ref().map(|k| k.expose().to_string()),
                drain_secs: sv.drain_delay.as_secs_f64() + at_rate(conns),
                // Each replacement's start and settle, then its predecessor's drain.
                roll_secs: processes as f64 * (3.0 + at_rate(conns.div_ceil(processes))),
            }
        }
        Running::InProcess(stop, _) => Restartable::InProcess {
            addr: echo,
            stop: stop.clone(),
            start: start_again(),
        },
    }
}

/// Stop the run's servers, reading their memory budget first (a supervised server's admin
/// goes with it) into `report`; a user's server that died under load is added to `error`.
async fn stop_servers(
    servers: Vec<Running>,
    report: &mut crate::selftest::report::Report,
    error: &mut Option<anyhow::Error>,
) {
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
                if let Some(tx) = stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = tx.send(());
                }
            }
            Running::Child(c) => c.stop().await,
            Running::User(mut u) => {
                // A server that died under load: say so rather than leave only the
                // scenarios' connection errors.
                if let Some(why) = u.exited() {
                    let e = anyhow::anyhow!("your server stopped during the self-test: {why}");
                    *error = Some(match error.take() {
                        Some(first) => e.context(format!("{first:#}")),
                        None => e,
                    });
                }
                u.stop().await
            }
        }
    }
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
