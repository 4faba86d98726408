//! Draining: take the server out of the load balancer's rotation, then close its connections
//! spread over a window, so a deploy does not turn into a reconnect storm on the other nodes.
//!
//! The order is fixed: readiness first ([`Drain::begin`] flips `/readyz` to 503 before
//! anything else happens), then `drain_delay` (the load balancer's health checks see the 503;
//! new upgrades are still accepted meanwhile, because a balancer that has not seen the 503 yet
//! still sends clients here, and refusing them is the error the delay exists to avoid), then
//! the server stops accepting, then `Drain::spread_closes` closes every connection with 1012
//! (service restart) over `drain_over`.
//!
//! The spread is one task and one 10 ms timer for the whole server, whatever the connection
//! count: it snapshots the registry, shuffles it, and at each tick closes as many as are due
//! (`n x elapsed / window`, rounded down). The close rate is then flat at every scale coarser
//! than a tick (each second of the window holds `n / window` closes, +-1 tick's worth), which
//! is what the other nodes' accept rate is sized for. The shuffle is the jitter: which client
//! goes when is uniformly random, so clients of one tenant, one region or one connect time are
//! not closed together. Random per-connection offsets in `[0, window)` would give the same
//! expected rate with binomial noise on top (a 1 s bucket of 10,000 closes over 10 s varies by
//! about +-3 %; of 1,000 over 10 s by +-9 %), and need a deadline stored per connection or a
//! hash checked for every connection at every tick.

use super::Hub;
pub use crate::config::drain_window as window;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// The close code of a drain: 1012, "Service Restart" in IANA's WebSocket close code
/// registry: the server is restarting; a client should reconnect (after a randomized
/// backoff).
pub const SERVICE_RESTART: u16 = 1012;

/// How often the spread wakes up to close the connections that are due.
const TICK: Duration = Duration::from_millis(10);

/// Where a drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Taking new work: `/readyz` answers 200.
    Ready = 0,
    /// `/readyz` answers 503; the drain delay runs (upgrades still accepted).
    Waiting = 1,
    /// No new upgrades; connections are being closed over the window.
    Closing = 2,
    /// Every connection was asked to close; the server waits for SIGTERM (a drain started
    /// through the API) or for the clients (a signal's).
    Drained = 3,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Ready,
            1 => Phase::Waiting,
            2 => Phase::Closing,
            _ => Phase::Drained,
        }
    }

    /// Its name in `/readyz` and `/api/drain` answers.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Ready => "ready",
            Phase::Waiting => "draining",
            Phase::Closing => "closing",
            Phase::Drained => "drained",
        }
    }
}

/// What started a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGTERM or SIGINT (the server's shutdown future completed).
    Signal,
    /// `POST /api/drain` on the admin listener.
    Api,
    /// A rolling restart replaced this process (`serve --processes N`, SIGHUP): the others
    /// stay ready, so nothing waits for a load balancer, and this is the only process
    /// draining, so it may close at the whole node's reconnect rate.
    Replaced,
}

/// A drain's plan, fixed when it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// What started it.
    pub trigger: Trigger,
    /// Connections open when it began (more may arrive during the delay; they are closed too).
    pub connections: usize,
    /// How long `/readyz` answers 503 before the first close.
    pub delay: Duration,
    /// The longest the closes are spread over (`ServerConfig::drain_over`, or the API's
    /// `over`).
    pub over: Duration,
    /// Closes a second that shorten the window for fewer connections (0: the window is
    /// `over`, as an explicit `over` always is).
    pub rate: u32,
    /// The window the closes of `connections` take: `over`, shortened by `rate` when that
    /// closes them sooner.
    pub window: Duration,
}

impl Plan {
    /// The plan as JSON fields (without braces), for `/readyz` and `/api/drain`.
    pub fn json_fields(&self) -> String {
        format!(
            "\"connections\":{},\"delay_secs\":{},\"over_secs\":{},\"window_secs\":{},\"trigger\":\"{}\"",
            self.connections,
            self.delay.as_secs_f64(),
            self.over.as_secs_f64(),
            self.window.as_secs_f64(),
            match self.trigger {
                Trigger::Signal => "signal",
                Trigger::Api => "api",
                Trigger::Replaced => "replaced",
            }
        )
    }
}

/// The drain's state (a field of the hub).
#[derive(Debug)]
pub(super) struct State {
    /// A [`Phase`]; only moves forward.
    phase: AtomicU8,
    /// Set once, by the first [`Drain::begin`].
    plan: Mutex<Option<Plan>>,
    /// Wakes `Server::run` when the API begins a drain.
    begun: tokio::sync::Notify,
}

impl Default for State {
    fn default() -> State {
        State {
            phase: AtomicU8::new(Phase::Ready as u8),
            plan: Mutex::new(None),
            begun: tokio::sync::Notify::new(),
        }
    }
}

/// The server's readiness and its drain (`hub.drain()`): a borrow of the hub, free to make.
#[derive(Clone, Copy)]
pub struct Drain<'h> {
    pub(super) hub: &'h Hub,
}

