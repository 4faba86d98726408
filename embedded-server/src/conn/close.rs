//! Closing a connection: answering the peer's close (once), failing the connection on a
//! protocol error, closes other threads ask for (heartbeat, backpressure, shutdown), and the
//! end of the handshake (FIN after our close frame, then a bounded wait for the peer's FIN).

use super::write::send;
use super::{Ctx, State, Stop};
use crate::config::ServerConfig;
use crate::frame::{self, OpCode};
use crate::handler::Conn;
use crate::metrics::Metrics;
use crate::outbox::{CloseWhy, Shared};
use crate::transport::Transport;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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

pub(super) fn on_close<T: Transport, H>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx<H>,
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
    // Checked valid UTF-8 above.
    let reason = String::from_utf8_lossy(payload.get(2..).unwrap_or_default()).into_owned();
    st.rare().peer_close = Some((code.unwrap_or(1005), reason));
    if !st.close_sent {
        // Echo the code back (an empty close for an empty close), then the server closes TCP.
        let body = code.map(|c| c.to_be_bytes().to_vec()).unwrap_or_default();
        shared.stop_queueing(1000);
        send(io, shared, m, st, OpCode::Close, &body, usize::MAX);
        st.close_sent = true;
        // A peer that sent its close and stopped reading does not hold us longer than this.
        let rare = st.rare();
        rare.close_unwritten = Some(code.unwrap_or(1005));
        rare.close_sent_code = Some(code.unwrap_or(1005));
        rare.close_deadline = Some(Instant::now() + CLOSE_WAIT);
    }
    Ok(())
}

/// Fail the connection: send a close with `code` and stop handling data (RFC 6455 7.1.7: no
/// close is awaited, the rest of the input is discarded until the peer's FIN).
pub(super) fn fail<T: Transport, H>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx<H>,
    st: &mut State,
    code: u16,
    why: &'static str,
) {
    st.drop_input(&ctx.hub.metrics.memory);
    if st.close_sent {
        return;
    }
    // The close itself goes out as an application's does; only the state above differs.
    close_from_app(io, shared, ctx, st, code, why);
}

/// The application closes from one of its callbacks: the close goes out after the replies
/// batched before it, then the peer's close is awaited (a normal closing handshake).
pub(super) fn close_from_app<T: Transport, H>(
    io: &T,
    shared: &Arc<Shared>,
    ctx: &Ctx<H>,
    st: &mut State,
    code: u16,
    why: &str,
) {
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
    st.close_sent = true;
    let rare = st.rare();
    rare.close_unwritten = Some(code);
    rare.close_sent_code = Some(code);
    rare.close_deadline = Some(Instant::now() + CLOSE_WAIT);
}

/// Act on a close another thread asked for (heartbeat, backpressure, shutdown, the
/// application through a `Conn`), once. Returns true when the connection must be dropped
/// without a close frame (its queue was reclaimed with a frame partly on the wire).
pub(super) fn on_close_request<S>(
    conn: &Conn<S>,
    st: &mut State,
    config: &ServerConfig,
    metrics: &Metrics,
) -> bool {
    let shared = conn.shared();
    let requested = shared.close_requested();
    if requested == 0 || st.close_sent {
        return false;
    }
    if let Some(why) = conn.app_close_reason(requested) {
        // Asked for by the application: what it queued before goes out first.
        start_close(shared, st, requested, &why, CLOSE_WAIT, metrics);
        return false;
    }
    let why = shared.close_why();
    if why == CloseWhy::ReclaimedMidFrame {
        st.drop_input(&metrics.memory);
        return true;
    }
    let reason = match (requested, why.reason()) {
        (_, Some(reason)) => reason,
        (1001, None) => "server shutting down",
        (crate::hub::SERVICE_RESTART, None) => "server restarting: reconnect with backoff",
        (crate::hub::HEARTBEAT_CLOSE, None) => "heartbeat timeout",
        _ => "send queue full: consumer too slow",
    };
    if matches!(
        why,
        CloseWhy::Budget | CloseWhy::MessageTimeout | CloseWhy::Reclaimed
    ) {
        // The bytes this connection holds are the problem: they go back now, and the rest of
        // its input is discarded unread, as when the connection fails.
        st.drop_input(&metrics.memory);
    }
    // Shutdown gives clients the grace period; a slow or silent peer gets the usual wait.
    let graceful = matches!(requested, 1001 | crate::hub::SERVICE_RESTART);
    let wait = if graceful {
        config.shutdown_grace.max(CLOSE_WAIT)
    } else {
        CLOSE_WAIT
    };
    start_close(shared, st, requested, reason, wait, metrics);
    if !graceful {
        // A slow or silent peer: drop what it has not read, send the close now.
        // A frame already partly on the wire must be finished, or the stream breaks.
        shared.lock().drop_unsent_before_close(metrics);
    }
    false
}

