//! `wstune token`: the flags of a channels token to mint.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The server's secret, alone in a file (else $WSTUNE_AUTH_SECRET; never a flag's value,
    /// which `ps` would show).
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Channels the token may subscribe to: a name, PREFIX.* or * (repeat, or comma-separate).
    #[arg(
        long = "channels",
        value_name = "PATTERN",
        value_delimiter = ',',
        required = true
    )]
    pub channels: Vec<String>,
    /// Channels the token may publish to over the WebSocket (default: none).
    #[arg(long = "publish", value_name = "PATTERN", value_delimiter = ',')]
    pub publish: Vec<String>,
    /// How long the token is valid: seconds, or with a unit (90s, 15m, 1h, 7d).
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub ttl: String,
    /// The audience (`aud`), for a server started with --auth-audience.
    #[arg(long, value_name = "AUD")]
    pub aud: Option<String>,
    /// The subject (`sub`): who the token is for, as your logs should name them.
    #[arg(long, value_name = "SUB")]
    pub sub: Option<String>,
    /// The server's --auth-max-lifetime, seconds: the token is checked against it before it
    /// is printed, as the server will check it.
    #[arg(long, value_name = "SECS")]
    pub max_lifetime: Option<u64>,
}
