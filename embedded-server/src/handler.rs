//! The application API: a [`Handler`] decides on each upgrade and reacts to each connection's
//! events; a [`Conn`] is the handle it (or any task or thread it hands it to) talks back with.
//!
//! The shape is uWebSockets' `App` (upgrade, open, message, close) in async Rust terms:
//!
//! - **The callbacks are plain functions, not futures, and run on the I/O thread** that serves
//!   the connection. They cannot `.await`, so they cannot park an I/O thread on I/O; what they
//!   must not do is block it (a database call, a lock held long, a `sleep`), because every
//!   other connection on that thread waits meanwhile. Blocking work goes to the bounded offload
//!   pool with [`Conn::offload`] (timed in /metrics, so `wstune pool --measure` sizes the pool
//!   from it); async work goes to a task the handler spawns with a clone of the `Conn`.
//! - **Sending from a callback is corked**: replies sent while a read is processed go out in
//!   one write when the read is done, the path echo is benchmarked on. Sending from anywhere else
//!   (a task, the pool, another thread) queues the frame on the connection, written directly to
//!   the socket when nothing is queued before it.
//! - **A `Conn` outlives its connection safely**: once the connection is over every method is a
//!   no-op that says so ([`Closed`]); nothing panics.
//!
//! ```no_run
//! use embedded_server::{Conn, Handler, Message, Request, Server, ServerConfig, Upgrade};
//!
//! /// Echo, and refuse anything but `/echo`.
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type State = ();
//!     fn on_upgrade(&self, req: &Request<'_>) -> Upgrade<()> {
//!         if req.path() == "/echo" {
//!             Upgrade::accept(())
//!         } else {
//!             Upgrade::reject(404)
//!         }
//!     }
//!     fn on_message(&self, conn: &Conn, msg: Message<'_>) {
//!         let _ = conn.send(msg);
//!     }
//! }
//!
//! # async fn demo() -> std::io::Result<()> {
//! let server = Server::with_handler(ServerConfig::default(), Echo).expect("valid");
//! let listeners = embedded_server::bind("127.0.0.1:9001".parse().unwrap(), false, 1)?;
//! server.run(listeners, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

