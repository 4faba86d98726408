//! The table for people: problems first, grouped by area (file descriptors, accept path,
//! TIME_WAIT and ports, memory, NIC, kernel counters, host, next boot), each with its fix, then
//! one line counting what passed; `--show all` lists every row. As one table per area where the
//! terminal has room, else as one block per finding (blocks.rs). Machine formats are elsewhere.

use super::shown::{current_shown, fix_shown, target_shown, Human, Layout, Show};
use super::text::{columns, wrapped};
use super::CheckReport;
use crate::catalog::eval::{Finding, Status};
use crate::catalog::Scope;
use comfy_table::{
    presets::UTF8_FULL_CONDENSED, Cell, Color, ColumnConstraint, ContentArrangement, Table, Width,
};

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
        "abort_on_overflow",
        "migrate_req",
    ]) {
        "accept path"
    } else if has(&["tw_", "port", "fin_timeout", "time_wait", "timed_wait"]) {
        "TIME_WAIT and ports"
    } else if has(&[
        "tcp_mem",
        "rmem",
        "wmem",
        "notsent_lowat",
        "conntrack",
        "memory",
        "orphans",
    ]) {
        "memory"
    } else if has(&[".nic."]) {
        "NIC"
    } else if has(&[".counter."]) {
        "kernel counters"
    } else {
        "host"
    }
}

/// The narrowest terminal that gets the table unasked. The table needs the longest id in its
/// first column (45 columns on Linux, 53 on Windows: ids are never broken), about 36 for the
/// current value and target, 6 for the status and 16 for the borders: at 140 columns the fix
/// column keeps about 45, enough for a sysctl command on two lines; below that a fix wraps
/// over many lines and the blocks read better.
pub const TABLE_MIN_COLUMNS: u16 = 140;

/// Prose in blocks (titles, notes, the why) wraps here on a wide terminal too: long lines
/// are hard to read, and a fix command is never wrapped whatever its length.
const PROSE_COLUMNS: u16 = 100;

/// The check report for people: the table or the blocks, grouped by area either way.
pub fn table(report: &CheckReport, h: &Human) -> String {
    let s = &report.summary;
    let width = match h.layout {
        Layout::Table => h.width as usize,
        Layout::Blocks => h.width.min(PROSE_COLUMNS) as usize,
    };
    let mut out = wrapped(
        &format!(
            "wstune check: profile {} ({} connections) as a {} ({}) on {} [{}]",
            report.profile.name,
            report.profile.connections,
            report.profile.role,
            report.profile.role_from,
            report.host.info.hostname,
            report.host.info.source
        ),
        width,
        "",
        "  ",
    );
    let show = h.show;
    let listed = |f: &Finding| show == Show::All || matches!(f.status, Status::Fail | Status::Warn);
    // One id column for every area's table, as wide as the longest id listed.
    let id_width = report
        .results
        .iter()
        .filter(|f| listed(f))
        .map(|f| columns(&f.id))
        .max()
        .unwrap_or(0);
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
        match h.layout {
            Layout::Table => {
                out.push_str(&grid(&rows, h, id_width as u16));
                out.push('\n');
            }
            Layout::Blocks => {
                for f in &rows {
                    out.push('\n');
                    out.push_str(&super::blocks::block(f, h, width));
                }
            }
        }
    }
    if show == Show::Problems {
        out.push_str(&not_checked_and_passed(report, h, width));
    }
    if show == Show::All && !h.why {
        out.push('\n');
        out.push_str(&wrapped(
            "`--why` adds each row's why, and the commands of advice (info) rows, marked optional.",
            width,
            "",
            "  ",
        ));
    }
    if show == Show::All {
        out.push_str(&sources(report, h, width));
    }
    out.push_str(&format!(
        "{} checks: {} pass, {} fail, {} warn, {} skip, {} info\n",
        s.total, s.pass, s.fail, s.warn, s.skip, s.info
    ));
    out
}

