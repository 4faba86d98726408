//! The full-screen view: a header (host, cadence, time, what cannot be read), the listeners'
//! accept queues, the kernel counters, the values against their marks, CPU time per core,
//! ephemeral ports per destination, the server's own figures (`--admin`), and the catalog's
//! advice for every row that turned.
//!
//! Drawing is a pure function of a frame ([`render`] into a ratatui [`Buffer`]), so what an
//! operator sees is tested without a terminal; [`Tui`] only owns the terminal (raw mode and
//! the alternate screen, given back on every way out: the end, an error, a panic) and the keys.

use crate::host::process::{self, TtyInput};
use crate::watch::advice::{thousands, Log};
use crate::watch::frame::{Frame, PORTS_MARK, SOFTIRQ_MARK_PCT};
use crate::watch::{Flow, View};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Widget, Wrap};
use ratatui::Terminal;
use std::io::{self, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What the header says besides the frame: fixed for the length of the watch.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub host: String,
    /// What is watched: "every listener", "ports 9001", "pid 4242, admin http://...".
    pub scope: String,
    pub interval_s: f64,
}

/// The full-screen view (ratatui over crossterm).
pub struct Tui {
    term: Terminal<CrosstermBackend<Stdout>>,
    head: Head,
    last: Option<Frame>,
    log: Log,
    /// Lines of the advice pane scrolled past (arrow keys), and the most there are to scroll
    /// past in the last drawing.
    scroll: u16,
    max_scroll: u16,
}

/// Whether this process holds the terminal in raw mode on the alternate screen: what the
/// panic hook and every way out give back, once.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Give the terminal back: cooked mode, the main screen, the cursor. Safe to call twice.
fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
    }
}

/// A panic prints its message after the hook runs: restore first, or the message lands on
/// the alternate screen in raw mode and vanishes with it.
fn hook_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            before(info);
        }));
    });
}

/// The backstop for a view that cannot stop: once a signal asked to end, the terminal is given
/// back and the process ends if the view has not done so itself within two seconds (a
/// terminal library stuck in a read of a terminal that hung up at the wrong moment).
fn watchdog() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("watch-watchdog".into())
            .spawn(|| {
                while !process::termination_requested() {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                std::thread::sleep(std::time::Duration::from_secs(2));
                if ACTIVE.load(Ordering::SeqCst) {
                    restore();
                    eprintln!("wstune watch: stopped by a signal (the terminal did not answer)");
                    // As a shell reports a process a signal ended: 128 + its number.
                    std::process::exit(128 + process::termination_signal().unwrap_or(15));
                }
            });
    });
}

impl Tui {
    /// Take the terminal (raw mode, alternate screen) and draw the waiting screen.
    pub fn new(head: Head) -> io::Result<Tui> {
        hook_panics();
        process::catch_termination();
        watchdog();
        // Colours as --color and the environment decide (crossterm would read NO_COLOR alone).
        crossterm::style::force_color_output(crate::output::colour_wanted(false));
        terminal::enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let started = (|| {
            execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
            let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
            term.clear()?;
            Ok::<_, io::Error>(term)
        })();
        let term = match started {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        let mut t = Tui {
            term,
            head,
            last: None,
            log: Log::default(),
            scroll: 0,
            max_scroll: 0,
        };
        t.draw()?;
        Ok(t)
    }

    fn draw(&mut self) -> io::Result<()> {
        let Tui {
            term,
            head,
            last,
            log,
            scroll,
            max_scroll,
        } = self;
        term.draw(|fr| {
            let area = fr.area();
            *max_scroll = render(area, fr.buffer_mut(), last.as_ref(), head, log, *scroll);
        })?;
        *scroll = (*scroll).min(*max_scroll);
        Ok(())
    }

    /// A key: whether it stops the watch.
    fn key(&mut self, code: KeyCode, mods: KeyModifiers) -> io::Result<Flow> {
        let to = match action(code, mods) {
            Action::Quit => return Ok(Flow::Stop),
            Action::Ignore => return Ok(Flow::Go),
            Action::Scroll(by) => self.scroll.saturating_add_signed(by),
            Action::Top => 0,
        };
        let to = to.min(self.max_scroll);
        if to != self.scroll {
            self.scroll = to;
            self.draw()?;
        }
        Ok(Flow::Go)
    }
}

/// What a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Quit,
    /// Scroll the advice pane by this many lines.
    Scroll(i16),
    Top,
    Ignore,
}