impl Drain<'_> {
    /// The phase now.
    pub fn phase(self) -> Phase {
        Phase::from_u8(self.hub.drain.phase.load(Relaxed))
    }

    /// The plan, once a drain began.
    pub fn plan(self) -> Option<Plan> {
        *self.hub.drain.plan.lock().unwrap()
    }

    /// Whether the server takes new work (what `/readyz` answers).
    pub fn is_ready(self) -> bool {
        self.phase() == Phase::Ready
    }

    fn advance(self, to: Phase) {
        self.hub.drain.phase.fetch_max(to as u8, Relaxed);
    }

    /// Completes once a drain has begun (at once if one has).
    pub async fn begun(self) {
        loop {
            let notified = self.hub.drain.begun.notified();
            if !self.is_ready() {
                return;
            }
            notified.await;
        }
    }

    /// `/readyz`: 200 while ready, else 503 with the drain's state (JSON).
    pub fn readyz(self) -> (u16, String) {
        match self.plan() {
            None => (200, "{\"status\":\"ready\"}\n".to_string()),
            Some(p) => (
                503,
                format!(
                    "{{\"status\":\"draining\",\"phase\":\"{}\",\"open\":{},{}}}\n",
                    self.phase().name(),
                    self.hub.registry().len(),
                    p.json_fields()
                ),
            ),
        }
    }

    /// Begin a drain: `/readyz` answers 503 from now on, before anything else happens.
    /// `over` replaces `ServerConfig::drain_over` (the API's `over=SECS`; no rate shortens an
    /// explicit window). `Err` with the plan already running when a drain began before (the
    /// first one's plan stands). Only `Server::run` acts on the plan (delay, accept, closes):
    /// a hub no server runs only changes its readiness.
    pub fn begin(self, trigger: Trigger, over: Option<Duration>) -> Result<Plan, Plan> {
        let mut plan = self.hub.drain.plan.lock().unwrap();
        if let Some(p) = *plan {
            return Err(p);
        }
        let n = self.hub.registry().len();
        let (over, rate) = match over {
            Some(o) => (o, 0),
            None => (self.hub.config.drain_over, self.hub.config.drain_rate),
        };
        let p = Plan {
            trigger,
            connections: n,
            delay: self.hub.config.drain_delay,
            over,
            rate,
            window: window(n, over, rate),
        };
        *plan = Some(p);
        // Readiness first: the 503 is what the load balancer must see before any close.
        self.advance(Phase::Waiting);
        drop(plan);
        self.hub.drain.begun.notify_waiters();
        Ok(p)
    }

    /// Begin a drain for a process a rolling restart replaced: no delay (the node's other
    /// processes answer /readyz 200 and keep taking clients) and closes paced at `node_rate` a
    /// second, the whole node's reconnect rate rather than this process's share of it (one
    /// process drains at a time), within `drain_over`. `Err` as [`Drain::begin`].
    pub fn begin_replaced(self, node_rate: u32) -> Result<Plan, Plan> {
        let mut plan = self.hub.drain.plan.lock().unwrap();
        if let Some(p) = *plan {
            return Err(p);
        }
        let n = self.hub.registry().len();
        let over = self.hub.config.drain_over;
        let p = Plan {
            trigger: Trigger::Replaced,
            connections: n,
            delay: Duration::ZERO,
            over,
            rate: node_rate,
            window: window(n, over, node_rate),
        };
        *plan = Some(p);
        self.advance(Phase::Waiting);
        drop(plan);
        self.hub.drain.begun.notify_waiters();
        Ok(p)
    }

    /// Close every connection with 1012, spread evenly in a random order over the plan's
    /// window (the module's doc says why); returns how many were asked to close. Connections
    /// that register meanwhile (an upgrade that raced the end of accepting) are closed at the
    /// end. One task, one timer, whatever the count.
    pub(crate) async fn spread_closes(self, plan: &Plan) -> usize {
        self.advance(Phase::Closing);
        let mut conns = self.hub.registry().everyone();
        shuffle(&mut conns, seed());
        let n = conns.len();
        // The window for the connections actually held now (the delay may have added some).
        let window = window(n, plan.over, plan.rate);
        let start = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut closed = 0;
        while !conns.is_empty() {
            let elapsed = start.elapsed();
            let due = if elapsed >= window {
                n
            } else {
                (n as u128 * elapsed.as_nanos() / window.as_nanos()) as usize
            };
            while closed < due {
                // Popped: the connection's `Shared` is released as soon as it is asked.
                if let Some(c) = conns.pop() {
                    let _ = c.request_close(SERVICE_RESTART);
                }
                closed += 1;
            }
            // Every connection already gone (closed by its client): nothing is left to pace.
            if conns.is_empty() || self.hub.registry().is_empty() {
                break;
            }
            tick.tick().await;
        }
        self.hub.registry().close_all(SERVICE_RESTART);
        self.advance(Phase::Drained);
        n
    }
}

/// The longest window `POST /api/drain` may ask for: an hour (a typo of `over=36000` would
/// otherwise keep a server half-drained for ten hours).
pub const MAX_API_OVER: Duration = Duration::from_secs(3600);

