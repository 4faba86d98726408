//! One connection: read frames, dispatch messages, write with backpressure, close properly.
//!
//! Memory per idle connection is what matters at 100k: the task's state below, one `Shared`
//! (queue + counters) and the kernel socket. Reads go into the worker thread's receive buffer;
//! a connection owns a buffer only while it holds an incomplete frame or a fragmented message,
//! and gives it back when that is done.

use crate::config::{App, Handler};
use crate::deflate::{Agreed, Compressor, Decompressor, InflateError};
use crate::frame::{self, FrameError, OpCode};
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::offload::Job;
use crate::transport::Transport;
use crate::utf8::Utf8Validator;
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU16, AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Per-worker receive buffer: every connection a worker serves reads into this one.
const RECV_BUF: usize = 64 << 10;
thread_local! {
    static RECV: RefCell<Vec<u8>> = RefCell::new(vec![0; RECV_BUF]);
}

/// How long a connection waits for the peer's close frame after sending its own.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Once the closing handshake is over (the peer's close arrived, or we failed the connection),
/// how long input is still read and discarded while waiting for the peer's FIN. Closing a
/// socket with unread input makes the kernel send RST, and RST discards whatever of ours the
/// peer has not received yet (the last replies, our close frame); draining until the peer's
/// FIN avoids that. A conforming peer closes as soon as it sees our FIN (one round trip), so
/// this bound is only reached by a peer that never closes: a few round trips on a slow link,
/// short enough that such peers hold no connection slot for long.
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// The half of a connection other threads touch: its outgoing queue and close requests.
/// About 150 bytes.
pub struct Shared {
    pub id: u64,
    out: Mutex<Out>,
    /// Bytes queued and not yet written.
    queued: AtomicUsize,
    notify: Notify,
    /// A close someone else asked for (heartbeat, backpressure, shutdown); 0 = none.
    close_request: AtomicU16,
    /// Coarse clock seconds of the last frame received.
    pub last_seen: AtomicU32,
    /// Coarse clock seconds of the last ping sent.
    pub last_ping: AtomicU32,
    send_cap: usize,
    backpressure_code: u16,
    /// Window bits of this peer's permessage-deflate (0: not negotiated). Broadcasts and
    /// offloaded replies compress once per window size from a reset context, valid for every
    /// peer whatever its context-takeover setting.
    pub shared_deflate_bits: AtomicU8,
    /// The peer keeps our compression context between messages (no server_no_context_takeover).
    pub deflate_takeover: AtomicBool,
    /// A frame compressed elsewhere went to a context-takeover peer: its window now holds data
    /// our own compressor never saw, so that compressor must start over before its next
    /// message. Changed only under the `out` lock, so it is ordered with the queue.
    deflate_stale: AtomicBool,
    /// The socket, while other threads may write to it directly (plain TCP only; -1 otherwise).
    /// Read and changed only under the `out` lock: the connection clears it (under the lock)
    /// before its socket is closed, so a writer never reaches a descriptor number the kernel
    /// has handed to another socket.
    direct_fd: AtomicI32,
    /// The connection holds a compressor it frees after an idle spell; that check runs when its
    /// task wakes, so frames written directly still wake it (see `push_frame`).
    holds_compressor: AtomicBool,
}

#[derive(Default)]
struct Out {
    frames: VecDeque<Bytes>,
    /// Bytes of the first frame already written.
    head_off: usize,
    /// The first frame is the rest of a frame partly written directly (its start is already on
    /// the wire), so it must go out whole even when the queue is dropped.
    head_is_rest: bool,
}

impl Shared {
    pub fn new(id: u64, send_cap: usize, backpressure_code: u16, now: u32) -> Shared {
        Shared {
            id,
            out: Mutex::new(Out::default()),
            queued: AtomicUsize::new(0),
            notify: Notify::new(),
            close_request: AtomicU16::new(0),
            last_seen: AtomicU32::new(now),
            last_ping: AtomicU32::new(now),
            send_cap,
            backpressure_code,
            shared_deflate_bits: AtomicU8::new(0),
            deflate_takeover: AtomicBool::new(false),
            deflate_stale: AtomicBool::new(false),
            direct_fd: AtomicI32::new(-1),
            holds_compressor: AtomicBool::new(false),
        }
    }

    /// Queue an encoded frame (shared, not copied) and wake the connection. A consumer above
    /// its cap is closed instead: broadcast never waits for the slowest client.
    pub fn push(&self, frame: Bytes, metrics: &Metrics) -> bool {
        self.push_frame(frame, metrics, false)
    }

    /// Queue a frame compressed from a reset context outside this connection's task.
    pub fn push_compressed(&self, frame: Bytes, metrics: &Metrics) -> bool {
        self.push_frame(frame, metrics, self.deflate_takeover.load(Relaxed))
    }

