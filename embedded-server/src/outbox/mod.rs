//! A connection's outbound side, the half other threads touch: its queue of encoded frames,
//! the close requests, and the direct write that makes fan-out one syscall per recipient.
//!
//! The hub (broadcast, channels, heartbeat), the offload pool (replies) and the connection's
//! own task (conn/) all write through a `Shared`; this module depends on none of them, so
//! they depend on it and not on each other. Its guarantees:
//! - every write to a connection's socket, direct or from the queue, happens under the `out`
//!   lock, so frames never interleave and order is kept;
//! - the socket is written directly only while its descriptor is in `direct_fd`, which the
//!   connection clears (under the lock, by dropping `DirectGuard`) before the socket closes;
//! - nothing is queued after a close frame (`close_request` is set before the close is queued,
//!   and checked again under the lock);
//! - a consumer is closed, never waited for, when its unsent bytes stay above the cap past the
//!   drain timeout (the heartbeat sweep) or pass the hard ceiling (the connection's memory
//!   share) at once. A burst may take the queue above the cap: before judging, what is queued
//!   is written to the socket if it takes it, since the connection's own task may not yet have
//!   had a turn to write it.

use crate::budget::Store;
use crate::deflate::{Agreed, DeflateSettings};
use crate::frame::{self, OpCode};
use crate::metrics::Metrics;
use bytes::Bytes;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU16, AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed,
};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

/// Frames handed to one vectored write.
pub(crate) const WRITE_SLICES: usize = 32;

/// The half of a connection other threads touch: its outgoing queue and close requests.
/// 104 bytes (jemalloc's 128 class with the `Arc`'s counts; the unit test
/// `an_idle_outbox_fits_its_allocator_class` holds it there): the queue itself exists only
/// while frames wait (`Out`).
pub struct Shared {
    /// The connection's id (unique in its hub).
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
    /// The send-queue cap in bytes (at most 4 GiB: beside `send_ceiling_kib`, the pair takes
    /// the place of one usize).
    send_cap: u32,
    /// The most the queue may hold at once (at least `send_cap`), in KiB rounded up: past it
    /// the consumer is closed at once, however recently it fell behind. A u32 of KiB (up to
    /// 4 TiB) fits beside the other small fields, where a usize would cost this struct its
    /// allocator class.
    send_ceiling_kib: u32,
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
    /// The connection's task has finished: handles still held elsewhere see it closed.
    ended: AtomicBool,
    /// It joined a channel at least once (the hub cleans up after it on close).
    subscribed: AtomicBool,
    /// The message rate limit's bucket (abuse/); unused while that limit is off.
    pub(crate) msg_rate: crate::abuse::MessageBucket,
    /// Coarse clock seconds since which the connection's task has held an incomplete frame or
    /// message (0: none); the heartbeat sweep enforces the message timeout on it.
    pub(crate) input_since: AtomicU32,
    /// Coarse clock seconds since which the sweep has seen the queue above its cap (0: not
    /// above); kept by the sweep alone, so no write path reads a clock.
    pub(crate) over_cap_since: AtomicU32,
    /// Why someone else asked for the close (`CloseWhy`), for its reason and its handling.
    close_why: AtomicU8,
}

/// Why a close was asked for from outside the connection's task, where the code alone does
/// not say (1008 and 1013 each have several causes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CloseWhy {
    /// Not said (the heartbeat, shutdown and the application have codes of their own).
    Other = 0,
    /// More queued than the send-queue cap.
    Backpressure = 1,
    /// Queuing would pass the server's memory budget.
    Budget = 2,
    /// The queue stayed above its cap past the drain timeout.
    Drain = 3,
    /// A message or frame did not arrive whole within the message timeout.
    MessageTimeout = 4,
    /// The memory budget was short and this connection held the most unread output: its
    /// queue was given back (`budget::Holder`).
    Reclaimed = 5,
    /// `Reclaimed`, and a frame was partly on the wire when its queue was given back: no close
    /// frame can follow, the connection is dropped.
    ReclaimedMidFrame = 6,
}

