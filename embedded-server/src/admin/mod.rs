//! The admin listener (127.0.0.1 by default): `GET /healthz` (liveness), `GET /readyz`
//! (readiness: 503 once a drain began), `GET /metrics` (Prometheus), `POST /api/drain` and
//! the channels app's HTTP API for backends (`/api/*`, see [`crate::channels::api`]). Kept off
//! the WebSocket port so it can be firewalled separately and never competes with upgrades.
//!
//! Requests are parsed with `httparse`, one per connection (`Connection: close`). The API:
//!
//! - every `/api/*` route needs the API key (`Authorization: Bearer KEY` or `X-API-Key: KEY`):
//!   401 without it or with another; with no key configured the API is off (403), whatever
//!   address the listener is on (a loopback admin port is reachable by every local user and
//!   every process of the host, so loopback is no authentication);
//! - a POST body needs a `Content-Length` (411 without; chunked bodies are refused with 411
//!   too) of at most [`Gate::max_body`] bytes (413), arriving within 10 s, and charged to the
//!   server's memory budget while it is held (503 with `Retry-After: 1` when the budget has
//!   no room for it now);
//! - `Expect: 100-continue` (recent curl sends it for bodies over 1 MiB; older ones over 1 KiB)
//!   is answered with 100 as soon as the head is checked;
//! - every answer is counted in `ws_api_requests_total{route,code}`.
//!
//! Connections are served from three pools, so that one kind of traffic cannot starve
//! another (256 connections in all, [`MAX_CONNECTIONS`]):
//! - [`READING_SLOTS`]: a connection that has not sent its whole request head. It has
//!   [`HEAD_TIMEOUT`] to send it, and when every reading slot is taken a new connection
//!   takes the oldest one's place (that one is closed): silent connections cannot keep a
//!   scrape out, they only push each other out;
//! - [`STATUS_SLOTS`]: `/metrics`, `/healthz` and `/readyz` once their head is read;
//! - [`API_SLOTS`]: the HTTP API (and anything else), whose bodies and fan-outs take longer.
//!
//! A request whose pool is full is answered 503 with `Retry-After: 1`.

mod gate;
mod http;

pub use gate::Gate;
use http::{body_length, json_error, read_body, read_head, write, Head, Reply};

use crate::channels::api::{self, ApiCall, Endpoint};
use crate::hub::Hub;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// A request header that marks a `/metrics` or `/healthz` request as a `--processes`
/// supervisor's own polling: it is answered as usual but not counted in
/// `ws_api_requests_total` (the API's routes are counted whatever the header says).
pub const INTERNAL_HEADER: &str = "X-Wstune-Internal";

/// The longest request head accepted (431 above it).
pub const MAX_HEAD: usize = 8192;
/// How long a request head may take to arrive. Short: a scraper or a backend sends its request
/// as soon as it connects, and a reading slot is shared by everyone who has not yet.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a request body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most one request may take, head, body, answer and write together: a client that reads
/// the answer slowly (or never) cannot hold a connection (and a file descriptor) longer.
const REQUEST_DEADLINE: Duration = Duration::from_secs(20);
/// The most admin connections served at once: the three pools together. Each holds a file
/// descriptor; without a cap, idle connects to the admin port could use every descriptor the
/// process has and starve the WebSocket listener's upgrades.
pub const MAX_CONNECTIONS: usize = READING_SLOTS + STATUS_SLOTS + API_SLOTS;
/// Connections still sending their request head (the oldest is closed to make room).
pub const READING_SLOTS: usize = 128;
/// `/metrics` and `/healthz` requests being answered: a scrape is quick, 32 is many scrapers.
pub const STATUS_SLOTS: usize = 32;
/// API requests (and other paths) being read and answered.
pub const API_SLOTS: usize = 96;

/// The reading pool: every connection still sending its head, oldest first. Taking a place in
/// a full pool closes the oldest holder (its eviction channel is dropped).
#[derive(Debug, Default)]
struct Readers {
    inner: Mutex<ReadersInner>,
}

#[derive(Debug, Default)]
struct ReadersInner {
    next: u64,
    live: BTreeMap<u64, tokio::sync::oneshot::Sender<()>>,
}

/// A place in the reading pool, given back when dropped.
struct Reading<'a> {
    pool: &'a Readers,
    id: u64,
}

