//! `wstune pool`: the guide's pool formula from given times, from times measured on a real
//! handler under load (`--measure`), or an experiment over pool sizes (`--sweep`).

use crate::cli::args::{ListFormat, PoolArgs};
use crate::cli::exit;
use crate::pool::{self, Advice, SweepPoint};
use crate::selftest::{self, client::Target, Options, Scenario};
use anyhow::{bail, Context, Result};
use embedded_server::{Hub, Server, ServerConfig, SimulatedWork};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Handler times measured over a run: averages per handled message.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub jobs: u64,
    pub wall_ms: f64,
    pub cpu_ms: f64,
    /// Waiting for a core (runnable, not running): neither CPU nor blocking. Absent where the
    /// kernel keeps no scheduler statistics; then it is counted as blocking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runqueue_ms: Option<f64>,
    pub blocking_ms: f64,
    pub ratio: f64,
}

#[derive(Debug, Serialize)]
struct Output {
    #[serde(skip_serializing_if = "Option::is_none")]
    measured: Option<Measured>,
    advice: Advice,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sweep: Vec<SweepPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    knee: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    best: Option<u64>,
    /// The pool size written with --write-profile (the knee when sweeping, else the formula's).
    chosen: u64,
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

/// A remote server's figures, from its admin `/metrics` (plain HTTP GET).
async fn fetch_totals(admin: SocketAddr) -> Result<Totals> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let what = || format!("the admin endpoint http://{admin}/metrics");
    let mut s = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(admin),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{} did not answer in 5 s", what()))?
    .with_context(|| {
        format!(
            "cannot reach {}: is --admin the server's admin address?",
            what()
        )
    })?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body))
        .await
        .map_err(|_| anyhow::anyhow!("{} did not finish its answer in 5 s", what()))??;
    let get = |name: &str| -> Option<f64> {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
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
    let config = ServerConfig {
        handler,
        offload_pool_size: size,
        max_connections: conns + 64,
        ..ServerConfig::default()
    };
    let listeners = embedded_server::bind("127.0.0.1:0".parse()?, false, 1)
        .context("cannot listen on 127.0.0.1")?;
    let addr = listeners[0].local_addr()?;
    let server = Server::new(config);
    let hub = server.hub();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .run(listeners, async move {
                let _ = rx.await;
            })
            .await;
    });
    Ok((addr, hub, tx))
}

fn target(addr: SocketAddr) -> Target {
    Target {
        addr,
        host: addr.to_string(),
        path: "/".into(),
    }
}

/// Closed-loop load: `conns` clients, one message in flight each, through the self-test's
/// generator. Returns the scenario's report.
async fn load(
    t: Target,
    conns: usize,
    secs: f64,
    pid: Option<u32>,
) -> Result<selftest::ScenarioReport> {
    let (soft, _) = crate::host::raise_nofile();
    let o = Options {
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
        workers: selftest::limits::workers_for(conns, soft, 1).map_err(anyhow::Error::msg)?,
        sources: Vec::new(),
        server_pid: pid,
        server_tree: false,
        broadcast_server_pid: None,
        ramp_per_sec: 0.0,
        storm_concurrency: 1,
    };
    selftest::run_scenario(&o, Scenario::EchoSat).await
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
    let r = load(target(addr), conns, secs, None).await;
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
        let r = load(target(addr), conns, secs, None).await;
        sampler.abort();
        let _ = stop.send(());
        let r = r.with_context(|| format!("pool size {size}"))?;
        let samples = std::mem::take(&mut *samples.lock().unwrap());
        let n = samples.len().max(1) as f64;
        out.push(SweepPoint {
            size,
            throughput: r.achieved_rate,
            p99_ms: r.latency_ms.p99,
            queue_avg: samples.iter().sum::<f64>() / n,
            queue_max: samples.iter().cloned().fold(0.0, f64::max),
        });
    }
    Ok(out)
}

