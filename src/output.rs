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

/// Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org).
pub fn colour_wanted(to_file: bool) -> bool {
    !to_file
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Width for tables that do not go to a terminal: $COLUMNS, else 160.
pub fn table_width() -> u16 {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|w| *w >= 60)
        .unwrap_or(160)
}

/// A table in the project's style for standard output: the terminal's width and colours on a
/// terminal, plain and `table_width()` wide elsewhere.
pub fn new_table() -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    if !colour_wanted(false) {
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
