//! `wstune report merge`: the reports of a run's shards (`selftest --shard I/N` on several
//! hosts) made into the one report a single generator would have written. Latencies merge
//! exactly (the histograms are added, then the percentiles read), counts and rates add up, and
//! the server's figures come from the shards that sampled it (`--pid`). The caller judges the
//! result like any run.
//!
//! Reports that do not belong together are refused, each reason named: a merge that mixed two
//! runs would print a verdict about neither.

use super::super::{histo, Histograms, ProcFigures, ScenarioReport, TimelinePoint};
use super::{BudgetReport, CapacityReport, MemoryReport, MergedFrom, Report};
use crate::selftest::histo::latency;
use crate::selftest::OwnFigures;
use std::collections::BTreeMap;

/// One shard's report and where it was read from (for the messages).
pub struct Input {
    pub name: String,
    pub report: Report,
}

/// Merge the shards' reports. `partial`: accept missing shards (the verdict then says the
/// run is NOT PROVEN; see the caller).
pub fn merge(mut inputs: Vec<Input>, partial: bool) -> Result<Report, String> {
    inputs.sort_by_key(|i| i.report.shard.map_or(usize::MAX, |s| s.index));
    let first = inputs
        .first()
        .ok_or("give the shards' JSON reports (selftest --shard I/N --format json > FILE)")?;
    let Some(s0) = first.report.shard else {
        return Err(not_a_shard(&first.name));
    };
    let mut seen: BTreeMap<usize, &str> = BTreeMap::new();
    for i in &inputs {
        let r = &i.report;
        let s = r.shard.ok_or_else(|| not_a_shard(&i.name))?;
        let differs = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            format!(
                "{} and {} are not shards of one run: their {what} differ ({a:?} vs {b:?})",
                first.name, i.name
            )
        };
        if r.schema_version != first.report.schema_version {
            return Err(differs(
                "schema versions",
                &first.report.schema_version,
                &r.schema_version,
            ));
        }
        if r.url != first.report.url {
            return Err(differs("URLs", &first.report.url, &r.url));
        }
        if s.count != s0.count || s.start_at_unix_ms != s0.start_at_unix_ms {
            return Err(differs(
                "--shard counts or --start-at times",
                &(s0.count, s0.start_at_unix_ms),
                &(s.count, s.start_at_unix_ms),
            ));
        }
        let names = |r: &Report| r.scenarios.iter().map(|s| s.scenario).collect::<Vec<_>>();
        if names(r) != names(&first.report) {
            return Err(differs("scenarios", &names(&first.report), &names(r)));
        }
        if r.targets.profile != first.report.targets.profile {
            return Err(differs(
                "profiles",
                &first.report.targets.profile,
                &r.targets.profile,
            ));
        }
        if s.index >= s.count {
            return Err(format!(
                "{}: shard {}/{} cannot be (a report edited by hand?)",
                i.name, s.index, s.count
            ));
        }
        if let Some(other) = seen.insert(s.index, &i.name) {
            return Err(format!(
                "{other} and {} are both shard {}/{}: give each shard's report once",
                i.name, s.index, s.count
            ));
        }
        if let Some(sc) = r.scenarios.iter().find(|s| s.histograms.is_none()) {
            return Err(format!(
                "{}: scenario {} carries no histograms (a report from an older wstune, or \
                 edited): its percentiles cannot be merged exactly; rerun the shard",
                i.name,
                sc.scenario.name()
            ));
        }
    }
    let missing: Vec<usize> = (0..s0.count).filter(|i| !seen.contains_key(i)).collect();
    if !missing.is_empty() && !partial {
        return Err(format!(
            "shard{} {} of {} missing: give every shard's report, or --partial to merge what \
             there is (the verdict is then NOT PROVEN)",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            s0.count
        ));
    }
    let reports: Vec<&Report> = inputs.iter().map(|i| &i.report).collect();
    let index = |r: &Report| r.shard.map_or(0, |s| s.index);
    let server_from: Vec<usize> = reports
        .iter()
        .filter(|r| r.scenarios.iter().any(|s| s.server.is_some()))
        .map(|r| index(r))
        .collect();
    let mut scenarios = Vec::new();
    for k in 0..first.report.scenarios.len() {
        let each: Vec<(usize, &ScenarioReport)> = reports
            .iter()
            .map(|r| (index(r), &r.scenarios[k]))
            .collect();
        scenarios.push(scenario(&each)?);
    }
    let start_skew_ms = scenarios
        .iter()
        .map(|s| skew(&reports, s.scenario))
        .max()
        .unwrap_or(0);
    let base = &first.report;
    // The host figures (cores, server processes): the first shard that sampled a server, else
    // the first shard.
    let host = reports
        .iter()
        .find(|r| server_from.contains(&index(r)))
        .unwrap_or(&reports[0]);
    let budget = reports
        .iter()
        .filter_map(|r| r.memory_budget)
        .reduce(|a: BudgetReport, b| a + b);
    let mut scaled_down = Vec::new();
    for r in &reports {
        for s in &r.scaled_down {
            scaled_down.push(format!("shard {}: {s}", index(r)));
        }
    }
    Ok(Report {
        schema_version: base.schema_version,
        url: base.url.clone(),
        program: base.program.clone(),
        skipped: base.skipped.clone(),
        refused: Vec::new(),
        cores: host.cores,
        targets: base.targets.clone(),
        conns: reports.iter().map(|r| r.conns).sum(),
        scaled_down,
        rate_note: base.rate_note.clone(),
        server_processes: host.server_processes,
        memory: MemoryReport::of(&scenarios, &base.targets.estimate),
        capacity: CapacityReport::of(&scenarios, &base.targets.cpu, host.cores),
        memory_budget: budget,
        host_check: None,
        shard: None,
        merged_from: Some(MergedFrom {
            count: s0.count,
            shards: reports.iter().map(|r| index(r)).collect(),
            server_from: server_from.first().copied(),
            start_skew_ms,
        }),
        baseline: None,
        scenarios,
        // Judged by the caller, on the merged figures.
        verdict: base.verdict.clone(),
    })
}

