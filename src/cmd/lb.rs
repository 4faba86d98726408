//! `wstune lb haproxy|nginx`: a proxy configuration for WebSocket traffic from the profile.

use crate::cli::args::LbArgs;
use crate::cli::exit;
use crate::lb;
use anyhow::Result;

pub fn run(a: &LbArgs) -> Result<u8> {
    let profile = crate::profile::load(&a.profile)?.profile;
    let backends = lb::parse_backends(&a.backends).map_err(anyhow::Error::msg)?;
    let o = lb::Options {
        backends,
        bind: lb::parse_bind(&a.bind).map_err(anyhow::Error::msg)?,
        tls_cert: a.tls_cert.clone(),
        tls_key: a.tls_key.clone(),
        sticky: a.sticky,
    };
    let text = lb::generate(a.kind, &profile, &o).map_err(anyhow::Error::msg)?;
    crate::output::emit(a.output.as_deref(), &text)?;
    Ok(exit::OK)
}
