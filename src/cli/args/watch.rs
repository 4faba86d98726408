//! `watch`: the host's queues and counters while it runs.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Seconds between readings (0.2 to 60).
    #[arg(long, short = 'i', value_name = "SECS", default_value_t = 1.0, value_parser = parse_interval)]
    pub interval: f64,
    /// Only the listeners on this TCP port (repeatable).
    #[arg(long, value_name = "PORT")]
    pub port: Vec<u16>,
    /// Only the listeners this process holds, and its descriptors against its RLIMIT_NOFILE.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// A server's Prometheus endpoint to show beside the kernel's figures: a `wstune serve`
    /// admin address (host:port) or http://host:port/path.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// One line per interval instead of the full-screen view (the default without a terminal).
    #[arg(long, conflicts_with = "format")]
    pub plain: bool,
    /// `json`: one frame per line on standard output (docs/watch-frame.schema.json).
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<WatchFormat>,
    /// Also write every frame to FILE (JSON lines), for `wstune report watch FILE`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Stop after N frames (a bounded run: CI, scripts).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Run without a view and serve the figures on ADDR: /metrics (Prometheus text), /events
    /// (the advice as JSON lines, one per check, first and last seen), /healthz.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["plain", "format"])]
    pub serve: Option<String>,
    /// The profile whose targets the advice names (the fixes say "raise somaxconn to TARGET").
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// Use this catalog file instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WatchFormat {
    Json,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (e.g. 1 or 0.5)"))?;
    if !(0.2..=60.0).contains(&v) {
        return Err(format!("{v} s is out of range: give 0.2 to 60 seconds"));
    }
    Ok(v)
}
