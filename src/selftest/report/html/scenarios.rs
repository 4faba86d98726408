//! One section per scenario: its chart, from what the report holds for it, and its figures.
//!
//! The chart shows what the scenario is about: latency by percentile for the echo scenarios
//! (with the profile's p99 target), connections open over the storm, memory per connection
//! against the profile's estimate for idle, deliveries per second for broadcast. The report
//! holds no per-second percentiles, so latency is drawn as its curve over the whole window.

use super::chart::{self, Bar, Series, BLUE, GREY, TEAL, VIOLET};
use super::esc;
use crate::selftest::report::{bytes, count, num, Report};
use crate::selftest::{Latency, Scenario, ScenarioReport};
use std::fmt::Write;

/// What each scenario does, in a line a reader new to wstune can follow.
fn purpose(s: Scenario) -> &'static str {
    match s {
        Scenario::Idle => "Connections opened and held without traffic: what each one costs the server and the kernel.",
        Scenario::EchoRate => "Open loop: every connection sends at the profile's rate; latency counts from when each message was due.",
        Scenario::EchoSat => "Closed loop: every connection sends as soon as its answer arrives; how many echoes the server sustains.",
        Scenario::Storm => "Reconnect storm: every connection opened at once, each with a handshake and a first echo.",
        Scenario::Broadcast => "One publisher, every connection subscribed: each round must reach every subscriber.",
        Scenario::Deflate => "Echo-rate with permessage-deflate negotiated on every connection.",
        Scenario::Script => "Scripted sessions: each population connects its own way and runs its steps; every waiting step timed from the last message sent.",
        Scenario::TlsHandshake => "Clients connect over TLS, upgrade and close, again and again: TLS handshakes per second and per server core.",
        Scenario::Restart => "Connections held while the server restarts: every client reconnects with jittered backoff; the time from each close to its new upgrade.",
    }
}

fn latency_series(l: &Latency, label: &str, colour: &'static str, dashed: bool) -> Series {
    Series {
        label: label.into(),
        colour,
        dashed,
        points: l
            .curve
            .iter()
            .map(|(p, ms)| (chart::nines(*p), *ms))
            .collect(),
    }
}

/// The latency curve, the send-side curve beside it, and the profile's p99 as a line.
fn latency_chart(r: &Report, s: &ScenarioReport, title: &str) -> Option<String> {
    if s.latency_ms.count == 0 {
        return None;
    }
    let mut series = vec![latency_series(&s.latency_ms, "latency", BLUE, false)];
    if let Some(l) = s.service_latency_ms.as_ref().filter(|l| l.count > 0) {
        series.push(latency_series(l, "from the actual send", VIOLET, false));
    }
    if let Some(b) = r.baseline.as_ref().and_then(|b| b.scenario(s.scenario)) {
        if b.latency_ms.count > 0 {
            series.push(latency_series(&b.latency_ms, "baseline", BLUE, true));
        }
    }
    if matches!(s.scenario, Scenario::EchoRate | Scenario::Deflate) {
        let ticks = chart::percentile_ticks();
        let (a, b) = (ticks[0].0, ticks[ticks.len() - 1].0);
        series.push(Series {
            label: format!("p99 target {} ms", num(r.targets.p99_ms)),
            colour: GREY,
            dashed: true,
            points: vec![(a, r.targets.p99_ms), (b, r.targets.p99_ms)],
        });
    }
    chart::line_chart(
        title,
        "percentile",
        "ms",
        &series,
        &chart::percentile_ticks(),
    )
}

/// Per second of the timeline, `pick`, starting from zero at second 0.
fn over_time(s: &ScenarioReport, cumulative: bool) -> Vec<(f64, f64)> {
    let mut total = 0.0;
    let mut pts = vec![(0.0, 0.0)];
    for p in &s.timeline {
        total = if cumulative {
            total + p.received_per_sec as f64
        } else {
            p.received_per_sec as f64
        };
        pts.push((p.t as f64, total));
    }
    if !cumulative {
        pts.remove(0);
    }
    pts
}

