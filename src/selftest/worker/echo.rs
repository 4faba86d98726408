//! The echo scenarios' connections: the open-loop schedule (`pace`, `echo_rate`, also
//! deflate's) and the closed loop (`echo_sat`), with the payloads that carry their stamps.

use super::{closed, latency_origin_us, record, Shared};
use crate::selftest::client::{Incoming, Reader, Writer};
use crate::selftest::WorkerSpec;
use embedded_server::frame::OpCode;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

/// The payload of an echo message: the scheduled send time (us since this worker's epoch)
/// first, so the echo says when it was due. Binary, or JSON text for the deflate scenario.
pub(super) fn payload(spec: &WorkerSpec, due_us: u64, seq: u64) -> (OpCode, Vec<u8>) {
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

/// One connection's place in the schedule: the due times the pacer has handed it and not yet
/// sent, and the wake-up for its task.
#[derive(Default)]
pub(super) struct Slot {
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
pub(super) async fn pace(
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
pub(super) async fn echo_rate(
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
pub(super) async fn echo_sat(
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