use crate::frame::{self, OpCode};
use crate::hub::Hub;
use crate::offload::Job;
use crate::outbox::Shared;
pub use crate::request::Request;
use bytes::Bytes;
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// An application on the server. One value serves every connection (`&self`), from every I/O
/// thread at once; per-connection data lives in [`Handler::State`], set on upgrade.
///
/// Every callback runs on the connection's I/O thread and must return quickly: see the
/// [module documentation](crate::handler). A callback that panics fails its connection (close
/// 1011), never the server.
pub trait Handler: Send + Sync + 'static {
    /// Per-connection data: what `on_upgrade` learnt (a user id, the rooms a token allows),
    /// stored inline with the connection (no box) and reachable from every clone of its
    /// [`Conn`] with [`Conn::state`]. Mutable parts need their own synchronisation (an atomic,
    /// a `Mutex`), since clones may be used from several threads.
    type State: Send + Sync + 'static;

    /// Decide on an upgrade request whose WebSocket handshake is valid: accept it (with its
    /// state, and optionally the subprotocol to speak) or refuse it with an HTTP status. This
    /// is where authentication goes (a token in the query or a cookie, say).
    fn on_upgrade(&self, req: &Request<'_>) -> Upgrade<Self::State>;

    /// The 101 is written and the connection is open; messages sent here go out first.
    fn on_open(&self, conn: &Conn<Self::State>) {
        let _ = conn;
    }

    /// A complete message arrived (reassembled, inflated, and for text, valid UTF-8). The
    /// payload is borrowed from the server's receive buffer: copy what must outlive the call.
    fn on_message(&self, conn: &Conn<Self::State>, msg: Message<'_>);

    /// The connection is over: `code` is the peer's close code (1005 when its close had none),
    /// the one the server sent when it closed first, or 1006 when the connection ended without
    /// a closing handshake. Every method of `conn` now answers [`Closed`].
    fn on_close(&self, conn: &Conn<Self::State>, code: u16, reason: &str) {
        let _ = (conn, code, reason);
    }

    /// Whether the offload pool starts with the server (default: no). Either way
    /// [`Conn::offload`] works: without this, the pool's threads start on the first offloaded
    /// job, so a handler that never offloads has no pool threads at all (what the built-in
    /// echo relies on). Return true when the first job must not pay the threads' start, or
    /// when a benchmark wants the threads in place before the load.
    fn uses_offload(&self) -> bool {
        false
    }
}

/// The answer to an upgrade request.
#[derive(Debug)]
pub enum Upgrade<S> {
    /// Open the connection.
    Accept {
        /// The connection's [`Handler::State`].
        state: S,
        /// The subprotocol to answer with: one the client offered
        /// ([`Request::protocols`]). `None` keeps the server's own choice
        /// ([`ServerConfig::subprotocols`](crate::ServerConfig::subprotocols)), if any.
        protocol: Option<String>,
    },
    /// Refuse with an HTTP status (a 4xx or 5xx; anything else is sent as 500).
    Reject {
        /// The status, 400..=599.
        status: u16,
        /// A plain-text body (a newline is added).
        body: String,
    },
}

impl<S> Upgrade<S> {
    /// Accept with this state.
    pub fn accept(state: S) -> Upgrade<S> {
        Upgrade::Accept {
            state,
            protocol: None,
        }
    }

    /// Answer with this subprotocol (on an `Accept`; a `Reject` is returned unchanged).
    pub fn with_protocol(self, protocol: impl Into<String>) -> Upgrade<S> {
        match self {
            Upgrade::Accept { state, .. } => Upgrade::Accept {
                state,
                protocol: Some(protocol.into()),
            },
            r => r,
        }
    }

    /// Refuse with `status` and its standard reason as the body.
    pub fn reject(status: u16) -> Upgrade<S> {
        Upgrade::Reject {
            status,
            body: crate::http::reason_phrase(status).to_string(),
        }
    }

    /// Refuse with `status` and this body.
    pub fn reject_with(status: u16, body: impl Into<String>) -> Upgrade<S> {
        Upgrade::Reject {
            status,
            body: body.into(),
        }
    }
}

/// A complete message, borrowed from the server's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// A text message (valid UTF-8).
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

impl<'a> Message<'a> {
    /// The payload's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            Message::Text(t) => t.as_bytes(),
            Message::Binary(b) => b,
        }
    }

    /// A copy that owns its payload (to hand to a task or the offload pool).
    pub fn to_owned(&self) -> OwnedMessage {
        match self {
            Message::Text(t) => OwnedMessage::Text(t.to_string()),
            Message::Binary(b) => OwnedMessage::Binary(b.to_vec()),
        }
    }

    pub(crate) fn opcode(&self) -> OpCode {
        match self {
            Message::Text(_) => OpCode::Text,
            Message::Binary(_) => OpCode::Binary,
        }
    }
}

/// A message that owns its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedMessage {
    /// Text.
    Text(String),
    /// Binary.
    Binary(Vec<u8>),
}

impl OwnedMessage {
    /// Borrow it as a [`Message`] (to send it).
    pub fn as_message(&self) -> Message<'_> {
        match self {
            OwnedMessage::Text(t) => Message::Text(t),
            OwnedMessage::Binary(b) => Message::Binary(b),
        }
    }
}

/// A frame encoded once, to send to many connections (one reference count each, no copy):
/// [`Conn::send_encoded`]. It is sent as it is, uncompressed, even to peers that negotiated
/// permessage-deflate (valid: compression is per message and optional).
///
/// ```
/// use embedded_server::{Encoded, Message};
/// let frame = Encoded::new(Message::Text("tick"));
/// assert_eq!(frame.len(), 6); // 2 header bytes + 4 payload bytes
/// ```
#[derive(Debug, Clone)]
pub struct Encoded(Bytes);