/// The scenario's one chart, from the data its report holds; None when it holds none.
pub fn chart(r: &Report, s: &ScenarioReport) -> Option<String> {
    match s.scenario {
        Scenario::EchoRate | Scenario::Deflate | Scenario::EchoSat => {
            latency_chart(r, s, "Latency by percentile")
        }
        // A timeline of one second is a dot, not a curve: the percentiles say more.
        Scenario::Storm if s.timeline.len() >= 2 => {
            let pts = over_time(s, true);
            let last = pts.last().map_or(1.0, |p| p.0);
            chart::line_chart(
                "Connections open during the storm",
                "second of the storm",
                "connections",
                &[
                    Series {
                        label: "connected and echoed".into(),
                        colour: BLUE,
                        dashed: false,
                        points: pts,
                    },
                    Series {
                        label: format!("asked {}", count(s.conns_requested)),
                        colour: GREY,
                        dashed: true,
                        points: vec![
                            (0.0, s.conns_requested as f64),
                            (last, s.conns_requested as f64),
                        ],
                    },
                ],
                &chart::second_ticks(last),
            )
        }
        Scenario::Storm => latency_chart(r, s, "Connect and first echo, by percentile"),
        Scenario::TlsHandshake => {
            latency_chart(r, s, "Connect, TLS, upgrade and close, by percentile")
        }
        Scenario::Script => step_chart(s),
        Scenario::Restart => latency_chart(r, s, "Close to new upgrade, by percentile"),
        Scenario::Idle => idle_chart(r, s),
        Scenario::Broadcast
            if s.timeline.len() >= 2 && s.timeline.iter().any(|p| p.received_per_sec > 0) =>
        {
            let pts = over_time(s, false);
            let last = pts.last().map_or(1.0, |p| p.0);
            chart::line_chart(
                "Deliveries per second",
                "second of the run",
                "deliveries/s",
                &[Series {
                    label: format!(
                        "to {} subscribers, {} rounds",
                        count(s.conns_connected),
                        s.broadcast_rounds.unwrap_or(0)
                    ),
                    colour: TEAL,
                    dashed: false,
                    points: pts,
                }],
                &chart::second_ticks(last),
            )
        }
        Scenario::Broadcast => s.broadcast_last_ms.as_ref().and_then(|l| {
            chart::line_chart(
                "Time until the last subscriber had the round, by percentile",
                "percentile of rounds",
                "ms",
                &[latency_series(l, "last subscriber", TEAL, false)],
                &chart::percentile_ticks(),
            )
        }),
    }
}

/// Idle: memory per connection measured beside the profile's estimate; without a
/// measurement, the connections held.
fn idle_chart(r: &Report, s: &ScenarioReport) -> Option<String> {
    let mut bars = Vec::new();
    for c in r.memory.iter().flat_map(|m| m.compared.iter()) {
        bars.push(Bar {
            label: format!("{}, measured", c.what),
            value: c.measured_bytes,
            colour: BLUE,
        });
        bars.push(Bar {
            label: format!("{}, estimate", c.what),
            value: c.estimate_bytes as f64,
            colour: GREY,
        });
    }
    if !bars.is_empty() {
        return chart::bar_chart(
            &format!(
                "Memory per idle connection at {}, against the profile's estimate",
                count(s.conns_connected)
            ),
            &bars,
            bytes,
        );
    }
    let held = s.conns_connected as f64;
    chart::line_chart(
        "Connections held",
        "second of the run",
        "connections",
        &[Series {
            label: "open".into(),
            colour: BLUE,
            dashed: false,
            points: vec![(0.0, held), (s.secs.max(1.0), held)],
        }],
        &chart::second_ticks(s.secs.max(1.0)),
    )
}

/// A share of the host's cores as a bar (the bar's full width is every core), server and
/// generator beside each other.
fn cpu_bar(label: &str, pct: f64, cores: usize, class: &str) -> String {
    let share = (pct / (cores.max(1) as f64 * 100.0)).clamp(0.0, 1.0);
    format!(
        "<div class=\"cpu\"><span>{label}</span><span class=\"track\"><span class=\"fill {class}\" \
         style=\"width:{:.1}%\"></span></span><span>{:.0}% of a core · {:.0}% of the host</span></div>",
        share * 100.0,
        pct,
        share * 100.0,
    )
}