fn not_a_shard(name: &str) -> String {
    format!(
        "{name} is not a shard's report: merge the JSON reports of `wstune selftest --shard I/N \
         --start-at T --format json`"
    )
}

/// How far apart the shards started this scenario's load, ms.
fn skew(reports: &[&Report], sc: crate::selftest::Scenario) -> u64 {
    let starts: Vec<u64> = reports
        .iter()
        .filter_map(|r| r.scenarios.iter().find(|s| s.scenario == sc))
        .filter_map(|s| s.started_unix_ms)
        .collect();
    match (starts.iter().min(), starts.iter().max()) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    }
}

fn decode(
    shard: usize,
    sc: &ScenarioReport,
    what: &str,
    s: &str,
) -> Result<hdrhistogram::Histogram<u64>, String> {
    histo::decode(s).map_err(|e| {
        format!(
            "shard {shard}'s {} {what} histogram: {e}",
            sc.scenario.name()
        )
    })
}

/// One scenario over every shard.
fn scenario(each: &[(usize, &ScenarioReport)]) -> Result<ScenarioReport, String> {
    let (_, f) = each[0];
    let Added {
        hist,
        service,
        connect,
        tls_hs,
        rounds,
    } = added(each)?;
    let has_service = service.is_some();
    let service = service.unwrap_or_else(histo::histogram);
    let sum = |g: fn(&ScenarioReport) -> u64| each.iter().map(|(_, s)| g(s)).sum::<u64>();
    let sum_f = |g: fn(&ScenarioReport) -> f64| each.iter().map(|(_, s)| g(s)).sum::<f64>();
    let received = sum(|s| s.received);
    let server = server(each);
    // tls-handshake: the cycles of every shard over the server's CPU-seconds.
    let handshakes_per_core = match &server {
        Some(s) if f.scenario.cycles_connections() && s.cpu_secs > 0.0 => {
            Some(received as f64 / s.cpu_secs)
        }
        _ => None,
    };
    let broadcast = f.scenario.fans_out();
    let mut round_hist = histo::histogram();
    for (n, last) in &rounds {
        if *n > 0 {
            let _ = round_hist.record((*last).max(1));
        }
    }
    let storm_secs = each
        .iter()
        .filter_map(|(_, s)| s.storm_secs)
        .reduce(f64::max);
    let incomplete: Vec<String> = each
        .iter()
        .filter_map(|(i, s)| s.incomplete.as_ref().map(|m| format!("shard {i}: {m}")))
        .collect();
    let echo_like = f.scenario.open_loop();
    Ok(ScenarioReport {
        scenario: f.scenario,
        // Each shard watched its own host: the merged run has no one host to show.
        host_timeline: None,
        conns_requested: each.iter().map(|(_, s)| s.conns_requested).sum(),
        conns_connected: each.iter().map(|(_, s)| s.conns_connected).sum(),
        workers: each.iter().map(|(_, s)| s.workers).sum(),
        sources: each.iter().map(|(_, s)| s.sources).sum(),
        secs: each.iter().map(|(_, s)| s.secs).fold(0.0, f64::max),
        warmup_secs: f.warmup_secs,
        payload_bytes: f.payload_bytes,
        offered_rate: each
            .iter()
            .filter_map(|(_, s)| s.offered_rate)
            .reduce(|a, b| a + b),
        inflight: f.inflight,
        sent: sum(|s| s.sent),
        received,
        achieved_rate: sum_f(|s| s.achieved_rate),
        errors: sum(|s| s.errors),
        disconnects: sum(|s| s.disconnects),
        lost: sum(|s| s.lost),
        close_codes: close_codes(each),
        latency_ms: latency(&hist),
        service_latency_ms: has_service.then(|| latency(&service)),
        // How evenly one generator's sends left is a per-host figure: not added up.
        arrivals: None,
        server_cpu_us_per_msg: match &server {
            Some(s) if echo_like && received > 0 => Some(1e6 * s.cpu_secs / received as f64),
            _ => None,
        },
        echoes_per_server_cpu_sec: match &server {
            Some(s) if f.scenario.closed_loop() && s.cpu_secs > 0.0 => {
                Some(received as f64 / s.cpu_secs)
            }
            _ => None,
        },
        server,
        generator: ProcFigures {
            cpu_secs: sum_f(|s| s.generator.cpu_secs),
            cpu_pct: sum_f(|s| s.generator.cpu_pct),
            peak_rss_bytes: each
                .iter()
                .filter_map(|(_, s)| s.generator.peak_rss_bytes)
                .reduce(|a, b| a + b),
            ..ProcFigures::default()
        },
        kernel: each.iter().find_map(|(_, s)| s.kernel.clone()),
        kernel_drops: each.iter().find_map(|(_, s)| s.kernel_drops.clone()),
        storm_secs,
        connects_per_sec: storm_secs
            .filter(|t| *t > 0.0)
            .map(|t| hist.len() as f64 / t),
        broadcast_last_ms: broadcast.then(|| latency(&round_hist)),
        broadcast_rounds: f.broadcast_rounds,
        timeline: timeline(each),
        // The noisiest window decides: a shard disturbed by other work disturbs the whole.
        disturbance: each
            .iter()
            .filter_map(|(_, s)| s.disturbance.clone())
            .find(|d| d.too_noisy)
            .or_else(|| each.iter().find_map(|(_, s)| s.disturbance.clone())),
        attempts: Vec::new(),
        incomplete: (!incomplete.is_empty()).then(|| incomplete.join("; ")),
        first_error: each
            .iter()
            .find_map(|(i, s)| s.first_error.as_ref().map(|e| format!("shard {i}: {e}"))),
        connect_ms: (!connect.is_empty()).then(|| latency(&connect)),
        steps: steps(each)?,
        tls: tls(each, &tls_hs),
        handshakes_per_sec: each
            .iter()
            .filter_map(|(_, s)| s.handshakes_per_sec)
            .reduce(|a, b| a + b),
        handshakes_per_server_core_sec: handshakes_per_core,
        started_unix_ms: each.iter().filter_map(|(_, s)| s.started_unix_ms).min(),
        own: own(each, &hist),
        histograms: Some(Histograms {
            latency: histo::encode_packed(&hist),
            service: has_service.then(|| histo::encode_packed(&service)),
            connect: (!connect.is_empty()).then(|| histo::encode_packed(&connect)),
            tls_handshake: (!tls_hs.is_empty()).then(|| histo::encode_packed(&tls_hs)),
            rounds,
        }),
    })
}

