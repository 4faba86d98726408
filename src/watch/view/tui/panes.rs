//! One table per part of the frame: listeners, counters, values against their marks, CPUs,
//! ephemeral ports, the server's own figures.

use super::style::{mib, num, pane, rate, seconds, BOLD, DIM, HEADER, RED, YELLOW};
use crate::watch::advice::thousands;
use crate::watch::frame::{Frame, PORTS_MARK, SOFTIRQ_MARK_PCT};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Widget, Wrap};

pub(super) fn listeners(f: &Frame, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let mut title = String::from(" Listeners: accept queue, waiting/backlog");
    if let Some(s) = f.somaxconn {
        title.push_str(&format!(" (somaxconn {})", thousands(s)));
    }
    // The walk behind the per-listener states is paced on a busy host: say how old it is
    // once it is older than this interval.
    if let Some(age) = f.connections_age_s {
        if age > f.interval_s.max(0.5) * 1.5 {
            title.push_str(&format!(" · connections read {} ago (paced)", seconds(age)));
        }
    }
    let cap = area
        .height
        .saturating_sub(2 + u16::from(f.totals.is_some())) as usize;
    // The full queues first, then the fullest: at 3 a.m. the one that drops is the one to see.
    let mut order: Vec<&_> = f.listeners.iter().collect();
    order.sort_by(|a, b| b.full.cmp(&a.full).then(b.fill.total_cmp(&a.fill)));
    if order.len() > cap {
        title.push_str(&format!(" · {} more not shown", order.len() - cap));
        order.truncate(cap);
    }
    title.push(' ');
    let states = |s: Option<&crate::watch::sample::States>| -> [Cell<'static>; 5] {
        match s {
            Some(s) => [
                num(s.established),
                num(s.syn_recv),
                num(s.time_wait),
                num(s.close_wait),
                match s.orphans {
                    Some(o) => num(o),
                    None => Cell::from(Line::from("n/a").right_aligned()),
                },
            ],
            None => std::array::from_fn(|_| Cell::from(Line::from("-").right_aligned())),
        }
    };
    let mut rows: Vec<Row> = order
        .iter()
        .map(|l| {
            // A host without accept queues (Windows) shows them as unavailable, never 0/0.
            let (queue, fill) = match l.queue_unavailable {
                None => (
                    Line::from(format!(
                        "{}/{}",
                        thousands(l.queue.into()),
                        thousands(l.backlog.into())
                    )),
                    fill_cell(l.fill, l.full),
                ),
                Some(_) => (
                    Line::from(Span::styled("unavailable", DIM)),
                    Cell::from(Span::styled("n/a", DIM)),
                ),
            };
            let mut cells = vec![
                Cell::from(l.local.clone()),
                Cell::from(queue.right_aligned()),
                fill,
            ];
            cells.extend(states(l.states.as_ref()));
            let style = if l.full {
                RED
            } else if l.fill >= 0.8 {
                YELLOW
            } else {
                Style::new()
            };
            Row::new(cells).style(style)
        })
        .collect();
    if rows.is_empty() {
        rows.push(Row::new([Cell::from(Span::styled("(none)", DIM))]));
    }
    if let Some(t) = &f.totals {
        let mut cells = vec![Cell::from("all sockets"), Cell::from(""), Cell::from("")];
        cells.extend(states(Some(t)));
        rows.push(Row::new(cells).style(BOLD));
    }
    let local_w = f
        .listeners
        .iter()
        .map(|l| l.local.len())
        .max()
        .unwrap_or(0)
        .clamp(12, 46) as u16;
    Table::new(
        rows,
        [
            Constraint::Length(local_w),
            Constraint::Length(13),
            Constraint::Length(15),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(10),
            Constraint::Length(8),
        ],
    )
    .header(
        Row::new(
            [
                "local",
                "queue",
                "fill",
                "estab",
                "syn_recv",
                "time_wait",
                "close_wait",
                "orphans",
            ]
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                if i == 0 || i == 2 {
                    Cell::from(h)
                } else {
                    Cell::from(Line::from(h).right_aligned())
                }
            }),
        )
        .style(HEADER),
    )
    .block(pane(&title, f.listeners.iter().any(|l| l.full)))
    .render(area, buf);
}

/// A fill bar of ten cells and the share, or FULL.
pub(super) fn fill_cell(fill: f64, full: bool) -> Cell<'static> {
    let n = (fill.clamp(0.0, 1.0) * 10.0).round() as usize;
    let bar = format!("{}{}", "█".repeat(n), "░".repeat(10 - n));
    if full {
        Cell::from(Line::from(vec![
            Span::raw(bar),
            Span::styled(" FULL", RED.add_modifier(Modifier::REVERSED)),
        ]))
    } else {
        Cell::from(format!("{bar} {:>3.0}%", fill * 100.0))
    }
}

