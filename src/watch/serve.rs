//! `watch --serve ADDR`: no view; the frames are served over HTTP for Prometheus and agents.
//!
//! - `GET /metrics`: the latest frame in the Prometheus text format (`wstune_watch_*`), the
//!   kernel's counters as counters (cumulative, so `rate()` works across scrapes), the rest as
//!   gauges, and the advice as `wstune_watch_advice_active{id}` with its interval count.
//! - `GET /events`: the advice as JSON lines, one line per check id ([`advice::Log`]): first
//!   and last seen and in how many intervals; a counter that keeps moving stays one line.
//! - `GET /healthz`: 200 while frames are fresh (the last one younger than three intervals),
//!   503 otherwise: a stuck collector is a dead watch.
//!
//! The frame loop stays the one `watch::run` drives (a [`Headless`] view hands each frame to a
//! [`Hub`]); the HTTP side runs on its own thread with a single-threaded runtime. It is a
//! minimal HTTP/1.1 server for scrapers, bounded against a hostile client: a request head of
//! at most [`MAX_HEAD`] bytes, read within [`HEAD_TIMEOUT`], at most [`MAX_CONNECTIONS`]
//! connections at once, one request per connection.

use super::advice::{Event, Log};
use super::frame::Frame;
use super::{Flow, View};
use crate::output::prometheus_label as esc;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest request head read; a longer one is answered 431 and the connection closed.
pub const MAX_HEAD: usize = 8 * 1024;
/// A request head must arrive whole within this (a client trickling bytes is cut off).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// A response must be taken within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at accept. Scrapers need one or two.
pub const MAX_CONNECTIONS: usize = 32;
/// Frames older than this many intervals make the watch stale (/healthz 503).
pub const FRESH_INTERVALS: u32 = 3;

/// Checks that turn on a listener, a CPU or the port range rather than on a counter or a mark:
/// their `wstune_watch_advice_active` series exist (0) before they ever fire.
const OTHER_CHECKS: &[&str] = &[
    "linux.net.core.somaxconn",
    "linux.cpu.softirq",
    "linux.net.ipv4.ip_local_port_range",
];

/// The latest frame and the advice over time, shared by the frame loop and the HTTP side.
pub struct Hub {
    state: Mutex<State>,
    stop: AtomicBool,
    interval: Duration,
    started: Instant,
}

#[derive(Default)]
struct State {
    frame: Option<Arc<Frame>>,
    at: Option<Instant>,
    frames: u64,
    log: Log,
}

/// What one response is rendered from, taken under the lock and rendered outside it.
pub struct Snapshot {
    pub frame: Option<Arc<Frame>>,
    /// Seconds since the last frame (or since the start, before the first).
    pub age_s: f64,
    pub fresh: bool,
    pub frames: u64,
    pub interval_s: f64,
    pub events: Vec<Event>,
}

impl Hub {
    pub fn new(interval: Duration) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            interval,
            started: Instant::now(),
        })
    }

    fn put(&self, f: &Frame) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.log.add(f);
        s.frame = Some(Arc::new(f.clone()));
        s.at = Some(Instant::now());
        s.frames += 1;
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let age = s.at.unwrap_or(self.started).elapsed();
        Snapshot {
            frame: s.frame.clone(),
            age_s: age.as_secs_f64(),
            fresh: age < self.interval * FRESH_INTERVALS,
            frames: s.frames,
            interval_s: self.interval.as_secs_f64(),
            events: s.log.events.clone(),
        }
    }

    /// Ask the frame loop to end (a signal); it stops within a tenth of a second.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn frames(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).frames
    }
}

/// The view of a headless watch: each frame goes to the hub; a signal ends the loop.
pub struct Headless {
    hub: Arc<Hub>,
}

impl Headless {
    pub fn new(hub: Arc<Hub>) -> Headless {
        Headless { hub }
    }
}

impl View for Headless {
    fn show(&mut self, f: &Frame) -> std::io::Result<Flow> {
        self.hub.put(f);
        Ok(if self.hub.stopping() {
            Flow::Stop
        } else {
            Flow::Go
        })
    }

    fn wait(&mut self, until: Instant) -> std::io::Result<Flow> {
        loop {
            if self.hub.stopping() {
                return Ok(Flow::Stop);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(Flow::Go);
            }
            std::thread::sleep((until - now).min(Duration::from_millis(100)));
        }
    }
}

// --- /metrics ----------------------------------------------------------------------------------

