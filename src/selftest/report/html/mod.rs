//! The self-test as one self-contained HTML page (`--report FILE.html`), for people who were
//! not at the terminal: the verdict and what it covers first, then every check, the figures
//! as a table, one section and chart per scenario, and the JSON report as a download.
//!
//! No script, no network: inline CSS and SVG only, so the page reads the same from a CI
//! artefact, a mail attachment or a file share, and it fits a 1280-pixel screen.

pub(crate) mod chart;
pub(crate) mod charts;
mod scenarios;
#[cfg(test)]
mod tests;

use super::scope::{Scope, Standing};
use super::{count, num, Report};
use base64::Engine as _;
use std::fmt::Write;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "\
*{box-sizing:border-box}\
body{font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',sans-serif;color:#1f2328;\
background:#fff;margin:0 auto;padding:20px 24px 40px;max-width:1240px}\
h1{font-size:15px;font-weight:600;color:#57606a;margin:0 0 10px}\
h2{font-size:18px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}\
h3{font-size:16px;margin:0 0 2px}\
a{color:#0969da}\
.muted{color:#57606a;margin:0 0 10px}\
.verdict{border:1px solid;border-left-width:8px;border-radius:6px;padding:14px 20px}\
.verdict .word{font-size:30px;font-weight:700;letter-spacing:.01em;margin:0}\
.verdict .scope{font-size:16px;margin:4px 0 6px}\
.verdict .summary{margin:0 0 6px;overflow-wrap:anywhere}\
.verdict .meta{color:#57606a;margin:0;overflow-wrap:anywhere}\
.v-pass{border-color:#1a7f37;background:#dafbe1}.v-pass .word{color:#1a7f37}\
.v-partial{border-color:#9a6700;background:#fff8c5}.v-partial .word{color:#7d4e00}\
.v-notproven{border-color:#6e7781;background:#f6f8fa}.v-notproven .word{color:#424a53}\
.v-miss{border-color:#cf222e;background:#ffebe9}.v-miss .word{color:#a40e26}\
ul.checks{list-style:none;margin:0;padding:0;border:1px solid #d0d7de;border-radius:6px}\
ul.checks li{display:grid;grid-template-columns:28px 120px 230px minmax(0,1fr);gap:8px;padding:5px 12px;\
border-top:1px solid #eaeef2;overflow-wrap:anywhere}\
ul.checks li:first-child{border-top:0}\
.mark{font-weight:700;text-align:center}\
li.ok .mark{color:#1a7f37}li.fail{background:#fff5f5}li.fail .mark{color:#cf222e}\
li.nj .mark{color:#9a6700}li.nj{background:#fffbe6}\
.tally{margin:0 0 8px;color:#57606a}.why{color:#7d4e00;font-size:13px}\
table{table-layout:fixed;width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums}\
th,td{padding:6px 8px;border-bottom:1px solid #eaeef2;text-align:right;vertical-align:top;overflow-wrap:anywhere}\
th{font-weight:600;font-size:13px;overflow-wrap:break-word;color:#424a53;border-bottom:1px solid #d0d7de;background:#f6f8fa}\
th:first-child,td:first-child{text-align:left}\
td.bad{color:#cf222e;font-weight:600}\
ul.notes{margin:10px 0 0;padding-left:18px;color:#424a53;overflow-wrap:anywhere}\
section.scenario{border:1px solid #d0d7de;border-radius:6px;padding:14px 16px;margin:0 0 16px}\
.scn{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:20px;align-items:start}\
svg.chart{width:100%;height:auto;display:block}\
dl{display:grid;grid-template-columns:minmax(0,2fr) minmax(0,3fr);gap:2px 12px;margin:0}\
dt{color:#57606a}dd{margin:0;overflow-wrap:anywhere}\
.badge{font-size:12px;font-weight:600;border-radius:10px;padding:1px 8px;margin-left:6px;vertical-align:middle}\
.badge.ok{background:#dafbe1;color:#1a7f37}.badge.fail{background:#ffebe9;color:#a40e26}\
.badge.nj{background:#fff8c5;color:#7d4e00}\
.cpu{display:grid;grid-template-columns:minmax(0,2fr) minmax(0,1fr) minmax(0,2fr);gap:8px;align-items:center;\
margin-top:6px;font-size:13px;color:#424a53}\
.track{height:10px;background:#eaeef2;border-radius:5px;overflow:hidden}\
.fill{display:block;height:10px}.fill.srv{background:#1f6feb}.fill.gen{background:#8250df}\
.download{display:inline-block;margin-top:8px;padding:5px 12px;border:1px solid #d0d7de;border-radius:6px;\
background:#f6f8fa;text-decoration:none;font-weight:600}\
footer{margin-top:28px;color:#57606a;font-size:13px}";