/// q, Esc and Ctrl-C quit (raw mode turns Ctrl-C into a key, not a signal), and Ctrl-D as a
/// shell would; the arrows, j/k, the page keys and Home scroll the advice.
fn action(code: KeyCode, mods: KeyModifiers) -> Action {
    match code {
        KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('c') | KeyCode::Char('d') if mods.contains(KeyModifiers::CONTROL) => {
            Action::Quit
        }
        KeyCode::Down | KeyCode::Char('j') => Action::Scroll(1),
        KeyCode::Up | KeyCode::Char('k') => Action::Scroll(-1),
        KeyCode::PageDown | KeyCode::Char(' ') => Action::Scroll(10),
        KeyCode::PageUp => Action::Scroll(-10),
        KeyCode::Home => Action::Top,
        _ => Action::Ignore,
    }
}

impl View for Tui {
    fn show(&mut self, f: &Frame) -> io::Result<Flow> {
        self.log.add(f);
        self.last = Some(f.clone());
        self.draw()?;
        Ok(Flow::Go)
    }

    /// Read keys until `until`: a quit is answered at once, a resize redrawn at once; a
    /// termination signal (`kill`, a closed SSH session) or a terminal that hung up ends the
    /// view within a tenth of a second, the terminal given back.
    fn wait(&mut self, until: Instant) -> io::Result<Flow> {
        loop {
            if crate::host::process::termination_requested() {
                return Ok(Flow::Stop);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(Flow::Go);
            }
            let slice = (until - now).min(std::time::Duration::from_millis(100));
            let waiting = match process::wait_tty_input(slice) {
                TtyInput::HungUp => return Ok(Flow::Stop),
                // Crossterm then only collects what is there (a key, a resize's signal).
                TtyInput::Ready | TtyInput::Quiet => std::time::Duration::ZERO,
                TtyInput::Unknown => slice,
            };
            if !event::poll(waiting)? {
                continue;
            }
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    let flow = self.key(k.code, k.modifiers)?;
                    if flow == Flow::Stop {
                        return Ok(flow);
                    }
                }
                Event::Resize(..) => {
                    self.term.autoresize()?;
                    self.draw()?;
                }
                _ => {}
            }
        }
    }

    /// Give the terminal back, then say on the main screen what fired while it was up: the
    /// full-screen view leaves nothing behind otherwise.
    fn end(&mut self) {
        restore();
        if self.log.events.is_empty() {
            return;
        }
        let mut out = io::stdout();
        let _ = writeln!(out, "advice while watching:");
        for e in &self.log.events {
            let _ = writeln!(
                out,
                "  {} ({}): {} interval(s), {} to {}; last: {}",
                e.id,
                e.title,
                e.count,
                clock(&e.first_seen),
                clock(&e.last_seen),
                e.what
            );
            for fix in &e.fix {
                let _ = writeln!(out, "    fix: {fix}");
            }
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}

const RED: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
const YELLOW: Style = Style::new().fg(Color::Yellow);
const GREEN: Style = Style::new().fg(Color::Green);
const DIM: Style = Style::new().add_modifier(Modifier::DIM);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
const HEADER: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::UNDERLINED);

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

/// A pane: one rule on top with its title (borders all round cost two rows of figures).
fn pane(title: &str, alarm: bool) -> Block<'static> {
    Block::new().borders(Borders::TOP).title(Span::styled(
        title.to_string(),
        if alarm { RED } else { BOLD },
    ))
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

