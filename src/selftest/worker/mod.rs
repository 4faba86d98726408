//! One generator process (`wstune` re-executed with the hidden `selftest-worker` command):
//! opens its share of the connections, waits for "go" on stdin, runs the scenario, and reports
//! on stdout as JSON lines. Single-threaded on purpose: several processes scale past the
//! per-process fd limit, and each one's CPU time is its own.

mod echo;
mod restart;
mod scenarios;
mod script;

pub use scenarios::broadcast_payload;

use super::client::{self, Reader, Writer};
use super::histo::{histogram, MAX_LATENCY_US};
use super::scenario::OnEachConn;
use super::{Event, OwnCounts, WorkerResult, WorkerSpec};
use echo::{echo_rate, echo_sat, pace, Slot};
use hdrhistogram::Histogram;
use scenarios::{handshakes, hold, storm, subscribe};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

/// Lateness of a scheduled send that is the timer's resolution, not the server's doing.
const TIMER_SLOP_US: u64 = 1000;

/// Where a scheduled message's latency counts from: when it was due, less the timer's
/// resolution. A send up to [`TIMER_SLOP_US`] late counts from the send; one later than that
/// (held back by a server that stopped reading, or by a busy generator) counts from `due` plus
/// the slop, so the wait is in the scheduled latency. The service latency, from the actual
/// send, is the figure that leaves the generator's own lateness out.
fn latency_origin_us(due_us: u64, now_us: u64) -> u64 {
    now_us.clamp(due_us, due_us + TIMER_SLOP_US)
}

#[derive(Default)]
struct Counters {
    sent: u64,
    received: u64,
    errors: u64,
    disconnects: u64,
    close_codes: std::collections::BTreeMap<u16, u64>,
    /// Broadcast: per round, (deliveries, latest delivery latency in us).
    rounds: Vec<(u64, u64)>,
    /// When the last echo arrived, us since the epoch (storm: the end of the storm).
    last_echo_us: u64,
    /// Measured messages never echoed by the end of the run.
    lost: u64,
    /// `--message`: server messages that arrived with no request outstanding (a server that
    /// pushes, or answers one request with several messages): not latencies, warned about.
    unsolicited: u64,
}

struct Shared {
    hist: RefCell<Histogram<u64>>,
    /// echo-rate and deflate: latency from the actual send, beside `hist`'s from when the
    /// message was due. A generator running late inflates the scheduled figure only; a server
    /// stall shows in both, so the pair tells the two apart.
    service: RefCell<Histogram<u64>>,
    /// Broadcast subscribers that have every round, and echo-rate connections whose schedule
    /// and drain are over: closed only after the result is out. The
    /// server's figures end at the first result, and 10,000 close handshakes inside that
    /// window were ~40 % of the server CPU charged to the fan-out (measured: 1.14 CPU-s for 10
    /// rounds, 2.46 for 30, so ~0.5 s was the closes, not the deliveries).
    finished: RefCell<Vec<(Reader, Writer)>>,
    c: RefCell<Counters>,
    epoch: Instant,
    /// Messages due before this (us since the epoch) are the warm-up: sent, not counted.
    measure_from_us: std::cell::Cell<u64>,
    /// echo-rate and deflate: when each measured message actually left, for the burstiness.
    sends: RefCell<super::arrivals::Recorder>,
    /// How long each connection took to open (TCP + TLS + upgrade).
    connect: RefCell<Histogram<u64>>,
    /// wss://: the TLS handshakes' share of that, and what they were.
    tls_hs: RefCell<Histogram<u64>>,
    tls: RefCell<Option<super::TlsCounts>>,
    /// wss://: the TLS client every connection starts from (None: ws://).
    client: Option<super::tls::Client>,
    /// A scripted session's waiting steps, by `POPULATION.STEP`.
    steps: RefCell<std::collections::BTreeMap<String, script::StepStats>>,
    /// restart: the closes, reconnect attempts and refusals.
    restart: RefCell<super::restart::RestartCounts>,
}

impl Shared {
    /// Microseconds since this worker's epoch: the clock every stamp and latency uses.
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// One latency into the histogram, kept inside its bounds.
    fn observe(&self, latency_us: u64) {
        let _ = self
            .hist
            .borrow_mut()
            .record(latency_us.clamp(1, MAX_LATENCY_US));
    }