/// The headline box: the word, what it covers, the run's own line, and where it ran.
fn verdict_box(r: &Report, scope: &Scope, stopped: Option<&str>, download: &str) -> String {
    let class = match scope.standing {
        Standing::Pass => "v-pass",
        Standing::PassBelowProfile => "v-partial",
        Standing::NotProven => "v-notproven",
        Standing::Miss | Standing::Stopped | Standing::Refused => "v-miss",
    };
    let target = match &r.program {
        Some(p) => format!("your server <code>{}</code> at {}", esc(p), esc(&r.url)),
        None => esc(&r.url),
    };
    format!(
        "<header class=\"verdict {class}\"><p class=\"word\">{}</p>\
         <p class=\"scope\" id=\"scope\">{}</p>{}<p class=\"summary\">{}</p>\
         <p class=\"meta\">{target} · {} cores · profile {}: p99 ≤ {} ms, {} msgs/s per connection, \
         {} B payloads · {}</p></header>",
        esc(&scope.headline()),
        esc(&scope.sentence()),
        stopped
            .map(|e| format!(
                "<p class=\"summary\"><b>Stopped:</b> {}; the figures below cover the scenarios \
                 that ran before it.</p>",
                esc(e)
            ))
            .unwrap_or_default(),
        esc(&r.verdict.summary),
        r.cores,
        esc(&r.targets.profile),
        num(r.targets.p99_ms),
        num(r.targets.rate_per_client),
        r.targets.payload_bytes,
        download
    )
}

/// Every check: failures first, then those not judged, then passes; each with its detail.
fn checks(r: &Report) -> String {
    let noise_of = |s| {
        r.scenarios
            .iter()
            .find(|x| x.scenario == s)
            .and_then(|x| x.disturbance.as_ref())
            .and_then(|d| d.why.clone())
    };
    // (rank: failed, not judged, passed; then the user's thresholds before the profile's).
    let mut rows: Vec<((u8, bool), String)> = Vec::new();
    for c in &r.verdict.checks {
        let (rank, class, mark, detail) = match (c.judged, c.ok) {
            (true, false) => (0, "fail", "✗", esc(&c.detail)),
            // A threshold without its figure says why itself.
            (false, _) if c.detail.starts_with("not judged") => (
                1,
                "nj",
                "–",
                format!("<span class=\"why\">{}</span>", esc(&c.detail)),
            ),
            (false, _) => (
                1,
                "nj",
                "–",
                format!(
                    "{}{} <span class=\"why\">not judged: the window was too noisy{}</span>",
                    esc(&c.detail),
                    if c.ok { "" } else { " <b>(would miss)</b>" },
                    noise_of(c.scenario)
                        .map(|w| format!(" ({})", esc(&w)))
                        .unwrap_or_default(),
                ),
            ),
            (true, true) => (2, "ok", "✓", esc(&c.detail)),
        };
        rows.push((
            (rank, !c.threshold),
            format!(
                "<li class=\"{class}\"><span class=\"mark\">{mark}</span><span>{}</span><span>{}{}</span><span>{detail}</span></li>",
                c.scenario.name(),
                if c.threshold { "threshold " } else { "" },
                esc(&c.what)
            ),
        ));
    }
    if let Some(h) = &r.host_check {
        let (rank, class, mark, what, detail) = if h.failed.is_empty() {
            (
                2,
                "ok",
                "✓",
                "ready for the profile",
                format!(
                    "no failed check for profile {} ({} warnings)",
                    esc(&h.profile),
                    h.warnings
                ),
            )
        } else {
            (
                0,
                "fail",
                "✗",
                "ready for the profile",
                format!(
                    "{} failed: {} (<code>wstune check --profile {}</code> says how to fix them)",
                    h.failed.len(),
                    esc(&h.failed.join(", ")),
                    esc(&h.profile)
                ),
            )
        };
        rows.push((
            (rank, true),
            format!("<li class=\"{class}\"><span class=\"mark\">{mark}</span><span>host</span><span>{what}</span><span>{detail}</span></li>"),
        ));
    }
    rows.sort_by_key(|r| r.0);
    let tally = |rank| rows.iter().filter(|r| r.0 .0 == rank).count();
    format!(
        "<h2 id=\"checks\">Checks</h2><p class=\"tally\">{} checks: {} passed, {} failed, {} not judged</p>\
         <ul class=\"checks\">{}</ul>",
        rows.len(),
        tally(2),
        tally(0),
        tally(1),
        rows.into_iter().map(|r| r.1).collect::<String>()
    )
}

