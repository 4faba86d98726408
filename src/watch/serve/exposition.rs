//! What the HTTP side says: `/metrics` in the Prometheus text format and `/events` as JSON
//! lines, each rendered from one [`Snapshot`] outside the hub's lock.

use super::hub::Snapshot;
use crate::output::prometheus_label as esc;
use crate::watch::advice::Event;
use crate::watch::frame::Frame;
use crate::watch::sample::States;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Checks that turn on a listener, a CPU or the port range rather than on a counter or a mark:
/// their `wstune_watch_advice_active` series exist (0) before they ever fire.
const OTHER_CHECKS: &[&str] = &[
    "linux.net.core.somaxconn",
    "linux.cpu.softirq",
    "linux.net.ipv4.ip_local_port_range",
];

// --- /metrics ----------------------------------------------------------------------------------

/// One metric family: HELP and TYPE once, then its samples.
struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", l.join(","));
        }
        let _ = writeln!(self.text, " {}", number(value));
    }
}

/// A sample value as the exposition format spells it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// One listener address's figures: the sockets of an SO_REUSEPORT group share an address, and
/// one series per address keeps the exposition free of duplicate label sets.
#[derive(Default)]
struct ByAddress {
    queue: u64,
    backlog: u64,
    full: bool,
    states: Option<States>,
    /// The host has no accept queue for it (Windows): its queue series are left out, never 0.
    no_queue: bool,
}

/// The Prometheus text of a snapshot.
pub fn metrics(s: &Snapshot) -> String {
    let mut o = Out {
        text: String::new(),
    };
    watch_families(&mut o, s);
    if let Some(f) = s.frame.as_deref() {
        listener_families(&mut o, f);
        value_families(&mut o, f);
        cpu_and_port_families(&mut o, f);
    }
    advice_families(&mut o, s.frame.as_deref(), &s.events);
    o.text
}

/// The watch's own health: whether it makes frames, and how often.
fn watch_families(o: &mut Out, s: &Snapshot) {
    o.family(
        "wstune_watch_up",
        "gauge",
        "1 while the watch makes frames (the last one younger than three intervals), else 0.",
    );
    o.sample("wstune_watch_up", &[], flag(s.fresh));
    o.family(
        "wstune_watch_frames_total",
        "counter",
        "Frames made since the watch started.",
    );
    o.sample("wstune_watch_frames_total", &[], s.frames as f64);
    o.family(
        "wstune_watch_last_frame_age_seconds",
        "gauge",
        "Seconds since the last frame (since the start, before the first).",
    );
    o.sample("wstune_watch_last_frame_age_seconds", &[], s.age_s);
    o.family(
        "wstune_watch_interval_seconds",
        "gauge",
        "Seconds between readings (--interval).",
    );
    o.sample("wstune_watch_interval_seconds", &[], s.interval_s);
}