impl Encoded {
    /// Encode `msg` as one unmasked server frame.
    pub fn new(msg: Message<'_>) -> Encoded {
        Encoded(Bytes::from(frame::encode_message(
            msg.opcode(),
            msg.as_bytes(),
            usize::MAX,
            false,
        )))
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true (a frame has a header); here for the `len` convention.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The connection is over (or closing): nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the connection is closed")
    }
}

impl std::error::Error for Closed {}

/// Why [`Conn::offload`] did not queue a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadError {
    /// The connection is over.
    Closed,
    /// The offload pool is shut down (the server is gone).
    NoPool,
    /// The queue is full and the caller is not the connection's own callback (which would
    /// pause reading instead): retry later, or use [`Conn::offload_wait`] from a task.
    Full,
    /// The bytes the job would carry ([`Conn::offload_then_holding`]) would pass the server's
    /// memory budget: the connection is being closed with 1013 (try again later).
    OverBudget,
}

impl std::fmt::Display for OffloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OffloadError::Closed => "the connection is closed",
            OffloadError::NoPool => "the server's offload pool is shut down",
            OffloadError::Full => "the offload queue is full",
            OffloadError::OverBudget => "the server's memory budget is spent",
        })
    }
}

impl std::error::Error for OffloadError {}

/// A handle on one connection: cheap to clone (one reference count), `Send + Sync`, usable
/// from any task or thread for as long as anyone holds it. Once the connection is over,
/// every method is a no-op that answers [`Closed`] (or `false`).
pub struct Conn<S = ()> {
    inner: Arc<ConnInner<S>>,
}

struct ConnInner<S> {
    shared: Arc<Shared>,
    hub: Arc<Hub>,
    peer: SocketAddr,
    state: S,
}

