//! Laying a frame out on the screen: the header, the panes side by side or stacked by width,
//! and the advice below them, scrolled.

use super::panes::{counters, cpus, gauges, listeners, ports, server};
use super::style::{clock, duration, pane, seconds, BOLD, DIM, GREEN, RED, YELLOW};
use crate::watch::advice::Log;
use crate::watch::frame::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Paragraph, Widget, Wrap};

/// What the header says besides the frame: fixed for the length of the watch.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub host: String,
    /// What is watched: "every listener", "ports 9001", "pid 4242, admin http://...".
    pub scope: String,
    pub interval_s: f64,
}

/// The smallest screen the view is laid out for.
const MIN_W: u16 = 40;
const MIN_H: u16 = 10;
/// Columns from which the tables sit side by side.
const WIDE: u16 = 120;

/// Draw one frame (None: before the first, which needs two readings) into `buf`, the advice
/// scrolled by `scroll` lines; returns how many lines the advice can scroll by.
pub fn render(
    area: Rect,
    buf: &mut Buffer,
    f: Option<&Frame>,
    head: &Head,
    log: &Log,
    scroll: u16,
) -> u16 {
    if area.width < MIN_W || area.height < MIN_H {
        Paragraph::new(format!(
            "wstune watch: the terminal is {}x{}; it needs at least {MIN_W}x{MIN_H} (q quits)",
            area.width, area.height
        ))
        .wrap(Wrap { trim: true })
        .render(area, buf);
        return 0;
    }
    let head_text = header(f, head, log);
    let head_h = lines_needed(&head_text, area.width).clamp(2, 6);
    let Some(f) = f else {
        let [top, rest] =
            Layout::vertical([Constraint::Length(head_h), Constraint::Min(0)]).areas(area);
        Paragraph::new(head_text)
            .wrap(Wrap { trim: false })
            .render(top, buf);
        Paragraph::new(format!(
            "Reading the host... rates need two readings: the first frame comes after one interval ({}).",
            seconds(head.interval_s)
        ))
        .wrap(Wrap { trim: false })
        .block(Block::new().borders(Borders::TOP))
        .render(rest, buf);
        return 0;
    };
    let advice_text = advice(f, log, area.width);
    let advice_need = lines_needed(&advice_text, area.width) + 1;
    let advice_h = advice_need.clamp(3, (area.height * 9 / 20).max(3));
    let [top, body, bottom] = Layout::vertical([
        Constraint::Length(head_h),
        Constraint::Min(4),
        Constraint::Length(advice_h),
    ])
    .areas(area);
    Paragraph::new(head_text)
        .wrap(Wrap { trim: false })
        .render(top, buf);

    let listeners_h = (f.listeners.len() as u16 + 2 + u16::from(f.totals.is_some())).max(3);
    let gauges_h = f.gauges.len() as u16 + 2;
    let ports_h = f
        .ports
        .as_ref()
        .map_or(0, |p| (p.destinations.len() as u16).clamp(1, 6) + 2);
    let server_h = if f.server.is_some() { 3 } else { 0 };
    if body.width >= WIDE {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(57), Constraint::Percentage(43)])
                .areas(body);
        let [l, c] = Layout::vertical([
            Constraint::Length(listeners_h.min(left.height / 2).max(3)),
            Constraint::Min(3),
        ])
        .areas(left);
        listeners(f, l, buf);
        counters(f, c, buf);
        let [g, s, p, cpu] = Layout::vertical([
            Constraint::Length(gauges_h),
            Constraint::Length(server_h),
            Constraint::Length(ports_h),
            Constraint::Min(3),
        ])
        .areas(right);
        gauges(f, g, buf);
        server(f, s, buf);
        ports(f, p, buf);
        cpus(f, cpu, buf);
    } else {
        let [l, c, g, s, p, cpu] = Layout::vertical([
            Constraint::Length(listeners_h.min(body.height / 3).max(3)),
            Constraint::Min(3),
            Constraint::Length(gauges_h),
            Constraint::Length(server_h),
            Constraint::Length(ports_h),
            Constraint::Length(4),
        ])
        .areas(body);
        listeners(f, l, buf);
        counters(f, c, buf);
        gauges(f, g, buf);
        server(f, s, buf);
        ports(f, p, buf);
        cpus(f, cpu, buf);
    }

    let inner = bottom.height.saturating_sub(1);
    let max_scroll = advice_need.saturating_sub(1).saturating_sub(inner);
    let more = max_scroll > 0;
    let scroll = scroll.min(max_scroll);
    let title = if f.advice.is_empty() && log.events.is_empty() {
        " Advice ".to_string()
    } else if more {
        " Advice, in the check catalog's words (↑/↓ scroll) ".to_string()
    } else {
        " Advice, in the check catalog's words ".to_string()
    };
    Paragraph::new(advice_text)
        .wrap(Wrap { trim: false })
        .scroll((scroll, 0))
        .block(pane(&title, !f.advice.is_empty()))
        .render(bottom, buf);
    max_scroll
}