/// The shards' histograms, each added exactly.
struct Added {
    hist: hdrhistogram::Histogram<u64>,
    /// Open loop: from the actual send (None: no shard had one).
    service: Option<hdrhistogram::Histogram<u64>>,
    connect: hdrhistogram::Histogram<u64>,
    tls_hs: hdrhistogram::Histogram<u64>,
    /// Broadcast: per round, the deliveries and the last one's time.
    rounds: Vec<(u64, u64)>,
}

/// Every shard's histograms of one scenario, added together.
fn added(each: &[(usize, &ScenarioReport)]) -> Result<Added, String> {
    let mut hist = histo::histogram();
    let mut service = histo::histogram();
    let mut has_service = false;
    let mut connect = histo::histogram();
    let mut tls_hs = histo::histogram();
    let mut rounds: Vec<(u64, u64)> = Vec::new();
    for (i, s) in each {
        let h = s.histograms.as_ref().expect("checked before");
        let add = |into: &mut hdrhistogram::Histogram<u64>, what: &str, enc: &str| {
            histo::add(into, &decode(*i, s, what, enc)?)
                .map_err(|e| format!("shard {i}'s {} {what} histogram {e}", s.scenario.name()))
        };
        add(&mut hist, "latency", &h.latency)?;
        if let Some(sv) = &h.service {
            add(&mut service, "service", sv)?;
            has_service = true;
        }
        if let Some(c) = &h.connect {
            add(&mut connect, "connect", c)?;
        }
        if let Some(t) = &h.tls_handshake {
            add(&mut tls_hs, "TLS handshake", t)?;
        }
        if rounds.len() < h.rounds.len() {
            rounds.resize(h.rounds.len(), (0, 0));
        }
        for (slot, (n, last)) in rounds.iter_mut().zip(&h.rounds) {
            slot.0 += n;
            slot.1 = slot.1.max(*last);
        }
    }
    Ok(Added {
        hist,
        service: has_service.then_some(service),
        connect,
        tls_hs,
        rounds,
    })
}

