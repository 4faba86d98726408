//! The table for people: problems first, grouped by area (file descriptors, accept path,
//! TIME_WAIT and ports, memory, NIC, kernel counters, host, next boot), each with its fix, then
//! one line counting what passed; `--show all` lists every row. Machine formats are elsewhere.

use super::CheckReport;
use crate::catalog::eval::{Finding, Status};
use crate::catalog::Scope;
use comfy_table::{
    presets::UTF8_FULL_CONDENSED, Cell, Color, ColumnConstraint, ContentArrangement, Table, Width,
};

/// Which rows the table lists in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Show {
    /// Failures and warnings in full, grouped by area, each with its fix; what could not be
    /// checked in one line each; passes and info as counts.
    #[default]
    Problems,
    /// Every row, grouped by area.
    All,
}

/// The areas an operator thinks in, in the order the table shows them.
pub const AREAS: [&str; 10] = [
    "file descriptors",
    "accept path",
    "TIME_WAIT and ports",
    "memory",
    "NIC",
    "kernel counters",
    "host",
    "next boot",
    "load balancer",
    "wstune",
];

/// The area of a finding: a boot-time view is "next boot", whatever its check's area.
pub fn area_of(f: &Finding) -> &'static str {
    if f.is_boot_view() {
        "next boot"
    } else {
        area(&f.id)
    }
}

/// The area of a check, from its id (the catalog's ids are stable, so this is too).
pub fn area(id: &str) -> &'static str {
    let has = |words: &[&str]| words.iter().any(|w| id.contains(w));
    if id.starts_with("linux.boot.") {
        "next boot"
    } else if id.starts_with("lb.") {
        "load balancer"
    } else if id.starts_with("wstune.") {
        "wstune"
    } else if has(&["nofile", "file-max", "nr_open", "epoll", "file_max"]) {
        "file descriptors"
    } else if has(&[
        "somaxconn",
        "syn_backlog",
        "netdev_max_backlog",
        "connect_response",
        "syncookies",
        "synack",
    ]) {
        "accept path"
    } else if has(&["tw_", "port", "fin_timeout", "time_wait", "timed_wait"]) {
        "TIME_WAIT and ports"
    } else if has(&["tcp_mem", "rmem", "wmem", "conntrack", "memory", "orphans"]) {
        "memory"
    } else if has(&[".nic."]) {
        "NIC"
    } else if has(&[".counter."]) {
        "kernel counters"
    } else {
        "host"
    }
}

/// `colour` is decided by the caller (a terminal, and NO_COLOR unset); `width` is used when the
/// output is not a terminal, where comfy-table cannot ask for one.
pub fn table(report: &CheckReport, colour: bool, width: u16, show: Show) -> String {
    let s = &report.summary;
    let mut out = format!(
        "wstune check: profile {} ({} connections) as a {} ({}) on {} [{}]\n",
        report.profile.name,
        report.profile.connections,
        report.profile.role,
        report.profile.role_from,
        report.host.info.hostname,
        report.host.info.source
    );
    let listed = |f: &Finding| show == Show::All || matches!(f.status, Status::Fail | Status::Warn);
    let mut skipped = Vec::new();
    for a in AREAS {
        let rows: Vec<&Finding> = report
            .results
            .iter()
            .filter(|f| area_of(f) == a && listed(f))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let count = |st: Status| rows.iter().filter(|f| f.status == st).count();
        let mut counts = Vec::new();
        for (st, word) in [(Status::Fail, "fail"), (Status::Warn, "warn")] {
            if count(st) > 0 {
                counts.push(format!("{} {word}", count(st)));
            }
        }
        if show == Show::All {
            counts.push(format!("{} row(s)", rows.len()));
        }
        out.push_str(&format!("\n{}: {}\n", capitalised(a), counts.join(", ")));
        out.push_str(&grid(&rows, colour, width));
        out.push('\n');
    }
    if show == Show::Problems {
        skipped.extend(report.results.iter().filter(|f| f.status == Status::Skip));
        if !skipped.is_empty() {
            out.push_str("\nNot checked:\n");
            for f in &skipped {
                out.push_str(&format!(
                    "  {}: {}\n",
                    f.id,
                    f.note.as_deref().unwrap_or("could not be read")
                ));
            }
        }
        let passed: Vec<String> = AREAS
            .iter()
            .filter_map(|a| {
                let n = report
                    .results
                    .iter()
                    .filter(|f| area_of(f) == *a && f.status == Status::Pass)
                    .count();
                (n > 0).then(|| format!("{a} {n}"))
            })
            .collect();
        out.push_str(&format!(
            "\nPassed: {} ({}); {} info. `--show all` lists every row.\n",
            s.pass,
            if passed.is_empty() {
                "none".to_string()
            } else {
                passed.join(", ")
            },
            s.info
        ));
    }
    if show == Show::All {
        // Each recommendation with whom it follows, once per check (not per NIC or boot view).
        let mut seen = std::collections::BTreeSet::new();
        let mut sources = String::new();
        for f in report.results.iter().filter(|f| !f.refs.is_empty()) {
            let id = f.id.split('[').next().unwrap_or(&f.id);
            let id = id.strip_suffix(".boot").unwrap_or(id);
            if seen.insert(id.to_string()) {
                let refs: Vec<String> = f
                    .refs
                    .iter()
                    .map(|r| format!("{} <{}>", r.section, r.url))
                    .collect();
                sources.push_str(&format!("  {id}: {}\n", refs.join("; ")));
            }
        }
        if !sources.is_empty() {
            out.push_str("\nSources each recommendation follows:\n");
            out.push_str(&sources);
        }
    }
    out.push_str(&format!(
        "{} checks: {} pass, {} fail, {} warn, {} skip, {} info\n",
        s.total, s.pass, s.fail, s.warn, s.skip, s.info
    ));
    out
}

