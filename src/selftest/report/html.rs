//! A self-contained HTML page with inline SVG charts.

use super::super::Scenario;
use super::{num, table, Report};

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

/// A line chart as inline SVG: one polyline per series over shared axes.
pub(super) fn svg_chart(
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
pub(super) fn nines(p: f64) -> f64 {
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
         <h1>wstune self-test: <span class=\"{}\">{}</span></h1><p>{}</p><p>{} &middot; {} cores &middot; profile {} (p99 target {} ms)</p>\
         {}{}<h2>Figures</h2><pre>{}</pre><h2>Report (JSON)</h2><pre>{}</pre></body></html>\n",
        if r.verdict.pass { "pass" } else { "miss" },
        if r.verdict.pass {
            "PASS"
        } else if r.verdict.too_noisy {
            "NOT PROVEN"
        } else {
            "MISS"
        },
        esc(&r.verdict.summary),
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
