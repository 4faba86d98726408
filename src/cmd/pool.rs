//! `wstune pool`: the guide's pool formula from given times, from times measured on a real
//! handler under load (`--measure`), or an experiment over pool sizes (`--sweep`).

use crate::outcome::Outcome;
use crate::pool::{self, Measured, SweepPoint};
use crate::report::ListFormat;
use crate::selftest::command::UserServer;
use crate::selftest::{self, client::Target, RunPlan as Options, Scenario};
use anyhow::{bail, Context, Result};
use embedded_server::{BuiltinConfig, Hub, ServerConfig, SimulatedWork};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// `pool`, resolved: every number checked, the handler parsed, `--write-profile`'s profile
/// loadable and its file writable.
pub struct Request {
    pub blocking_ms: Option<f64>,
    pub cpu_ms: Option<f64>,
    /// Cores to size for (given, or this host's, clamped).
    pub cores: u64,
    pub measure: bool,
    pub sweep: bool,
    /// The handler a local server runs (never echo: there is no pool to size).
    pub handler: Option<SimulatedWork>,
    /// The user's server a measurement starts (`--command`), and what its clients send.
    pub command: Option<Vec<String>>,
    pub message: Option<String>,
    /// `--profile`'s server settings, which the user's server is started with.
    pub user_config: Option<ServerConfig>,
    /// A running server to measure, and its admin address.
    pub url: Option<String>,
    pub admin: Option<String>,
    /// Pool sizes for the sweep.
    pub sizes: Vec<u64>,
    pub conns: usize,
    pub secs: f64,
    /// The profile `--write-profile` copies (a built-in name or a file).
    pub profile: String,
    pub write_profile: Option<PathBuf>,
    pub format: ListFormat,
}

/// The server's running sums for offloaded messages: (seconds, observations) per histogram.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    wall: (f64, u64),
    cpu: (f64, u64),
    /// None where the server does not export it (no schedstat, or an older wstune).
    runqueue: Option<(f64, u64)>,
}

fn totals_of(hub: &Hub) -> Totals {
    let m = &hub.metrics;
    let runqueue = m.handler_runqueue.totals();
    Totals {
        wall: m.handler_wall.totals(),
        cpu: m.handler_cpu.totals(),
        runqueue: (runqueue.1 > 0).then_some(runqueue),
    }
}

fn measured(before: Totals, after: Totals) -> Result<Measured> {
    let jobs = after.wall.1.saturating_sub(before.wall.1);
    if jobs == 0 {
        bail!(
            "the server handled no offloaded message during the run: its handler runs inline \
             (echo), so there is no pool to size; start it with a --handler such as block:20"
        );
    }
    let per_job_ms =
        |a: (f64, u64), b: (f64, u64)| (b.0 - a.0) / b.1.saturating_sub(a.1).max(1) as f64 * 1000.0;
    let wall_ms = per_job_ms(before.wall, after.wall);
    let cpu_ms = per_job_ms(before.cpu, after.cpu);
    let runqueue_ms = after
        .runqueue
        .map(|b| per_job_ms(before.runqueue.unwrap_or_default(), b));
    let mut blocking_ms = (wall_ms - cpu_ms - runqueue_ms.unwrap_or(0.0)).max(0.0);
    // What is left of a CPU-only handler is the clocks' own jitter (a few microseconds); left
    // in, the formula's rounding up would turn it into one more thread.
    if blocking_ms < 0.01 * wall_ms {
        blocking_ms = 0.0;
    }
    Ok(Measured {
        jobs,
        wall_ms,
        cpu_ms,
        runqueue_ms,
        blocking_ms,
        ratio: if cpu_ms > 0.0 {
            blocking_ms / cpu_ms
        } else {
            0.0
        },
    })
}

/// One sample's value from Prometheus text (`name value`, no labels).
fn metric(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A remote server's figures, from its admin `/metrics`.
async fn fetch_totals(admin: SocketAddr) -> Result<Totals> {
    let what = || format!("the admin endpoint http://{admin}/metrics");
    let body = crate::selftest::server::fetch_metrics(admin).await?;
    let get = |name: &str| metric(&body, name);
    let pair = |name: &str| -> Option<(f64, u64)> {
        Some((
            get(&format!("{name}_sum"))?,
            get(&format!("{name}_count"))? as u64,
        ))
    };
    match (
        pair("ws_handler_wall_seconds"),
        pair("ws_handler_cpu_seconds"),
    ) {
        (Some(wall), Some(cpu)) => Ok(Totals {
            wall,
            cpu,
            runqueue: pair("ws_handler_runqueue_seconds"),
        }),
        _ => bail!(
            "{} has no ws_handler_wall_seconds / ws_handler_cpu_seconds: is it a wstune server?",
            what()
        ),
    }
}

fn parse_admin(s: &str) -> Result<SocketAddr> {
    let hostport = s
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    use std::net::ToSocketAddrs;
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| format!("--admin {s}: not an address like http://127.0.0.1:9002"))
}

