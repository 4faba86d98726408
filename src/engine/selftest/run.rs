//! The run: the server probed, then each scenario in turn, a window too noisy to judge
//! measured again, each result printed as it comes.

use super::plan::{duration_words, plan_text, LoadPlan};
use crate::selftest::probe;
use crate::selftest::report::{self, Judging, Report, Targets};
use crate::selftest::{run_scenario, target_url, Refusal, RunPlan};

/// The scenarios the server behind the plan's URLs cannot serve, each with what to run
/// instead (see `selftest::probe`). One probe per URL; none for a scenario any WebSocket
/// server serves (idle, tls-handshake, restart).
async fn refusals(p: &LoadPlan) -> Vec<Refusal> {
    use crate::selftest::script::Step;
    let needs = probe::Needs {
        request: p.opts.request.is_some(),
        script_channels: p.opts.script.as_ref().is_some_and(|s| {
            s.populations.iter().any(|pop| {
                pop.steps
                    .iter()
                    .any(|st| matches!(st, Step::Send { text } if probe::is_channels_request(text)))
            })
        }),
    };
    let mut seen: Vec<(String, Option<probe::Kind>)> = Vec::new();
    let mut out = Vec::new();
    for &s in &p.scenarios {
        if !probe::depends_on_kind(s) {
            continue;
        }
        let target = if s.fans_out() {
            &p.opts.broadcast_target
        } else {
            &p.opts.target
        };
        let url = target_url(target);
        let kind = match seen.iter().find(|(u, _)| *u == url) {
            Some((_, k)) => *k,
            None => {
                let k = probe::kind(target, p.opts.tls.as_ref()).await;
                seen.push((url.clone(), k));
                k
            }
        };
        if let Some(r) = kind.and_then(|k| probe::refusal(s, k, &url, &needs)) {
            out.push(r);
        }
    }
    out
}

/// Where progress goes: a line per scenario's start and result when standard error is not a
/// terminal (a CI log), where the progress bars are hidden.
fn progress_lines() -> bool {
    use std::io::IsTerminal;
    !std::io::stderr().is_terminal()
}

/// One scenario's result in a line: its word (from its own checks), its key figures.
fn result_line(r: &crate::selftest::ScenarioReport, p: &LoadPlan, took: f64) -> String {
    let v = report::verdict(std::slice::from_ref(r), &p.targets, &p.judging);
    let own: Vec<&report::Check> = v
        .checks
        .iter()
        .filter(|c| c.scenario == r.scenario)
        .collect();
    let missed: Vec<&str> = own
        .iter()
        .filter(|c| c.judged && !c.ok)
        .map(|c| c.what.as_str())
        .collect();
    let word = if !missed.is_empty() {
        format!("MISS ({})", missed.join(", "))
    } else if own.iter().any(|c| !c.judged) {
        "NOT PROVEN".to_string()
    } else {
        "ok".to_string()
    };
    // Each scenario's own figures under their own names: a storm's rate is handshakes, a
    // broadcast's deliveries, and an idle run has neither.
    let p99 = report::ms_words(r.latency_ms.p99);
    let rate = report::rate_words(r.achieved_rate);
    let figures = r.scenario.workload().result_figures(&p99, &rate);
    format!(
        "{word} in {}: {}/{} connected{figures}, {} errors",
        duration_words(took),
        crate::output::thousands(r.conns_connected as u64),
        crate::output::thousands(r.conns_requested as u64),
        crate::output::thousands(r.errors)
    )
}

