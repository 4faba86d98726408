//! `check`, `apply`, `rollback` and `explain`: the host against a profile, and what each check
//! means. `TargetArgs` is what check and apply share (the profile, the process, the role).

use crate::report::{ListFormat, Show};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// A built-in profile (10k, 50k, 100k, 250k, 1m) or a path to a profile YAML file.
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// Also check the fd limits of this running process (/proc/PID/limits).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Also check LimitNOFILE of this systemd unit.
    #[arg(long, value_name = "NAME")]
    pub unit: Option<String>,
    /// Use this catalog file instead of the built-in one for the host's platform.
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    pub catalog: Option<String>,
    /// What the host does besides serving WebSockets, where the right setting depends on it
    /// (ephemeral ports, TIME_WAIT reuse, NodePorts): over the profile's `role:`; without
    /// either, a Kubernetes node is detected by its kubelet's configuration, else `server`.
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<crate::profile::Role>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Output format. Without it, people get the table on a terminal of 140 columns or more
    /// and one block per finding elsewhere (a narrower terminal, a pipe, a file); `table` asks
    /// for the table anywhere.
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<Format>,
    /// One block per finding, fix commands each whole on a line, even on a wide terminal.
    #[arg(long, conflicts_with = "format")]
    pub compact: bool,
    /// Say why each listed finding matters, under it (the catalog's why; `wstune explain ID`
    /// has the whole entry). The machine formats always carry it.
    #[arg(long)]
    pub why: bool,
    /// Exit 1 when there are warnings (and no failures).
    #[arg(long)]
    pub strict: bool,
    /// Table rows: `problems` (fails and warnings in full, grouped by area, passes counted) or
    /// `all` (every row). The machine formats always hold every row.
    #[arg(long, value_enum, default_value_t = Show::Problems)]
    pub show: Show,
    /// Read the kernel drop counters again after SECS seconds and fail on growth.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch: Option<u64>,
    /// Read a captured tree (from `wstune snapshot`) instead of this host: every /proc and /sys
    /// path is taken relative to DIR.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Write the report to FILE (atomically) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Where wstune's own files live (/etc/sysctl.d/60-wstune.conf, the journal), as given to apply.
    #[arg(long, value_name = "DIR", hide_short_help = true)]
    pub prefix: Option<PathBuf>,
    /// Also check a HAProxy or nginx configuration in front of the server: its idle timeout
    /// against the heartbeat; its connection cap, listen backlog and fd limit against the profile.
    #[arg(long, value_name = "FILE")]
    pub lb_config: Option<PathBuf>,
    /// The running proxy whose fd limit --lb-config compares (its master's pid); by default the
    /// running haproxy/nginx found, else this shell's limits.
    #[arg(
        long,
        value_name = "PID",
        requires = "lb_config",
        hide_short_help = true
    )]
    pub lb_pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A check id (`linux.net.core.somaxconn`, also `ID[eth0]` or `ID.boot` as a report shows
    /// it), a prefix (`linux.net.`), or a glob in quotes (`'*tw*'`).
    #[arg(value_name = "ID")]
    pub id: Option<String>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Print the plan and change nothing (no root needed).
    #[arg(long)]
    pub dry_run: bool,
    /// Change runtime values only; write no file.
    #[arg(long, conflicts_with = "persist_only")]
    pub runtime_only: bool,
    /// Write the persistent files only; change no runtime value.
    #[arg(long)]
    pub persist_only: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Measure for SECS seconds first (softirq time per CPU, softnet drops and squeezes): the
    /// NICs' queues are tuned only when that shows the kernel busy receiving.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch: Option<u64>,
    /// Tune this NIC's queues (RPS, RFS, XPS, pinned interrupts per the profile's `nic:`)
    /// without waiting for evidence; repeatable; a virtual link too.
    #[arg(long, value_name = "NAME")]
    pub nic: Vec<String>,
    /// Put every file wstune writes or journals (/etc/..., /var/lib/wstune) under DIR; runtime
    /// values still go to the live /proc/sys.
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// Read and write a captured tree instead of this host.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// List the journal entries and change nothing.
    #[arg(long, conflicts_with = "id")]
    pub list: bool,
    /// Roll back this entry instead of the newest one not yet rolled back.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Also restore values and files changed by hand since the apply (listed first; without
    /// --force rollback asks on a terminal and refuses otherwise).
    #[arg(long)]
    pub force: bool,
    /// Leave this runtime value as it is now and roll back everything else (a value changed by
    /// hand since the apply that should stay); repeatable. Its line in wstune's sysctl.d file
    /// goes back with the file.
    #[arg(long, value_name = "KEY", conflicts_with = "list")]
    pub keep: Vec<String>,
    /// The --prefix the changes were applied with.
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// The captured tree the changes were applied to.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for people.
    Table,
    /// The documented JSON object (docs/check.md, "Formats"; docs/check-report.schema.json).
    Json,
    /// JUnit XML: one testcase per check.
    Junit,
    /// Prometheus text exposition for node_exporter's textfile collector.
    Prometheus,
}