    /// A connection opened: its times, and its TLS handshake. Opened in a tls-handshake
    /// warm-up (before the measured window), it is not counted.
    fn opened(&self, c: &client::Conn) {
        if self.now_us() < self.measure_from_us.get() {
            return;
        }
        let _ = self
            .connect
            .borrow_mut()
            .record(c.times.total_us().clamp(1, MAX_LATENCY_US));
        if let Some(h) = &c.tls {
            let _ = self
                .tls_hs
                .borrow_mut()
                .record(c.times.tls_us.clamp(1, MAX_LATENCY_US));
            let mut t = self.tls.borrow_mut();
            let t = t.get_or_insert_with(Default::default);
            t.version.clone_from(&h.version);
            t.cipher.clone_from(&h.cipher);
            if h.resumed {
                t.resumed += 1;
            } else {
                t.full += 1;
            }
        }
    }

    /// One service latency (from the actual send).
    fn observe_service(&self, latency_us: u64) {
        let _ = self
            .service
            .borrow_mut()
            .record(latency_us.clamp(1, MAX_LATENCY_US));
    }
}

fn emit(e: &Event) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, e);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Runs the worker whose spec is the first line of standard input (the orchestrator writes it
/// there, then "go" once every worker is connected).
pub fn main() -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let spec: WorkerSpec = serde_json::from_str(&line)
        .map_err(|e| anyhow::anyhow!("the generator's spec on its input is not valid: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run(spec));
    Ok(())
}

fn cpu_secs() -> f64 {
    crate::host::process::self_cpu_secs()
}

fn wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// An open-loop scenario's schedule: a slot per connection, filled by one pacer task on the
/// profile's rate (empty for the other scenarios).
fn paced(
    spec: &Rc<WorkerSpec>,
    sh: &Rc<Shared>,
    n: usize,
    start: Instant,
    end: Instant,
) -> Vec<Rc<Slot>> {
    if !spec.scenario.open_loop() {
        return Vec::new();
    }
    let slots: Vec<Rc<Slot>> = (0..n).map(|_| Rc::new(Slot::default())).collect();
    tokio::task::spawn_local(pace(slots.clone(), spec.clone(), sh.clone(), start, end));
    slots
}

/// One held connection's part in the scenario, until `end` (the scenarios whose connections
/// open in the window have none: their whole run is `storm`, `handshakes` or a staged script).
async fn drive(
    c: client::Conn,
    n: usize,
    spec: &WorkerSpec,
    sh: &Shared,
    slot: Option<Rc<Slot>>,
    end: Instant,
) -> std::io::Result<()> {
    match spec.scenario.workload().on_each_conn() {
        OnEachConn::PacedEcho => {
            let slot = slot.expect("a schedule slot per connection");
            echo_rate(c.reader, c.writer, spec, sh, &slot, end).await
        }
        OnEachConn::SaturatedEcho => echo_sat(c.reader, c.writer, spec, sh, end).await,
        OnEachConn::Hold => hold(c.reader, c.writer, sh, end).await,
        OnEachConn::Subscribe => {
            // The last round is published one gap before the end; it gets one gap
            // after the end to arrive, as every earlier round had before the next.
            let gap = spec.secs / (spec.rounds as f64 + 1.0);
            let until = end + Duration::from_secs_f64(gap);
            subscribe(c.reader, c.writer, spec, sh, until).await
        }
        OnEachConn::ScriptSession => {
            let pop = spec
                .script
                .as_ref()
                .and_then(|s| s.population_of(n))
                .unwrap_or(0);
            let conn = spec.conn_number(n);
            script::session(c.reader, c.writer, spec, sh, pop, conn, end).await
        }
        OnEachConn::Reconnect => restart::reconnecting(c, n, spec, sh, end).await,
        OnEachConn::Nothing => Ok(()),
    }
}

async fn run(spec: WorkerSpec) {
    let client = match spec.tls.as_ref().filter(|_| spec.target.tls) {
        Some(t) => match super::tls::Client::new(t) {
            Ok(c) => Some(c),
            Err(e) => {
                emit(&Event::Ready {
                    connected: 0,
                    failed: spec.conns,
                    first_error: Some(e),
                });
                return;
            }
        },
        None => None,
    };
    let sh = Rc::new(Shared {
        connect: RefCell::new(histogram()),
        tls_hs: RefCell::new(histogram()),
        tls: RefCell::new(None),
        client,
        hist: RefCell::new(histogram()),
        service: RefCell::new(histogram()),
        finished: RefCell::new(Vec::new()),
        c: RefCell::new(Counters {
            rounds: vec![(0, 0); spec.rounds],
            ..Counters::default()
        }),
        epoch: Instant::now(),
        measure_from_us: std::cell::Cell::new(0),
        sends: RefCell::new(Default::default()),
        steps: RefCell::new(Default::default()),
        restart: RefCell::new(Default::default()),
    });
    let spec = Rc::new(spec);
    // Connect phase (all scenarios but those whose connects are the measurement).
    let mut conns = Vec::new();
    let mut first_error = None;
    let connects_later = spec.connects_in_window();
    if !connects_later {
        let (ok, err) = open_all(&spec, &sh).await;
        conns = ok;
        first_error = err;
    }
    emit(&Event::Ready {
        connected: conns.len(),
        failed: spec.conns - conns.len().min(spec.conns),
        first_error: first_error.clone(),
    });
    if !connects_later && conns.is_empty() {
        return;
    }
    // Wait for the orchestrator's "go" so every worker starts together.
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    match stdin.next_line().await {
        Ok(Some(l)) if l.trim() == "go" => {}
        _ => {
            // Said, so that the self-test's "ended without a result" has its reason beside it.
            eprintln!(
                "wstune selftest-worker: no \"go\" from the self-test (its input closed); \
                 ending without a result"
            );
            return;
        }
    }
    let start = Instant::now();
    // The warm-up runs the same load without counting it: the first burst on fresh
    // connections (allocations, page faults, the kernel's first segments) is a start-up cost,
    // not the steady state the percentiles describe.
    let measure_from = start + Duration::from_secs_f64(spec.warmup);
    sh.measure_from_us
        .set(measure_from.duration_since(sh.epoch).as_micros() as u64);
    let end = measure_from + Duration::from_secs_f64(spec.secs);
    let cpu0 = Rc::new(std::cell::Cell::new(cpu_secs()));
    {
        let cpu0 = cpu0.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep_until(measure_from).await;
            cpu0.set(cpu_secs());
        });
    }
    // Once a second: cumulative counts, for the timeline and the progress display.
    let ticker = {
        let sh = sh.clone();
        tokio::task::spawn_local(async move {
            let mut t = tokio::time::interval_at(
                measure_from + Duration::from_secs(1),
                Duration::from_secs(1),
            );
            loop {
                t.tick().await;
                let c = sh.c.borrow();
                emit(&Event::Tick {
                    sent: c.sent,
                    received: c.received,
                });
            }
        })
    };
    let mut tasks = Vec::new();
    let mut storm_connect_errors = None;
    if spec.scenario.lasts_until_done() {
        let (n_ok, err) = storm(&spec, &sh, end).await;
        if n_ok < spec.conns {
            storm_connect_errors = err;
        }
    } else if spec.scenario.cycles_connections() {
        storm_connect_errors = handshakes(&spec, &sh, end).await;
    } else if connects_later {
        // A script with stages: its connections open and close on their schedule.
        storm_connect_errors = script::staged(&spec, &sh, start, end).await;
    } else {
        let slots = paced(&spec, &sh, conns.len(), start, end);
        for (i, (n, c)) in conns.into_iter().enumerate() {
            let (sh, spec) = (sh.clone(), spec.clone());
            let slot = slots.get(i).cloned();
            tasks.push(tokio::task::spawn_local(async move {
                let r = drive(c, n, &spec, &sh, slot, end).await;
                if r.is_err() {
                    sh.c.borrow_mut().errors += 1;
                }
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    ticker.abort();
    let elapsed = measure_from.elapsed().as_secs_f64();
    let start_us = start.duration_since(sh.epoch).as_micros() as u64;
    let cpu = cpu_secs() - cpu0.get();
    emit_result(
        &sh,
        cpu,
        elapsed,
        start_us,
        storm_connect_errors.or(first_error),
    );
    // The connections close only now, after the result (see `Shared::finished`).
    let finished = std::mem::take(&mut *sh.finished.borrow_mut());
    for (_r, mut w) in finished {
        let _ = w.close().await;
    }
}

/// The worker's result, one JSON line on stdout.
fn emit_result(sh: &Shared, cpu: f64, elapsed: f64, start_us: u64, first_error: Option<String>) {
    let c = sh.c.borrow();
    if c.unsolicited > 0 {
        // --message pairs each server message with the oldest request: more messages than
        // requests mean the server does not answer one message per request, and the
        // latencies pair the wrong messages.
        eprintln!(
            "wstune selftest: warning: {} server message(s) arrived with no request outstanding: \
             --message counts each server message as the answer to the oldest request, so the \
             latencies are only right for a server that answers each request with exactly one \
             message",
            c.unsolicited
        );
    }
    let service = sh.service.borrow();
    let service_histogram = (!service.is_empty()).then(|| super::histo::encode(&service));
    let connect = sh.connect.borrow();
    let tls_hs = sh.tls_hs.borrow();
    let tls = sh.tls.borrow().clone().map(|mut t| {
        t.signature_scheme = sh.client.as_ref().and_then(|c| c.signature_scheme());
        t
    });
    emit(&Event::Done(Box::new(WorkerResult {
        sent: c.sent,
        received: c.received,
        errors: c.errors,
        disconnects: c.disconnects,
        close_codes: c.close_codes.clone(),
        histogram: super::histo::encode(&sh.hist.borrow()),
        service_histogram,
        cpu_secs: cpu,
        elapsed_secs: elapsed,
        rounds: c.rounds.clone(),
        last_echo_secs: c.last_echo_us.saturating_sub(start_us) as f64 / 1e6,
        lost: c.lost,
        first_error,
        peak_rss_bytes: super::peak_rss(std::process::id()),
        arrivals: std::mem::take(&mut *sh.sends.borrow_mut()).finish(),
        connect_histogram: (!connect.is_empty()).then(|| super::histo::encode(&connect)),
        tls_histogram: (!tls_hs.is_empty()).then(|| super::histo::encode(&tls_hs)),
        tls,
        steps: sh
            .steps
            .borrow()
            .iter()
            .map(|(name, s)| super::StepResult {
                name: name.clone(),
                histogram: super::histo::encode(&s.hist),
                matched: s.matched,
                timeouts: s.timeouts,
                other: s.other,
            })
            .collect(),
        // Only a restart's connections reconnect: elsewhere the counts stay empty.
        own: match sh.restart.borrow().clone() {
            c if c == super::restart::RestartCounts::default() => OwnCounts::Common,
            c => OwnCounts::Restart(c),
        },
    })));
}

/// Open this worker's connections: at most 256 handshakes in flight, paced by the ramp.
/// Each connection comes back with its number (a script's connection belongs to the
/// population its number falls in).
async fn open_all(
    spec: &Rc<WorkerSpec>,
    sh: &Rc<Shared>,
) -> (Vec<(usize, client::Conn)>, Option<String>) {
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
    let start = Instant::now();
    let mut handles = Vec::with_capacity(spec.conns);
    let progress = Rc::new(RefCell::new((0usize, Instant::now())));
    for i in 0..spec.conns {
        if spec.ramp_per_sec > 0.0 {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / spec.ramp_per_sec))
                .await;
        }
        let permit = sem.clone().acquire_owned().await.expect("semaphore open");
        let (spec, sh) = (spec.clone(), sh.clone());
        let progress = progress.clone();
        handles.push(tokio::task::spawn_local(async move {
            let src = spec.source(i);
            let session = sh.client.as_ref().map(|c| c.session());
            let target = spec.target_of(i);
            let r = tokio::time::timeout(
                Duration::from_secs(20),
                client::connect(&target, src, spec.deflate, session.as_ref()),
            )
            .await;
            if let Ok(Ok(c)) = &r {
                sh.opened(c);
            }
            drop(permit);
            let mut p = progress.borrow_mut();
            p.0 += 1;
            if p.1.elapsed() > Duration::from_millis(250) {
                p.1 = Instant::now();
                emit(&Event::Connecting { done: p.0 });
            }
            match r {
                Ok(Ok(c)) => Ok((i, c)),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the handshake took over 20 s".to_string()),
            }
        }));
    }
    let mut ok = Vec::with_capacity(spec.conns);
    let mut first_error = None;
    for h in handles {
        match h.await {
            Ok(Ok(c)) => ok.push(c),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {}
        }
    }
    (ok, first_error)
}

fn record(sh: &Shared, due_us: u64) -> Option<u64> {
    if due_us < sh.measure_from_us.get() {
        return None;
    }
    let now_us = sh.now_us();
    sh.observe(now_us.saturating_sub(due_us));
    let mut c = sh.c.borrow_mut();
    c.received += 1;
    c.last_echo_us = now_us;
    Some(now_us)
}

fn closed(sh: &Shared, code: Option<u16>) {
    let mut c = sh.c.borrow_mut();
    c.disconnects += 1;
    if let Some(code) = code {
        *c.close_codes.entry(code).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_send_is_charged_from_when_it_was_due_less_the_timer_slop() {
        // On time or within the timer's resolution: from the send itself.
        assert_eq!(latency_origin_us(10_000, 10_000), 10_000);
        assert_eq!(latency_origin_us(10_000, 10_600), 10_600);
        // 50 ms late (the socket was full, or the generator busy): all but the 1 ms of slop is
        // in the figure. The formula before counted from 1 ms before the send, hiding 49 ms.
        assert_eq!(latency_origin_us(10_000, 60_000), 11_000);
    }
}
