//! What a turned row means and what to do: the words of the catalog check that explains it,
//! exactly as `wstune check` prints them for this host and profile (the check pipeline runs
//! once when the watch starts, so a fix names the profile's target: "sysctl -w
//! net.core.somaxconn=65535"). The catalog stays the one source of truth; a watch adds only
//! what moved.

pub use super::frame::Advice;
use super::frame::{Frame, PORTS_MARK, SOFTIRQ_MARK_PCT};
use crate::catalog::eval::Finding;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A check's words, by id.
#[derive(Debug, Clone, Default)]
pub struct Words {
    pub checks: BTreeMap<String, Finding>,
}

impl Words {
    /// From a check report's findings (`CheckReport::results`).
    pub fn from_findings(findings: &[Finding]) -> Words {
        Words {
            checks: findings
                .iter()
                .filter(|f| !f.is_boot_view())
                .map(|f| (f.id.clone(), f.clone()))
                .collect(),
        }
    }
}

pub use crate::output::thousands;

/// The advice of every row of `f` that turned, once per check id, in the order the rows
/// appear (listeners, counters, marks, CPUs, ports).
pub fn for_frame(f: &Frame, words: &Words) -> Vec<Advice> {
    let mut out: Vec<Advice> = Vec::new();
    let mut add = |id: &str, what: String| {
        if let Some(a) = out.iter_mut().find(|a| a.id == id) {
            a.what.push_str("; ");
            a.what.push_str(&what);
            return;
        }
        out.push(advice(id, what, words));
    };
    for l in f.listeners.iter().filter(|l| l.full) {
        // A backlog below somaxconn is the server's own choice: raising somaxconn alone
        // changes nothing for it.
        let own = match f.somaxconn {
            Some(cap) if u64::from(l.backlog) < cap => format!(
                "; its backlog {} is what the server asked of listen() (somaxconn is {}): raise the server's backlog",
                l.backlog,
                thousands(cap)
            ),
            _ => String::new(),
        };
        add(
            "linux.net.core.somaxconn",
            format!(
                "accept queue of {} full ({} of {}){own}",
                l.local, l.queue, l.backlog
            ),
        );
    }
    for c in f.counters.iter().filter(|c| c.turned) {
        if let Some(id) = &c.check {
            add(
                id,
                format!("{} +{} ({:.0}/s)", c.name, thousands(c.delta), c.per_s),
            );
        }
    }
    for g in f.gauges.iter().filter(|g| g.turned) {
        add(
            &g.check,
            format!(
                "{} {} over its mark {} ({})",
                g.name,
                thousands(g.value),
                thousands(g.mark),
                g.mark_is
            ),
        );
    }
    for c in f.cpus.iter().filter(|c| c.softirq_pct >= SOFTIRQ_MARK_PCT) {
        add(
            "linux.cpu.softirq",
            format!("{} {:.0} % in softirq", c.cpu, c.softirq_pct),
        );
    }
    if let Some(p) = &f.ports {
        for d in p
            .destinations
            .iter()
            .filter(|d| d.in_use as f64 >= p.size as f64 * PORTS_MARK)
        {
            add(
                &p.check,
                format!(
                    "{} local ports to {} of the {} in the range",
                    thousands(d.in_use),
                    d.destination,
                    thousands(p.size)
                ),
            );
        }
    }
    out
}

fn advice(id: &str, what: String, words: &Words) -> Advice {
    match words.checks.get(id) {
        Some(f) => Advice {
            id: id.to_string(),
            title: f.title.clone(),
            what,
            why: f.why.clone(),
            fix: [&f.fix.runtime, &f.fix.persistent]
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            current: f.current.as_ref().map(|v| v.to_string()),
            target: f.target.as_ref().map(|v| v.to_string()),
        },
        // A catalog of the operator's own may lack the check: the row still says what moved.
        None => Advice {
            id: id.to_string(),
            title: id.to_string(),
            what,
            why: "(this catalog has no such check)".into(),
            fix: Vec::new(),
            current: None,
            target: None,
        },
    }
}

/// Advice over time: each check id once, with when it was first and last seen and in how
/// many intervals (the headless event log and the recording's summary).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub id: String,
    pub title: String,
    pub first_seen: String,
    pub last_seen: String,
    /// Seconds since the watch started.
    pub first_s: f64,
    pub last_s: f64,
    /// Intervals in which it turned.
    pub count: u64,
    /// What moved the last time.
    pub what: String,
    pub fix: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Log {
    pub events: Vec<Event>,
}

impl Log {
    /// Fold a frame in; returns the events that are new (first seen now), the ones an event
    /// log writes a line for.
    pub fn add(&mut self, f: &Frame) -> Vec<Event> {
        let mut new = Vec::new();
        for a in &f.advice {
            match self.events.iter_mut().find(|e| e.id == a.id) {
                Some(e) => {
                    e.last_seen = f.time.clone();
                    e.last_s = f.elapsed_s;
                    e.count += 1;
                    e.what = a.what.clone();
                }
                None => {
                    let e = Event {
                        id: a.id.clone(),
                        title: a.title.clone(),
                        first_seen: f.time.clone(),
                        last_seen: f.time.clone(),
                        first_s: f.elapsed_s,
                        last_s: f.elapsed_s,
                        count: 1,
                        what: a.what.clone(),
                        fix: a.fix.clone(),
                    };
                    new.push(e.clone());
                    self.events.push(e);
                }
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(4210), "4,210");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
