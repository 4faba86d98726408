//! Parse, resolve, run, and map the outcome to an exit code. `main.rs` calls [`main`] only.

pub mod args;
pub mod confirm;
pub mod resolve;

use crate::cmd;
use args::{Cli, Command};
use clap::Parser;
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
}

pub fn main() -> ExitCode {
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
        Ok(code) => ExitCode::from(code),
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

fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Check(a) => cmd::check::run(resolve::check(&a)?, &a),
        Command::Apply(a) => cmd::apply::run(&a),
        Command::Rollback(a) => cmd::rollback::run(&a),
        Command::Bench(args::BenchCommand::Deflate(a)) => cmd::bench::deflate(&a),
        Command::Serve(a) => cmd::serve::run(&a),
        Command::Selftest(a) => cmd::selftest::run(&a),
        Command::Pool(a) => cmd::pool::run(&a),
        Command::Lb(a) => cmd::lb::run(&a),
        Command::SelftestWorker { spec } => crate::selftest::worker::main(&spec),
        Command::Snapshot(a) => cmd::snapshot::run(&a),
        Command::Profiles(p) => cmd::profiles::run(p),
        Command::Export(a) => cmd::export::run(&a),
        Command::Completions { shell } => cmd::docs::completions(shell),
        Command::Man { out } => cmd::docs::man(&out),
    }
}
