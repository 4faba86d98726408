//! `wstune report watch FILE`: a recording (`watch --record`) as one self-contained HTML page
//! for whoever was not at the terminal: what the recording covers, the advice that fired and
//! when (drawn on every chart as red bands, and listed with the catalog's fix), the
//! listeners' accept queues, a chart per counter that moved, the marks, the CPUs' softirq
//! time and the server's own figures.
//!
//! No script, no network: inline CSS and SVG only (the self-test page's charts), so the page
//! reads the same from a ticket, a mail attachment or a laptop on a plane.

use crate::selftest::report::html::chart::{self, Band, Series};
use crate::selftest::report::html::esc;
use crate::watch::advice::{thousands, Log};
use crate::watch::frame::Frame;
use crate::watch::record::Recording;
use crate::watch::timeline::Timeline;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The class of an advice moment's `<rect>` on a chart and on the advice timeline.
pub const MOMENT: &str = "moment";

/// Lines of one chart take these in turn.
const PALETTE: &[&str] = &[
    chart::BLUE,
    chart::VIOLET,
    chart::TEAL,
    "#bf3989",
    "#9a6700",
    "#0550ae",
    "#116329",
    "#953800",
];

/// The most lines one chart draws (listeners, CPUs): the rest are named under it.
const MAX_LINES: usize = 8;

const STYLE: &str = "\
*{box-sizing:border-box}\
body{font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',sans-serif;color:#1f2328;\
background:#fff;margin:0 auto;padding:20px 24px 40px;max-width:1240px}\
h1{font-size:22px;margin:0 0 6px}\
h2{font-size:18px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}\
.head{border:1px solid #d0d7de;border-left-width:8px;border-radius:6px;padding:12px 18px}\
.head.turned{border-color:#cf222e;background:#fff5f5}.head.quiet{border-color:#1a7f37;background:#f6fff8}\
.head .word{font-size:20px;font-weight:700;margin:0 0 6px}\
dl{display:grid;grid-template-columns:160px minmax(0,1fr);gap:2px 12px;margin:0}\
dt{color:#57606a}dd{margin:0;overflow-wrap:anywhere}\
.note{border:1px solid #9a6700;background:#fff8c5;border-radius:6px;padding:8px 14px;margin:12px 0 0}\
table{table-layout:fixed;width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums}\
th,td{padding:6px 8px;border-bottom:1px solid #eaeef2;text-align:right;vertical-align:top;overflow-wrap:anywhere}\
th{font-weight:600;font-size:13px;color:#424a53;border-bottom:1px solid #d0d7de;background:#f6f8fa}\
th:first-child,td:first-child{text-align:left}\
td.text,th.text{text-align:left}td.bad{color:#cf222e;font-weight:600}\
code{font-size:13px}\
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:16px}\
figure{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:8px}\
figcaption{color:#57606a;font-size:13px;margin-top:4px;overflow-wrap:anywhere}\
svg.chart{width:100%;height:auto;display:block}\
ul.notes{margin:10px 0 0;padding-left:18px;color:#424a53;overflow-wrap:anywhere}\
footer{margin-top:28px;color:#57606a;font-size:13px}";