/// A server with `handler` and an offload pool of `size`, on loopback, in this process.
fn start_local(
    handler: SimulatedWork,
    size: usize,
    conns: usize,
) -> Result<(SocketAddr, Arc<Hub>, tokio::sync::oneshot::Sender<()>)> {
    let mut config = ServerConfig {
        offload_pool_size: size,
        max_connections: conns + 64,
        ..ServerConfig::default()
    };
    // All `conns` clients connect from loopback at once, more than the pending-handshake cap
    // a server of this size derives (a quarter of its connections): exempt them, as
    // `serve --self-test` and `start_user` below do, or most are refused with 503.
    crate::serve::config::exempt_self_test(&mut config.limits);
    let app = BuiltinConfig {
        handler,
        ..BuiltinConfig::default()
    };
    selftest::server::start_in_process(config, &app)
}

fn target(addr: SocketAddr) -> Target {
    Target::plain(addr)
}

/// Closed-loop load: `conns` clients, one message in flight each, through the self-test's
/// generator. Returns the scenario's report.
/// One size's point of a sweep: the load's throughput and p99, and the offload queue's depth
/// sampled during it (average and peak).
fn sweep_point(size: u64, r: &selftest::ScenarioReport, queue: &[f64]) -> SweepPoint {
    SweepPoint {
        size,
        throughput: r.achieved_rate,
        p99_ms: r.latency_ms.p99,
        queue_avg: queue.iter().sum::<f64>() / queue.len().max(1) as f64,
        queue_max: queue.iter().cloned().fold(0.0, f64::max),
    }
}

async fn load(
    t: Target,
    conns: usize,
    secs: f64,
    pid: Option<u32>,
    request: Option<String>,
) -> Result<selftest::ScenarioReport> {
    let (soft, _) = crate::host::raise_nofile();
    let o = Options {
        machine: crate::host::Machine::live(),
        shard: None,
        broadcast_target: t.clone(),
        subscribe_targets: Vec::new(),
        target: t,
        scenarios: vec![Scenario::EchoSat],
        conns,
        rate: 1.0,
        size: 100,
        secs,
        warmup: Some(1.0),
        deflate: false,
        inflight: 1,
        rounds: 1,
        workers: selftest::sizing::workers_for(conns, soft, 1).map_err(anyhow::Error::msg)?,
        sources: Vec::new(),
        server_pid: pid,
        more_server_pids: Vec::new(),
        script: None,
        // A user's server may run helpers of its own; the built-in one is one process.
        server_tree: pid.is_some(),
        broadcast_server_pid: None,
        ramp_per_sec: 0.0,
        storm_concurrency: 1,
        tls: None,
        request,
        disrupt: None,
        // Sizing a pool reads its own figures; the host's timeline is the self-test's.
        host_watch: None,
    };
    let r = selftest::run_scenario(&o, Scenario::EchoSat).await?;
    load_complete(&r)?;
    Ok(r)
}

/// A load that did not run as asked measures something else: fewer connections than asked
/// (a connection limit refused them), errors or disconnects are an error with the numbers,
/// not a pool size advised from a partial load.
fn load_complete(r: &selftest::ScenarioReport) -> Result<()> {
    if r.conns_connected < r.conns_requested || r.errors > 0 || r.disconnects > 0 {
        let why = r
            .first_error
            .as_deref()
            .map(|e| format!("; first error: {e}"))
            .unwrap_or_default();
        anyhow::bail!(
            "the load did not run as asked: {} of {} connections connected, {} error(s), {} \
             disconnect(s){why}. The server refused or dropped connections (its connection \
             limits, its file-descriptor limit, a crash): fix that first, or lower --conns",
            r.conns_connected,
            r.conns_requested,
            r.errors,
            r.disconnects
        );
    }
    Ok(())
}