/// The close codes every shard's server sent, counted together.
fn close_codes(each: &[(usize, &ScenarioReport)]) -> BTreeMap<u16, u64> {
    let mut close_codes = BTreeMap::new();
    for (_, s) in each {
        for (k, v) in &s.close_codes {
            *close_codes.entry(*k).or_insert(0) += v;
        }
    }
    close_codes
}

/// The server's figures over every shard (each measured the processes it was given).
fn server(each: &[(usize, &ScenarioReport)]) -> Option<ProcFigures> {
    each.iter()
        .filter_map(|(_, s)| s.server.clone())
        .reduce(|a, b| ProcFigures {
            cpu_secs: a.cpu_secs + b.cpu_secs,
            cpu_pct: a.cpu_pct + b.cpu_pct,
            rss_before_bytes: add_opt(a.rss_before_bytes, b.rss_before_bytes),
            rss_after_bytes: add_opt(a.rss_after_bytes, b.rss_after_bytes),
            rss_per_conn_bytes: None,
            peak_rss_bytes: add_opt(a.peak_rss_bytes, b.peak_rss_bytes),
        })
        .map(|mut p| {
            // One shard's RSS growth covers the connections that opened inside its own
            // sampling window, which the other shards' may or may not have: not a per
            // connection figure. An unsharded idle run measures that.
            if each.len() > 1 {
                p.rss_per_conn_bytes = None;
            }
            p
        })
}

/// The shards' per-second timelines, second by second.
fn timeline(each: &[(usize, &ScenarioReport)]) -> Vec<TimelinePoint> {
    let mut timeline: BTreeMap<u32, TimelinePoint> = BTreeMap::new();
    for (_, s) in each {
        for p in &s.timeline {
            let e = timeline.entry(p.t).or_insert(TimelinePoint {
                t: p.t,
                ..TimelinePoint::default()
            });
            e.sent_per_sec += p.sent_per_sec;
            e.received_per_sec += p.received_per_sec;
        }
    }
    timeline.into_values().collect()
}

/// The scenario's own figures over every shard (restart's merged; none for the others).
fn own(each: &[(usize, &ScenarioReport)], hist: &hdrhistogram::Histogram<u64>) -> OwnFigures {
    OwnFigures::of_restart(crate::selftest::restart::merge_reports(
        &each
            .iter()
            .filter_map(|(_, s)| s.own.restart())
            .collect::<Vec<_>>(),
        latency(hist),
    ))
}

/// A script's steps over every shard, by name: latencies added exactly, counts summed.
fn steps(each: &[(usize, &ScenarioReport)]) -> Result<Vec<crate::selftest::StepReport>, String> {
    let mut by: BTreeMap<String, (hdrhistogram::Histogram<u64>, u64, u64, u64)> = BTreeMap::new();
    for (i, s) in each {
        for st in &s.steps {
            let e = by
                .entry(st.name.clone())
                .or_insert_with(|| (histo::histogram(), 0, 0, 0));
            let h = decode(*i, s, &format!("step {}", st.name), &st.histogram)?;
            histo::add(&mut e.0, &h)
                .map_err(|err| format!("shard {i}'s step {}: {err}", st.name))?;
            e.1 += st.matched;
            e.2 += st.timeouts;
            e.3 += st.other;
        }
    }
    Ok(by
        .into_iter()
        .map(
            |(name, (h, matched, timeouts, other))| crate::selftest::StepReport {
                name,
                latency_ms: latency(&h),
                matched,
                timeouts,
                other,
                histogram: histo::encode_packed(&h),
            },
        )
        .collect())
}

/// The shards' TLS handshakes: counted together, timed from their added histograms.
fn tls(
    each: &[(usize, &ScenarioReport)],
    handshakes: &hdrhistogram::Histogram<u64>,
) -> Option<crate::selftest::TlsReport> {
    let mut out: Option<crate::selftest::TlsReport> = None;
    for (_, s) in each {
        let Some(t) = &s.tls else { continue };
        match &mut out {
            None => {
                out = Some(crate::selftest::TlsReport {
                    handshake_ms: latency(handshakes),
                    ..t.clone()
                })
            }
            Some(o) => {
                o.full += t.full;
                o.resumed += t.resumed;
            }
        }
    }
    out
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}