/// The figures as a table that fits the page: one row per scenario.
fn figures(r: &Report) -> String {
    let mut o = String::from(
        "<h2 id=\"figures\">Figures</h2><table><colgroup><col style=\"width:10%\"><col style=\"width:10%\"><col><col>\
         <col><col><col><col><col><col><col><col></colgroup><thead><tr><th>scenario</th>\
         <th>connections</th><th>offered msgs/s</th><th>achieved msgs/s</th><th>p50 ms</th>\
         <th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>errors</th><th>server closes</th>\
         <th>server CPU</th><th>generator CPU</th></tr></thead><tbody>",
    );
    for s in &r.scenarios {
        let l = &s.latency_ms;
        let ms = |v: f64| if l.count > 0 { num(v) } else { "–".into() };
        let p99_class = if s.scenario.open_loop() && l.count > 0 && l.p99 > r.targets.p99_ms {
            " class=\"bad\""
        } else {
            ""
        };
        let bad = |n: u64| if n > 0 { " class=\"bad\"" } else { "" };
        let _ = write!(
            o,
            "<tr><td><a href=\"#scenario-{n}\">{n}</a></td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td{p99_class}>{}</td><td>{}</td><td>{}</td><td{}>{}</td><td{}>{}</td>\
             <td>{}</td><td>{:.0}%</td></tr>",
            if s.conns_connected == s.conns_requested {
                count(s.conns_connected)
            } else {
                format!(
                    "{} of {}",
                    count(s.conns_connected),
                    count(s.conns_requested)
                )
            },
            s.offered_rate.map(num).unwrap_or_else(|| "–".into()),
            num(s.achieved_rate),
            ms(l.p50),
            ms(l.p99),
            ms(l.p999),
            ms(l.max),
            bad(s.errors),
            s.errors,
            bad(s.disconnects),
            s.disconnects,
            s.server
                .as_ref()
                .map(|p| format!("{:.0}%", p.cpu_pct))
                .unwrap_or_else(|| "–".into()),
            s.generator.cpu_pct,
            n = s.scenario.name(),
        );
    }
    o.push_str("</tbody></table><p class=\"muted\">CPU in percent of one core; the host has ");
    let _ = write!(o, "{} cores.</p>", r.cores);
    o.push_str(&against_baseline(r));
    o
}

