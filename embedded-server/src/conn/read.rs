//! Reading and dispatch: one read into the worker's shared receive buffer, frames parsed with
//! frame.rs (text validated as it arrives, messages reassembled and inflated within the caps),
//! and each complete message handed to the application (echo, offload, broadcast, channels).

use super::close::{fail, on_close};
use super::write::{commit, send};
use super::{dispatch, Ctx, State, Stop};
use crate::budget::Store;
use crate::frame::{self, FrameError, OpCode};
use crate::handler::{Conn, Handler, Message};
use crate::transport::Transport;
use std::cell::RefCell;
use std::io;
use std::sync::atomic::Ordering::Relaxed;

/// Per-worker receive buffer: every connection a worker serves reads into this one.
const RECV_BUF: usize = 64 << 10;
thread_local! {
    static RECV: RefCell<Vec<u8>> = RefCell::new(vec![0; RECV_BUF]);
}

/// Read once and process. Returns false at end of stream.
pub(super) fn on_readable<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
) -> io::Result<Readable> {
    RECV.with(|cell| {
        let mut buf = cell.borrow_mut();
        let n = match io.try_read(&mut buf[..]) {
            Ok(0) => return Ok(Readable::Eof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Readable::Drained),
            Err(e) => return Err(e),
        };
        crate::coalesce::note_read();
        // A read that filled the buffer may have left bytes behind; so may any read of a
        // transport whose short reads do not say the socket is empty (TLS).
        let more = n == buf.len() || !io.short_read_drains();
        let after = if more {
            Readable::More
        } else {
            Readable::Drained
        };
        if st.input_done() {
            return Ok(after); // discarded: only the peer's FIN is awaited
        }
        conn.shared().last_seen.store(ctx.hub.now(), Relaxed);
        if st.partial.is_empty() {
            let consumed = process(io, conn, ctx, st, &mut buf[..n]);
            if consumed < n && !st.input_done() {
                st.partial.extend_from_slice(&buf[consumed..n]);
            }
            settle_input(io, conn, ctx, st);
        } else {
            let mut data = std::mem::take(&mut st.partial);
            data.extend_from_slice(&buf[..n]);
            drop(buf);
            process_owned(io, conn, ctx, st, &mut data);
        }
        Ok(after)
    })
}

/// What a read found.
pub(super) enum Readable {
    /// The peer's FIN: no more input.
    Eof,
    /// The socket is empty now: the next read waits for the kernel's next event.
    Drained,
    /// More may wait in the socket (a full read, or a transport that cannot tell).
    More,
}

/// Process an owned buffer (the pending partial plus new bytes) and keep what is left.
pub(super) fn process_owned<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    data: &mut Vec<u8>,
) {
    let consumed = process(io, conn, ctx, st, data);
    if consumed < data.len() && !st.input_done() {
        if consumed > 0 && data.capacity() > RECV_BUF && data.len() - consumed <= RECV_BUF {
            // The big frame this buffer held is done and only the start of the next one is
            // left: that start moves to a buffer of its size, so a client that follows a
            // large frame with a few bytes (and then a byte now and then) holds those bytes,
            // not the large frame's buffer.
            st.partial = data[consumed..].to_vec();
        } else {
            data.drain(..consumed);
            st.partial = std::mem::take(data);
        }
    }
    settle_input(io, conn, ctx, st);
}

/// After a read was processed: charge what the connection keeps of its input (an incomplete
/// frame, a message being reassembled) to the server's memory budget, check its share, and
/// tell the sweep since when its input has been incomplete (the message timeout).
fn settle_input<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
) {
    let shared = conn.shared();
    let budget = &ctx.hub.metrics.memory;
    let now_bytes = st.partial.capacity() + st.msg.capacity();
    if now_bytes != st.input_charged {
        let inflating = st.deflate.as_ref().map_or(0, |d| d.inflate_charged());
        let holds = st.input_charged + shared.queued() + inflating;
        if !budget.settle(Store::Input, &mut st.input_charged, now_bytes, holds) {
            fail(
                io,
                shared,
                ctx,
                st,
                crate::outbox::BUDGET_CLOSE,
                "server memory budget spent: try again later",
            );
        } else if st.input_charged + shared.queued() + inflating
            > ctx.hub.config.conn_memory_share()
        {
            budget.count_share_close();
            fail(
                io,
                shared,
                ctx,
                st,
                1009,
                "connection holds more than its memory share",
            );
        }
    }
    let pending = !st.input_done() && (!st.partial.is_empty() || st.msg_op.is_some());
    if pending && (!st.input_pending || st.delivered) {
        // Zero means "none" to the sweep: the server's first second counts as its second.
        shared.input_since.store(ctx.hub.now().max(1), Relaxed);
    } else if !pending && st.input_pending {
        shared.input_since.store(0, Relaxed);
    }
    st.input_pending = pending;
    st.delivered = false;
}

