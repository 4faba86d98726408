//! The connection scenarios: idle holds, broadcast subscribers, the reconnect storm and the
//! handshake loop.

use super::echo::payload;
use super::{closed, record, wall_nanos, Shared};
use crate::selftest::client::{self, Incoming, Reader, Writer};
use crate::selftest::WorkerSpec;
use std::rc::Rc;
use tokio::time::Instant;

/// Idle: hold the connection, answering pings, until the end.
pub(super) async fn hold(
    mut r: Reader,
    mut w: Writer,
    sh: &Shared,
    end: Instant,
) -> std::io::Result<()> {
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
pub(super) async fn subscribe(
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
pub(super) async fn storm(
    spec: &Rc<WorkerSpec>,
    sh: &Rc<Shared>,
    end: Instant,
) -> (usize, Option<String>) {
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(spec.storm_concurrency.max(1)));
    let mut handles = Vec::with_capacity(spec.conns);
    for i in 0..spec.conns {
        let permit = sem.clone().acquire_owned().await.expect("semaphore open");
        let (spec, sh) = (spec.clone(), sh.clone());
        handles.push(tokio::task::spawn_local(async move {
            let t0 = sh.now_us();
            let r = async {
                let session = sh.client.as_ref().map(|c| c.session());
                let mut c =
                    client::connect(&spec.target, spec.source(i), spec.deflate, session.as_ref())
                        .await
                        .map_err(|e| e.to_string())?;
                sh.opened(&c);
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

/// tls-handshake: `storm_concurrency` simulated clients, each in a closed loop until `end`:
/// connect (TCP, TLS, upgrade), close cleanly, again. Each client keeps its own session
/// between its connections (resumed with `--tls-resume`). A cycle that ends after the
/// warm-up counts: one `received`, its whole time in the latency histogram, its opening in
/// the connect and TLS histograms. Returns the first error.
pub(super) async fn handshakes(
    spec: &Rc<WorkerSpec>,
    sh: &Rc<Shared>,
    end: Instant,
) -> Option<String> {
    let n = spec.storm_concurrency.max(1);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (spec, sh) = (spec.clone(), sh.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let session = sh.client.as_ref().map(|c| c.session());
            let mut first_error = None;
            let mut k = 0;
            while Instant::now() < end {
                let t0 = sh.now_us();
                let counted = t0 >= sh.measure_from_us.get();
                let source = spec.source(i + k * n);
                k += 1;
                let cycle = async {
                    let mut c = client::connect(&spec.target, source, false, session.as_ref())
                        .await
                        .map_err(|e| e.to_string())?;
                    sh.opened(&c);
                    c.writer.close().await.map_err(|e| e.to_string())?;
                    // The server's answer ends the close handshake; then close_notify and FIN.
                    loop {
                        match c.reader.next().await.map_err(|e| e.to_string())? {
                            Incoming::Closed(_) => break,
                            Incoming::Ping(_) | Incoming::Message(_) => {}
                        }
                    }
                    c.writer.shutdown().await;
                    Ok::<_, String>(())
                };
                let r = match tokio::time::timeout(std::time::Duration::from_secs(20), cycle).await
                {
                    Ok(r) => r,
                    Err(_) => Err("a connect and close took over 20 s".to_string()),
                };
                if !counted {
                    continue;
                }
                let mut c = sh.c.borrow_mut();
                c.sent += 1;
                match r {
                    Ok(()) => {
                        c.received += 1;
                        drop(c);
                        sh.observe(sh.now_us().saturating_sub(t0));
                    }
                    Err(e) => {
                        c.errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            first_error
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