impl CloseWhy {
    /// The reason sent in the close frame.
    pub(crate) fn reason(self) -> Option<&'static str> {
        Some(match self {
            CloseWhy::Other => return None,
            CloseWhy::Backpressure => "send queue full: consumer too slow",
            CloseWhy::Budget => "server memory budget spent: try again later",
            CloseWhy::Drain => "send queue did not drain in time: consumer too slow",
            CloseWhy::MessageTimeout => "message not completed in time",
            CloseWhy::Reclaimed | CloseWhy::ReclaimedMidFrame => {
                "server memory budget spent: send queue not read"
            }
        })
    }
}

/// The close code for a connection refused a charge to the memory budget: 1013, try again
/// later (RFC 6455 7.4.1: the server, not the client's message, is the problem).
pub(crate) const BUDGET_CLOSE: u16 = 1013;

/// The queue, only while frames wait in it: allocated when the first frame is queued and
/// freed when the last one is written, so an idle connection (and one that was busy once)
/// holds 8 bytes here, not a 48-byte header and a ring buffer
/// (bench/results/2026-12-01-idle-bytes.md). Only reachable through the lock (`Shared::lock`). Invariant: `Some`
/// holds at least one frame.
type Out = Option<Box<Queue>>;

#[derive(Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    /// Bytes of the first frame already written.
    head_off: usize,
    /// The first frame is the rest of a frame partly written directly (its start is already on
    /// the wire), so it must go out whole even when the queue is dropped.
    head_is_rest: bool,
}

impl Shared {
    /// An empty outbox for connection `id`: its queue goes above `send_cap` only while it
    /// drains (the sweep's drain timeout), and never past `send_ceiling`.
    pub fn new(
        id: u64,
        send_cap: usize,
        send_ceiling: usize,
        backpressure_code: u16,
        now: u32,
    ) -> Shared {
        Shared {
            id,
            out: Mutex::new(None),
            queued: AtomicUsize::new(0),
            notify: Notify::new(),
            close_request: AtomicU16::new(0),
            last_seen: AtomicU32::new(now),
            last_ping: AtomicU32::new(now),
            send_cap: send_cap.min(u32::MAX as usize) as u32,
            send_ceiling_kib: send_ceiling
                .max(send_cap)
                .div_ceil(1024)
                .min(u32::MAX as usize) as u32,
            backpressure_code,
            shared_deflate_bits: AtomicU8::new(0),
            deflate_takeover: AtomicBool::new(false),
            deflate_stale: AtomicBool::new(false),
            direct_fd: AtomicI32::new(-1),
            holds_compressor: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            msg_rate: Default::default(),
            input_since: AtomicU32::new(0),
            over_cap_since: AtomicU32::new(0),
            close_why: AtomicU8::new(CloseWhy::Other as u8),
        }
    }

    /// Count `n` bytes into the queue (its counter, the server-wide gauge and the budget)
    /// without a check: bytes that must go out for the stream to stay whole (the rest of a
    /// frame already started on the wire, a close frame).
    fn add_queued(&self, n: usize, metrics: &Metrics) {
        self.queued.fetch_add(n, Relaxed);
        metrics.memory.charge(Store::Queue, n);
    }

    /// Count `n` bytes into the queue if the memory budget has room; otherwise ask for the
    /// close (1013) and return false.
    fn try_add_queued(&self, n: usize, metrics: &Metrics) -> bool {
        let holds = self.queued.load(Relaxed);
        if !metrics.memory.try_charge(Store::Queue, n, holds) {
            self.request_close_why(BUDGET_CLOSE, CloseWhy::Budget);
            return false;
        }
        self.queued.fetch_add(n, Relaxed);
        true
    }

    /// `n` queued bytes are gone (written or dropped).
    fn sub_queued(&self, n: usize, metrics: &Metrics) {
        if n > 0 {
            self.queued.fetch_sub(n, Relaxed);
            metrics.memory.release(Store::Queue, n);
        }
    }

    /// The connection is over: nothing more is queued (pushes answer false from now on), and
    /// what was never written is dropped and given back to the budget.
    pub(crate) fn end(&self, metrics: &Metrics) {
        self.ended.store(true, Relaxed);
        let _ = self
            .close_request
            .compare_exchange(0, 1006, Relaxed, Relaxed);
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *out = None;
        let left = self.queued.swap(0, Relaxed);
        drop(out);
        if left > 0 {
            metrics.memory.release(Store::Queue, left);
        }
    }