/// Run the scenarios in order. A scenario that cannot start (nothing connects) ends the run:
/// the report holds what was measured before it, and the error says why.
pub async fn execute(p: &LoadPlan) -> (Report, Option<anyhow::Error>) {
    let mut done = Vec::new();
    let mut error = None;
    let refused = if p.probe {
        refusals(p).await
    } else {
        Vec::new()
    };
    let lines = progress_lines();
    if refused.is_empty() {
        eprint!("{}", plan_text(p));
    }
    let n = p.scenarios.len();
    let run = if refused.is_empty() {
        &p.scenarios[..]
    } else {
        &[]
    };
    for (i, &s) in run.iter().enumerate() {
        if i > 0 {
            settle(&p.opts).await;
        }
        let started = std::time::Instant::now();
        if lines {
            eprintln!("wstune: [{}/{n}] {}: started", i + 1, s.name());
        }
        let before = done.len();
        let opts = match p.deflate_conns {
            Some(n) if s.negotiates_deflate() => RunPlan {
                conns: n,
                ..p.opts.clone()
            },
            _ => p.opts.clone(),
        };
        match run_scenario(&opts, s).await {
            // A shard never measures twice: the others would run on without it.
            Ok(r) if p.opts.shard.is_none() && needs_remeasure(&r, p.judging.accept_noise) => {
                // Too noisy to judge: measured once more, after the host had a moment. The
                // last measurement is the one judged; the first stays in `attempts`, so the
                // run-to-run spread is in the report.
                settle(&p.opts).await;
                let first = r;
                match run_scenario(&opts, s).await {
                    Ok(mut again) => {
                        again.attempts.push(attempt(&first, &p.targets, &p.judging));
                        done.push(again);
                    }
                    Err(_) => done.push(first),
                }
            }
            Ok(r) => done.push(r),
            Err(e) => {
                error = Some(e.context(format!("scenario {}", s.name())));
                break;
            }
        }
        if let (true, Some(r)) = (lines && done.len() > before, done.last()) {
            eprintln!(
                "wstune: [{}/{n}] {}: {}",
                i + 1,
                s.name(),
                result_line(r, p, started.elapsed().as_secs_f64())
            );
        }
    }
    let verdict = report::verdict(&done, &p.targets, &p.judging);
    let report = Report {
        schema_version: report::SCHEMA_VERSION,
        url: p.url.clone(),
        program: None,
        skipped: Vec::new(),
        refused,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        targets: p.targets.clone(),
        conns: p.opts.conns,
        scaled_down: p.scaled_down.clone(),
        rate_note: p.rate_note.clone(),
        server_processes: p.server_processes,
        memory: report::MemoryReport::of(&done, &p.targets.estimate),
        capacity: report::CapacityReport::of(
            &done,
            &p.targets.cpu,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
        memory_budget: None,
        host_check: None,
        shard: p.opts.shard,
        merged_from: None,
        baseline: None,
        scenarios: done,
        verdict,
    };
    (report, error)
}

/// A timed scenario whose window was too noisy to judge is measured once more (never more:
/// a host that stays busy gets NOT PROVEN, and the run stays bounded).
fn needs_remeasure(r: &crate::selftest::ScenarioReport, accept_noise: bool) -> bool {
    !accept_noise
        && r.scenario.timed()
        && r.incomplete.is_none()
        && r.disturbance.as_ref().is_some_and(|d| d.too_noisy)
}

/// The figures of a measurement that was repeated, for the report's run-to-run spread.
fn attempt(
    r: &crate::selftest::ScenarioReport,
    t: &Targets,
    j: &Judging,
) -> crate::selftest::Attempt {
    let all = Judging {
        accept_noise: true,
        ..j.clone()
    };
    let judged = report::verdict(std::slice::from_ref(r), t, &all);
    crate::selftest::Attempt {
        p99_ms: r.latency_ms.p99,
        service_p99_ms: r.service_latency_ms.as_ref().map(|l| l.p99),
        achieved_rate: r.achieved_rate,
        server_cpu_pct: r.server.as_ref().map(|s| s.cpu_pct),
        disturbance: r.disturbance.clone(),
        missed: judged
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.clone())
            .collect(),
    }
}

/// Wait (at most 20 s) until the previous scenario's sockets are mostly gone and the server is
/// quiet again: at 100k connections their closes take seconds, and the next scenario would
/// otherwise open its connections (and measure the server) while the kernel and the server
/// still tear them down.
async fn settle(o: &crate::selftest::RunPlan) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_for_sockets(&o.machine, o.conns, deadline).await;
    crate::selftest::quiesce(o, deadline - tokio::time::Instant::now()).await;
}

async fn wait_for_sockets(
    host: &crate::host::Machine,
    conns: usize,
    deadline: tokio::time::Instant,
) {
    let Some(start) = crate::selftest::kernel_sample(host) else {
        return;
    };
    // Both ends of each loopback connection are sockets here; a tenth of them may linger.
    let quiet = (conns as u64 / 5).max(200);
    let mut now = start;
    while now.tcp_inuse > quiet && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        match crate::selftest::kernel_sample(host) {
            Some(k) => now = k,
            None => return,
        }
    }
}
