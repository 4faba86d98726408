//! The orchestration: generator processes started together, their progress followed, the
//! server sampled around the window, one [`ScenarioReport`] per scenario.

use super::client::Target;
use super::figures::{self, Around};
use super::merge::merge;
use super::plan::CLOSE_GRACE;
use super::sampling::{disturbance_of, drop_counters, kernel_drops, kernel_memory, server_sample};
use super::scenario::CLOSES_PER_SEC;
use super::*;
use anyhow::{bail, Context, Result};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// What the orchestrator shows while a scenario runs (hidden when stderr is not a terminal).
fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    pb.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

struct WorkerProc {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    stdin: tokio::process::ChildStdin,
    ticks: Vec<(u64, u64)>,
    result: Option<WorkerResult>,
    /// The last line it wrote that is not an event (and why), for the report if it then ends
    /// without a result.
    garbled: Option<String>,
}

/// Why generator process `i` of `n` stopped before its result, in words an operator can act
/// on: how it ended (its exit status, or the signal that ended it) and the last line it wrote
/// that could not be read as an event. A bare "exited" left a run's miss unexplained.
async fn ended_early(p: &mut WorkerProc, i: usize, n: usize, before: &str) -> String {
    let how = match tokio::time::timeout(Duration::from_secs(2), p.child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => format!("its exit status cannot be read: {e}"),
        Err(_) => "its output closed, the process still running".into(),
    };
    let garbled = p
        .garbled
        .as_deref()
        .map(|g| format!("; the last line it wrote that is not an event: {g}"))
        .unwrap_or_default();
    format!("generator process {i} of {n} ended ({how}) {before}{garbled}")
}

/// Note a line that is not an event: kept (shortened) for [`ended_early`].
fn garbled(line: &str, e: &dyn std::fmt::Display) -> String {
    let mut end = line.len().min(200);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < line.len() { "..." } else { "" };
    format!("{e}: {}{more}", &line[..end])
}

/// Run one scenario end to end. An error means nothing could be measured (no connection
/// opened); a partial run comes back as a report with `incomplete` set.
pub async fn run_scenario(o: &RunPlan, scenario: Scenario) -> Result<ScenarioReport> {
    let o = &*restart::plan_for(o, scenario);
    let target = if scenario.fans_out() {
        &o.broadcast_target
    } else {
        &o.target
    };
    let rss_before = server_sample(o, scenario).map(|s| s.1);
    let machine = &o.machine;
    let kernel_before = (scenario.holds_idle())
        .then(|| kernel_sample(machine))
        .flatten();
    let drops_before = drop_counters(machine);
    // From before the first connection (a storm overflows while it connects) to the window's
    // end; a thread of its own reads the host, the generator runs in other processes.
    let host = o.host_watch.as_ref().map(|h| h.start(&o.machine));
    let mut procs = spawn_workers(o, scenario, target).await?;
    let workers = procs.len();
    let (connected, first_error) = connect_phase(&mut procs, o, scenario, target).await?;
    // Let the server settle (the last handshakes done, idle memory steady) before measuring.
    if !o.connects_in_window(scenario) {
        quiesce(o, Duration::from_secs(10)).await;
    }
    let rss_after_connect = server_sample(o, scenario).map(|s| s.1);
    let kernel_during = (scenario.holds_idle())
        .then(|| kernel_sample(machine))
        .flatten();
    let warmup = o.warmup_for(scenario);
    // The server's CPU is read when the measured window starts (after the warm-up).
    let server0 = {
        let o = o.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
            (
                server_sample(&o, scenario).map(|s| (s, Instant::now())),
                noise::sample(&o.machine),
            )
        })
    };
    let late = match &o.shard {
        Some(sh) => slot::wait_for_slot(sh, o, scenario).await,
        None => None,
    };
    let t0 = Instant::now();
    let started_unix_ms = o.shard.map(|_| shard::unix_ms());
    for p in procs.iter_mut() {
        let _ = p.stdin.write_all(b"go\n").await;
        let _ = p.stdin.flush().await;
    }

    let mut watch = restart::Watch::start(o, scenario, target);
    // Shards share one publisher: every subscriber, on every shard, gets each round once.
    let publisher = if scenario.fans_out() && o.shard.is_none_or(|s| s.index == 0) {
        Some(publisher::start(o, target).await?)
    } else {
        None
    };
    let (mut incomplete, server_end, noise_end) =
        run_phase(&mut procs, o, scenario, warmup, t0).await;
    if incomplete.is_none() {
        incomplete = late;
    }
    let drops = kernel_drops(machine, drops_before, drop_counters(machine));
    let host_timeline = host.and_then(|h| h.finish());
    watch.window_ended(&o.machine);
    if let Some(p) = publisher {
        let _ = p.await;
    }
    // Each generator closes its connections (1000, Normal Closure) after its result and then
    // exits: a server's close counters see clean closes, not resets. The server's figures were
    // read before (`server_end`), so the closes are outside the measured window. A generator
    // still running after CLOSE_GRACE is killed.
    let grace = tokio::time::Instant::now() + CLOSE_GRACE;
    for p in procs.iter_mut() {
        if p.result.is_none()
            || tokio::time::timeout_at(grace, p.child.wait())
                .await
                .is_err()
        {
            let _ = p.child.start_kill();
        }
        let _ = p.child.wait().await;
    }
    let results: Vec<&WorkerResult> = procs.iter().filter_map(|p| p.result.as_ref()).collect();
    if results.is_empty() && incomplete.is_none() {
        incomplete = Some("no generator process reported a result".into());
    }

    let mut m = merge(&results, o.rounds, first_error);
    if incomplete.is_none() {
        incomplete = m.unreadable.take();
    }
    let (restart, restart_failed) = watch.finish(&results, &m.hist).await;
    incomplete = incomplete.or(restart_failed);
    if !o.connects_in_window(scenario) && connected < o.conns {
        m.errors += (o.conns - connected) as u64;
    }
    let (server0, noise0) = match server0.await {
        Ok((s, n)) => (s, Some(n)),
        Err(_) => (None, None),
    };
    let disturbance = match (noise0, noise_end) {
        (Some(a), Some(b)) => Some(disturbance_of(o, target, &a, &b)),
        _ => None,
    };
    let rss = (rss_before, rss_after_connect);
    let server = server_figures(server0, server_end, rss, connected, scenario);
    let around = Around {
        workers,
        connected,
        warmup,
        server,
        host_timeline,
        kernel: kernel_memory(machine, kernel_before, kernel_during),
        kernel_drops: drops,
        timeline: timeline(&procs),
        disturbance,
        incomplete,
        started_unix_ms,
        own: OwnFigures::of_restart(restart),
    };
    Ok(figures::scenario_report(o, scenario, &results, m, around))
}