    /// Whether the connection's task has finished.
    pub fn ended(&self) -> bool {
        self.ended.load(Relaxed)
    }

    pub(crate) fn set_subscribed(&self) {
        self.subscribed.store(true, Relaxed);
    }

    pub(crate) fn subscribed(&self) -> bool {
        self.subscribed.load(Relaxed)
    }

    /// Queue an encoded frame (shared, not copied) and wake the connection. A consumer whose
    /// queue would pass its ceiling is closed instead: broadcast never waits for the slowest
    /// client.
    pub fn push(&self, frame: Bytes, metrics: &Metrics) -> bool {
        let mut written = 0;
        let pushed = self.push_frame(frame, metrics, false, &mut written);
        count_written(metrics, written);
        pushed
    }

    /// Queue a frame compressed from a reset context outside this connection's task.
    pub fn push_compressed(&self, frame: Bytes, metrics: &Metrics) -> bool {
        let mut written = 0;
        let stale = self.deflate_takeover.load(Relaxed);
        let pushed = self.push_frame(frame, metrics, stale, &mut written);
        count_written(metrics, written);
        pushed
    }

    /// `push` (or `push_compressed`) for a fan-out: the bytes written directly are added to
    /// `written` for the caller to count once per fan-out, not with one shared atomic per
    /// recipient (a cache line every I/O thread's counters also write).
    pub(crate) fn push_tallied(
        &self,
        frame: Bytes,
        compressed: bool,
        metrics: &Metrics,
        written: &mut u64,
    ) -> bool {
        let stale = compressed && self.deflate_takeover.load(Relaxed);
        self.push_frame(frame, metrics, stale, written)
    }

    /// Fan-out's cost is this function times the recipients, so the common case is one
    /// syscall: when nothing is queued for this connection and its socket is plain TCP, the
    /// frame goes straight to the kernel from the calling thread (a broadcaster, the heartbeat)
    /// without waking the connection's task. Only what the socket does not take is queued, and
    /// then the task is woken to write it when the socket drains. Every write to the socket
    /// happens under the `out` lock, so frames never interleave and order is kept.
    fn push_frame(&self, frame: Bytes, metrics: &Metrics, stale: bool, tally: &mut u64) -> bool {
        if self.close_request.load(Relaxed) != 0 {
            return false;
        }
        // Nothing to send (no frame is empty; a caller's empty `Bytes`): queued, it would stay
        // at the head with zero bytes to write and the connection would spin on `writable`.
        if frame.is_empty() {
            return true;
        }
        let len = frame.len();
        let mut out = self.out.lock().unwrap();
        // Checked again under the lock: the connection queues its close frame under it after
        // setting `close_request`, and nothing may follow a close frame on the wire.
        if self.close_request.load(Relaxed) != 0 {
            return false;
        }
        let fd = self.direct_fd.load(Relaxed);
        if out.is_some() && self.queued.load(Relaxed) + len > self.send_cap() {
            // Above the cap only because nobody wrote yet? The connection's task may not have
            // had its turn (a publisher on the same I/O thread keeps it busy), while the kernel
            // takes about TCP_NOTSENT_LOWAT at a time: write what the socket takes now.
            let mut locked = Locked { shared: self, out };
            *tally += locked.write_direct(fd, metrics) as u64;
            out = locked.out;
        }
        // A consumer is slow when it stays behind (the sweep's drain timeout), not when a burst
        // arrives: the queue may pass its cap while it drains, never its ceiling. A frame bigger
        // than the ceiling still goes to an empty queue (one large message is not a backlog).
        let queued = self.queued.load(Relaxed);
        if queued > 0 && queued + len > self.send_ceiling() {
            drop(out);
            self.backpressure(metrics);
            return false;
        }
        if stale {
            self.deflate_stale.store(true, Relaxed);
        }
        let mut frame = frame;
        let mut started = false;
        if out.is_none() {
            let written = direct_write(fd, &frame);
            *tally += written as u64;
            if written == len {
                drop(out);
                if self.holds_compressor.load(Relaxed) {
                    self.notify.notify_one();
                }
                return true;
            }
            if written > 0 {
                // The frame's start is on the wire: its rest must go out whole.
                started = true;
                frame = frame.slice(written..);
            }
        }
        // Counted before the lock goes: the task may write (and subtract) it right after. A
        // frame whose start is on the wire goes whole whatever the budget says.
        if started {
            self.add_queued(frame.len(), metrics);
        } else if !self.try_add_queued(frame.len(), metrics) {
            return false;
        }
        let q = out.get_or_insert_with(Box::default);
        q.head_is_rest |= started;
        q.frames.push_back(frame);
        drop(out);
        self.notify.notify_one();
        true
    }