fn header(f: Option<&Frame>, head: &Head, log: &Log) -> Text<'static> {
    let mut first = vec![
        Span::styled(
            " wstune watch ",
            Style::new().add_modifier(Modifier::REVERSED),
        ),
        Span::raw(format!(" {} ", head.host)),
        Span::styled("│", DIM),
        Span::raw(format!(" every {} ", seconds(head.interval_s))),
        Span::styled("│", DIM),
    ];
    if let Some(f) = f {
        first.push(Span::raw(format!(" {} UTC ", clock(&f.time))));
        first.push(Span::styled("│", DIM));
        first.push(Span::raw(format!(" up {} ", duration(f.elapsed_s))));
        first.push(Span::styled("│", DIM));
    }
    first.push(Span::raw(format!(" {} ", head.scope)));
    first.push(Span::styled("│", DIM));
    first.push(Span::styled(" read-only · q quits", DIM));
    let mut lines = vec![Line::from(first)];
    let Some(f) = f else {
        return Text::from(lines);
    };
    if f.advice.is_empty() {
        let mut s = vec![Span::styled(" ✓ nothing turned this interval", GREEN)];
        if !log.events.is_empty() {
            let ids: Vec<&str> = log.events.iter().map(|e| e.id.as_str()).collect();
            s.push(Span::styled(
                format!(" (earlier: {})", ids.join(", ")),
                YELLOW,
            ));
        }
        lines.push(Line::from(s));
    } else {
        let ids: Vec<&str> = f.advice.iter().map(|a| a.id.as_str()).collect();
        lines.push(Line::from(Span::styled(
            format!(" ! {} turned: {}", ids.len(), ids.join(", ")),
            RED,
        )));
    }
    for n in &f.notes {
        lines.push(Line::from(Span::styled(format!(" note: {n}"), YELLOW)));
    }
    if !f.unavailable.is_empty() {
        let parts: Vec<String> = f
            .unavailable
            .iter()
            .map(|(what, why)| format!("{what} ({why})"))
            .collect();
        lines.push(Line::from(Span::styled(
            format!(" unavailable, not zero: {}", parts.join("; ")),
            YELLOW,
        )));
    }
    Text::from(lines)
}

/// `label`, then `body` wrapped at word boundaries to `width`, its continuation lines
/// indented under the body so each piece of advice reads as one block.
fn hanging(
    label: &str,
    label_style: Style,
    body: &str,
    style: Style,
    width: u16,
) -> Vec<Line<'static>> {
    let indent = label.chars().count();
    let room = usize::from(width).saturating_sub(indent).max(20);
    let mut rows: Vec<String> = Vec::new();
    let mut cur = String::new();
    // Split on single spaces so a double space in the catalog's words stays one.
    for word in body.split(' ') {
        let (cl, wl) = (cur.chars().count(), word.chars().count());
        if cl > 0 && cl + 1 + wl > room {
            rows.push(std::mem::take(&mut cur));
        } else if cl > 0 {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    rows.push(cur);
    rows.into_iter()
        .enumerate()
        .map(|(i, r)| {
            let lead = if i == 0 {
                Span::styled(label.to_string(), label_style)
            } else {
                Span::raw(" ".repeat(indent))
            };
            Line::from(vec![lead, Span::styled(r, style)])
        })
        .collect()
}

fn advice(f: &Frame, log: &Log, width: u16) -> Text<'static> {
    let mut lines: Vec<Line> = Vec::new();
    for a in &f.advice {
        lines.push(Line::from(vec![
            Span::styled(format!("● {}", a.id), RED),
            Span::styled(format!("  {}", a.title), BOLD),
        ]));
        lines.extend(hanging(
            "  moved: ",
            Style::new(),
            &a.what,
            Style::new(),
            width,
        ));
        if let (Some(c), Some(t)) = (&a.current, &a.target) {
            lines.push(Line::from(format!("  now {c}, the profile's target {t}")));
        }
        for fix in &a.fix {
            lines.extend(hanging(
                "  fix: ",
                GREEN.add_modifier(Modifier::BOLD),
                fix,
                Style::new().fg(Color::Cyan),
                width,
            ));
        }
        lines.extend(hanging("  why: ", BOLD, &a.why, Style::new(), width));
    }
    let earlier: Vec<_> = log
        .events
        .iter()
        .filter(|e| !f.advice.iter().any(|a| a.id == e.id))
        .collect();
    if !earlier.is_empty() {
        lines.push(Line::from(Span::styled("Earlier, quiet now:", YELLOW)));
        for e in earlier {
            let text = format!(
                "{} ({}): {} interval(s), last at {}: {}",
                e.id,
                e.title,
                e.count,
                clock(&e.last_seen),
                e.what
            );
            lines.extend(hanging("  ", Style::new(), &text, Style::new(), width));
        }
    }
    if lines.is_empty() {
        lines.push(Line::from(Span::styled(
            "Nothing has turned: no counter that predicts failure moved and no value crossed its mark. \
             When one does, the check that explains it appears here with its fix.",
            DIM,
        )));
    }
    Text::from(lines)
}

/// Rows a text takes wrapped at `width` (a close estimate: words are not split the way the
/// renderer splits them, so a long line may take one row more).
fn lines_needed(t: &Text, width: u16) -> u16 {
    let w = usize::from(width.max(1));
    t.lines
        .iter()
        .map(|l| l.width().div_ceil(w).max(1) + usize::from(l.width() > w))
        .sum::<usize>()
        .min(usize::from(u16::MAX)) as u16
}
