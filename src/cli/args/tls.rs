//! The TLS flags of the load generator (`selftest`, `serve --self-test`) and of `serve`'s own
//! TLS listener beyond its certificate.

use std::path::PathBuf;

/// How the load generator connects to a wss:// server.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsClientArgs {
    /// wss://: trust the server certificates this PEM file's CA signed (the CA certificate, or
    /// a bundle such as /etc/ssl/certs/ca-certificates.crt).
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "TLS (wss://)",
        hide_short_help = true
    )]
    pub ca: Option<PathBuf>,
    /// wss://: accept any server certificate (self-signed, another name); the handshake's
    /// signatures are still checked. For test servers only.
    #[arg(
        long,
        conflicts_with = "ca",
        help_heading = "TLS (wss://)",
        hide_short_help = true
    )]
    pub insecure: bool,
    /// wss://: each simulated client resumes its previous TLS session on its next connection
    /// (session tickets or ids), as reconnecting browsers do. Default: every handshake is a
    /// full one, the worst case a reconnect storm pays.
    #[arg(long, help_heading = "TLS (wss://)", hide_short_help = true)]
    pub tls_resume: bool,
}

/// `serve`'s TLS settings beside --tls-cert/--tls-key.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeTlsArgs {
    /// --self-test: serve wss:// with a certificate generated for this run (ECDSA P-256 for
    /// localhost and 127.0.0.1, from a CA the load generator alone trusts); with --tls-cert
    /// the load test uses that certificate instead and needs --ca or --insecure.
    #[arg(
        long,
        requires = "self_test",
        help_heading = "TLS (wss://)",
        hide_short_help = true
    )]
    pub tls: bool,
    /// How clients may resume a TLS session instead of a full handshake: tickets (stateless,
    /// the default; the processes of --processes share their keys), cache (a server-side
    /// cache of 10,000 sessions per process) or off.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        help_heading = "TLS (wss://)",
        hide_short_help = true
    )]
    pub tls_resumption: Option<TlsResumption>,
}

/// `--tls-resumption`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsResumption {
    #[default]
    Tickets,
    Cache,
    Off,
}
