//! The self-test's summary for people: a table where the terminal is wide enough for one
//! (notes under it), else one block per scenario; figures in human units (KiB, ms, digit
//! groups), the JSON keeps the raw numbers. No line is wider than the width it is given.

use super::super::ScenarioReport;
use super::{bytes, count, ms_words, num, rate_words, MemoryReport, Report};

/// The narrowest width the table reads well at: nine columns of figures without wrapping.
pub const TABLE_MIN_WIDTH: usize = 130;

/// How the summary is laid out: its width, a table or one block per scenario, and whether
/// the lines around them are wrapped to the width.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub width: usize,
    pub blocks: bool,
    /// On a terminal, every line fits it; in a file or a pipe a line stays whole, for grep.
    pub wrap: bool,
}

impl Layout {
    /// For a terminal `width` wide: the table where it fits and is wanted, else blocks.
    pub fn for_width(width: usize, table_wanted: bool) -> Layout {
        Layout {
            width: width.max(40),
            blocks: !table_wanted || width < TABLE_MIN_WIDTH,
            wrap: true,
        }
    }
}

/// What a scenario's figures add beside its columns, each a phrase.
fn notes(s: &ScenarioReport) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(o) = s.offered_rate {
        notes.push(format!("offered {}/s", rate_words(o)));
    }
    if let Some(l) = s.service_latency_ms.as_ref().filter(|l| l.count > 0) {
        notes.push(format!(
            "from the send: p50 {} / p99 {} / p99.9 {} / max {}",
            ms_words(l.p50),
            ms_words(l.p99),
            ms_words(l.p999),
            ms_words(l.max)
        ));
    }
    if s.workers > 0 {
        // Each generator process is one thread: what is left of its cores is the margin
        // by which the load could grow before the generator, not the server, is the limit.
        let busy = s.generator.cpu_pct / s.workers as f64;
        notes.push(format!(
            "generator headroom {:.0}%",
            (100.0 - busy).max(0.0)
        ));
    }
    if let Some(e) = s.echoes_per_server_cpu_sec {
        notes.push(format!("{} echoes per server CPU-s", rate_words(e)));
    }
    if let Some(us) = s.server_cpu_us_per_msg {
        notes.push(format!("{} us server CPU per message", num(us)));
    }
    if let Some(p) = s.server.as_ref().and_then(|s| s.rss_per_conn_bytes) {
        notes.push(format!("{} RSS per connection", bytes(p)));
    }
    if let (Some(st), Some(c)) = (s.storm_secs, s.connects_per_sec) {
        notes.push(format!(
            "{} connected+echoed in {} ({}/s)",
            count(s.conns_connected),
            ms_words(st * 1000.0),
            rate_words(c)
        ));
    }
    if let Some(h) = s.handshakes_per_sec {
        let per_core = s
            .handshakes_per_server_core_sec
            .map(|c| format!(", {} per server CPU-s", rate_words(c)))
            .unwrap_or_default();
        notes.push(format!("{} handshakes/s{per_core}", rate_words(h)));
    }
    if let Some(t) = &s.tls {
        notes.push(format!(
            "{} {} {}: {} full, {} resumed handshakes, p50 {} / p99 {}",
            t.version,
            t.cipher,
            t.signature_scheme
                .as_deref()
                .unwrap_or("(no signature seen)"),
            crate::output::thousands(t.full),
            crate::output::thousands(t.resumed),
            ms_words(t.handshake_ms.p50),
            ms_words(t.handshake_ms.p99)
        ));
    }
    if let Some(c) = s.connect_ms.as_ref().filter(|c| c.count > 0) {
        notes.push(format!(
            "connect: p50 {} / p99 {}",
            ms_words(c.p50),
            ms_words(c.p99)
        ));
    }
    if let Some(b) = &s.broadcast_last_ms {
        notes.push(format!(
            "last subscriber: p50 {}, p99 {} over {} rounds",
            ms_words(b.p50),
            ms_words(b.p99),
            crate::output::thousands(b.count)
        ));
    }
    notes.extend(super::restart_lines(s));
    if s.errors > 0 || s.disconnects > 0 {
        notes.push(format!(
            "{} errors, {} server closes",
            crate::output::thousands(s.errors),
            crate::output::thousands(s.disconnects)
        ));
    }
    if let Some(i) = &s.incomplete {
        notes.push(format!("INCOMPLETE: {i}"));
    }
    if let Some(b) = s.kernel_drops.as_ref().and_then(|k| k.bound.as_ref()) {
        notes.push(format!("kernel: {b}"));
    }
    notes
}

