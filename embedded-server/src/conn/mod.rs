//! One connection's task: read frames and dispatch messages (read.rs), write replies and the
//! queue with backpressure (write.rs), close properly (close.rs), compress (compression.rs).
//! The queue other threads write to is `outbox::Shared`; this module uses it, the hub and the
//! offload pool, and none of them uses this module.
//!
//! Memory per idle connection is what matters at 100k: the task's state below, one `Shared`
//! (queue + counters) and the kernel socket. Reads go into the worker thread's receive buffer;
//! a connection owns a buffer only while it holds an incomplete frame or a fragmented message,
//! and gives it back when that is done.

mod close;
mod compression;
mod read;
#[cfg(test)]
mod testing;
mod write;

use crate::frame::OpCode;
use crate::handler::{in_scope, Conn, Handler, Local};
use crate::hub::Hub;
use crate::offload::Job;
use crate::outbox::Shared;
use crate::transport::Transport;
use crate::utf8::Utf8Validator;
use close::{closed_write, on_close_request};
use compression::DeflateState;
use read::{on_readable, process_owned, Readable};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::time::Instant;
use write::flush;

/// Everything a connection needs from the server: the hub and the application.
pub(crate) struct Ctx<H> {
    pub(crate) hub: Arc<Hub>,
    pub(crate) handler: H,
    /// Abuse limits' state (per-address counts, rates).
    pub(crate) limits: Arc<crate::abuse::Limits>,
}

/// Why processing stopped early.
enum Stop {
    /// Fail the connection with this close code.
    Fail(u16, &'static str),
}

/// Task-local state; lives as long as the connection, inside its task's future: what every
/// turn of an ordinary connection touches is here, the rest (`Rare`) behind one box.
struct State {
    /// An incomplete frame (only while one is pending).
    partial: Vec<u8>,
    /// A fragmented message being reassembled.
    msg: Vec<u8>,
    msg_op: Option<OpCode>,
    utf8: Utf8Validator,
    close_sent: bool,
    close_received: bool,
    /// We failed the connection (1002/1007/1009...): the rest of the input is discarded unread.
    failed: bool,
    /// Our write side is shut down (FIN after our close frame).
    write_shut: bool,
    /// The peer's FIN arrived.
    peer_eof: bool,
    /// Payload bytes of the incomplete frame at the head of `partial` that are already unmasked
    /// and UTF-8 validated (a text frame is checked as its bytes arrive, not when it is whole).
    frame_checked: usize,
    /// permessage-deflate, when negotiated (boxed: most of it exists only for such peers).
    deflate: Option<Box<DeflateState>>,
    /// The message being reassembled arrived compressed (RSV1 on its first frame).
    msg_compressed: bool,
    /// Plain replies produced by the current read, written together by `commit`.
    batch: Vec<u8>,
    /// Bytes of `partial` and `msg` (their capacity) charged to the memory budget.
    input_charged: usize,
    /// The task has told the sweep (`Shared::input_since`) that input is incomplete.
    input_pending: bool,
    /// A message was delivered since the last `read::settle_input`: an incomplete frame or
    /// message after it is a new one, whose time starts now.
    delivered: bool,
    /// What only a closing or parked connection needs (`State::rare`): allocated the first time
    /// one of its fields is set, so an open connection's task does not carry its ~60 bytes for
    /// its whole life (bench/results/2026-12-01-idle-bytes.md).
    rare: Option<Box<Rare>>,
}

/// `State`'s fields a connection needs only while it closes or while its offloaded jobs wait.
#[derive(Default)]
struct Rare {
    /// Jobs waiting for room in the offload queue: reading pauses until they are queued.
    pending_jobs: Vec<Job>,
    /// The close code sent, until the close frame is actually written (then it is counted).
    close_unwritten: Option<u16>,
    /// The close code sent (for `on_close` when the peer never answered).
    close_sent_code: Option<u16>,
    close_deadline: Option<Instant>,
    /// The peer's close code and reason, once its close arrived (for `on_close`).
    peer_close: Option<(u16, String)>,
    /// Reading pauses until then: the connection passed its inflate rate, or waits for a
    /// slot to handle a heavy message (`heavy.rs`).
    read_pause: Option<Instant>,
}

/// Sizes of the state one idle connection holds, by type, for the idle-bytes breakdown
/// (embedded-server/tests/idle_bytes.rs). Here, beside the types it measures, so the memory
/// formulas (`memory.rs`) stay a leaf that knows nothing of the connection.
#[cfg(feature = "internals")]
pub fn idle_layout() -> Vec<(&'static str, usize)> {
    use std::mem::size_of;
    vec![
        ("outbox::Shared (in an Arc: +16)", size_of::<Shared>()),
        ("conn::State (inside the task future)", size_of::<State>()),
        (
            "hub registry slot (Arc<Shared>, found by its id) + 1 control byte",
            size_of::<Arc<Shared>>() + 1,
        ),
        (
            "tokio::net::TcpStream (inside the task future)",
            size_of::<tokio::net::TcpStream>(),
        ),
    ]
}

impl State {
    fn new(partial: Vec<u8>, deflate: Option<Box<DeflateState>>) -> State {
        State {
            partial,
            msg: Vec::new(),
            msg_op: None,
            utf8: Utf8Validator::default(),
            close_sent: false,
            close_received: false,
            failed: false,
            write_shut: false,
            peer_eof: false,
            frame_checked: 0,
            deflate,
            msg_compressed: false,
            batch: Vec::new(),
            input_charged: 0,
            input_pending: false,
            delivered: false,
            rare: None,
        }
    }