impl Readers {
    /// Take a place; the receiver completes when a newer connection takes it over.
    fn enter(&self) -> (Reading<'_>, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut inner = self.inner.lock().unwrap();
        if inner.live.len() >= READING_SLOTS {
            // Dropping the oldest one's sender wakes its receiver: it closes.
            inner.live.pop_first();
        }
        let id = inner.next;
        inner.next += 1;
        inner.live.insert(id, tx);
        (Reading { pool: self, id }, rx)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.pool.inner.lock().unwrap().live.remove(&self.id);
    }
}

/// The three pools (see the module's doc).
struct Pools {
    readers: Readers,
    status: Arc<tokio::sync::Semaphore>,
    api: Arc<tokio::sync::Semaphore>,
}

/// Serve the admin endpoints (`/metrics`, `/healthz`) on `listener` until `shutdown`
/// completes, with the HTTP API off (no key): see [`serve_with`].
pub async fn serve(listener: TcpListener, hub: Arc<Hub>, shutdown: impl Future<Output = ()>) {
    let gate = Arc::new(Gate::new(None, hub.config.max_message_bytes));
    // No key: every API call is refused (403) before the application matters.
    serve_with(listener, hub, gate, None, shutdown).await
}

/// The `--app` a server runs, when it is not channels (what the API's 409 names).
pub fn app_name(app: crate::App) -> Option<String> {
    match app {
        crate::App::Channels => None,
        crate::App::Echo => Some("--app echo".into()),
        crate::App::Broadcast => Some("--app broadcast".into()),
    }
}

/// Serve `/healthz`, `/metrics` and the channels API of `hub` behind `gate`. `app` names the
/// application when it is not the channels app (the API then answers 409).
pub async fn serve_with(
    listener: TcpListener,
    hub: Arc<Hub>,
    gate: Arc<Gate>,
    app: Option<String>,
    shutdown: impl Future<Output = ()>,
) {
    let counts = gate.clone();
    // API bodies are charged to this server's memory budget while they are held.
    let _ = gate.budget.set(hub.metrics.clone());
    let app: Arc<Option<String>> = Arc::new(app);
    serve_routes(listener, shutdown, gate, move |route| {
        let (hub, counts, app) = (hub.clone(), counts.clone(), app.clone());
        async move {
            match route {
                Route::Healthz => (200, healthz_body(&hub)),
                Route::Readyz => hub.drain().readyz(),
                Route::Drain(over) => crate::hub::drain::api_answer(&hub, over),
                Route::Metrics => {
                    let mut m = render(&hub);
                    counts.render_counts(&mut m, "ws_api_requests_total");
                    (200, m)
                }
                Route::Api(call) => api::answer(&hub, &call, app.as_deref()).await,
            }
        }
    })
    .await
}

/// What the admin listener was asked for.
#[derive(Debug, Clone)]
pub enum Route {
    /// `GET /healthz`: JSON health.
    Healthz,
    /// `GET /metrics`: Prometheus text.
    Metrics,
    /// `GET /readyz`: 200 while the server takes new work, 503 once a drain began.
    Readyz,
    /// `POST /api/drain` (key checked): begin a drain, over this window when one was given.
    Drain(Option<Duration>),
    /// An `/api/*` request whose key, method and body were checked.
    Api(ApiCall),
}

/// Serve `GET /healthz` (JSON), `GET /metrics` (Prometheus text) and `/api/*` (JSON, behind
/// `gate`) on `listener` until `shutdown`, each answered by `answer(route)` as (status, body);
/// anything else gets 404 or 405. A server process and the `--processes` supervisor both
/// answer through this, so their endpoints behave alike. A request head must arrive within
/// [`HEAD_TIMEOUT`] and fit in [`MAX_HEAD`] bytes; the whole request, the answer's write
/// included, gets 20 s; at most [`MAX_CONNECTIONS`] are served at once, in three pools (see
/// the module's doc).
pub async fn serve_routes<F, Fut>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    gate: Arc<Gate>,
    answer: F,
) where
    F: Fn(Route) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (u16, String)> + Send,
{
    tokio::pin!(shutdown);
    let pools = Arc::new(Pools {
        readers: Readers::default(),
        status: Arc::new(tokio::sync::Semaphore::new(STATUS_SLOTS)),
        api: Arc::new(tokio::sync::Semaphore::new(API_SLOTS)),
    });
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                // EMFILE and friends: back off instead of spinning (as the WebSocket
                // listener does); the error does not go away by retrying at once.
                Err(e) => {
                    tracing::warn!("admin accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (answer, gate, pools) = (answer.clone(), gate.clone(), pools.clone());
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(REQUEST_DEADLINE, one_request(stream, &gate, &pools, answer))
                    .await;
        });
    }
}