/// Parse and handle every complete frame in `data`; returns the bytes consumed.
fn process<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    data: &mut [u8],
) -> usize {
    let cfg = &ctx.hub.config;
    let shared = conn.shared();
    let mut pos = 0;
    while pos < data.len() && !st.has_pending_jobs() && !st.input_done() && !st.paused() {
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
        // A message that completes with this frame and is heavy to handle needs one of the
        // server's slots for such work; without one, reading pauses briefly and the frame
        // waits, unread, in the buffer (`heavy.rs`).
        let _slot = if heavy_delivery(st, &h, cfg) >= crate::heavy::HEAVY_BYTES
            && crate::heavy::offloadable()
        {
            match crate::heavy::try_slot() {
                Some(slot) => Some(slot),
                None => {
                    st.rare().read_pause = Some(tokio::time::Instant::now() + SLOT_RETRY);
                    break;
                }
            }
        } else {
            None
        };
        let payload = &mut data[pos + h.header_len..pos + total];
        // Only the frame at the head of a pending partial can have been checked already.
        let checked = std::mem::take(&mut st.frame_checked);
        frame::unmask(&mut payload[checked..], h.mask, checked);
        pos += total;
        if st.close_sent && !matches!(h.opcode, OpCode::Close) {
            continue; // after our close only the peer's close matters
        }
        if let Err(Stop::Fail(code, why)) = on_frame(io, conn, ctx, st, h, payload, checked) {
            fail(io, shared, ctx, st, code, why);
            return data.len();
        }
    }
    commit(io, shared, &ctx.hub.metrics, st);
    pos
}

/// How soon a connection that found no slot for a heavy message tries again.
const SLOT_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// The bytes delivering the message this frame completes could take: its size, or for a
/// compressed one what it could inflate to (at most the ratio limit times its compressed
/// size, or deflate's own ~1,032, within the message cap). 0 for a frame that completes no
/// message.
fn heavy_delivery(st: &State, h: &frame::Header, cfg: &crate::config::ServerConfig) -> usize {
    if !h.fin {
        return 0;
    }
    let (size, compressed) = match h.opcode {
        OpCode::Text | OpCode::Binary => (h.payload_len as usize, h.rsv & 0b100 != 0),
        OpCode::Continuation if st.msg_op.is_some() => (
            st.msg.len().saturating_add(h.payload_len as usize),
            st.msg_compressed,
        ),
        _ => return 0,
    };
    if compressed {
        could_inflate_to(size, cfg)
    } else {
        size
    }
}

/// The most a compressed message of `size` bytes can inflate to here: the ratio limit (or
/// deflate's own ~1,032) times its size, within the message cap.
fn could_inflate_to(size: usize, cfg: &crate::config::ServerConfig) -> usize {
    let ratio = match cfg.inflate_ratio_limit {
        0 => 1032,
        r => (r as usize).min(1032),
    };
    size.saturating_mul(ratio).min(cfg.max_message_bytes)
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
fn on_frame<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    h: frame::Header,
    payload: &mut [u8],
    checked: usize,
) -> Result<(), Stop> {
    let cfg = &ctx.hub.config;
    let shared = conn.shared();
    // Abuse limits (abuse/): the message rate counts every frame but a close, so neither a
    // ping flood nor a message cut into one-byte fragments is free; a close stays free so a
    // client over the rate can still leave cleanly.
    if let Some(rate) = cfg
        .limits
        .message_rate
        .filter(|_| h.opcode != OpCode::Close)
    {
        if !shared.msg_rate.allow(rate) {
            ctx.hub.metrics.message_rate_closes.fetch_add(1, Relaxed);
            return Err(Stop::Fail(
                cfg.limits.message_rate_close,
                "message rate limit exceeded",
            ));
        }
    }
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
                    return deliver_compressed_heavy(io, conn, ctx, st, h.opcode, payload);
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
                crate::heavy::run(payload.len(), || {
                    deliver(io, conn, ctx, st, h.opcode, payload)
                })
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
                    deliver_compressed_heavy(io, conn, ctx, st, op, &msg)
                } else {
                    crate::heavy::run(msg.len(), || deliver(io, conn, ctx, st, op, &mut msg))
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

/// `deliver_compressed`, off the I/O thread's other connections when the message could
/// inflate to a heavy size (`heavy_delivery`; the caller holds the slot).
fn deliver_compressed_heavy<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    op: OpCode,
    data: &[u8],
) -> Result<(), Stop> {
    let could_be = could_inflate_to(data.len(), &ctx.hub.config);
    crate::heavy::run(could_be, || deliver_compressed(io, conn, ctx, st, op, data))
}