    /// Fan-out's cost is this function times the recipients, so the common case is one
    /// syscall: when nothing is queued for this connection and its socket is plain TCP, the
    /// frame goes straight to the kernel from the calling thread (a broadcaster, the heartbeat)
    /// without waking the connection's task. Only what the socket does not take is queued, and
    /// then the task is woken to write it when the socket drains. Every write to the socket
    /// happens under the `out` lock, so frames never interleave and order is kept.
    fn push_frame(&self, frame: Bytes, metrics: &Metrics, stale: bool) -> bool {
        if self.close_request.load(Relaxed) != 0 {
            return false;
        }
        let len = frame.len();
        // A consumer is slow when data piles up, not when one message is large: a frame bigger
        // than the cap still goes to an empty queue.
        let queued = self.queued.load(Relaxed);
        if queued > 0 && queued + len > self.send_cap {
            self.backpressure(metrics);
            return false;
        }
        let mut out = self.out.lock().unwrap();
        // Checked again under the lock: the connection queues its close frame under it after
        // setting `close_request`, and nothing may follow a close frame on the wire.
        if self.close_request.load(Relaxed) != 0 {
            return false;
        }
        if stale {
            self.deflate_stale.store(true, Relaxed);
        }
        let mut frame = frame;
        if out.frames.is_empty() {
            let written = direct_write(self.direct_fd.load(Relaxed), &frame);
            metrics.bytes_out.fetch_add(written as u64, Relaxed);
            if written == len {
                drop(out);
                if self.holds_compressor.load(Relaxed) {
                    self.notify.notify_one();
                }
                return true;
            }
            if written > 0 {
                // The frame's start is on the wire: its rest must go out whole.
                out.head_is_rest = true;
                frame = frame.slice(written..);
            }
        }
        // Counted before the lock goes: the task may write (and subtract) it right after.
        self.queued.fetch_add(frame.len(), Relaxed);
        out.frames.push_back(frame);
        drop(out);
        self.notify.notify_one();
        true
    }

    /// Let other threads write to `fd` directly (`None`: never, e.g. TLS) until the returned
    /// guard drops; it must drop before the socket closes.
    fn allow_direct(&self, fd: Option<i32>) -> DirectGuard<'_> {
        if let Some(fd) = fd {
            let _out = self.out.lock().unwrap();
            self.direct_fd.store(fd, Relaxed);
        }
        DirectGuard(self)
    }

    /// Encode and queue a message from another thread (the offload pool), compressed with that
    /// thread's shared context when the peer negotiated permessage-deflate.
    pub fn send_owned(
        &self,
        opcode: OpCode,
        payload: &[u8],
        fragment: usize,
        deflate: &crate::deflate::DeflateSettings,
        metrics: &Metrics,
    ) {
        let bits = self.shared_deflate_bits.load(Relaxed);
        let pushed = if bits != 0 && payload.len() >= deflate.threshold {
            let mut z = Vec::new();
            let created = crate::deflate::compress_fresh(
                bits,
                deflate.mem_level,
                deflate.level,
                payload,
                &mut z,
            );
            metrics
                .deflate_memory_bytes
                .fetch_add(created as i64, Relaxed);
            let frame = Bytes::from(frame::encode_message(opcode, &z, fragment, true));
            self.push_compressed(frame, metrics)
        } else {
            let frame = Bytes::from(frame::encode_message(opcode, payload, fragment, false));
            self.push(frame, metrics)
        };
        if pushed {
            metrics.messages_out.fetch_add(1, Relaxed);
        }
    }

    /// Record what permessage-deflate this peer agreed to, for frames compressed elsewhere.
    pub fn set_deflate(&self, agreed: &Agreed, ours: &crate::deflate::DeflateSettings) {
        self.shared_deflate_bits
            .store(agreed.server_window_bits.min(ours.window_bits), Relaxed);
        self.deflate_takeover
            .store(!agreed.server_no_context_takeover, Relaxed);
    }

    /// Close this consumer for exceeding its send-queue cap (counted once).
    fn backpressure(&self, metrics: &Metrics) {
        if self
            .close_request
            .compare_exchange(0, self.backpressure_code, Relaxed, Relaxed)
            .is_ok()
        {
            metrics.backpressure_closes.fetch_add(1, Relaxed);
        }
        self.notify.notify_one();
    }

    /// Ask the connection to close with `code` (first request wins). Returns whether this
    /// request was the first, so callers count each close once.
    pub fn request_close(&self, code: u16) -> bool {
        let first = self
            .close_request
            .compare_exchange(0, code, Relaxed, Relaxed)
            .is_ok();
        self.notify.notify_one();
        first
    }

    /// Our close is on its way: nothing more may be queued after it (a broadcast or an
    /// offloaded reply behind a close frame would be a protocol violation).
    fn stop_queueing(&self, code: u16) {
        let _ = self
            .close_request
            .compare_exchange(0, code, Relaxed, Relaxed);
    }

    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }
}

/// Ends direct writes to a connection's socket; dropped before the socket is closed.
struct DirectGuard<'a>(&'a Shared);

impl Drop for DirectGuard<'_> {
    fn drop(&mut self) {
        // Also while unwinding from a panic that poisoned the lock: a second panic here would
        // abort the whole server, and the descriptor must be withdrawn either way.
        let _out = self
            .0
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.0.direct_fd.store(-1, Relaxed);
    }
}

