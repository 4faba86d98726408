//! wssoak: one load process of bench/soak.sh. Holds CONNS WebSocket connections to a
//! `wstune serve --app channels` server and churns them for SECS seconds, then closes them all
//! and prints one JSON line of counts. The same mix and protocol as bench/soak_client.py (the
//! Python client it replaces for speed: that one reached ~126 reconnects/s at 10,000
//! connections, this one is meant to hold 500/s with CPU to spare).
//!
//! Every connection subscribes to the channel "all" (broadcasts) and to its own channel (its
//! echo: a publish there comes back to it alone). Per second the process closes CHURN random
//! connections and opens a new one for each: a third with a close frame, a third with a TCP
//! reset (SO_LINGER 0), a third with a FIN and no close frame. Half the slots (the even ones)
//! offer permessage-deflate the way Python's `websockets` does (`client_max_window_bits`, every
//! message compressed, context takeover on the server's side), so the server inflates each of
//! their messages with its own per-connection context. The process with index 0 publishes one
//! broadcast per second.
//!
//! While the file PAUSE exists, no churn or echo starts and the process writes QUIET once every
//! connection is either open and idle or gone: soak.sh then compares the server's
//! `ws_connections` gauge with the kernel's count of established sockets, which must be equal.
//!
//! Bounded: every wait has a timeout and the run stops by itself after SECS.

use bytes::{Buf, BytesMut};
use clap::Parser;
use embedded_server::deflate::Decompressor;
use embedded_server::frame::{self, OpCode};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, timeout, Instant};

#[derive(Parser)]
#[command(about = "Churn client of bench/soak.sh (see the file's header)")]
struct Args {
    /// ws://HOST:PORT/ of the server
    #[arg(long)]
    url: String,
    #[arg(long)]
    conns: usize,
    /// Closes (and reconnects) per second.
    #[arg(long)]
    churn: f64,
    #[arg(long)]
    secs: f64,
    /// This process's number among soak.sh's clients (spreads source addresses and channels).
    #[arg(long, default_value_t = 0)]
    index: usize,
    /// A file whose presence pauses churn and echo.
    #[arg(long)]
    pause: PathBuf,
    /// A file written (with the count held) while paused and settled.
    #[arg(long)]
    quiet: PathBuf,
    /// A file written (with the count held) once every connection is open.
    #[arg(long)]
    ready: PathBuf,
    /// No permessage-deflate on any connection.
    #[arg(long)]
    no_deflate: bool,
}

/// Seconds between two echoes of one connection (on average).
const ECHO_EVERY: f64 = 10.0;
/// How long an echo may take before it counts as late.
const ECHO_WAIT: Duration = Duration::from_secs(10);
const CONNECT_WAIT: Duration = Duration::from_secs(20);
/// How long a close (frame or FIN) waits for the server's side of it.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// Connections opened at once at the start (so the handshakes do not all wait in the accept
/// queue together).
const WAVE: usize = 200;
/// Frames larger than this from the server are a protocol error here (ours are < 1 KiB).
const MAX_FRAME: u64 = 1 << 20;

#[derive(Default)]
struct Stats {
    opened: AtomicU64,
    closed_frame: AtomicU64,
    closed_rst: AtomicU64,
    closed_fin: AtomicU64,
    connect_failed: AtomicU64,
    /// Closed by the server or the network without being asked.
    lost: AtomicU64,
    echo_ok: AtomicU64,
    echo_late: AtomicU64,
    /// Echoes still pending when their own connection was churned (not late: we hung up).
    echo_cut: AtomicU64,
    broadcasts_received: AtomicU64,
    deflate_conns: AtomicU64,
}

struct Ctx {
    stats: Stats,
    errors: Mutex<Vec<String>>,
    /// Connects, closes, echoes and publishes in flight: the process is quiet at 0.
    busy: AtomicI64,
    /// The slot holds an open, subscribed connection that no command is working on.
    live: Vec<AtomicBool>,
    deadline: Instant,
    server: SocketAddr,
    index: usize,
    conns: usize,
    no_deflate: bool,
}