/// The page. `source` names the recording in the footer.
pub fn watch_page(r: &Recording, source: &str) -> String {
    let frames = &r.frames;
    let t = Timeline::of(frames);
    let mut log = Log::default();
    for f in frames {
        log.add(f);
    }
    let moments = Moments::of(frames);
    let last_s = frames.last().map_or(0.0, |f| f.elapsed_s);
    let ticks = chart::second_ticks(last_s);
    let mut page = String::with_capacity(64 * 1024);
    let _ = write!(
        page,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>wstune watch: {} from {}</title><style>{STYLE}</style></head><body>",
        esc(&r.header.host),
        esc(&r.header.started)
    );
    page.push_str(&head(r, &t));
    page.push_str(&advice_section(&log, &t, &moments, last_s));
    page.push_str(&listener_section(frames, &t, &moments, &ticks));
    page.push_str(&counter_section(frames, &t, &moments, &ticks));
    page.push_str(&gauge_section(frames, &moments, &ticks));
    page.push_str(&cpu_section(frames, &moments, &ticks));
    page.push_str(&server_section(frames, &moments, &ticks));
    page.push_str(&notes_section(frames));
    let _ = writeln!(
        page,
        "<footer>Rendered by wstune {} from {} (written by wstune {}, frames {}). Every figure \
         is the kernel's own, read once per interval; rates are per second over the interval \
         before each reading.</footer></body></html>",
        env!("CARGO_PKG_VERSION"),
        esc(source),
        esc(&r.header.wstune),
        esc(&r.header.frames)
    );
    page
}