impl<S> Clone for Conn<S> {
    fn clone(&self) -> Self {
        Conn {
            inner: self.inner.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Conn<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("id", &self.id())
            .field("peer", &self.peer())
            .field("open", &self.is_open())
            .finish()
    }
}

impl<S> Conn<S> {
    pub(crate) fn new(shared: Arc<Shared>, hub: Arc<Hub>, peer: SocketAddr, state: S) -> Conn<S> {
        Conn {
            inner: Arc::new(ConnInner {
                shared,
                hub,
                peer,
                state,
            }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The close the application asked for from outside a callback, if `requested` is it.
    pub(crate) fn app_close_reason(&self, requested: u16) -> Option<Box<str>> {
        self.inner
            .hub
            .registry()
            .take_app_close(self.id(), requested)
    }

    /// Which connection this is, for the callback scope: its outbox's address, unique among
    /// the live connections of every server in the process (ids are unique per server only).
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.inner.shared) as usize
    }

    /// This connection's id: unique among the server's connections.
    pub fn id(&self) -> u64 {
        self.inner.shared.id
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// The state [`Handler::on_upgrade`] attached.
    pub fn state(&self) -> &S {
        &self.inner.state
    }

    /// The server's hub: broadcast to everyone, publish, metrics, the connection count. Not
    /// part of the stable API (the built-in channels app uses it); [`Conn::publish`],
    /// [`Conn::broadcast`] and [`Conn::subscribe`] are.
    #[doc(hidden)]
    pub fn hub(&self) -> &Arc<Hub> {
        &self.inner.hub
    }

    /// Open: not over, and no close started.
    pub fn is_open(&self) -> bool {
        self.inner.shared.close_requested() == 0
    }

    /// Send a message. From this connection's own callback it joins the read's corked batch;
    /// from elsewhere it is encoded (and compressed, if the peer negotiated it) on the calling
    /// thread and queued. A consumer over its send-queue cap is closed (see
    /// [`ServerConfig::send_queue_bytes`](crate::ServerConfig::send_queue_bytes)) and the send
    /// answers `Closed`.
    pub fn send(&self, msg: Message<'_>) -> Result<(), Closed> {
        let op = msg.opcode();
        let payload = msg.as_bytes();
        if let Some(r) = with_local(self.key(), |l| l.send(op, payload)) {
            return if r { Ok(()) } else { Err(Closed) };
        }
        let hub = &self.inner.hub;
        if !self.is_open() {
            return Err(Closed);
        }
        self.inner.shared.send_owned(
            op,
            payload,
            hub.config.fragment_bytes,
            &hub.config.deflate,
            &hub.metrics,
        );
        if self.is_open() {
            Ok(())
        } else {
            Err(Closed)
        }
    }

    /// Send a text message (see [`Conn::send`]).
    pub fn send_text(&self, text: &str) -> Result<(), Closed> {
        self.send(Message::Text(text))
    }

    /// Send a binary message (see [`Conn::send`]).
    pub fn send_binary(&self, data: &[u8]) -> Result<(), Closed> {
        self.send(Message::Binary(data))
    }

    /// Send a frame encoded in advance (one reference count, no copy, no compression).
    pub fn send_encoded(&self, frame: &Encoded) -> Result<(), Closed> {
        if let Some(r) = with_local(self.key(), |l| l.send_encoded(frame.0.clone())) {
            return if r { Ok(()) } else { Err(Closed) };
        }
        let m = &self.inner.hub.metrics;
        if self.inner.shared.push(frame.0.clone(), m) {
            m.messages_out.fetch_add(1, Relaxed);
            Ok(())
        } else {
            Err(Closed)
        }
    }

    /// Start the closing handshake with `code` (1000, 1001, 1008, 3000-4999...; an invalid
    /// code is sent as 1000) and `reason` (cut to 123 bytes). Messages sent before it go out
    /// first; nothing after it does.
    pub fn close(&self, code: u16, reason: &str) -> Result<(), Closed> {
        let code = if frame::valid_close_code(code) {
            code
        } else {
            1000
        };
        let mut cut = reason.len().min(123);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let reason = &reason[..cut];
        if let Some(r) = with_local(self.key(), |l| l.close(code, reason)) {
            return if r { Ok(()) } else { Err(Closed) };
        }
        if !self.is_open() {
            return Err(Closed);
        }
        // The reason waits in the hub (closes from outside a callback are rare; a field per
        // connection would cost every connection its size).
        let hub = &self.inner.hub;
        hub.registry().put_app_close(self.id(), code, reason);
        if self.inner.shared.request_close(code) {
            Ok(())
        } else {
            let _ = hub.registry().take_app_close(self.id(), code);
            Err(Closed)
        }
    }

    /// Join `channel` (see [`Conn::publish`]).
    pub fn subscribe(&self, channel: &str) -> Result<(), Closed> {
        if self
            .inner
            .hub
            .broker()
            .subscribe(&self.inner.shared, channel)
        {
            Ok(())
        } else {
            Err(Closed)
        }
    }

    /// Leave `channel`; `Ok(false)` when it was not subscribed.
    pub fn unsubscribe(&self, channel: &str) -> Result<bool, Closed> {
        if self.inner.shared.ended() {
            return Err(Closed);
        }
        Ok(self
            .inner
            .hub
            .broker()
            .unsubscribe(&self.inner.shared, channel))
    }

    /// Send `msg` to every subscriber of `channel` (this connection too, if subscribed),
    /// encoded once; text also goes to other nodes' subscribers when a cluster backplane is
    /// configured. A hub operation: it works whether or not this connection is still open.
    pub fn publish(&self, channel: &str, msg: Message<'_>) {
        // The calling callback's batch goes first: a publish may write to a subscriber
        // (the sender too) directly, ahead of what the callback sent before it.
        with_current_local(|l| l.commit());
        match msg {
            Message::Text(t) => self.inner.hub.broker().publish_text(channel, t),
            Message::Binary(b) => self.inner.hub.broker().publish_binary(channel, b),
        }
    }

    /// Send `msg` to every connection (encoded once, relayed to other nodes in a cluster).
    pub fn broadcast(&self, msg: Message<'_>) {
        // As in `publish`: what this callback sent before goes out first.
        with_current_local(|l| l.commit());
        self.inner
            .hub
            .registry()
            .broadcast(msg.opcode(), msg.as_bytes());
    }

    /// Run `work` on the bounded offload pool, never on an I/O thread: the place for
    /// blocking calls (a database, a file, a slow library). Reply from inside it with a clone
    /// of this `Conn`. From this connection's own callback a full queue pauses reading the
    /// connection until there is room (TCP then slows the client); from anywhere else it
    /// answers [`OffloadError::Full`] (see [`Conn::offload_wait`]). Each job's wall, CPU and
    /// run-queue time lands in /metrics (`ws_handler_*`), what `wstune pool --measure` reads.
    pub fn offload(&self, work: impl FnOnce() + Send + 'static) -> Result<(), OffloadError> {
        self.queue(Job::new(work))
    }

    /// [`Conn::offload`] in two parts: `work` (the blocking call) is what the pool's metrics
    /// time; `then` gets its result on the same pool thread once the job is counted, so a
    /// client that receives the reply `then` sends finds the job in /metrics already.
    ///
    /// ```no_run
    /// # fn demo(conn: &embedded_server::Conn) {
    /// let reply_to = conn.clone();
    /// let _ = conn.offload_then(
    ///     || std::fs::read_to_string("/etc/hostname").unwrap_or_default(),
    ///     move |name| {
    ///         let _ = reply_to.send_text(name.trim());
    ///     },
    /// );
    /// # }
    /// ```
    pub fn offload_then<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
        then: impl FnOnce(R) + Send + 'static,
    ) -> Result<(), OffloadError> {
        self.queue(Job::then(work, then))
    }

    /// [`Conn::offload_then`] for a job that carries `bytes` (typically a copy of the message
    /// it answers): they are charged to the server's memory budget until the job has run, so
    /// a client whose messages queue up faster than the pool runs them cannot hold more than
    /// the budget. When the budget is spent the job is not queued, the connection is closed
    /// with 1013, and the answer is [`OffloadError::OverBudget`].
    pub fn offload_then_holding<R: Send + 'static>(
        &self,
        bytes: usize,
        work: impl FnOnce() -> R + Send + 'static,
        then: impl FnOnce(R) + Send + 'static,
    ) -> Result<(), OffloadError> {
        if self.inner.shared.ended() {
            return Err(OffloadError::Closed);
        }
        let m = self.inner.hub.metrics.clone();
        let Some(charge) = crate::offload::Charge::try_new(m, crate::budget::Store::Offload, bytes)
        else {
            self.inner
                .shared
                .request_close_why(crate::outbox::BUDGET_CLOSE, crate::outbox::CloseWhy::Budget);
            return Err(OffloadError::OverBudget);
        };
        self.queue(Job::then(work, then).holding(charge))
    }