    /// Let other threads write to `fd` directly (`None`: never, e.g. TLS) until the returned
    /// guard drops; it must drop before the socket closes.
    pub(crate) fn allow_direct(&self, fd: Option<i32>) -> DirectGuard<'_> {
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
        deflate: &DeflateSettings,
        metrics: &Metrics,
    ) {
        let bits = self.shared_deflate_bits.load(Relaxed);
        let pushed = if bits != 0
            && payload.len() >= deflate.threshold
            && crate::deflate::worth_compressing(payload, bits, deflate.mem_level, deflate.level)
        {
            let mut z = Vec::new();
            let created = crate::deflate::compress_fresh(
                bits,
                deflate.mem_level,
                deflate.level,
                payload,
                &mut z,
            );
            crate::deflate::charge_thread(&metrics.deflate_memory_bytes, created);
            if z.len() < payload.len() {
                let frame = Bytes::from(frame::encode_message(opcode, &z, fragment, true));
                self.push_compressed(frame, metrics)
            } else {
                // Incompressible: deflate would only add its framing.
                metrics.deflate_skipped.fetch_add(1, Relaxed);
                let frame = Bytes::from(frame::encode_message(opcode, payload, fragment, false));
                self.push(frame, metrics)
            }
        } else {
            let frame = Bytes::from(frame::encode_message(opcode, payload, fragment, false));
            self.push(frame, metrics)
        };
        if pushed {
            metrics.messages_out.fetch_add(1, Relaxed);
        }
    }

    /// Record what permessage-deflate this peer agreed to, for frames compressed elsewhere.
    pub fn set_deflate(&self, agreed: &Agreed, ours: &DeflateSettings) {
        self.shared_deflate_bits
            .store(agreed.server_window_bits.min(ours.window_bits), Relaxed);
        self.deflate_takeover
            .store(!agreed.server_no_context_takeover, Relaxed);
    }

    /// Close this consumer for exceeding its send-queue cap (counted once).
    pub(crate) fn backpressure(&self, metrics: &Metrics) {
        if self.request_close_why(self.backpressure_code, CloseWhy::Backpressure) {
            metrics.backpressure_closes.fetch_add(1, Relaxed);
        }
    }

    /// Close this consumer because its queue stayed above the cap past the drain timeout
    /// (counted once, as a backpressure close and a drain timeout).
    pub(crate) fn drain_timeout(&self, metrics: &Metrics) {
        if self.request_close_why(self.backpressure_code, CloseWhy::Drain) {
            metrics.backpressure_closes.fetch_add(1, Relaxed);
            metrics.drain_timeouts.fetch_add(1, Relaxed);
        }
    }

    /// Ask for a close with `code` for `why` (first request wins, and its reason with it).
    pub(crate) fn request_close_why(&self, code: u16, why: CloseWhy) -> bool {
        let first = self
            .close_request
            .compare_exchange(0, code, Relaxed, Relaxed)
            .is_ok();
        if first {
            self.close_why.store(why as u8, Relaxed);
        }
        self.notify.notify_one();
        first
    }

    /// Why the close was asked for (`CloseWhy::Other` when nobody said).
    pub(crate) fn close_why(&self) -> CloseWhy {
        match self.close_why.load(Relaxed) {
            1 => CloseWhy::Backpressure,
            2 => CloseWhy::Budget,
            3 => CloseWhy::Drain,
            4 => CloseWhy::MessageTimeout,
            5 => CloseWhy::Reclaimed,
            6 => CloseWhy::ReclaimedMidFrame,
            _ => CloseWhy::Other,
        }
    }

    /// The send-queue cap.
    pub(crate) fn send_cap(&self) -> usize {
        self.send_cap as usize
    }

    /// The most the queue may hold at once.
    pub(crate) fn send_ceiling(&self) -> usize {
        (self.send_ceiling_kib as usize) << 10
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

    /// The close someone asked for (0: none). Never cleared: while set, nothing more is queued
    /// (a swap to 0 and back left a window in which a broadcaster could write after our close
    /// frame, and in which a second close request counted again).
    pub(crate) fn close_requested(&self) -> u16 {
        self.close_request.load(Relaxed)
    }

    /// Our close is on its way: nothing more may be queued after it (a broadcast or an
    /// offloaded reply behind a close frame would be a protocol violation).
    pub(crate) fn stop_queueing(&self, code: u16) {
        let _ = self
            .close_request
            .compare_exchange(0, code, Relaxed, Relaxed);
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// Wait until someone queued for this connection or asked it to close.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }

    /// Whether a frame compressed elsewhere went out since our compressor's last message, and
    /// forget it (the compressor is about to start over).
    pub(crate) fn take_deflate_stale(&self) -> bool {
        self.deflate_stale.swap(false, Relaxed)
    }

    /// Whether a frame compressed elsewhere went out since our compressor's last message.
    pub(crate) fn deflate_stale(&self) -> bool {
        self.deflate_stale.load(Relaxed)
    }

    /// The connection now holds (or no longer holds) a compressor to free when idle.
    pub(crate) fn set_holds_compressor(&self, holds: bool) {
        self.holds_compressor.store(holds, Relaxed);
    }

    /// The queue, locked: every write to the socket happens while this is held.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            shared: self,
            out: self.out.lock().unwrap(),
        }
    }
}

