//! The view's colours, its pane frame, and how it spells numbers, rates and times.

use crate::watch::advice::thousands;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell};

pub(super) const RED: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub(super) const YELLOW: Style = Style::new().fg(Color::Yellow);
pub(super) const GREEN: Style = Style::new().fg(Color::Green);
pub(super) const DIM: Style = Style::new().add_modifier(Modifier::DIM);
pub(super) const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
pub(super) const HEADER: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::UNDERLINED);

/// A pane: one rule on top with its title (borders all round cost two rows of figures).
pub(super) fn pane(title: &str, alarm: bool) -> Block<'static> {
    Block::new().borders(Borders::TOP).title(Span::styled(
        title.to_string(),
        if alarm { RED } else { BOLD },
    ))
}

pub(super) fn num(n: u64) -> Cell<'static> {
    Cell::from(Line::from(thousands(n)).right_aligned())
}

/// A rate as an operator reads it: 0.5, 12, 4,210.
pub(super) fn rate(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x < 10.0 {
        format!("{x:.1}")
    } else {
        thousands(x.round() as u64)
    }
}

pub(super) fn mib(bytes: f64) -> String {
    thousands((bytes.max(0.0) / 1048576.0).round() as u64)
}

pub(super) fn seconds(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

pub(super) fn duration(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// HH:MM:SS of an RFC 3339 time.
pub(super) fn clock(t: &str) -> &str {
    t.get(11..19).unwrap_or(t)
}
