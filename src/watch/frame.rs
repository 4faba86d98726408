//! A frame: what one interval showed, from two samples. It is the one shape every view
//! renders (the full-screen view, the ticker line, JSON, the recording, the headless
//! endpoint, the self-test's timeline), and its JSON form is documented in
//! docs/watch-frame.schema.json.
//!
//! A row "turns" when a counter that predicts failure moved during the interval or a value
//! crossed its mark; each turned row names the catalog check that explains it, and the frame
//! carries that check's words as `check` prints them (advice.rs fills them in: a frame is
//! what was read, advice what it means).

use super::sample::{Sample, States};
use super::server::ServerFigures;
use crate::host::Platform;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The JSON form's version: a reader refuses another major.
pub const SCHEMA: &str = "wstune.watch/1";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Frame {
    pub schema: String,
    /// Wall-clock time of the reading (RFC 3339, UTC).
    pub time: String,
    /// Seconds since the watch started.
    pub elapsed_s: f64,
    /// Seconds between this reading and the one before.
    pub interval_s: f64,
    pub listeners: Vec<ListenerRow>,
    /// net.core.somaxconn now: the cap on every listener's backlog.
    pub somaxconn: Option<u64>,
    /// Sockets by state in this network namespace; None while no walk succeeded.
    pub totals: Option<States>,
    /// How old the per-listener and per-destination figures are, in seconds: the walk over
    /// every connection is paced on a busy host (see sample.rs).
    pub connections_age_s: Option<f64>,
    pub counters: Vec<CounterRow>,
    pub gauges: Vec<GaugeRow>,
    pub cpus: Vec<CpuRow>,
    /// Local ports of the ephemeral range in use per destination, most used first.
    pub ports: Option<Ports>,
    pub process: Option<ProcessRow>,
    pub server: Option<ServerFigures>,
    /// The advice of every row that turned, once per check id.
    pub advice: Vec<Advice>,
    /// What could not be read, and why: shown as unavailable, never as zero.
    pub unavailable: BTreeMap<String, String>,
    /// Notes on the scope: a port nobody listens on, a process that is gone.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(into = "ListenerWire", from = "ListenerWire")]
pub struct ListenerRow {
    pub local: String,
    pub queue: u32,
    pub backlog: u32,
    /// The queue's fill, 0..=1 (a backlog of 0 counts as full at one waiting connection).
    pub fill: f64,
    /// The queue is full: the kernel drops or ignores new handshakes for it.
    pub full: bool,
    pub states: Option<States>,
    /// Why this host gives no accept queue for its listeners (Windows' TCP table has none).
    /// Then `queue`, `backlog` and `fill` mean nothing: the JSON form has them null, and a
    /// view shows them as unavailable, never as 0.
    pub queue_unavailable: Option<String>,
}

/// A listener row as JSON holds it: the queue's figures null where the host has none.
#[derive(Serialize, Deserialize)]
struct ListenerWire {
    local: String,
    queue: Option<u32>,
    backlog: Option<u32>,
    fill: Option<f64>,
    full: bool,
    states: Option<States>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue_unavailable: Option<String>,
}

impl From<ListenerRow> for ListenerWire {
    fn from(l: ListenerRow) -> ListenerWire {
        let known = l.queue_unavailable.is_none();
        ListenerWire {
            local: l.local,
            queue: known.then_some(l.queue),
            backlog: known.then_some(l.backlog),
            fill: known.then_some(l.fill),
            full: l.full,
            states: l.states,
            queue_unavailable: l.queue_unavailable,
        }
    }
}

impl From<ListenerWire> for ListenerRow {
    fn from(w: ListenerWire) -> ListenerRow {
        let missing = w.queue.is_none() || w.backlog.is_none();
        ListenerRow {
            local: w.local,
            queue: w.queue.unwrap_or(0),
            backlog: w.backlog.unwrap_or(0),
            fill: w.fill.unwrap_or(0.0),
            full: w.full,
            states: w.states,
            queue_unavailable: w
                .queue_unavailable
                .or_else(|| missing.then(|| "not in this frame".to_string())),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CounterRow {
    /// The kernel's name (`TcpExt.ListenOverflows`) or `softnet.dropped`, `conntrack.drop`...
    pub name: String,
    pub total: u64,
    pub delta: u64,
    pub per_s: f64,
    /// The check that explains this counter; None for context rows (opens, retransmits).
    pub check: Option<String>,
    pub turned: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GaugeRow {
    pub name: String,
    pub value: u64,
    /// The value at which this row turns, and what it is (`tcp_max_orphans / 4`).
    pub mark: u64,
    pub mark_is: String,
    /// The hard limit the mark guards, where it is another number.
    pub limit: Option<u64>,
    pub check: String,
    pub turned: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CpuRow {
    pub cpu: String,
    pub softirq_pct: f64,
    pub system_pct: f64,
    pub softnet_dropped: u64,
    pub time_squeeze: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Ports {
    pub range: (u16, u16),
    pub size: u64,
    pub destinations: Vec<PortUse>,
    /// The check that explains a destination near the range's size: Linux's
    /// ip_local_port_range, Windows' dynamic port range.
    #[serde(default = "linux_ports_check")]
    pub check: String,
}

fn linux_ports_check() -> String {
    PORTS_CHECK_LINUX.to_string()
}

/// The checks behind the ephemeral ports row, per platform.
pub const PORTS_CHECK_LINUX: &str = "linux.net.ipv4.ip_local_port_range";
pub const PORTS_CHECK_WINDOWS: &str = "windows.tcpip.dynamic_port_range";
/// The check behind Windows' TIME_WAIT sockets holding dynamic ports: how long they hold them.
pub const TIME_WAIT_CHECK_WINDOWS: &str = "windows.tcpip.tcp_timed_wait_delay";
/// The check behind a Windows process's handle count, and the limit it guards: one process
/// holds at most 2^24 handles.
pub const HANDLES_CHECK: &str = "windows.process.handles";
pub const HANDLES_LIMIT: u64 = 16_777_216;

/// Why a Windows listener has no accept queue in a frame.
pub const NO_ACCEPT_QUEUE: &str =
    "not on Windows: its TCP table (GetExtendedTcpTable) has no accept-queue depth or backlog";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortUse {
    pub destination: String,
    pub in_use: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessRow {
    pub pid: u32,
    pub fds: Option<u64>,
    pub soft_limit: Option<u64>,
    pub hard_limit: Option<u64>,
    /// Its open handles (Windows; a Linux process has descriptors instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handles: Option<u64>,
}

/// One piece of advice: the row that turned and the check that explains it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Advice {
    /// The catalog check's id (stable: dashboards and agents key on it).
    pub id: String,
    pub title: String,
    /// What moved or crossed its mark this interval ("TcpExt.ListenOverflows +4,210 (4,210/s)").
    pub what: String,
    pub why: String,
    /// The check's fix, runtime then persistent, with the profile's target filled in.
    pub fix: Vec<String>,
    /// The setting's value now and the profile's target, where the check has them.
    pub current: Option<String>,
    pub target: Option<String>,
}

/// Counters whose growth predicts failure, and the check that explains each.
pub const WATCHED: &[(&str, &str)] = &[
    ("TcpExt.ListenOverflows", "linux.counter.listen_overflows"),
    ("TcpExt.ListenDrops", "linux.counter.listen_drops"),
    ("TcpExt.TCPBacklogDrop", "linux.counter.tcp_backlog_drop"),
    (
        "TcpExt.TCPAbortOnMemory",
        "linux.counter.tcp_abort_on_memory",
    ),
    (
        "TcpExt.TCPMemoryPressures",
        "linux.counter.tcp_memory_pressures",
    ),
    (
        "TcpExt.TCPTimeWaitOverflow",
        "linux.counter.tcp_timewait_overflow",
    ),
    ("TcpExt.SyncookiesSent", "linux.counter.syncookies_sent"),
    ("TcpExt.SyncookiesFailed", "linux.counter.syncookies_failed"),
    ("TcpExt.TCPReqQFullDrop", "linux.counter.tcp_reqq_full_drop"),
    ("softnet.dropped", "linux.softnet.dropped"),
    ("softnet.time_squeeze", "linux.softnet.time_squeeze"),
    ("conntrack.drop", "linux.netfilter.conntrack_drops"),
    ("conntrack.early_drop", "linux.netfilter.conntrack_drops"),
];

/// The share of a CPU in softirq at which its row turns: half of a core spent receiving and
/// sending is one queue or one interrupt taking the traffic (linux.cpu.softirq).
pub const SOFTIRQ_MARK_PCT: f64 = 50.0;
/// A destination's share of the ephemeral range in use at which its row turns.
pub const PORTS_MARK: f64 = 0.8;
/// Descriptors (a process's, or the host's file handles) at which their row turns.
pub const FDS_MARK: f64 = 0.9;

impl Frame {
    /// The frame between two samples (`prev` None: the first reading, rates zero).
    pub fn between(
        prev: Option<&Sample>,
        cur: &Sample,
        started: std::time::Instant,
        server: Option<ServerFigures>,
    ) -> Frame {
        let interval = prev
            .map(|p| cur.at.duration_since(p.at).as_secs_f64())
            .unwrap_or(0.0);
        let mut notes = Vec::new();
        let mut unavailable = cur.unavailable.clone();
        let conns = cur.connections.as_ref();

        let listeners = listener_rows(cur);
        let counters = counter_rows(prev, cur, interval, &unavailable);
        let mut gauges = host_gauges(&cur.gauges);
        let process = cur.process.as_ref().map(|p| ProcessRow {
            pid: p.pid,
            fds: p.fds,
            soft_limit: p.soft_limit,
            hard_limit: p.hard_limit,
            handles: p.handles,
        });
        if let Some(p) = &process {
            gauges.extend(process_gauges(p));
            notes.extend(process_note(p, &mut unavailable));
        }
        let cpus = cpu_rows(prev, cur);
        let ports = ports(cur);
        if let (Platform::Windows, Some(p), Some(c)) = (cur.platform, &ports, conns) {
            gauges.extend(windows_port_gauges(p, c));
        }

        notes.extend(cur.notes.iter().cloned());
        if listeners.is_empty() && cur.notes.is_empty() && !unavailable.contains_key("listeners") {
            notes.push(match &cur.process {
                Some(p) if p.fds.is_some() => {
                    format!("process {} holds no listening TCP socket", p.pid)
                }
                _ => "no listening TCP socket in this network namespace".to_string(),
            });
        }

        Frame {
            schema: SCHEMA.to_string(),
            time: humantime::format_rfc3339_millis(cur.wall).to_string(),
            elapsed_s: cur.at.saturating_duration_since(started).as_secs_f64(),
            interval_s: interval,
            listeners,
            somaxconn: cur.gauges.somaxconn,
            totals: conns.map(|c| c.total),
            connections_age_s: conns.map(|c| cur.at.saturating_duration_since(c.at).as_secs_f64()),
            counters,
            gauges,
            cpus,
            ports,
            process,
            server,
            advice: Vec::new(),
            unavailable,
            notes,
        }
    }

    /// Whether anything turned this interval.
    pub fn turned(&self) -> bool {
        !self.advice.is_empty()
    }
}

/// Each listener's accept queue against its backlog, with its connections by state.
fn listener_rows(cur: &Sample) -> Vec<ListenerRow> {
    let conns = cur.connections.as_ref();
    cur.listeners
        .iter()
        .map(|l| {
            let fill = if l.backlog == 0 {
                if l.queue > 0 {
                    1.0
                } else {
                    0.0
                }
            } else {
                l.queue as f64 / l.backlog as f64
            };
            ListenerRow {
                local: l.local.to_string(),
                queue: l.queue,
                backlog: l.backlog,
                fill,
                // The kernel's test (sk_acceptq_is_full): more waiting than the backlog.
                full: l.detailed && l.queue >= l.backlog.max(1),
                states: conns.and_then(|c| c.per_listener.get(&l.local).copied()),
                queue_unavailable: (!l.detailed).then(|| NO_ACCEPT_QUEUE.to_string()),
            }
        })
        .collect()
}

/// Every counter's total and growth this interval, the watched ones first (in WATCHED's
/// order) and turned when they grew; softnet's per-CPU counters enter summed.
fn counter_rows(
    prev: Option<&Sample>,
    cur: &Sample,
    interval: f64,
    unavailable: &BTreeMap<String, String>,
) -> Vec<CounterRow> {
    let delta = |name: &str| -> Option<(u64, u64)> {
        let now = *cur.counters.get(name)?;
        let before = prev
            .and_then(|p| p.counters.get(name).copied())
            .unwrap_or(now);
        Some((now, now.saturating_sub(before)))
    };
    let rate = |d: u64| {
        if interval > 0.0 {
            d as f64 / interval
        } else {
            0.0
        }
    };
    let mut counters = Vec::new();
    let mut names: Vec<String> = cur.counters.keys().cloned().collect();
    let sum = |cpus: &[super::sample::Cpu], f: fn(&super::sample::Cpu) -> u64| -> u64 {
        cpus.iter().map(f).sum()
    };
    let mut softnet = BTreeMap::new();
    if !cur.cpus.is_empty() && !unavailable.contains_key("softnet") {
        softnet.insert(
            "softnet.dropped",
            (
                sum(&cur.cpus, |c| c.softnet_dropped),
                prev.map(|p| sum(&p.cpus, |c| c.softnet_dropped)),
            ),
        );
        softnet.insert(
            "softnet.time_squeeze",
            (
                sum(&cur.cpus, |c| c.time_squeeze),
                prev.map(|p| sum(&p.cpus, |c| c.time_squeeze)),
            ),
        );
        names.extend(softnet.keys().map(|k| k.to_string()));
    }
    names.sort_by_key(|n| {
        WATCHED
            .iter()
            .position(|(w, _)| w == n)
            .unwrap_or(WATCHED.len())
    });
    for name in names {
        let (total, d) = match softnet.get(name.as_str()) {
            Some((now, before)) => (*now, now.saturating_sub(before.unwrap_or(*now))),
            None => match delta(&name) {
                Some(x) => x,
                None => continue,
            },
        };
        let check = WATCHED
            .iter()
            .find(|(w, _)| *w == name)
            .map(|(_, id)| id.to_string());
        counters.push(CounterRow {
            turned: check.is_some() && d > 0,
            name,
            total,
            delta: d,
            per_s: rate(d),
            check,
        });
    }
    counters
}

/// The host-wide gauges against their marks.
fn host_gauges(g: &super::sample::Gauges) -> Vec<GaugeRow> {
    let mut gauges = Vec::new();
    let mut gauge = |name: &str,
                     value: Option<u64>,
                     mark: Option<u64>,
                     mark_is: &str,
                     limit: Option<u64>,
                     check: &str| {
        if let (Some(value), Some(mark)) = (value, mark) {
            gauges.push(GaugeRow {
                name: name.to_string(),
                value,
                mark,
                mark_is: mark_is.to_string(),
                limit,
                check: check.to_string(),
                turned: value > mark,
            });
        }
    };
    // The marks are the catalog's own targets (checks/linux.yaml), kept equal by a test.
    gauge(
        "orphans",
        g.orphans,
        g.max_orphans.map(|m| m / 4),
        "tcp_max_orphans / 4",
        g.max_orphans,
        "linux.sockstat.orphans",
    );
    gauge(
        "time_wait",
        g.time_wait,
        g.max_tw_buckets.map(|m| m * 9 / 10),
        "tcp_max_tw_buckets * 9 / 10",
        g.max_tw_buckets,
        "linux.sockstat.time_wait",
    );
    gauge(
        "tcp_mem_pages",
        g.tcp_mem_pages,
        g.tcp_mem.map(|m| m[1]),
        "tcp_mem pressure",
        g.tcp_mem.map(|m| m[2]),
        "linux.sockstat.tcp_mem_pages",
    );
    gauge(
        "conntrack",
        g.conntrack,
        g.conntrack_max.map(|m| (m as f64 * FDS_MARK) as u64),
        "nf_conntrack_max * 0.9",
        g.conntrack_max,
        "linux.net.netfilter.nf_conntrack_max",
    );
    gauge(
        "file_handles",
        g.files,
        g.file_max.map(|m| (m as f64 * FDS_MARK) as u64),
        "fs.file-max * 0.9",
        g.file_max,
        "linux.fs.file-max",
    );
    gauges
}

/// The watched process's handles (Windows) and descriptors against their limits.
fn process_gauges(p: &ProcessRow) -> Vec<GaugeRow> {
    let mut gauges = Vec::new();
    if let Some(n) = p.handles {
        let mark = (HANDLES_LIMIT as f64 * FDS_MARK) as u64;
        gauges.push(GaugeRow {
            name: format!("pid {} handles", p.pid),
            value: n,
            mark,
            mark_is: "16,777,216 handles per process * 0.9".into(),
            limit: Some(HANDLES_LIMIT),
            check: HANDLES_CHECK.into(),
            turned: n > mark,
        });
    }
    if let (Some(fds), Some(soft)) = (p.fds, p.soft_limit) {
        let mark = (soft as f64 * FDS_MARK) as u64;
        gauges.push(GaugeRow {
            name: format!("pid {} fds", p.pid),
            value: fds,
            mark,
            mark_is: "RLIMIT_NOFILE soft * 0.9".into(),
            limit: Some(soft),
            check: "linux.pid.nofile.soft".into(),
            turned: fds > mark,
        });
    }
    gauges
}

/// What could not be read of the watched process, said once. A process that cannot be read
/// at all says so alone: its descriptors are then unreadable for the same reason, and "run
/// as root" would mislead. Both readings leave `unavailable` for this note.
fn process_note(p: &ProcessRow, unavailable: &mut BTreeMap<String, String>) -> Option<String> {
    let descriptors = unavailable.remove("process descriptors");
    if let Some(why) = unavailable.remove("process") {
        Some(format!("process {}: {}", p.pid, process_gone(&why)))
    } else {
        descriptors.map(|why| {
            format!(
                "process {}: its descriptors cannot be read ({why}); every listener is shown. \
                 Run as root (or with CAP_SYS_PTRACE) to tie listeners to it",
                p.pid
            )
        })
    }
}

/// Each CPU's share of time in softirq and system this interval, and its softnet growth.
fn cpu_rows(prev: Option<&Sample>, cur: &Sample) -> Vec<CpuRow> {
    cur.cpus
        .iter()
        .map(|c| {
            let before = prev.and_then(|p| p.cpus.iter().find(|b| b.name == c.name));
            let dt = before.map(|b| c.total.saturating_sub(b.total)).unwrap_or(0);
            let pct = |now: u64, was: Option<u64>| match (was, dt) {
                (Some(w), dt) if dt > 0 => now.saturating_sub(w) as f64 * 100.0 / dt as f64,
                _ => 0.0,
            };
            CpuRow {
                cpu: c.name.clone(),
                softirq_pct: pct(c.softirq, before.map(|b| b.softirq)),
                system_pct: pct(c.system, before.map(|b| b.system)),
                softnet_dropped: before
                    .map(|b| c.softnet_dropped.saturating_sub(b.softnet_dropped))
                    .unwrap_or(0),
                time_squeeze: before
                    .map(|b| c.time_squeeze.saturating_sub(b.time_squeeze))
                    .unwrap_or(0),
            }
        })
        .collect()
}

/// The ephemeral range and its use per destination, where both were read.
fn ports(cur: &Sample) -> Option<Ports> {
    let (range, c) = (cur.gauges.port_range?, cur.connections.as_ref()?);
    Some(Ports {
        range,
        size: u64::from(range.1.saturating_sub(range.0)) + 1,
        destinations: c
            .ports_by_destination
            .iter()
            .map(|(src, d, n)| PortUse {
                destination: match src {
                    Some(src) => format!("{d} from {src}"),
                    None => d.to_string(),
                },
                in_use: *n,
            })
            .collect(),
        check: match cur.platform {
            Platform::Windows => PORTS_CHECK_WINDOWS,
            Platform::Linux => PORTS_CHECK_LINUX,
        }
        .to_string(),
    })
}

/// Windows gives each outbound connection a port of the range of its own (per local
/// address): the range is used up in total, and TIME_WAIT keeps ports for
/// TcpTimedWaitDelay after the connections closed.
fn windows_port_gauges(p: &Ports, c: &super::sample::Connections) -> [GaugeRow; 2] {
    let in_use = (p.size as f64 * PORTS_MARK) as u64;
    let time_wait = p.size / 2;
    [
        GaugeRow {
            name: "dynamic ports in use".into(),
            value: c.range_in_use,
            mark: in_use,
            mark_is: "dynamic port range * 0.8".into(),
            limit: Some(p.size),
            check: PORTS_CHECK_WINDOWS.into(),
            turned: c.range_in_use > in_use,
        },
        GaugeRow {
            name: "dynamic ports in TIME_WAIT".into(),
            value: c.range_time_wait,
            mark: time_wait,
            mark_is: "dynamic port range / 2".into(),
            limit: Some(p.size),
            check: TIME_WAIT_CHECK_WINDOWS.into(),
            turned: c.range_time_wait > time_wait,
        },
    ]
}

/// A process that is gone reads as "does not exist"; say it as an operator would.
fn process_gone(why: &str) -> String {
    if why.contains("does not exist") {
        "no such process (it may have exited); watching the host's listeners".into()
    } else {
        why.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> crate::catalog::Catalog {
        let known = crate::profile::load(crate::profile::DEFAULT)
            .unwrap()
            .profile
            .variables()
            .into_keys()
            .collect();
        crate::catalog::load(crate::host::Platform::Linux, None, &known).unwrap()
    }

    /// The marks a watch turns rows at are the catalog's own targets: a change to a check's
    /// target that the watch does not follow fails here.
    #[test]
    fn the_marks_are_the_catalogs_targets() {
        let cat = catalog();
        let target = |id: &str| {
            let c = &cat.checks.iter().find(|d| d.check.id == id).unwrap().check;
            c.target.as_ref().map(|v| match v {
                serde_yaml_ng::Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            })
        };
        assert_eq!(
            target("linux.sockstat.orphans").as_deref(),
            Some("sysctl.net.ipv4.tcp_max_orphans / 4")
        );
        assert_eq!(
            target("linux.sockstat.time_wait").as_deref(),
            Some("sysctl.net.ipv4.tcp_max_tw_buckets * 9 / 10")
        );
        assert_eq!(
            target("linux.sockstat.tcp_mem_pages").as_deref(),
            Some("sysctl.net.ipv4.tcp_mem[1]")
        );
        // Every check a watched counter or mark names exists in the built-in catalog.
        let ids = WATCHED.iter().map(|(_, id)| *id).chain([
            "linux.net.core.somaxconn",
            "linux.net.netfilter.nf_conntrack_max",
            "linux.fs.file-max",
            "linux.pid.nofile.soft",
            "linux.cpu.softirq",
            "linux.net.ipv4.ip_local_port_range",
        ]);
        for id in ids {
            assert!(
                cat.checks.iter().any(|d| d.check.id == id),
                "{id} is not in checks/linux.yaml"
            );
        }
    }
}