pub(super) fn counters(f: &Frame, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let cap = area.height.saturating_sub(2) as usize;
    // Keep every turned row when the pane is short; the rest fill what is left, in order.
    let mut shown: Vec<usize> = (0..f.counters.len())
        .filter(|&i| f.counters[i].turned)
        .collect();
    shown.extend((0..f.counters.len()).filter(|&i| !f.counters[i].turned));
    let hidden = shown.len().saturating_sub(cap);
    shown.truncate(cap);
    shown.sort_unstable();
    let rows: Vec<Row> = shown
        .iter()
        .map(|&i| {
            let c = &f.counters[i];
            let style = if c.turned {
                RED
            } else if c.delta == 0 {
                DIM
            } else {
                Style::new()
            };
            Row::new([
                Cell::from(c.name.clone()),
                Cell::from(Line::from(rate(c.per_s)).right_aligned()),
                Cell::from(
                    Line::from(if c.delta > 0 {
                        format!("+{}", thousands(c.delta))
                    } else {
                        "0".into()
                    })
                    .right_aligned(),
                ),
                Cell::from(Line::from(thousands(c.total)).right_aligned()),
                Cell::from(c.check.clone().unwrap_or_default()),
            ])
            .style(style)
        })
        .collect();
    let mut title = String::from(" Kernel counters (netstat, snmp, softnet, conntrack)");
    if hidden > 0 {
        title.push_str(&format!(" · {hidden} quiet ones not shown"));
    }
    title.push(' ');
    Table::new(
        rows,
        [
            Constraint::Length(26),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(14),
            Constraint::Min(10),
        ],
    )
    .header(
        Row::new([
            Cell::from("counter"),
            Cell::from(Line::from("per s").right_aligned()),
            Cell::from(Line::from("delta").right_aligned()),
            Cell::from(Line::from("total").right_aligned()),
            Cell::from("check"),
        ])
        .style(HEADER),
    )
    .block(pane(&title, f.counters.iter().any(|c| c.turned)))
    .render(area, buf);
}

pub(super) fn gauges(f: &Frame, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let rows: Vec<Row> = f
        .gauges
        .iter()
        .map(|g| {
            let of = g.limit.unwrap_or(g.mark).max(1);
            let share = g.value as f64 / of as f64;
            Row::new([
                Cell::from(g.name.clone()),
                Cell::from(Line::from(thousands(g.value)).right_aligned()),
                Cell::from(Line::from(thousands(g.mark)).right_aligned()),
                Cell::from(Line::from(g.limit.map(thousands).unwrap_or_default()).right_aligned()),
                Cell::from(bar(share, 8)),
                Cell::from(g.mark_is.clone()),
            ])
            .style(if g.turned { RED } else { Style::new() })
        })
        .collect();
    Table::new(
        rows,
        [
            Constraint::Length(14),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Min(8),
        ],
    )
    .header(
        Row::new([
            Cell::from("value"),
            Cell::from(Line::from("now").right_aligned()),
            Cell::from(Line::from("mark").right_aligned()),
            Cell::from(Line::from("limit").right_aligned()),
            Cell::from("use"),
            Cell::from("the mark is"),
        ])
        .style(HEADER),
    )
    .block(pane(
        " Against their marks ",
        f.gauges.iter().any(|g| g.turned),
    ))
    .render(area, buf);
}

pub(super) fn bar(share: f64, width: usize) -> String {
    let n = (share.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!("{}{}", "█".repeat(n), "░".repeat(width - n))
}

pub(super) fn cpus(f: &Frame, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let cap = area.height.saturating_sub(2) as usize;
    let mut order: Vec<&_> = f.cpus.iter().collect();
    // Busiest first: the core that one queue or one interrupt lands on is the one to see.
    order.sort_by(|a, b| (b.softirq_pct + b.system_pct).total_cmp(&(a.softirq_pct + a.system_pct)));
    order.truncate(cap);
    let rows: Vec<Row> = order
        .iter()
        .map(|c| {
            let hot = c.softirq_pct >= SOFTIRQ_MARK_PCT || c.softnet_dropped > 0;
            Row::new([
                Cell::from(c.cpu.clone()),
                Cell::from(Line::from(format!("{:.1}", c.softirq_pct)).right_aligned()),
                Cell::from(Line::from(format!("{:.1}", c.system_pct)).right_aligned()),
                Cell::from(Line::from(thousands(c.softnet_dropped)).right_aligned()),
                Cell::from(Line::from(thousands(c.time_squeeze)).right_aligned()),
            ])
            .style(if hot {
                RED
            } else if c.time_squeeze > 0 {
                YELLOW
            } else {
                Style::new()
            })
        })
        .collect();
    let title = if f.cpus.len() > order.len() {
        format!(" CPUs, busiest {} of {} ", order.len(), f.cpus.len())
    } else {
        " CPUs, busiest first ".to_string()
    };
    Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
        ],
    )
    .header(
        Row::new([
            Cell::from("cpu"),
            Cell::from(Line::from("softirq %").right_aligned()),
            Cell::from(Line::from("system %").right_aligned()),
            Cell::from(Line::from("drops").right_aligned()),
            Cell::from(Line::from("squeezed").right_aligned()),
        ])
        .style(HEADER),
    )
    .block(pane(
        &title,
        f.cpus
            .iter()
            .any(|c| c.softirq_pct >= SOFTIRQ_MARK_PCT || c.softnet_dropped > 0),
    ))
    .render(area, buf);
}