/// One request on one connection: read and parse the head ([`read_head`]), route it
/// ([`status_route`], [`api_route`], [`other_route`]), count and write the answer.
async fn one_request<F, Fut>(
    mut stream: TcpStream,
    gate: &Gate,
    pools: &Pools,
    answer: F,
) -> std::io::Result<()>
where
    F: Fn(Route) -> Fut,
    Fut: Future<Output = (u16, String)>,
{
    let (reading, evicted) = pools.readers.enter();
    let head = tokio::select! {
        head = read_head(&mut stream) => head,
        // A newer connection took this one's reading slot: it had its chance.
        _ = evicted => return Ok(()),
    };
    drop(reading);
    let (buf, n, head_len) = match head {
        Ok(head) => head,
        Err(Some(refusal)) => {
            gate.count("other", refusal.status);
            return write(&mut stream, refusal).await;
        }
        // Slow, or gone: nobody to answer.
        Err(None) => return Ok(()),
    };
    // Parsed again from the complete head: `read_head` only learned where it ends.
    let mut raw = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut raw);
    let _ = parsed.parse(&buf[..n]);
    let target = parsed.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let req = Head {
        method: parsed.method.unwrap_or(""),
        query,
        headers: parsed.headers,
    };
    // The route's own pool: scrapes never wait behind API calls, nor API calls behind scrapes.
    let pool = if matches!(path, "/healthz" | "/metrics" | "/readyz") {
        &pools.status
    } else {
        &pools.api
    };
    let Ok(_slot) = pool.clone().try_acquire_owned() else {
        let label = match path {
            "/healthz" => "healthz",
            "/readyz" => "readyz",
            "/metrics" => "metrics",
            p if p == "/api" || p.starts_with("/api/") => "api_other",
            _ => "other",
        };
        gate.count(label, 503);
        let busy = Reply::text(503, "too many admin requests at once; try again\n")
            .with("Retry-After: 1\r\n");
        return write(&mut stream, busy).await;
    };
    let (route_label, reply) = match path {
        "/healthz" | "/metrics" | "/readyz" => status_route(path, &req, answer).await,
        p if p == "/api" || p.starts_with("/api/") => {
            let early_body = &buf[head_len..n];
            api_route(&mut stream, gate, p, &req, early_body, answer).await?
        }
        _ => other_route(&req),
    };
    let internal = req.header(INTERNAL_HEADER).is_some()
        && matches!(route_label, "healthz" | "metrics" | "readyz");
    if !internal {
        gate.count(route_label, reply.status);
    }
    write(&mut stream, reply).await
}

