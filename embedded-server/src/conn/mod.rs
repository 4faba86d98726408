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

use crate::deflate::Agreed;
use crate::frame::OpCode;
use crate::hub::Hub;
use crate::offload::Job;
use crate::outbox::Shared;
use crate::transport::Transport;
use crate::utf8::Utf8Validator;
use close::{closed_write, on_close_request};
use compression::DeflateState;
use read::{on_readable, process_owned};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use write::flush;

/// Everything a connection needs from the server.
pub struct Ctx {
    pub hub: Arc<Hub>,
    pub offload: Option<crate::offload::Sender>,
    /// Abuse limits' state (per-address counts, rates).
    pub limits: Arc<crate::limits::Limits>,
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
    fn new(partial: Vec<u8>, deflate: Option<Box<DeflateState>>) -> State {
        State {
            partial,
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
        }
    }

    /// No more frames are read: the peer's close arrived or we failed the connection. Input
    /// that still comes is read and discarded (never buffered), so closing sends no RST.
    fn input_done(&self) -> bool {
        self.close_received || self.failed
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
    let deflate = deflate.map(|agreed| DeflateState::new(agreed, &hub.config, hub.metrics.clone()));
    let mut st = State::new(initial, deflate);
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
        on_close_request(shared, st, &hub.config);
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
            _ = shared.notified() => {
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