pub(super) fn ports(f: &Frame, area: Rect, buf: &mut Buffer) {
    let Some(p) = &f.ports else { return };
    if area.height == 0 {
        return;
    }
    let cap = area.height.saturating_sub(2) as usize;
    let mut rows: Vec<Row> = p
        .destinations
        .iter()
        .take(cap)
        .map(|d| {
            let share = d.in_use as f64 / p.size.max(1) as f64;
            Row::new([
                Cell::from(d.destination.clone()),
                Cell::from(Line::from(thousands(d.in_use)).right_aligned()),
                Cell::from(format!("{} {:>3.0}%", bar(share, 8), share * 100.0)),
            ])
            .style(if share >= PORTS_MARK {
                RED
            } else {
                Style::new()
            })
        })
        .collect();
    if rows.is_empty() {
        rows.push(Row::new([Cell::from(Span::styled("(none in use)", DIM))]));
    }
    let alarm = p
        .destinations
        .iter()
        .any(|d| d.in_use as f64 >= p.size as f64 * PORTS_MARK);
    Table::new(
        rows,
        [
            Constraint::Min(16),
            Constraint::Length(9),
            Constraint::Length(13),
        ],
    )
    .header(
        Row::new([
            Cell::from("destination"),
            Cell::from(Line::from("in use").right_aligned()),
            Cell::from("of the range"),
        ])
        .style(HEADER),
    )
    .block(pane(
        &format!(
            " Ephemeral ports per destination (range {}-{}, {} ports) ",
            p.range.0,
            p.range.1,
            thousands(p.size)
        ),
        alarm,
    ))
    .render(area, buf);
}

pub(super) fn server(f: &Frame, area: Rect, buf: &mut Buffer) {
    let Some(s) = &f.server else { return };
    if area.height == 0 {
        return;
    }
    let text = match &s.error {
        Some(e) => Line::from(Span::styled(format!("cannot read it: {e}"), YELLOW)),
        None => {
            let mut parts: Vec<String> = Vec::new();
            let put = |parts: &mut Vec<String>, what: &str, v: Option<f64>, per_s: bool| {
                if let Some(v) = v {
                    let n = if per_s {
                        rate(v) + "/s"
                    } else {
                        thousands(v.max(0.0).round() as u64)
                    };
                    parts.push(format!("{what} {n}"));
                }
            };
            put(&mut parts, "connections", s.connections, false);
            put(&mut parts, "in", s.messages_in_per_s, true);
            put(&mut parts, "out", s.messages_out_per_s, true);
            put(&mut parts, "send-queue closes", s.send_queue_closes, false);
            put(&mut parts, "offload depth", s.offload_queue_depth, false);
            if let (Some(u), Some(b)) = (s.budget_used_bytes, s.budget_bytes) {
                parts.push(format!("budget {} of {} MiB", mib(u), mib(b)));
            }
            put(
                &mut parts,
                "handshakes refused",
                s.handshakes_rejected,
                false,
            );
            put(&mut parts, "open fds", s.open_fds, false);
            if let Some(r) = s.resident_bytes {
                parts.push(format!("resident {} MiB", mib(r)));
            }
            if parts.is_empty() {
                parts.push("no figures this program exports are known".into());
            }
            Line::from(parts.join(" · "))
        }
    };
    let kind = if s.wstune { "wstune serve" } else { "server" };
    Paragraph::new(text)
        .wrap(Wrap { trim: true })
        .block(pane(
            &format!(" The {kind} at {} ", s.url),
            s.error.is_some(),
        ))
        .render(area, buf);
}