/// One metric family: HELP and TYPE once, then its samples.
struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", l.join(","));
        }
        let _ = writeln!(self.text, " {}", number(value));
    }
}

/// A sample value as the exposition format spells it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// One listener address's figures: the sockets of an SO_REUSEPORT group share an address, and
/// one series per address keeps the exposition free of duplicate label sets.
#[derive(Default)]
struct ByAddress {
    queue: u64,
    backlog: u64,
    full: bool,
    states: Option<super::sample::States>,
    /// The host has no accept queue for it (Windows): its queue series are left out, never 0.
    no_queue: bool,
}

/// The Prometheus text of a snapshot.
pub fn metrics(s: &Snapshot) -> String {
    let mut o = Out {
        text: String::new(),
    };
    o.family(
        "wstune_watch_up",
        "gauge",
        "1 while the watch makes frames (the last one younger than three intervals), else 0.",
    );
    o.sample("wstune_watch_up", &[], flag(s.fresh));
    o.family(
        "wstune_watch_frames_total",
        "counter",
        "Frames made since the watch started.",
    );
    o.sample("wstune_watch_frames_total", &[], s.frames as f64);
    o.family(
        "wstune_watch_last_frame_age_seconds",
        "gauge",
        "Seconds since the last frame (since the start, before the first).",
    );
    o.sample("wstune_watch_last_frame_age_seconds", &[], s.age_s);
    o.family(
        "wstune_watch_interval_seconds",
        "gauge",
        "Seconds between readings (--interval).",
    );
    o.sample("wstune_watch_interval_seconds", &[], s.interval_s);

    let Some(f) = s.frame.as_deref() else {
        advice_families(&mut o, None, &s.events);
        return o.text;
    };

    let mut by: BTreeMap<&str, ByAddress> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for l in &f.listeners {
        let e = by.entry(l.local.as_str()).or_insert_with(|| {
            order.push(l.local.as_str());
            ByAddress::default()
        });
        e.queue += u64::from(l.queue);
        e.backlog += u64::from(l.backlog);
        e.full |= l.full;
        e.states = l.states;
        e.no_queue |= l.queue_unavailable.is_some();
    }
    type Pick = fn(&ByAddress) -> f64;
    let listener: [(&str, &str, Pick); 3] = [
        (
            "wstune_watch_listener_queue",
            "Connections completed and not yet accepted, per listening address (summed over an SO_REUSEPORT group).",
            |a| a.queue as f64,
        ),
        (
            "wstune_watch_listener_backlog",
            "The accept queue's size (the listen() backlog, capped at net.core.somaxconn), per listening address.",
            |a| a.backlog as f64,
        ),
        (
            "wstune_watch_listener_full",
            "1 while a listener's accept queue is full: the kernel drops or ignores new handshakes for it.",
            |a| flag(a.full),
        ),
    ];
    for (name, help, pick) in listener {
        o.family(name, "gauge", help);
        for addr in order.iter().filter(|a| !by[*a].no_queue) {
            o.sample(name, &[("listener", addr)], pick(&by[addr]));
        }
    }
    o.family(
        "wstune_watch_listener_sockets",
        "gauge",
        "Sockets behind a listener by state (established, syn_recv, time_wait, close_wait, orphans), from the paced connection walk.",
    );
    for addr in &order {
        if let Some(st) = by[addr].states {
            for (state, n) in states(&st) {
                o.sample(
                    "wstune_watch_listener_sockets",
                    &[("listener", addr), ("state", state)],
                    n as f64,
                );
            }
        }
    }
    o.family(
        "wstune_watch_sockets",
        "gauge",
        "TCP sockets by state in the watched network namespace.",
    );
    if let Some(t) = &f.totals {
        for (state, n) in states(t) {
            o.sample("wstune_watch_sockets", &[("state", state)], n as f64);
        }
    }
    o.family(
        "wstune_watch_connections_age_seconds",
        "gauge",
        "How old the per-listener socket counts are: the walk over every connection is paced on a busy host.",
    );
    if let Some(a) = f.connections_age_s {
        o.sample("wstune_watch_connections_age_seconds", &[], a);
    }
    o.family(
        "wstune_watch_somaxconn",
        "gauge",
        "net.core.somaxconn: the cap on every listener's backlog.",
    );
    if let Some(v) = f.somaxconn {
        o.sample("wstune_watch_somaxconn", &[], v as f64);
    }

    o.family(
        "wstune_watch_kernel_stat_total",
        "counter",
        "A kernel counter's cumulative value (TcpExt.ListenOverflows, softnet.dropped, conntrack.drop...): rate() it.",
    );
    for c in &f.counters {
        o.sample(
            "wstune_watch_kernel_stat_total",
            &[("name", &c.name)],
            c.total as f64,
        );
    }

    o.family(
        "wstune_watch_value",
        "gauge",
        "A value that has a mark (orphans, time_wait, tcp_mem_pages, conntrack, file_handles, a process's fds).",
    );
    for g in &f.gauges {
        o.sample("wstune_watch_value", &[("name", &g.name)], g.value as f64);
    }
    o.family(
        "wstune_watch_value_mark",
        "gauge",
        "The value at which a gauge's row turns and its check's advice fires.",
    );
    for g in &f.gauges {
        o.sample(
            "wstune_watch_value_mark",
            &[("name", &g.name)],
            g.mark as f64,
        );
    }
    o.family(
        "wstune_watch_value_limit",
        "gauge",
        "The hard limit a gauge's mark guards (tcp_max_orphans, nf_conntrack_max, fs.file-max...).",
    );
    for g in &f.gauges {
        if let Some(l) = g.limit {
            o.sample("wstune_watch_value_limit", &[("name", &g.name)], l as f64);
        }
    }

    o.family(
        "wstune_watch_cpu_softirq_ratio",
        "gauge",
        "Share of a CPU's time in softirq over the last interval (0 to 1).",
    );
    for c in &f.cpus {
        o.sample(
            "wstune_watch_cpu_softirq_ratio",
            &[("cpu", &c.cpu)],
            c.softirq_pct / 100.0,
        );
    }
    o.family(
        "wstune_watch_cpu_system_ratio",
        "gauge",
        "Share of a CPU's time in the kernel (system) over the last interval (0 to 1).",
    );
    for c in &f.cpus {
        o.sample(
            "wstune_watch_cpu_system_ratio",
            &[("cpu", &c.cpu)],
            c.system_pct / 100.0,
        );
    }

    o.family(
        "wstune_watch_ephemeral_ports_range_size",
        "gauge",
        "Local ports in net.ipv4.ip_local_port_range.",
    );
    o.family(
        "wstune_watch_ephemeral_ports_in_use",
        "gauge",
        "Local ports of the ephemeral range in use per destination (the most used, at most 8).",
    );
    if let Some(p) = &f.ports {
        o.sample(
            "wstune_watch_ephemeral_ports_range_size",
            &[],
            p.size as f64,
        );
        for d in &p.destinations {
            o.sample(
                "wstune_watch_ephemeral_ports_in_use",
                &[("destination", &d.destination)],
                d.in_use as f64,
            );
        }
    }

    o.family(
        "wstune_watch_unavailable",
        "gauge",
        "1 for each reading that failed in the last interval (shown as unavailable, never as zero).",
    );
    for what in f.unavailable.keys() {
        o.sample("wstune_watch_unavailable", &[("reading", what)], 1.0);
    }

    advice_families(&mut o, Some(f), &s.events);
    o.text
}

