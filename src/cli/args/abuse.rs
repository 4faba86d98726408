//! `serve`'s abuse-limit flags (each overrides its `server.limits` key); resolved with the
//! serve configuration (`cli::resolve::serve::abuse`).

/// The abuse-limit flags of `wstune serve` (each overrides its `server.limits` key).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitArgs {
    /// Concurrent connections per client address (IPv6: per /64); more get HTTP 503. 0: no cap
    /// [profile: server.limits.max_connections_per_ip]
    #[arg(
        long,
        value_name = "N",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub max_conns_per_ip: Option<u64>,
    /// New connections per second per client address, RATE or RATE:BURST; more get HTTP 429.
    /// 0: off [profile: server.limits.connection_rate_per_ip / _burst_per_ip]
    #[arg(
        long,
        value_name = "RATE[:BURST]",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub conn_rate_per_ip: Option<String>,
    /// New connections per second server-wide, RATE or RATE:BURST; more get HTTP 429. 0: off
    /// [profile: server.limits.connection_rate / _burst]
    #[arg(
        long,
        value_name = "RATE[:BURST]",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub conn_rate: Option<String>,
    /// Messages per second per connection, RATE or RATE:BURST, counted per frame (each
    /// fragment, ping and pong counts; a close does not); a connection over it is closed
    /// with --message-rate-close. 0: off [profile: server.limits.message_rate / _burst]
    #[arg(
        long,
        value_name = "RATE[:BURST]",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub message_rate: Option<String>,
    /// Close code for a connection over its message rate: 1008 (policy violation) or 1013
    /// (try again later) [profile: server.limits.message_rate_close; default 1008]
    #[arg(
        long,
        value_name = "CODE",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub message_rate_close: Option<u16>,
    /// An address or network no limit applies to (the load balancer); repeat for more. Replaces
    /// the profile's list [profile: server.limits.exempt]
    #[arg(
        long = "limit-exempt",
        value_name = "CIDR",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub exempt: Vec<String>,
    /// A proxy whose PROXY protocol header (v1/v2) or X-Forwarded-For names the client; repeat
    /// for more. A PROXY header from any other peer is refused. None by default. Replaces the
    /// profile's list [profile: server.limits.trusted_proxies]
    #[arg(
        long = "trusted-proxy",
        value_name = "CIDR",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub trusted_proxies: Vec<String>,

    // Accept-time resource guards (embedded_server::accept): they protect descriptors.
    /// Connections still in their handshake (TLS, upgrade request) at once; past it the
    /// oldest that has sent no request yet is closed to make room (none: the newcomer is
    /// refused). 0 (default): a quarter of the smaller of --max-connections and the open-file
    /// limit, at least 64
    #[arg(
        long,
        value_name = "N",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub max_pending_handshakes: Option<usize>,
    /// File descriptors kept free below the open-file limit (ulimit -n): connections accepted
    /// within this many of it are closed at once, so the admin port and handshakes under way
    /// still get descriptors. Default: a sixteenth of the limit, 32 to 1024; 0: off
    #[arg(
        long,
        value_name = "N",
        help_heading = "Abuse limits",
        hide_short_help = true
    )]
    pub fd_reserve: Option<usize>,
}