impl Ctx {
    fn error(&self, e: String) {
        let mut v = self.errors.lock().unwrap();
        if v.len() < 20 {
            v.push(e);
        }
    }

    /// Spread the client side over 127.0.0.2.. so 10,000 connections plus churn never run out
    /// of ephemeral ports on one source address.
    fn source(&self, slot: usize) -> IpAddr {
        let n = self.index * self.conns + slot;
        IpAddr::from([127, 0, ((n / 250) % 250) as u8, (2 + n % 250) as u8])
    }
}

enum Cmd {
    /// Close this way (0 close frame, 1 reset, 2 bare FIN), then reconnect.
    Cycle(u8),
    Echo,
    Publish(String),
    /// The run is over: close with a close frame and stop.
    Leave,
}

/// A small xorshift: slots, close kinds, tokens and masks need no better randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    (t ^ (std::process::id() as u64) << 32) | 1
}

/// One open connection.
struct Conn {
    s: TcpStream,
    rbuf: BytesMut,
    deflate: bool,
    /// The server's messages are inflated with context takeover (created on the first one).
    inflate: Option<Decompressor>,
    /// A message arriving in fragments: its opcode, RSV1, and payload so far.
    partial: Option<(OpCode, bool, Vec<u8>)>,
    rng: Rng,
}

/// What a read brought.
enum Got {
    Message(Vec<u8>),
    Close,
}

impl Conn {
    async fn connect(ctx: &Ctx, slot: usize) -> Result<Conn, String> {
        let deflate = slot.is_multiple_of(2) && !ctx.no_deflate;
        let sock = TcpSocket::new_v4().map_err(|e| e.to_string())?;
        sock.bind(SocketAddr::new(ctx.source(slot), 0))
            .map_err(|e| format!("bind: {e}"))?;
        let mut s = sock
            .connect(ctx.server)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let ext = if deflate {
            // What Python's websockets offers by default.
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
        } else {
            ""
        };
        let req = format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n",
            ctx.server
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("handshake write: {e}"))?;
        let mut rbuf = BytesMut::with_capacity(1024);
        let end = loop {
            if let Some(i) = rbuf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if rbuf.len() > 8192 {
                return Err("handshake response too long".into());
            }
            match s.read_buf(&mut rbuf).await {
                Ok(0) => return Err("handshake: the server closed".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("handshake read: {e}")),
            }
        };
        let head = String::from_utf8_lossy(&rbuf[..end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 101") {
            return Err(format!(
                "handshake refused: {}",
                head.lines().next().unwrap_or("")
            ));
        }
        let agreed = head.lines().any(|l| {
            l.starts_with("sec-websocket-extensions:") && l.contains("permessage-deflate")
        });
        if deflate && !agreed {
            return Err("the server declined permessage-deflate".into());
        }
        rbuf.advance(end);
        Ok(Conn {
            s,
            rbuf,
            deflate: agreed,
            inflate: None,
            partial: None,
            rng: Rng(seed() ^ (slot as u64) << 20),
        })
    }

    /// Send a text message: compressed (RSV1) on a deflate connection, as websockets does for
    /// every message. A reset context per message is valid for the server's context-takeover
    /// inflater and keeps 5,000 compressors out of this process.
    async fn send_text(&mut self, text: &str) -> std::io::Result<()> {
        let mask = (self.rng.next() as u32).to_le_bytes();
        let f = if self.deflate {
            let mut z = Vec::new();
            embedded_server::deflate::compress_fresh(15, 5, 1, text.as_bytes(), &mut z);
            let mut f = frame::encode_client_frame(true, OpCode::Text, &z, mask);
            f[0] |= 0x40;
            f
        } else {
            frame::encode_client_frame(true, OpCode::Text, text.as_bytes(), mask)
        };
        self.s.write_all(&f).await
    }

    async fn send_close(&mut self, code: u16) -> std::io::Result<()> {
        let mask = (self.rng.next() as u32).to_le_bytes();
        let f = frame::encode_client_frame(true, OpCode::Close, &code.to_be_bytes(), mask);
        self.s.write_all(&f).await
    }