/// Queue a close the server initiates (heartbeat, backpressure, shutdown).
fn start_close(
    shared: &Arc<Shared>,
    st: &mut State,
    code: u16,
    why: &str,
    wait: Duration,
    metrics: &Metrics,
) {
    let mut body = code.to_be_bytes().to_vec();
    body.extend_from_slice(why.as_bytes());
    let frame = Bytes::from(frame::encode_message(
        OpCode::Close,
        &body,
        usize::MAX,
        false,
    ));
    shared.lock().enqueue_close(frame, metrics);
    st.close_sent = true;
    let rare = st.rare();
    rare.close_unwritten = Some(code);
    rare.close_sent_code = Some(code);
    rare.close_deadline = Some(Instant::now() + wait);
}

/// Our close frame and everything before it are written: shut down our write side (FIN after
/// the close frame) and decide whether the connection is done. Returns true when it can be
/// dropped now: the peer's FIN arrived, so there is no input left that could make the kernel
/// reset the connection. When the peer's close arrived or we failed the connection, nothing
/// more is awaited but that FIN: wait for it at most `DRAIN_WAIT`, reading and discarding.
/// Otherwise (we started the close) the peer's close is awaited until the close deadline.
pub(super) fn closed_write<T: Transport>(io: &T, st: &mut State, m: &Metrics) -> bool {
    // Counted now that the frame is really written (not when queued): a peer that stopped
    // reading never got it.
    if let Some(code) = st.rare.as_mut().and_then(|r| r.close_unwritten.take()) {
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
        let rare = st.rare();
        if rare.close_deadline.is_none_or(|d| d > drain) {
            rare.close_deadline = Some(drain);
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::super::testing::{client, closes, ctx, serve, serve_registered, MemIo};
    use super::super::write::flush;
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[tokio::test]
    async fn a_close_frame_is_answered_once() {
        let mut input = client(true, OpCode::Close, &1000u16.to_be_bytes());
        input.extend(client(true, OpCode::Close, &1000u16.to_be_bytes()));
        input.extend(client(true, OpCode::Text, b"after the close"));
        let io = MemIo::with_input(&input);
        let ctx = ctx(ServerConfig::default());
        serve(&io, &ctx).await;
        assert_eq!(closes(&io.output()), vec![(1000, String::new())]);
        assert_eq!(super::super::testing::server_frames(&io.output()).len(), 1);
        assert!(io.write_shut(), "FIN after our close frame");
        assert_eq!(ctx.hub.metrics.messages_in.load(Relaxed), 0);
        assert!(ctx.hub.registry().is_empty(), "unregistered");
    }

    #[tokio::test]
    async fn an_empty_close_is_answered_empty_and_bad_ones_fail() {
        let io = MemIo::with_input(&client(true, OpCode::Close, b""));
        serve(&io, &ctx(ServerConfig::default())).await;
        let frames = super::super::testing::server_frames(&io.output());
        assert_eq!(frames, vec![(OpCode::Close, Vec::new())]);

        let io = MemIo::with_input(&client(true, OpCode::Close, &1005u16.to_be_bytes()));
        serve(&io, &ctx(ServerConfig::default())).await;
        assert_eq!(
            closes(&io.output()),
            vec![(1002, "invalid close code".into())]
        );
    }

    #[tokio::test]
    async fn backpressure_past_the_limit_closes_the_slow_consumer() {
        // The ceiling (the connection's share) at the cap: the first frame past it closes.
        let ctx = ctx(ServerConfig {
            send_queue_bytes: 1024,
            conn_memory_share: Some(1024),
            ..ServerConfig::default()
        });
        let m = &ctx.hub.metrics;
        let shared = ctx.hub.registry().register();
        let io = MemIo::with_input(&[]);
        // A large broadcast goes to the empty queue; the socket takes part of it.
        let big = frame::encode_message(OpCode::Binary, &[7; 2000], usize::MAX, false);
        assert!(shared.push(Bytes::from(big), m));
        io.set_room(Some(1000));
        assert!(flush(&io, &shared, m).unwrap());
        // More piles up past the ceiling: the consumer is closed, not waited for.
        let more = frame::encode_message(OpCode::Binary, &[8; 100], usize::MAX, false);
        assert!(!shared.push(Bytes::from(more), m));
        assert_eq!(m.backpressure_closes.load(Relaxed), 1);
        io.set_room(None);
        serve_registered(&io, &ctx, shared).await;
        // The frame already on the wire is finished (or the stream breaks), then the close;
        // what was not started is dropped.
        let frames = super::super::testing::server_frames(&io.output());
        assert_eq!(
            frames.len(),
            2,
            "{:?}",
            frames.iter().map(|f| f.0).collect::<Vec<_>>()
        );
        assert_eq!(frames[0].1, vec![7; 2000]);
        assert_eq!(
            closes(&io.output()),
            vec![(1008, "send queue full: consumer too slow".into())]
        );
    }

    #[tokio::test]
    async fn a_heartbeat_close_names_its_reason() {
        let ctx = ctx(ServerConfig::default());
        let shared = ctx.hub.registry().register();
        assert!(shared.request_close(crate::hub::HEARTBEAT_CLOSE));
        let io = MemIo::with_input(&[]);
        serve_registered(&io, &ctx, shared).await;
        assert_eq!(
            closes(&io.output()),
            vec![(crate::hub::HEARTBEAT_CLOSE, "heartbeat timeout".into())]
        );
        assert_eq!(ctx.hub.metrics.closes_sent(crate::hub::HEARTBEAT_CLOSE), 1);
    }
}
