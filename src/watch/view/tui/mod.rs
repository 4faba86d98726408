//! The full-screen view: a header (host, cadence, time, what cannot be read), the listeners'
//! accept queues, the kernel counters, the values against their marks, CPU time per core,
//! ephemeral ports per destination, the server's own figures (`--admin`), and the catalog's
//! advice for every row that turned.
//!
//! Drawing is a pure function of a frame ([`render`] into a ratatui [`Buffer`]), so what an
//! operator sees is tested without a terminal; [`Tui`] only owns the terminal (raw mode and
//! the alternate screen, given back on every way out: the end, an error, a panic) and the keys.

mod draw;
mod panes;
mod style;

pub use draw::{render, Head};

use crate::host::process::{self, TtyInput};
use crate::watch::advice::Log;
use crate::watch::frame::Frame;
use crate::watch::{Flow, View};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::{self, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use style::clock;

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

#[cfg(test)]
mod tests;