/// The states of a listener or of all sockets; orphans only where they are known (a series
/// left out is unknown to Prometheus, where a 0 would be a claim).
fn states(s: &super::sample::States) -> Vec<(&'static str, u64)> {
    let mut v = vec![
        ("established", s.established),
        ("syn_recv", s.syn_recv),
        ("time_wait", s.time_wait),
        ("close_wait", s.close_wait),
    ];
    if let Some(o) = s.orphans {
        v.push(("orphans", o));
    }
    v
}

/// Every check a frame can name, with 0 for those not firing: an alert on `== 1` and a
/// dashboard over `increase(..._intervals_total)` see stable series.
fn advice_families(o: &mut Out, f: Option<&Frame>, events: &[Event]) {
    let mut ids: Vec<String> = Vec::new();
    let mut add = |id: &str| {
        if !ids.iter().any(|i| i == id) {
            ids.push(id.to_string());
        }
    };
    if let Some(f) = f {
        f.counters
            .iter()
            .filter_map(|c| c.check.as_deref())
            .for_each(&mut add);
        f.gauges.iter().for_each(|g| add(&g.check));
        f.advice.iter().for_each(|a| add(&a.id));
    }
    OTHER_CHECKS.iter().for_each(|id| add(id));
    events.iter().for_each(|e| add(&e.id));
    o.family(
        "wstune_watch_advice_active",
        "gauge",
        "1 while a catalog check's advice fires (its row turned in the last frame), else 0; /events has its words.",
    );
    for id in &ids {
        let on = f.is_some_and(|f| f.advice.iter().any(|a| &a.id == id));
        o.sample("wstune_watch_advice_active", &[("id", id)], flag(on));
    }
    o.family(
        "wstune_watch_advice_intervals_total",
        "counter",
        "Intervals in which a catalog check's advice fired since the watch started.",
    );
    for id in &ids {
        let n = events.iter().find(|e| &e.id == id).map_or(0, |e| e.count);
        o.sample(
            "wstune_watch_advice_intervals_total",
            &[("id", id)],
            n as f64,
        );
    }
}

