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
    /// `ServerConfig::inflate_ratio_limit` (0: none).
    ratio_limit: u32,
    /// Nanoseconds of inflate rate one output byte costs (0: no rate), and the burst allowed
    /// (one message at the cap), for the GCRA below.
    ns_per_byte: f64,
    burst_ns: f64,
    /// The rate's theoretical arrival time: when the output inflated so far would be paid for.
    inflate_tat: Instant,
}

/// Inflate output below this is never checked against the ratio limit: a small message that
/// compresses very well (a run of spaces, a repeated JSON key) is not a bomb.
const RATIO_FLOOR: usize = 1 << 20;

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
            ratio_limit: config.inflate_ratio_limit,
            ns_per_byte: if config.inflate_rate == 0 {
                0.0
            } else {
                1e9 / config.inflate_rate as f64
            },
            burst_ns: if config.inflate_rate == 0 {
                0.0
            } else {
                config.max_message_bytes as f64 * 1e9 / config.inflate_rate as f64
            },
            inflate_tat: Instant::now(),
        })
    }

    /// Count `bytes` of inflate output against the connection's rate; returns when reading
    /// may go on, if it must pause first (the output is over the rate by more than the burst).
    pub(super) fn charge_rate(&mut self, bytes: usize) -> Option<Instant> {
        if self.ns_per_byte == 0.0 || bytes == 0 {
            return None;
        }
        let now = Instant::now();
        let cost = Duration::from_nanos((bytes as f64 * self.ns_per_byte) as u64);
        self.inflate_tat = self.inflate_tat.max(now) + cost;
        let ahead = self.inflate_tat - now;
        let burst = Duration::from_nanos(self.burst_ns as u64);
        (ahead > burst).then(|| now + (ahead - burst))
    }

    /// Bytes of inflate output this connection holds now (charged to both budgets).
    pub(super) fn inflate_charged(&self) -> usize {
        self.inflate_charged
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
        let (ratio_limit, input) = (self.ratio_limit as u64, data.len() as u64);
        let (mut ratio_hit, mut memory_hit) = (false, false);
        // Reserve before growing: the buffer grows only when the server-wide totals (the
        // inflate budget and the memory budget) stay within bounds, or when no other message
        // holds any of it (one message up to the cap always goes through, like one large frame
        // to an empty send queue). The buffer grows when it is full, so `*charged` is the
        // output so far: past the floor, output over the ratio limit times the input is a
        // bomb, refused before it costs more.
        let mut charge = |n: usize| {
            if ratio_limit > 0
                && *charged > RATIO_FLOOR
                && *charged as u64 > ratio_limit.saturating_mul(input)
            {
                ratio_hit = true;
                return false;
            }
            let before = metrics.inflate_buffer_bytes.fetch_add(n as u64, Relaxed);
            let others = before.saturating_sub(*charged as u64);
            if before + n as u64 > budget as u64 && others > 0 {
                metrics.inflate_buffer_bytes.fetch_sub(n as u64, Relaxed);
                return false;
            }
            if !metrics
                .memory
                .try_charge(crate::budget::Store::Inflate, n, *charged)
            {
                metrics.inflate_buffer_bytes.fetch_sub(n as u64, Relaxed);
                memory_hit = true;
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
            InflateError::OverBudget if ratio_hit => {
                self.metrics.inflate_ratio_closes.fetch_add(1, Relaxed);
                Stop::Fail(1009, "message inflates past the compression ratio limit")
            }
            InflateError::OverBudget if memory_hit => Stop::Fail(
                crate::outbox::BUDGET_CLOSE,
                "server memory budget spent: try again later",
            ),
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
        self.metrics
            .memory
            .release(crate::budget::Store::Inflate, self.inflate_charged);
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
        if !crate::deflate::worth_compressing(payload, bits, self.mem_level, self.level) {
            // Sent plain: the context starts over, as below.
            self.metrics.deflate_skipped.fetch_add(1, Relaxed);
            if let Some(c) = self.compressor.as_mut() {
                c.reset();
            }
            return false;
        }
        if self.agreed.server_no_context_takeover {
            let created = crate::deflate::compress_fresh(
                bits,
                self.mem_level,
                self.level,
                payload,
                &mut self.compressed,
            );
            crate::deflate::charge_thread(&self.metrics.deflate_memory_bytes, created);
            return self.keep_if_smaller(payload);
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
        if self.keep_if_smaller(payload) {
            return true;
        }
        // Sent uncompressed, the message is not in the peer's window but is in our
        // compressor's history: the context starts over, or our next message could point
        // at bytes the peer never saw.
        if let Some(c) = self.compressor.as_mut() {
            c.reset();
        }
        false
    }

    /// Whether the compressed form is worth sending: when it is no smaller than the payload
    /// (random or already compressed data grows by deflate's framing, ~0.03 % plus 5 bytes a
    /// block, or by more at a low memLevel), the payload goes out as it is.
    fn keep_if_smaller(&mut self, payload: &[u8]) -> bool {
        if self.compressed.len() < payload.len() {
            return true;
        }
        self.metrics.deflate_skipped.fetch_add(1, Relaxed);
        self.compressed.clear();
        self.trim_compressed();
        false
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