fn server_cell(s: &ScenarioReport) -> String {
    s.server
        .as_ref()
        .map(|p| match p.rss_after_bytes {
            Some(b) => format!("CPU {:.0}%, RSS {}", p.cpu_pct, bytes(b as f64)),
            None => format!("CPU {:.0}%", p.cpu_pct),
        })
        .unwrap_or_else(|| "-".into())
}

fn generator_cell(s: &ScenarioReport) -> String {
    let procs = format!(
        "{} process{}",
        s.workers,
        if s.workers == 1 { "" } else { "es" }
    );
    match s.generator.peak_rss_bytes {
        Some(b) => format!(
            "CPU {:.0}% ({procs}), RSS {}",
            s.generator.cpu_pct,
            bytes(b as f64)
        ),
        None => format!("CPU {:.0}% ({procs})", s.generator.cpu_pct),
    }
}

/// The scenario's word from its own checks: MISS (with what missed), NOT PROVEN, or ok.
fn word(r: &Report, s: &ScenarioReport) -> (String, Vec<String>) {
    let own: Vec<_> = r
        .verdict
        .checks
        .iter()
        .filter(|c| c.scenario == s.scenario)
        .collect();
    let missed: Vec<String> = own
        .iter()
        .filter(|c| c.judged && !c.ok)
        .map(|c| format!("{}: {}", c.what, c.detail))
        .collect();
    let w = if !missed.is_empty() || s.incomplete.is_some() {
        "MISS"
    } else if own.iter().any(|c| !c.judged) {
        "NOT PROVEN"
    } else {
        "ok"
    };
    (w.to_string(), missed)
}

/// One block per scenario: its name and word, then a figure per line.
fn blocks(r: &Report, width: usize, fit: bool) -> String {
    let mut out = String::new();
    for s in &r.scenarios {
        let (w, missed) = word(r, s);
        let l = &s.latency_ms;
        let mut rows: Vec<(&str, String)> = vec![
            (
                "connections",
                format!(
                    "{} of {}",
                    count(s.conns_connected),
                    count(s.conns_requested)
                ),
            ),
            ("messages", format!("{}/s", rate_words(s.achieved_rate))),
            (
                "latency",
                format!(
                    "p50 {}, p99 {}, p99.9 {}, max {}",
                    ms_words(l.p50),
                    ms_words(l.p99),
                    ms_words(l.p999),
                    ms_words(l.max)
                ),
            ),
            (
                "server",
                match server_cell(s).as_str() {
                    "-" => "not measured (give --pid)".to_string(),
                    c => c.to_string(),
                },
            ),
            ("generator", generator_cell(s)),
        ];
        rows.extend(notes(s).into_iter().map(|n| ("note", n)));
        rows.extend(missed.into_iter().map(|m| ("MISS", m)));
        out.push_str(&format!("{}: {w}\n", s.scenario.name()));
        for (k, v) in rows {
            out.push_str(&fit_line(&format!("  {k:<13}{v}"), width, 15, fit));
        }
    }
    out
}

/// The table of figures, `width` wide at most; each scenario's notes on lines below it.
fn figures_table(r: &Report, width: usize, fit: bool) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .force_no_tty()
        .set_width(width.min(u16::MAX as usize) as u16);
    t.set_header(vec![
        "scenario",
        "result",
        "conns",
        "msgs/s",
        "p50",
        "p99",
        "p99.9",
        "max",
        "server",
        "generator",
    ]);
    let mut below = String::new();
    for s in &r.scenarios {
        let l = &s.latency_ms;
        t.add_row(vec![
            s.scenario.name().to_string(),
            word(r, s).0,
            format!("{}/{}", count(s.conns_connected), count(s.conns_requested)),
            rate_words(s.achieved_rate),
            ms_words(l.p50),
            ms_words(l.p99),
            ms_words(l.p999),
            ms_words(l.max),
            server_cell(s),
            generator_cell(s),
        ]);
        let n = notes(s);
        if !n.is_empty() {
            below.push_str(&fit_line(
                &format!("{}: {}", s.scenario.name(), n.join("; ")),
                width,
                2,
                fit,
            ));
        }
    }
    format!("{t}\n{below}")
}

