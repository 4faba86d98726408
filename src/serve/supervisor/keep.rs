//! Each slot's keeper: keep its server process running (start it, wait for it to exit,
//! restart it with backoff: 100 ms doubling to 5 s, reset after `STABLE` alive), and hand it
//! to a rolling restart when one asks (`roll::replace`).

use super::process::spawn;
use super::roll::{self, Replace};
use super::state::{say, State};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Backoff before restart `attempt` (0-based): 100 ms doubling to 5 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5000))
}

/// A process that lived this long before dying starts its backoff from the beginning.
const STABLE: Duration = Duration::from_secs(30);

/// Keep process `i` running: start it, wait for it to exit, restart it with backoff; replace
/// it when a rolling restart asks (`replace`).
pub(super) async fn keep(
    st: Arc<State>,
    i: usize,
    mut replace: tokio::sync::mpsc::Receiver<Replace>,
) {
    let mut attempt = 0;
    let mut first = true;
    loop {
        if st.stopping.load(Relaxed) {
            return;
        }
        let binary = st.slots.lock().unwrap()[i].binary.clone();
        let mut cur = match spawn(&st, i, &binary, None, first) {
            Ok(c) => c,
            Err(e) => {
                let why = format!("cannot start server process {i}: {e:#}");
                if !st.started.load(Relaxed) {
                    *st.start_failure.lock().unwrap() = Some(why);
                    st.bump();
                    return;
                }
                say!("wstune serve: {why}");
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
        };
        first = false;
        let status = loop {
            tokio::select! {
                s = cur.child.wait() => break s,
                Some(req) = replace.recv() => {
                    if let Some(s) = roll::replace(&st, i, &mut cur, req).await {
                        break s;
                    }
                }
            }
        };
        let (pid, born, lines) = (cur.pid, cur.born, cur.lines.take());
        // Out of the slot and into the retired counts at once, for any scrape.
        let mut tally = st.tally.lock().await;
        // Reaped: its pid may be reused from now on, so nothing may signal it any more.
        let was_up = {
            let mut slots = st.slots.lock().unwrap();
            let s = &mut slots[i];
            s.pid = None;
            std::mem::replace(&mut s.up, false)
        };
        tally.retire(pid, &cur.final_metrics);
        drop(tally);
        // The stderr reader ends at EOF, right after the exit; what it buffered says why a
        // process died before it listened.
        let head = match lines {
            Some(h) => tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        st.hubs.detach(pid);
        let how = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("lost ({e})"),
        };
        {
            let mut slots = st.slots.lock().unwrap();
            let s = &mut slots[i];
            s.admin = None;
            s.last_exit = Some(how.clone());
        }
        st.bump();
        if st.stopping.load(Relaxed) {
            return;
        }
        if !st.started.load(Relaxed) {
            let mut why =
                format!("server process {i} (pid {pid}) stopped before it listened: {how}");
            for l in head.iter().rev().take(20).rev() {
                why.push_str("\n  ");
                why.push_str(l);
            }
            *st.start_failure.lock().unwrap() = Some(why);
            st.bump();
            return;
        }
        if born.elapsed() >= STABLE {
            attempt = 0;
        }
        let delay = backoff(attempt);
        attempt += 1;
        let restarts = {
            let mut slots = st.slots.lock().unwrap();
            slots[i].restarts += 1;
            slots[i].restarts
        };
        say!(
            "wstune serve: process {i} (pid {pid}) exited ({how}) after {:.1} s; its clients are \
             disconnected, the port stays open; restarting in {} ms (restart {restarts})",
            born.elapsed().as_secs_f64(),
            delay.as_millis()
        );
        if !was_up {
            // It died before it listened again: without its last words a restart loop says
            // nothing about why.
            for l in head.iter().rev().take(20).rev() {
                say!("  [process {i}] {l}");
            }
        }
        let mut rx = st.changed.subscribe();
        let _ = tokio::time::timeout(delay, async {
            while !st.stopping.load(Relaxed) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_backoff_doubles_from_100_ms_to_5_s() {
        let ms: Vec<u128> = (0..8).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(backoff(u32::MAX), Duration::from_secs(5));
    }
}
