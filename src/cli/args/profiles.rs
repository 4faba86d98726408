//! `profiles`: the built-in profiles listed, or one shown as written or resolved.

use crate::report::ListFormat;
use clap::{Args, Subcommand, ValueEnum};

/// `wstune profiles` alone lists the profiles, as `profiles list` does.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProfilesArgs {
    #[command(subcommand)]
    pub command: Option<ProfilesCommand>,
    /// The list's format, when no subcommand is given.
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Subcommand)]
pub enum ProfilesCommand {
    /// One line per built-in profile.
    List {
        #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Print a profile (built-in name or file) in full.
    Show {
        /// A built-in profile name or a path to a profile YAML file.
        name: String,
        #[arg(long, short = 'f', value_enum, default_value_t = ShowFormat::Yaml)]
        format: ShowFormat,
        /// Print every value in effect, with what the profile `extends` merged in, instead of
        /// the file's own text (JSON is always resolved).
        #[arg(long)]
        resolved: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShowFormat {
    Yaml,
    Json,
}
