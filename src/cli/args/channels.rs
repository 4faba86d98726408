//! `serve`'s channels flags (each overrides its `server.channels` key); resolved with the serve
//! configuration (`cli::resolve::serve::channels`). Secrets come from a file or the
//! environment, never from the command line (`ps` and shell history show arguments to every
//! local user).

use std::path::PathBuf;

/// The channels flags of `wstune serve` (each overrides its `server.channels` key).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelArgs {
    /// File holding the key backends send to the admin listener's HTTP API (/api/*, as
    /// `Authorization: Bearer KEY`); without a key the API is off. Else $WSTUNE_API_KEY
    /// [profile: server.channels.api_key_file]
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub api_key_file: Option<PathBuf>,
    /// File holding the HS256 secret (32+ bytes) that signs the JWTs clients must present on
    /// upgrade (?token= or Authorization: Bearer); a token's `channels` claim lists what it
    /// may subscribe to. Else $WSTUNE_AUTH_SECRET [profile: server.channels.auth.secret_file]
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub auth_secret_file: Option<PathBuf>,
    /// Channels one connection may subscribe to at once; more get an error op [profile:
    /// server.channels.max_subscriptions; default 256]
    #[arg(
        long,
        value_name = "N",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub max_subscriptions: Option<usize>,
    /// Refuse tokens valid for more than SECS (exp - now, or exp - iat when the token has
    /// iat): caps how long a leaked token works [profile: server.channels.auth.max_lifetime_secs]
    #[arg(
        long,
        value_name = "SECS",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub auth_max_lifetime: Option<u64>,
    /// Require tokens to carry this `aud` claim (tokens minted for another service are
    /// refused) [profile: server.channels.auth.audience]
    #[arg(
        long,
        value_name = "AUD",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub auth_audience: Option<String>,
    /// Publications each channel keeps for clients that resubscribe with their last
    /// position (`"recover":{"offset":N,"epoch":"E"}`); every publication then carries its
    /// offset and epoch. 0: off [profile: server.channels.history.size; default 0]
    #[arg(
        long,
        value_name = "N",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub history_size: Option<usize>,
    /// Seconds a channel's publications are kept for recovery [profile:
    /// server.channels.history.ttl_secs; default 300]
    #[arg(
        long,
        value_name = "SECS",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub history_ttl: Option<u64>,
    /// Bytes all channels' history may hold together; the oldest publications go first past
    /// it (also at most a quarter of the memory budget) [profile:
    /// server.channels.history.max_bytes; default 64 MiB]
    #[arg(
        long,
        value_name = "BYTES",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub history_max_bytes: Option<usize>,
    /// Publications one recovery may send; a client further behind gets
    /// "recovered":false and reloads its state [profile: server.channels.history.recover_max;
    /// default 300]
    #[arg(
        long,
        value_name = "N",
        help_heading = "Channels (--app channels)",
        hide_short_help = true
    )]
    pub recover_max: Option<usize>,
}