/// The headline box: what fired (or that nothing did), then what the recording covers.
fn head(r: &Recording, t: &Timeline) -> String {
    let h = &r.header;
    let (class, word) = if t.advice.is_empty() {
        (
            "quiet",
            "Nothing turned: no counter that predicts failure moved and no mark was crossed."
                .to_string(),
        )
    } else {
        (
            "turned",
            format!(
                "{} piece{} of advice fired: {}",
                t.advice.len(),
                if t.advice.len() == 1 { "" } else { "s" },
                t.advice
                    .iter()
                    .map(|a| a.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    };
    let first = r.frames.first().map(|f| f.time.as_str()).unwrap_or("");
    let last = r.frames.last().map(|f| f.time.as_str()).unwrap_or("");
    let truncated = if r.truncated {
        "<p class=\"note\" id=\"truncated\"><b>Truncated:</b> the recording's last line was cut \
         short (the watch was stopped while writing it); it is left out and every whole frame \
         before it is shown.</p>"
    } else {
        ""
    };
    format!(
        "<h1>wstune watch on {host}</h1>\
         <header class=\"head {class}\" id=\"summary\"><p class=\"word\">{}</p><dl>\
         <dt>Host</dt><dd>{host}</dd>\
         <dt>Started</dt><dd>{}</dd>\
         <dt>Frames</dt><dd>{} ({} to {})</dd>\
         <dt>Duration</dt><dd>{:.1} s</dd>\
         <dt>Interval</dt><dd>{} s</dd>\
         <dt>Scope</dt><dd>{}</dd>\
         </dl></header>{truncated}",
        esc(&word),
        esc(&h.started),
        r.frames.len(),
        esc(first),
        esc(last),
        t.seconds,
        h.interval_s,
        esc(&h.scope),
        host = esc(&h.host),
    )
}

/// When each piece of advice fired: per check id, the stretches of consecutive intervals.
struct Moments {
    by_id: BTreeMap<String, Vec<(f64, f64)>>,
    /// The stretches in which any advice fired.
    any: Vec<(f64, f64)>,
}

/// Add the interval that ends at `f` to `spans`, joining it to the stretch before when it
/// follows right on.
fn extend(spans: &mut Vec<(f64, f64)>, f: &Frame) {
    let from = (f.elapsed_s - f.interval_s).max(0.0);
    match spans.last_mut() {
        Some(last) if (from - last.1).abs() < f.interval_s * 0.5 + 1e-6 => last.1 = f.elapsed_s,
        _ => spans.push((from, f.elapsed_s)),
    }
}

impl Moments {
    fn of(frames: &[Frame]) -> Moments {
        let mut by_id: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut any = Vec::new();
        for f in frames {
            for a in &f.advice {
                extend(by_id.entry(a.id.clone()).or_default(), f);
            }
            if !f.advice.is_empty() {
                extend(&mut any, f);
            }
        }
        Moments { by_id, any }
    }

    /// The bands of the checks `ids`; where `ids` is empty, those in which any advice fired
    /// (one band per stretch: overlapping bands would darken the chart).
    fn bands(&self, ids: &[&str]) -> Vec<Band> {
        let band = |from: f64, to: f64, what: String| Band {
            from,
            to,
            label: format!("{what} fired from t={from:.1} s to t={to:.1} s"),
            class: MOMENT,
        };
        if ids.is_empty() {
            return self
                .any
                .iter()
                .map(|(from, to)| band(*from, *to, "advice".into()))
                .collect();
        }
        let mut out = Vec::new();
        for id in ids {
            for (from, to) in self.by_id.get(*id).into_iter().flatten() {
                out.push(band(*from, *to, id.to_string()));
            }
        }
        out
    }
}

/// A chart in its figure, with a caption; "" when there is nothing to draw.
fn figure(id: &str, svg: Option<String>, caption: &str) -> String {
    match svg {
        Some(svg) => format!(
            "<figure id=\"{}\">{svg}<figcaption>{}</figcaption></figure>",
            esc(id),
            esc(caption)
        ),
        None => String::new(),
    }
}

fn series(label: String, i: usize, points: Vec<(f64, f64)>) -> Series {
    Series {
        label,
        colour: PALETTE[i % PALETTE.len()],
        dashed: false,
        points,
    }
}

fn reference(label: String, points: Vec<(f64, f64)>) -> Series {
    Series {
        label,
        colour: chart::GREY,
        dashed: true,
        points,
    }
}

fn advice_section(log: &Log, t: &Timeline, m: &Moments, last_s: f64) -> String {
    let mut s = String::from("<h2 id=\"advice\">Advice: what fired, and when</h2>");
    if log.events.is_empty() {
        s.push_str(
            "<p>No advice fired: every listener had room in its accept queue, no counter that \
             predicts failure moved and no value crossed its mark.</p>",
        );
        return s;
    }
    s.push_str(&advice_timeline(log, m, last_s));
    s.push_str(
        "<table id=\"advice-table\"><colgroup><col style=\"width:19%\"><col style=\"width:12%\">\
         <col style=\"width:11%\"><col style=\"width:11%\"><col style=\"width:6%\">\
         <col style=\"width:21%\"><col style=\"width:20%\"></colgroup>\
         <thead><tr><th>Check</th><th class=\"text\">Title</th><th>First seen</th><th>Last seen</th>\
         <th>Count</th><th class=\"text\">What moved (last time)</th><th class=\"text\">Fix</th></tr></thead><tbody>",
    );
    for e in &log.events {
        let fix = if e.fix.is_empty() {
            "(the catalog gives no command)".to_string()
        } else {
            e.fix
                .iter()
                .map(|f| format!("<code>{}</code>", esc(f)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let _ = write!(
            s,
            "<tr class=\"event\" data-id=\"{id}\"><td><code>{id}</code></td><td class=\"text\">{}</td>\
             <td>t={:.1} s<br><small>{}</small></td><td>t={:.1} s<br><small>{}</small></td>\
             <td>{}</td><td class=\"text\">{}</td><td class=\"text\">{fix}</td></tr>",
            esc(&e.title),
            e.first_s,
            esc(&e.first_seen),
            e.last_s,
            esc(&e.last_seen),
            e.count,
            esc(&e.what),
            id = esc(&e.id),
        );
    }
    s.push_str("</tbody></table>");
    let lines = t.lines();
    if !lines.is_empty() {
        s.push_str("<ul class=\"notes\" id=\"advice-lines\">");
        for l in lines {
            let _ = write!(s, "<li>{}</li>", esc(&l));
        }
        s.push_str("</ul>");
    }
    s
}

/// One row per check id, a red bar over each stretch of intervals in which it fired.
fn advice_timeline(log: &Log, m: &Moments, last_s: f64) -> String {
    const W: f64 = 1180.0;
    const LABEL: f64 = 300.0;
    const ROW: f64 = 26.0;
    let end = last_s.max(1e-9);
    let h = 30.0 + ROW * log.events.len() as f64 + 24.0;
    let px = |x: f64| LABEL + x / end * (W - LABEL - 20.0);
    let mut s = format!(
        "<figure id=\"advice-timeline\"><svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" \
         viewBox=\"0 0 {W} {h}\" role=\"img\" aria-label=\"When advice fired\" \
         font-family=\"system-ui,sans-serif\" font-size=\"12\"><title>When advice fired</title>\
         <text x=\"0\" y=\"16\" font-size=\"14\" font-weight=\"600\" fill=\"#1f2328\">When advice fired</text>"
    );
    for (i, e) in log.events.iter().enumerate() {
        let y = 30.0 + ROW * i as f64;
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#1f2328\">{}</text>\
             <line x1=\"{LABEL}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#eaeef2\"/>",
            LABEL - 8.0,
            y + 13.0,
            esc(&e.id),
            W - 20.0,
            y + 9.0,
            y + 9.0
        );
        for (from, to) in m.by_id.get(&e.id).into_iter().flatten() {
            let _ = write!(
                s,
                "<rect class=\"{MOMENT}\" data-id=\"{}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" \
                 height=\"18\" rx=\"2\" fill=\"#cf222e\"><title>{} from t={from:.1} s to t={to:.1} s</title></rect>",
                esc(&e.id),
                px(*from),
                (px(*to) - px(*from)).max(3.0),
                esc(&e.id)
            );
        }
    }
    let axis = h - 14.0;
    for (x, label) in chart::second_ticks(last_s) {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{axis:.1}\" text-anchor=\"middle\" fill=\"#57606a\">{}</text>",
            px(x),
            esc(&label)
        );
    }
    s.push_str(
        "</svg><figcaption>Each bar is a stretch of intervals in which the check's row turned; \
         the same moments are shaded red on the charts below.</figcaption></figure>",
    );
    s
}

fn listener_section(
    frames: &[Frame],
    t: &Timeline,
    m: &Moments,
    ticks: &[(f64, String)],
) -> String {
    let mut s = String::from("<h2 id=\"listeners\">Listeners: accept queues</h2>");
    if t.listeners.is_empty() {
        s.push_str("<p>No listening TCP socket was seen in the scope of this recording.</p>");
        return s;
    }
    let last = frames.last();
    s.push_str(
        "<table id=\"listener-table\"><thead><tr><th>Listener</th><th>Queue (last frame)</th>\
         <th>Backlog</th><th>Max queue seen</th><th>Max fill</th><th>Seconds full</th>\
         <th>Established</th><th>SYN_RECV</th><th>TIME_WAIT</th><th>CLOSE_WAIT</th></tr></thead><tbody>",
    );
    for l in &t.listeners {
        let row = last.and_then(|f| f.listeners.iter().find(|x| x.local == l.local));
        let states = row.and_then(|r| r.states);
        let cell = |v: Option<u64>| v.map_or("–".to_string(), thousands);
        // Windows has no accept-queue figures: say so rather than draw zeros.
        let why = frames
            .iter()
            .flat_map(|f| f.listeners.iter())
            .find(|x| x.local == l.local)
            .and_then(|x| x.queue_unavailable.clone());
        if let Some(why) = why {
            let _ = write!(
                s,
                "<tr><td><code>{}</code></td><td colspan=\"5\" class=\"muted\">unavailable: {}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&l.local),
                esc(&why),
                cell(states.map(|x| x.established)),
                cell(states.map(|x| x.syn_recv)),
                cell(states.map(|x| x.time_wait)),
                cell(states.map(|x| x.close_wait)),
            );
            continue;
        }
        let _ = write!(
            s,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td{}>{}</td><td{}>{:.0} %</td>\
             <td{}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&l.local),
            row.map_or("gone".to_string(), |r| thousands(u64::from(r.queue))),
            thousands(u64::from(l.backlog)),
            if l.max_fill >= 1.0 {
                " class=\"bad\""
            } else {
                ""
            },
            thousands(u64::from(l.max_queue)),
            if l.max_fill >= 1.0 {
                " class=\"bad\""
            } else {
                ""
            },
            l.max_fill * 100.0,
            if l.full_s > 0.0 { " class=\"bad\"" } else { "" },
            if l.full_s > 0.0 {
                format!("{:.1}", l.full_s)
            } else {
                "0".into()
            },
            cell(states.map(|x| x.established)),
            cell(states.map(|x| x.syn_recv)),
            cell(states.map(|x| x.time_wait)),
            cell(states.map(|x| x.close_wait)),
        );
    }
    s.push_str("</tbody></table>");
    // The fullest listeners get a line each.
    let mut by_fill: Vec<&crate::watch::timeline::ListenerSpan> = t.listeners.iter().collect();
    by_fill.sort_by(|a, b| b.max_fill.total_cmp(&a.max_fill));
    let shown: Vec<_> = by_fill.iter().take(MAX_LINES).collect();
    let lines: Vec<Series> = shown
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let points = frames
                .iter()
                .filter_map(|f| {
                    f.listeners
                        .iter()
                        .find(|x| x.local == l.local && x.queue_unavailable.is_none())
                        .map(|x| (f.elapsed_s, x.fill * 100.0))
                })
                .collect();
            series(l.local.clone(), i, points)
        })
        .chain(std::iter::once(reference(
            "full".into(),
            frames.iter().map(|f| (f.elapsed_s, 100.0)).collect(),
        )))
        .collect();
    let mut caption = "Each listener's accept queue against its backlog; red: the intervals in \
                       which a queue was full (linux.net.core.somaxconn)."
        .to_string();
    if t.listeners.len() > shown.len() {
        let _ = write!(
            caption,
            " The {} fullest of {} listeners are drawn.",
            shown.len(),
            t.listeners.len()
        );
    }
    s.push_str("<div class=\"charts\">");
    s.push_str(&figure(
        "chart-listener-fill",
        chart::line_chart_with_bands(
            "Accept queue fill",
            "seconds",
            "% of backlog",
            &lines,
            ticks,
            &m.bands(&["linux.net.core.somaxconn"]),
        ),
        &caption,
    ));
    s.push_str("</div>");
    s
}

fn counter_section(frames: &[Frame], t: &Timeline, m: &Moments, ticks: &[(f64, String)]) -> String {
    let mut s = String::from("<h2 id=\"counters\">Counters that moved (per second)</h2>");
    if t.counters.is_empty() {
        s.push_str("<p>No kernel counter moved during the recording.</p>");
        return s;
    }
    s.push_str("<div class=\"charts\">");
    for c in &t.counters {
        let points: Vec<(f64, f64)> = frames
            .iter()
            .filter_map(|f| {
                f.counters
                    .iter()
                    .find(|x| x.name == c.name)
                    .map(|x| (f.elapsed_s, x.per_s))
            })
            .collect();
        let ids: Vec<&str> = c.check.as_deref().into_iter().collect();
        // A context counter (no check of its own) is shaded where any advice fired.
        let bands = m.bands(&ids);
        let caption = match &c.check {
            Some(id) => format!(
                "+{} over the recording, at most {:.0}/s; explained by {id}{}",
                thousands(c.delta),
                c.max_per_s,
                if m.by_id.contains_key(id) {
                    " (red: when it fired)"
                } else {
                    ""
                }
            ),
            None => format!(
                "+{} over the recording, at most {:.0}/s; context, no check of its own (red: \
                 when any advice fired)",
                thousands(c.delta),
                c.max_per_s
            ),
        };
        s.push_str(&figure(
            &format!("chart-{}", c.name),
            chart::line_chart_with_bands(
                &c.name,
                "seconds",
                "per second",
                &[series(c.name.clone(), 0, points)],
                ticks,
                &bands,
            ),
            &caption,
        ));
    }
    s.push_str("</div>");
    s
}

fn gauge_section(frames: &[Frame], m: &Moments, ticks: &[(f64, String)]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for f in frames {
        for g in &f.gauges {
            if !names.contains(&g.name.as_str()) {
                names.push(&g.name);
            }
        }
    }
    if names.is_empty() {
        return String::new();
    }
    let mut s =
        String::from("<h2 id=\"gauges\">Values against their marks</h2><div class=\"charts\">");
    for name in names {
        let rows: Vec<(f64, &crate::watch::frame::GaugeRow)> = frames
            .iter()
            .filter_map(|f| {
                f.gauges
                    .iter()
                    .find(|g| g.name == name)
                    .map(|g| (f.elapsed_s, g))
            })
            .collect();
        let Some((_, last)) = rows.last() else {
            continue;
        };
        let value = series(
            name.to_string(),
            0,
            rows.iter().map(|(x, g)| (*x, g.value as f64)).collect(),
        );
        let mark = reference(
            format!("mark ({})", last.mark_is),
            rows.iter().map(|(x, g)| (*x, g.mark as f64)).collect(),
        );
        let caption = format!(
            "{} now, mark {}{}; check {}",
            thousands(last.value),
            thousands(last.mark),
            last.limit
                .map(|l| format!(", limit {}", thousands(l)))
                .unwrap_or_default(),
            last.check
        );
        s.push_str(&figure(
            &format!("chart-gauge-{name}"),
            chart::line_chart_with_bands(
                name,
                "seconds",
                "",
                &[value, mark],
                ticks,
                &m.bands(&[&last.check]),
            ),
            &caption,
        ));
    }
    s.push_str("</div>");
    s
}

fn cpu_section(frames: &[Frame], m: &Moments, ticks: &[(f64, String)]) -> String {
    let mut names: Vec<(String, f64)> = Vec::new();
    for f in frames {
        for c in &f.cpus {
            match names.iter_mut().find(|(n, _)| *n == c.cpu) {
                Some((_, max)) => *max = max.max(c.softirq_pct),
                None => names.push((c.cpu.clone(), c.softirq_pct)),
            }
        }
    }
    if names.is_empty() {
        return String::new();
    }
    let all = names.len();
    names.sort_by(|a, b| b.1.total_cmp(&a.1));
    names.truncate(MAX_LINES);
    let mut lines: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            series(
                n.clone(),
                i,
                frames
                    .iter()
                    .filter_map(|f| {
                        f.cpus
                            .iter()
                            .find(|c| c.cpu == *n)
                            .map(|c| (f.elapsed_s, c.softirq_pct))
                    })
                    .collect(),
            )
        })
        .collect();
    lines.push(reference(
        "mark".into(),
        frames
            .iter()
            .map(|f| (f.elapsed_s, crate::watch::frame::SOFTIRQ_MARK_PCT))
            .collect(),
    ));
    let mut caption = format!(
        "Share of each CPU spent in softirq (receiving and sending); the mark is {:.0} % \
         (linux.cpu.softirq).",
        crate::watch::frame::SOFTIRQ_MARK_PCT
    );
    if all > names.len() {
        let _ = write!(
            caption,
            " The {} busiest of {all} CPUs are drawn.",
            names.len()
        );
    }
    let mut s = String::from("<h2 id=\"cpus\">Softirq per CPU</h2><div class=\"charts\">");
    s.push_str(&figure(
        "chart-softirq",
        chart::line_chart_with_bands(
            "Softirq per CPU",
            "seconds",
            "% of the CPU",
            &lines,
            ticks,
            &m.bands(&["linux.cpu.softirq"]),
        ),
        &caption,
    ));
    s.push_str("</div>");
    s
}

