//! `serve --processes N`: N server processes on one port (SO_REUSEPORT spreads the
//! connections), under a supervisor, the way nginx worker processes and Envoy's concurrency
//! work.
//!
//! The supervisor owns the listening sockets (`listen.rs`: one SO_REUSEPORT socket per accept
//! loop of each process, created and listening before any child starts, or systemd's from
//! LISTEN_FDS), so a process that exits never closes an accept queue; it starts each process as
//! `wstune serve` with its slot's sockets inherited (`WSTUNE_LISTEN_FDS`) and its own
//! configuration in the environment (the supervisor's, with an admin on 127.0.0.1:0 and its
//! share of the connections, threads and memory budget: `ServeConfig::for_supervised_process`)
//! and `WSTUNE_PROCESS=i`, restarts one that dies (100 ms doubling to 5 s, reset after 30 s
//! alive; `process.rs`, `keep.rs`), replaces them one at a time on SIGHUP/SIGUSR2 (`roll.rs`), forwards
//! SIGTERM/SIGINT so every process drains, serves one admin endpoint (/healthz per process,
//! /metrics summed, the processes that are gone included: `tally.rs`) and relays `broadcast`/`channels` between the processes (`relay.rs`)
//! unless `--cluster` makes each process a node on Redis;
//! with channel history on, it also assigns every publication's stream position and keeps the
//! history (`history.rs`).

#[cfg(target_os = "linux")]
pub mod api;
#[cfg(target_os = "linux")]
pub mod history;
#[cfg(target_os = "linux")]
mod keep;
#[cfg(target_os = "linux")]
pub mod listen;
pub mod metrics;
#[cfg(target_os = "linux")]
mod process;
#[cfg(target_os = "linux")]
pub mod relay;
#[cfg(target_os = "linux")]
mod roll;
#[cfg(target_os = "linux")]
mod run;
#[cfg(target_os = "linux")]
mod state;
#[cfg(target_os = "linux")]
pub mod tally;

/// Why `addr` cannot be listened on, in words that say what to change: an address not on this
/// host is not a port in use.
pub fn listen_error(addr: std::net::SocketAddr, flag: &str, e: &std::io::Error) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "cannot listen on {addr}: {} is not an address of this host ({flag}; `ip -br addr` lists them): pick one of those, or 0.0.0.0 (:: for IPv6) for all",
            addr.ip()
        ),
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: the port is in use: stop what holds it (ss -ltnp 'sport = :{}') or pick another --port",
            addr.port()
        ),
        _ => anyhow::anyhow!(
            "cannot listen on {addr}: {}",
            crate::host::input::io_words(e)
        ),
    }
}

/// Why the admin listener (`--admin ADDR`: /healthz, /readyz, /metrics, the API) cannot listen,
/// with the flag and the fixes. Its default port is the same for every `wstune serve`, so a
/// second server on one host meets a port in use here first.
pub fn admin_listen_error(addr: std::net::SocketAddr, e: &std::io::Error) -> anyhow::Error {
    let what = format!(
        "cannot listen on --admin {addr} (the admin listener: /healthz, /readyz, /metrics)"
    );
    match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "{what}: the port is in use (another `wstune serve` on this host has the same default admin port?): stop what holds it (ss -ltnp 'sport = :{}'), give this server another with --admin {}:PORT (--admin {}:0 picks a free one and prints it), or --admin off",
            addr.port(),
            addr.ip(),
            addr.ip()
        ),
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "{what}: {} is not an address of this host (`ip -br addr` lists them): give --admin one of those, 127.0.0.1:PORT to keep it local, or --admin off",
            addr.ip()
        ),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "{what}: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE): give --admin a port above 1023, or --admin off"
        ),
        _ => anyhow::anyhow!("{what}: {}", crate::host::input::io_words(e)),
    }
}
#[cfg(target_os = "linux")]
pub use run::supervise;
#[cfg(target_os = "linux")]
pub use state::Supervision;

/// The environment variable that makes `serve` a supervised process: its index.
pub const ENV_PROCESS: &str = "WSTUNE_PROCESS";
/// The inherited relay socket's fd number in a supervised process.
pub const ENV_RELAY_FD: &str = "WSTUNE_RELAY_FD";
/// The file of TLS session-ticket keys every supervised process shares
/// (`embedded_server::shared_tickets`): a client resumes on any process, across rolls too.
pub const ENV_TICKET_KEYS: &str = "WSTUNE_TICKET_KEYS";
