//! `wstune report`: what can be done with self-test reports after their run.

use super::ListFormat;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Merge the JSON reports of a run's shards (`selftest --shard I/N` on several hosts) into
    /// one report and one verdict: latencies merged exactly from the shards' histograms, counts
    /// and rates added up, the server's figures from the shard(s) given --pid.
    #[command(
        long_about = "Merge the JSON reports of a run's shards (`selftest --shard I/N --start-at T \
        --format json` on several hosts) into one report and one verdict, as if one generator had \
        run the whole load: the latency percentiles come from the shards' HdrHistograms added \
        together (exact, never averaged), counts and rates are summed, and the server's CPU and \
        memory come from the shard(s) that were given --pid. Reports of different runs (URL, \
        scenarios, shard count, start time) are refused. Exit codes as selftest's."
    )]
    Merge(ReportMergeArgs),
    /// Render a recording of `wstune watch --record FILE` as one self-contained HTML page: a
    /// chart per counter that moved, the listeners' accept queues, the marks, softirq per CPU,
    /// the server's figures, and the moments advice fired with the catalog's fix.
    #[command(
        long_about = "Render a recording of `wstune watch --record FILE` as one self-contained \
        HTML page (no script, font or stylesheet from elsewhere: it reads offline): what the \
        recording covers, the advice that fired with each check's first and last moment, count \
        and fix, the listener table (last frame and deepest queue seen), and a time series per \
        counter that moved (per second), per listener queue fill, per value against its mark, \
        softirq per CPU and the server's own figures, with the moments advice fired shaded on \
        every chart. A recording cut short by a kill renders up to its last whole line and says \
        so. Changes nothing on the host."
    )]
    Watch(ReportWatchArgs),
}

#[derive(Debug, Args)]
pub struct ReportWatchArgs {
    /// The recording (`wstune watch --record FILE`).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write the page here (atomically) instead of to standard output.
    #[arg(long, short = 'o', value_name = "OUT.html")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportMergeArgs {
    /// The shards' JSON reports, one per shard.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Merge what there is when some shards' reports are missing: the verdict is then NOT
    /// PROVEN at best (the run did not run at its size).
    #[arg(long)]
    pub partial: bool,
    /// A pass/fail criterion judged on the merged run (repeat), as selftest's --threshold.
    #[arg(long = "threshold", value_name = "EXPR", value_parser = super::load::parse_threshold)]
    pub thresholds: Vec<crate::selftest::threshold::Threshold>,
    /// Judge by the --threshold criteria instead of the profile's p99 and throughput targets.
    #[arg(long)]
    pub no_default_checks: bool,
    /// Judge every window as measured, however noisy its shard's host was.
    #[arg(long)]
    pub accept_noise: bool,
    /// Output format for the merged report on stdout.
    #[arg(long = "format", short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
    /// Also write the self-contained HTML page of the merged run.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// An earlier run's JSON report to compare the merged run with (shown, not judged).
    #[arg(long, value_name = "OLD.json")]
    pub baseline: Option<PathBuf>,
    /// Also write the merged run's figures as Prometheus text, as selftest's --out-prometheus.
    #[arg(long, value_name = "FILE.prom")]
    pub out_prometheus: Option<PathBuf>,
}
