//! Parse, resolve, run, and map the outcome to an exit code. `main.rs` calls [`main`] only.
//!
//! The one place that knows both sides: `args` (what was typed) -> `resolve` (one typed
//! request per command) -> `cmd::*` (returns an [`Outcome`]) -> [`exit`]. Nothing outside
//! this module imports it.

pub mod args;
pub mod docs;
pub mod reference;
pub mod resolve;

use crate::cmd;
use crate::outcome::Outcome;
use args::{Cli, Command};
use clap::FromArgMatches;
use std::process::ExitCode;

/// The exit-code policy, in one place.
pub mod exit {
    /// Nothing failed.
    pub const OK: u8 = 0;
    /// Only warnings, and `--strict` was given.
    pub const WARN: u8 = 1;
    /// At least one check failed.
    pub const FAIL: u8 = 2;
    /// Usage or internal error: the report could not be made.
    pub const ERROR: u8 = 3;
    /// A self-test that could not be judged, and nothing judged failed: its host was too
    /// noisy to stand behind either a PASS or a MISS, or a threshold's figure was not
    /// measured (or rests on too few samples).
    pub const NOT_PROVEN: u8 = 4;
    /// Stopped at once by a second signal during a graceful stop: 128 + the signal's number
    /// (130 for SIGINT, 143 for SIGTERM), what a shell shows for a process that signal ended.
    pub const SIGNALLED: u8 = 128;
}

pub fn main() -> ExitCode {
    // A profile key under an older name is read, and said so before the command's output
    // (not with eprintln!: a closed stderr must not stop the command).
    crate::profile::on_warning(|w| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "wstune: warning: {w}");
    });
    let cli = match parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are successes; every usage error is exit 3, not clap's 2,
            // so CI can tell "the host failed" from "the command was wrong".
            if !e.use_stderr() {
                let text = e.render();
                let text = if crate::output::colour_wanted(false) {
                    text.ansi().to_string()
                } else {
                    text.to_string()
                };
                let _ = crate::output::emit(None, &text);
                return ExitCode::from(exit::OK);
            }
            print_clap_error(&e);
            return ExitCode::from(exit::ERROR);
        }
    };
    match run(cli) {
        Ok(outcome) => ExitCode::from(code(outcome)),
        Err(e) => {
            print_error(&format!("{e:#}"));
            ExitCode::from(exit::ERROR)
        }
    }
}

/// What was typed, with `--color` applied before anything is printed (clap's own help and
/// errors included: it is looked for in argv first, since a usage error stops the parse).
fn parse(argv: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let argv: Vec<std::ffi::OsString> = argv.into_iter().collect();
    crate::output::set_colour(colour_in(&argv));
    let mut cmd = args::command();
    let matches = cmd.try_get_matches_from_mut(argv)?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    crate::output::set_colour(cli.color.into());
    Ok(cli)
}

/// The last `--color WHEN` (or `--color=WHEN`) before `--`, when its value is one of
/// `--color`'s; else auto (clap then reports the bad value itself).
fn colour_in(argv: &[std::ffi::OsString]) -> crate::output::Colour {
    use clap::ValueEnum as _;
    let mut found = args::ColorArg::Auto;
    let words: Vec<&str> = argv.iter().skip(1).filter_map(|a| a.to_str()).collect();
    for (i, w) in words.iter().enumerate() {
        if *w == "--" {
            break;
        }
        let value = match w.strip_prefix("--color") {
            Some("") => words.get(i + 1).copied(),
            Some(v) => v.strip_prefix('='),
            None => None,
        };
        if let Some(c) = value.and_then(|v| args::ColorArg::from_str(v, false).ok()) {
            found = c;
        }
    }
    found.into()
}

impl From<args::ColorArg> for crate::output::Colour {
    fn from(c: args::ColorArg) -> Self {
        match c {
            args::ColorArg::Auto => crate::output::Colour::Auto,
            args::ColorArg::Always => crate::output::Colour::Always,
            args::ColorArg::Never => crate::output::Colour::Never,
        }
    }
}

/// The one prefix every error wstune prints starts with, clap's usage errors included:
/// `wstune: error: ...`. The program's name first, as Unix tools write it, so a line in a cron
/// mail, a CI log or the journal says which of the tools in a pipeline failed; `error:` styled
/// as clap styles it, on a terminal.
fn error_prefix() -> String {
    if crate::output::colour_on_stderr() {
        let s = clap::builder::styling::Styles::styled()
            .get_error()
            .to_owned();
        format!("wstune: {s}error:{s:#}")
    } else {
        "wstune: error:".to_string()
    }
}