// --- /events -----------------------------------------------------------------------------------

/// One line of /events: the check's event over the watch, and whether it fires now.
#[derive(Serialize)]
struct EventLine<'a> {
    #[serde(flatten)]
    event: &'a Event,
    /// It turned in the latest frame.
    active: bool,
}

/// The advice as JSON lines, one per check id, in the order they first fired.
pub fn events(s: &Snapshot) -> String {
    let mut out = String::new();
    for e in &s.events {
        let active = s
            .frame
            .as_ref()
            .is_some_and(|f| f.advice.iter().any(|a| a.id == e.id));
        if let Ok(line) = serde_json::to_string(&EventLine { event: e, active }) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

// --- HTTP --------------------------------------------------------------------------------------

/// A response: status line's code and reason, content type, extra headers, body.
pub struct Response {
    pub code: u16,
    pub reason: &'static str,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: String,
}

impl Response {
    fn text(code: u16, reason: &'static str, body: impl Into<String>) -> Response {
        Response {
            code,
            reason,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
            self.code,
            self.reason,
            self.content_type,
            self.body.len()
        );
        for (k, v) in &self.headers {
            let _ = write!(head, "{k}: {v}\r\n");
        }
        head.push_str("\r\n");
        let mut b = head.into_bytes();
        b.extend_from_slice(self.body.as_bytes());
        b
    }
}

/// The answer to a request head (the bytes up to the blank line).
pub fn respond(head: &[u8], hub: &Hub) -> Response {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Response::text(400, "Bad Request", "bad request line\n");
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Response::text(400, "Bad Request", "bad request line\n");
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    let known = matches!(path, "/metrics" | "/events" | "/healthz");
    if !known {
        return Response::text(
            404,
            "Not Found",
            "not found: this watch serves /metrics, /events and /healthz\n",
        );
    }
    if method != "GET" {
        let mut r = Response::text(405, "Method Not Allowed", "only GET\n");
        r.headers.push(("Allow", "GET"));
        return r;
    }
    let s = hub.snapshot();
    match path {
        "/metrics" => Response {
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            ..Response::text(200, "OK", metrics(&s))
        },
        "/events" => Response {
            content_type: "application/x-ndjson; charset=utf-8",
            ..Response::text(200, "OK", events(&s))
        },
        _ if s.fresh => Response::text(200, "OK", "ok\n"),
        _ => Response::text(
            503,
            "Service Unavailable",
            format!(
                "stale: the last frame is {:.1} s old (a frame every {} s)\n",
                s.age_s, s.interval_s
            ),
        ),
    }
}

/// Why a request head could not be read.
enum HeadError {
    TooLarge,
    /// The client closed or the connection failed: nothing to answer.
    Gone,
}

async fn read_head(s: &mut tokio::net::TcpStream) -> Result<Vec<u8>, HeadError> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| HeadError::Gone)?;
        if n == 0 {
            return Err(HeadError::Gone);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_end(&buf[from..]) {
            buf.truncate(from + end);
            return Ok(buf);
        }
        if buf.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Where the head ends (after "\r\n\r\n" or a bare "\n\n").
fn find_end(b: &[u8]) -> Option<usize> {
    b.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

async fn connection(mut s: tokio::net::TcpStream, hub: Arc<Hub>) {
    use tokio::io::AsyncWriteExt;
    let r = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut s)).await {
        Ok(Ok(head)) => respond(&head, &hub),
        Ok(Err(HeadError::TooLarge)) => Response::text(
            431,
            "Request Header Fields Too Large",
            format!("the request head is over {MAX_HEAD} bytes\n"),
        ),
        Ok(Err(HeadError::Gone)) => return,
        Err(_) => Response::text(408, "Request Timeout", "the request head took too long\n"),
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        s.write_all(&r.bytes()).await?;
        s.shutdown().await
    })
    .await;
}

