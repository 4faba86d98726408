//! The load generator's flags, shared by `selftest` and `serve --self-test`.

use clap::Args;
use std::path::PathBuf;

/// The load generator's settings, shared by `selftest` and `serve --self-test`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Load test (selftest, serve --self-test)")]
pub struct LoadArgs {
    /// Workload to run (repeat for several); restart only when named.
    ///
    /// echo-rate, echo-sat, idle, storm, tls-handshake, broadcast, deflate, restart (never by
    /// default: it restarts the server).
    #[arg(long = "scenario", value_enum, value_name = "NAME")]
    pub scenarios: Vec<crate::selftest::Scenario>,
    /// Client connections (default: selftest 1000; serve --self-test: the profile's, scaled to the host).
    #[arg(long)]
    pub conns: Option<usize>,
    /// Messages per second per connection for echo-rate and deflate (default: the profile's).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Payload bytes per message (default: the profile's).
    #[arg(long, hide_short_help = true)]
    pub size: Option<usize>,
    /// Seconds each scenario runs.
    #[arg(long)]
    pub secs: Option<f64>,
    /// Seconds of load before each echo-rate, deflate and echo-sat measurement starts (not
    /// counted: the first burst on fresh connections is a start-up cost, not the steady state).
    /// Default 1; for echo-rate one period of the per-connection rate, at most 5; for deflate
    /// one period and a second, at most 15 (every connection's contexts built before measuring)
    #[arg(long, hide_short_help = true)]
    pub warmup: Option<f64>,
    /// echo-sat: messages in flight per connection.
    #[arg(long, default_value_t = 1, hide_short_help = true)]
    pub inflight: usize,
    /// broadcast: messages published (rounds). Default 10; serve --self-test publishes fewer
    /// when its cores cannot fan out 10 rounds to every connection within --secs
    #[arg(long, hide_short_help = true)]
    pub rounds: Option<usize>,
    /// Generator processes (0: as many as the fd limit requires, at least one).
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    pub generators: usize,
    /// Loopback source addresses to spread clients over (0: as many as the port range needs).
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    pub sources: usize,
    /// The local addresses the connections come from, round-robin (ADDR,ADDR,...): this host's
    /// own addresses or aliases, so one generator opens more connections to one server than
    /// one address's ephemeral ports allow (~50k at the default range).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ADDR,...",
        conflicts_with = "sources",
        hide_short_help = true
    )]
    pub src_ips: Vec<std::net::IpAddr>,
    /// Connections opened per second while ramping up (0: as fast as 256 handshakes in flight per process go).
    #[arg(long, default_value_t = 0.0, hide_short_help = true)]
    pub ramp: f64,
    /// storm and tls-handshake: handshakes in flight at once, over all generator processes
    /// (tls-handshake: at most --conns).
    #[arg(long, default_value_t = 512, hide_short_help = true)]
    pub storm_concurrency: usize,
    /// A server that answers requests instead of echoing (your own, e.g. with --command): the
    /// text every echo-rate, echo-sat, storm and deflate message carries; each reply,
    /// whatever it says, answers the connection's oldest unanswered message. Default: a
    /// timestamped payload the server must send back as it came.
    #[arg(long, value_name = "TEXT", hide_short_help = true)]
    pub message: Option<String>,
    /// Judge every measurement as it came, however disturbed the host was: no re-measure and
    /// no NOT PROVEN for noise (steal and other processes' CPU are still measured and
    /// reported). For a box known to be shared, where a verdict under noise is wanted anyway.
    #[arg(long, hide_short_help = true)]
    pub accept_noise: bool,
    /// A pass/fail criterion of your own, beside the profile's (repeat): SCOPE.METRIC OP
    /// VALUE, e.g. 'echo-rate.p99 < 5ms'.
    ///
    /// Judged beside the profile's checks; more examples: '*.error_rate <= 0.1%',
    /// 'broadcast.delivered >= 99.9%'. SCOPE is a scenario or * (every one that measures it);
    /// METRIC is p50, p90, p99, p999, max, mean, service.p99, round.p99, connect.p99, tls.p99,
    /// error_rate, delivered, connected, resumed, rate, server_cpu, cpu_per_msg, connect_rate or
    /// handshakes_per_core; restart takes back.p99 (close to new upgrade), all_back, refused,
    /// not_back, listen_overflows and peak_accept_rate; a --script step is POPULATION.STEP.p99
    /// (or .met, the share of its expectations met). A figure not measured, or a percentile over too few samples, is not
    /// judged: exit 4, NOT PROVEN
    #[arg(long = "threshold", value_name = "EXPR", value_parser = parse_threshold)]
    pub thresholds: Vec<crate::selftest::threshold::Threshold>,
    /// Judge the load by your --threshold criteria instead of the profile's p99 and throughput
    /// targets (finishing, errors and server closes are still checked).
    #[arg(long, hide_short_help = true)]
    pub no_default_checks: bool,
    /// The report's format (default: table, or -o's file extension)
    ///
    /// The report's format: table (for people; one block per scenario on a narrow terminal
    /// or when piped), json (docs/selftest-report.schema.json) or html (the page --report
    /// writes). Default: table, or with -o the file's extension (.json, .html)
    #[arg(
        long = "format",
        short = 'f',
        value_enum,
        value_name = "FORMAT",
        id = "load_format"
    )]
    pub format: Option<LoadFormat>,
    /// Write the report to FILE (atomically: never half-written) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write a self-contained HTML page with the charts.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// An earlier run's JSON report (--format json) to compare with: p50, p99, rate and server
    /// CPU per message, old -> new, in the table, the JSON and the HTML page (shown, not judged).
    #[arg(long, value_name = "OLD.json", hide_short_help = true)]
    pub baseline: Option<PathBuf>,
    /// Also write the figures as Prometheus text (atomically), for node_exporter's textfile
    /// collector: the verdict and its scope, latency quantiles, rates, errors, CPU, each check.
    #[arg(long, value_name = "FILE.prom", hide_short_help = true)]
    pub out_prometheus: Option<PathBuf>,
    #[command(flatten)]
    pub tls: super::tls::TlsClientArgs,
    /// restart: how `serve --self-test` disrupts the server it started: sigterm (one process:
    /// stopped as on SIGTERM, a new one started on the same port; the default for one process),
    /// sigterm-child (--processes N: one server process is sent SIGTERM and the supervisor
    /// starts another), sighup (the supervisor, for a rolling restart of all its processes;
    /// the default for several), drain-api (POST /api/drain on its admin listener) or
    /// command:CMD
    #[arg(long, value_name = "HOW", value_parser = parse_restart_by, conflicts_with = "restart_cmd", hide_short_help = true)]
    pub restart_by: Option<crate::selftest::restart::RestartBy>,
    /// restart: the command that restarts your server, run with `sh -c` 2 s into the scenario,
    /// e.g. 'systemctl restart ws' or 'kubectl rollout restart deploy/ws'; it must exit 0
    #[arg(long, value_name = "CMD", hide_short_help = true)]
    pub restart_cmd: Option<String>,
    /// restart: drain your server instead: POST to its drain endpoint (http://ADMIN/api/drain,
    /// answered with a 2xx; the key from $WSTUNE_API_KEY as a bearer token)
    #[arg(long, value_name = "URL", conflicts_with_all = ["restart_cmd", "restart_by"], hide_short_help = true)]
    pub drain_url: Option<String>,
}

/// The self-test report's formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadFormat {
    /// A table for people.
    Table,
    /// The report as JSON.
    Json,
    /// The self-contained HTML page with the charts.
    Html,
}

impl LoadFormat {
    /// The format a report file's name asks for: .json, .html (or .htm); None for any other.
    pub fn of_path(path: &std::path::Path) -> Option<LoadFormat> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("json") => Some(LoadFormat::Json),
            Some("html" | "htm") => Some(LoadFormat::Html),
            _ => None,
        }
    }
}

/// A `--restart-by`, read by the self-test's own parser.
fn parse_restart_by(s: &str) -> Result<crate::selftest::restart::RestartBy, String> {
    s.parse()
}

/// A `--threshold`, read by the self-test's own parser: its errors name the scenario, metric
/// or unit that is wrong and what to write instead.
pub(super) fn parse_threshold(s: &str) -> Result<crate::selftest::threshold::Threshold, String> {
    s.parse()
}
