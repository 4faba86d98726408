//! What the user typed, validated by clap but not yet resolved: no file is read and no OS
//! value is touched here (that happens in `resolve`).

pub mod abuse;
pub mod channels;
mod check;
mod export;
mod guide;
mod load;
mod profiles;
mod report;
pub mod tls;
mod token;
mod values;
mod watch;

pub use check::{ApplyArgs, CheckArgs, ExplainArgs, Format, RollbackArgs, TargetArgs};
pub use export::ExportArgs;
pub use guide::{command, examples, Example};
pub use load::{LoadArgs, LoadFormat};
pub use profiles::{ProfilesArgs, ProfilesCommand, ShowFormat};
pub use report::{ReportCommand, ReportMergeArgs, ReportWatchArgs};
pub use token::TokenArgs;
pub use watch::{WatchArgs, WatchFormat};

use crate::report::ListFormat;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Exit codes: 0 nothing failed; 1 only warnings and --strict; 2 a check failed;
3 usage or internal error; 4 a self-test that could not be judged (NOT PROVEN: the host
too noisy, or a --threshold's figure not measured).
Manual: `man wstune` and a page per command (`man wstune-check`); `wstune man --out DIR`
installs them.";

#[derive(Debug, Parser)]
#[command(name = "wstune", version, about = "Take a host and a WebSocket server from \"it runs\" to \"it scales to 100k+ connections\".", after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// When to colour: auto (on a terminal, unless NO_COLOR is set; CLICOLOR_FORCE colours
    /// pipes too), always, never. Files written with -o are never coloured.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value_t = ColorArg::Auto,
        hide_short_help = true
    )]
    pub color: ColorArg,
}

/// `--color`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// On a terminal, unless NO_COLOR is set (CLICOLOR_FORCE: through pipes too).
    Auto,
    /// Always, pipes included (`less -R`, a CI log that shows colour).
    Always,
    /// Never.
    Never,
}

