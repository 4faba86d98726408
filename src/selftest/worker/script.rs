//! A scripted session (`selftest --script`): one connection runs its population's steps,
//! answering pings throughout. A waiting step's latency runs from the last message this
//! connection sent to the first message that matches (a message that does not match is
//! counted as `other` and skipped: on fan-out traffic an expectation is "the first match",
//! not "the next message"). Closed loop: a stalled server slows the session down, and the
//! latency shows the stall, not the queue a schedule would have built.

use super::{closed, hold, Shared};
use crate::selftest::client::{Incoming, Reader, Writer};
use crate::selftest::script::{fill, Step};
use crate::selftest::WorkerSpec;
use embedded_server::frame::OpCode;
use std::time::Duration;
use tokio::time::Instant;

/// One step's figures in this process.
#[derive(Debug)]
pub(super) struct StepStats {
    pub(super) hist: hdrhistogram::Histogram<u64>,
    pub(super) matched: u64,
    pub(super) timeouts: u64,
    pub(super) other: u64,
}

impl Default for StepStats {
    fn default() -> Self {
        StepStats {
            hist: crate::selftest::histo::histogram(),
            matched: 0,
            timeouts: 0,
            other: 0,
        }
    }
}

fn stats<'a>(sh: &'a Shared, pop: &str, step: &str) -> std::cell::RefMut<'a, StepStats> {
    std::cell::RefMut::map(sh.steps.borrow_mut(), |m| {
        m.entry(format!("{pop}.{step}")).or_default()
    })
}

pub(super) async fn session(
    mut r: Reader,
    mut w: Writer,
    spec: &WorkerSpec,
    sh: &Shared,
    pop: usize,
    conn: usize,
    end: Instant,
) -> std::io::Result<()> {
    let script = spec
        .script
        .as_ref()
        .expect("a script scenario has its script");
    let p = &script.populations[pop];
    let mut last_send = sh.now_us();
    let mut seq = 0u64;
    'run: loop {
        for step in &p.steps {
            if Instant::now() >= end {
                break 'run;
            }
            match step {
                Step::Send { text } => {
                    w.send(OpCode::Text, fill(text, conn, seq).as_bytes())
                        .await?;
                    last_send = sh.now_us();
                    sh.c.borrow_mut().sent += 1;
                }
                Step::Expect {
                    name,
                    matcher,
                    timeout_ms,
                } => {
                    let due = Instant::now() + Duration::from_millis(*timeout_ms);
                    // The run (or this connection's stage) ending cuts a wait short: that is
                    // not the server's miss, so it is not counted as a timeout.
                    let deadline = due.min(end);
                    let wait = tokio::time::sleep_until(deadline);
                    tokio::pin!(wait);
                    loop {
                        tokio::select! {
                            m = r.next() => match m? {
                                Incoming::Message(m) if matcher.matches(&m) => {
                                    let lat = sh.now_us().saturating_sub(last_send);
                                    sh.observe(lat);
                                    let mut s = stats(sh, &p.name, name);
                                    let _ = s.hist.record(lat.max(1));
                                    s.matched += 1;
                                    sh.c.borrow_mut().received += 1;
                                    break;
                                }
                                Incoming::Message(_) => stats(sh, &p.name, name).other += 1,
                                Incoming::Ping(b) => w.pong(&b).await?,
                                Incoming::Closed(code) => {
                                    closed(sh, code);
                                    return Ok(());
                                }
                            },
                            _ = &mut wait => {
                                if deadline == due {
                                    stats(sh, &p.name, name).timeouts += 1;
                                }
                                break;
                            }
                        }
                    }
                }
                Step::Think { ms } | Step::Idle { ms } => {
                    let until = (Instant::now() + Duration::from_millis(*ms)).min(end);
                    let wait = tokio::time::sleep_until(until);
                    tokio::pin!(wait);
                    loop {
                        tokio::select! {
                            m = r.next() => match m? {
                                Incoming::Ping(b) => w.pong(&b).await?,
                                Incoming::Message(_) => {}
                                Incoming::Closed(code) => {
                                    closed(sh, code);
                                    return Ok(());
                                }
                            },
                            _ = &mut wait => break,
                        }
                    }
                }
            }
        }
        seq += 1;
        if !p.repeat {
            // Once through: the connection stays open, answering pings, until the end.
            return hold(r, w, sh, end).await;
        }
    }
    let _ = w.close().await;
    Ok(())
}

/// With `stages:`: every connection of this process opens at its scheduled moment (timed as
/// any connection's opening), runs its population's steps and closes when the count falls
/// below its place, or at the end. Returns the first connect error.
pub(super) async fn staged(
    spec: &std::rc::Rc<WorkerSpec>,
    sh: &std::rc::Rc<Shared>,
    start: Instant,
    end: Instant,
) -> Option<String> {
    let script = spec
        .script
        .as_ref()
        .expect("a script scenario has its script");
    let mut tasks = Vec::new();
    for (conn, open_s, close_s) in script.schedule() {
        let (spec, sh) = (spec.clone(), sh.clone());
        let pop = script.population_of(conn).unwrap_or(0);
        tasks.push(tokio::task::spawn_local(async move {
            let open = start + Duration::from_secs_f64(open_s);
            let close = (start + Duration::from_secs_f64(close_s)).min(end);
            if open >= close {
                return None;
            }
            tokio::time::sleep_until(open).await;
            let tls = sh.client.as_ref().map(|c| c.session());
            let target = spec.target_of(conn);
            let c = match tokio::time::timeout(
                Duration::from_secs(20),
                crate::selftest::client::connect(
                    &target,
                    spec.source(conn),
                    spec.deflate,
                    tls.as_ref(),
                ),
            )
            .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    sh.c.borrow_mut().errors += 1;
                    return Some(e.to_string());
                }
                Err(_) => {
                    sh.c.borrow_mut().errors += 1;
                    return Some("the handshake took over 20 s".to_string());
                }
            };
            sh.opened(&c);
            let conn_no = spec.conn_number(conn);
            if session(c.reader, c.writer, &spec, &sh, pop, conn_no, close)
                .await
                .is_err()
            {
                sh.c.borrow_mut().errors += 1;
            }
            None
        }));
    }
    let mut first = None;
    for t in tasks {
        if let Ok(Some(e)) = t.await {
            first.get_or_insert(e);
        }
    }
    first
}
