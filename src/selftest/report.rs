//! The self-test's outputs: the verdict against the profile's targets, a table for people,
//! JSON for machines, and a self-contained HTML page with inline SVG charts.

use super::{Scenario, ScenarioReport};
use serde::Serialize;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
pub struct Targets {
    pub profile: String,
    pub p99_ms: f64,
    pub rate_per_client: f64,
    pub payload_bytes: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub scenario: Scenario,
    pub what: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub pass: bool,
    pub checks: Vec<Check>,
}

/// What `check` said about this host before a `serve --self-test` (informational: the
/// verdict is about the load).
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    pub profile: String,
    pub failed: Vec<String>,
    pub warnings: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub url: String,
    pub cores: usize,
    pub targets: Targets,
    /// Where the run was made smaller than asked, and why.
    pub scaled_down: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_check: Option<HostCheck>,
    pub scenarios: Vec<ScenarioReport>,
    pub verdict: Verdict,
}

/// Judge the scenarios against the targets. Every scenario must finish without errors or
/// server-side closes; the echo-rate ones must also deliver 95% of the offered rate within
/// the profile's p99; broadcast must reach every subscriber in every round.
pub fn verdict(scenarios: &[ScenarioReport], t: &Targets) -> Verdict {
    let mut checks = Vec::new();
    for s in scenarios {
        let mut add = |what: &str, ok: bool, detail: String| {
            checks.push(Check {
                scenario: s.scenario,
                what: what.to_string(),
                ok,
                detail,
            })
        };
        add(
            "finished",
            s.incomplete.is_none(),
            s.incomplete
                .clone()
                .unwrap_or_else(|| "ran to the end".into()),
        );
        add(
            "no errors",
            s.errors == 0,
            match &s.first_error {
                Some(e) if s.errors > 0 => format!("{} errors; first: {e}", s.errors),
                _ => format!("{} errors", s.errors),
            },
        );
        add(
            "no server closes",
            s.disconnects == 0,
            if s.close_codes.is_empty() {
                format!("{} connections closed by the server", s.disconnects)
            } else {
                format!(
                    "{} connections closed by the server (codes {:?})",
                    s.disconnects, s.close_codes
                )
            },
        );
        match s.scenario {
            Scenario::EchoRate | Scenario::Deflate => {
                add(
                    "p99 latency",
                    s.latency_ms.count > 0 && s.latency_ms.p99 <= t.p99_ms,
                    format!("{:.2} ms (target {} ms)", s.latency_ms.p99, t.p99_ms),
                );
                add(
                    "every message answered",
                    s.lost == 0,
                    format!("{} messages never echoed by the end of the run", s.lost),
                );
                let offered = s.offered_rate.unwrap_or(0.0);
                add(
                    "throughput",
                    s.achieved_rate >= offered * 0.95,
                    format!("{:.0} of {:.0} msgs/s offered", s.achieved_rate, offered),
                );
            }
            Scenario::Broadcast => {
                let want = s.conns_connected as u64 * s.broadcast_rounds.unwrap_or(0) as u64;
                add(
                    "every subscriber, every round",
                    want > 0 && s.received >= want,
                    format!("{} of {want} deliveries", s.received),
                );
            }
            _ => {}
        }
    }
    Verdict {
        pass: checks.iter().all(|c| c.ok),
        checks,
    }
}

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