fn capitalised(a: &str) -> String {
    let mut c = a.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// One area's rows: check id and title, current value, target, status, fix or note.
fn grid(rows: &[&Finding], colour: bool, width: u16) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if colour {
        t.enforce_styling();
    } else {
        t.force_no_tty().set_width(width);
    }
    t.set_header(vec!["Check", "Current", "Target", "Status", "Fix / note"]);
    // Ids must stay readable; values are short and may wrap.
    let widths = [
        (0, Width::Fixed(36), true),
        (1, Width::Fixed(16), false),
        (2, Width::Fixed(20), false),
    ];
    for (i, w, lower) in widths {
        if let Some(c) = t.column_mut(i) {
            c.set_constraint(if lower {
                ColumnConstraint::LowerBoundary(w)
            } else {
                ColumnConstraint::UpperBoundary(w)
            });
        }
    }
    for f in rows {
        let status = Cell::new(f.status.as_str().to_uppercase());
        let status = if colour {
            status.fg(match f.status {
                Status::Pass => Color::Green,
                Status::Warn => Color::Yellow,
                Status::Fail => Color::Red,
                Status::Skip | Status::Info => Color::DarkGrey,
            })
        } else {
            status
        };
        t.add_row(vec![
            Cell::new(format!(
                "{}\n{}{}",
                f.id,
                f.title,
                if f.scope == Scope::Netns {
                    " [per netns]"
                } else {
                    ""
                }
            )),
            Cell::new(
                f.current
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::new(target_text(f)),
            status,
            Cell::new(advice(f)),
        ]);
    }
    t.to_string()
}

/// "<= 30", "covers 10000 65535", "absent".
pub fn target_text(f: &Finding) -> String {
    match (&f.target, f.compare) {
        (Some(t), c) => format!("{c} {t}"),
        (None, "absent") => "absent".into(),
        (None, "no_growth") => "no growth".into(),
        (None, _) => "-".into(),
    }
}

/// What a person should read in the last column: the fix when something is wrong, else the note.
fn advice(f: &Finding) -> String {
    let mut parts = Vec::new();
    // An informational check that missed its target has no note: its fix is the useful part.
    if matches!(f.status, Status::Fail | Status::Warn)
        || (f.status == Status::Info && f.note.is_none())
    {
        if let Some(n) = &f.note {
            parts.push(n.clone());
        }
        if let Some(r) = &f.fix.runtime {
            parts.push(format!("now: {r}"));
        }
        if let Some(p) = &f.fix.persistent {
            parts.push(format!("persist: {p}"));
        }
    } else if let Some(n) = &f.note {
        parts.push(n.clone());
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::area;

    #[test]
    fn every_catalog_family_has_its_area() {
        for (id, want) in [
            ("linux.process.nofile.hard", "file descriptors"),
            ("linux.fs.file-max", "file descriptors"),
            ("linux.net.core.somaxconn", "accept path"),
            (
                "windows.tcpip.tcp_max_connect_response_retransmissions",
                "accept path",
            ),
            ("linux.net.ipv4.ip_local_port_range", "TIME_WAIT and ports"),
            ("windows.tcpip6.dynamic_port_range", "TIME_WAIT and ports"),
            ("linux.sockstat.time_wait", "TIME_WAIT and ports"),
            ("linux.net.ipv4.tcp_rmem.default", "memory"),
            ("linux.host.memory", "memory"),
            ("linux.nic.rx_queues[eth0]", "NIC"),
            ("linux.counter.listen_overflows", "kernel counters"),
            ("linux.kernel.version", "host"),
            ("linux.boot.tcp_tw_recycle", "next boot"),
            ("wstune.journal.pending", "wstune"),
        ] {
            assert_eq!(area(id), want, "{id}");
        }
    }
}
