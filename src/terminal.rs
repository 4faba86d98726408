//! How wide the terminal standard output is written to, when it is one. Read through the
//! `terminal_size` crate (the one clap already uses for help), so no ioctl is written here.

use std::io::IsTerminal;

/// The columns of the terminal standard output is, or None when it is not a terminal. A
/// terminal that does not say (a pty whose size was never set reports 0 columns or rows)
/// counts as $COLUMNS wide, else 80: the narrow guess keeps every line on screen.
pub fn columns() -> Option<u16> {
    let out = std::io::stdout();
    if !out.is_terminal() {
        return None;
    }
    let told = terminal_size::terminal_size_of(&out).map(|(w, _)| w.0);
    let from_env = || {
        std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<u16>().ok())
    };
    Some(
        told.filter(|w| *w > 0)
            .or_else(from_env)
            .filter(|w| *w > 0)
            .unwrap_or(80),
    )
}
