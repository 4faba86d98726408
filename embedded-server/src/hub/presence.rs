//! Presence: who is in a channel. Here, counted from the broker's members (whole channels,
//! or pages of them in name order for the HTTP API); on the other nodes of a cluster, what
//! their backplane says.
//!
//! The hub only counts its own subscribers. A backplane that hears from the other nodes (the
//! binary's `serve --cluster`: each node announces its channel counts every few seconds)
//! installs a [`PresenceFn`] with [`Presence::set_remote`]; `GET /api/channels/NAME` then
//! adds what it answers to the local count.

use super::Hub;
use std::collections::HashMap;
use std::sync::Arc;

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

/// One page of presence ([`Presence::channel_page`]).
#[derive(Debug, Clone, Default)]
pub struct ChannelPage {
    /// The channels of the page and their subscribers, in byte order of the names.
    pub counts: Vec<(Arc<str>, usize)>,
    /// Subscriptions on this node, every channel counted (not only the page's).
    pub subscriptions: usize,
    /// Whether more channels match after the page's last.
    pub truncated: bool,
}

/// The hub's presence (`hub.presence()`): a borrow of the hub, free to make.
#[derive(Clone, Copy)]
pub struct Presence<'h> {
    pub(super) hub: &'h Hub,
}

impl Presence<'_> {
    /// Install the backplane's view of the other nodes' subscribers (cluster-wide presence for
    /// `GET /api/channels/NAME`). Set once.
    pub fn set_remote(self, f: PresenceFn) {
        let _ = self.hub.remote_presence.set(f);
    }

    /// The other nodes' subscribers of `channel`, when a backplane reports them.
    pub fn remote(self, channel: &str) -> Option<RemotePresence> {
        self.hub.remote_presence.get().map(|f| f(channel))
    }

    /// Subscribers of `channel` now.
    pub fn subscriber_count(self, channel: &str) -> usize {
        let map = self.hub.channels.lock().unwrap();
        map.subs.get(channel).map_or(0, |m| m.len())
    }

    /// One page of presence: the channels whose names start with `prefix`, after `after`, in
    /// byte order, at most `limit`. The ordered index of names is walked from the page's first
    /// name, so the lock is held for the page's length (a reference count and a count per
    /// channel), not for a scan of every channel the node has.
    pub fn channel_page(self, prefix: &str, after: Option<&str>, limit: usize) -> ChannelPage {
        use std::ops::Bound;
        let map = self.hub.channels.lock().unwrap();
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut counts: Vec<(Arc<str>, usize)> = map
            .names
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|c| c.starts_with(prefix))
            .take(limit.saturating_add(1))
            .map(|c| (c.clone(), map.subs.get(c).map_or(0, HashMap::len)))
            .collect();
        let truncated = counts.len() > limit;
        counts.truncate(limit);
        ChannelPage {
            counts,
            subscriptions: map.total,
            truncated,
        }
    }

    /// Every channel with at least one subscriber on this node, and how many (presence).
    pub fn channel_counts(&self) -> Vec<(String, usize)> {
        let map = self.hub.channels.lock().unwrap();
        map.subs
            .iter()
            .map(|(c, m)| (c.to_string(), m.len()))
            .collect()
    }
}