/// Write `buf` to a non-blocking socket from any thread; returns how much the kernel took (0 on
/// a full socket, an error, or no descriptor: the caller queues the rest and the connection's
/// own task meets any error on its next write).
#[cfg(unix)]
fn direct_write(fd: i32, buf: &[u8]) -> usize {
    if fd < 0 || buf.is_empty() {
        return 0;
    }
    // SAFETY: `fd` is an open socket while it is stored in `direct_fd` (the caller holds the
    // `out` lock, and the connection clears the field under that lock before closing), and
    // `buf` is valid for `buf.len()` bytes. MSG_DONTWAIT: never block the fanning thread;
    // MSG_NOSIGNAL: a peer that is gone gives EPIPE, not SIGPIPE.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    n.max(0) as usize
}

#[cfg(not(unix))]
fn direct_write(_fd: i32, _buf: &[u8]) -> usize {
    0
}

/// Everything a connection needs from the server.
pub struct Ctx {
    pub hub: Arc<Hub>,
    pub offload: Option<crate::offload::Sender>,
}

/// Why processing stopped early.
enum Stop {
    /// Fail the connection with this close code.
    Fail(u16, &'static str),
}

/// Task-local state; lives as long as the connection.
struct State {
    /// An incomplete frame (only while one is pending).
    partial: Vec<u8>,
    /// A fragmented message being reassembled.
    msg: Vec<u8>,
    msg_op: Option<OpCode>,
    utf8: Utf8Validator,
    /// A job waiting for room in the offload queue: reading pauses until it is queued.
    pending_job: Option<Job>,
    close_sent: bool,
    close_received: bool,
    /// We failed the connection (1002/1007/1009...): the rest of the input is discarded unread.
    failed: bool,
    /// The close code sent, until the close frame is actually written (then it is counted).
    close_unwritten: Option<u16>,
    /// Our write side is shut down (FIN after our close frame).
    write_shut: bool,
    /// The peer's FIN arrived.
    peer_eof: bool,
    close_deadline: Option<Instant>,
    /// Payload bytes of the incomplete frame at the head of `partial` that are already unmasked
    /// and UTF-8 validated (a text frame is checked as its bytes arrive, not when it is whole).
    frame_checked: usize,
    /// Channels this connection subscribed to (channels app).
    channels: Vec<String>,
    /// permessage-deflate, when negotiated (boxed: most of it exists only for such peers).
    deflate: Option<Box<DeflateState>>,
    /// The message being reassembled arrived compressed (RSV1 on its first frame).
    msg_compressed: bool,
    /// Plain replies produced by the current read, written together by `commit`.
    batch: Vec<u8>,
}

impl State {
    /// No more frames are read: the peer's close arrived or we failed the connection. Input
    /// that still comes is read and discarded (never buffered), so closing sends no RST.
    fn input_done(&self) -> bool {
        self.close_received || self.failed
    }
}

/// Deflate scratch buffers up to this capacity are kept between messages; larger ones are freed
/// when their message is done, so an idle connection holds at most this much per direction.
const SCRATCH_KEEP: usize = 4 << 10;

/// A connection's compression state. The contexts are created on the first message that
/// needs them (a connection that never sends or receives a large message holds none) and
/// reset after each message when context takeover is off.
struct DeflateState {
    agreed: Agreed,
    compressor: Option<Compressor>,
    decompressor: Option<Decompressor>,
    /// Scratch for inflated input and compressed output. Only small ones (`SCRATCH_KEEP`)
    /// outlive their message: a connection that once moved a large message holds nothing large.
    inflated: Vec<u8>,
    compressed: Vec<u8>,
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
    fn compressor_bytes(&self) -> i64 {
        let bits = self.agreed.server_window_bits.min(self.window_bits);
        crate::memory::deflate_compressor_bytes(bits, self.mem_level) as i64
    }

    fn decompressor_bytes() -> i64 {
        crate::memory::deflate_decompressor_bytes(15) as i64
    }

