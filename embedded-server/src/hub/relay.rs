//! The relay: how this node's fan-outs reach a cluster backplane, and how the other nodes'
//! come back in. Out: every broadcast and channel publish made here is handed to the hook
//! the backplane installs ([`RelayPort::set`]), after local delivery. In: what the backplane
//! hears from other nodes is delivered here only ([`RelayPort::deliver_broadcast`],
//! [`RelayPort::deliver_channel`]), never relayed again, so a message cannot loop.

use super::history::Publisher;
use super::{fanout, Hub};
use crate::frame::OpCode;
use std::sync::atomic::Ordering::Relaxed;

/// A message this node fanned out locally that other nodes should deliver too (a cluster
/// backplane relays it; see [`RelayPort::set`]).
pub enum Relay<'a> {
    /// A broadcast to every connection.
    Broadcast {
        /// Text or binary.
        op: OpCode,
        /// The message.
        payload: &'a [u8],
    },
    /// A channel publish (text).
    Channel {
        /// The channel's name.
        channel: &'a str,
        /// The message, as subscribers receive it.
        text: &'a str,
    },
    /// A channel publish whose position the relay's other end assigns (the `--processes`
    /// supervisor, with history on): not delivered here yet; it comes back positioned, to
    /// every process, through
    /// [`HubHistory::deliver_positioned`](super::HubHistory::deliver_positioned).
    Sequence {
        /// The channel's name.
        channel: &'a str,
        /// The publication's `data`, as JSON text.
        data: &'a str,
        /// Who published it (a connection's id, or `history::NO_PUBLISHER`), for its share
        /// of the history.
        publisher: Publisher,
    },
}

/// The backplane's hook (see [`RelayPort::set`]).
pub type RelayFn = Box<dyn Fn(Relay<'_>) + Send + Sync>;

/// The hub's relay (`hub.relay()`): a borrow of the hub, free to make.
#[derive(Clone, Copy)]
pub struct RelayPort<'h> {
    pub(super) hub: &'h Hub,
}

impl RelayPort<'_> {
    /// Install the cluster backplane: every broadcast and channel publish made on this node
    /// is handed to it after local delivery. Set once.
    pub fn set(self, f: RelayFn) {
        let _ = self.hub.relay.set(f);
    }

    /// A broadcast that came from another node: local delivery only (never relayed again).
    pub fn deliver_broadcast(self, op: OpCode, payload: &[u8]) {
        let hub = self.hub;
        hub.metrics.broadcasts.fetch_add(1, Relaxed);
        fanout::fan_out(hub, op, payload, hub.registry().everyone().iter());
    }

    /// A channel message (already `{"channel":..,"data":..}` text) from another node.
    pub fn deliver_channel(self, channel: &str, text: &str) {
        let subs = self.hub.broker().subscribers(channel);
        fanout::fan_out(self.hub, OpCode::Text, text.as_bytes(), subs.iter());
    }

    /// Hand `r` to the backplane, when one is installed.
    #[inline]
    pub(super) fn send(self, r: Relay<'_>) {
        if let Some(f) = self.hub.relay.get() {
            f(r);
        }
    }
}