/// An error of wstune's own: the prefix, then any further line indented under it.
fn print_error(message: &str) {
    use std::io::Write as _;
    let mut text = String::new();
    for (i, line) in message.lines().enumerate() {
        if i == 0 {
            text.push_str(&format!("{} {line}\n", error_prefix()));
        } else {
            text.push_str(&format!("  {line}\n"));
        }
    }
    // Not eprintln!: a closed stderr must not turn an error into a panic.
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// A usage error as clap words it (its `tip:` lines, the usage), under wstune's prefix: clap's
/// own `error:` becomes `wstune: error:`.
fn print_clap_error(e: &clap::Error) {
    use std::io::Write as _;
    let styled = e.render();
    let text = if crate::output::colour_on_stderr() {
        styled.ansi().to_string()
    } else {
        styled.to_string()
    };
    let _ = std::io::stderr().write_all(format!("wstune: {text}").as_bytes());
}

/// The exit code of what a command concluded (an error is [`exit::ERROR`], above).
fn code(o: Outcome) -> u8 {
    match o {
        Outcome::Ok => exit::OK,
        Outcome::Warnings => exit::WARN,
        Outcome::Failed => exit::FAIL,
        Outcome::Inconclusive => exit::NOT_PROVEN,
        Outcome::Interrupted { signal } => {
            exit::SIGNALLED.saturating_add(signal.clamp(0, 127) as u8)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Check(a) => cmd::check::run(resolve::check(&a)?),
        Command::Explain(a) => cmd::explain::run(resolve::explain(&a)),
        Command::Apply(a) => cmd::apply::run(resolve::apply(&a)?),
        Command::Rollback(a) => cmd::rollback::run(resolve::rollback(&a)?),
        Command::Bench(args::BenchCommand::Deflate(a)) => {
            cmd::bench::deflate(&resolve::bench_deflate(&a))
        }
        Command::Serve(a) => cmd::serve::run(resolve::serve(&a)?),
        Command::Selftest(a) => cmd::selftest::run(resolve::selftest(&a)?),
        Command::Pool(a) => cmd::pool::run(resolve::pool(&a)?),
        Command::Lb(a) => cmd::lb::run(resolve::lb(&a)?),
        Command::Token(a) => cmd::token::run(resolve::token(&a)?),
        Command::Watch(a) => cmd::watch::run(resolve::watch(&a)?),
        Command::Report(args::ReportCommand::Merge(a)) => {
            cmd::report::merge(resolve::report_merge(&a)?)
        }
        Command::Report(args::ReportCommand::Watch(a)) => {
            cmd::report::watch(resolve::report_watch(&a)?)
        }
        Command::SelftestWorker => crate::selftest::worker::main().map(|()| Outcome::Ok),
        Command::Snapshot(a) => cmd::snapshot::run(resolve::snapshot(&a)),
        Command::Profiles(p) => cmd::profiles::run(resolve::profiles(&p)),
        Command::Export(a) => cmd::export::run(resolve::export(&a)?),
        Command::Completions { shell } => docs::completions(args::command(), shell),
        Command::Man { out } => docs::man(args::command(), &out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<std::ffi::OsString> {
        words.iter().map(Into::into).collect()
    }

    /// `--color` is found before the parse (a usage error must follow it too): the last one
    /// before `--`, in either spelling; a bad value leaves auto for clap to refuse.
    #[test]
    fn colour_is_read_from_argv_before_the_parse() {
        use crate::output::Colour;
        let c = |w: &[&str]| colour_in(&argv(w));
        assert_eq!(c(&["wstune", "check"]), Colour::Auto);
        assert_eq!(c(&["wstune", "--color", "always", "check"]), Colour::Always);
        assert_eq!(
            c(&["wstune", "check", "--color=never", "--bogus"]),
            Colour::Never
        );
        assert_eq!(
            c(&["wstune", "check", "--color", "never", "--color", "always"]),
            Colour::Always
        );
        assert_eq!(
            c(&["wstune", "check", "--color", "sometimes"]),
            Colour::Auto
        );
        assert_eq!(
            c(&["wstune", "export", "--to", "json", "--", "--color", "always"]),
            Colour::Auto
        );
    }

    /// The policy README's table documents: 0 nothing failed, 1 warnings with --strict, 2 a
    /// failure (3, an error, is `main`'s).
    #[test]
    fn each_outcome_has_its_documented_exit_code() {
        assert_eq!(code(Outcome::Ok), 0);
        assert_eq!(code(Outcome::Warnings), 1);
        assert_eq!(code(Outcome::Failed), 2);
        assert_eq!(exit::ERROR, 3);
        assert_eq!(code(Outcome::Inconclusive), 4);
        assert_eq!(code(Outcome::Interrupted { signal: 2 }), 130);
        assert_eq!(code(Outcome::Interrupted { signal: 15 }), 143);
    }
}
