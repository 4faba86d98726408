//! Fan-out: one message to many connections, encoded once for the plain ones and compressed
//! once per window size for those that negotiated permessage-deflate. Broadcast, channel
//! publishes, recoveries and the relay's deliveries all end here, so the one rule that makes
//! a fan-out cheap (never encode per recipient) is written once.

use super::Hub;
use crate::frame::{self, OpCode};
use crate::outbox::Shared;
use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What one publish's fan-out did on this node
/// ([`Broker::publish_report`](super::Broker::publish_report)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    /// Subscribers the message was queued for (or written to the socket of, when nothing was
    /// waiting). Not a receipt: a subscriber closed later for backpressure loses what was
    /// still queued for it (counted in `ws_backpressure_closes_total`, not here).
    pub queued: u64,
    /// Subscribers it could not be queued for: over their send-queue cap (closed now by
    /// backpressure), already closing, or gone.
    pub dropped: u64,
}

/// Send one message to `recipients`: encoded once for the plain ones, compressed once per
/// window size for those that negotiated permessage-deflate.
pub(super) fn fan_out<'a>(
    hub: &Hub,
    op: OpCode,
    payload: &[u8],
    recipients: impl Iterator<Item = &'a Arc<Shared>>,
) -> Published {
    let plain = Bytes::from(frame::encode_message(
        op,
        payload,
        hub.config.fragment_bytes,
        false,
    ));
    let d = &hub.config.deflate;
    let compressible = d.enabled && payload.len() >= d.threshold;
    let mut compressed: [Option<(Bytes, bool)>; 16] = Default::default();
    let (mut sent, mut written, mut dropped) = (0, 0, 0);
    for c in recipients {
        let bits = c.shared_deflate_bits.load(Relaxed) as usize;
        let pushed = if bits == 0 || !compressible {
            c.push_tallied(plain.clone(), false, &hub.metrics, &mut written)
        } else {
            let (f, rsv1) = compressed[bits].get_or_insert_with(|| {
                if !crate::deflate::worth_compressing(payload, bits as u8, d.mem_level, d.level) {
                    hub.metrics.deflate_skipped.fetch_add(1, Relaxed);
                    return (plain.clone(), false);
                }
                let mut z = Vec::new();
                let created = crate::deflate::compress_fresh(
                    bits as u8,
                    d.mem_level,
                    d.level,
                    payload,
                    &mut z,
                );
                crate::deflate::charge_thread(&hub.metrics.deflate_memory_bytes, created);
                if z.len() >= payload.len() {
                    // Incompressible: deflate would only add its framing.
                    hub.metrics.deflate_skipped.fetch_add(1, Relaxed);
                    return (plain.clone(), false);
                }
                let f = frame::encode_message(op, &z, hub.config.fragment_bytes, true);
                (Bytes::from(f), true)
            });
            c.push_tallied(f.clone(), *rsv1, &hub.metrics, &mut written)
        };
        if pushed {
            sent += 1;
        } else {
            dropped += 1;
        }
    }
    crate::outbox::count_written(&hub.metrics, written);
    hub.metrics.messages_out.fetch_add(sent, Relaxed);
    Published {
        queued: sent,
        dropped,
    }
}
