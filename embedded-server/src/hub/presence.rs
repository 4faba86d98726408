//! Cluster-wide presence: what the other nodes of a cluster backplane say about a channel.
//!
//! The hub only counts its own subscribers. A backplane that hears from the other nodes (the
//! binary's `serve --cluster`: each node announces its channel counts every few seconds)
//! installs a [`PresenceFn`] with [`Hub::set_remote_presence`](super::Hub::set_remote_presence);
//! `GET /api/channels/NAME` then adds what it answers to the local count.

/// What the other live nodes of the cluster said about one channel, as last heard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemotePresence {
    /// This node's id on the backplane (for the per-node detail).
    pub me: u64,
    /// (node id, subscribers) for every live remote node that has the channel.
    pub nodes: Vec<(u64, usize)>,
    /// Live remote nodes in all (those without the channel included).
    pub live: usize,
    /// Whether some live node's last announcement was cut at its size cap before this name,
    /// so its count for the channel is not known (counted as 0).
    pub partial: bool,
}

impl RemotePresence {
    /// Subscribers on the other nodes.
    pub fn subscribers(&self) -> usize {
        self.nodes.iter().map(|(_, n)| n).sum()
    }
}

/// The backplane's presence hook: the remote counts for a channel name.
pub type PresenceFn = Box<dyn Fn(&str) -> RemotePresence + Send + Sync>;