    fn queue(&self, job: Job) -> Result<(), OffloadError> {
        if self.inner.shared.ended() {
            return Err(OffloadError::Closed);
        }
        let tx = self.pool();
        let m = &self.inner.hub.metrics;
        match tx.try_send(job) {
            Ok(()) => {
                m.offload_queue_depth.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(async_channel::TrySendError::Full(job)) => {
                match with_local(self.key(), move |l| l.park(job)) {
                    Some(()) => Ok(()),
                    None => Err(OffloadError::Full),
                }
            }
            Err(async_channel::TrySendError::Closed(_)) => Err(OffloadError::NoPool),
        }
    }

    /// The offload pool's queue, started on first use unless [`Handler::uses_offload`]
    /// started it with the server (one start even when threads race here: a `OnceLock`).
    fn pool(&self) -> &crate::offload::Sender {
        let hub = &self.inner.hub;
        hub.offload
            .get_or_init(|| crate::offload::start_for(&hub.config, hub.metrics.clone()))
    }

    /// [`Conn::offload`] for async code: waits for room in the queue instead of failing.
    pub async fn offload_wait(
        &self,
        work: impl FnOnce() + Send + 'static,
    ) -> Result<(), OffloadError> {
        if self.inner.shared.ended() {
            return Err(OffloadError::Closed);
        }
        let tx = self.pool();
        tx.send(Job::new(work))
            .await
            .map_err(|_| OffloadError::NoPool)?;
        self.inner
            .hub
            .metrics
            .offload_queue_depth
            .fetch_add(1, Relaxed);
        Ok(())
    }
}

/// What a connection's own task offers its callbacks (conn/ implements it): sends that join
/// the corked batch, a close in order with them, a job parked until the queue has room.
pub(crate) trait Local {
    /// False when nothing can be sent any more (a close went out).
    fn send(&mut self, op: OpCode, payload: &[u8]) -> bool;
    fn send_encoded(&mut self, frame: Bytes) -> bool;
    /// Write out the batch sent so far (before a publish/broadcast, which may write directly).
    fn commit(&mut self);
    fn close(&mut self, code: u16, reason: &str) -> bool;
    fn park(&mut self, job: Job);
}

type LocalPtr = *mut (dyn Local + 'static);

thread_local! {
    /// The connection whose callback runs on this thread now, and its task's `Local`.
    static SCOPE: Cell<Option<(usize, LocalPtr)>> = const { Cell::new(None) };
}

/// Restores the previous scope when a callback returns (or unwinds).
struct Restore(Option<(usize, LocalPtr)>);

impl Drop for Restore {
    fn drop(&mut self) {
        SCOPE.with(|s| s.set(self.0));
    }
}

/// Run `f` (a callback of the connection whose `Conn::key` is `key`) with `local` as the way
/// its sends go out.
pub(crate) fn in_scope<R>(key: usize, local: &mut dyn Local, f: impl FnOnce() -> R) -> R {
    let ptr: *mut (dyn Local + '_) = local;
    // SAFETY: only the lifetime is erased. The pointer is reachable through SCOPE only until
    // `Restore` runs at the end of this function, while `local` is still mutably borrowed
    // here (so nothing else uses it), and only from this thread (SCOPE is thread-local).
    let ptr: LocalPtr = unsafe { std::mem::transmute::<*mut (dyn Local + '_), LocalPtr>(ptr) };
    let prev = SCOPE.with(|s| s.replace(Some((key, ptr))));
    let _restore = Restore(prev);
    f()
}

/// Use the `Local` of connection `key` if one of its callbacks is running on this thread.
fn with_local<R>(key: usize, f: impl FnOnce(&mut dyn Local) -> R) -> Option<R> {
    let cur = SCOPE.with(|s| s.get())?;
    if cur.0 != key {
        return None;
    }
    with_scope(cur, f)
}

/// Run `f` on whichever connection's callback runs on this thread now, if any.
fn with_current_local<R>(f: impl FnOnce(&mut dyn Local) -> R) -> Option<R> {
    let cur = SCOPE.with(|s| s.get())?;
    with_scope(cur, f)
}

fn with_scope<R>(cur: (usize, LocalPtr), f: impl FnOnce(&mut dyn Local) -> R) -> Option<R> {
    // Taken out while in use, so a nested use (none exists) could not alias it.
    SCOPE.with(|s| s.set(None));
    let _restore = Restore(Some(cur));
    // SAFETY: set by `in_scope`, whose frame (holding the exclusive borrow) is below us on
    // this thread's stack; the scope was cleared above, so this is the only reference.
    Some(f(unsafe { &mut *cur.1 }))
}