/// Measure a handler on a local server with one pool thread per core, so the pool itself does
/// not oversubscribe the cores (the generator and other processes still may: that wait is
/// measured and taken out, see `Measured::runqueue_ms`).
async fn measure_local(
    handler: SimulatedWork,
    cores: usize,
    conns: usize,
    secs: f64,
) -> Result<Measured> {
    let (addr, hub, stop) = start_local(handler, cores, conns)?;
    let before = totals_of(&hub);
    let r = load(target(addr), conns, secs, None, None).await;
    let after = totals_of(&hub);
    let _ = stop.send(());
    r?;
    measured(before, after)
}

async fn sweep(
    handler: SimulatedWork,
    sizes: &[u64],
    conns: usize,
    secs: f64,
) -> Result<Vec<SweepPoint>> {
    let mut out = Vec::new();
    for &size in sizes {
        let (addr, hub, stop) = start_local(handler, size as usize, conns)?;
        // Queue depth, sampled every 100 ms while the load runs.
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sampler = {
            let (hub, samples) = (hub.clone(), samples.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let depth = hub.metrics.offload_queue_depth.load(Relaxed).max(0) as f64;
                    samples.lock().unwrap().push(depth);
                }
            })
        };
        eprintln!("wstune pool: sweep: pool size {size}...");
        let r = load(target(addr), conns, secs, None, None).await;
        sampler.abort();
        let _ = stop.send(());
        let r = r.with_context(|| format!("pool size {size}"))?;
        let samples = std::mem::take(&mut *samples.lock().unwrap());
        out.push(sweep_point(size, &r, &samples));
    }
    Ok(out)
}

/// The user's server (`--command`) with an offload pool of `size`, its /metrics on an admin
/// port; the rest of its configuration is `--profile`'s, so it is measured as it will run.
async fn start_user(
    words: &[String],
    profile: &ServerConfig,
    size: usize,
    conns: usize,
) -> Result<UserServer> {
    let mut config = ServerConfig {
        offload_pool_size: size,
        max_connections: profile.max_connections.max(conns + 64),
        ..profile.clone()
    };
    // The load comes from 127.0.0.1: the profile's abuse limits must not refuse it (as
    // `serve --self-test` does).
    crate::serve::config::exempt_self_test(&mut config.limits);
    UserServer::start(words, &config, true).await
}

/// `--measure --command`: the pool's timings from the program's /metrics, before and after
/// the load (one pool thread per core, as `measure_local`).
async fn measure_user(
    words: &[String],
    profile: &ServerConfig,
    request: Option<String>,
    cores: usize,
    conns: usize,
    secs: f64,
) -> Result<Measured> {
    let mut u = start_user(words, profile, cores, conns).await?;
    let admin = u.admin.expect("started with an admin listener");
    let r = async {
        let before = fetch_totals(admin).await?;
        let loaded = load(target(u.addr), conns, secs, Some(u.pid), request).await;
        still_running(&mut u)?;
        let after = fetch_totals(admin).await?;
        // A program that offloaded nothing is told so first, even when it also closed the
        // clients (it may close a message it does not understand): the missing --message is
        // the fix, the closes only a symptom of it.
        match (measured(before, after), loaded) {
            (Ok(m), Ok(_)) => Ok(m),
            (Ok(_), Err(e)) => Err(e),
            (Err(_), loaded) => Err(anyhow::anyhow!(
                "`{}` offloaded no work during the run (ws_handler_wall_seconds_count did not \
                 move on its /metrics): --measure times what its handler runs through \
                 conn.offload(..); give --message with a request that does{}",
                u.program,
                loaded
                    .err()
                    .map(|e| format!(" (the load also failed: {e})"))
                    .unwrap_or_default()
            )),
        }
    }
    .await;
    u.stop().await;
    r
}

/// The program died during the load (a crash under load, an OOM kill): the figures are not
/// its pool's, so this is an error naming its exit and last output.
fn still_running(u: &mut UserServer) -> Result<()> {
    match u.exited() {
        Some(e) => anyhow::bail!("the server died during the run: {e}"),
        None => Ok(()),
    }
}