// Parsed once per run: the size of the largest variant (serve's flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect this host (or a snapshot) against a tuning profile.
    #[command(
        long_about = "Inspect this host (or a captured tree) against a tuning profile: fd limits, accept \
        queues, TIME_WAIT, ephemeral ports, socket memory, memory for the target connections, NIC \
        queues and IRQs, kernel drop counters, and the sysctl.d files that apply at the next boot. \
        Every check comes from the declarative catalog (checks/*.yaml)."
    )]
    Check(CheckArgs),
    /// Explain a check: why it matters, the fix, its sources, by role and by profile.
    #[command(
        long_about = "Explain a check by its id (as a report prints it): its title, why it matters, \
        the fix, the sources it follows, how the host's role changes it, whether it is per network \
        namespace, and the target each built-in profile sets. A prefix (`linux.net.ipv4.`) or a glob \
        ('*tw*') lists the ids that match; no argument lists them all."
    )]
    Explain(ExplainArgs),
    /// Change what `check` found wrong, now and persistently, journaling the old values first.
    #[command(
        long_about = "Change what `check` found wrong, now (runtime values) and persistently \
        (/etc/sysctl.d/60-wstune.conf, /etc/security/limits.d/60-wstune.conf, a systemd drop-in with --unit). \
        The old values and files are journaled under /var/lib/wstune/journal before the first change; \
        a failure undoes everything; `wstune rollback` restores the last entry exactly."
    )]
    Apply(ApplyArgs),
    /// Put back what the last `apply` changed, exactly (or a chosen journal entry).
    Rollback(RollbackArgs),
    /// Benchmarks that need nothing but this binary.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run the embedded WebSocket server with the profile's settings (every one overridable).
    Serve(ServeArgs),
    /// Load-test a WebSocket server: open-loop echo latency, saturation, idle memory, connect
    /// storms, broadcast fan-out, compression; a verdict against the profile (0 pass, 2 miss, 4
    /// NOT PROVEN: the host was too noisy to judge).
    Selftest(SelftestArgs),
    /// Worker-pool sizes from blocking/CPU times: given, measured on a handler, or by experiment.
    #[command(
        long_about = "Size the offload pool with the tuning guide's rule, PoolSize = CPUCount + \
        (blocking_ms / cpu_ms) x CPUCount, from times you give (--blocking-ms, --cpu-ms), from times \
        measured on a real handler under load (--measure: a local server running --handler SPEC, or \
        a running server's --url and --admin), or by experiment (--sweep: the server restarted at \
        each --sizes value under the same load, the knee marked beside the formula's answer)."
    )]
    Pool(PoolArgs),
    /// Print a HAProxy or nginx configuration for WebSocket traffic, derived from the profile.
    Lb(LbArgs),
    /// Work with self-test reports: merge the shards of a run over several hosts into one.
    #[command(subcommand)]
    Report(ReportCommand),
    /// See the host while it happens: every listener's accept queue, the kernel counters that
    /// predict failure, with the catalog's advice beside each one that moves. Changes nothing.
    #[command(
        long_about = "See the host while it happens, refreshed every --interval: every listening \
        socket's accept queue against its backlog (netlink sock_diag) and the connections behind \
        it; the rates of the kernel counters that predict failure (ListenOverflows, ListenDrops, \
        TCPBacklogDrop, TCPAbortOnMemory, memory pressure, TIME_WAIT overflow, SYN cookies, \
        softnet drops and squeezes, conntrack drops); orphans, TIME_WAIT, TCP memory, conntrack \
        and file handles against their marks; ephemeral ports per destination; softirq and \
        system time per CPU; and, with --admin, the server's own figures. When a row moves or \
        crosses its mark, the catalog check that explains it is shown with its why and fix, \
        worded as `check` words them. A full-screen view on a terminal; --plain (or no \
        terminal) prints one line per interval, --format json one JSON object per interval; \
        --record FILE keeps the stream for `wstune report watch FILE`. It changes nothing on the \
        host."
    )]
    Watch(WatchArgs),
    /// Print a token for `serve --app channels --auth-secret-file`: an HS256 JWT with the
    /// channels it may subscribe and publish to, checked by the server's own verifier.
    Token(TokenArgs),
    /// One generator process of a self-test (started by `selftest`; not for people). Its spec
    /// is the first line of its input, not an argument: a CA bundle or a scenario file can pass
    /// Linux's 128 KiB cap on one argument, and a token must not show in `ps`.
    #[command(hide = true)]
    SelftestWorker,
    /// Capture exactly the files `check` reads into a directory, for `check --root DIR` elsewhere.
    Snapshot(SnapshotArgs),
    /// List or show the built-in tuning profiles.
    Profiles(ProfilesArgs),
    /// Write the profile's host settings for another tool: sysctl.d, limits.d, systemd,
    /// Ansible, Kubernetes, docker, compose, JSON.
    #[command(
        long_about = "Write the profile's host settings in the form another tool wants, computed \
        the way `apply` computes them: the profile's target, never lower than what this host (or the \
        --root tree) already has. Formats: sysctl (a sysctl.d file), limits (limits.d), systemd (a \
        drop-in with LimitNOFILE for --unit), systemd-unit (wstune-serve.service and .socket, wstune-check.service \
        and .timer into -o DIR), ansible (a playbook), kubernetes (a Deployment with the pod's sysctls, \
        unsafe ones marked, and a DaemonSet for the kernel-wide ones), docker (`docker run` flags), \
        compose (a service fragment), json; watch-systemd and watch-daemonset run the headless \
        `wstune watch --serve` (a hardened unit for this host, a DaemonSet for every node)."
    )]
    Export(ExportArgs),
    /// Print a shell completion script: `source <(wstune completions bash)`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (wstune.1 and one per subcommand) into a directory.
    Man {
        /// An existing directory (e.g. /usr/local/share/man/man1).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A built-in profile or a profile file: the defaults for every setting below.
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// Address to listen on (0.0.0.0 for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
    /// Port for WebSocket clients (0: any free port, printed at start).
    #[arg(long, default_value_t = 9001)]
    pub port: u16,
    /// What the server does with messages.
    #[arg(long, value_enum, default_value_t = AppArg::Echo)]
    pub app: AppArg,
    /// Simulated handler work: echo | cpu:MICROS | block:MILLIS | mixed:CPU_US,BLOCK_MS.
    #[arg(long, default_value = "echo", hide_short_help = true)]
    pub handler: String,
    /// I/O worker threads (profile: server.io_workers; 0 = one per core).
    #[arg(long, hide_short_help = true)]
    pub workers: Option<usize>,
    /// Microseconds an I/O thread with dense traffic may wait before it sleeps, so messages
    /// that arrive meanwhile share one wake-up; each thread waits only while it measures that
    /// waiting saves CPU without slowing its clients (profile: server.coalesce_us; 0 = serve
    /// each at once, at most 2000).
    #[arg(long, value_name = "MICROS", hide_short_help = true)]
    pub coalesce_us: Option<u64>,
    /// Offload pool threads (profile: server.offload_pool_size; 0 = one per core).
    #[arg(long, hide_short_help = true)]
    pub offload_pool: Option<usize>,
    /// Offload queue length (profile: server.offload_queue_size).
    #[arg(long, hide_short_help = true)]
    pub offload_queue: Option<usize>,
    /// Connections accepted before upgrades get 503 (profile: server.max_connections).
    #[arg(long, hide_short_help = true)]
    pub max_connections: Option<usize>,
    /// Largest frame accepted, bytes (profile: server.max_frame_bytes).
    #[arg(long, hide_short_help = true)]
    pub max_frame: Option<usize>,
    /// Largest message accepted, bytes (profile: server.max_message_bytes).
    #[arg(long, hide_short_help = true)]
    pub max_message: Option<usize>,
    /// Fragment outgoing messages above this many bytes (profile: server.fragment_bytes).
    #[arg(long, hide_short_help = true)]
    pub fragment: Option<usize>,
    /// Per-connection send-queue cap, bytes (profile: server.send_queue_bytes).
    #[arg(long, hide_short_help = true)]
    pub send_queue: Option<usize>,
    /// Close code for consumers over the send-queue cap.
    #[arg(long, default_value_t = 1008, value_parser = parse_backpressure_code, hide_short_help = true)]
    pub backpressure_close: u16,
    /// Seconds between server pings (profile: server.heartbeat.interval_secs).
    #[arg(long, hide_short_help = true)]
    pub heartbeat_interval: Option<u64>,
    /// Seconds of silence before a connection is closed (profile: server.heartbeat.timeout_secs).
    #[arg(long, hide_short_help = true)]
    pub heartbeat_timeout: Option<u64>,
    /// Seconds a client has to send its upgrade request (slowloris guard).
    #[arg(long, default_value_t = 10, hide_short_help = true)]
    pub handshake_timeout: u64,
    /// Allowed Origin (repeat for several); none allows any.
    #[arg(long = "origin", value_name = "ORIGIN", hide_short_help = true)]
    pub origins: Vec<String>,
    /// Subprotocol the server speaks (repeat, in preference order).
    #[arg(long = "subprotocol", value_name = "NAME", hide_short_help = true)]
    pub subprotocols: Vec<String>,
    /// Admin listener for /healthz and /metrics ("off" to disable).
    ///
    /// With --app channels and an API key, also the backends' HTTP API (/api/publish,
    /// /api/batch, /api/channels).
    #[arg(long, default_value = "127.0.0.1:9002")]
    pub admin: String,
    /// Several accept loops on one port with SO_REUSEPORT.
    #[arg(long, hide_short_help = true)]
    pub reuseport: bool,
    /// How many accept loops with --reuseport.
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    pub acceptors: usize,
    /// Server processes on one port: N, auto or cores (profile: server.processes).
    ///
    /// They share the port (SO_REUSEPORT) under a supervisor that restarts them and relays
    /// broadcast/channels between them; auto starts enough for the fd limit, cores one per
    /// core. Linux only.
    #[arg(long, value_name = "N|auto|cores", value_parser = crate::profile::Processes::parse)]
    pub processes: Option<crate::profile::Processes>,
    /// Offer permessage-deflate (profile: server.deflate.enabled).
    #[arg(long, conflicts_with = "no_deflate", hide_short_help = true)]
    pub deflate: bool,
    /// Never negotiate permessage-deflate.
    #[arg(long, hide_short_help = true)]
    pub no_deflate: bool,
    /// Largest LZ77 window the server compresses with, 9..=15 (profile: server.deflate.window_bits).
    #[arg(long, value_parser = clap::value_parser!(u8).range(9..=15), hide_short_help = true)]
    pub deflate_window_bits: Option<u8>,
    /// zlib memLevel, 1..=9 (profile: server.deflate.mem_level).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=9), hide_short_help = true)]
    pub deflate_mem_level: Option<u8>,
    /// zlib level, 0..=9 (profile: server.deflate.level).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9), hide_short_help = true)]
    pub deflate_level: Option<u8>,
    /// Messages below this many bytes go uncompressed (profile: server.deflate.threshold_bytes).
    #[arg(long, hide_short_help = true)]
    pub deflate_threshold: Option<usize>,
    /// Reset the compressor after every message and hold no context between them.
    #[arg(long, hide_short_help = true)]
    pub deflate_no_context_takeover: bool,
    /// Server-wide cap on memory held by inflated messages at once, bytes; a compressed message
    /// that would pass it is closed with 1013 (profile: server.deflate.inflate_budget_bytes;
    /// default max(64 MiB, 4 x --max-message)). At least --max-message.
    #[arg(long, value_name = "BYTES", hide_short_help = true)]
    pub inflate_budget: Option<usize>,
    /// Server-wide memory budget, bytes: partial frames, reassembly, inflate output, queued
    /// output and offloaded payloads together; a connection whose charge would pass it is
    /// closed with 1013 (profile: server.budget.memory_bytes; default an eighth of the host's
    /// memory beyond what --max-connections idle connections need, at least 64 MiB).
    #[arg(long, value_name = "BYTES", hide_short_help = true)]
    pub memory_budget: Option<usize>,
    /// What one connection may hold of the memory budget, bytes; past it, 1009 (profile:
    /// server.budget.conn_share_bytes; default 3 x --max-message + --max-frame + --send-queue).
    #[arg(long, value_name = "BYTES", hide_short_help = true)]
    pub conn_memory_share: Option<usize>,
    /// Seconds a started message or frame has to arrive whole; then 1008 (profile:
    /// server.budget.message_timeout_secs; default 30; 0: no bound).
    #[arg(long, value_name = "SECS", hide_short_help = true)]
    pub message_timeout: Option<u64>,
    /// Seconds a send queue above --send-queue (one large message) has to drain below it,
    /// whatever the peer sends meanwhile; then the backpressure close (profile:
    /// server.budget.drain_timeout_secs; default 30; 0: no bound).
    #[arg(long, value_name = "SECS", hide_short_help = true)]
    pub drain_timeout: Option<u64>,
    /// Largest inflated / compressed ratio of a message once past 1 MiB of output; then 1009
    /// (profile: server.budget.inflate_ratio_limit; default 200; 0: no bound).
    #[arg(long, value_name = "RATIO", hide_short_help = true)]
    pub inflate_ratio_limit: Option<u32>,
    /// Inflate output per connection per second, bytes; past it the connection's reading
    /// pauses (profile: server.budget.inflate_rate_bytes; default 32 MiB; 0: no bound).
    #[arg(long, value_name = "BYTES", hide_short_help = true)]
    pub inflate_rate: Option<u64>,
    /// PEM certificate chain: serve wss:// (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Seconds graceful shutdown waits for clients after the last close (1012) was sent.
    #[arg(long, default_value_t = 5, hide_short_help = true)]
    pub shutdown_grace: u64,
    /// Seconds a drain (SIGTERM, SIGINT, POST /api/drain) spreads its 1012 closes over, evenly
    /// and in a random order; 0 closes every connection at once (default: the connections held
    /// at the profile's server.drain.reconnect_rate a second, at most server.drain.max_over_secs).
    #[arg(long, value_name = "SECS", hide_short_help = true)]
    pub drain_over: Option<u64>,
    /// Seconds /readyz answers 503 before a drain's first close, so load balancers stop sending
    /// clients first (profile: server.drain.delay_secs; default 5).
    #[arg(long, value_name = "SECS", hide_short_help = true)]
    pub drain_delay: Option<u64>,
    /// Log lines as text (for people) or one JSON object per line (for log shippers).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, hide_short_help = true)]
    pub log_format: LogFormat,
    /// Log level: error, warn, info (default), debug (one event per connection opened,
    /// refused and closed, with its peer address and id), trace. Without it, RUST_LOG is used
    /// (per-module filters too, e.g. RUST_LOG=embedded_server=debug).
    #[arg(long, value_name = "LEVEL", value_parser = ["error", "warn", "info", "debug", "trace"], hide_short_help = true)]
    pub log_level: Option<String>,
    /// Span broadcast and channels over every node on this backplane: a publish on one node
    /// reaches subscribers on all of them, once, and channel presence counts every node.
    /// redis://HOST:PORT[/DB] (one Redis), redis+sentinel://H:26379[,H2:26379]/MASTER[/DB]
    /// (the master Sentinel names, followed across failovers), redis+cluster://H:7000[,H2:7001]
    /// (Redis Cluster, sharded pub/sub) or nats://H:4222[,H2:4222] (NATS).
    #[arg(long, value_name = "URL", hide_short_help = true)]
    pub cluster: Option<String>,
    /// Check this host, start the server, load-test it: one report, one verdict.
    ///
    /// Runs `check`, starts the server with these settings, load-tests it with the profile's
    /// workload sized to this host, prints one report and exits with the verdict (0 pass, 2
    /// miss, 4 NOT PROVEN: the host was too noisy to judge the load).
    #[arg(long)]
    pub self_test: bool,
    /// Self-test your own server instead of the built-in echo: wstune starts "PROGRAM ARGS"
    /// (shell quoting, no shell) with the profile's tuning in WSTUNE_LISTEN and
    /// WSTUNE_SERVER_CONFIG (embedded_server::wstune::Launch reads them), waits for it to
    /// listen, load-tests it and stops its process group at the end.
    #[arg(
        long,
        value_name = "PROGRAM ARGS",
        requires = "self_test",
        hide_short_help = true
    )]
    pub command: Option<String>,
    /// Self-test: judge a captured tree (`check --root DIR`) as the host instead of this one.
    /// For tests and for rehearsing a verdict; the load still runs here.
    #[arg(long, hide = true, value_name = "DIR")]
    pub host_root: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub limits: abuse::LimitArgs,
    #[command(flatten)]
    pub channels: channels::ChannelArgs,
    #[command(flatten)]
    pub tls_serve: tls::ServeTlsArgs,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Every flag at its default: `wstune serve` with nothing typed. The defaults are the
