//! `export`: the profile's host settings in the form another tool wants.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A built-in profile (10k, 50k, 100k, 250k, 1m) or a path to a profile YAML file.
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// The form to write.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub to: crate::export::Format,
    /// Write to FILE (atomically) instead of standard output; for systemd-unit, a directory.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Compute the values on a captured tree (from `wstune snapshot`) instead of this host.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The unit a `--to systemd` drop-in is for.
    #[arg(long, value_name = "NAME", default_value = "wstune-serve.service")]
    pub unit: String,
    /// Use this catalog file instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<String>,
    /// The host's role the values follow (as for check and apply).
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<crate::profile::Role>,
    /// A NIC whose boot files `--to nic` renders (every physical one when none is named), or
    /// that the `--to ansible` play also installs them for; repeatable. Computed here, valid
    /// for hosts of this one's hardware whose NIC has this name.
    #[arg(long = "nic", value_name = "NAME")]
    pub nics: Vec<String>,
    /// --to selftest-job / selftest-ansible: generator hosts (shards) the load is split over.
    #[arg(long, value_name = "N")]
    pub shards: Option<usize>,
    /// --to selftest-job / watch-daemonset: the image the pods run (with wstune on its PATH).
    #[arg(
        long,
        value_name = "IMAGE",
        default_value = "ghcr.io/wstune/wstune:latest"
    )]
    pub image: String,
    /// --to selftest-job / selftest-ansible: seconds from writing the Job (or starting the play)
    /// to the load's start, room for every shard to connect.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub start_in: u64,
    /// --to selftest-job / selftest-ansible: the `wstune selftest` flags every shard runs
    /// with, after `--` (e.g. -- --url ws://10.0.0.5:9000/ --conns 200000).
    #[arg(last = true, value_name = "SELFTEST_FLAGS")]
    pub selftest_args: Vec<String>,
}