/// `--sweep --command`: the program restarted at each pool size, the queue depth read from
/// its /metrics every 100 ms.
async fn sweep_user(
    words: &[String],
    profile: &ServerConfig,
    request: Option<String>,
    sizes: &[u64],
    conns: usize,
    secs: f64,
) -> Result<Vec<SweepPoint>> {
    let mut out = Vec::new();
    for &size in sizes {
        let mut u = start_user(words, profile, size as usize, conns).await?;
        let admin = u.admin.expect("started with an admin listener");
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sampler = {
            let samples = samples.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Ok(body) = crate::selftest::server::fetch_metrics(admin).await {
                        if let Some(d) = metric(&body, "ws_offload_queue_depth") {
                            samples.lock().unwrap().push(d.max(0.0));
                        }
                    }
                }
            })
        };
        eprintln!(
            "wstune pool: sweep: `{}` with pool size {size} (pid {})...",
            u.program, u.pid
        );
        let r = load(target(u.addr), conns, secs, Some(u.pid), request.clone()).await;
        sampler.abort();
        let died = still_running(&mut u);
        u.stop().await;
        died.with_context(|| format!("pool size {size}"))?;
        let r = r.with_context(|| format!("pool size {size}"))?;
        let samples = std::mem::take(&mut *samples.lock().unwrap());
        out.push(sweep_point(size, &r, &samples));
    }
    Ok(out)
}

/// A copy of the profile's YAML with the pool settings replaced (comments kept), checked by
/// parsing it back, written atomically.
fn write_profile(spec: &str, out: &std::path::Path, pool_size: u64, queue: u64) -> Result<()> {
    let text = match crate::profile::written_out(spec) {
        Some(t) => t,
        None => crate::profile::read_config_file(std::path::Path::new(spec))
            .map_err(|e| anyhow::anyhow!("cannot read profile {spec}: {e}"))?,
    };
    let mut found = (false, false);
    let mut lines: Vec<String> = Vec::new();
    for l in text.lines() {
        let indent = &l[..l.len() - l.trim_start().len()];
        if l.trim_start().starts_with("offload_pool_size:") && !found.0 {
            found.0 = true;
            lines.push(format!(
                "{indent}offload_pool_size: {pool_size}  # set by wstune pool"
            ));
        } else if l.trim_start().starts_with("offload_queue_size:") && !found.1 {
            found.1 = true;
            lines.push(format!(
                "{indent}offload_queue_size: {queue}  # set by wstune pool"
            ));
        } else {
            lines.push(l.to_string());
        }
    }
    if !(found.0 && found.1) {
        bail!("profile {spec} has no server.offload_pool_size / offload_queue_size lines to set");
    }
    let new = lines.join("\n") + "\n";
    let p = crate::profile::parse(&new, &out.display().to_string())?;
    if p.server.offload_pool_size != pool_size {
        bail!("internal: the written profile does not carry pool size {pool_size}");
    }
    crate::output::write_atomic(out, &new)
}

/// `work` until it ends or Ctrl-C, which drops it: a user's server it started is stopped with
/// its process group (`UserServer`'s drop), the generators with theirs.
async fn interruptible<T>(work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    // Biased: the Ctrl-C handler is in place (first poll) before the server starts.
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => bail!("interrupted (Ctrl-C): the measurement and the server it started were stopped"),
        r = work => r,
    }
}

