//! Writing from the connection's own task: replies batched per read and written in one go
//! (corked), compressed and fragmented messages in order behind them, and the queue drained
//! with vectored writes when the socket has room. Every write holds the queue lock
//! (`outbox::Locked`), so a frame another thread writes directly never lands inside ours.

use super::State;
use crate::frame::{self, OpCode};
use crate::metrics::Metrics;
use crate::outbox::{Locked, Shared, WRITE_SLICES};
use crate::transport::Transport;
use bytes::Bytes;
use std::io::{self, IoSlice};
use std::sync::atomic::Ordering::Relaxed;

/// Replies batched beyond this many bytes are committed early.
const BATCH_MAX: usize = 64 << 10;

/// Send a message from the connection's own task. Plain frames are batched: everything one
/// read produced (16 echoes for 16 pipelined messages) goes out in one write when the read has
/// been processed (`commit`), so a busy connection costs one syscall per read, not one per
/// message. Compressed frames, fragmented messages and closes are written at once, after the
/// batch, so order is kept. All writes hold the queue lock, so a broadcast can never land in the
/// middle of a partly written frame.
pub(super) fn send<T: Transport>(
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
    let mut out = shared.lock();
    let mut rsv1 = rsv1;
    if rsv1 && shared.deflate_stale() {
        // A frame compressed elsewhere was queued while we compressed: it sits between our
        // history and this message in the peer's window. Compress again from a reset context
        // (rare; with the lock held nothing else can slip in).
        if let Some(d) = st.deflate.as_deref_mut() {
            rsv1 = d.compress(payload, shared);
        }
    }
    let payload: &[u8] = match &st.deflate {
        Some(d) if rsv1 => &d.compressed,
        _ => payload,
    };
    if payload.len() > fragment {
        let frame = Bytes::from(frame::encode_message(op, payload, fragment, rsv1));
        out.enqueue(frame, m);
    } else {
        let mut hdr = [0u8; 10];
        let hl = frame::encode_header(&mut hdr, true, rsv1, op, payload.len());
        write_or_queue(io, m, out, &hdr[..hl], payload, op == OpCode::Close);
    }
    if let Some(d) = st.deflate.as_deref_mut().filter(|_| rsv1) {
        d.trim_compressed();
    }
}

/// Write the batched replies: straight to the socket when nothing is queued (one vectored
/// write), the rest queued.
pub(super) fn commit<T: Transport>(io: &T, shared: &Shared, m: &Metrics, st: &mut State) {
    if st.batch.is_empty() {
        return;
    }
    let out = shared.lock();
    write_or_queue(io, m, out, &st.batch, &[], false);
    st.batch.clear();
    // A burst's buffer goes back to the allocator; an idle connection holds none.
    if st.batch.capacity() > 4096 {
        st.batch = Vec::new();
    }
}

/// Write `head` + `body` directly when the queue is empty, and queue whatever the socket did
/// not take (that rest is then the queue's head: it must go out whole). `close`: a close frame,
/// queued whatever the memory budget says (the close must reach the peer).
fn write_or_queue<T: Transport>(
    io: &T,
    m: &Metrics,
    mut out: Locked<'_>,
    head: &[u8],
    body: &[u8],
    close: bool,
) {
    let total = head.len() + body.len();
    let written = if out.is_empty() && !io.wants_flush() {
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
        if close && written == 0 {
            out.enqueue_close(Bytes::from(rest), m);
        } else {
            out.enqueue_rest(Bytes::from(rest), written, m);
        }
    }
}