    fn inflate(&mut self, data: &[u8], max: usize) -> Result<(), Stop> {
        self.inflated.clear();
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
            metrics
                .deflate_memory_bytes
                .fetch_add(created as i64, Relaxed);
            r
        } else {
            let d = self.decompressor.get_or_insert_with(|| {
                metrics
                    .deflate_memory_bytes
                    .fetch_add(Self::decompressor_bytes(), Relaxed);
                Decompressor::new(true)
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
    fn done_inflated(&mut self, mut msg: Vec<u8>) {
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
    fn trim_compressed(&mut self) {
        if self.compressed.capacity() > SCRATCH_KEEP {
            self.compressed = Vec::new();
        }
    }

    /// Compress `payload` into `self.compressed`, or return false when it is below the threshold.
    /// `shared` says whether a frame compressed elsewhere (a broadcast, an offloaded reply) went
    /// to this peer since our last message: our history no longer matches the peer's window,
    /// so the context starts over.
    fn compress(&mut self, payload: &[u8], shared: &Shared) -> bool {
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
            self.metrics
                .deflate_memory_bytes
                .fetch_add(created as i64, Relaxed);
            return true;
        }
        let stale = shared.deflate_stale.swap(false, Relaxed);
        match self.compressor.as_mut() {
            Some(c) if stale => c.reset(),
            Some(_) => {}
            None => {
                self.metrics
                    .deflate_memory_bytes
                    .fetch_add(self.compressor_bytes(), Relaxed);
                self.compressor = Some(Compressor::new(bits, self.mem_level, self.level, true));
                shared.holds_compressor.store(true, Relaxed);
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
    fn release_idle(&mut self, idle: Duration, shared: &Shared) {
        if self.compressor.is_some() && self.last_compress.elapsed() >= idle {
            self.compressor = None;
            shared.holds_compressor.store(false, Relaxed);
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
                .fetch_sub(Self::decompressor_bytes(), Relaxed);
        }
    }
}

/// Serve one upgraded connection until it closes. `initial` holds bytes that arrived with the
/// upgrade request.
pub async fn serve<T: Transport>(
    io: T,
    shared: Arc<Shared>,
    initial: Vec<u8>,
    ctx: Arc<Ctx>,
    deflate: Option<Agreed>,
) {
    let hub = ctx.hub.clone();
    let d = &hub.config.deflate;
    let deflate = deflate.map(|agreed| {
        Box::new(DeflateState {
            agreed,
            compressor: None,
            decompressor: None,
            inflated: Vec::new(),
            compressed: Vec::new(),
            inflate_charged: 0,
            inflate_budget: hub.config.inflate_budget(),
            metrics: hub.metrics.clone(),
            window_bits: d.window_bits,
            mem_level: d.mem_level,
            level: d.level,
            threshold: d.threshold,
            last_compress: Instant::now(),
        })
    });
    let mut st = State {
        partial: initial,
        msg: Vec::new(),
        msg_op: None,
        utf8: Utf8Validator::default(),
        pending_job: None,
        close_sent: false,
        close_received: false,
        failed: false,
        close_unwritten: None,
        write_shut: false,
        peer_eof: false,
        close_deadline: None,
        frame_checked: 0,
        channels: Vec::new(),
        deflate,
        msg_compressed: false,
        batch: Vec::new(),
    };
    let direct = shared.allow_direct(io.direct_fd());
    let _ = run(&io, &shared, &ctx, &mut st).await;
    drop(direct);
    if !st.write_shut {
        io.shutdown_write();
    }
    hub.unregister(&shared, &st.channels);
}

async fn run<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
) -> io::Result<()> {
    let hub = &ctx.hub;
    let m = &hub.metrics;
    if !st.partial.is_empty() {
        let mut data = std::mem::take(&mut st.partial);
        process_owned(io, shared, ctx, st, &mut data);
    }
    loop {
        if let Some(job) = st.pending_job.take() {
            if let Some(tx) = &ctx.offload {
                if tx.send(job).await.is_ok() {
                    m.offload_queue_depth.fetch_add(1, Relaxed);
                }
            }
            if !st.partial.is_empty() {
                let mut data = std::mem::take(&mut st.partial);
                process_owned(io, shared, ctx, st, &mut data);
            }
            continue;
        }
        // Read, never cleared: while set, nothing more is queued for us (a swap to 0 and back
        // left a window in which a broadcaster could write after our close frame, and in which
        // a second close request counted again).
        let requested = shared.close_request.load(Relaxed);
        if requested != 0 && !st.close_sent {
            let reason = match requested {
                1001 => "server shutting down",
                crate::hub::HEARTBEAT_CLOSE => "heartbeat timeout",
                _ => "send queue full: consumer too slow",
            };
            // Shutdown gives clients the grace period; a slow or silent peer gets the usual wait.
            let wait = if requested == 1001 {
                hub.config.shutdown_grace.max(CLOSE_WAIT)
            } else {
                CLOSE_WAIT
            };
            start_close(shared, st, requested, reason, wait);
            if requested != 1001 {
                // A slow or silent peer: drop what it has not read, send the close now.
                // A frame already partly on the wire must be finished, or the stream breaks.
                let mut out = shared.out.lock().unwrap();
                let close = out.frames.pop_back();
                let started = if out.head_off > 0 || out.head_is_rest {
                    out.frames.pop_front()
                } else {
                    None
                };
                out.frames.clear();
                let mut queued = 0;
                if let Some(f) = started {
                    queued += f.len() - out.head_off;
                    out.frames.push_back(f);
                } else {
                    out.head_off = 0;
                    out.head_is_rest = false;
                }
                if let Some(c) = close {
                    queued += c.len();
                    out.frames.push_back(c);
                }
                shared.queued.store(queued, Relaxed);
            }
        }
        let pending = flush(io, shared, m)?;
        if st.close_sent && !pending && closed_write(io, st, m) {
            return Ok(());
        }
        if st.close_deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
        let deadline = st
            .close_deadline
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            r = io.readable(), if !st.peer_eof => {
                r?;
                if !on_readable(io, shared, ctx, st)? {
                    st.peer_eof = true;
                    if !st.close_sent {
                        // The peer is gone without a closing handshake.
                        let _ = flush(io, shared, m);
                        return Ok(());
                    }
                    // The peer finished its side of the close: what we still owe it (our
                    // close, replies before it) goes out, bounded by the close deadline.
                    continue;
                }
                // One read per turn: a client whose socket stays readable (pipelined messages,
                // a publisher) would otherwise be served read after read until tokio's budget
                // runs out, while every other connection on this thread waits; under fan-out the
                // recipients' tasks would not get to write and fast consumers would look slow.
                tokio::task::yield_now().await;
            }
            _ = shared.notify.notified() => {
                // Someone queued for us (on an idle connection, usually the heartbeat's
                // ping): the moment to let go of a compressor nobody is using.
                if let (Some(d), Some(idle)) = (st.deflate.as_mut(), hub.config.deflate_idle()) {
                    d.release_idle(idle, shared);
                }
            }
            r = io.writable(), if pending => { r?; }
            _ = tokio::time::sleep_until(deadline), if st.close_deadline.is_some() => {
                let _ = flush(io, shared, m);
                return Ok(());
            }
        }
    }
}

/// Our close frame and everything before it are written: shut down our write side (FIN after
/// the close frame) and decide whether the connection is done. Returns true when it can be
/// dropped now: the peer's FIN arrived, so there is no input left that could make the kernel
/// reset the connection. When the peer's close arrived or we failed the connection, nothing
/// more is awaited but that FIN: wait for it at most `DRAIN_WAIT`, reading and discarding.
/// Otherwise (we started the close) the peer's close is awaited until the close deadline.
fn closed_write<T: Transport>(io: &T, st: &mut State, m: &Metrics) -> bool {
    // Counted now that the frame is really written (not when queued): a peer that stopped
    // reading never got it.
    if let Some(code) = st.close_unwritten.take() {
        m.close_sent(code);
    }
    if !st.write_shut {
        io.shutdown_write();
        st.write_shut = true;
    }
    if st.peer_eof {
        return true;
    }
    if st.close_received || st.failed {
        let drain = Instant::now() + DRAIN_WAIT;
        if st.close_deadline.is_none_or(|d| d > drain) {
            st.close_deadline = Some(drain);
        }
    }
    false
}

/// Read once and process. Returns false at end of stream.
fn on_readable<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
) -> io::Result<bool> {
    RECV.with(|cell| {
        let mut buf = cell.borrow_mut();
        let n = match io.try_read(&mut buf[..]) {
            Ok(0) => return Ok(false),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        };
        if st.input_done() {
            return Ok(true); // discarded: only the peer's FIN is awaited
        }
        shared.last_seen.store(ctx.hub.now(), Relaxed);
        if st.partial.is_empty() {
            let consumed = process(io, shared, ctx, st, &mut buf[..n]);
            if consumed < n && !st.input_done() {
                st.partial.extend_from_slice(&buf[consumed..n]);
            }
        } else {
            let mut data = std::mem::take(&mut st.partial);
            data.extend_from_slice(&buf[..n]);
            drop(buf);
            process_owned(io, shared, ctx, st, &mut data);
        }
        Ok(true)
    })
}

/// Process an owned buffer (the pending partial plus new bytes) and keep what is left.
fn process_owned<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    data: &mut Vec<u8>,
) {
    let consumed = process(io, shared, ctx, st, data);
    if consumed < data.len() && !st.input_done() {
        data.drain(..consumed);
        // Give back a large buffer once the big frame it held is done.
        if data.is_empty() && data.capacity() > RECV_BUF {
            *data = Vec::new();
        }
        st.partial = std::mem::take(data);
    }
}

/// Parse and handle every complete frame in `data`; returns the bytes consumed.
fn process<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    data: &mut [u8],
) -> usize {
    let cfg = &ctx.hub.config;
    let mut pos = 0;
    while pos < data.len() && st.pending_job.is_none() && !st.input_done() {
        // RSV1 is legal only when permessage-deflate was negotiated.
        let rsv = if st.deflate.is_some() { 0b100 } else { 0 };
        let h = match frame::parse_header(&data[pos..], cfg.max_frame_bytes as u64, rsv) {
            Ok(h) => h,
            Err(FrameError::Incomplete) => break,
            Err(e) => {
                fail(
                    io,
                    shared,
                    ctx,
                    st,
                    e.close_code(),
                    match e {
                        FrameError::Protocol(why) => why,
                        _ => "frame too large",
                    },
                );
                return data.len();
            }
        };
        let total = h.header_len + h.payload_len as usize;
        if data.len() - pos < total {
            if let Err(Stop::Fail(code, why)) =
                check_partial_text(st, &h, &mut data[pos + h.header_len..], cfg)
            {
                fail(io, shared, ctx, st, code, why);
                return data.len();
            }
            break;
        }
        let payload = &mut data[pos + h.header_len..pos + total];
        // Only the frame at the head of a pending partial can have been checked already.
        let checked = std::mem::take(&mut st.frame_checked);
        frame::unmask(&mut payload[checked..], h.mask, checked);
        pos += total;
        if st.close_sent && !matches!(h.opcode, OpCode::Close) {
            continue; // after our close only the peer's close matters
        }
        if let Err(Stop::Fail(code, why)) = on_frame(io, shared, ctx, st, h, payload, checked) {
            fail(io, shared, ctx, st, code, why);
            return data.len();
        }
    }
    commit(io, shared, &ctx.hub.metrics, st);
    pos
}

/// Fail fast on invalid UTF-8 (RFC 6455 8.1): validate the part of an incomplete text frame
/// that has arrived, so a frame that turns invalid fails with 1007 as those bytes arrive, not
/// when the whole frame is in. The bytes checked are unmasked in place and counted in
/// `frame_checked`. Frames that will fail for another reason when complete (a message too
/// large, a message that should not start here) are left to that check, so they get its code.
fn check_partial_text(
    st: &mut State,
    h: &frame::Header,
    arrived: &mut [u8],
    cfg: &crate::config::ServerConfig,
) -> Result<(), Stop> {
    let len = h.payload_len as usize;
    let text = !st.close_sent
        && h.rsv == 0
        && match h.opcode {
            OpCode::Text => st.msg_op.is_none() && (h.fin || len <= cfg.max_message_bytes),
            OpCode::Continuation => {
                st.msg_op == Some(OpCode::Text)
                    && !st.msg_compressed
                    && st.msg.len() + len <= cfg.max_message_bytes
            }
            _ => false,
        };
    if !text || arrived.len() <= st.frame_checked {
        return Ok(());
    }
    let from = st.frame_checked;
    let new = &mut arrived[from..];
    frame::unmask(new, h.mask, from);
    st.frame_checked = from + new.len();
    st.utf8
        .feed(new)
        .map_err(|_| Stop::Fail(1007, "invalid UTF-8 in a text message"))
}

/// Handle one complete frame (payload unmasked). `checked`: leading payload bytes already fed
/// to the UTF-8 validator while the frame was incomplete.
fn on_frame<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    h: frame::Header,
    payload: &mut [u8],
    checked: usize,
) -> Result<(), Stop> {
    let cfg = &ctx.hub.config;
    match h.opcode {
        OpCode::Text | OpCode::Binary => {
            if st.msg_op.is_some() {
                return Err(Stop::Fail(
                    1002,
                    "a new message started before the previous one ended",
                ));
            }
            let compressed = h.rsv & 0b100 != 0;
            if h.fin {
                if compressed {
                    return deliver_compressed(io, shared, ctx, st, h.opcode, payload);
                }
                if h.opcode == OpCode::Text {
                    let valid = if checked == 0 {
                        std::str::from_utf8(payload).is_ok()
                    } else {
                        st.utf8.feed(&payload[checked..]).is_ok() && st.utf8.finish().is_ok()
                    };
                    if !valid {
                        return Err(Stop::Fail(1007, "invalid UTF-8 in a text message"));
                    }
                }
                deliver(io, shared, ctx, st, h.opcode, payload)
            } else {
                if payload.len() > cfg.max_message_bytes {
                    return Err(Stop::Fail(1009, "message too large"));
                }
                // Compressed text is validated once inflated.
                if !compressed
                    && h.opcode == OpCode::Text
                    && st.utf8.feed(&payload[checked..]).is_err()
                {
                    return Err(Stop::Fail(1007, "invalid UTF-8 in a text message"));
                }
                st.msg_op = Some(h.opcode);
                st.msg_compressed = compressed;
                st.msg.extend_from_slice(payload);
                Ok(())
            }
        }
        OpCode::Continuation => {
            let Some(op) = st.msg_op else {
                return Err(Stop::Fail(1002, "continuation frame without a message"));
            };
            if h.rsv != 0 {
                return Err(Stop::Fail(
                    1002,
                    "RSV1 is set on the first frame of a message only",
                ));
            }
            if st.msg.len() + payload.len() > cfg.max_message_bytes {
                return Err(Stop::Fail(1009, "message too large"));
            }
            let compressed = st.msg_compressed;
            if !compressed && op == OpCode::Text && st.utf8.feed(&payload[checked..]).is_err() {
                return Err(Stop::Fail(1007, "invalid UTF-8 in a text message"));
            }
            st.msg.extend_from_slice(payload);
            if h.fin {
                if !compressed && op == OpCode::Text && st.utf8.finish().is_err() {
                    return Err(Stop::Fail(1007, "invalid UTF-8 in a text message"));
                }
                st.msg_op = None;
                st.msg_compressed = false;
                let mut msg = std::mem::take(&mut st.msg);
                let r = if compressed {
                    deliver_compressed(io, shared, ctx, st, op, &msg)
                } else {
                    deliver(io, shared, ctx, st, op, &mut msg)
                };
                msg.clear();
                if msg.capacity() <= RECV_BUF {
                    st.msg = msg; // keep a small buffer; large ones go back to the allocator
                }
                r?;
            }
            Ok(())
        }
        OpCode::Ping => {
            send(
                io,
                shared,
                &ctx.hub.metrics,
                st,
                OpCode::Pong,
                payload,
                cfg.fragment_bytes,
            );
            Ok(())
        }
        OpCode::Pong => Ok(()),
        OpCode::Close => on_close(io, shared, ctx, st, payload),
    }
}

fn on_close<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    payload: &[u8],
) -> Result<(), Stop> {
    let m = &ctx.hub.metrics;
    let code = match payload.len() {
        0 => None,
        1 => return Err(Stop::Fail(1002, "close payload of one byte")),
        _ => {
            let c = u16::from_be_bytes([payload[0], payload[1]]);
            if !frame::valid_close_code(c) {
                return Err(Stop::Fail(1002, "invalid close code"));
            }
            if std::str::from_utf8(&payload[2..]).is_err() {
                return Err(Stop::Fail(1007, "invalid UTF-8 in the close reason"));
            }
            Some(c)
        }
    };
    m.close_received(code.unwrap_or(1005));
    st.close_received = true;
    if !st.close_sent {
        // Echo the code back (an empty close for an empty close), then the server closes TCP.
        let body = code.map(|c| c.to_be_bytes().to_vec()).unwrap_or_default();
        shared.stop_queueing(1000);
        send(io, shared, m, st, OpCode::Close, &body, usize::MAX);
        st.close_unwritten = Some(code.unwrap_or(1005));
        st.close_sent = true;
        // A peer that sent its close and stopped reading does not hold us longer than this.
        st.close_deadline = Some(Instant::now() + CLOSE_WAIT);
    }
    Ok(())
}