/// The scenario's section: heading with its checks' tally, purpose, chart, figures.
pub fn section(r: &Report, s: &ScenarioReport) -> String {
    let name = s.scenario.name();
    let checks: Vec<_> = r
        .verdict
        .checks
        .iter()
        .filter(|c| c.scenario == s.scenario)
        .collect();
    let failed = checks.iter().filter(|c| c.judged && !c.ok).count();
    let unjudged = checks.iter().filter(|c| !c.judged).count();
    let badge = if checks.is_empty() {
        String::new()
    } else if failed > 0 {
        format!(
            "<span class=\"badge fail\">{failed} of {} checks failed</span>",
            checks.len()
        )
    } else if unjudged > 0 {
        format!(
            "<span class=\"badge nj\">{unjudged} of {} checks not judged</span>",
            checks.len()
        )
    } else {
        format!(
            "<span class=\"badge ok\">{} checks passed</span>",
            checks.len()
        )
    };
    let mut o = format!(
        "<section class=\"scenario\" id=\"scenario-{name}\"><h3>{name} {badge}</h3>\
         <p class=\"muted\">{}</p><div class=\"scn\"><div class=\"plot\">{}</div><div>",
        purpose(s.scenario),
        chart(r, s)
            .unwrap_or_else(|| "<p class=\"muted\">Nothing was measured to chart.</p>".into())
    );
    let mut dl = Vec::new();
    dl.push((
        "connections",
        format!(
            "{} of {}",
            count(s.conns_connected),
            count(s.conns_requested)
        ),
    ));
    dl.push((
        "window",
        if s.warmup_secs > 0.0 {
            format!(
                "{} s after {} s of warm-up",
                num(s.secs),
                num(s.warmup_secs)
            )
        } else {
            format!("{} s", num(s.secs))
        },
    ));
    let rate = match s.offered_rate {
        Some(o) => format!("{} msgs/s of {} offered", num(s.achieved_rate), num(o)),
        None => format!("{} msgs/s", num(s.achieved_rate)),
    };
    dl.push(("achieved", rate));
    let l = &s.latency_ms;
    if l.count > 0 {
        dl.push((
            "latency",
            format!(
                "p50 {} · p99 {} · p99.9 {} · max {} ms",
                num(l.p50),
                num(l.p99),
                num(l.p999),
                num(l.max)
            ),
        ));
    }
    if let Some(b) = &s.broadcast_last_ms {
        dl.push((
            "last subscriber",
            format!(
                "p50 {} · p99 {} ms over {} rounds",
                num(b.p50),
                num(b.p99),
                b.count
            ),
        ));
    }
    if let (Some(st), Some(c)) = (s.storm_secs, s.connects_per_sec) {
        dl.push((
            "storm",
            format!("{} in {st:.2} s ({}/s)", count(s.conns_connected), num(c)),
        ));
    }
    dl.push((
        "errors · server closes · lost",
        format!("{} · {} · {}", s.errors, s.disconnects, s.lost),
    ));
    if let Some(us) = s.server_cpu_us_per_msg {
        dl.push(("server CPU per message", format!("{} µs", num(us))));
    }
    if let Some(e) = s.echoes_per_server_cpu_sec {
        dl.push(("echoes per server CPU-second", num(e)));
    }
    if let Some(b) = s.server.as_ref().and_then(|p| p.rss_after_bytes) {
        dl.push(("server RSS", bytes(b as f64)));
    }
    if let Some(e) = &s.first_error {
        dl.push(("first error", e.clone()));
    }
    if let Some(i) = &s.incomplete {
        dl.push(("incomplete", i.clone()));
    }
    for line in crate::selftest::report::restart_lines(s) {
        dl.push(("restart", line));
    }
    o.push_str("<dl>");
    for (k, v) in dl {
        let _ = write!(o, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    }
    o.push_str("</dl>");
    if let Some(p) = &s.server {
        o.push_str(&cpu_bar("server", p.cpu_pct, r.cores, "srv"));
    }
    o.push_str(&cpu_bar(
        &format!("generator ({} proc.)", s.workers),
        s.generator.cpu_pct,
        r.cores,
        "gen",
    ));
    let notes = crate::selftest::report::table::disturbance_lines(s);
    if !notes.is_empty() {
        o.push_str("<ul class=\"notes\">");
        for line in notes.lines() {
            let _ = write!(o, "<li>{}</li>", esc(line.trim()));
        }
        o.push_str("</ul>");
    }
    o.push_str(&host_timeline(s));
    o.push_str("</div></div></section>");
    o
}

/// What the host's kernel did during the scenario (`wstune watch`'s frames in brief): the
/// advice that fired, each with what moved and the fix; or that nothing turned.
fn host_timeline(s: &ScenarioReport) -> String {
    let Some(t) = &s.host_timeline else {
        return String::new();
    };
    let name = s.scenario.name();
    let lines = t.lines();
    let whose = if t.generator_only {
        "The generator's host (the server runs elsewhere: its accept queues are not seen here)"
    } else {
        "The host"
    };
    let mut o = format!(
        "<div class=\"host\" id=\"host-{name}\"><p class=\"tally\"><b>{whose} during {name}</b> \
         ({} readings over {} s)</p>",
        t.frames,
        num(t.seconds)
    );
    if lines.is_empty() {
        o.push_str(
            "<p class=\"muted\">Nothing turned: no accept queue was full, no counter that \
             predicts failure moved and no value crossed its mark.</p>",
        );
    } else {
        o.push_str("<ul class=\"notes\">");
        for l in lines {
            let _ = write!(o, "<li class=\"why\">{}</li>", esc(&l));
        }
        o.push_str("</ul>");
    }
    o.push_str("</div>");
    o
}

/// A script's waiting steps, one latency curve each.
fn step_chart(s: &ScenarioReport) -> Option<String> {
    const COLOURS: [&str; 4] = [BLUE, VIOLET, TEAL, GREY];
    let series: Vec<Series> = s
        .steps
        .iter()
        .filter(|st| st.latency_ms.count > 0)
        .enumerate()
        .map(|(i, st)| {
            let colour = COLOURS[i % COLOURS.len()];
            latency_series(&st.latency_ms, &st.name, colour, i >= COLOURS.len())
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    chart::line_chart(
        "Each step's latency, by percentile",
        "percentile",
        "ms",
        &series,
        &chart::percentile_ticks(),
    )
}