/// Per listening address: the accept queue, its size and fullness, the sockets behind it;
/// then the namespace's sockets and the cap on every backlog.
fn listener_families(o: &mut Out, f: &Frame) {
    let mut by: BTreeMap<&str, ByAddress> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for l in &f.listeners {
        let e = by.entry(l.local.as_str()).or_insert_with(|| {
            order.push(l.local.as_str());
            ByAddress::default()
        });
        e.queue += u64::from(l.queue);
        e.backlog += u64::from(l.backlog);
        e.full |= l.full;
        e.states = l.states;
        e.no_queue |= l.queue_unavailable.is_some();
    }
    type Pick = fn(&ByAddress) -> f64;
    let listener: [(&str, &str, Pick); 3] = [
        (
            "wstune_watch_listener_queue",
            "Connections completed and not yet accepted, per listening address (summed over an SO_REUSEPORT group).",
            |a| a.queue as f64,
        ),
        (
            "wstune_watch_listener_backlog",
            "The accept queue's size (the listen() backlog, capped at net.core.somaxconn), per listening address.",
            |a| a.backlog as f64,
        ),
        (
            "wstune_watch_listener_full",
            "1 while a listener's accept queue is full: the kernel drops or ignores new handshakes for it.",
            |a| flag(a.full),
        ),
    ];
    for (name, help, pick) in listener {
        o.family(name, "gauge", help);
        for addr in order.iter().filter(|a| !by[*a].no_queue) {
            o.sample(name, &[("listener", addr)], pick(&by[addr]));
        }
    }
    o.family(
        "wstune_watch_listener_sockets",
        "gauge",
        "Sockets behind a listener by state (established, syn_recv, time_wait, close_wait, orphans), from the paced connection walk.",
    );
    for addr in &order {
        if let Some(st) = by[addr].states {
            for (state, n) in states(&st) {
                o.sample(
                    "wstune_watch_listener_sockets",
                    &[("listener", addr), ("state", state)],
                    n as f64,
                );
            }
        }
    }
    o.family(
        "wstune_watch_sockets",
        "gauge",
        "TCP sockets by state in the watched network namespace.",
    );
    if let Some(t) = &f.totals {
        for (state, n) in states(t) {
            o.sample("wstune_watch_sockets", &[("state", state)], n as f64);
        }
    }
    o.family(
        "wstune_watch_connections_age_seconds",
        "gauge",
        "How old the per-listener socket counts are: the walk over every connection is paced on a busy host.",
    );
    if let Some(a) = f.connections_age_s {
        o.sample("wstune_watch_connections_age_seconds", &[], a);
    }
    o.family(
        "wstune_watch_somaxconn",
        "gauge",
        "net.core.somaxconn: the cap on every listener's backlog.",
    );
    if let Some(v) = f.somaxconn {
        o.sample("wstune_watch_somaxconn", &[], v as f64);
    }
}

/// The kernel's counters (cumulative) and the values that have a mark, with mark and limit.
fn value_families(o: &mut Out, f: &Frame) {
    o.family(
        "wstune_watch_kernel_stat_total",
        "counter",
        "A kernel counter's cumulative value (TcpExt.ListenOverflows, softnet.dropped, conntrack.drop...): rate() it.",
    );
    for c in &f.counters {
        o.sample(
            "wstune_watch_kernel_stat_total",
            &[("name", &c.name)],
            c.total as f64,
        );
    }

    o.family(
        "wstune_watch_value",
        "gauge",
        "A value that has a mark (orphans, time_wait, tcp_mem_pages, conntrack, file_handles, a process's fds).",
    );
    for g in &f.gauges {
        o.sample("wstune_watch_value", &[("name", &g.name)], g.value as f64);
    }
    o.family(
        "wstune_watch_value_mark",
        "gauge",
        "The value at which a gauge's row turns and its check's advice fires.",
    );
    for g in &f.gauges {
        o.sample(
            "wstune_watch_value_mark",
            &[("name", &g.name)],
            g.mark as f64,
        );
    }
    o.family(
        "wstune_watch_value_limit",
        "gauge",
        "The hard limit a gauge's mark guards (tcp_max_orphans, nf_conntrack_max, fs.file-max...).",
    );
    for g in &f.gauges {
        if let Some(l) = g.limit {
            o.sample("wstune_watch_value_limit", &[("name", &g.name)], l as f64);
        }
    }
}