/// Fail the connection: send a close with `code` and stop handling data (RFC 6455 7.1.7: no
/// close is awaited, the rest of the input is discarded until the peer's FIN).
fn fail<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    code: u16,
    why: &'static str,
) {
    st.failed = true;
    st.partial = Vec::new();
    st.frame_checked = 0;
    st.msg = Vec::new();
    st.msg_op = None;
    if st.close_sent {
        return;
    }
    let mut body = code.to_be_bytes().to_vec();
    body.extend_from_slice(why.as_bytes());
    shared.stop_queueing(code);
    send(
        io,
        shared,
        &ctx.hub.metrics,
        st,
        OpCode::Close,
        &body,
        usize::MAX,
    );
    st.close_unwritten = Some(code);
    st.close_sent = true;
    st.close_deadline = Some(Instant::now() + CLOSE_WAIT);
}

/// Queue a close the server initiates (heartbeat, backpressure, shutdown).
fn start_close(shared: &Arc<Shared>, st: &mut State, code: u16, why: &str, wait: Duration) {
    let mut body = code.to_be_bytes().to_vec();
    body.extend_from_slice(why.as_bytes());
    let frame = Bytes::from(frame::encode_message(
        OpCode::Close,
        &body,
        usize::MAX,
        false,
    ));
    let mut out = shared.out.lock().unwrap();
    shared.queued.fetch_add(frame.len(), Relaxed);
    out.frames.push_back(frame);
    drop(out);
    st.close_unwritten = Some(code);
    st.close_sent = true;
    st.close_deadline = Some(Instant::now() + wait);
}