/// `line` broken at spaces into lines of at most `width` characters, the continuations
/// indented by `indent` (or two more than the line's own indent, if deeper); a word longer than a whole line
/// is cut (a long URL), a shorter one never is.
pub fn wrap(line: &str, width: usize, indent: usize) -> String {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let width = width.max(20);
    let lead = lead.min(width / 2);
    let pad = indent.max(lead + 2).min(width / 2);
    let mut out = String::new();
    let mut cur = " ".repeat(lead);
    let mut n = lead;
    let mut empty = true;
    for w in line.trim_start_matches(' ').split(' ') {
        let wl = w.chars().count();
        if !empty && n + 1 + wl > width {
            out.push_str(cur.trim_end());
            out.push('\n');
            cur = " ".repeat(pad);
            n = pad;
            empty = true;
            if w.is_empty() {
                continue;
            }
        }
        if !empty {
            cur.push(' ');
            n += 1;
        }
        let mut chars: Vec<char> = w.chars().collect();
        while n + chars.len() > width {
            let take = width - n;
            cur.extend(&chars[..take]);
            out.push_str(&cur);
            out.push('\n');
            chars.drain(..take);
            cur = " ".repeat(pad);
            n = pad;
        }
        n += chars.len();
        cur.extend(chars);
        empty = false;
    }
    out.push_str(cur.trim_end());
    out.push('\n');
    out
}

/// `line` wrapped to `width` when `fit`, else whole; ends in a newline either way.
fn fit_line(line: &str, width: usize, indent: usize, fit: bool) -> String {
    if fit {
        wrap(line, width, indent)
    } else {
        format!("{line}\n")
    }
}

pub fn table(r: &Report, layout: &Layout) -> String {
    let width = layout.width;
    let fit = layout.wrap;
    let body = if layout.blocks {
        blocks(r, width, fit)
    } else {
        figures_table(r, width, fit)
    };
    let head = match &r.program {
        Some(p) => format!(
            "wstune self-test of your server `{p}` at {} ({} cores)",
            r.url, r.cores
        ),
        None => format!("wstune self-test of {} ({} cores)", r.url, r.cores),
    };
    let mut out = String::new();
    for line in rest(r, layout.blocks).lines() {
        out.push_str(&fit_line(line, width, 2, fit));
    }
    format!("{}{body}{out}", fit_line(&head, width, 2, fit))
}

/// The lines after the figures: the host's timeline, memory, capacity, steps, the checks
/// and the verdict. In blocks, a scenario's misses are in its block already.
fn rest(r: &Report, blocks: bool) -> String {
    let mut out = String::new();
    for s in &r.skipped {
        out.push_str(&format!("skipped: {s}\n"));
    }
    for s in &r.scenarios {
        if let Some(t) = &s.host_timeline {
            let whose = if t.generator_only {
                "generator host"
            } else {
                "host"
            };
            for line in t.lines() {
                out.push_str(&format!("{whose} during {}: {line}\n", s.scenario.name()));
            }
        }
    }
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
    if let Some(n) = &r.rate_note {
        out.push_str(&format!("rate: {n}\n"));
    }
    if let Some(m) = &r.memory {
        out.push_str(&memory_lines(m, r.program.is_some()));
    }
    if let Some(c) = &r.capacity {
        out.push_str(&c.line());
    }
    if let Some(b) = &r.memory_budget {
        out.push_str(&b.line());
    }
    for s in &r.scenarios {
        out.push_str(&disturbance_lines(s));
        // A script's waiting steps, each on its own line.
        for st in &s.steps {
            out.push_str(&format!(
                "step {}: {} met, {} timed out, {} other; p50 {} / p99 {} / max {} ms\n",
                st.name,
                st.matched,
                st.timeouts,
                st.other,
                num(st.latency_ms.p50),
                num(st.latency_ms.p99),
                num(st.latency_ms.max)
            ));
        }
    }
    for c in &r.verdict.checks {
        // A threshold without its figure says why in its detail; any other check left
        // unjudged was left so by the noise.
        let why = if c.judged || c.detail.starts_with("not judged") {
            ""
        } else {
            " (not judged: the host was too noisy)"
        };
        if c.threshold {
            // The user's own criteria are all listed, held or not: they are the gate.
            let mark = match (c.judged, c.ok) {
                (true, true) => "ok  ",
                (true, false) => "MISS",
                (false, _) => "----",
            };
            out.push_str(&format!(
                "{mark} threshold {}: {} on {}{why}\n",
                c.what,
                c.detail,
                c.scenario.name()
            ));
        } else if !(c.ok || blocks && c.judged) {
            out.push_str(&format!(
                "MISS {} {}: {}{why}\n",
                c.scenario.name(),
                c.what,
                c.detail
            ));
        }
    }
    out.push_str(&format!(
        "load targets of profile {}: p99 <= {} ms, 95% of the offered rate, no errors, no server closes\n",
        r.targets.profile, r.targets.p99_ms
    ));
    out.push_str(&super::baseline::lines(r));
    out.push_str(&format!("verdict: {}\n", r.verdict.summary));
    out
}

