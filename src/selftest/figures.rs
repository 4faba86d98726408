//! A scenario's report from what its run gathered: the workers' merged results and the
//! figures read around the window, put under the names the report gives them. Which figures a
//! scenario has is its own (`scenario::Workload`); the runner only gathers.

use super::histo::{self, latency};
use super::merge::Merged;
use super::noise::Disturbance;
use super::sampling::{KernelDrops, KernelMemory};
use super::OwnFigures;
use super::*;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// What the run gathered around its window, beside the workers' merged results.
pub(super) struct Around {
    /// Generator processes started.
    pub(super) workers: usize,
    /// Connections open when the window started (before it, for a scenario that connects
    /// inside its window).
    pub(super) connected: usize,
    /// Seconds of warm-up before the window.
    pub(super) warmup: f64,
    pub(super) server: Option<ProcFigures>,
    pub(super) host_timeline: Option<crate::watch::timeline::Timeline>,
    pub(super) kernel: Option<KernelMemory>,
    pub(super) kernel_drops: Option<KernelDrops>,
    pub(super) timeline: Vec<TimelinePoint>,
    pub(super) disturbance: Option<Disturbance>,
    pub(super) incomplete: Option<String>,
    pub(super) started_unix_ms: Option<u64>,
    pub(super) own: OwnFigures,
}

/// The report of `scenario` run by plan `o`.
pub(super) fn scenario_report(
    o: &RunPlan,
    scenario: Scenario,
    results: &[&WorkerResult],
    m: Merged,
    around: Around,
) -> ScenarioReport {
    let Merged {
        hist,
        service,
        sent,
        received,
        errors,
        disconnects,
        lost,
        close_codes,
        gen_cpu,
        gen_rss,
        elapsed,
        last_echo,
        rounds,
        first_error,
        unreadable: _,
        connect,
        tls_handshake,
        tls,
        steps,
    } = m;
    let Around {
        workers,
        connected,
        warmup,
        server,
        ..
    } = around;
    let wall = o.secs.max(0.001);
    let run_wall = if scenario.lasts_until_done() {
        last_echo.max(0.001)
    } else {
        elapsed.max(wall)
    };
    let echo_like = scenario.open_loop();
    let cycles = scenario.cycles_connections();
    let round_hist = rounds_histogram(&rounds);
    ScenarioReport {
        scenario,
        host_timeline: around.host_timeline,
        conns_requested: if cycles {
            o.clients_in_flight(workers)
        } else {
            o.conns
        },
        conns_connected: if scenario.lasts_until_done() {
            hist.len() as usize
        } else if scenario.cycles_connections() {
            o.clients_in_flight(workers)
        } else if o.connects_in_window(scenario) {
            // Staged: every connection that opened in the window, timed on opening.
            connect.len() as usize
        } else {
            connected
        },
        workers,
        sources: o.sources.len().max(1),
        secs: if scenario.lasts_until_done() {
            run_wall
        } else {
            o.secs
        },
        warmup_secs: warmup,
        payload_bytes: o.size,
        offered_rate: echo_like.then_some(o.rate * o.conns as f64),
        inflight: (scenario.closed_loop()).then_some(o.inflight),
        sent,
        received,
        achieved_rate: received as f64
            / run_wall.min(if scenario.lasts_until_done() {
                f64::MAX
            } else {
                wall
            }),
        errors,
        disconnects,
        lost,
        close_codes,
        latency_ms: latency(&hist),
        service_latency_ms: echo_like.then(|| latency(&service)),
        arrivals: echo_like
            .then(|| {
                let each: Vec<_> = results.iter().filter_map(|r| r.arrivals.as_ref()).collect();
                arrivals::ArrivalStats::merge(&each)
            })
            .flatten()
            .map(|a| a.summary("even", crate::host::timer::RESOLUTION_US)),
        server_cpu_us_per_msg: match &server {
            Some(s) if echo_like && received > 0 => Some(1e6 * s.cpu_secs / received as f64),
            _ => None,
        },
        handshakes_per_sec: cycles.then(|| received as f64 / wall),
        handshakes_per_server_core_sec: match &server {
            Some(s) if cycles && s.cpu_secs > 0.0 => Some(received as f64 / s.cpu_secs),
            _ => None,
        },
        echoes_per_server_cpu_sec: match &server {
            Some(s) if scenario.closed_loop() && s.cpu_secs > 0.0 => {
                Some(received as f64 / s.cpu_secs)
            }
            _ => None,
        },
        server,
        generator: ProcFigures {
            cpu_secs: gen_cpu,
            cpu_pct: gen_cpu / run_wall * 100.0,
            peak_rss_bytes: gen_rss,
            ..ProcFigures::default()
        },
        kernel: around.kernel,
        kernel_drops: around.kernel_drops,
        storm_secs: (scenario.lasts_until_done()).then_some(last_echo),
        connects_per_sec: (scenario.lasts_until_done() && last_echo > 0.0)
            .then(|| hist.len() as f64 / last_echo),
        broadcast_last_ms: (scenario.fans_out()).then(|| latency(&round_hist)),
        broadcast_rounds: (scenario.fans_out()).then_some(o.rounds),
        timeline: around.timeline,
        disturbance: around.disturbance,
        attempts: Vec::new(),
        incomplete: around.incomplete,
        first_error,
        connect_ms: (!connect.is_empty()).then(|| latency(&connect)),
        tls: tls.map(|t| TlsReport {
            resume_offered: o.tls.as_ref().is_some_and(|c| c.resume),
            ..t
        }),
        steps: step_reports(steps),
        started_unix_ms: around.started_unix_ms,
        own: around.own,
        histograms: Some(Histograms {
            latency: histo::encode_packed(&hist),
            service: echo_like.then(|| histo::encode_packed(&service)),
            connect: (!connect.is_empty()).then(|| histo::encode_packed(&connect)),
            tls_handshake: (!tls_handshake.is_empty())
                .then(|| histo::encode_packed(&tls_handshake)),
            rounds: if scenario.fans_out() {
                rounds.clone()
            } else {
                Vec::new()
            },
        }),
    }
}

/// Broadcast: each round's latest delivery (rounds nobody received are left out).
fn rounds_histogram(rounds: &[(u64, u64)]) -> Histogram<u64> {
    let mut h = histo::histogram();
    for (n, last) in rounds {
        if *n > 0 {
            let _ = h.record((*last).max(1));
        }
    }
    h
}

/// A script's waiting steps, by `POPULATION.STEP`, as the report shows them.
fn step_reports(steps: BTreeMap<String, (Histogram<u64>, u64, u64, u64)>) -> Vec<StepReport> {
    steps
        .into_iter()
        .map(|(name, (h, matched, timeouts, other))| StepReport {
            name,
            latency_ms: latency(&h),
            matched,
            timeouts,
            other,
            histogram: histo::encode_packed(&h),
        })
        .collect()
}