    /// Read what the socket has (cancel-safe: the bytes stay in `rbuf`), then hand back the
    /// complete messages; pings are answered here.
    async fn read(&mut self, got: &mut Vec<Got>) -> Result<(), String> {
        match self.s.read_buf(&mut self.rbuf).await {
            Ok(0) => return Err("the server closed the TCP connection".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
        loop {
            if self.rbuf.len() < 2 {
                return Ok(());
            }
            let hl = frame::header_len(self.rbuf[1]);
            if self.rbuf.len() < hl {
                return Ok(());
            }
            let h = frame::parse_server_header(&self.rbuf[..hl], MAX_FRAME, 0b100)
                .map_err(|e| format!("bad frame from the server: {e:?}"))?;
            let total = hl + h.payload_len as usize;
            if self.rbuf.len() < total {
                self.rbuf.reserve(total - self.rbuf.len());
                return Ok(());
            }
            let payload = self.rbuf[hl..total].to_vec();
            self.rbuf.advance(total);
            match h.opcode {
                OpCode::Ping => {
                    let mask = (self.rng.next() as u32).to_le_bytes();
                    let f = frame::encode_client_frame(true, OpCode::Pong, &payload, mask);
                    self.s
                        .write_all(&f)
                        .await
                        .map_err(|e| format!("pong: {e}"))?;
                }
                OpCode::Pong => {}
                OpCode::Close => got.push(Got::Close),
                OpCode::Text | OpCode::Binary | OpCode::Continuation => {
                    let (op, rsv1, mut data) = match (h.opcode, self.partial.take()) {
                        (OpCode::Continuation, Some(p)) => p,
                        (OpCode::Continuation, None) => {
                            return Err("a continuation with no message".into())
                        }
                        (op, _) => (op, h.rsv & 0b100 != 0, Vec::new()),
                    };
                    data.extend_from_slice(&payload);
                    if !h.fin {
                        self.partial = Some((op, rsv1, data));
                        continue;
                    }
                    if rsv1 {
                        let d = self.inflate.get_or_insert_with(|| Decompressor::new(true));
                        let mut out = Vec::new();
                        d.decompress(&data, &mut out, MAX_FRAME as usize)
                            .map_err(|e| format!("inflate: {e:?}"))?;
                        data = out;
                    }
                    got.push(Got::Message(data));
                }
            }
        }
    }

    /// After our close frame or FIN: read (and drop) until the server closes its side, bounded.
    async fn drain_until_eof(&mut self) {
        let _ = timeout(CLOSE_WAIT, async {
            loop {
                self.rbuf.clear();
                match self.s.read_buf(&mut self.rbuf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }

    async fn close(mut self, how: u8) {
        match how {
            0 => {
                // A close frame; the server answers with its own and then closes the TCP
                // connection (the server closes first, as RFC 6455 7.1.1 asks).
                if self.send_close(1000).await.is_ok() {
                    self.drain_until_eof().await;
                }
            }
            1 => {
                // SO_LINGER 0: close() sends a reset and discards the state.
                let _ = socket2::SockRef::from(&self.s).set_linger(Some(Duration::ZERO));
            }
            _ => {
                // FIN and nothing else; wait for the server's FIN so our close() is not turned
                // into a reset by bytes still unread.
                if self.s.shutdown().await.is_ok() {
                    self.drain_until_eof().await;
                }
            }
        }
    }
}

/// Open a connection for `slot` and subscribe it (up to 5 tries): None past the deadline or
/// when every try failed.
async fn open(ctx: &Ctx, slot: usize) -> Option<Conn> {
    for attempt in 0..5u32 {
        if Instant::now() > ctx.deadline {
            return None;
        }
        let r = match timeout(CONNECT_WAIT, Conn::connect(ctx, slot)).await {
            Ok(r) => r,
            Err(_) => Err("connect: timed out".into()),
        };
        let mut c = match r {
            Ok(c) => c,
            Err(e) => {
                ctx.stats.connect_failed.fetch_add(1, Relaxed);
                ctx.error(format!("connect failed: {e}"));
                sleep(Duration::from_millis(200 * (attempt as u64 + 1))).await;
                continue;
            }
        };
        let me = format!("me-{}-{slot}", ctx.index);
        let sub = |ch: &str| format!(r#"{{"op":"subscribe","channel":"{ch}"}}"#);
        if let Err(e) = async {
            c.send_text(&sub("all")).await?;
            c.send_text(&sub(&me)).await
        }
        .await
        {
            // Never leave an open connection the soak does not track.
            let _ = socket2::SockRef::from(&c.s).set_linger(Some(Duration::ZERO));
            ctx.stats.connect_failed.fetch_add(1, Relaxed);
            ctx.error(format!("subscribe failed: {e}"));
            continue;
        }
        ctx.stats.opened.fetch_add(1, Relaxed);
        if c.deflate {
            ctx.stats.deflate_conns.fetch_add(1, Relaxed);
        }
        return Some(c);
    }
    None
}

/// The life of one slot: its connection and every one that replaces it.
async fn slot_task(ctx: Arc<Ctx>, slot: usize, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let me = format!("me-{}-{slot}", ctx.index);
    let mut conn = open(&ctx, slot).await;
    ctx.live[slot].store(conn.is_some(), Relaxed);
    ctx.busy.fetch_sub(1, Relaxed); // the open main counted
                                    // The echo in flight: its token and when it is late.
    let mut pending: Option<(u64, Instant)> = None;
    let mut got = Vec::new();
    loop {
        let Some(c) = conn.as_mut() else {
            // No connection (the deadline passed while reconnecting, or every try failed):
            // commands still arrive and each must give its `busy` back.
            match rx.recv().await {
                None | Some(Cmd::Leave) => return,
                Some(_) => {
                    ctx.busy.fetch_sub(1, Relaxed);
                    continue;
                }
            }
        };
        let late = pending.map(|p| p.1).unwrap_or_else(Instant::now);
        tokio::select! {
            r = c.read(&mut got) => {
                let mut lost = r.err();
                for g in got.drain(..) {
                    match g {
                        Got::Close => {
                            lost.get_or_insert_with(|| "the server sent a close frame".into());
                        }
                        Got::Message(m) => on_message(&ctx, &me, &m, &mut pending),
                    }
                }
                if let Some(why) = lost {
                    // Nobody asked for this close.
                    ctx.live[slot].store(false, Relaxed);
                    ctx.stats.lost.fetch_add(1, Relaxed);
                    ctx.error(format!("slot {slot} lost: {why}"));
                    if pending.take().is_some() {
                        ctx.stats.echo_late.fetch_add(1, Relaxed);
                        ctx.busy.fetch_sub(1, Relaxed);
                    }
                    ctx.busy.fetch_add(1, Relaxed);
                    conn.take().unwrap().close(1).await;
                    conn = open(&ctx, slot).await;
                    ctx.live[slot].store(conn.is_some(), Relaxed);
                    ctx.busy.fetch_sub(1, Relaxed);
                }
            }
            _ = sleep_until(late), if pending.is_some() => {
                pending = None;
                ctx.stats.echo_late.fetch_add(1, Relaxed);
                ctx.busy.fetch_sub(1, Relaxed);
            }
            cmd = rx.recv() => match cmd {
                None | Some(Cmd::Leave) => {
                    ctx.live[slot].store(false, Relaxed);
                    if pending.take().is_some() {
                        ctx.busy.fetch_sub(1, Relaxed);
                    }
                    conn.take().unwrap().close(0).await;
                    return;
                }
                Some(Cmd::Cycle(how)) => {
                    // main cleared `live` before sending this.
                    if pending.take().is_some() {
                        ctx.stats.echo_cut.fetch_add(1, Relaxed);
                        ctx.busy.fetch_sub(1, Relaxed);
                    }
                    conn.take().unwrap().close(how).await;
                    [&ctx.stats.closed_frame, &ctx.stats.closed_rst, &ctx.stats.closed_fin]
                        [how as usize % 3]
                        .fetch_add(1, Relaxed);
                    conn = open(&ctx, slot).await;
                    ctx.live[slot].store(conn.is_some(), Relaxed);
                    ctx.busy.fetch_sub(1, Relaxed);
                }
                Some(Cmd::Echo) => {
                    if pending.is_some() {
                        ctx.busy.fetch_sub(1, Relaxed);
                        continue;
                    }
                    let token = c.rng.next() >> 16;
                    let pad = "x".repeat([10, 100, 400][c.rng.below(3)]);
                    // Compressible JSON text: deflate connections compress it.
                    let msg = format!(
                        r#"{{"op":"publish","channel":"{me}","data":{{"t":{token},"pad":"{pad}"}}}}"#
                    );
                    match c.send_text(&msg).await {
                        Ok(()) => pending = Some((token, Instant::now() + ECHO_WAIT)),
                        Err(_) => {
                            // The read side sees the loss and reconnects.
                            ctx.stats.echo_late.fetch_add(1, Relaxed);
                            ctx.busy.fetch_sub(1, Relaxed);
                        }
                    }
                }
                Some(Cmd::Publish(text)) => {
                    let _ = c.send_text(&text).await;
                    ctx.busy.fetch_sub(1, Relaxed);
                }
            }
        }
    }
}

fn on_message(ctx: &Ctx, me: &str, m: &[u8], pending: &mut Option<(u64, Instant)>) {
    let v: serde_json::Value = match serde_json::from_slice(m) {
        Ok(v) => v,
        Err(_) => {
            ctx.error(format!(
                "not JSON from the server: {:?}",
                String::from_utf8_lossy(&m[..m.len().min(80)])
            ));
            return;
        }
    };
    let Some(data) = v.get("data") else { return };
    match v.get("channel").and_then(|c| c.as_str()) {
        Some("all") => {
            ctx.stats.broadcasts_received.fetch_add(1, Relaxed);
        }
        Some(ch) if ch == me => {
            let t = data.get("t").and_then(|t| t.as_u64());
            match pending.take() {
                Some((token, _)) if t == Some(token) => {
                    ctx.stats.echo_ok.fetch_add(1, Relaxed);
                    ctx.busy.fetch_sub(1, Relaxed);
                }
                Some(p) => {
                    ctx.error(format!("{me}: echo {t:?} is not the {} sent", p.0));
                    *pending = Some(p);
                }
                None => {}
            }
        }
        _ => {}
    }
}

/// Write `text` to `path` atomically: soak.sh reads it while this process may rewrite it.
fn write_atomic(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

fn parse_url(url: &str) -> Result<SocketAddr, String> {
    let rest = url
        .strip_prefix("ws://")
        .ok_or_else(|| format!("{url}: only ws:// URLs (ws://IP:PORT/)"))?;
    let host = rest.split('/').next().unwrap_or("");
    host.parse()
        .map_err(|e| format!("{url}: the host must be IP:PORT ({e})"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = Args::parse();
    let server = match parse_url(&a.url) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wssoak: {e}");
            std::process::exit(3);
        }
    };
    if a.conns == 0 || !a.secs.is_finite() || a.secs <= 0.0 || a.churn.is_nan() || a.churn < 0.0 {
        eprintln!("wssoak: --conns must be > 0, --secs > 0 and --churn >= 0");
        std::process::exit(3);
    }
    let ctx = Arc::new(Ctx {
        stats: Stats::default(),
        errors: Mutex::new(Vec::new()),
        busy: AtomicI64::new(0),
        live: (0..a.conns).map(|_| AtomicBool::new(false)).collect(),
        deadline: Instant::now() + Duration::from_secs_f64(a.secs),
        server,
        index: a.index,
        conns: a.conns,
        no_deflate: a.no_deflate,
    });
    let mut tx = Vec::with_capacity(a.conns);
    let mut tasks = Vec::with_capacity(a.conns);
    // Open in waves, each bounded by the connect timeouts.
    for start in (0..a.conns).step_by(WAVE) {
        for slot in start..(start + WAVE).min(a.conns) {
            let (t, r) = mpsc::unbounded_channel();
            tx.push(t);
            ctx.busy.fetch_add(1, Relaxed);
            tasks.push(tokio::spawn(slot_task(ctx.clone(), slot, r)));
        }
        while ctx.busy.load(Relaxed) > 0 {
            sleep(Duration::from_millis(5)).await;
        }
    }
    let held = || ctx.live.iter().filter(|l| l.load(Relaxed)).count();
    write_atomic(&a.ready, &held().to_string());

    let mut rng = Rng(seed());
    let tick = Duration::from_millis(50);
    let mut carry = 0.0;
    let mut echo_carry = 0.0;
    let mut last_bcast = Instant::now();
    let mut next = Instant::now();
    while Instant::now() < ctx.deadline {
        next += tick;
        sleep_until(next).await;
        if a.pause.exists() {
            if ctx.busy.load(Relaxed) == 0 {
                write_atomic(&a.quiet, &held().to_string());
            }
            continue;
        }
        let _ = std::fs::remove_file(&a.quiet);
        // Ask `slot` for something if it is live and idle; `claim` takes it out of `live` for
        // a close and reconnect.
        let send = |slot: usize, cmd: Cmd, claim: bool| {
            let live = &ctx.live[slot];
            let ok = if claim {
                live.swap(false, Relaxed)
            } else {
                live.load(Relaxed)
            };
            if ok {
                ctx.busy.fetch_add(1, Relaxed);
                if tx[slot].send(cmd).is_err() {
                    ctx.busy.fetch_sub(1, Relaxed);
                }
            }
        };
        carry += a.churn * tick.as_secs_f64();
        while carry >= 1.0 {
            carry -= 1.0;
            let slot = rng.below(a.conns);
            send(slot, Cmd::Cycle(rng.below(3) as u8), true);
        }
        // Echo: each connection about once every ECHO_EVERY seconds.
        echo_carry += a.conns as f64 * tick.as_secs_f64() / ECHO_EVERY;
        while echo_carry >= 1.0 {
            echo_carry -= 1.0;
            send(rng.below(a.conns), Cmd::Echo, false);
        }
        if a.index == 0 && last_bcast.elapsed() >= Duration::from_secs(1) {
            last_bcast = Instant::now();
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            let text = format!(
                r#"{{"op":"publish","channel":"all","data":{{"at":{at},"pad":"{}"}}}}"#,
                "b".repeat(200)
            );
            if let Some(slot) = (0..a.conns).find(|&s| ctx.live[s].load(Relaxed)) {
                send(slot, Cmd::Publish(text), false);
            }
        }
    }
    // No longer settled: soak.sh must not read a count from before the leaving.
    let _ = std::fs::remove_file(&a.quiet);
    // Let what is in flight finish (bounded), then leave: every connection with a close frame.
    let _ = timeout(Duration::from_secs(15), async {
        while ctx.busy.load(Relaxed) > 0 {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for t in &tx {
        let _ = t.send(Cmd::Leave);
    }
    let _ = timeout(CLOSE_WAIT + Duration::from_secs(5), futures_join_all(tasks)).await;
    let s = &ctx.stats;
    let n = |a: &AtomicU64| a.load(Relaxed);
    let out = serde_json::json!({
        "index": a.index,
        "opened": n(&s.opened),
        "closed_frame": n(&s.closed_frame),
        "closed_rst": n(&s.closed_rst),
        "closed_fin": n(&s.closed_fin),
        "connect_failed": n(&s.connect_failed),
        "lost": n(&s.lost),
        "echo_ok": n(&s.echo_ok),
        "echo_late": n(&s.echo_late),
        "echo_cut": n(&s.echo_cut),
        "broadcasts_received": n(&s.broadcasts_received),
        "deflate_conns": n(&s.deflate_conns),
        "errors": *ctx.errors.lock().unwrap(),
    });
    println!("{out}");
}

async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}