/// Write queued frames with vectored writes until done or the socket is full. Returns whether
/// output is still pending.
pub(super) fn flush<T: Transport>(io: &T, shared: &Shared, m: &Metrics) -> io::Result<bool> {
    if io.wants_flush() {
        match io.try_flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    let mut out = shared.lock();
    while !out.is_empty() {
        let mut slices: [IoSlice<'_>; WRITE_SLICES] = std::array::from_fn(|_| IoSlice::new(&[]));
        let n_slices = out.slices(&mut slices);
        let n = match io.try_write_vectored(&slices[..n_slices]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(true);
        }
        m.bytes_out.fetch_add(n as u64, Relaxed);
        out.consume(n, m);
    }
    out.shrink();
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

#[cfg(test)]
mod tests {
    use super::super::testing::{client, ctx, serve, server_frames, MemIo};
    use super::super::State;
    use super::*;
    use crate::config::ServerConfig;

    #[tokio::test]
    async fn replies_to_one_read_are_corked_into_one_write() {
        let mut input = Vec::new();
        for i in 0..16u8 {
            input.extend(client(true, OpCode::Binary, &[i; 10]));
        }
        // No close: the peer's FIN ends the connection, so the only writes are the replies.
        let io = MemIo::with_input(&input);
        serve(&io, &ctx(ServerConfig::default())).await;
        assert_eq!(io.writes(), 1, "16 echoes from one read, one write");
        let frames = server_frames(&io.output());
        assert_eq!(frames.len(), 16);
        for (i, (op, p)) in frames.iter().enumerate() {
            assert_eq!((*op, p.as_slice()), (OpCode::Binary, &[i as u8; 10][..]));
        }
    }

    #[test]
    fn batched_replies_wait_for_commit() {
        let io = MemIo::default();
        let m = Metrics::default();
        let shared = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
        let mut st = State::new(Vec::new(), None);
        send(&io, &shared, &m, &mut st, OpCode::Text, b"a", 1000);
        send(&io, &shared, &m, &mut st, OpCode::Text, b"b", 1000);
        assert_eq!(io.writes(), 0, "corked until the read is processed");
        commit(&io, &shared, &m, &mut st);
        assert_eq!(io.writes(), 1);
        // A close is never batched: it goes out at once, after what was batched before it.
        send(&io, &shared, &m, &mut st, OpCode::Text, b"c", 1000);
        send(
            &io,
            &shared,
            &m,
            &mut st,
            OpCode::Close,
            &[3, 232],
            usize::MAX,
        );
        assert_eq!(io.writes(), 3);
        let ops: Vec<OpCode> = server_frames(&io.output()).iter().map(|f| f.0).collect();
        assert_eq!(
            ops,
            [OpCode::Text, OpCode::Text, OpCode::Text, OpCode::Close]
        );
    }

    #[test]
    fn the_queue_drains_in_order_as_the_socket_takes_it() {
        let io = MemIo::default();
        let m = Metrics::default();
        let shared = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
        for (i, n) in [(1u8, 100), (2, 3), (3, 70_000)] {
            let f = frame::encode_message(OpCode::Binary, &vec![i; n], usize::MAX, false);
            assert!(shared.push(Bytes::from(f), &m));
        }
        // A reply behind queued frames waits its turn, even with room in the socket.
        let mut st = State::new(Vec::new(), None);
        send(&io, &shared, &m, &mut st, OpCode::Text, b"reply", 1000);
        commit(&io, &shared, &m, &mut st);
        assert_eq!(io.writes(), 0);

        io.set_room(Some(50));
        assert!(flush(&io, &shared, &m).unwrap(), "output still pending");
        assert_eq!(io.output().len(), 50);
        io.set_room(Some(0));
        assert!(flush(&io, &shared, &m).unwrap());
        io.set_room(None);
        assert!(!flush(&io, &shared, &m).unwrap(), "all written");
        assert_eq!(shared.queued(), 0);
        let got: Vec<(OpCode, usize, u8)> = server_frames(&io.output())
            .iter()
            .map(|(op, p)| (*op, p.len(), p[0]))
            .collect();
        assert_eq!(
            got,
            [
                (OpCode::Binary, 100, 1),
                (OpCode::Binary, 3, 2),
                (OpCode::Binary, 70_000, 3),
                (OpCode::Text, 5, b'r'),
            ]
        );
        assert_eq!(m.bytes_out.load(Relaxed) as usize, io.output().len());
    }

    #[test]
    fn a_partly_written_reply_is_finished_before_anything_else() {
        let io = MemIo::default();
        let m = Metrics::default();
        let shared = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
        let mut st = State::new(Vec::new(), None);
        io.set_room(Some(3));
        send(&io, &shared, &m, &mut st, OpCode::Text, b"hello", 1000);
        commit(&io, &shared, &m, &mut st);
        assert_eq!(shared.queued(), 4, "the rest of the frame is queued");
        // A broadcast now queues behind the rest, never inside it.
        let b = frame::encode_message(OpCode::Text, b"bcast", 1000, false);
        assert!(shared.push(Bytes::from(b), &m));
        io.set_room(None);
        assert!(!flush(&io, &shared, &m).unwrap());
        let texts: Vec<Vec<u8>> = server_frames(&io.output())
            .into_iter()
            .map(|f| f.1)
            .collect();
        assert_eq!(texts, [b"hello".to_vec(), b"bcast".to_vec()]);
    }
}
