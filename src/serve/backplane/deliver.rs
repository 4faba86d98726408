//! A relayed message into this node: whatever carried it (an engine of the cluster
//! backplane, or the `--processes` supervisor's local relay), `deliver` hands it to this node's
//! clients, counting it, and applies what the supervisor sends about channel history (its
//! tombstones and its history, for a process that starts).

use super::snapshot::{decode_graves, decode_snapshot};
use super::wire::{decode, Incoming};
use embedded_server::hub::StreamPosition;
use embedded_server::Hub;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Set in a server process once its supervisor has sent `KIND_GRAVES`: it then takes
/// publishes with their publisher (`KIND_SEQUENCE_BY`); before, and under an older supervisor,
/// they go as `KIND_SEQUENCE`.
static SUPERVISOR_NAMES_PUBLISHERS: AtomicBool = AtomicBool::new(false);

/// The publisher key a `KIND_PUBLISHER` frame announced, for the positioned publication
/// (channel, offset) that follows it on the same relay.
static NEXT_PUBLISHER: Mutex<Option<(String, u64, u64)>> = Mutex::new(None);

/// Whether this process's supervisor takes publishes with their publisher (the `named` of
/// `wire::encode`).
pub fn supervisor_names_publishers() -> bool {
    SUPERVISOR_NAMES_PUBLISHERS.load(Relaxed)
}

/// Deliver a relayed message (from the backplane or the local relay) to this node's clients,
/// counting it; our own messages and malformed ones are skipped.
pub fn deliver(hub: &Hub, me: u64, m: &[u8]) {
    let received = || hub.metrics.backplane_received.fetch_add(1, Relaxed);
    match decode(me, m) {
        Some(Incoming::Broadcast(op, payload)) => {
            received();
            hub.relay().deliver_broadcast(op, payload);
        }
        Some(Incoming::Channel(name, text)) => {
            received();
            hub.relay().deliver_channel(name, text);
        }
        Some(Incoming::Publisher(name, offset, key)) => {
            *NEXT_PUBLISHER.lock().unwrap() = Some((name.to_string(), offset, key));
        }
        Some(Incoming::Positioned(name, offset, epoch, text)) => {
            received();
            let pos = StreamPosition {
                offset,
                epoch: epoch.into(),
            };
            let publisher = match NEXT_PUBLISHER.lock().unwrap().take() {
                Some((c, o, key)) if c == name && o == offset => key,
                _ => 0,
            };
            hub.history()
                .deliver_positioned(name, &pos, text, publisher);
        }
        // Only a supervisor sends these (and only on Linux, where it runs).
        Some(Incoming::Graves(body)) => {
            restore_graves(hub, body);
            SUPERVISOR_NAMES_PUBLISHERS.store(true, Relaxed);
        }
        Some(Incoming::Snapshot(body)) => restore(hub, body),
        // Only the supervisor positions publishes.
        Some(Incoming::Sequence(..)) | None => {}
    }
}

/// In a process: take the supervisor's tombstones and stamp family (the frame just before its
/// history).
fn restore_graves(hub: &Hub, body: &[u8]) {
    match decode_graves(body) {
        Some((family, known_since, graves)) => {
            hub.history().restore_graves(family, known_since, graves)
        }
        None => tracing::warn!("channel history: malformed tombstones from the supervisor"),
    }
}

/// Set once this process has applied the supervisor's history.
static LOADED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// In a process: take the supervisor's history (a snapshot frame's body after the node id
/// and kind), then let the server start serving.
fn restore(hub: &Hub, body: &[u8]) {
    match decode_snapshot(body) {
        Some(streams) => {
            for (name, pos, pubs) in &streams {
                hub.history().restore(name, pos, pubs);
            }
            tracing::debug!(
                "channel history: {} streams from the supervisor",
                streams.len()
            );
        }
        None => tracing::warn!("channel history: a malformed snapshot from the supervisor"),
    }
    LOADED.notify_one();
}

/// Wait (at most `limit`) until the supervisor's history is applied: a client that recovers
/// at once must find it. False when it did not come in time (the process serves anyway;
/// recoveries then answer `recovered:false` until the history fills again).
pub async fn wait_for_snapshot(limit: Duration) -> bool {
    tokio::time::timeout(limit, LOADED.notified()).await.is_ok()
}
