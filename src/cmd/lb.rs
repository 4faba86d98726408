//! `wstune lb haproxy|nginx`: a proxy configuration for WebSocket traffic from the profile.

use crate::lb;
use crate::outcome::Outcome;
use crate::profile::Profile;
use anyhow::Result;
use std::path::PathBuf;

/// `lb`, resolved: the proxy, the profile loaded, the backends and listen address parsed.
pub struct Request {
    pub kind: lb::Kind,
    pub profile: Profile,
    pub options: lb::ProxySpec,
    /// `-o FILE`, else standard output.
    pub output: Option<PathBuf>,
}

pub fn run(r: Request) -> Result<Outcome> {
    let text = lb::generate(r.kind, &r.profile, &r.options).map_err(anyhow::Error::msg)?;
    crate::output::emit(r.output.as_deref(), &text)?;
    Ok(Outcome::Ok)
}
