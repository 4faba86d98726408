//! The charts scenarios draw from their reports: latency by percentile (with the profile's
//! p99 target for the open-loop ones), counts over the window, memory per connection against
//! the estimate, a script's steps. Each scenario picks its own (`Workload::chart`); the report
//! holds no per-second percentiles, so latency is drawn as its curve over the whole window.

use super::chart::{self, Bar, Series, BLUE, GREY, TEAL, VIOLET};
use crate::selftest::report::{bytes, count, num, Report};
use crate::selftest::{Latency, ScenarioReport};

pub(crate) fn latency_series(
    l: &Latency,
    label: &str,
    colour: &'static str,
    dashed: bool,
) -> Series {
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

/// The latency curve, the send-side curve beside it, and (`with_target`: an open-loop
/// scenario) the profile's p99 as a line.
pub(crate) fn latency_chart(
    r: &Report,
    s: &ScenarioReport,
    title: &str,
    with_target: bool,
) -> Option<String> {
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
    if with_target {
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
pub(crate) fn over_time(s: &ScenarioReport, cumulative: bool) -> Vec<(f64, f64)> {
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

/// Idle: memory per connection measured beside the profile's estimate; without a
/// measurement, the connections held.
pub(crate) fn idle_chart(r: &Report, s: &ScenarioReport) -> Option<String> {
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
/// A script's waiting steps, one latency curve each.
pub(crate) fn step_chart(s: &ScenarioReport) -> Option<String> {
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