fn listeners(f: &Frame, area: Rect, buf: &mut Buffer) {
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
fn fill_cell(fill: f64, full: bool) -> Cell<'static> {
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

fn counters(f: &Frame, area: Rect, buf: &mut Buffer) {
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

fn gauges(f: &Frame, area: Rect, buf: &mut Buffer) {
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

fn bar(share: f64, width: usize) -> String {
    let n = (share.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!("{}{}", "█".repeat(n), "░".repeat(width - n))
}

fn cpus(f: &Frame, area: Rect, buf: &mut Buffer) {
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

fn ports(f: &Frame, area: Rect, buf: &mut Buffer) {
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

fn server(f: &Frame, area: Rect, buf: &mut Buffer) {
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

fn num(n: u64) -> Cell<'static> {
    Cell::from(Line::from(thousands(n)).right_aligned())
}

/// A rate as an operator reads it: 0.5, 12, 4,210.
fn rate(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x < 10.0 {
        format!("{x:.1}")
    } else {
        thousands(x.round() as u64)
    }
}

fn mib(bytes: f64) -> String {
    thousands((bytes.max(0.0) / 1048576.0).round() as u64)
}

fn seconds(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

fn duration(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// HH:MM:SS of an RFC 3339 time.
fn clock(t: &str) -> &str {
    t.get(11..19).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::advice::Advice;
    use crate::watch::frame::{CounterRow, CpuRow, GaugeRow, ListenerRow, SCHEMA};
    use crate::watch::sample::States;
    use ratatui::backend::TestBackend;

    fn head() -> Head {
        Head {
            host: "web-1".into(),
            scope: "every listener".into(),
            interval_s: 1.0,
        }
    }

    /// A frame of a listener whose queue is full while ListenOverflows moves: what the
    /// kernel shows when a server accepts more slowly than connections arrive.
    fn overflowing() -> Frame {
        let st = |e| States {
            established: e,
            syn_recv: 0,
            time_wait: 3,
            close_wait: 0,
            orphans: Some(0),
        };
        Frame {
            schema: SCHEMA.into(),
            time: "2026-12-07T03:04:05.000Z".into(),
            elapsed_s: 12.0,
            interval_s: 1.0,
            listeners: vec![
                ListenerRow {
                    local: "127.0.0.1:9001".into(),
                    queue: 3,
                    backlog: 2,
                    fill: 1.5,
                    full: true,
                    states: Some(st(5)),
                    queue_unavailable: None,
                },
                ListenerRow {
                    local: "0.0.0.0:22".into(),
                    queue: 0,
                    backlog: 128,
                    fill: 0.0,
                    full: false,
                    states: Some(st(1)),
                    queue_unavailable: None,
                },
            ],
            somaxconn: Some(4096),
            totals: Some(st(6)),
            connections_age_s: Some(0.0),
            counters: vec![
                CounterRow {
                    name: "TcpExt.ListenOverflows".into(),
                    total: 90_210,
                    delta: 4_210,
                    per_s: 4_210.0,
                    check: Some("linux.counter.listen_overflows".into()),
                    turned: true,
                },
                CounterRow {
                    name: "TcpExt.ListenDrops".into(),
                    total: 7,
                    delta: 0,
                    per_s: 0.0,
                    check: Some("linux.counter.listen_drops".into()),
                    turned: false,
                },
            ],
            gauges: vec![GaugeRow {
                name: "orphans".into(),
                value: 12,
                mark: 16_384,
                mark_is: "tcp_max_orphans / 4".into(),
                limit: Some(65_536),
                check: "linux.sockstat.orphans".into(),
                turned: false,
            }],
            cpus: (0..4)
                .map(|i| CpuRow {
                    cpu: format!("cpu{i}"),
                    softirq_pct: if i == 2 { 61.0 } else { 1.0 },
                    system_pct: 2.0,
                    softnet_dropped: 0,
                    time_squeeze: 0,
                })
                .collect(),
            ports: None,
            process: None,
            server: None,
            advice: vec![Advice {
                id: "linux.net.core.somaxconn".into(),
                title: "Accept queue cap".into(),
                what: "accept queue of 127.0.0.1:9001 full (3 of 2)".into(),
                why: "The kernel drops handshakes for a listener whose accept queue is full."
                    .into(),
                fix: vec![
                    "sysctl -w net.core.somaxconn=65535".into(),
                    "echo 'net.core.somaxconn = 65535' > /etc/sysctl.d/90-wstune.conf".into(),
                ],
                current: Some("4096".into()),
                target: Some("65535".into()),
            }],
            unavailable: [(
                "conntrack".to_string(),
                "nf_conntrack is not loaded".to_string(),
            )]
            .into(),
            notes: vec![],
        }
    }

    /// The screen as text, one row per line, drawn through ratatui's own test terminal.
    fn screen(f: Option<&Frame>, log: &Log, w: u16, h: u16) -> String {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|fr| {
            let area = fr.area();
            render(area, fr.buffer_mut(), f, &head(), log, 0);
        })
        .unwrap();
        let buf = term.backend().buffer();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn row_of<'a>(s: &'a str, needle: &str) -> &'a str {
        s.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no row with {needle:?}:\n{s}"))
    }

    #[test]
    fn a_full_listener_and_a_moving_counter_show_full_the_rate_and_the_fix() {
        let f = overflowing();
        let mut log = Log::default();
        log.add(&f);
        for (w, h) in [(200, 60), (100, 40)] {
            let s = screen(Some(&f), &log, w, h);
            let l = row_of(&s, "127.0.0.1:9001");
            assert!(l.contains("FULL") && l.contains("3/2"), "{w}x{h}: {l}\n{s}");
            assert!(!row_of(&s, "0.0.0.0:22").contains("FULL"), "{s}");
            let c = row_of(&s, "TcpExt.ListenOverflows");
            assert!(
                c.contains("4,210") && c.contains("90,210"),
                "{w}x{h}: {c}\n{s}"
            );
            assert!(
                s.contains("fix: sysctl -w net.core.somaxconn=65535"),
                "{w}x{h}:\n{s}"
            );
            assert!(s.contains("● linux.net.core.somaxconn"), "{s}");
            assert!(s.contains("web-1") && s.contains("03:04:05"), "{s}");
            assert!(s.contains("conntrack (nf_conntrack is not loaded)"), "{s}");
        }
    }

    #[test]
    fn the_full_listener_row_is_red_and_the_turned_counter_too() {
        let f = overflowing();
        let mut term = Terminal::new(TestBackend::new(200, 60)).unwrap();
        term.draw(|fr| {
            let area = fr.area();
            render(area, fr.buffer_mut(), Some(&f), &head(), &Log::default(), 0);
        })
        .unwrap();
        let buf = term.backend().buffer().clone();
        let find = |needle: &str| {
            (0..60u16)
                .find_map(|y| {
                    let row: String = (0..200u16).map(|x| buf[(x, y)].symbol()).collect();
                    row.find(needle)
                        .map(|i| (row[..i].chars().count() as u16, y))
                })
                .unwrap()
        };
        let (x, y) = find("TcpExt.ListenOverflows");
        assert_eq!(buf[(x, y)].fg, Color::Red);
        let (x, y) = find("TcpExt.ListenDrops");
        assert_ne!(buf[(x, y)].fg, Color::Red);
        let (x, y) = find("FULL");
        assert_eq!(buf[(x, y)].fg, Color::Red);
    }

    #[test]
    fn q_esc_and_ctrl_c_quit_and_a_plain_c_does_not() {
        let none = KeyModifiers::NONE;
        let ctrl = KeyModifiers::CONTROL;
        for (code, mods) in [
            (KeyCode::Char('q'), none),
            (KeyCode::Char('Q'), none),
            (KeyCode::Esc, none),
            (KeyCode::Char('c'), ctrl),
            (KeyCode::Char('d'), ctrl),
        ] {
            assert_eq!(action(code, mods), Action::Quit, "{code:?} {mods:?}");
        }
        assert_eq!(action(KeyCode::Char('c'), none), Action::Ignore);
        assert_eq!(action(KeyCode::Down, none), Action::Scroll(1));
        assert_eq!(action(KeyCode::Up, none), Action::Scroll(-1));
        assert_eq!(action(KeyCode::Home, none), Action::Top);
    }

    #[test]
    fn long_advice_wraps_under_its_label_and_scrolls() {
        let mut f = overflowing();
        f.advice[0].why = "word ".repeat(60).trim_end().to_string();
        let s = screen(Some(&f), &Log::default(), 80, 60);
        let why = s
            .lines()
            .position(|l| l.starts_with("  why: word"))
            .expect(&s);
        let next = s.lines().nth(why + 1).unwrap();
        assert!(next.starts_with("       word"), "{next:?}\n{s}");
        assert!(s.lines().all(|l| l.chars().count() <= 80));
        // A short screen cannot hold it all: render says how far it scrolls, and scrolled that
        // far the last line is in view.
        let area = Rect::new(0, 0, 80, 24);
        let mut buf = Buffer::empty(area);
        let max = render(area, &mut buf, Some(&f), &head(), &Log::default(), 0);
        assert!(max > 0);
        let mut buf = Buffer::empty(area);
        render(area, &mut buf, Some(&f), &head(), &Log::default(), max);
        let text: String = (0..24)
            .map(|y| (0..80).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
            .collect();
        assert!(text.contains("  fix: echo"), "{text}");
    }

    #[test]
    fn cpus_are_busiest_first_and_cut_to_what_fits() {
        let mut f = overflowing();
        f.cpus = (0..64)
            .map(|i| CpuRow {
                cpu: format!("cpu{i}"),
                softirq_pct: i as f64,
                system_pct: 0.0,
                softnet_dropped: 0,
                time_squeeze: 0,
            })
            .collect();
        let s = screen(Some(&f), &Log::default(), 200, 40);
        let first = s.lines().position(|l| l.contains("cpu63")).expect(&s);
        let next = s.lines().position(|l| l.contains("cpu62")).expect(&s);
        assert!(first < next, "{s}");
        assert!(!s.contains("cpu0 "), "{s}");
        assert!(s.contains("CPUs, busiest"), "{s}");
    }

    #[test]
    fn a_quiet_frame_says_so_and_names_what_fired_earlier() {
        let mut log = Log::default();
        log.add(&overflowing());
        let mut f = overflowing();
        f.advice.clear();
        f.listeners[0].queue = 0;
        f.listeners[0].fill = 0.0;
        f.listeners[0].full = false;
        f.counters[0].delta = 0;
        f.counters[0].per_s = 0.0;
        f.counters[0].turned = false;
        let s = screen(Some(&f), &log, 160, 50);
        assert!(!s.contains("FULL"), "{s}");
        assert!(s.contains("nothing turned this interval"), "{s}");
        assert!(s.contains("Earlier, quiet now:"), "{s}");
        assert!(row_of(&s, "Earlier").len() < 200);
        assert!(
            s.contains("linux.net.core.somaxconn (Accept queue cap): 1 interval(s)"),
            "{s}"
        );
    }

    #[test]
    fn before_the_first_frame_and_on_a_tiny_terminal_it_says_what_it_waits_for() {
        let s = screen(None, &Log::default(), 120, 30);
        assert!(
            s.contains("first frame comes after one interval (1 s)"),
            "{s}"
        );
        let s = screen(Some(&overflowing()), &Log::default(), 30, 8);
        assert!(s.contains("needs at least 40x10"), "{s}");
    }

    #[test]
    fn a_server_that_cannot_be_read_says_why() {
        let mut f = overflowing();
        f.server = Some(crate::watch::server::ServerFigures {
            url: "http://127.0.0.1:8000/metrics".into(),
            error: Some("not Prometheus text: the answer is HTML".into()),
            ..Default::default()
        });
        let s = screen(Some(&f), &Log::default(), 200, 60);
        assert!(s.contains("http://127.0.0.1:8000/metrics"), "{s}");
        assert!(s.contains("cannot read it: not Prometheus text"), "{s}");
    }
}