/// The server's CPU over the window and its memory around the connect phase (per connection
/// for a scenario that holds them idle); None when either end of the window was not read.
fn server_figures(
    server0: Option<((f64, u64), Instant)>,
    server_end: Option<((f64, u64), Instant)>,
    (rss_before, rss_after_connect): (Option<u64>, Option<u64>),
    connected: usize,
    scenario: Scenario,
) -> Option<ProcFigures> {
    match (server0, server_end) {
        (Some(((c0, _), from)), Some(((c1, rss1), to))) => {
            let secs = to.duration_since(from).as_secs_f64().max(0.001);
            let per_conn = match (rss_before, rss_after_connect) {
                (Some(b), Some(a)) if connected > 0 => {
                    Some((a as f64 - b as f64) / connected as f64)
                }
                _ => None,
            };
            Some(ProcFigures {
                // A tree's figure can step back (see `server::sample_tree`): never negative.
                cpu_secs: (c1 - c0).max(0.0),
                cpu_pct: (c1 - c0).max(0.0) / secs * 100.0,
                rss_before_bytes: rss_before,
                rss_after_bytes: rss_after_connect.or(Some(rss1)),
                rss_per_conn_bytes: if scenario.holds_idle() {
                    per_conn
                } else {
                    None
                },
                peak_rss_bytes: None,
            })
        }
        _ => None,
    }
}

pub fn target_url(t: &Target) -> String {
    t.url()
}

