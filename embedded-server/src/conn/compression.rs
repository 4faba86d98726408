//! A connection's own permessage-deflate state: its compressor and decompressor (created on
//! the first message that needs them, freed when idle or reset per message without context
//! takeover), the scratch buffers, and the server-wide inflate budget they are charged to.

use super::Stop;
use crate::config::ServerConfig;
use crate::deflate::{Agreed, Compressor, Decompressor, InflateError};
use crate::metrics::Metrics;
use crate::outbox::Shared;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Deflate scratch buffers up to this capacity are kept between messages; larger ones are freed
/// when their message is done, so an idle connection holds at most this much per direction.
const SCRATCH_KEEP: usize = 4 << 10;

/// A connection's compression state. The contexts are created on the first message that
/// needs them (a connection that never sends or receives a large message holds none) and
/// reset after each message when context takeover is off.
pub(super) struct DeflateState {
    agreed: Agreed,
    compressor: Option<Compressor>,
    decompressor: Option<Decompressor>,
    /// Scratch for inflated input and compressed output. Only small ones (`SCRATCH_KEEP`)
    /// outlive their message: a connection that once moved a large message holds nothing large.
    pub(super) inflated: Vec<u8>,
    pub(super) compressed: Vec<u8>,
    /// Bytes of `inflated`'s capacity charged to the server-wide inflate budget (released as
    /// soon as the message is delivered or refused).
    inflate_charged: usize,
    inflate_budget: usize,
    metrics: Arc<Metrics>,
    window_bits: u8,
    mem_level: u8,
    level: u8,
    threshold: usize,
    /// When our own compressor last handled a message.
    last_compress: Instant,
}

impl DeflateState {
    /// A connection's state for what it agreed to; holds no context until a message needs one.
    pub(super) fn new(agreed: Agreed, config: &ServerConfig, metrics: Arc<Metrics>) -> Box<Self> {
        let d = &config.deflate;
        Box::new(DeflateState {
            agreed,
            compressor: None,
            decompressor: None,
            inflated: Vec::new(),
            compressed: Vec::new(),
            inflate_charged: 0,
            inflate_budget: config.inflate_budget(),
            metrics,
            window_bits: d.window_bits,
            mem_level: d.mem_level,
            level: d.level,
            threshold: d.threshold,
            last_compress: Instant::now(),
        })
    }

    fn compressor_bytes(&self) -> i64 {
        let bits = self.agreed.server_window_bits.min(self.window_bits);
        crate::memory::deflate_compressor_bytes(bits, self.mem_level) as i64
    }

    /// The peer compresses with at most the window it agreed to, so that is all ours keeps.
    fn decompressor_bits(&self) -> u8 {
        self.agreed.client_window_bits.clamp(9, 15)
    }

    fn decompressor_bytes(&self) -> i64 {
        crate::memory::deflate_decompressor_bytes(self.decompressor_bits()) as i64
    }

    pub(super) fn inflate(&mut self, data: &[u8], max: usize) -> Result<(), Stop> {
        self.inflated.clear();
        let (bits, bytes) = (self.decompressor_bits(), self.decompressor_bytes());
        let (metrics, budget, charged) = (
            &self.metrics,
            self.inflate_budget,
            &mut self.inflate_charged,
        );
        // Reserve before growing: the buffer grows only when the server-wide total stays
        // within the budget, or when no other message holds any of it (one message up to the
        // cap always goes through, like one large frame to an empty send queue).
        let mut charge = |n: usize| {
            let before = metrics.inflate_buffer_bytes.fetch_add(n as u64, Relaxed);
            let others = before.saturating_sub(*charged as u64);
            if before + n as u64 > budget as u64 && others > 0 {
                metrics.inflate_buffer_bytes.fetch_sub(n as u64, Relaxed);
                return false;
            }
            *charged += n;
            true
        };
        let r = if self.agreed.client_no_context_takeover {
            // Nothing to keep between messages: this thread's shared context does it.
            let (created, r) =
                crate::deflate::inflate_fresh(data, &mut self.inflated, max, &mut charge);
            crate::deflate::charge_thread(&metrics.deflate_memory_bytes, created);
            r
        } else {
            let d = self.decompressor.get_or_insert_with(|| {
                metrics.deflate_memory_bytes.fetch_add(bytes, Relaxed);
                Decompressor::with_window(bits, true)
            });
            let extra = d.extra_bytes();
            let r = d.decompress_within(data, &mut self.inflated, max, &mut charge);
            metrics
                .deflate_memory_bytes
                .fetch_add(d.extra_bytes() as i64 - extra as i64, Relaxed);
            r
        };
        let Err(e) = r else { return Ok(()) };
        // A refused message's buffer (up to the message cap) goes back now, not after the
        // close handshake: otherwise every hostile peer holds max-message for the close wait.
        self.inflated = Vec::new();
        self.release_inflated();
        Err(match e {
            InflateError::TooBig => Stop::Fail(1009, "message too large once inflated"),
            InflateError::Corrupt => Stop::Fail(1007, "invalid compressed data"),
            InflateError::OverBudget => {
                self.metrics.inflate_budget_closes.fetch_add(1, Relaxed);
                Stop::Fail(1013, "server inflate memory budget spent: try again later")
            }
        })
    }

