//! The one way apply and rollback ask before they change the host (a library module, not part of
//! `cli`: the commands that ask live in `cmd`, which never imports `cli`).

use anyhow::{bail, Result};
use std::io::{BufRead, IsTerminal, Write};

/// The refusal when there is no terminal to ask on and no `--yes`.
pub const PASS_YES: &str =
    "refusing to change the host without confirmation: not a terminal; pass --yes. Nothing was changed.";

/// Ask `question` on the terminal and go on only on a yes. Without a terminal, refuse with
/// `no_terminal` (which says what to pass instead): a script must never hang on a prompt.
pub fn confirm(question: &str, no_terminal: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!("{no_terminal}");
    }
    // The question is about what was just printed; if that never arrived, a yes is blind.
    if crate::output::stdout_lost() {
        bail!("refusing to ask about a plan that could not be shown (standard output is closed): run it with the output on a terminal or in a file, or pass --yes. Nothing was changed.");
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if !matches!(line.trim(), "y" | "Y" | "yes") {
        bail!("aborted: nothing was changed");
    }
    Ok(())
}
