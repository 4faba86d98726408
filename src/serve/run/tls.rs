//! TLS for the server: the configuration from --tls-cert/--tls-key (its resumption, and the
//! ticket keys a supervisor's processes share), or, in a build without the `tls` feature, an
//! error that says how to get one. The feature is chosen here, once.

use anyhow::Result;
use embedded_server::Server;

/// The server's TLS configuration, as this build has it (none without the `tls` feature).
#[cfg(feature = "tls")]
pub type Config = embedded_server::tls::Config;
#[cfg(not(feature = "tls"))]
pub type Config = std::convert::Infallible;

/// The TLS configuration from --tls-cert/--tls-key, if given.
#[cfg(feature = "tls")]
pub fn tls_config(r: &crate::serve::config::ServeConfig) -> Result<Option<Config>> {
    let Some(t) = &r.tls else {
        return Ok(None);
    };
    let cfg = embedded_server::tls::load_with(&t.cert, &t.key, resumption(t.resumption))
        .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e}"))?;
    // Under a supervisor: its processes' tickets share its keys, so a client resumes on any
    // of them, and after a roll.
    match std::env::var_os(crate::serve::supervisor::ENV_TICKET_KEYS) {
        Some(path) if t.resumption == crate::serve::config::TlsResumption::Tickets => Ok(Some(
            embedded_server::shared_tickets::install(&cfg, std::path::Path::new(&path))
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
        _ => Ok(Some(cfg)),
    }
}

/// `--tls-resumption` as the server library takes it.
#[cfg(feature = "tls")]
fn resumption(r: crate::serve::config::TlsResumption) -> embedded_server::tls::Resumption {
    use crate::serve::config::TlsResumption as R;
    use embedded_server::tls::Resumption;
    match r {
        R::Tickets => Resumption::Tickets,
        // Sessions a process keeps for resumption: ~1 KiB each.
        R::Cache => Resumption::Cache(10_000),
        R::Off => Resumption::Off,
    }
}

#[cfg(not(feature = "tls"))]
pub fn tls_config(r: &crate::serve::config::ServeConfig) -> Result<Option<Config>> {
    if r.tls.is_some() {
        anyhow::bail!("this wstune was built without the `tls` feature: rebuild with default features for --tls-cert");
    }
    Ok(None)
}

#[cfg(feature = "tls")]
pub fn with_tls(s: Server, tls: Option<Config>) -> Server {
    match tls {
        Some(c) => s.with_tls(c),
        None => s,
    }
}

#[cfg(not(feature = "tls"))]
pub fn with_tls(s: Server, _tls: Option<Config>) -> Server {
    s
}