    /// The inflated message is done with: give its budget back, and keep its buffer only when
    /// small.
    pub(super) fn done_inflated(&mut self, mut msg: Vec<u8>) {
        msg.clear();
        if msg.capacity() <= SCRATCH_KEEP {
            self.inflated = msg;
        }
        self.release_inflated();
    }

    fn release_inflated(&mut self) {
        self.metrics
            .inflate_buffer_bytes
            .fetch_sub(self.inflate_charged as u64, Relaxed);
        self.inflate_charged = 0;
    }

    /// After a compressed message went out: a large output buffer goes back to the allocator
    /// (one 15 MiB message used to leave megabytes here for the connection's life).
    pub(super) fn trim_compressed(&mut self) {
        if self.compressed.capacity() > SCRATCH_KEEP {
            self.compressed = Vec::new();
        }
    }

    /// Compress `payload` into `self.compressed`, or return false when it is below the threshold.
    /// `shared` says whether a frame compressed elsewhere (a broadcast, an offloaded reply) went
    /// to this peer since our last message: our history no longer matches the peer's window,
    /// so the context starts over.
    pub(super) fn compress(&mut self, payload: &[u8], shared: &Shared) -> bool {
        if payload.len() < self.threshold {
            return false;
        }
        let bits = self.agreed.server_window_bits.min(self.window_bits);
        if self.agreed.server_no_context_takeover {
            let created = crate::deflate::compress_fresh(
                bits,
                self.mem_level,
                self.level,
                payload,
                &mut self.compressed,
            );
            crate::deflate::charge_thread(&self.metrics.deflate_memory_bytes, created);
            return true;
        }
        let stale = shared.take_deflate_stale();
        match self.compressor.as_mut() {
            Some(c) if stale => c.reset(),
            Some(_) => {}
            None => {
                self.metrics
                    .deflate_memory_bytes
                    .fetch_add(self.compressor_bytes(), Relaxed);
                self.compressor = Some(Compressor::new(bits, self.mem_level, self.level, true));
                shared.set_holds_compressor(true);
            }
        }
        self.compressor
            .as_mut()
            .unwrap()
            .compress(payload, &mut self.compressed);
        self.last_compress = Instant::now();
        true
    }

    /// Free the compressor of a connection that has sent nothing compressed for `idle` seconds.
    /// Only ours can go: the peer's next message may point into the window our decompressor
    /// keeps, but nothing obliges us to point into what we sent, so a new compressor later is
    /// valid (it costs ratio on the first message, and ~256 KiB less per idle connection).
    pub(super) fn release_idle(&mut self, idle: Duration, shared: &Shared) {
        if self.compressor.is_some() && self.last_compress.elapsed() >= idle {
            self.compressor = None;
            shared.set_holds_compressor(false);
            self.metrics
                .deflate_memory_bytes
                .fetch_sub(self.compressor_bytes(), Relaxed);
        }
    }
}

impl Drop for DeflateState {
    fn drop(&mut self) {
        self.release_inflated();
        if let Some(d) = &self.decompressor {
            self.metrics
                .deflate_memory_bytes
                .fetch_sub(d.extra_bytes() as i64, Relaxed);
        }
        if self.compressor.is_some() {
            self.metrics
                .deflate_memory_bytes
                .fetch_sub(self.compressor_bytes(), Relaxed);
        }
        if self.decompressor.is_some() {
            self.metrics
                .deflate_memory_bytes
                .fetch_sub(self.decompressor_bytes(), Relaxed);
        }
    }
}