fn server_section(frames: &[Frame], m: &Moments, ticks: &[(f64, String)]) -> String {
    type Field = fn(&crate::watch::server::ServerFigures) -> Option<f64>;
    let fields: &[(&str, &str, Field)] = &[
        ("connections", "connections", |s| s.connections),
        ("messages in per second", "per second", |s| {
            s.messages_in_per_s
        }),
        ("messages out per second", "per second", |s| {
            s.messages_out_per_s
        }),
        ("send-queue closes", "per interval", |s| s.send_queue_closes),
        ("handshakes rejected", "per interval", |s| {
            s.handshakes_rejected
        }),
        ("offload queue depth", "messages", |s| s.offload_queue_depth),
        ("budget used (MiB)", "MiB", |s| {
            s.budget_used_bytes.map(|b| b / 1048576.0)
        }),
        ("open fds", "descriptors", |s| s.open_fds),
        ("resident memory (MiB)", "MiB", |s| {
            s.resident_bytes.map(|b| b / 1048576.0)
        }),
    ];
    let Some(url) = frames
        .iter()
        .find_map(|f| f.server.as_ref().map(|s| s.url.clone()))
    else {
        return String::new();
    };
    let mut s = format!(
        "<h2 id=\"server\">The server's own figures</h2><p>Scraped from <code>{}</code> every interval.</p><div class=\"charts\">",
        esc(&url)
    );
    let mut drawn = 0;
    for (i, (title, unit, get)) in fields.iter().enumerate() {
        let points: Vec<(f64, f64)> = frames
            .iter()
            .filter_map(|f| f.server.as_ref().and_then(get).map(|v| (f.elapsed_s, v)))
            .collect();
        if points.is_empty() {
            continue;
        }
        drawn += 1;
        s.push_str(&figure(
            &format!("chart-server-{i}"),
            chart::line_chart_with_bands(
                title,
                "seconds",
                unit,
                &[series(title.to_string(), 0, points)],
                ticks,
                &m.bands(&[]),
            ),
            "red: when any advice fired",
        ));
    }
    s.push_str("</div>");
    let errors: Vec<String> = frames
        .iter()
        .filter_map(|f| {
            f.server
                .as_ref()
                .and_then(|s| s.error.as_ref())
                .map(|e| format!("t={:.1} s: {e}", f.elapsed_s))
        })
        .collect();
    if drawn == 0 && errors.is_empty() {
        s.push_str("<p>The endpoint gave none of the figures this report draws.</p>");
    }
    if !errors.is_empty() {
        s.push_str("<ul class=\"notes\">");
        for e in errors.iter().take(20) {
            let _ = write!(s, "<li>{}</li>", esc(e));
        }
        if errors.len() > 20 {
            let _ = write!(
                s,
                "<li>… and {} more intervals it could not be read</li>",
                errors.len() - 20
            );
        }
        s.push_str("</ul>");
    }
    s
}

/// What could not be read (never drawn as zero) and the scope's notes, each once.
fn notes_section(frames: &[Frame]) -> String {
    let mut unavailable: BTreeMap<&str, &str> = BTreeMap::new();
    let mut notes: Vec<&str> = Vec::new();
    for f in frames {
        for (k, v) in &f.unavailable {
            unavailable.insert(k, v);
        }
        for n in &f.notes {
            if !notes.contains(&n.as_str()) {
                notes.push(n);
            }
        }
    }
    if unavailable.is_empty() && notes.is_empty() {
        return String::new();
    }
    let mut s = String::from("<h2 id=\"notes\">Not measured, and notes</h2><ul class=\"notes\">");
    for (k, v) in unavailable {
        let _ = write!(s, "<li><b>{}</b> unavailable: {}</li>", esc(k), esc(v));
    }
    for n in notes {
        let _ = write!(s, "<li>{}</li>", esc(n));
    }
    s.push_str("</ul>");
    s
}