    /// Stop handling input: what is kept of it goes back to the allocator and the budget at
    /// once, and the rest of the input is discarded unread (`input_done`).
    fn drop_input(&mut self, budget: &crate::budget::Budget) {
        self.failed = true;
        self.partial = Vec::new();
        self.frame_checked = 0;
        self.msg = Vec::new();
        self.msg_op = None;
        budget.release(crate::budget::Store::Input, self.input_charged);
        self.input_charged = 0;
    }

    /// The rarely used fields, allocated on first use (kept until the connection ends: a
    /// connection that closed or parked once is near its end or busy, not idle).
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// When a close under way gives up waiting for the peer.
    fn close_deadline(&self) -> Option<Instant> {
        self.rare.as_ref().and_then(|r| r.close_deadline)
    }

    /// Jobs wait for room in the offload queue (reading pauses meanwhile).
    fn has_pending_jobs(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| !r.pending_jobs.is_empty())
    }

    /// Reading pauses for the inflate rate or a heavy message's slot (what is already read
    /// waits in `partial`).
    fn paused(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.read_pause.is_some())
    }

    /// No more frames are read: the peer's close arrived or we failed the connection. Input
    /// that still comes is read and discarded (never buffered), so closing sends no RST.
    fn input_done(&self) -> bool {
        self.close_received || self.failed
    }
}

/// An upgraded connection, ready to serve: everything its task keeps ([`serve`]), handed
/// over by the upgrade (accept/upgrade.rs).
pub(crate) struct Upgraded<T, H: Handler> {
    pub(crate) stream: T,
    pub(crate) conn: Conn<H::State>,
    pub(crate) ctx: Arc<Ctx<H>>,
    /// Bytes that arrived after the request header (the first frames).
    pub(crate) rest: Vec<u8>,
    pub(crate) deflate: Option<crate::deflate::Agreed>,
    /// Its part in the abuse limits (None while they are off), given back when it ends.
    pub(crate) admitted: Option<Box<crate::abuse::Admitted>>,
    /// The id its log events name (the accept's, as the span's and the refusals').
    pub(crate) log_id: u64,
}

/// Serve one upgraded connection until it closes (`up.rest`: bytes that arrived with the
/// upgrade request).
///
/// Not an `async fn`: its future would keep the arguments (the `Upgraded` whole: socket,
/// handles, the first bytes' `Vec`, the negotiated deflate) beside the copies moved out of
/// them, for the connection's whole life. Here they are taken apart first, and the future
/// captures each thing it keeps exactly once
/// (bench/results/2026-12-01-idle-bytes.md).
pub(crate) fn serve<T: Transport, H: Handler>(
    up: Upgraded<T, H>,
) -> impl std::future::Future<Output = ()> + Send {
    let Upgraded {
        stream: io,
        conn,
        ctx,
        rest,
        deflate,
        admitted,
        log_id,
    } = up;
    let deflate_on = deflate.is_some();
    let deflate =
        deflate.map(|agreed| DeflateState::new(agreed, &ctx.hub.config, ctx.hub.metrics.clone()));
    // The first bytes wait in `partial` (taken out again below, before the greeting): one place
    // for them, not a second field of the future.
    let mut st = State::new(rest, deflate);
    // Coarse seconds (4 bytes, not an `Instant`'s 16) for the closing event's duration.
    let opened = ctx.hub.now();
    async move {
        // The target stays the crate's, as when these events were written in the crate root: log
        // pipelines select on it.
        tracing::debug!(target: "embedded_server", conn = log_id, peer = %conn.peer(), deflate = deflate_on, "connection opened");
        let hub = &ctx.hub;
        let shared = conn.shared();
        let direct = shared.allow_direct(io.direct_fd());
        let initial = std::mem::take(&mut st.partial);
        // The greeting (if any) goes out before anything the first read produces.
        dispatch(&io, &conn, &ctx, &mut st, |h, c| h.on_open(c));
        write::commit(&io, shared, &hub.metrics, &mut st);
        st.partial = initial;
        let _ = run(&io, &conn, &ctx, &mut st).await;
        hub.metrics
            .memory
            .release(crate::budget::Store::Input, st.input_charged);
        st.input_charged = 0;
        drop(direct);
        if !st.write_shut {
            io.shutdown_write();
        }
        hub.registry().unregister(shared);
        let rare = st.rare.take().unwrap_or_default();
        let (code, reason) = match (rare.peer_close, rare.close_sent_code) {
            (Some(pc), _) => pc,
            (None, Some(ours)) => (ours, String::new()),
            (None, None) => (1006, String::new()),
        };
        let h = &ctx.handler;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.on_close(&conn, code, &reason)
        }))
        .is_err()
        {
            tracing::error!(conn = conn.id(), "the handler's on_close panicked");
        }
        // Its place in the abuse limits' counts, given back now that it ended.
        drop(admitted);
        // `secs` stays a float for log schemas, now in whole seconds (the hub's clock).
        let secs = f64::from(ctx.hub.now().saturating_sub(opened));
        tracing::debug!(target: "embedded_server", conn = log_id, peer = %conn.peer(), secs, "connection closed");
    }
}