pub fn run(a: Request) -> Result<Outcome> {
    let (cores, handler, sizes) = (a.cores, a.handler, &a.sizes);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let user_config = &a.user_config;
    let (measured, advice, points) = if a.measure || a.sweep {
        let m = rt.block_on(async {
            match (&handler, &a.url, &a.admin) {
                _ if a.command.is_some() => {
                    let (words, config) = (a.command.as_deref().unwrap_or_default(), user_config.as_ref().expect("loaded with --command"));
                    interruptible(measure_user(words, config, a.message.clone(), cores as usize, a.conns, a.secs)).await
                }
                (Some(h), _, _) => measure_local(*h, cores as usize, a.conns, a.secs).await,
                (None, Some(url), Some(admin)) => {
                    let t = Target::parse(url).map_err(anyhow::Error::msg)?;
                    let admin = parse_admin(admin)?;
                    let before = fetch_totals(admin).await?;
                    load(t, a.conns, a.secs, None, None).await?;
                    let after = fetch_totals(admin).await?;
                    measured(before, after)
                }
                (None, Some(_), None) => bail!("--measure --url needs --admin URL: the server's /metrics carries the handler times"),
                (None, None, _) => bail!("--measure needs --handler SPEC (a local server), --command \"PROGRAM ARGS\" (your own server) or --url and --admin (a running one)"),
            }
        })?;
        let mut advice = pool::advise(m.blocking_ms, m.cpu_ms.max(1e-6), cores).map_err(|e| {
            anyhow::anyhow!(
                "measured wall {:.3} ms, CPU {:.3} ms: {e}",
                m.wall_ms,
                m.cpu_ms
            )
        })?;
        if let Some(q) = m.runqueue_ms.filter(|q| *q > 0.25 * m.cpu_ms) {
            advice.notes.insert(
                1,
                format!(
                    "the handler's threads waited {q:.2} ms per message for a core ({:.0} % of \
                     their CPU time): the cores were busy with other work (a local load \
                     generator counts). That wait is not blocking and is left out of the ratio; \
                     more threads would only lengthen it",
                    q / m.cpu_ms.max(1e-6) * 100.0
                ),
            );
        }
        let points = if a.sweep {
            if let (Some(words), Some(config)) = (&a.command, &user_config) {
                rt.block_on(interruptible(sweep_user(
                    words,
                    config,
                    a.message.clone(),
                    sizes,
                    a.conns,
                    a.secs,
                )))?
            } else {
                let Some(h) = handler else {
                    bail!("--sweep restarts the server at each size: give --handler SPEC or --command \"PROGRAM ARGS\"");
                };
                rt.block_on(sweep(h, sizes, a.conns, a.secs))?
            }
        } else {
            Vec::new()
        };
        (Some(m), advice, points)
    } else {
        let (Some(b), Some(c)) = (a.blocking_ms, a.cpu_ms) else {
            bail!("give --blocking-ms and --cpu-ms, or --measure (with --handler, or --url and --admin)");
        };
        (
            None,
            pool::advise(b, c, cores).map_err(anyhow::Error::msg)?,
            Vec::new(),
        )
    };
    let knee = pool::knee(&points, 0.05);
    let best = points
        .iter()
        .max_by(|x, y| x.throughput.total_cmp(&y.throughput))
        .map(|p| p.size);
    let chosen = knee.unwrap_or(advice.pool_size);
    let out = pool::Report {
        measured,
        advice,
        sweep: points,
        knee,
        best,
        chosen,
    };
    let text = match a.format {
        ListFormat::Json => serde_json::to_string_pretty(&out)? + "\n",
        ListFormat::Table => crate::report::pool_table(&out),
    };
    crate::output::emit(None, &text)?;
    if let Some(path) = &a.write_profile {
        write_profile(&a.profile, path, chosen, out.advice.queue_size)?;
        eprintln!(
            "wstune: wrote {} (profile {} with offload_pool_size {chosen}); run it with `wstune serve --profile {}`",
            path.display(),
            a.profile,
            path.display()
        );
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(wall: f64, cpu: f64, runqueue: Option<f64>, jobs: u64) -> Totals {
        Totals {
            wall: (wall, jobs),
            cpu: (cpu, jobs),
            runqueue: runqueue.map(|q| (q, jobs)),
        }
    }

    #[test]
    fn blocking_is_wall_minus_cpu_minus_the_wait_for_a_core() {
        let before = totals(1.0, 0.1, Some(0.01), 100);
        // 100 more jobs: 21 ms wall, 1 ms CPU, 0.5 ms waiting for a core each.
        let after = totals(3.1, 0.2, Some(0.06), 200);
        let m = measured(before, after).unwrap();
        assert_eq!(m.jobs, 100);
        assert!((m.wall_ms - 21.0).abs() < 1e-9, "{m:?}");
        assert!((m.runqueue_ms.unwrap() - 0.5).abs() < 1e-9, "{m:?}");
        assert!((m.blocking_ms - 19.5).abs() < 1e-9, "{m:?}");
        assert!((m.ratio - 19.5).abs() < 1e-9, "{m:?}");
        // A server without the statistic: the wait stays in blocking, as before.
        let m = measured(totals(1.0, 0.1, None, 100), totals(3.1, 0.2, None, 200)).unwrap();
        assert_eq!(m.runqueue_ms, None);
        assert!((m.blocking_ms - 20.0).abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn clock_jitter_on_a_cpu_only_handler_is_not_blocking() {
        // 1.003 ms wall, 1 ms CPU: 3 us left over is noise, not a reason for another thread.
        let m = measured(
            totals(0.0, 0.0, Some(0.0), 0),
            totals(1.003, 1.0, Some(0.0), 1000),
        );
        let m = m.unwrap();
        assert_eq!(m.blocking_ms, 0.0);
        assert_eq!(m.ratio, 0.0);
    }

    #[test]
    fn no_offloaded_job_is_an_error_that_names_the_fix() {
        let t = totals(1.0, 0.1, None, 5);
        let e = measured(t, t).unwrap_err().to_string();
        assert!(e.contains("--handler such as block:20"), "{e}");
    }
}