/// A complete compressed message: inflate (stopping at the message cap), validate, deliver.
fn deliver_compressed<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    op: OpCode,
    data: &[u8],
) -> Result<(), Stop> {
    let Some(d) = st.deflate.as_mut() else {
        return Err(Stop::Fail(1002, "RSV1 without permessage-deflate"));
    };
    d.inflate(data, ctx.hub.config.max_message_bytes)?;
    let mut msg = std::mem::take(&mut d.inflated);
    let r = if op == OpCode::Text && std::str::from_utf8(&msg).is_err() {
        Err(Stop::Fail(1007, "invalid UTF-8 in a text message"))
    } else {
        deliver(io, shared, ctx, st, op, &mut msg)
    };
    if let Some(d) = st.deflate.as_mut() {
        d.done_inflated(msg);
    }
    r
}

/// A complete message arrived: hand it to the application.
fn deliver<T: Transport>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx,
    st: &mut State,
    op: OpCode,
    payload: &mut [u8],
) -> Result<(), Stop> {
    let hub = &ctx.hub;
    let m = &hub.metrics;
    m.messages_in.fetch_add(1, Relaxed);
    m.bytes_in.fetch_add(payload.len() as u64, Relaxed);
    match hub.config.app {
        App::Echo if hub.config.handler == Handler::Echo => {
            send(io, shared, m, st, op, payload, hub.config.fragment_bytes);
            m.messages_out.fetch_add(1, Relaxed);
        }
        App::Echo => {
            let job = Job {
                conn: shared.clone(),
                opcode: op,
                payload: payload.to_vec(),
            };
            if let Some(tx) = &ctx.offload {
                match tx.try_send(job) {
                    Ok(()) => {
                        m.offload_queue_depth.fetch_add(1, Relaxed);
                    }
                    Err(async_channel::TrySendError::Full(job)) => st.pending_job = Some(job),
                    Err(async_channel::TrySendError::Closed(_)) => {}
                }
            }
        }
        App::Broadcast => hub.broadcast(op, payload),
        App::Channels => {
            if op != OpCode::Text {
                return Err(Stop::Fail(1003, "the channels protocol is JSON text"));
            }
            if let Some(reply) = hub.channel_message(shared, &mut st.channels, payload) {
                send(
                    io,
                    shared,
                    m,
                    st,
                    OpCode::Text,
                    reply.as_bytes(),
                    hub.config.fragment_bytes,
                );
                m.messages_out.fetch_add(1, Relaxed);
            }
        }
    }
    Ok(())
}

