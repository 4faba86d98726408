//! `watch --plain` (and any watch without a terminal): one ticker line per interval, and a
//! check's full advice (why and fix) the first time it turns; later lines only name it.

use crate::watch::advice::{thousands, Log};
use crate::watch::frame::Frame;
use crate::watch::{Flow, View};
use std::collections::BTreeSet;
use std::io::Write;

pub struct Plain<W: Write> {
    out: W,
    log: Log,
    /// The rows whose absence on this platform was explained.
    explained: BTreeSet<String>,
}

impl<W: Write> Plain<W> {
    pub fn new(out: W) -> Plain<W> {
        Plain {
            out,
            log: Log::default(),
            explained: BTreeSet::new(),
        }
    }
}

/// How a reading the platform does not have begins (sample.rs words them so).
const NOT_HERE: &str = "not on Windows";

/// The ticker line of a frame.
pub fn line(f: &Frame) -> String {
    let mut parts: Vec<String> = Vec::new();
    let clock = f.time.get(11..19).unwrap_or(&f.time);
    for l in &f.listeners {
        let mut s = match l.queue_unavailable {
            None => format!("{} queue {}/{}", l.local, l.queue, l.backlog),
            Some(_) => format!("{} queue unavailable", l.local),
        };
        if l.full {
            s.push_str(" FULL");
        }
        if let Some(st) = &l.states {
            s.push_str(&format!(" est {}", thousands(st.established)));
            if st.syn_recv > 0 {
                s.push_str(&format!(" syn {}", thousands(st.syn_recv)));
            }
        }
        parts.push(s);
    }
    if let Some(t) = &f.totals {
        let mut s = format!(
            "all est {} syn {} tw {} cw {}",
            thousands(t.established),
            thousands(t.syn_recv),
            thousands(t.time_wait),
            thousands(t.close_wait),
        );
        // Where orphans are not counted (Windows), the figure is left out, never shown as 0.
        if let Some(o) = t.orphans {
            s.push_str(&format!(" orphan {}", thousands(o)));
        }
        parts.push(s);
    }
    for c in f.counters.iter().filter(|c| c.turned) {
        parts.push(format!(
            "{} +{} ({:.0}/s)",
            c.name,
            thousands(c.delta),
            c.per_s
        ));
    }
    for g in f.gauges.iter().filter(|g| g.turned) {
        parts.push(format!(
            "{} {} > {}",
            g.name,
            thousands(g.value),
            thousands(g.mark)
        ));
    }
    if let Some(c) = f
        .cpus
        .iter()
        .max_by(|a, b| a.softirq_pct.total_cmp(&b.softirq_pct))
    {
        parts.push(format!("softirq max {} {:.0}%", c.cpu, c.softirq_pct));
    }
    if let Some(s) = &f.server {
        match &s.error {
            Some(e) => parts.push(format!("server: {e}")),
            None => {
                let mut t = String::from("server");
                if let Some(c) = s.connections {
                    t.push_str(&format!(" conns {}", thousands(c as u64)));
                }
                if let Some(r) = s.messages_in_per_s {
                    t.push_str(&format!(" in {:.0}/s", r));
                }
                if let Some(r) = s.messages_out_per_s {
                    t.push_str(&format!(" out {:.0}/s", r));
                }
                parts.push(t);
            }
        }
    }
    for n in &f.notes {
        parts.push(format!("note: {n}"));
    }
    // What the platform does not have is said once in full (Plain::show) and then only
    // named: it never changes while the watch runs.
    let mut absent = Vec::new();
    for (what, why) in &f.unavailable {
        if why.starts_with(NOT_HERE) {
            absent.push(what.as_str());
        } else {
            parts.push(format!("{what} unavailable ({why})"));
        }
    }
    if !absent.is_empty() {
        parts.push(format!("{NOT_HERE}: {}", absent.join(", ")));
    }
    if !f.advice.is_empty() {
        let ids: Vec<&str> = f.advice.iter().map(|a| a.id.as_str()).collect();
        parts.push(format!("advice: {}", ids.join(", ")));
    }
    format!("{clock} {}", parts.join(" | "))
}

impl<W: Write> View for Plain<W> {
    fn show(&mut self, f: &Frame) -> std::io::Result<Flow> {
        writeln!(self.out, "{}", line(f))?;
        for (what, why) in &f.unavailable {
            if why.starts_with(NOT_HERE) && self.explained.insert(what.clone()) {
                writeln!(self.out, "  - {what} unavailable: {why}")?;
            }
        }
        for e in self.log.add(f) {
            // The log's new events come from this frame's advice.
            let Some(a) = f.advice.iter().find(|a| a.id == e.id) else {
                continue;
            };
            writeln!(self.out, "  ! {} ({}): {}", a.id, a.title, a.what)?;
            if let (Some(c), Some(t)) = (&a.current, &a.target) {
                writeln!(self.out, "    now {c}, profile's target {t}")?;
            }
            writeln!(self.out, "    why: {}", a.why)?;
            for fix in &a.fix {
                writeln!(self.out, "    fix: {fix}")?;
            }
        }
        self.out.flush()?;
        Ok(Flow::Go)
    }
}
