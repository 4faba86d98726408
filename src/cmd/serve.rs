//! `wstune serve`: the resolved configuration to serve proper (`serve::run`) or, with
//! `--self-test`, to the self-test around the servers it starts (`serve::self_test`).

use crate::engine::check::HostInputs;
use crate::outcome::Outcome;
use crate::serve::config::ServeConfig;
use crate::serve::self_test::SelfTest;
use anyhow::Result;

/// `serve`, resolved: the one configuration, and the host to judge.
pub struct Request {
    pub config: ServeConfig,
    /// `--self-test`: the load and the profile it is sized by; None: serve.
    pub self_test: Option<SelfTest>,
    /// The host the server will run on (or, for the self-test, `--host-root`'s tree), with the
    /// inputs the check pipeline needs; None when they cannot be loaded (no host warning then).
    pub host: Option<HostInputs>,
}

pub fn run(req: Request) -> Result<Outcome> {
    match &req.self_test {
        Some(t) => crate::serve::self_test::run(&req.config, t, req.host.as_ref()),
        None => crate::serve::run::run(&req.config, req.host.as_ref()),
    }
}
