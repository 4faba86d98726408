//! `--cluster URL` -> the backplane it names, read once here: a bad URL stops `serve` while
//! its flags are resolved, before anything binds, and everything after works on the typed
//! [`Cluster`].

use crate::serve::backplane::Cluster;
use anyhow::{bail, Result};
use embedded_server::channels::HistorySettings;

/// The backplane `url` names (None without `--cluster`). Channel history across nodes lives
/// in Redis Streams, positioned by a Lua script that publishes on the backplane's one Redis
/// channel: the engines without that channel (Redis Cluster's sharded pub/sub, NATS) cannot
/// carry it, so the pair is refused rather than started with positions that no other node
/// shares.
pub(super) fn resolve(url: Option<&str>, history: &HistorySettings) -> Result<Option<Cluster>> {
    let Some(url) = url else { return Ok(None) };
    let cluster = Cluster::parse(url)?;
    if history.enabled() && !cluster.carries_history() {
        bail!(
            "--history-size with --cluster {}://: channel history across nodes is kept in \
             Redis Streams, which this backplane does not carry; use a redis:// or \
             redis+sentinel:// backplane, or drop --history-size",
            cluster.scheme()
        );
    }
    Ok(Some(cluster))
}