/// `over` from `POST /api/drain`'s query (`over=SECS`) or body (`{"over":SECS}` or
/// `over=SECS`); None when neither gives one. Seconds, fractions allowed, 0 to
/// [`MAX_API_OVER`].
pub fn parse_over(query: &str, body: &[u8]) -> Result<Option<Duration>, String> {
    let from_pairs = |s: &str| {
        s.split('&')
            .find_map(|kv| kv.strip_prefix("over="))
            .map(str::to_string)
    };
    let body = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_string())?;
    let body = body.trim();
    let raw = match from_pairs(query) {
        Some(v) => Some(v),
        None if body.starts_with('{') => {
            let v: serde_json::Value =
                serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
            match v.get("over") {
                None | Some(serde_json::Value::Null) => None,
                Some(o) => Some(o.to_string()),
            }
        }
        None if body.is_empty() => None,
        None => Some(from_pairs(body).ok_or_else(|| {
            "the body takes {\"over\":SECS} or over=SECS (or send over=SECS in the query)"
                .to_string()
        })?),
    };
    let Some(raw) = raw else { return Ok(None) };
    let secs: f64 = raw
        .trim()
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s <= MAX_API_OVER.as_secs_f64())
        .ok_or_else(|| {
            format!(
                "over={raw}: give the drain window in seconds, 0 (close at once) to {}",
                MAX_API_OVER.as_secs()
            )
        })?;
    Ok(Some(Duration::from_secs_f64(secs)))
}

/// The server's answer to `POST /api/drain`: 202 with the plan it began; 409 with the plan
/// already running (a second call changes nothing, and says so, rather than pretend a new
/// drain began).
pub fn api_answer(hub: &Hub, over: Option<Duration>) -> (u16, String) {
    match hub.drain().begin(Trigger::Api, over) {
        Ok(p) => (202, format!("{{\"draining\":true,{}}}\n", p.json_fields())),
        Err(p) => (
            409,
            format!(
                "{{\"error\":\"a drain is already running; its plan stands\",\"phase\":\"{}\",{}}}\n",
                hub.drain().phase().name(),
                p.json_fields()
            ),
        ),
    }
}

/// A seed that differs between processes and drains (the std hasher's random keys).
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// Fisher-Yates with splitmix64: uniform enough for picking close slots, no dependency.
fn shuffle<T>(v: &mut [T], mut state: u64) {
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_shortens_the_window_for_fewer_connections_never_lengthens_it() {
        let over = Duration::from_secs(50);
        assert_eq!(window(100_000, over, 2000), over);
        assert_eq!(window(1_000_000, over, 2000), over);
        assert_eq!(window(2_000, over, 2000), Duration::from_secs(1));
        assert_eq!(window(0, over, 2000), Duration::ZERO);
        assert_eq!(window(10, over, 0), over);
    }

    #[test]
    fn the_shuffle_is_a_permutation_and_moves_things() {
        let mut v: Vec<u32> = (0..1000).collect();
        shuffle(&mut v, 42);
        let moved = v
            .iter()
            .enumerate()
            .filter(|(i, x)| *i as u32 != **x)
            .count();
        assert!(moved > 900, "{moved}");
        v.sort();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn the_api_window_comes_from_the_query_or_the_body_and_is_bounded() {
        let s = |q: &str, b: &str| parse_over(q, b.as_bytes());
        assert_eq!(s("", ""), Ok(None));
        assert_eq!(s("over=5", ""), Ok(Some(Duration::from_secs(5))));
        assert_eq!(s("a=1&over=0.5", ""), Ok(Some(Duration::from_millis(500))));
        assert_eq!(s("", r#"{"over": 12}"#), Ok(Some(Duration::from_secs(12))));
        assert_eq!(s("", "{}"), Ok(None));
        assert_eq!(s("", "over=3"), Ok(Some(Duration::from_secs(3))));
        assert!(s("over=-1", "").is_err());
        assert!(s("over=NaN", "").is_err());
        assert!(s("over=3601", "").is_err());
        assert!(s("", "nonsense").is_err());
        assert!(s("", "{nope").is_err());
    }

    #[test]
    fn readiness_turns_503_once_and_the_first_plan_stands() {
        let hub = Hub::new(
            crate::ServerConfig {
                drain_over: Duration::from_secs(10),
                drain_delay: Duration::from_secs(2),
                ..Default::default()
            },
            Default::default(),
        );
        assert_eq!(hub.drain().readyz().0, 200);
        let p = hub.drain().begin(Trigger::Api, None).unwrap();
        assert_eq!(
            (p.over, p.delay, p.connections),
            (Duration::from_secs(10), Duration::from_secs(2), 0)
        );
        let (code, body) = hub.drain().readyz();
        assert_eq!(code, 503);
        assert!(body.contains("\"status\":\"draining\""), "{body}");
        let again = hub.drain().begin(Trigger::Signal, Some(Duration::ZERO));
        assert_eq!(again, Err(p));
    }
}