/// Replies batched beyond this many bytes are committed early.
const BATCH_MAX: usize = 64 << 10;

/// Send a message from the connection's own task. Plain frames are batched: everything one
/// read produced (16 echoes for 16 pipelined messages) goes out in one write when the read has
/// been processed (`commit`), so a busy connection costs one syscall per read, not one per
/// message. Compressed frames, fragmented messages and closes are written at once, after the
/// batch, so order is kept. All writes hold the queue lock, so a broadcast can never land in the
/// middle of a partly written frame.
fn send<T: Transport>(
    io: &T,
    shared: &Shared,
    m: &Metrics,
    st: &mut State,
    op: OpCode,
    payload: &[u8],
    fragment: usize,
) {
    // Data messages above the threshold go compressed (RSV1 on the first frame); control
    // frames never are. Compression runs before the queue lock, so broadcasts to this peer
    // never wait for it.
    let data = matches!(op, OpCode::Text | OpCode::Binary);
    let rsv1 = match st.deflate.as_deref_mut() {
        Some(d) if data => d.compress(payload, shared),
        _ => false,
    };
    if !rsv1 && payload.len() <= fragment && op != OpCode::Close {
        let mut hdr = [0u8; 10];
        let hl = frame::encode_header(&mut hdr, true, false, op, payload.len());
        st.batch.extend_from_slice(&hdr[..hl]);
        st.batch.extend_from_slice(payload);
        if st.batch.len() >= BATCH_MAX {
            commit(io, shared, m, st);
        }
        return;
    }
    commit(io, shared, m, st);
    let mut out = shared.out.lock().unwrap();
    if rsv1 && shared.deflate_stale.load(Relaxed) {
        // A frame compressed elsewhere was queued while we compressed: it sits between our
        // history and this message in the peer's window. Compress again from a reset context
        // (rare; with the lock held nothing else can slip in).
        if let Some(d) = st.deflate.as_deref_mut() {
            d.compress(payload, shared);
        }
    }
    let payload: &[u8] = match &st.deflate {
        Some(d) if rsv1 => &d.compressed,
        _ => payload,
    };
    if payload.len() > fragment {
        let frame = Bytes::from(frame::encode_message(op, payload, fragment, rsv1));
        let before = shared.queued.fetch_add(frame.len(), Relaxed);
        out.frames.push_back(frame);
        if before > 0 && before + out.frames.back().map_or(0, |f| f.len()) > shared.send_cap {
            shared.backpressure(m);
        }
    } else {
        let mut hdr = [0u8; 10];
        let hl = frame::encode_header(&mut hdr, true, rsv1, op, payload.len());
        write_or_queue(io, shared, m, out, &hdr[..hl], payload);
    }
    if let Some(d) = st.deflate.as_deref_mut().filter(|_| rsv1) {
        d.trim_compressed();
    }
}

