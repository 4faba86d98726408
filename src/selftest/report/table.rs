//! The self-test's table for people.

use super::super::ScenarioReport;
use super::{bytes, count, num, MemoryReport, Report};

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
        "server CPU, RSS",
        "generator CPU, RSS",
        "notes",
    ]);
    for s in &r.scenarios {
        let mut notes = Vec::new();
        if let Some(o) = s.offered_rate {
            notes.push(format!("offered {}/s", num(o)));
        }
        if let Some(l) = s.service_latency_ms.as_ref().filter(|l| l.count > 0) {
            notes.push(format!(
                "from the send: p50 {} / p99 {} / p99.9 {} / max {} ms",
                num(l.p50),
                num(l.p99),
                num(l.p999),
                num(l.max)
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
            notes.push(format!("{} echoes per server CPU-s", num(e)));
        }
        if let Some(us) = s.server_cpu_us_per_msg {
            notes.push(format!("{} us server CPU per message", num(us)));
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
        if let Some(h) = s.handshakes_per_sec {
            let per_core = s
                .handshakes_per_server_core_sec
                .map(|c| format!(", {} per server CPU-s", num(c)))
                .unwrap_or_default();
            notes.push(format!("{} handshakes/s{per_core}", num(h)));
        }
        if let Some(t) = &s.tls {
            notes.push(format!(
                "{} {} {}: {} full, {} resumed handshakes, p50 {} / p99 {} ms",
                t.version,
                t.cipher,
                t.signature_scheme
                    .as_deref()
                    .unwrap_or("(no signature seen)"),
                t.full,
                t.resumed,
                num(t.handshake_ms.p50),
                num(t.handshake_ms.p99)
            ));
        }
        if let Some(c) = s.connect_ms.as_ref().filter(|c| c.count > 0) {
            notes.push(format!(
                "connect: p50 {} / p99 {} ms",
                num(c.p50),
                num(c.p99)
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
        notes.extend(super::restart_lines(s));
        if s.errors > 0 || s.disconnects > 0 {
            notes.push(format!(
                "{} errors, {} server closes",
                s.errors, s.disconnects
            ));
        }
        if let Some(i) = &s.incomplete {
            notes.push(format!("INCOMPLETE: {i}"));
        }
        if let Some(b) = s.kernel_drops.as_ref().and_then(|k| k.bound.as_ref()) {
            notes.push(format!("kernel: {b}"));
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
                .map(|p| match p.rss_after_bytes {
                    Some(b) => format!("{:.0}%, {}", p.cpu_pct, bytes(b as f64)),
                    None => format!("{:.0}%", p.cpu_pct),
                })
                .unwrap_or_else(|| "-".into()),
            match s.generator.peak_rss_bytes {
                Some(b) => format!(
                    "{:.0}% ({}p), {}",
                    s.generator.cpu_pct,
                    s.workers,
                    bytes(b as f64)
                ),
                None => format!("{:.0}% ({}p)", s.generator.cpu_pct, s.workers),
            },
            notes.join("; "),
        ]);
    }
    let mut out = match &r.program {
        Some(p) => format!(
            "wstune self-test of your server `{p}` at {} ({} cores)\n{t}\n",
            r.url, r.cores
        ),
        None => format!("wstune self-test of {} ({} cores)\n{t}\n", r.url, r.cores),
    };
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
        } else if !c.ok {
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