/// attributes above, read through clap itself, so they stay in one place.
impl Default for ServeArgs {
    fn default() -> Self {
        use clap::FromArgMatches;
        let cmd = <ServeArgs as Args>::augment_args(clap::Command::new("serve"));
        let none: [&str; 0] = [];
        ServeArgs::from_arg_matches(&cmd.get_matches_from(none))
            .expect("every serve flag has a default or is optional")
    }
}

#[derive(Debug, Args)]
pub struct LbArgs {
    /// Which proxy.
    #[arg(value_enum)]
    pub kind: crate::lb::Kind,
    /// The wstune servers behind it, HOST:PORT,HOST:PORT (HAProxy's health check asks GET
    /// /readyz on the same port, unless --check-port names another).
    #[arg(long)]
    pub backends: String,
    /// The backends' admin port (serve --admin, reachable from the proxy): HAProxy's health
    /// check asks GET /readyz there instead of on the traffic port.
    #[arg(long, value_name = "PORT")]
    pub check_port: Option<u16>,
    /// Where the proxy listens.
    #[arg(long, default_value = "0.0.0.0:80", value_name = "ADDR:PORT")]
    pub bind: String,
    /// Terminate TLS at the proxy with this PEM certificate (HAProxy: chain and key in one file,
    /// or the key beside it as FILE.key).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<String>,
    /// The private key (nginx).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<String>,
    /// Send a reconnecting client back to the same backend, when the application keeps
    /// per-client state: a cookie (HAProxy) or the source address.
    #[arg(long, value_enum)]
    pub sticky: Option<crate::lb::Sticky>,
    /// The profile whose heartbeat and connections size the timeouts and limits.
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// Write to FILE (atomically) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PoolArgs {
    /// Average time a handled message waits (database, HTTP call), milliseconds.
    #[arg(long, allow_negative_numbers = true)]
    pub blocking_ms: Option<f64>,
    /// Average on-CPU time of a handled message, milliseconds.
    #[arg(long, allow_negative_numbers = true)]
    pub cpu_ms: Option<f64>,
    /// Cores to size for (default: this host's).
    #[arg(long)]
    pub cores: Option<u64>,
    /// Measure the handler's wall and CPU time under load instead of taking them as given.
    #[arg(long)]
    pub measure: bool,
    /// Restart a local server at each --sizes value under the same load; mark the knee.
    #[arg(long)]
    pub sweep: bool,
    /// The handler to measure on a local server: cpu:MICROS, block:MILLIS, or both joined with
    /// + (block:20+cpu:1000us).
    #[arg(long, value_name = "SPEC", hide_short_help = true)]
    pub handler: Option<String>,
    /// A running server to measure (with --admin for its /metrics).
    #[arg(long)]
    pub url: Option<String>,
    /// The running server's admin address (http://HOST:PORT), for the handler times.
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,
    /// Measure your own server: wstune starts "PROGRAM ARGS" (shell quoting, no shell) with
    /// WSTUNE_LISTEN, WSTUNE_ADMIN and WSTUNE_SERVER_CONFIG (its offload pool size per
    /// measurement), reads the pool's timings from its /metrics, and stops it after each.
    #[arg(long, value_name = "PROGRAM ARGS", conflicts_with_all = ["handler", "url", "admin"])]
    pub command: Option<String>,
    /// With --command: the text each client sends (one in flight per client); each reply,
    /// whatever it says, counts as its answer. Default: a 100-byte binary message to echo.
    #[arg(long, value_name = "TEXT", requires = "command")]
    pub message: Option<String>,
    /// Pool sizes for --sweep.
    #[arg(long, default_value = "2,4,8,16,32,64")]
    pub sizes: String,
    /// Concurrent clients (one message in flight each) for --measure and --sweep.
    #[arg(long, default_value_t = 256)]
    pub conns: usize,
    /// Seconds of load per measurement (after a 1 s warm-up).
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// The profile --write-profile copies.
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// Write a copy of --profile with the recommended pool settings (the sweep's knee when
    /// sweeping, else the formula's size); `wstune serve --profile OUT.yaml` runs it.
    #[arg(long, value_name = "OUT.yaml")]
    pub write_profile: Option<PathBuf>,
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// The server to measure, ws://HOST:PORT/PATH.
    #[arg(long)]
    pub url: String,
    /// Where `broadcast` subscribes and publishes (a server that sends what it receives to
    /// every client); default --url.
    #[arg(long, value_name = "URL", hide_short_help = true)]
    pub broadcast_url: Option<String>,
    /// broadcast: spread the subscribers over these servers (repeat; one per generator
    /// process in turn), e.g. the nodes of a `serve --cluster`; the publisher uses
    /// --broadcast-url.
    #[arg(long, value_name = "URL", hide_short_help = true)]
    pub subscribe_url: Vec<String>,
    /// The server's process id, for its CPU and memory (/proc/PID). Repeat for a server made
    /// of several processes, e.g. a TLS proxy and the backend behind it: their CPU and memory
    /// are added up, and none of them counts as another process's noise.
    #[arg(long)]
    pub pid: Vec<u32>,
    /// Negotiate permessage-deflate on every connection (JSON payloads), not only in the
    /// `deflate` scenario.
    #[arg(long, hide_short_help = true)]
    pub deflate: bool,
    /// The profile whose self-test targets (payload, rate, p99) apply.
    #[arg(long, short = 'p', default_value = crate::profile::DEFAULT, value_name = "NAME|PATH")]
    pub profile: String,
    /// Run scripted sessions from a YAML file instead of the built-in scenarios: client
    /// populations, each with its own path, headers, subprotocol and token, running steps
    /// (send, expect, subscribe, publish, think, idle); each waiting step is timed and can be
    /// named in a threshold (POPULATION.STEP.p99). The format: docs/selftest.md.
    #[arg(long, value_name = "FILE.yaml", hide_short_help = true)]
    pub script: Option<PathBuf>,
    /// Run one slice of a load spread over several generator hosts, INDEX/COUNT (0/4 .. 3/4):
    /// this host opens its share of --conns and writes a report that `wstune report merge`
    /// combines with the others' into one verdict. Needs --start-at.
    #[arg(long, value_name = "I/N", hide_short_help = true)]
    pub shard: Option<String>,
    /// With --shard: when the load starts, Unix seconds (the same on every shard) or +SECS from
    /// now. Each shard connects first, then waits for it; later scenarios follow on a fixed
    /// schedule. Hosts need synchronised clocks (NTP, chrony).
    #[arg(long, value_name = "UNIX_SECS|+SECS", hide_short_help = true)]
    pub start_at: Option<String>,
    /// Send the server nothing before the load. By default one message on one connection, a
    /// second one listening, shows whether it echoes, broadcasts or speaks the channels
    /// protocol, and a scenario that cannot work against it is refused before anything runs.
    #[arg(long)]
    pub no_probe: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AppArg {
    Echo,
    Broadcast,
    Channels,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// permessage-deflate round trips per message size and context mode, beside the sgcWebSockets guide's figures.
    Deflate(BenchDeflateArgs),
}

#[derive(Debug, Args)]
pub struct BenchDeflateArgs {
    /// Message sizes, comma-separated (1k = 1024 bytes).
    #[arg(long, default_value = "1k,4k,16k,64k")]
    pub sizes: String,
    /// Round trips per size, stream and mode.
    #[arg(long, default_value_t = 10_000)]
    pub iterations: usize,
    /// LZ77 window bits (9..=15).
    #[arg(long, default_value_t = 15)]
    pub window_bits: u8,
    /// zlib memLevel (1..=9).
    #[arg(long, default_value_t = 8)]
    pub mem_level: u8,
    /// zlib compression level (0..=9; 1 is the server's default, 6 zlib's).
    #[arg(long, default_value_t = 1)]
    pub level: u8,
    /// Instead of round trips: the cost of broadcasting the ticker stream to this many
    /// recipients, compressed once for all vs once per connection with context takeover.
    #[arg(long, value_name = "RECIPIENTS", conflicts_with = "contexts")]
    pub broadcast: Option<usize>,
    /// Instead of round trips: what this many connections' own contexts cost (context
    /// takeover): each gets a compressor and a decompressor and one message of the first
    /// --sizes size; CPU per context created, page faults and resident bytes per connection.
    #[arg(long, value_name = "CONNECTIONS")]
    pub contexts: Option<usize>,
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Directory to create; it must not exist yet (or be empty).
    pub out_dir: PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

fn parse_backpressure_code(s: &str) -> Result<u16, String> {
    match s {
        "1008" => Ok(1008),
        "1013" => Ok(1013),
        _ => Err("use 1008 (policy violation) or 1013 (try again later)".into()),
    }
}