pub fn table(r: &Report) -> String {
    let mut t = crate::output::new_table();
    t.set_header(vec![
        "scenario",
        "conns",
        "msgs/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "server CPU",
        "generator CPU",
        "notes",
    ]);
    for s in &r.scenarios {
        let mut notes = Vec::new();
        if let Some(o) = s.offered_rate {
            notes.push(format!("offered {}/s", num(o)));
        }
        if let Some(e) = s.echoes_per_server_cpu_sec {
            notes.push(format!("{} echoes per server CPU-s", num(e)));
        }
        if let Some(p) = s.server.as_ref().and_then(|s| s.rss_per_conn_bytes) {
            notes.push(format!("{} RSS per connection", bytes(p)));
        }
        if let (Some(st), Some(c)) = (s.storm_secs, s.connects_per_sec) {
            notes.push(format!(
                "{} connected+echoed in {st:.2} s ({}/s)",
                s.conns_connected,
                num(c)
            ));
        }
        if let Some(b) = &s.broadcast_last_ms {
            notes.push(format!(
                "last subscriber: p50 {} ms, p99 {} ms over {} rounds",
                num(b.p50),
                num(b.p99),
                b.count
            ));
        }
        if s.errors > 0 || s.disconnects > 0 {
            notes.push(format!(
                "{} errors, {} server closes",
                s.errors, s.disconnects
            ));
        }
        if let Some(i) = &s.incomplete {
            notes.push(format!("INCOMPLETE: {i}"));
        }
        let l = &s.latency_ms;
        t.add_row(vec![
            s.scenario.name().to_string(),
            format!("{}/{}", s.conns_connected, s.conns_requested),
            num(s.achieved_rate),
            num(l.p50),
            num(l.p99),
            num(l.p999),
            num(l.max),
            s.server
                .as_ref()
                .map(|p| format!("{:.0}%", p.cpu_pct))
                .unwrap_or_else(|| "-".into()),
            format!("{:.0}% ({}p)", s.generator.cpu_pct, s.workers),
            notes.join("; "),
        ]);
    }
    let mut out = format!("wstune self-test of {} ({} cores)\n{t}\n", r.url, r.cores);
    if let Some(h) = &r.host_check {
        if h.failed.is_empty() {
            out.push_str(&format!(
                "host check: no failures for profile {} ({} warnings)\n",
                h.profile, h.warnings
            ));
        } else {
            out.push_str(&format!(
                "host check: {} failure(s) for profile {}: {} (`wstune check --profile {}` says how to fix them)\n",
                h.failed.len(),
                h.profile,
                h.failed.join(", "),
                h.profile
            ));
        }
    }
    for s in &r.scaled_down {
        out.push_str(&format!("scaled down: {s}\n"));
    }
    for c in &r.verdict.checks {
        if !c.ok {
            out.push_str(&format!(
                "MISS {} {}: {}\n",
                c.scenario.name(),
                c.what,
                c.detail
            ));
        }
    }
    out.push_str(&format!(
        "verdict: {} against profile {} (p99 <= {} ms, 95% of the offered rate, no errors)\n",
        if r.verdict.pass { "PASS" } else { "MISS" },
        r.targets.profile,
        r.targets.p99_ms
    ));
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

/// A line chart as inline SVG: one polyline per series over shared axes.
fn svg_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(Scenario, Vec<(f64, f64)>)],
    x_ticks: &[(f64, String)],
) -> String {
    let (w, h, l, b, top, right) = (640.0, 300.0, 60.0, 40.0, 30.0, 150.0);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .collect();
    if xs.is_empty() {
        return format!("<p>{}: no data</p>", esc(title));
    }
    let (x0, x1) = (
        xs.iter().cloned().fold(f64::MAX, f64::min),
        xs.iter()
            .cloned()
            .fold(f64::MIN, f64::max)
            .max(xs[0] + 1e-9),
    );
    let y1 = ys.iter().cloned().fold(0.0, f64::max).max(1e-9) * 1.1;
    let px = |x: f64| l + (x - x0) / (x1 - x0).max(1e-9) * (w - l - right);
    let py = |y: f64| top + (1.0 - y / y1) * (h - top - b);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\
         <text x=\"{}\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">{}</text>\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/><line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{}\" stroke=\"#333\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>",
        (w - right) / 2.0 + l / 2.0, esc(title), h - b, w - right, h - b, h - b,
        (w - right) / 2.0 + l / 2.0, h - 6.0, esc(x_label), h / 2.0, h / 2.0, esc(y_label)
    );
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        s.push_str(&format!(
            "<line x1=\"{l}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - right, py(y), py(y), l - 4.0, py(y) + 4.0, num(y)
        ));
    }
    for (x, label) in x_ticks {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(*x),
            h - b + 14.0,
            esc(label)
        ));
    }
    for (i, (scenario, pts)) in series.iter().enumerate() {
        // One colour per scenario, the same in every chart.
        let c = PALETTE[*scenario as usize % PALETTE.len()];
        let name = scenario.name();
        let d: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\
             <rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            d.join(" "), w - right + 10.0, top + 16.0 * i as f64, w - right + 24.0, top + 9.0 + 16.0 * i as f64, esc(name)
        ));
    }
    s.push_str("</svg>");
    s
}

/// Percentile positions on a "nines" axis: 50 -> 1, 90 -> 2, 99 -> 3, 99.9 -> 4 ...
fn nines(p: f64) -> f64 {
    if p >= 100.0 {
        5.0
    } else {
        (-(1.0 - p / 100.0).log10()).min(5.0) + 0.7
    }
}

pub fn html(r: &Report) -> String {
    let lat: Vec<(Scenario, Vec<(f64, f64)>)> = r
        .scenarios
        .iter()
        .filter(|s| s.latency_ms.count > 0)
        .map(|s| {
            (
                s.scenario,
                s.latency_ms
                    .curve
                    .iter()
                    .map(|(p, ms)| (nines(*p), *ms))
                    .collect(),
            )
        })
        .collect();
    let ticks: Vec<(f64, String)> = [50.0, 90.0, 99.0, 99.9, 99.99, 100.0]
        .iter()
        .map(|&p| {
            (
                nines(p),
                if p >= 100.0 {
                    "max".into()
                } else {
                    format!("p{p}")
                },
            )
        })
        .collect();
    let thr: Vec<(Scenario, Vec<(f64, f64)>)> = r
        .scenarios
        .iter()
        .filter(|s| !s.timeline.is_empty() && s.scenario != Scenario::Idle)
        .map(|s| {
            (
                s.scenario,
                s.timeline
                    .iter()
                    .map(|p| (p.t as f64, p.received_per_sec as f64))
                    .collect(),
            )
        })
        .collect();
    let secs = r
        .scenarios
        .iter()
        .map(|s| s.timeline.len())
        .max()
        .unwrap_or(0);
    let t_ticks: Vec<(f64, String)> = (1..=secs)
        .step_by((secs / 10).max(1))
        .map(|t| (t as f64, format!("{t}")))
        .collect();
    let json = serde_json::to_string_pretty(r).unwrap_or_default();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>wstune self-test</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}pre{{background:#f6f6f6;padding:1em;overflow:auto}}\
         .pass{{color:#2a2}}.miss{{color:#c22}}</style></head><body>\
         <h1>wstune self-test: <span class=\"{}\">{}</span></h1><p>{} &middot; {} cores &middot; profile {} (p99 target {} ms)</p>\
         {}{}<h2>Figures</h2><pre>{}</pre><h2>Report (JSON)</h2><pre>{}</pre></body></html>\n",
        if r.verdict.pass { "pass" } else { "miss" },
        if r.verdict.pass { "PASS" } else { "MISS" },
        esc(&r.url),
        r.cores,
        esc(&r.targets.profile),
        r.targets.p99_ms,
        svg_chart("Latency by percentile", "percentile", "ms", &lat, &ticks),
        svg_chart("Echoes (or deliveries) per second", "second of the run", "msgs/s", &thr, &t_ticks),
        esc(&table(r)),
        esc(&json)
    )
}