/// A copy of the profile's YAML with the pool settings replaced (comments kept), checked by
/// parsing it back, written atomically.
fn write_profile(spec: &str, out: &std::path::Path, pool_size: u64, queue: u64) -> Result<()> {
    let text = match crate::profile::EMBEDDED.iter().find(|(n, _)| *n == spec) {
        Some((_, t)) => t.to_string(),
        None => {
            std::fs::read_to_string(spec).with_context(|| format!("cannot read profile {spec}"))?
        }
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

pub fn run(a: &PoolArgs) -> Result<u8> {
    let host_cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // A host's own count is never refused (it is clamped); a given one past the ceiling is.
    let cores = a.cores.unwrap_or(host_cores.min(pool::MAX_CORES));
    pool::check_cores(cores).map_err(anyhow::Error::msg)?;
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (measured, advice, points) = if a.measure || a.sweep {
        let m = rt.block_on(async {
            match (&handler, &a.url, &a.admin) {
                (Some(h), _, _) => measure_local(*h, cores as usize, a.conns, a.secs).await,
                (None, Some(url), Some(admin)) => {
                    let t = Target::parse(url).map_err(anyhow::Error::msg)?;
                    let admin = parse_admin(admin)?;
                    let before = fetch_totals(admin).await?;
                    load(t, a.conns, a.secs, None).await?;
                    let after = fetch_totals(admin).await?;
                    measured(before, after)
                }
                (None, Some(_), None) => bail!("--measure --url needs --admin URL: the server's /metrics carries the handler times"),
                (None, None, _) => bail!("--measure needs --handler SPEC (a local server) or --url and --admin (a running one)"),
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
            let Some(h) = handler else {
                bail!("--sweep restarts the server at each size: give --handler SPEC");
            };
            rt.block_on(sweep(h, &sizes, a.conns, a.secs))?
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
    let out = Output {
        measured,
        advice,
        sweep: points,
        knee,
        best,
        chosen,
    };
    let text = match a.format {
        ListFormat::Json => serde_json::to_string_pretty(&out)? + "\n",
        ListFormat::Table => table(&out),
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
    Ok(exit::OK)
}

fn table(o: &Output) -> String {
    let a = &o.advice;
    let mut s = String::new();
    if let Some(m) = &o.measured {
        s.push_str(&format!(
            "measured over {} handled messages: wall {:.2} ms, on CPU {:.2} ms, {}blocking {:.2} ms, ratio {:.2}\n",
            m.jobs,
            m.wall_ms,
            m.cpu_ms,
            m.runqueue_ms
                .map(|q| format!("waiting for a core {q:.2} ms, "))
                .unwrap_or_default(),
            m.blocking_ms,
            m.ratio
        ));
    }
    let mut t = crate::output::new_table();
    t.set_header(vec!["setting", "value", "why"]);
    t.add_row(vec![
        "offload pool size".to_string(),
        a.pool_size.to_string(),
        format!(
            "{} + ({:.2} / {:.2}) x {} (PoolSize = CPUCount + blocking/cpu x CPUCount)",
            a.cores, a.blocking_ms, a.cpu_ms, a.cores
        ),
    ]);
    t.add_row(vec![
        "io workers".to_string(),
        a.io_workers.to_string(),
        "one per core: the event loop never blocks (the guide's 2-4 is for workers that may)"
            .into(),
    ]);
    t.add_row(vec![
        "offload queue size".to_string(),
        a.queue_size.to_string(),
        "bounded: a full queue stops reading (TCP backpressure)".into(),
    ]);
    s.push_str(&format!("{t}\n"));
    if !o.sweep.is_empty() {
        let mut t = crate::output::new_table();
        t.set_header(vec![
            "pool size",
            "msgs/s",
            "p99 ms",
            "queue avg",
            "queue max",
            "",
        ]);
        for p in &o.sweep {
            let mut mark = Vec::new();
            if Some(p.size) == o.knee {
                mark.push("knee");
            }
            if Some(p.size) == o.best {
                mark.push("best throughput");
            }
            t.add_row(vec![
                p.size.to_string(),
                format!("{:.0}", p.throughput),
                format!("{:.1}", p.p99_ms),
                format!("{:.1}", p.queue_avg),
                format!("{:.0}", p.queue_max),
                mark.join(", "),
            ]);
        }
        s.push_str(&format!("{t}\n"));
        s.push_str(&format!(
            "sweep knee: {} (smallest size within 5% of the best throughput, p99 no worse); formula: {}\n",
            o.knee.map(|k| k.to_string()).unwrap_or_else(|| "-".into()),
            a.pool_size
        ));
    }
    for n in &a.notes {
        s.push_str(&format!("- {n}\n"));
    }
    s
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