/// A short memory budget closes the connections holding the most unread output (budget.rs).
impl crate::budget::Holder for Shared {
    fn behind(&self) -> usize {
        let queued = self.queued.load(Relaxed);
        if queued <= self.send_cap() || self.close_request.load(Relaxed) != 0 {
            return 0;
        }
        queued
    }

    fn reclaim(&self, budget: &crate::budget::Budget) -> Option<usize> {
        // Never waits: the caller may hold its own queue's lock (a charge for a frame being
        // queued), and a connection busy writing is making progress anyway.
        let mut out = self.out.try_lock().ok()?;
        if self.behind() == 0 || !self.request_close_why(BUDGET_CLOSE, CloseWhy::Reclaimed) {
            return None;
        }
        // Asked under the lock: the connection cannot queue its close frame before its queue
        // is gone. All of it goes, a frame partly on the wire too (an amplified echo is one
        // frame of megabytes); then no close frame can follow and the connection is dropped.
        if let Some(q) = out.take() {
            if q.head_off > 0 || q.head_is_rest {
                self.close_why
                    .store(CloseWhy::ReclaimedMidFrame as u8, Relaxed);
            }
        }
        let freed = self.queued.swap(0, Relaxed);
        budget.release(Store::Queue, freed);
        Some(freed)
    }
}

/// The queue under its lock: what the connection's writer works on.
pub(crate) struct Locked<'a> {
    shared: &'a Shared,
    out: MutexGuard<'a, Out>,
}