/// Write the batched replies: straight to the socket when nothing is queued (one vectored
/// write), the rest queued.
fn commit<T: Transport>(io: &T, shared: &Shared, m: &Metrics, st: &mut State) {
    if st.batch.is_empty() {
        return;
    }
    let out = shared.out.lock().unwrap();
    write_or_queue(io, shared, m, out, &st.batch, &[]);
    st.batch.clear();
    // A burst's buffer goes back to the allocator; an idle connection holds none.
    if st.batch.capacity() > 4096 {
        st.batch = Vec::new();
    }
}

/// Write `head` + `body` directly when the queue is empty, and queue whatever the socket did
/// not take (that rest is then the queue's head: it must go out whole).
fn write_or_queue<T: Transport>(
    io: &T,
    shared: &Shared,
    m: &Metrics,
    mut out: std::sync::MutexGuard<'_, Out>,
    head: &[u8],
    body: &[u8],
) {
    let total = head.len() + body.len();
    let written = if out.frames.is_empty() && !io.wants_flush() {
        io.try_write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            .unwrap_or_default()
    } else {
        0
    };
    m.bytes_out.fetch_add(written as u64, Relaxed);
    if written < total {
        let mut rest = Vec::with_capacity(total - written);
        if written < head.len() {
            rest.extend_from_slice(&head[written..]);
            rest.extend_from_slice(body);
        } else {
            rest.extend_from_slice(&body[written - head.len()..]);
        }
        let before = shared.queued.fetch_add(rest.len(), Relaxed);
        // Only written directly when the queue was empty: this rest is now its head.
        if written > 0 {
            out.head_is_rest = true;
        }
        out.frames.push_back(Bytes::from(rest));
        if before > 0 && shared.queued.load(Relaxed) > shared.send_cap {
            shared.backpressure(m);
        }
    }
}

/// Write queued frames with vectored writes until done or the socket is full. Returns whether
/// output is still pending.
fn flush<T: Transport>(io: &T, shared: &Shared, m: &Metrics) -> io::Result<bool> {
    if io.wants_flush() {
        match io.try_flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    let mut out = shared.out.lock().unwrap();
    while !out.frames.is_empty() {
        let mut slices: [IoSlice<'_>; 32] = std::array::from_fn(|_| IoSlice::new(&[]));
        let mut n_slices = 0;
        for (i, f) in out.frames.iter().take(32).enumerate() {
            slices[i] = IoSlice::new(if i == 0 { &f[out.head_off..] } else { &f[..] });
            n_slices += 1;
        }
        let n = match io.try_write_vectored(&slices[..n_slices]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(true);
        }
        m.bytes_out.fetch_add(n as u64, Relaxed);
        shared.queued.fetch_sub(n, Relaxed);
        let mut left = n;
        while left > 0 {
            let head_len = out.frames[0].len() - out.head_off;
            if left >= head_len {
                left -= head_len;
                out.frames.pop_front();
                out.head_off = 0;
                out.head_is_rest = false;
            } else {
                out.head_off += left;
                left = 0;
            }
        }
    }
    if out.frames.capacity() > 64 {
        out.frames.shrink_to(8);
    }
    drop(out);
    if io.wants_flush() {
        match io.try_flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}