/// Under `--show problems`: the checks that could not be read, one line each, and the passes
/// as counts by area.
fn not_checked_and_passed(report: &CheckReport, h: &Human, width: usize) -> String {
    let s = &report.summary;
    let mut out = String::new();
    let skipped: Vec<&Finding> = report
        .results
        .iter()
        .filter(|f| f.status == Status::Skip)
        .collect();
    if !skipped.is_empty() {
        out.push_str("\nNot checked:\n");
        for f in &skipped {
            out.push_str(&wrapped(
                &format!(
                    "{}: {}",
                    f.id,
                    f.note.as_deref().unwrap_or("could not be read")
                ),
                width,
                "  ",
                "    ",
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
    out.push('\n');
    out.push_str(&wrapped(
        &format!(
            "Passed: {} ({}); {} info. `--show all` lists every row{}.",
            s.pass,
            if passed.is_empty() {
                "none".to_string()
            } else {
                passed.join(", ")
            },
            s.info,
            if h.why {
                ""
            } else {
                "; `--why` says why each matters"
            }
        ),
        width,
        "",
        "  ",
    ));
    out
}

/// Under `--show all`: the sources each recommendation follows, once per check.
fn sources(report: &CheckReport, h: &Human, width: usize) -> String {
    // Each recommendation with whom it follows, once per check (not per NIC or boot view).
    let mut seen = std::collections::BTreeSet::new();
    let mut sources = String::new();
    for f in report.results.iter().filter(|f| !f.refs.is_empty()) {
        let id = f.id.split('[').next().unwrap_or(&f.id);
        let id = id.strip_suffix(".boot").unwrap_or(id);
        if !seen.insert(id.to_string()) {
            continue;
        }
        match h.layout {
            Layout::Table => {
                let refs: Vec<String> = f
                    .refs
                    .iter()
                    .map(|r| format!("{} <{}>", r.section, r.url))
                    .collect();
                sources.push_str(&wrapped(
                    &format!("{id}: {}", refs.join("; ")),
                    width,
                    "  ",
                    "    ",
                ));
            }
            // Each address on a line of its own: a URL is never broken, and alone on its
            // line it is the only thing wider than the terminal.
            Layout::Blocks => {
                sources.push_str(&format!("  {id}:\n"));
                for r in &f.refs {
                    sources.push_str(&wrapped(&r.section, width, "    ", "    "));
                    sources.push_str(&format!("    <{}>\n", r.url));
                }
            }
        }
    }
    if sources.is_empty() {
        return sources;
    }
    format!("\nSources each recommendation follows:\n{sources}")
}

fn capitalised(a: &str) -> String {
    let mut c = a.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// One area's rows: check id and title, current value, target, status, fix or note (and the
/// why, with `--why`). The id column is `id_width` wide at least, so no id is broken.
fn grid(rows: &[&Finding], h: &Human, id_width: u16) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if h.colour {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    t.set_width(h.width);
    t.set_header(vec!["Check", "Current", "Target", "Status", "Fix / note"]);
    // Ids must stay whole; values are short and may wrap.
    let widths = [
        // The width counts the cell's padding, one column each side.
        (0, Width::Fixed((id_width + 2).max(20)), true),
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
        let status = if h.colour {
            status.fg(match f.status {
                Status::Pass => Color::Green,
                Status::Warn => Color::Yellow,
                Status::Fail => Color::Red,
                Status::Skip | Status::Info => Color::DarkGrey,
            })
        } else {
            status
        };
        let mut last = last_column(f, h.why);
        if h.why && !f.why.is_empty() {
            if !last.is_empty() {
                last.push('\n');
            }
            last.push_str(&format!("why: {}", f.why.trim()));
        }
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
            Cell::new(current_shown(f)),
            Cell::new(target_shown(f)),
            status,
            Cell::new(last),
        ]);
    }
    t.to_string()
}

/// What a person should read in the last column: the note, then the fix as [`fix_shown`]
/// gives it (advice labelled, its commands only with `--why`), then its remarks.
pub(super) fn last_column(f: &Finding, why: bool) -> String {
    let mut parts = Vec::new();
    if let Some(n) = &f.note {
        parts.push(n.clone());
    }
    let shown = fix_shown(f, why);
    parts.extend(shown.head);
    parts.extend(shown.texts.into_iter().map(|(l, t)| format!("{l}: {t}")));
    parts.extend(shown.remarks);
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
            ("linux.net.ipv4.tcp_notsent_lowat", "memory"),
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