impl Locked<'_> {
    /// Nothing waits to be written: a new frame may go straight to the socket.
    pub(crate) fn is_empty(&self) -> bool {
        self.out.is_none()
    }

    /// The queue, created for a frame about to be queued.
    fn queue(&mut self) -> &mut Queue {
        self.out.get_or_insert_with(Box::default)
    }

    /// Queue a frame; a consumer that already had bytes waiting and now passes its ceiling is
    /// closed (one large frame to an empty queue always goes; above the cap, the sweep's
    /// drain timeout judges).
    pub(crate) fn enqueue(&mut self, frame: Bytes, metrics: &Metrics) {
        let len = frame.len();
        let before = self.shared.queued.load(Relaxed);
        if !self.shared.try_add_queued(len, metrics) {
            return; // closing with 1013: the frame is dropped, its bytes never held
        }
        self.queue().frames.push_back(frame);
        if before > 0 && before + len > self.shared.send_ceiling() {
            self.shared.backpressure(metrics);
        }
    }

    /// Write what the socket takes of the queue from this thread (plain TCP only: `fd` is the
    /// socket while direct writes are allowed, else -1 and nothing is written); the bytes
    /// written.
    fn write_direct(&mut self, fd: i32, metrics: &Metrics) -> usize {
        let mut total = 0;
        while fd >= 0 && !self.is_empty() {
            let mut slices: [IoSlice<'_>; WRITE_SLICES] =
                std::array::from_fn(|_| IoSlice::new(&[]));
            let n_slices = self.slices(&mut slices);
            let want: usize = slices[..n_slices].iter().map(|s| s.len()).sum();
            let n = direct_writev(fd, &slices[..n_slices]);
            if n == 0 {
                break;
            }
            self.consume(n, metrics);
            total += n;
            if n < want {
                break;
            }
        }
        total
    }

    /// Queue the rest of a frame whose first `written` bytes went to the socket directly (it
    /// was written only because the queue was empty, so the rest is now the queue's head and
    /// must go out whole, budget or not).
    pub(crate) fn enqueue_rest(&mut self, rest: Bytes, written: usize, metrics: &Metrics) {
        if written == 0 {
            self.enqueue(rest, metrics);
            return;
        }
        self.shared.add_queued(rest.len(), metrics);
        let q = self.queue();
        q.frames.push_back(rest);
        q.head_is_rest = true;
    }

    /// Queue our close frame; no cap applies to it.
    pub(crate) fn enqueue_close(&mut self, frame: Bytes, metrics: &Metrics) {
        self.shared.add_queued(frame.len(), metrics);
        self.queue().frames.push_back(frame);
    }

    /// A slow or silent peer's close: drop what it has not read, keep only the close frame at
    /// the back, and the frame at the head if it is already partly on the wire (the stream
    /// breaks otherwise).
    pub(crate) fn drop_unsent_before_close(&mut self, metrics: &Metrics) {
        let Some(out) = self.out.as_deref_mut() else {
            return;
        };
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
        let before = self.shared.queued.load(Relaxed);
        self.shared
            .sub_queued(before.saturating_sub(queued), metrics);
        if out.frames.is_empty() {
            *self.out = None;
        }
    }

    /// The next frames to write, at most `WRITE_SLICES` (the head without its written part).
    pub(crate) fn slices<'s>(&'s self, slices: &mut [IoSlice<'s>; WRITE_SLICES]) -> usize {
        let Some(out) = self.out.as_deref() else {
            return 0;
        };
        let mut n = 0;
        for (i, f) in out.frames.iter().take(WRITE_SLICES).enumerate() {
            slices[i] = IoSlice::new(if i == 0 { &f[out.head_off..] } else { &f[..] });
            n += 1;
        }
        n
    }

    /// `n` bytes from the head of the queue were written.
    pub(crate) fn consume(&mut self, n: usize, metrics: &Metrics) {
        self.shared.sub_queued(n, metrics);
        let Some(out) = self.out.as_deref_mut() else {
            return;
        };
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
        if out.frames.is_empty() {
            // Drained: the queue and its ring go back to the allocator.
            *self.out = None;
        }
    }

    /// After a burst: the queue's ring goes back to a small size (a drained queue is already
    /// freed).
    pub(crate) fn shrink(&mut self) {
        if let Some(q) = self.out.as_deref_mut().filter(|q| q.frames.capacity() > 64) {
            q.frames.shrink_to(8);
        }
    }
}

/// Count bytes written directly (skipped when none were: a queued frame is counted when the
/// connection's task writes it).
pub(crate) fn count_written(metrics: &Metrics, written: u64) {
    if written > 0 {
        metrics.bytes_out.fetch_add(written, Relaxed);
    }
}

/// Ends direct writes to a connection's socket; dropped before the socket is closed.
pub(crate) struct DirectGuard<'a>(&'a Shared);

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

/// `direct_write` for several buffers in one syscall.
#[cfg(unix)]
fn direct_writev(fd: i32, bufs: &[IoSlice<'_>]) -> usize {
    if fd < 0 || bufs.is_empty() {
        return 0;
    }
    // SAFETY: as in `direct_write`; `IoSlice` is ABI-compatible with `iovec` on Unix, and the
    // message header points at `bufs` only for the call.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len() as _;
        libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    n.max(0) as usize
}

#[cfg(not(unix))]
fn direct_writev(_fd: i32, _bufs: &[IoSlice<'_>]) -> usize {
    0
}

// The tests sit in their own file so that this one holds only what runs per message: the
// code's layout (and the codegen unit it lands in) is the same as before they moved.
#[cfg(test)]
mod tests;
