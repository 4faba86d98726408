//! One section per scenario: its purpose and chart (the scenario's own, see
//! `scenario::Workload`), and its figures.

use super::esc;
use crate::selftest::report::{bytes, count, num, Report};
use crate::selftest::ScenarioReport;
use std::fmt::Write;

/// The scenario's one chart, from the data its report holds; None when it holds none.
pub fn chart(r: &Report, s: &ScenarioReport) -> Option<String> {
    s.scenario.workload().chart(r, s)
}

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
        s.scenario.workload().purpose(),
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