/// The HTTP side: its thread, and how to end it.
pub struct Server {
    pub addr: SocketAddr,
    done: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serve `hub` on `listener` (already bound, so a bad address fails before anything
    /// starts). Returns once SIGTERM and SIGINT are handled: from then on they end the watch.
    pub fn start(listener: std::net::TcpListener, hub: Arc<Hub>) -> std::io::Result<Server> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let done = Arc::new(tokio::sync::Notify::new());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        let done2 = done.clone();
        let thread = std::thread::Builder::new()
            .name("watch-serve".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(serve(listener, hub, done2, ready_tx));
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Server {
                addr,
                done,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(std::io::Error::other("the HTTP thread ended at start"))
            }
        }
    }

    /// Stop serving and wait for the thread.
    pub fn stop(mut self) {
        self.done.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    hub: Arc<Hub>,
    done: Arc<tokio::sync::Notify>,
    ready: std::sync::mpsc::Sender<std::io::Result<()>>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    if let Err(e) = signals(hub.clone()) {
        let _ = ready.send(Err(e));
        return;
    }
    let _ = ready.send(Ok(()));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = done.notified() => return,
            a = listener.accept() => match a {
                Ok((s, _)) => {
                    // Over the cap the connection is closed at once: memory stays bounded
                    // whatever a client opens.
                    let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
                    let hub = hub.clone();
                    tokio::spawn(async move {
                        connection(s, hub).await;
                        drop(slot);
                    });
                }
                // Out of descriptors or memory: wait instead of spinning on the error.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
        }
    }
}