/// Run a callback of the application for this connection, with its sends joining the corked
/// batch. A callback that panics fails the connection with 1011; the server goes on.
fn dispatch<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    f: impl FnOnce(&H, &Conn<H::State>),
) {
    let mut local = Sink {
        io,
        ctx,
        st,
        shared: conn.shared(),
    };
    let ok = in_scope(conn.key(), &mut local, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ctx.handler, conn))).is_ok()
    });
    if !ok {
        tracing::error!(
            conn = conn.id(),
            "the handler panicked: closing the connection with 1011"
        );
        close::fail(io, conn.shared(), ctx, st, 1011, "internal error");
    }
}

/// The connection's own task, as its callbacks see it (`handler::Local`).
struct Sink<'a, T, H> {
    io: &'a T,
    ctx: &'a Ctx<H>,
    st: &'a mut State,
    shared: &'a Arc<Shared>,
}

impl<T: Transport, H: Handler> Local for Sink<'_, T, H> {
    fn send(&mut self, op: OpCode, payload: &[u8]) -> bool {
        if self.st.close_sent {
            return false;
        }
        let m = &self.ctx.hub.metrics;
        write::send(
            self.io,
            self.shared,
            m,
            self.st,
            op,
            payload,
            self.ctx.hub.config.fragment_bytes,
        );
        m.messages_out.fetch_add(1, Relaxed);
        true
    }

    fn send_encoded(&mut self, frame: bytes::Bytes) -> bool {
        if self.st.close_sent {
            return false;
        }
        let m = &self.ctx.hub.metrics;
        // After the batch: order is kept.
        write::commit(self.io, self.shared, m, self.st);
        let pushed = self.shared.push(frame, m);
        if pushed {
            m.messages_out.fetch_add(1, Relaxed);
        }
        pushed
    }

    fn commit(&mut self) {
        if !self.st.close_sent {
            write::commit(self.io, self.shared, &self.ctx.hub.metrics, self.st);
        }
    }

    fn close(&mut self, code: u16, reason: &str) -> bool {
        if self.st.close_sent {
            return false;
        }
        close::close_from_app(self.io, self.shared, self.ctx, self.st, code, reason);
        true
    }

    fn park(&mut self, job: Job) {
        self.st.rare().pending_jobs.push(job);
    }
}

