//! A run of frames in brief: what the self-test's reports carry for each scenario, and what
//! the watch report's tables are made of. Per listener the deepest queue and how long it was
//! full, the counters that moved and by how much, and each piece of advice with when it was
//! first and last seen, as seconds since the frames began (for a self-test: since the
//! scenario started). The sentences ([`Timeline::lines`]) are the ones every report prints.

use super::advice::{thousands, Log};
use super::frame::Frame;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    /// Frames read.
    pub frames: u64,
    /// Seconds the frames cover.
    pub seconds: f64,
    pub listeners: Vec<ListenerSpan>,
    /// Counters that moved, the watched ones (those with a check) first.
    pub counters: Vec<CounterMove>,
    pub advice: Vec<AdviceSpan>,
    /// What could not be read in the last frame, and why (never shown as zero).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
    /// The frames are of a host the server does not run on (a self-test's generator host):
    /// its own ports, TIME_WAIT and drops, not the server's accept queues.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub generator_only: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ListenerSpan {
    pub local: String,
    /// The backlog in the last frame that showed the listener.
    pub backlog: u32,
    /// The queue in that last frame.
    pub last_queue: u32,
    pub max_queue: u32,
    pub max_fill: f64,
    /// Seconds (whole intervals) in which the queue was seen full.
    pub full_s: f64,
    /// The reading that first saw it full, in seconds since the frames began.
    pub first_full_s: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CounterMove {
    pub name: String,
    /// Growth over the frames.
    pub delta: u64,
    pub max_per_s: f64,
    /// The readings that first and last saw it move, in seconds since the frames began.
    pub first_s: f64,
    pub last_s: f64,
    pub check: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AdviceSpan {
    pub id: String,
    pub title: String,
    pub first_s: f64,
    pub last_s: f64,
    /// Intervals in which it fired.
    pub count: u64,
    /// What moved the last time.
    pub what: String,
    pub fix: Vec<String>,
}

impl Timeline {
    /// The brief of `frames`, in order.
    pub fn of(frames: &[Frame]) -> Timeline {
        let mut listeners: Vec<ListenerSpan> = Vec::new();
        let mut counters: Vec<CounterMove> = Vec::new();
        let mut log = Log::default();
        for f in frames {
            for l in &f.listeners {
                let i = match listeners.iter().position(|s| s.local == l.local) {
                    Some(i) => i,
                    None => {
                        listeners.push(ListenerSpan {
                            local: l.local.clone(),
                            ..ListenerSpan::default()
                        });
                        listeners.len() - 1
                    }
                };
                let s = &mut listeners[i];
                s.backlog = l.backlog;
                s.last_queue = l.queue;
                s.max_queue = s.max_queue.max(l.queue);
                s.max_fill = s.max_fill.max(l.fill);
                if l.full {
                    s.full_s += f.interval_s;
                    s.first_full_s.get_or_insert(f.elapsed_s);
                }
            }
            for c in f.counters.iter().filter(|c| c.delta > 0) {
                match counters.iter_mut().find(|m| m.name == c.name) {
                    Some(m) => {
                        m.delta += c.delta;
                        m.max_per_s = m.max_per_s.max(c.per_s);
                        m.last_s = f.elapsed_s;
                    }
                    None => counters.push(CounterMove {
                        name: c.name.clone(),
                        delta: c.delta,
                        max_per_s: c.per_s,
                        first_s: f.elapsed_s,
                        last_s: f.elapsed_s,
                        check: c.check.clone(),
                    }),
                }
            }
            log.add(f);
        }
        // The counters with a check first, in the frame's own order within each group.
        counters.sort_by_key(|c| c.check.is_none());
        Timeline {
            generator_only: false,
            frames: frames.len() as u64,
            seconds: frames.iter().map(|f| f.interval_s).sum(),
            listeners,
            counters,
            advice: log
                .events
                .into_iter()
                .map(|e| AdviceSpan {
                    id: e.id,
                    title: e.title,
                    first_s: e.first_s,
                    last_s: e.last_s,
                    count: e.count,
                    what: e.what,
                    fix: e.fix,
                })
                .collect(),
            unavailable: frames
                .last()
                .map(|f| f.unavailable.clone())
                .unwrap_or_default(),
        }
    }

    /// One sentence per piece of advice, each with what moved and the fix:
    /// "accept queue of 127.0.0.1:9001 full for 3 s at t=12 s (at most 2 of 2);
    /// TcpExt.ListenOverflows +4,210: sysctl -w net.core.somaxconn=4096
    /// (linux.net.core.somaxconn)". Empty when nothing fired.
    pub fn lines(&self) -> Vec<String> {
        let counter = |c: &CounterMove| format!("{} +{}", c.name, thousands(c.delta));
        self.advice
            .iter()
            .map(|a| {
                let mut what: Vec<String> = Vec::new();
                if a.id == "linux.net.core.somaxconn" {
                    for l in self.listeners.iter().filter(|l| l.full_s > 0.0) {
                        what.push(format!(
                            "accept queue of {} full for {} s at t={} s (at most {} of {})",
                            l.local,
                            secs(l.full_s),
                            secs(l.first_full_s.unwrap_or(0.0)),
                            l.max_queue,
                            l.backlog
                        ));
                    }
                    what.extend(
                        self.counters
                            .iter()
                            .filter(|c| {
                                matches!(
                                    c.name.as_str(),
                                    "TcpExt.ListenOverflows" | "TcpExt.ListenDrops"
                                )
                            })
                            .map(counter),
                    );
                } else {
                    let moved: Vec<String> = self
                        .counters
                        .iter()
                        .filter(|c| c.check.as_deref() == Some(a.id.as_str()))
                        .map(|c| format!("{} {}", counter(c), when(c.first_s, c.last_s)))
                        .collect();
                    what.extend(moved);
                }
                if what.is_empty() {
                    what.push(format!(
                        "{} {} ({} interval{})",
                        a.what,
                        when(a.first_s, a.last_s),
                        a.count,
                        if a.count == 1 { "" } else { "s" }
                    ));
                }
                let fix = a.fix.first().cloned().unwrap_or_else(|| a.title.clone());
                format!("{}: {} ({})", what.join("; "), fix, a.id)
            })
            .collect()
    }
}

/// "at t=4 s", or "from t=1 s to t=26 s".
fn when(first: f64, last: f64) -> String {
    if secs(first) == secs(last) {
        format!("at t={} s", secs(first))
    } else {
        format!("from t={} s to t={} s", secs(first), secs(last))
    }
}

/// Seconds as a report says them: whole above ten, one decimal below.
fn secs(s: f64) -> String {
    if s >= 10.0 || s.fract().abs() < 0.05 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::advice::Advice;
    use crate::watch::frame::{CounterRow, ListenerRow, SCHEMA};

    fn frame(at: f64, queue: u32, overflows: u64) -> Frame {
        let full = queue >= 2;
        Frame {
            schema: SCHEMA.into(),
            time: format!("t{at}"),
            elapsed_s: at,
            interval_s: 1.0,
            listeners: vec![ListenerRow {
                local: "127.0.0.1:9001".into(),
                queue,
                backlog: 2,
                fill: f64::from(queue) / 2.0,
                full,
                states: None,
                queue_unavailable: None,
            }],
            somaxconn: Some(2),
            totals: None,
            connections_age_s: None,
            counters: vec![CounterRow {
                name: "TcpExt.ListenOverflows".into(),
                total: 0,
                delta: overflows,
                per_s: overflows as f64,
                check: Some("linux.counter.listen_overflows".into()),
                turned: overflows > 0,
            }],
            gauges: Vec::new(),
            cpus: Vec::new(),
            ports: None,
            process: None,
            server: None,
            advice: [
                full.then(|| {
                    advice(
                        "linux.net.core.somaxconn",
                        "sysctl -w net.core.somaxconn=4096",
                    )
                }),
                (overflows > 0)
                    .then(|| advice("linux.counter.listen_overflows", "raise somaxconn")),
            ]
            .into_iter()
            .flatten()
            .collect(),
            unavailable: Default::default(),
            notes: Vec::new(),
        }
    }

    fn advice(id: &str, fix: &str) -> Advice {
        Advice {
            id: id.into(),
            title: id.into(),
            what: "moved".into(),
            why: String::new(),
            fix: vec![fix.into()],
            current: None,
            target: None,
        }
    }

    #[test]
    fn a_full_queue_and_its_overflows_read_as_one_sentence_each() {
        let t = Timeline::of(&[
            frame(1.0, 0, 0),
            frame(2.0, 3, 4000),
            frame(3.0, 2, 210),
            frame(4.0, 0, 0),
        ]);
        let l = &t.listeners[0];
        assert_eq!(
            (l.max_queue, l.full_s, l.first_full_s, l.last_queue),
            (3, 2.0, Some(2.0), 0)
        );
        assert_eq!(t.counters[0].delta, 4210);
        assert_eq!(
            t.lines(),
            [
                "accept queue of 127.0.0.1:9001 full for 2 s at t=2 s (at most 3 of 2); \
                 TcpExt.ListenOverflows +4,210: sysctl -w net.core.somaxconn=4096 (linux.net.core.somaxconn)",
                "TcpExt.ListenOverflows +4,210 from t=2 s to t=3 s: raise somaxconn (linux.counter.listen_overflows)",
            ]
        );
        assert!(Timeline::of(&[frame(1.0, 0, 0)]).lines().is_empty());
    }
}