/// `GET /healthz` and `GET /metrics`, answered by the server's `answer`.
async fn status_route<F, Fut>(path: &str, req: &Head<'_, '_>, answer: F) -> (&'static str, Reply)
where
    F: Fn(Route) -> Fut,
    Fut: Future<Output = (u16, String)>,
{
    let (label, route, ctype) = match path {
        "/healthz" => ("healthz", Route::Healthz, "application/json"),
        "/readyz" => ("readyz", Route::Readyz, "application/json"),
        _ => ("metrics", Route::Metrics, "text/plain; version=0.0.4"),
    };
    if req.method != "GET" {
        return (label, Reply::text(405, "GET only\n").with("Allow: GET\r\n"));
    }
    let (status, body) = answer(route).await;
    (label, Reply::new(status, ctype, body))
}

/// Any other path: 404 for a GET, 405 otherwise.
fn other_route(req: &Head<'_, '_>) -> (&'static str, Reply) {
    let reply = if req.method == "GET" {
        Reply::text(404, "try /healthz, /readyz, /metrics or /api/channels\n")
    } else {
        Reply::text(405, "GET only (POST for /api/publish and /api/batch)\n").with("Allow: GET\r\n")
    };
    ("other", reply)
}

/// `/api/*`: the key first (403 with none configured, 401 missing or wrong), then the route,
/// the method and, for a POST, the body (`early_body` is what arrived with the head). Only an
/// error writing the `100 Continue` is an `Err`.
async fn api_route<F, Fut>(
    stream: &mut TcpStream,
    gate: &Gate,
    path: &str,
    req: &Head<'_, '_>,
    early_body: &[u8],
    answer: F,
) -> std::io::Result<(&'static str, Reply)>
where
    F: Fn(Route) -> Fut,
    Fut: Future<Output = (u16, String)>,
{
    let endpoint = match path {
        "/api/publish" => Some(Endpoint::Publish),
        "/api/batch" => Some(Endpoint::Batch),
        "/api/channels" => Some(Endpoint::Channels),
        // A `+` in a path is itself, not a space (that is the query's rule); a name that does
        // not decode to UTF-8 is refused below, not mangled into another.
        p => p
            .strip_prefix("/api/channels/")
            .map(|n| Endpoint::Channel(api::decode_component(n, false).unwrap_or_default())),
    };
    let bad_name = path
        .strip_prefix("/api/channels/")
        .is_some_and(|n| api::decode_component(n, false).is_none());
    let drain = path == "/api/drain";
    let label = match &endpoint {
        _ if drain => "drain",
        Some(e) => e.label(),
        None => "api_other",
    };
    let presented = req
        .header("authorization")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(crate::channels::auth::bearer)
        .map(str::as_bytes)
        .or_else(|| req.header("x-api-key").map(<[u8]>::trim_ascii));
    let refusal = match (&gate.key, presented) {
        (None, _) => Some(json_error(
            403,
            "the HTTP API is off: no API key is configured; give the server one with \
             --api-key-file FILE, WSTUNE_API_KEY or server.channels.api_key_file",
        )),
        (Some(_), None) => Some(
            json_error(
                401,
                "API key required: send Authorization: Bearer KEY (or X-API-Key: KEY)",
            )
            .with("WWW-Authenticate: Bearer\r\n"),
        ),
        (Some(k), Some(p)) if !k.matches(p) => {
            Some(json_error(401, "wrong API key").with("WWW-Authenticate: Bearer\r\n"))
        }
        (Some(_), Some(_)) => None,
    };
    if let Some(r) = refusal {
        return Ok((label, r));
    }
    if drain {
        return Ok((
            label,
            drain_route(stream, gate, req, early_body, answer).await,
        ));
    }
    let e = match endpoint {
        Some(_) if bad_name => {
            let msg = "the channel name in the path is not percent-encoded UTF-8: encode the \
                       name's UTF-8 bytes (%C3%A9 for é)";
            return Ok((label, json_error(400, msg)));
        }
        None => {
            let msg = "no such API route: POST /api/publish, POST /api/batch, GET \
                       /api/channels, GET /api/channels/NAME, POST /api/drain";
            return Ok((label, json_error(404, msg)));
        }
        Some(e) => e,
    };
    let (want, allow) = if e.is_post() {
        ("POST", "Allow: POST\r\n")
    } else {
        ("GET", "Allow: GET\r\n")
    };
    if req.method != want {
        return Ok((
            label,
            json_error(405, &format!("{path} takes {want}")).with(allow),
        ));
    }
    let mut body = Vec::new();
    // Held until the answer is written: the body counts against the memory budget as long
    // as it is in memory.
    let mut _charge = None;
    if e.is_post() {
        let length = body_length(
            req.header("transfer-encoding").is_some(),
            req.headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| h.value),
            gate.max_body,
        );
        let len = match length {
            Err(r) => return Ok((label, r)),
            Ok(len) => len,
        };
        match gate.charge_body(len) {
            Ok(c) => _charge = c,
            Err(r) => return Ok((label, r)),
        }
        if req
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"))
        {
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        // Its whole length at once (it is charged already): no doubling on the way.
        body = Vec::with_capacity(len);
        body.extend_from_slice(&early_body[..early_body.len().min(len)]);
        if read_body(stream, &mut body, len).await.is_err() {
            let msg = "the body ended (or stalled for 10 s) before Content-Length bytes";
            return Ok((label, json_error(400, msg)));
        }
    }
    let call = ApiCall {
        endpoint: e,
        body,
        query: req.query.to_string(),
    };
    let (status, body) = answer(Route::Api(call)).await;
    Ok((label, Reply::json(status, body)))
}

/// `POST /api/drain[?over=SECS]` (or a body `{"over":SECS}` / `over=SECS`): a body is
/// optional, so a request without a length has none (RFC 9112 section 6.3).
async fn drain_route<F, Fut>(
    stream: &mut TcpStream,
    gate: &Gate,
    req: &Head<'_, '_>,
    early_body: &[u8],
    answer: F,
) -> Reply
where
    F: Fn(Route) -> Fut,
    Fut: Future<Output = (u16, String)>,
{
    if req.method != "POST" {
        return json_error(405, "/api/drain takes POST").with("Allow: POST\r\n");
    }
    let lengths = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| h.value);
    let chunked = req.header("transfer-encoding").is_some();
    let mut body = Vec::new();
    if chunked || req.header("content-length").is_some() {
        let len = match body_length(chunked, lengths, gate.max_body.min(1024)) {
            Ok(len) => len,
            Err(r) => return r,
        };
        body = early_body[..early_body.len().min(len)].to_vec();
        if read_body(stream, &mut body, len).await.is_err() {
            return json_error(
                400,
                "the body ended (or stalled) before Content-Length bytes",
            );
        }
    }
    match crate::hub::drain::parse_over(req.query, &body) {
        Ok(over) => {
            let (status, body) = answer(Route::Drain(over)).await;
            Reply::json(status, body)
        }
        Err(e) => json_error(400, &e),
    }
}

/// The metrics text, with the runtime's per-worker busy time.
pub fn render(hub: &Hub) -> String {
    let rt = tokio::runtime::Handle::current().metrics();
    let workers: Vec<f64> = (0..rt.num_workers())
        .map(|i| rt.worker_total_busy_duration(i).as_secs_f64())
        .collect();
    let mut o = hub.metrics.render(
        &workers,
        &[
            ("ws_io_workers", "I/O worker threads.", workers.len() as f64),
            (
                "ws_send_queue_cap_bytes",
                "Per-connection send-queue cap.",
                hub.config.send_queue_bytes as f64,
            ),
        ],
    );
    hub.channel_metrics.render(&mut o);
    if hub.history().enabled() {
        render_history(hub, &mut o);
    }
    o
}

/// What the channel history dropped to hold its shares, and its tombstones.
fn render_history(hub: &Hub, o: &mut String) {
    let evicted = hub.history().evicted();
    let (tombstones, dropped) = hub.history().tombstones();
    let _ = writeln!(
        o,
        "# HELP ws_channels_history_evicted_total Publications dropped from the history \
         because their channel, or their publisher (a connection), held more than its share \
         of --history-max-bytes.\n# TYPE ws_channels_history_evicted_total counter\n\
         ws_channels_history_evicted_total{{share=\"channel\"}} {}\n\
         ws_channels_history_evicted_total{{share=\"publisher\"}} {}",
        evicted.channel, evicted.publisher
    );
    let _ = writeln!(
        o,
        "# HELP ws_channels_history_tombstones Forgotten streams remembered (epoch and top \
         offset), so their positions answer too_old.\n# TYPE ws_channels_history_tombstones \
         gauge\nws_channels_history_tombstones {tombstones}\n# HELP \
         ws_channels_history_tombstones_dropped_total Tombstones dropped for their share of \
         the bound (positions from before one answer too_old).\n# TYPE \
         ws_channels_history_tombstones_dropped_total counter\n\
         ws_channels_history_tombstones_dropped_total {dropped}"
    );
}

/// The `/healthz` JSON: the connection count, and the cluster backplane's state when one is
/// configured. Served by the admin listener and on the WebSocket port (for load balancers).
pub fn healthz_body(hub: &Hub) -> String {
    match hub
        .metrics
        .backplane_up
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        -1 => format!(
            "{{\"status\":\"ok\",\"connections\":{}}}\n",
            hub.registry().len()
        ),
        up => format!(
            "{{\"status\":\"ok\",\"connections\":{},\"backplane\":\"{}\"}}\n",
            hub.registry().len(),
            if up == 1 { "up" } else { "down" }
        ),
    }
}