async fn run<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
) -> io::Result<()> {
    let hub = &ctx.hub;
    let m = &hub.metrics;
    let shared = conn.shared();
    if !st.partial.is_empty() {
        let mut data = std::mem::take(&mut st.partial);
        process_owned(io, conn, ctx, st, &mut data);
    }
    // Jobs parked because the offload queue was full are queued by a task of their own, and
    // this connection reads nothing more until they are in (TCP then slows the client). The
    // loop itself goes on meanwhile: a close asked for by the application, the heartbeat or a
    // shutdown, pings and replies from other threads, and the close deadline all progress.
    // A connection that ends while parked leaves its jobs to that task: each was promised
    // (`offload` answered Ok), so each is queued.
    let mut parked: Option<tokio::sync::oneshot::Receiver<()>> = None;
    loop {
        if parked.is_none() && st.has_pending_jobs() {
            let jobs = std::mem::take(&mut st.rare().pending_jobs);
            if let Some(tx) = hub.offload.get() {
                let (tx, metrics) = (tx.clone(), hub.metrics.clone());
                let (done, wait) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    for job in jobs {
                        if tx.send(job).await.is_ok() {
                            metrics.offload_queue_depth.fetch_add(1, Relaxed);
                        }
                    }
                    let _ = done.send(());
                });
                parked = Some(wait);
            }
        }
        if on_close_request(conn, st, &hub.config, m) {
            // Its queue was given back mid-frame: nothing more can be written to the stream.
            return Ok(());
        }
        let pending = flush(io, shared, m)?;
        if pending && shared.queued() > shared.send_cap() {
            // Behind: a short memory budget may close it before the next sweep lists it.
            m.memory.offer(shared);
        }
        if st.close_sent && !pending && closed_write(io, st, m) {
            return Ok(());
        }
        let closing = match st.close_deadline() {
            Some(d) if Instant::now() >= d => return Ok(()),
            d => d,
        };
        // Write readiness and the close deadline matter only while a write is pending or a
        // close is under way, never on an idle connection: boxed then (an allocation per turn
        // of that rare state), so their 152 + 112 bytes are not in every connection's task
        // for its whole life (bench/results/2026-12-01-idle-bytes.md).
        let writable = Maybe(pending.then(|| Box::pin(io.writable())));
        let closing = Maybe(closing.map(|d| Box::pin(tokio::time::sleep_until(d))));
        // The same for the parked connection's half-second tick: built (with a clock read)
        // only while parked, not on every turn of every connection.
        // A pause in reading (the inflate rate, a heavy message waiting for its slot) shares
        // that place: it ends at its own deadline.
        let paused = st.paused();
        let park_tick = Maybe(match st.rare.as_ref().and_then(|r| r.read_pause) {
            _ if parked.is_some() => Some(Box::pin(tokio::time::sleep(
                std::time::Duration::from_millis(500),
            ))),
            Some(until) => Some(Box::pin(tokio::time::sleep_until(until))),
            None => None,
        });
        tokio::select! {
            biased;
            _ = Maybe(parked.as_mut()), if parked.is_some() => {
                parked = None;
                shared.last_seen.store(hub.now(), Relaxed);
                // What was read behind the parked message, before reading more.
                if !st.partial.is_empty() {
                    let mut data = std::mem::take(&mut st.partial);
                    process_owned(io, conn, ctx, st, &mut data);
                }
            }
            // Parked, this side reads nothing, so the peer's frames (its pongs among them)
            // wait in the socket: the time counts as seen, or the heartbeat would close a live
            // client for the server's own back-pressure.
            _ = park_tick, if parked.is_some() || paused => {
                shared.last_seen.store(hub.now(), Relaxed);
                if parked.is_none() {
                    // The pause is over: what was read behind it first.
                    st.rare().read_pause = None;
                    if !st.partial.is_empty() {
                        let mut data = std::mem::take(&mut st.partial);
                        process_owned(io, conn, ctx, st, &mut data);
                    }
                }
            }
            r = io.readable(), if !st.peer_eof && parked.is_none() && !paused => {
                r?;
                let read = on_readable(io, conn, ctx, st)?;
                if matches!(read, Readable::Eof) {
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
                // A read that drained the socket needs no yield: the next `readable()` waits
                // for the kernel's next event, so the task gives the thread back by itself. A
                // lone message (independent clients) then costs one poll of the task, not two,
                // and tokio no longer polls its driver for nothing before running the yielded
                // task (an `epoll_wait` per message:
                // bench/results/2026-12-04-echo-cpu-arrivals.md). Where another I/O thread's driver marks the
                // socket readable again meanwhile, tokio's cooperative budget still ends the
                // turn after a bounded number of reads.
                if matches!(read, Readable::More) {
                    tokio::task::yield_now().await;
                }
            }
            _ = shared.notified() => {
                // Someone queued for us (on an idle connection, usually the heartbeat's
                // ping): the moment to let go of a compressor nobody is using.
                if let (Some(d), Some(idle)) = (st.deflate.as_mut(), hub.config.deflate_idle()) {
                    d.release_idle(idle, shared);
                }
            }
            r = writable, if pending => { r?; }
            _ = closing, if st.close_deadline().is_some() => {
                let _ = flush(io, shared, m);
                return Ok(());
            }
        }
    }
}

/// The output of the future inside when there is one, else never: a select! branch whose
/// future exists only while it can fire. A plain `Future` of 8 bytes (a box or a reference);
/// an `async fn` doing the same kept both its argument and the awaited box, 24 bytes, and
/// every connection's task holds four of these.
struct Maybe<F>(Option<F>);

impl<F: std::future::Future + Unpin> std::future::Future for Maybe<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        match self.0.as_mut() {
            Some(f) => std::pin::Pin::new(f).poll(cx),
            None => std::task::Poll::Pending,
        }
    }
}