/// SIGTERM (systemd, kubelet) and SIGINT (a terminal) end the watch cleanly.
#[cfg(unix)]
fn signals(hub: Arc<Hub>) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let mut s = signal(kind)?;
        let hub = hub.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                hub.stop();
            }
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn signals(hub: Arc<Hub>) -> std::io::Result<()> {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            hub.stop();
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::advice::Advice;
    use crate::watch::frame::{CounterRow, GaugeRow, ListenerRow, SCHEMA};

    fn frame(time: &str, overflows: u64, firing: bool) -> Frame {
        Frame {
            schema: SCHEMA.into(),
            time: time.into(),
            elapsed_s: 1.0,
            interval_s: 1.0,
            listeners: vec![
                ListenerRow {
                    local: "127.0.0.1:9001".into(),
                    queue: 2,
                    backlog: 1,
                    fill: 1.0,
                    full: true,
                    states: None,
                    queue_unavailable: None,
                },
                // An SO_REUSEPORT sibling: one series for the address.
                ListenerRow {
                    local: "127.0.0.1:9001".into(),
                    queue: 0,
                    backlog: 1,
                    fill: 0.0,
                    full: false,
                    states: None,
                    queue_unavailable: None,
                },
                ListenerRow {
                    local: "[::1]:9\"\\\n".into(),
                    queue: 0,
                    backlog: 5,
                    fill: 0.0,
                    full: false,
                    states: None,
                    queue_unavailable: None,
                },
            ],
            somaxconn: Some(4096),
            totals: None,
            connections_age_s: None,
            counters: vec![CounterRow {
                name: "TcpExt.ListenOverflows".into(),
                total: overflows,
                delta: 3,
                per_s: 3.0,
                check: Some("linux.counter.listen_overflows".into()),
                turned: firing,
            }],
            gauges: vec![GaugeRow {
                name: "orphans".into(),
                value: 3,
                mark: 100,
                mark_is: "x".into(),
                limit: Some(400),
                check: "linux.sockstat.orphans".into(),
                turned: false,
            }],
            cpus: Vec::new(),
            ports: None,
            process: None,
            server: None,
            advice: if firing {
                vec![Advice {
                    id: "linux.counter.listen_overflows".into(),
                    title: "t".into(),
                    what: format!("TcpExt.ListenOverflows +3 (total {overflows})"),
                    why: "w".into(),
                    fix: vec!["sysctl -w net.core.somaxconn=65535".into()],
                    current: None,
                    target: None,
                }]
            } else {
                Vec::new()
            },
            unavailable: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn metrics_carry_the_frame_with_escaped_labels_and_one_series_per_address() {
        let hub = Hub::new(Duration::from_secs(1));
        let mut v = Headless::new(hub.clone());
        v.show(&frame("2026-01-01T00:00:01Z", 10, true)).unwrap();
        let m = metrics(&hub.snapshot());
        assert!(m.contains("wstune_watch_up 1\n"), "{m}");
        assert!(m.contains("wstune_watch_frames_total 1\n"), "{m}");
        assert!(
            m.contains("wstune_watch_listener_queue{listener=\"127.0.0.1:9001\"} 2\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_listener_backlog{listener=\"127.0.0.1:9001\"} 2\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_listener_full{listener=\"127.0.0.1:9001\"} 1\n"),
            "{m}"
        );
        assert_eq!(m.matches("wstune_watch_listener_full{").count(), 2, "{m}");
        assert!(
            m.contains("wstune_watch_listener_full{listener=\"[::1]:9\\\"\\\\\\n\"} 0\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_kernel_stat_total{name=\"TcpExt.ListenOverflows\"} 10\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_value_mark{name=\"orphans\"} 100\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_value_limit{name=\"orphans\"} 400\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_advice_active{id=\"linux.counter.listen_overflows\"} 1\n"),
            "{m}"
        );
        assert!(
            m.contains("wstune_watch_advice_active{id=\"linux.sockstat.orphans\"} 0\n"),
            "{m}"
        );
        assert!(
            m.contains(
                "wstune_watch_advice_intervals_total{id=\"linux.counter.listen_overflows\"} 1\n"
            ),
            "{m}"
        );
        // Every family once.
        for l in m.lines().filter(|l| l.starts_with("# TYPE ")) {
            assert_eq!(m.matches(&format!("{l}\n")).count(), 1, "{l}");
        }
    }

    #[test]
    fn events_keep_one_line_per_check_while_it_keeps_firing() {
        let hub = Hub::new(Duration::from_secs(1));
        let mut v = Headless::new(hub.clone());
        v.show(&frame("2026-01-01T00:00:01Z", 10, true)).unwrap();
        v.show(&frame("2026-01-01T00:00:02Z", 13, true)).unwrap();
        v.show(&frame("2026-01-01T00:00:03Z", 13, false)).unwrap();
        let e = events(&hub.snapshot());
        let lines: Vec<serde_json::Value> = e
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{e}");
        assert_eq!(lines[0]["id"], "linux.counter.listen_overflows");
        assert_eq!(lines[0]["count"], 2);
        assert_eq!(lines[0]["first_seen"], "2026-01-01T00:00:01Z");
        assert_eq!(lines[0]["last_seen"], "2026-01-01T00:00:02Z");
        assert_eq!(lines[0]["active"], false);
        assert_eq!(lines[0]["fix"][0], "sysctl -w net.core.somaxconn=65535");
    }

    #[test]
    fn requests_are_routed_and_bad_ones_refused() {
        let hub = Hub::new(Duration::from_secs(1));
        let get = |h: &str| respond(h.as_bytes(), &hub);
        assert_eq!(get("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").code, 200);
        assert_eq!(get("GET /metrics?x=1 HTTP/1.0\r\n\r\n").code, 200);
        assert_eq!(get("GET /events HTTP/1.1\r\n\r\n").code, 200);
        assert_eq!(get("GET / HTTP/1.1\r\n\r\n").code, 404);
        assert_eq!(get("GET /metricsx HTTP/1.1\r\n\r\n").code, 404);
        let post = get("POST /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(post.code, 405);
        assert!(post.headers.contains(&("Allow", "GET")));
        assert_eq!(get("GARBAGE\r\n\r\n").code, 400);
        assert_eq!(get("GET metrics HTTP/1.1\r\n\r\n").code, 400);
        assert_eq!(get("GET /metrics SPDY/3\r\n\r\n").code, 400);
    }

    #[test]
    fn healthz_turns_503_when_frames_stop() {
        let hub = Hub::new(Duration::from_millis(20));
        Headless::new(hub.clone())
            .show(&frame("2026-01-01T00:00:01Z", 1, false))
            .unwrap();
        assert_eq!(respond(b"GET /healthz HTTP/1.1\r\n\r\n", &hub).code, 200);
        std::thread::sleep(Duration::from_millis(80));
        let r = respond(b"GET /healthz HTTP/1.1\r\n\r\n", &hub);
        assert_eq!(r.code, 503);
        assert!(r.body.contains("stale"), "{}", r.body);
        assert!(metrics(&hub.snapshot()).contains("wstune_watch_up 0\n"));
    }

    #[test]
    fn a_signal_ends_the_wait() {
        let hub = Hub::new(Duration::from_secs(1));
        let mut v = Headless::new(hub.clone());
        hub.stop();
        let t = Instant::now();
        assert_eq!(v.wait(t + Duration::from_secs(30)).unwrap(), Flow::Stop);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_head_ends_at_the_blank_line() {
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(find_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
