//! One generator process (`wstune` re-executed with the hidden `selftest-worker` command):
//! opens its share of the connections, waits for "go" on stdin, runs the scenario, and reports
//! on stdout as JSON lines. Single-threaded on purpose: several processes scale past the
//! per-process fd limit, and each one's CPU time is its own.

use super::client::{self, Incoming, Reader, Writer};
use super::{Event, Scenario, WorkerResult, WorkerSpec};
use embedded_server::frame::OpCode;
use hdrhistogram::Histogram;
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

/// The longest latency the histograms hold: 10 minutes, in microseconds.
const MAX_LATENCY_US: u64 = 600_000_000;

/// Latencies are recorded in microseconds, 1 us .. 10 min, 3 significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
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

pub fn main(spec_json: &str) -> anyhow::Result<()> {
    let spec: WorkerSpec = serde_json::from_str(spec_json)?;
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

async fn run(spec: WorkerSpec) {
    let sh = Rc::new(Shared {
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
    });
    let spec = Rc::new(spec);
    // Connect phase (all scenarios but storm, whose connects are the measurement).
    let mut conns = Vec::new();
    let mut first_error = None;
    if spec.scenario != Scenario::Storm {
        let (ok, err) = open_all(&spec).await;
        conns = ok;
        first_error = err;
    }
    emit(&Event::Ready {
        connected: conns.len(),
        failed: spec.conns - conns.len().min(spec.conns),
        first_error: first_error.clone(),
    });
    if spec.scenario != Scenario::Storm && conns.is_empty() {
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
    if spec.scenario == Scenario::Storm {
        let (n_ok, err) = storm(&spec, &sh, end).await;
        if n_ok < spec.conns {
            storm_connect_errors = err;
        }
    } else {
        let echo_like = matches!(spec.scenario, Scenario::EchoRate | Scenario::Deflate);
        let slots: Vec<Rc<Slot>> = if echo_like {
            (0..conns.len()).map(|_| Rc::new(Slot::default())).collect()
        } else {
            Vec::new()
        };
        if echo_like {
            tokio::task::spawn_local(pace(slots.clone(), spec.clone(), sh.clone(), start, end));
        }
        for (i, c) in conns.into_iter().enumerate() {
            let (sh, spec) = (sh.clone(), spec.clone());
            let slot = slots.get(i).cloned();
            tasks.push(tokio::task::spawn_local(async move {
                let r = match spec.scenario {
                    Scenario::EchoRate | Scenario::Deflate => {
                        let slot = slot.expect("a schedule slot per connection");
                        echo_rate(c.reader, c.writer, &spec, &sh, &slot, end).await
                    }
                    Scenario::EchoSat => echo_sat(c.reader, c.writer, &spec, &sh, end).await,
                    Scenario::Idle => hold(c.reader, c.writer, &sh, end).await,
                    Scenario::Broadcast => {
                        // The last round is published one gap before the end; it gets one gap
                        // after the end to arrive, as every earlier round had before the next.
                        let gap = spec.secs / (spec.rounds as f64 + 1.0);
                        let until = end + Duration::from_secs_f64(gap);
                        subscribe(c.reader, c.writer, &spec, &sh, until).await
                    }
                    Scenario::Storm => Ok(()),
                };
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
    let mut hist_bytes = Vec::new();
    use hdrhistogram::serialization::Serializer;
    let _ = hdrhistogram::serialization::V2Serializer::new()
        .serialize(&sh.hist.borrow(), &mut hist_bytes);
    use base64::Engine;
    let service = sh.service.borrow();
    let service_histogram = (!service.is_empty()).then(|| {
        let mut b = Vec::new();
        let _ = hdrhistogram::serialization::V2Serializer::new().serialize(&*service, &mut b);
        base64::engine::general_purpose::STANDARD.encode(&b)
    });
    emit(&Event::Done(Box::new(WorkerResult {
        sent: c.sent,
        received: c.received,
        errors: c.errors,
        disconnects: c.disconnects,
        close_codes: c.close_codes.clone(),
        histogram: base64::engine::general_purpose::STANDARD.encode(&hist_bytes),
        service_histogram,
        cpu_secs: cpu,
        elapsed_secs: elapsed,
        rounds: c.rounds.clone(),
        last_echo_secs: c.last_echo_us.saturating_sub(start_us) as f64 / 1e6,
        lost: c.lost,
        first_error,
        peak_rss_bytes: super::peak_rss(std::process::id()),
        arrivals: std::mem::take(&mut *sh.sends.borrow_mut()).finish(),
    })));
}

/// Open this worker's connections: at most 256 handshakes in flight, paced by the ramp.
async fn open_all(spec: &Rc<WorkerSpec>) -> (Vec<client::Conn>, Option<String>) {
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
        let spec = spec.clone();
        let progress = progress.clone();
        handles.push(tokio::task::spawn_local(async move {
            let src = spec.source(i);
            let r = tokio::time::timeout(
                Duration::from_secs(20),
                client::connect(&spec.target, src, spec.deflate),
            )
            .await;
            drop(permit);
            let mut p = progress.borrow_mut();
            p.0 += 1;
            if p.1.elapsed() > Duration::from_millis(250) {
                p.1 = Instant::now();
                emit(&Event::Connecting { done: p.0 });
            }
            match r {
                Ok(Ok(c)) => Ok(c),
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

/// The payload of an echo message: the scheduled send time (us since this worker's epoch)
/// first, so the echo says when it was due. Binary, or JSON text for the deflate scenario.
fn payload(spec: &WorkerSpec, due_us: u64, seq: u64) -> (OpCode, Vec<u8>) {
    if let Some(r) = &spec.request {
        (OpCode::Text, r.clone().into_bytes())
    } else if spec.deflate {
        let mut s = format!(
            "{{\"t\":{due_us:020},\"seq\":{seq},\"symbol\":\"SYM{:03}\",\"bid\":{}.{:04},\"venue\":\"XNAS\",\"pad\":\"",
            seq % 500,
            seq % 997,
            (seq * 7919) % 10000
        );
        while s.len() + 2 < spec.size {
            s.push_str("tick ");
        }
        s.push_str("\"}");
        (OpCode::Text, s.into_bytes())
    } else {
        let mut p = vec![b'x'; spec.size.max(8)];
        p[..8].copy_from_slice(&due_us.to_le_bytes());
        (OpCode::Binary, p)
    }
}

/// The send stamp a reply answers: read from an echo; for a user's request, the oldest
/// message not yet answered (`oldest`).
fn stamp_of(spec: &WorkerSpec, msg: &[u8], oldest: Option<u64>) -> Option<u64> {
    if spec.request.is_some() {
        oldest
    } else if spec.deflate {
        std::str::from_utf8(msg.get(5..25)?).ok()?.parse().ok()
    } else {
        Some(u64::from_le_bytes(msg.get(..8)?.try_into().ok()?))
    }
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

/// One connection's place in the schedule: the due times the pacer has handed it and not yet
/// sent, and the wake-up for its task.
#[derive(Default)]
struct Slot {
    due: RefCell<std::collections::VecDeque<u64>>,
    wake: tokio::sync::Notify,
    /// The pacer has handed out its last due time.
    over: std::cell::Cell<bool>,
}

/// The send schedule of this process's connections. Each connection sends every period at its
/// own phase (its slot in the run's schedule, see `WorkerSpec::phase`), so the run's sends are
/// spread evenly over the period, as independent clients' are, instead of leaving together on
/// each tick of tokio's 1 ms timer (a burst per millisecond let the server read many sockets
/// per wake-up: 33-40 % of a core at 5,000 x 5 msgs/s where sends spaced on their own
/// schedules cost it 46-47 %). One fine timer (host::timer) wakes at each due time and hands
/// that connection its message; a connection whose socket is full keeps its due times queued
/// and sends them late, each counted from when it was due.
async fn pace(
    slots: Vec<Rc<Slot>>,
    spec: Rc<WorkerSpec>,
    sh: Rc<Shared>,
    start: Instant,
    end: Instant,
) {
    use std::cmp::Reverse;
    let period = Duration::from_secs_f64(1.0 / spec.rate.max(0.001));
    // (due, connection): the earliest first.
    let mut heap: std::collections::BinaryHeap<Reverse<(Instant, usize)>> = (0..slots.len())
        .map(|j| Reverse((start + period.mul_f64(spec.phase(j)), j)))
        .collect();
    // This process's connections sit evenly spaced in the period (`WorkerSpec::phase`), so
    // its sends are one every period / connections: one ticker at that interval from the
    // first due time wakes for each of them.
    let first = heap.peek().map_or(start, |r| r.0 .0);
    // At most one wake-up per 20 us: past 50,000 sends/s per process the sends due within
    // one tick leave together (a timer interrupt every microsecond would starve the process).
    let gap = period
        .div_f64(slots.len().max(1) as f64)
        .max(Duration::from_micros(20));
    let mut ticker = crate::host::timer::Ticker::new(first, gap);
    // A due time this close after a tick is that tick's (float rounding of the phases).
    let slack = (gap / 4).min(Duration::from_micros(5));
    while let Some(&Reverse((due, _))) = heap.peek() {
        if due >= end {
            break;
        }
        ticker.tick().await;
        // Every connection whose time has come (a late wake-up hands out all it passed).
        let now = Instant::now() + slack;
        while let Some(&Reverse((due, j))) = heap.peek() {
            if due > now || due >= end {
                break;
            }
            heap.pop();
            slots[j]
                .due
                .borrow_mut()
                .push_back(due.duration_since(sh.epoch).as_micros() as u64);
            slots[j].wake.notify_one();
            heap.push(Reverse((due + period, j)));
        }
    }
    for s in &slots {
        s.over.set(true);
        s.wake.notify_one();
    }
}

/// Open loop: messages are due on a fixed schedule (`pace`) and latency counts from when each
/// was due, so a stalled server shows up in the percentiles (no coordinated omission) instead
/// of quietly slowing the load down.
async fn echo_rate(
    mut r: Reader,
    mut w: Writer,
    spec: &WorkerSpec,
    sh: &Shared,
    slot: &Slot,
    end: Instant,
) -> std::io::Result<()> {
    let mut seq = 0u64;
    // (due, actually sent) stamps of messages not echoed yet (echoes come back in order).
    let mut outstanding = std::collections::VecDeque::new();
    let drain_until = end + Duration::from_secs(2);
    let mut result = Ok(());
    let drain = tokio::time::sleep_until(drain_until);
    tokio::pin!(drain);
    'run: loop {
        let sending = !(slot.over.get() && slot.due.borrow().is_empty());
        if !sending && outstanding.is_empty() {
            break;
        }
        tokio::select! {
            _ = slot.wake.notified(), if sending => {
                loop {
                    let Some(due_us) = slot.due.borrow_mut().pop_front() else { break };
                    // Latency counts from when the message was due, so a send held back by a
                    // stalled server is charged to the server. The timer's own resolution is
                    // not: up to 1 ms of lateness is forgiven.
                    let now_us = sh.now_us();
                    let origin_us = latency_origin_us(due_us, now_us);
                    let (op, p) = payload(spec, origin_us, seq);
                    // A server that stopped reading must not hold the generator past the run.
                    match tokio::time::timeout_at(drain_until, w.send(op, &p)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => { result = Err(e); break 'run; }
                        Err(_) => break 'run,
                    }
                    seq += 1;
                    outstanding.push_back((origin_us, now_us));
                    if origin_us >= sh.measure_from_us.get() {
                        sh.c.borrow_mut().sent += 1;
                        sh.sends.borrow_mut().sent(now_us);
                    }
                }
            }
            _ = &mut drain => break, // the drain is over
            m = r.next() => match m {
                Err(e) => { result = Err(e); break; }
                Ok(Incoming::Message(m)) => {
                    if spec.request.is_some() && outstanding.is_empty() {
                        sh.c.borrow_mut().unsolicited += 1;
                    }
                    if let Some(t) = stamp_of(spec, &m, outstanding.front().map(|&(due, _)| due)) {
                        let at = record(sh, t);
                        if let (Some(at), Some((_, sent_us))) = (at, outstanding.pop_front()) {
                            sh.observe_service(at.saturating_sub(sent_us));
                        }
                    }
                }
                Ok(Incoming::Ping(p)) => {
                    if let Err(e) = w.pong(&p).await { result = Err(e); break; }
                }
                Ok(Incoming::Closed(code)) => {
                    closed(sh, code);
                    break;
                }
            },
        }
    }
    // Messages never answered are not dropped from the percentiles: each counts as lost, with
    // the time it has waited so far (a lower bound on its latency).
    for (due_us, sent_us) in outstanding {
        if due_us >= sh.measure_from_us.get() {
            sh.observe_service(sh.now_us().saturating_sub(sent_us));
        }
        lost(sh, due_us);
    }
    if result.is_ok() {
        // Closed once every connection is done (see `Shared::finished`): a connection closing
        // as soon as its own schedule ends put 5,000 close handshakes in front of the other
        // connections' last echoes (a syscall trace of the server: no gap over 4 ms in the
        // run, 20-30 ms ones in its last tenth of a second; p99.9 100 ms at 50,000 msgs/s).
        sh.finished.borrow_mut().push((r, w));
    }
    result
}

fn lost(sh: &Shared, due_us: u64) {
    if due_us < sh.measure_from_us.get() {
        return;
    }
    sh.observe(sh.now_us().saturating_sub(due_us));
    sh.c.borrow_mut().lost += 1;
}

/// Closed loop: `inflight` messages outstanding per connection, a new one for each echo.
async fn echo_sat(
    mut r: Reader,
    mut w: Writer,
    spec: &WorkerSpec,
    sh: &Shared,
    end: Instant,
) -> std::io::Result<()> {
    let mut seq = 0u64;
    // Send stamps in order (used for a user's request, whose replies carry none).
    let mut sent_at = std::collections::VecDeque::new();
    for _ in 0..spec.inflight.max(1) {
        let now = sh.now_us();
        let (op, p) = payload(spec, now, seq);
        w.queue(op, &p);
        sent_at.push_back(now);
        seq += 1;
    }
    w.flush().await?;
    let mut outstanding = spec.inflight.max(1);
    sh.c.borrow_mut().sent += outstanding as u64;
    let drain = tokio::time::sleep_until(end + Duration::from_secs(2));
    tokio::pin!(drain);
    while outstanding > 0 {
        let first = tokio::select! {
            m = r.next() => m?,
            _ = &mut drain => break,
        };
        // Everything already read is handled before one write carries all the replacements:
        // the generator pays one syscall per batch, not per message, and stays out of the way.
        let mut next = Some(first);
        let mut replies = 0;
        while let Some(m) = next {
            match m {
                Incoming::Message(m) => {
                    if let Some(t) = stamp_of(spec, &m, sent_at.pop_front()) {
                        // Only echoes that arrive inside the window count toward throughput.
                        if Instant::now() <= end {
                            record(sh, t);
                        }
                        outstanding -= 1;
                        if Instant::now() < end {
                            let now = sh.now_us();
                            let (op, p) = payload(spec, now, seq);
                            sent_at.push_back(now);
                            w.queue(op, &p);
                            seq += 1;
                            replies += 1;
                        }
                    }
                }
                Incoming::Ping(p) => w.pong(&p).await?,
                Incoming::Closed(code) => {
                    closed(sh, code);
                    return Ok(());
                }
            }
            next = r.next_buffered()?;
        }
        if replies > 0 {
            w.flush().await?;
            outstanding += replies;
            sh.c.borrow_mut().sent += replies as u64;
        }
    }
    let _ = w.close().await;
    Ok(())
}

/// Idle: hold the connection, answering pings, until the end.
async fn hold(mut r: Reader, mut w: Writer, sh: &Shared, end: Instant) -> std::io::Result<()> {
    let end = tokio::time::sleep_until(end);
    tokio::pin!(end);
    loop {
        tokio::select! {
            m = r.next() => match m? {
                Incoming::Ping(p) => w.pong(&p).await?,
                Incoming::Message(_) => {}
                Incoming::Closed(code) => {
                    closed(sh, code);
                    return Ok(());
                }
            },
            _ = &mut end => break,
        }
    }
    let _ = w.close().await;
    Ok(())
}

/// Broadcast subscriber: each message carries the publisher's wall-clock send time and round;
/// the latency is measured against this host's same clock.
async fn subscribe(
    mut r: Reader,
    mut w: Writer,
    spec: &WorkerSpec,
    sh: &Shared,
    end: Instant,
) -> std::io::Result<()> {
    let mut got = 0;
    let end = tokio::time::sleep_until(end);
    tokio::pin!(end);
    while got < spec.rounds {
        let m = tokio::select! {
            m = r.next() => m?,
            _ = &mut end => break,
        };
        match m {
            Incoming::Message(m) if m.len() >= 16 => {
                let sent = u64::from_le_bytes(m[..8].try_into().unwrap());
                let round = u64::from_le_bytes(m[8..16].try_into().unwrap()) as usize;
                let lat_us = (wall_nanos().saturating_sub(sent) / 1000).max(1);
                sh.observe(lat_us);
                let mut c = sh.c.borrow_mut();
                c.received += 1;
                if let Some(slot) = c.rounds.get_mut(round) {
                    slot.0 += 1;
                    slot.1 = slot.1.max(lat_us);
                }
                got += 1;
            }
            Incoming::Message(_) => {}
            Incoming::Ping(p) => w.pong(&p).await?,
            Incoming::Closed(code) => {
                closed(sh, code);
                return Ok(());
            }
        }
    }
    // Closed after the result is reported (see `Shared::finished`).
    sh.finished.borrow_mut().push((r, w));
    Ok(())
}

/// A broadcast message: publisher wall-clock nanos, round, padding.
pub fn broadcast_payload(round: usize, size: usize) -> Vec<u8> {
    let mut p = wall_nanos().to_le_bytes().to_vec();
    p.extend_from_slice(&(round as u64).to_le_bytes());
    p.resize(size.max(16), b'b');
    p
}

/// Storm: every client connects, sends one message and waits for its echo; the latency of
/// each is connect-to-echo. Connections stay open until all are done (the server holds them
/// all at the peak, as in a reconnect storm), then close.
async fn storm(spec: &Rc<WorkerSpec>, sh: &Rc<Shared>, end: Instant) -> (usize, Option<String>) {
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(spec.storm_concurrency.max(1)));
    let mut handles = Vec::with_capacity(spec.conns);
    for i in 0..spec.conns {
        let permit = sem.clone().acquire_owned().await.expect("semaphore open");
        let (spec, sh) = (spec.clone(), sh.clone());
        handles.push(tokio::task::spawn_local(async move {
            let t0 = sh.now_us();
            let r = async {
                let mut c = client::connect(&spec.target, spec.source(i), spec.deflate)
                    .await
                    .map_err(|e| e.to_string())?;
                let (op, p) = payload(&spec, t0, i as u64);
                c.writer.send(op, &p).await.map_err(|e| e.to_string())?;
                sh.c.borrow_mut().sent += 1;
                loop {
                    match c.reader.next().await.map_err(|e| e.to_string())? {
                        Incoming::Message(_) => break,
                        Incoming::Ping(p) => c.writer.pong(&p).await.map_err(|e| e.to_string())?,
                        Incoming::Closed(code) => {
                            return Err(format!(
                                "closed by the server (code {code:?}) before the echo"
                            ))
                        }
                    }
                }
                record(&sh, t0);
                Ok::<_, String>(c)
            };
            let r = match tokio::time::timeout_at(end, r).await {
                Ok(r) => r,
                Err(_) => Err("no echo before the end of the run".to_string()),
            };
            drop(permit);
            r
        }));
    }
    let mut open = Vec::new();
    let mut first_error = None;
    for h in handles {
        match h.await {
            Ok(Ok(c)) => open.push(c),
            Ok(Err(e)) => {
                sh.c.borrow_mut().errors += 1;
                first_error.get_or_insert(e);
            }
            Err(_) => {}
        }
    }
    let n = open.len();
    for mut c in open {
        let _ = c.writer.close().await;
    }
    (n, first_error)
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
