//! An in-memory transport for the connection's unit tests: input given up front (then end of
//! stream, or silence), output collected, and a socket that takes only as many bytes as the
//! test allows, so a full socket, a partial write and corking can be seen without a kernel.

use super::Ctx;
use crate::apps::Builtin;
use crate::config::ServerConfig;
use crate::frame::{self, OpCode};
use crate::handler::{Conn, Handler};
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::transport::Transport;
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub(super) struct MemIo(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    input: VecDeque<u8>,
    /// After the input: end of stream (the peer's FIN) rather than silence.
    eof: bool,
    output: Vec<u8>,
    /// Bytes the "socket" takes from now on (None: any number).
    room: Option<usize>,
    /// Writes that took bytes.
    writes: usize,
    write_shut: bool,
}

impl MemIo {
    /// A peer that sends `input`, then its FIN.
    pub(super) fn with_input(input: &[u8]) -> MemIo {
        let io = MemIo::default();
        {
            let mut i = io.0.lock().unwrap();
            i.input.extend(input);
            i.eof = true;
        }
        io
    }

    /// Let the socket take only `room` more bytes (None: any number).
    pub(super) fn set_room(&self, room: Option<usize>) {
        self.0.lock().unwrap().room = room;
    }

    pub(super) fn output(&self) -> Vec<u8> {
        self.0.lock().unwrap().output.clone()
    }

    pub(super) fn writes(&self) -> usize {
        self.0.lock().unwrap().writes
    }

    pub(super) fn write_shut(&self) -> bool {
        self.0.lock().unwrap().write_shut
    }
}

impl Transport for MemIo {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        let ready = {
            let i = self.0.lock().unwrap();
            !i.input.is_empty() || i.eof
        };
        async move {
            if !ready {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
        let ready = self.0.lock().unwrap().room != Some(0);
        async move {
            if !ready {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut i = self.0.lock().unwrap();
        if i.input.is_empty() {
            return if i.eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(i.input.len());
        for (b, x) in buf.iter_mut().zip(i.input.drain(..n)) {
            *b = x;
        }
        Ok(n)
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut i = self.0.lock().unwrap();
        assert!(!i.write_shut, "a write after our FIN");
        let mut room = i.room.unwrap_or(usize::MAX);
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(room);
            i.output.extend_from_slice(&b[..take]);
            n += take;
            room -= take;
        }
        if let Some(r) = i.room.as_mut() {
            *r -= n;
        }
        if n > 0 {
            i.writes += 1;
        }
        Ok(n)
    }

    fn shutdown_write(&self) {
        self.0.lock().unwrap().write_shut = true;
    }
}

/// A server context for one connection under `config`, running the built-in echo (no offload
/// pool).
pub(super) fn ctx(config: ServerConfig) -> Arc<Ctx<Builtin>> {
    Arc::new(Ctx {
        handler: Builtin::Echo,
        limits: Arc::new(crate::abuse::Limits::new(config.limits.clone())),
        hub: Arc::new(Hub::new(config, Arc::new(Metrics::default()))),
    })
}

/// A masked client frame.
pub(super) fn client(fin: bool, op: OpCode, payload: &[u8]) -> Vec<u8> {
    frame::encode_client_frame(fin, op, payload, [0x11, 0x22, 0x33, 0x44])
}

/// The server frames in `out`, decoded with frame.rs's client-side parser.
pub(super) fn server_frames(out: &[u8]) -> Vec<(OpCode, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while pos < out.len() {
        let h = frame::parse_server_header(&out[pos..], u64::MAX >> 1, 0b100)
            .expect("a whole, valid server frame");
        let end = pos + h.header_len + h.payload_len as usize;
        frames.push((h.opcode, out[pos + h.header_len..end].to_vec()));
        pos = end;
    }
    frames
}

/// The close frames in `out`, as (code, reason).
pub(super) fn closes(out: &[u8]) -> Vec<(u16, String)> {
    server_frames(out)
        .into_iter()
        .filter(|(op, _)| *op == OpCode::Close)
        .map(|(_, p)| {
            let code = u16::from_be_bytes([p[0], p[1]]);
            (code, String::from_utf8_lossy(&p[2..]).into_owned())
        })
        .collect()
}

/// Serve one connection on `io` until it ends (bounded: the test fails rather than hangs).
pub(super) async fn serve<H: Handler>(io: &MemIo, ctx: &Arc<Ctx<H>>)
where
    H::State: Default,
{
    let shared = ctx.hub.registry().register();
    serve_registered(io, ctx, shared).await;
}

/// The same for a connection registered (and perhaps written to) beforehand.
pub(super) async fn serve_registered<H: Handler>(
    io: &MemIo,
    ctx: &Arc<Ctx<H>>,
    shared: Arc<crate::outbox::Shared>,
) where
    H::State: Default,
{
    let peer = "127.0.0.1:1".parse().unwrap();
    let conn = Conn::new(shared, ctx.hub.clone(), peer, Default::default());
    let task = super::serve(super::Upgraded {
        stream: io.clone(),
        conn,
        ctx: ctx.clone(),
        rest: Vec::new(),
        deflate: None,
        admitted: None,
        log_id: 0,
    });
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("the connection ends by itself");
}