/// Start the generator processes, each with its share of the connections.
async fn spawn_workers(
    o: &RunPlan,
    scenario: Scenario,
    target: &Target,
) -> Result<Vec<WorkerProc>> {
    let exe =
        std::env::current_exe().context("cannot find this program to start generator processes")?;
    let spread = if scenario.fans_out() {
        o.subscribe_targets.len()
    } else {
        0
    };
    let workers = o.workers.max(spread).max(1).min(o.conns.max(1));
    let mut procs = Vec::new();
    let mut assigned = 0;
    for w in 0..workers {
        // A script's populations are split one by one, so every process runs a mix.
        let script = o.script.as_ref().map(|s| s.share(w, workers));
        let n = match &script {
            Some(s) => s.conns(),
            None => o.conns / workers + usize::from(w < o.conns % workers),
        };
        let spec = WorkerSpec {
            scenario,
            target: if spread > 0 {
                o.subscribe_targets[w % spread].clone()
            } else {
                target.clone()
            },
            conns: n,
            sources: o.sources.clone(),
            source_offset: assigned,
            rate: o.rate,
            size: o.size,
            // A storm is measured by how long it takes: --secs bounds it only from below, or
            // 100k clients on 2 cores were cut off at 5 s with a third still connecting.
            secs: if scenario.lasts_until_done() {
                storm_budget_secs(o.conns, o.secs)
            } else {
                o.secs
            },
            warmup: o.warmup_for(scenario),
            inflight: o.inflight,
            // The broadcast publisher sends binary stamps, so its subscribers stay plain.
            deflate: scenario.negotiates_deflate() || (o.deflate && !scenario.fans_out()),
            ramp_per_sec: o.ramp_per_sec / workers as f64,
            rounds: o.rounds,
            storm_concurrency: if scenario.cycles_connections() {
                // Its clients are --conns at most: the server is sized for that many.
                o.clients_in_flight(workers) / workers
            } else {
                (o.storm_concurrency / workers).max(1)
            },
            // The broadcast scenario's stamps must come back as sent.
            request: o.request.clone().filter(|_| !scenario.fans_out()),
            phase_slot: w,
            phase_stride: workers,
            phase_total: o.conns,
            shard_slot: o.shard.map_or(0, |s| s.index),
            shard_count: o.shard.map_or(1, |s| s.count),
            tls: o.tls.clone(),
            script,
        };
        assigned += n;
        let mut cmd = tokio::process::Command::new(&exe);
        // A generator of a self-test killed outright must not go on loading the server.
        cmd.arg("selftest-worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = crate::host::process::spawn_dying_with_this_process(cmd)
            .with_context(|| format!("cannot start a generator process ({})", exe.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut line = serde_json::to_string(&spec)?;
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .await
            .context("cannot hand a generator process its spec")?;
        procs.push(WorkerProc {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
            stdin,
            ticks: Vec::new(),
            result: None,
            garbled: None,
        });
    }

    Ok(procs)
}

/// Wait for every worker's "ready" (bounded). Returns the connections opened and the first
/// error a worker met; an error when nothing connected (except for storm, which connects later).
async fn connect_phase(
    procs: &mut [WorkerProc],
    o: &RunPlan,
    scenario: Scenario,
    target: &Target,
) -> Result<(usize, Option<String>)> {
    let pb = progress_bar(o.conns as u64, "connect");
    let connect_budget = Duration::from_secs(30 + (o.conns / 2000) as u64)
        + Duration::from_secs_f64(if o.ramp_per_sec > 0.0 {
            o.conns as f64 / o.ramp_per_sec
        } else {
            0.0
        });
    let deadline = tokio::time::Instant::now() + connect_budget;
    let mut connected = 0;
    let mut first_error: Option<String> = None;
    let mut done_counts = vec![0usize; procs.len()];
    let procs_len = procs.len();
    for (i, p) in procs.iter_mut().enumerate() {
        loop {
            let line = match tokio::time::timeout_at(deadline, p.lines.next_line()).await {
                Ok(Ok(Some(l))) => l,
                Ok(Ok(None)) => {
                    bail!(
                        "{}",
                        ended_early(p, i, procs_len, "before its connections were open").await
                    )
                }
                Ok(Err(e)) => bail!("cannot read generator process {i}'s output: {e}"),
                Err(_) => bail!(
                    "connections were still opening after {} s: {} of {} handshakes done, {} \
                     generator process(es) of {} ready, first error so far: {}; is the server \
                     accepting? (fewer --conns or a slower --ramp may help)",
                    connect_budget.as_secs(),
                    done_counts.iter().sum::<usize>(),
                    o.conns,
                    i,
                    procs_len,
                    first_error.as_deref().unwrap_or("none reported")
                ),
            };
            match serde_json::from_str::<Event>(&line) {
                Err(e) => p.garbled = Some(garbled(&line, &e)),
                Ok(Event::Connecting { done }) => {
                    done_counts[i] = done;
                    pb.set_position(done_counts.iter().sum::<usize>() as u64);
                }
                Ok(Event::Ready {
                    connected: c,
                    first_error: e,
                    ..
                }) => {
                    connected += c;
                    if first_error.is_none() {
                        first_error = e;
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    pb.finish_and_clear();
    if !o.connects_in_window(scenario) && connected == 0 {
        bail!(
            "no connection to {} could be opened: {}",
            target_url(target),
            first_error.unwrap_or_else(|| "unknown reason".into())
        );
    }
    Ok((connected, first_error))
}

/// Follow the workers' ticks and collect their results (bounded: the run plus a drain).
/// Returns why the run stopped short, if it did, and the server's CPU and RSS at the first
/// result.
async fn run_phase(
    procs: &mut [WorkerProc],
    o: &RunPlan,
    scenario: Scenario,
    warmup: f64,
    t0: Instant,
) -> (
    Option<String>,
    Option<((f64, u64), Instant)>,
    Option<noise::Sample>,
) {
    let pb = progress_bar(o.secs.ceil() as u64, scenario.name());
    let run_deadline = tokio::time::Instant::now()
        + Duration::from_secs_f64(if scenario.lasts_until_done() {
            storm_budget_secs(o.conns, o.secs)
        } else {
            o.secs + warmup
        })
        + Duration::from_secs(if scenario.lasts_until_done() { 60 } else { 15 })
        // Then every connection closes before its generator reports: at a million idle
        // connections on 2 cores the close handshakes outlasted a fixed 15 s.
        + Duration::from_secs_f64(o.conns as f64 / CLOSES_PER_SEC)
        // Broadcast subscribers wait one round gap past the window for the last round.
        + Duration::from_secs_f64(if scenario.fans_out() {
            o.secs / (o.rounds as f64 + 1.0)
        } else {
            0.0
        });
    let mut incomplete: Option<String> = None;
    let mut server_end = None;
    let mut noise_end = None;
    // Scenarios measured over a fixed window read the server when the window ends, before the
    // generator closes its connections: at 100k the close handshakes cost the server more CPU
    // than a minute of idling, and counting them made "idle" look busy (27 % instead of under
    // 1 %). Storm and broadcast are measured until their work is done (the first result).
    let window_end = (!scenario.lasts_until_done() && !scenario.fans_out()).then(|| {
        let o = o.clone();
        let at = t0 + Duration::from_secs_f64(warmup + o.secs);
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            (
                server_sample(&o, scenario).map(|s| (s, Instant::now())),
                noise::sample(&o.machine),
            )
        })
    });
    {
        let n = procs.len();
        let mut pending: Vec<usize> = (0..n).collect();
        while !pending.is_empty() {
            let mut next = Vec::new();
            for &i in &pending {
                let p = &mut procs[i];
                let line = match tokio::time::timeout_at(run_deadline, p.lines.next_line()).await {
                    Ok(Ok(Some(l))) => l,
                    Ok(Ok(None)) => {
                        let why = ended_early(p, i, n, "without a result").await;
                        incomplete.get_or_insert(why);
                        continue;
                    }
                    Ok(Err(e)) => {
                        incomplete.get_or_insert(format!(
                            "cannot read generator process {i}'s output: {e}"
                        ));
                        continue;
                    }
                    Err(_) => {
                        incomplete.get_or_insert(
                            "the run did not finish in time; the figures cover what arrived".into(),
                        );
                        continue;
                    }
                };
                match serde_json::from_str::<Event>(&line) {
                    Ok(Event::Tick { sent, received }) => {
                        p.ticks.push((sent, received));
                        next.push(i);
                    }
                    Ok(Event::Done(r)) => {
                        if noise_end.is_none() {
                            server_end = server_sample(o, scenario).map(|s| (s, Instant::now()));
                            noise_end = Some(noise::sample(&o.machine));
                        }
                        p.result = Some(*r);
                    }
                    Err(e) => {
                        p.garbled = Some(garbled(&line, &e));
                        next.push(i);
                    }
                    _ => next.push(i),
                }
            }
            pending = next;
            let secs_done = (t0.elapsed().as_secs_f64() - warmup).clamp(0.0, o.secs.ceil()) as u64;
            pb.set_position(secs_done);
            let (s, r) = procs
                .iter()
                .filter_map(|p| p.ticks.last())
                .fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1));
            pb.set_message(format!("sent {s}, received {r}"));
        }
    }
    pb.finish_and_clear();
    if let Some(h) = window_end.as_ref().filter(|_| incomplete.is_some()) {
        // The load stopped early: no window to wait out (a --secs 3600 run would idle here).
        h.abort();
    }
    if let Some(Ok((at_end, n))) = match window_end {
        Some(h) => Some(h.await),
        None => None,
    } {
        if at_end.is_some() {
            server_end = at_end;
        }
        noise_end = Some(n);
    }
    (incomplete, server_end, noise_end)
}

/// The workers' cumulative counts summed per second, then differenced.
fn timeline(procs: &[WorkerProc]) -> Vec<TimelinePoint> {
    let n_ticks = procs.iter().map(|p| p.ticks.len()).max().unwrap_or(0);
    let mut timeline = Vec::new();
    let mut prev = (0u64, 0u64);
    for t in 0..n_ticks {
        let cum = procs.iter().fold((0u64, 0u64), |a, p| {
            let x = p.ticks.get(t).or(p.ticks.last()).copied().unwrap_or((0, 0));
            (a.0 + x.0, a.1 + x.1)
        });
        timeline.push(TimelinePoint {
            t: t as u32 + 1,
            sent_per_sec: cum.0.saturating_sub(prev.0),
            received_per_sec: cum.1.saturating_sub(prev.1),
        });
        prev = cum;
    }
    timeline
}
