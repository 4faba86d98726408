//! What every engine shares, below them all: the one trait each implements, the queue item it
//! publishes, the link to this node's hub it delivers through, and the reconnect pace.

use super::deliver::deliver;
use super::presence;
use embedded_server::Hub;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// One way for the nodes of a cluster to reach each other; a file per engine implements it,
/// and `backplane::start`, the one place that matches a `Target`, starts it.
pub(crate) trait Engine: Send {
    /// Start the engine's tasks on the current tokio runtime: publish what `rx` hands over,
    /// hand what arrives to `link`, and keep `ws_backplane_up` at 1 only while messages flow
    /// (`Link::set_up`). The backplane being unreachable is not an error: the node serves
    /// locally and connects when it can.
    fn start(self: Box<Self>, link: Arc<Link>, rx: mpsc::Receiver<Out>);
}

/// One message for the engine: which shard channel it belongs on (only Redis Cluster shards;
/// the others ignore it) and the bytes.
pub(crate) struct Out {
    /// `shard_of` the message: a channel message by its channel's name, the rest on shard 0.
    pub shard: u16,
    /// `wire::encode`d relay message, or a presence heartbeat.
    pub bytes: Vec<u8>,
}

/// What the engines' tasks share: the hub to deliver to, this node's id, the presence table.
pub(crate) struct Link {
    /// Where relayed messages are delivered.
    pub hub: Arc<Hub>,
    /// This node's id on the backplane (its own messages come back and are skipped).
    pub me: u64,
    /// What the other nodes last announced.
    pub presence: Arc<presence::Table>,
}

impl Link {
    /// A message from the backplane: a heartbeat updates the presence table, anything else is
    /// a relay message for this node's clients (skipped when it is our own).
    pub fn receive(&self, m: &[u8]) {
        if presence::is_heartbeat(m) {
            self.presence.record(self.me, m);
            self.count_nodes();
        } else {
            deliver(&self.hub, self.me, m);
        }
    }

    pub fn set_up(&self, up: bool) {
        self.hub.metrics.backplane_up.store(up as i64, Relaxed);
    }

    /// `ws_backplane_nodes`: the live nodes, this one included.
    pub fn count_nodes(&self) {
        let n = self.presence.live() as i64 + 1;
        self.hub.metrics.backplane_nodes.store(n, Relaxed);
    }
}

/// Backoff between reconnect attempts: 100 ms doubling to 5 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_from_100_ms_to_5_s() {
        assert!(backoff(0) < backoff(3) && backoff(30) == Duration::from_secs(5));
    }
}