/// A complete compressed message: inflate (stopping at the message cap), validate, deliver.
fn deliver_compressed<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    op: OpCode,
    data: &[u8],
) -> Result<(), Stop> {
    let Some(d) = st.deflate.as_mut() else {
        return Err(Stop::Fail(1002, "RSV1 without permessage-deflate"));
    };
    d.inflate(data, ctx.hub.config.max_message_bytes)?;
    let pause = d.charge_rate(d.inflated.len());
    let mut msg = std::mem::take(&mut d.inflated);
    if let Some(until) = pause {
        // Over its inflate rate: this connection reads nothing more until the rate allows
        // (TCP slows the client), and its neighbours on this thread get their turn.
        ctx.hub.metrics.inflate_rate_pauses.fetch_add(1, Relaxed);
        st.rare().read_pause = Some(until);
    }
    let r = if op == OpCode::Text && std::str::from_utf8(&msg).is_err() {
        Err(Stop::Fail(1007, "invalid UTF-8 in a text message"))
    } else {
        deliver(io, conn, ctx, st, op, &mut msg)
    };
    if let Some(d) = st.deflate.as_mut() {
        d.done_inflated(msg);
    }
    r
}

/// A complete message arrived: hand it to the application (text already validated).
fn deliver<T: Transport, H: Handler>(
    io: &T,
    conn: &Conn<H::State>,
    ctx: &Ctx<H>,
    st: &mut State,
    op: OpCode,
    payload: &mut [u8],
) -> Result<(), Stop> {
    let m = &ctx.hub.metrics;
    st.delivered = true;
    m.messages_in.fetch_add(1, Relaxed);
    m.bytes_in.fetch_add(payload.len() as u64, Relaxed);
    let msg = if op == OpCode::Text {
        // SAFETY: every text message is validated before it is delivered (as its frames
        // arrive, whole, or once inflated); a second pass here would double the cost of
        // validation for large messages.
        Message::Text(unsafe { std::str::from_utf8_unchecked(payload) })
    } else {
        Message::Binary(payload)
    };
    dispatch(io, conn, ctx, st, |h, c| h.on_message(c, msg));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{client, closes, ctx, serve, server_frames, MemIo};
    use crate::config::ServerConfig;
    use crate::frame::OpCode;
    use std::sync::atomic::Ordering::Relaxed;

    fn capped() -> ServerConfig {
        ServerConfig {
            max_frame_bytes: 600,
            max_message_bytes: 1000,
            ..ServerConfig::default()
        }
    }

    #[tokio::test]
    async fn messages_are_dispatched_whole_and_in_order() {
        let mut input = client(true, OpCode::Text, b"one");
        input.extend(client(false, OpCode::Binary, b"tw"));
        input.extend(client(true, OpCode::Ping, b"p"));
        input.extend(client(true, OpCode::Continuation, b"o"));
        input.extend(client(true, OpCode::Close, &1000u16.to_be_bytes()));
        let io = MemIo::with_input(&input);
        let ctx = ctx(ServerConfig::default());
        serve(&io, &ctx).await;
        let frames = server_frames(&io.output());
        assert_eq!(
            frames,
            vec![
                (OpCode::Text, b"one".to_vec()),
                (OpCode::Pong, b"p".to_vec()),
                (OpCode::Binary, b"two".to_vec()),
                (OpCode::Close, 1000u16.to_be_bytes().to_vec()),
            ]
        );
        assert_eq!(ctx.hub.metrics.messages_in.load(Relaxed), 2);
    }

    #[tokio::test]
    async fn a_message_over_the_cap_closes_with_1009() {
        let mut input = client(false, OpCode::Text, &[b'a'; 600]);
        input.extend(client(true, OpCode::Continuation, &[b'a'; 600]));
        let io = MemIo::with_input(&input);
        serve(&io, &ctx(capped())).await;
        assert_eq!(
            closes(&io.output()),
            vec![(1009, "message too large".into())]
        );
        // Nothing of the refused message was echoed.
        assert_eq!(server_frames(&io.output()).len(), 1);
    }

    #[tokio::test]
    async fn a_frame_over_the_cap_closes_with_1009_before_it_arrives() {
        // Only the header is sent: the frame is refused on its announced length.
        let whole = client(true, OpCode::Binary, &[0; 700]);
        let io = MemIo::with_input(&whole[..8]);
        serve(&io, &ctx(capped())).await;
        assert_eq!(closes(&io.output()), vec![(1009, "frame too large".into())]);
    }

    #[tokio::test]
    async fn invalid_utf8_fails_with_1007_and_the_rest_is_discarded() {
        let mut input = client(true, OpCode::Text, &[0xff, 0xfe]);
        input.extend(client(true, OpCode::Text, b"never echoed"));
        let io = MemIo::with_input(&input);
        serve(&io, &ctx(ServerConfig::default())).await;
        let frames = server_frames(&io.output());
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(
            closes(&io.output()),
            vec![(1007, "invalid UTF-8 in a text message".into())]
        );
    }

    #[tokio::test]
    async fn an_unmasked_frame_is_a_protocol_error() {
        let server_style = crate::frame::encode_message(OpCode::Text, b"hi", 100, false);
        let io = MemIo::with_input(&server_style);
        serve(&io, &ctx(ServerConfig::default())).await;
        assert_eq!(
            closes(&io.output()),
            vec![(1002, "client frames must be masked".into())]
        );
    }
}