/// Per scenario: the disturbance of its window, how spread out its sends were, and what an
/// earlier, noisier measurement said.
pub(super) fn disturbance_lines(s: &ScenarioReport) -> String {
    let mut out = String::new();
    if let Some(d) = &s.disturbance {
        out.push_str(&format!(
            "disturbance {}: {}{}\n",
            s.scenario.name(),
            d.line(),
            match &d.why {
                Some(w) if s.scenario.timed() => format!(" -- TOO NOISY to judge ({w})"),
                Some(w) => format!(" -- noisy ({w}; not a timing verdict, judged anyway)"),
                None => String::new(),
            }
        ));
    }
    for (i, a) in s.attempts.iter().enumerate() {
        out.push_str(&format!(
            "  measured {} time{} before: p99 {} ms, server CPU {}, {}{}\n",
            i + 1,
            if i == 0 { "" } else { "s" },
            num(a.p99_ms),
            a.server_cpu_pct
                .map(|c| format!("{c:.0}%"))
                .unwrap_or_else(|| "-".into()),
            a.disturbance
                .as_ref()
                .map(|d| d.line())
                .unwrap_or_else(|| "disturbance not measured".into()),
            if a.missed.is_empty() {
                "; passed".to_string()
            } else {
                format!("; missed {}", a.missed.join(", "))
            }
        ));
    }
    if let Some(a) = &s.arrivals {
        out.push_str(&format!(
            "arrivals {}: each connection on its own schedule, phases even; per generator \
             process: gap {:.0} us, CV {:.2}, sends per 1 ms p50 {} / p99 {} / max {}\n",
            s.scenario.name(),
            a.gap_mean_us,
            a.gap_cv,
            a.sends_per_ms_p50,
            a.sends_per_ms_p99,
            a.sends_per_ms_max
        ));
    }
    out
}

/// `users`: the server is the user's program (`--command`), whose memory is its own
/// application's, not what the profile's estimate models: a gap is reported, not blamed on
/// the estimate.
pub(super) fn memory_lines(m: &MemoryReport, users: bool) -> String {
    let mut out = String::new();
    let mut parts = Vec::new();
    if let (Some(p), Some(total)) = (m.server_rss_per_conn_bytes, m.server_rss_bytes) {
        parts.push(format!(
            "server RSS {} per connection ({} in all)",
            bytes(p),
            bytes(total as f64)
        ));
    }
    if let Some(k) = &m.kernel {
        parts.push(format!(
            "kernel: TCP sockets {} -> {}, TCP buffers {} -> {} (sockstat mem), slab {} -> {}{}",
            k.before.tcp_inuse,
            k.during.tcp_inuse,
            bytes((k.before.tcp_mem_pages * k.page_size) as f64),
            bytes(k.tcp_mem_bytes_during as f64),
            bytes(k.before.slab_bytes as f64),
            bytes(k.during.slab_bytes as f64),
            k.slab_bytes_per_socket
                .map(|b| format!(" ({} per socket)", bytes(b)))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "memory at {} idle connections: {}\n",
        count(m.conns),
        parts.join("; ")
    ));
    for c in &m.compared {
        out.push_str(&format!(
            "memory estimate: {} {} vs {} measured ({:+.0}%{})\n",
            c.what,
            bytes(c.estimate_bytes as f64),
            bytes(c.measured_bytes),
            c.error * 100.0,
            if c.within_tolerance {
                ", within 25%"
            } else if users {
                ", more than 25% apart: the estimate models the built-in server, not your \
                 application's own memory"
            } else {
                ", OFF by more than 25%: the estimate needs changing"
            }
        ));
    }
    out
}
