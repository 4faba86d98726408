//! Writing results: atomically to a file (never a half-written report for CI to pick up), or to
//! standard output; and whether colour is wanted.

use anyhow::Result;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Write `text` to `path` atomically (host/atomic.rs, the one writer): a report or export
/// file keeps the mode of the one it replaces, a new one gets 0666 less the umask.
///
/// This module writes where the user pointed `-o`, not the host's configuration, so it is the
/// one place outside host/ that names a path to write; the writing itself is host's.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    crate::host::atomic::write(
        path,
        text.as_bytes(),
        crate::host::atomic::Mode::LikeExisting,
    )
}

/// Check, before a long run, that `write_atomic(path, ..)` will be able to write there: the
/// directory exists and takes a new file, and `path` is not a directory. A load test or sweep
/// that ends on "cannot write" would lose minutes of work.
/// The probe is host/atomic.rs's, next to the writer it vouches for.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    crate::host::atomic::check_writable(path, flag)
}

/// Group digits in threes: 4210 -> "4,210".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Prometheus label value as the text exposition format wants it: backslash, double quote
/// and line feed escaped. Shared by every textfile writer (`check --format prometheus`,
/// `selftest --out-prometheus`), so no label can break a file node_exporter reads whole.
pub fn prometheus_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Standard output or `--output FILE`.
pub fn emit(output: Option<&Path>, text: &str) -> Result<()> {
    match output {
        Some(p) => write_atomic(p, text),
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a message.
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
    }
}

/// `--color`: when output is coloured. Chosen once, before a command runs (cli sets it from
/// the flag); every coloured output asks [`colour_on`], so the flag, NO_COLOR and the terminal
/// are weighed in this one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// Colour on a terminal, unless the environment says otherwise (see [`colour_on`]).
    Auto,
    /// Colour whatever stdout or stderr is (a pipe, `less -R`, a CI log that renders ANSI).
    Always,
    /// No colour anywhere.
    Never,
}

static COLOUR: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The `--color` of this run (Auto until cli sets it).
pub fn set_colour(c: Colour) {
    let v = match c {
        Colour::Auto => 0,
        Colour::Always => 1,
        Colour::Never => 2,
    };
    COLOUR.store(v, std::sync::atomic::Ordering::Relaxed);
}

fn colour_choice() -> Colour {
    match COLOUR.load(std::sync::atomic::Ordering::Relaxed) {
        1 => Colour::Always,
        2 => Colour::Never,
        _ => Colour::Auto,
    }
}

/// Whether text for a stream that is (or is not) a terminal gets colour. `--color always` or
/// `never` decide alone; under `auto`, the first that applies: NO_COLOR set to anything
/// (no-color.org) turns it off, CLICOLOR_FORCE set and not 0 turns it on even through a pipe,
/// CLICOLOR=0 turns it off (bixense.com/clicolors), else colour only on a terminal.
pub fn colour_on(terminal: bool) -> bool {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    match colour_choice() {
        Colour::Always => true,
        Colour::Never => false,
        Colour::Auto if set("NO_COLOR").is_some() => false,
        Colour::Auto if set("CLICOLOR_FORCE").is_some_and(|v| v != "0") => true,
        Colour::Auto if set("CLICOLOR").is_some_and(|v| v == "0") => false,
        Colour::Auto => terminal,
    }
}

/// Colour for standard output; never in a file written with `-o` (a report CI or another tool
/// reads, whatever `--color` says).
pub fn colour_wanted(to_file: bool) -> bool {
    !to_file && colour_on(std::io::stdout().is_terminal())
}

/// Colour for standard error (errors, serve's log lines).
pub fn colour_on_stderr() -> bool {
    colour_on(std::io::stderr().is_terminal())
}

/// Width for tables that do not go to a terminal: $COLUMNS, else 160.
pub fn table_width() -> u16 {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|w| *w >= 60)
        .unwrap_or(160)
}

/// A table in the project's style for standard output: the terminal's width on a terminal,
/// `table_width()` wide elsewhere (these tables carry no colour).
pub fn new_table() -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    if !std::io::stdout().is_terminal() {
        t.force_no_tty().set_width(table_width());
    }
    t
}

/// Print a line to stdout without panicking when it cannot be written: `wstune apply ... |
/// head -3` or `wstune rollback | head` must still finish changing the host (println! panics
/// on EPIPE, which stopped a rollback halfway). A lost line is remembered (`stdout_lost`), so a
/// prompt never asks about a plan nobody could read, and any error but a closed pipe (a full
/// disk behind `> plan.txt`) is said on stderr.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            $crate::output::stdout_failed(&e);
        }
    }};
}
pub(crate) use say;

static STDOUT_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `say!` could not write a line.
pub fn stdout_failed(e: &std::io::Error) {
    if !STDOUT_LOST.swap(true, std::sync::atomic::Ordering::Relaxed)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!(
            "wstune: warning: cannot write to standard output ({e}): the output is incomplete"
        );
    }
}

/// Whether a line of this run's output was lost.
pub fn stdout_lost() -> bool {
    STDOUT_LOST.load(std::sync::atomic::Ordering::Relaxed)
}