/// `--baseline`: each scenario's figures old -> new, a rise in latency or CPU and a fall in
/// rate marked.
fn against_baseline(r: &Report) -> String {
    use super::baseline::change;
    let Some(b) = &r.baseline else {
        return String::new();
    };
    let mut o = format!(
        "<h3 id=\"baseline\">Against the baseline</h3><p class=\"muted\">{} ({}): shown, not \
         judged.</p><table><thead><tr><th>scenario</th><th>p50</th><th>p99</th><th>achieved \
         msgs/s</th><th>server CPU per message</th></tr></thead><tbody>",
        esc(&b.file),
        esc(&b.url)
    );
    // Worse by more than a tenth: the cell is marked.
    let cell = |old: f64, new: f64, unit: &str, higher_is_worse: bool| {
        let worse = old > 0.0
            && if higher_is_worse {
                new > old * 1.1
            } else {
                new < old * 0.9
            };
        format!(
            "<td{}>{}</td>",
            if worse { " class=\"bad\"" } else { "" },
            esc(&change(old, new, unit))
        )
    };
    let mut rows = 0;
    for s in &r.scenarios {
        let Some(old) = b.scenario(s.scenario) else {
            continue;
        };
        rows += 1;
        let lat = s.latency_ms.count > 0 && old.latency_ms.count > 0;
        let _ = write!(
            o,
            "<tr><td>{}</td>{}{}{}{}</tr>",
            s.scenario.name(),
            if lat {
                cell(old.latency_ms.p50, s.latency_ms.p50, " ms", true)
            } else {
                "<td>–</td>".into()
            },
            if lat {
                cell(old.latency_ms.p99, s.latency_ms.p99, " ms", true)
            } else {
                "<td>–</td>".into()
            },
            cell(old.achieved_rate, s.achieved_rate, "", false),
            match (old.server_cpu_us_per_msg, s.server_cpu_us_per_msg) {
                (Some(a), Some(n)) => cell(a, n, " us", true),
                _ => "<td>–</td>".into(),
            },
        );
    }
    if rows == 0 {
        o.push_str("<tr><td colspan=\"5\">no scenario of this run is in the baseline</td></tr>");
    }
    o.push_str("</tbody></table>");
    o
}

/// The run's notes: what was left out or made smaller, memory, capacity.
fn notes(r: &Report) -> String {
    let mut lines: Vec<String> = Vec::new();
    lines.extend(r.skipped.iter().map(|s| format!("skipped: {s}")));
    lines.extend(r.scaled_down.iter().map(|s| format!("scaled down: {s}")));
    if let Some(n) = &r.rate_note {
        lines.push(format!("rate: {n}"));
    }
    if let Some(m) = &r.memory {
        lines.extend(
            super::table::memory_lines(m, r.program.is_some())
                .lines()
                .map(String::from),
        );
    }
    if let Some(c) = &r.capacity {
        lines.extend(c.line().lines().map(String::from));
    }
    if let Some(b) = &r.memory_budget {
        lines.extend(b.line().lines().map(String::from));
    }
    if lines.is_empty() {
        return String::new();
    }
    let items: String = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("<li>{}</li>", esc(l.trim())))
        .collect();
    format!("<ul class=\"notes\">{items}</ul>")
}

/// The report itself as a link: base64 in a data: URI, one self-contained file, nothing of it
/// in the visible page.
fn download(r: &Report) -> String {
    let json = serde_json::to_string_pretty(r).unwrap_or_default() + "\n";
    format!(
        "<a class=\"download\" download=\"wstune-selftest.json\" \
         href=\"data:application/json;base64,{}\">Download the report (JSON, {})</a>",
        base64::engine::general_purpose::STANDARD.encode(json.as_bytes()),
        super::bytes(json.len() as f64)
    )
}

/// The page; `stopped`: the error that ended the run before its last scenario, if one did.
pub fn html(r: &Report, stopped: Option<&str>) -> String {
    let scope = Scope::of(r, stopped);
    let link = download(r);
    let mut o = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>wstune self-test: {} · profile {}</title><style>{STYLE}</style></head><body>\
         <h1>wstune self-test · profile {}</h1>{}",
        esc(&scope.headline()),
        esc(&r.targets.profile),
        esc(&r.targets.profile),
        verdict_box(r, &scope, stopped, &link),
    );
    o.push_str(&checks(r));
    o.push_str(&figures(r));
    o.push_str(&notes(r));
    o.push_str("<h2 id=\"scenarios\">Scenarios</h2>");
    for s in &r.scenarios {
        o.push_str(&scenarios::section(r, s));
    }
    let _ = writeln!(
        o,
        "<footer>Load targets of profile {}: p99 ≤ {} ms, 95% of the offered rate, no errors, no \
         server closes, every broadcast round to every subscriber. Report schema {}. {link}</footer>\
         </body></html>",
        esc(&r.targets.profile),
        num(r.targets.p99_ms),
        r.schema_version
    );
    o
}
