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
use clap::{CommandFactory, Parser};
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are successes; every usage error is exit 3, not clap's 2,
            // so CI can tell "the host failed" from "the command was wrong".
            let code = if e.use_stderr() {
                exit::ERROR
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(outcome) => ExitCode::from(code(outcome)),
        Err(e) => {
            for (i, line) in format!("{e:#}").lines().enumerate() {
                if i == 0 {
                    eprintln!("wstune: error: {line}");
                } else {
                    eprintln!("  {line}");
                }
            }
            ExitCode::from(exit::ERROR)
        }
    }
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
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::Man { out } => docs::man(Cli::command(), &out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
