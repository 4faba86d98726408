//! Parse, resolve, run, and map the outcome to an exit code. `main.rs` calls [`main`] only.
//!
//! The one place that knows both sides: `args` (what was typed) -> `resolve` (one typed
//! request per command) -> `cmd::*` (returns an [`Outcome`]) -> [`exit`]. Nothing outside
//! this module imports it.

pub mod args;
pub mod docs;
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
    /// A self-test that would have been judged, but its host was too noisy to stand behind
    /// either a PASS or a MISS.
    pub const NOT_PROVEN_NOISY: u8 = 4;
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
        Outcome::Inconclusive => exit::NOT_PROVEN_NOISY,
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
        Command::SelftestWorker { spec } => {
            crate::selftest::worker::main(&spec).map(|()| Outcome::Ok)
        }
        Command::Snapshot(a) => cmd::snapshot::run(resolve::snapshot(&a)),
        Command::Profiles(p) => cmd::profiles::run(resolve::profiles(&p)),
        Command::Export(a) => cmd::export::run(resolve::export(&a)?),
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::Man { out } => docs::man(Cli::command(), &out),
    }
}

// One reader of import paths for both crates' layering tests (embedded-server's module-graph
// test reads its sources the same way).
#[cfg(test)]
#[path = "../../embedded-server/src/import_names.rs"]
mod import_names;

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
    }

    /// The engine's shape, kept: only `cli` (and main.rs, through `cli::main`) knows clap's
    /// args, and no command calls another (shared work is in `engine`). Both were broken once:
    /// 11 files in one cli <-> cmd import cycle; and serve's limit and channels flags were once
    /// clap structs outside cli.
    #[test]
    fn nothing_outside_cli_imports_it_and_no_command_imports_another() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let commands: Vec<String> = std::fs::read_dir(src.join("cmd"))
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.strip_suffix(".rs").map(str::to_string)
            })
            .filter(|n| n != "mod")
            .collect();
        let mut bad = Vec::new();
        let mut stack = vec![src.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                if !rel.ends_with(".rs") || rel.starts_with("cli/") || rel == "main.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let from_crate = names_under(&text, "crate");
                if from_crate.iter().any(|n| n == "cli") || uses(&text, "super::cli") {
                    bad.push(format!("{rel} imports cli"));
                }
                // Flags are declared in cli/ only (value enums a flag parses into may live
                // beside their meaning, and `cmd/docs.rs` renders the finished clap::Command).
                let flag_attributes = [
                    "clap::Args",
                    "clap::Parser",
                    "clap::Subcommand",
                    "#[arg(",
                    "#[command(",
                ];
                if flag_attributes.iter().any(|a| text.contains(a)) {
                    bad.push(format!("{rel} declares command-line flags outside cli"));
                }
                // Commands are the top: what they share lives below them (engine, selftest),
                // so nothing else may import one (selftest once read a command's metrics).
                if !rel.starts_with("cmd/") && from_crate.iter().any(|n| n == "cmd") {
                    bad.push(format!("{rel} imports a command"));
                }
                if rel.starts_with("cmd/") && rel != "cmd/mod.rs" {
                    let from_super = names_under(&text, "super");
                    if from_crate.iter().any(|n| n == "cmd")
                        || from_super.iter().any(|n| commands.contains(n))
                    {
                        bad.push(format!("{rel} imports another command"));
                    }
                }
            }
        }
        assert!(bad.is_empty(), "{bad:#?}");
    }

    use super::import_names::names_under;

    #[test]
    fn grouped_and_sibling_imports_are_seen() {
        let names = |t, r| names_under(t, r);
        assert_eq!(names("use crate::cli::args;", "crate"), ["cli"]);
        assert_eq!(
            names("use crate::{engine, cli::{args, resolve}, x};", "crate"),
            ["engine", "cli", "x"]
        );
        assert_eq!(names("use crate::{\n    cmd::apply,\n};", "crate"), ["cmd"]);
        assert_eq!(names("use super::{apply, *};", "super"), ["apply"]);
        assert_eq!(names("super::check::run(r)", "super"), ["check"]);
        assert!(names("use supercrate::cli;", "crate").is_empty());
    }

    /// `path` named as a whole path segment (`super::client` is not `super::cli`).
    fn uses(text: &str, path: &str) -> bool {
        text.match_indices(path).any(|(i, _)| {
            !text[i + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        })
    }
}