/// Per CPU time in softirq and system, the ephemeral ports, and what could not be read.
fn cpu_and_port_families(o: &mut Out, f: &Frame) {
    o.family(
        "wstune_watch_cpu_softirq_ratio",
        "gauge",
        "Share of a CPU's time in softirq over the last interval (0 to 1).",
    );
    for c in &f.cpus {
        o.sample(
            "wstune_watch_cpu_softirq_ratio",
            &[("cpu", &c.cpu)],
            c.softirq_pct / 100.0,
        );
    }
    o.family(
        "wstune_watch_cpu_system_ratio",
        "gauge",
        "Share of a CPU's time in the kernel (system) over the last interval (0 to 1).",
    );
    for c in &f.cpus {
        o.sample(
            "wstune_watch_cpu_system_ratio",
            &[("cpu", &c.cpu)],
            c.system_pct / 100.0,
        );
    }

    o.family(
        "wstune_watch_ephemeral_ports_range_size",
        "gauge",
        "Local ports in net.ipv4.ip_local_port_range.",
    );
    o.family(
        "wstune_watch_ephemeral_ports_in_use",
        "gauge",
        "Local ports of the ephemeral range in use per destination (the most used, at most 8).",
    );
    if let Some(p) = &f.ports {
        o.sample(
            "wstune_watch_ephemeral_ports_range_size",
            &[],
            p.size as f64,
        );
        for d in &p.destinations {
            o.sample(
                "wstune_watch_ephemeral_ports_in_use",
                &[("destination", &d.destination)],
                d.in_use as f64,
            );
        }
    }

    o.family(
        "wstune_watch_unavailable",
        "gauge",
        "1 for each reading that failed in the last interval (shown as unavailable, never as zero).",
    );
    for what in f.unavailable.keys() {
        o.sample("wstune_watch_unavailable", &[("reading", what)], 1.0);
    }
}

/// The states of a listener or of all sockets; orphans only where they are known (a series
/// left out is unknown to Prometheus, where a 0 would be a claim).
fn states(s: &States) -> Vec<(&'static str, u64)> {
    let mut v = vec![
        ("established", s.established),
        ("syn_recv", s.syn_recv),
        ("time_wait", s.time_wait),
        ("close_wait", s.close_wait),
    ];
    if let Some(o) = s.orphans {
        v.push(("orphans", o));
    }
    v
}

/// Every check a frame can name, with 0 for those not firing: an alert on `== 1` and a
/// dashboard over `increase(..._intervals_total)` see stable series.
fn advice_families(o: &mut Out, f: Option<&Frame>, events: &[Event]) {
    let mut ids: Vec<String> = Vec::new();
    let mut add = |id: &str| {
        if !ids.iter().any(|i| i == id) {
            ids.push(id.to_string());
        }
    };
    if let Some(f) = f {
        f.counters
            .iter()
            .filter_map(|c| c.check.as_deref())
            .for_each(&mut add);
        f.gauges.iter().for_each(|g| add(&g.check));
        f.advice.iter().for_each(|a| add(&a.id));
    }
    OTHER_CHECKS.iter().for_each(|id| add(id));
    events.iter().for_each(|e| add(&e.id));
    o.family(
        "wstune_watch_advice_active",
        "gauge",
        "1 while a catalog check's advice fires (its row turned in the last frame), else 0; /events has its words.",
    );
    for id in &ids {
        let on = f.is_some_and(|f| f.advice.iter().any(|a| &a.id == id));
        o.sample("wstune_watch_advice_active", &[("id", id)], flag(on));
    }
    o.family(
        "wstune_watch_advice_intervals_total",
        "counter",
        "Intervals in which a catalog check's advice fired since the watch started.",
    );
    for id in &ids {
        let n = events.iter().find(|e| &e.id == id).map_or(0, |e| e.count);
        o.sample(
            "wstune_watch_advice_intervals_total",
            &[("id", id)],
            n as f64,
        );
    }
}

// --- /events -----------------------------------------------------------------------------------

/// One line of /events: the check's event over the watch, and whether it fires now.
#[derive(Serialize)]
struct EventLine<'a> {
    #[serde(flatten)]
    event: &'a Event,
    /// It turned in the latest frame.
    active: bool,
}

/// The advice as JSON lines, one per check id, in the order they first fired.
pub fn events(s: &Snapshot) -> String {
    let mut out = String::new();
    for e in &s.events {
        let active = s
            .frame
            .as_ref()
            .is_some_and(|f| f.advice.iter().any(|a| a.id == e.id));
        if let Ok(line) = serde_json::to_string(&EventLine { event: e, active }) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
