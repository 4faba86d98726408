//! restart: each connection is held, and whenever the server ends it (a close frame, a reset,
//! an end of stream) it comes back with full-jitter exponential backoff, attempt after
//! attempt, until the window ends. Each close-to-upgrade time goes into the latency
//! histogram; failed attempts are counted by kind (see `selftest::restart`).

use super::{closed, Shared};
use crate::selftest::client::{self, Incoming};
use crate::selftest::restart::{full_jitter, refusal_kind, ATTEMPT_TIMEOUT, BUCKET_MS};
use crate::selftest::WorkerSpec;
use tokio::time::Instant;

/// A small xorshift generator per connection: the jitter needs spread, not secrecy.
struct Jitter(u64);

impl Jitter {
    fn new(seed: u64) -> Jitter {
        // splitmix64 of the seed, never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Jitter((z ^ (z >> 31)) | 1)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Hold connection `i` until `end`, reconnecting whenever the server ends it.
pub(super) async fn reconnecting(
    mut c: client::Conn,
    i: usize,
    spec: &WorkerSpec,
    sh: &Shared,
    end: Instant,
) -> std::io::Result<()> {
    let mut jitter = Jitter::new(
        (spec.conn_number(i) as u64) << 20 ^ u64::from(std::process::id()) ^ super::wall_nanos(),
    );
    loop {
        // Held until the server ends it, or the window does.
        let frame = loop {
            let m = tokio::select! {
                m = c.reader.next() => m,
                _ = tokio::time::sleep_until(end) => {
                    sh.finished.borrow_mut().push((c.reader, c.writer));
                    return Ok(());
                }
            };
            match m {
                Ok(Incoming::Ping(p)) => {
                    if c.writer.pong(&p).await.is_err() {
                        break false;
                    }
                }
                Ok(Incoming::Message(_)) => {}
                Ok(Incoming::Closed(code)) => {
                    closed(sh, code);
                    break code.is_some();
                }
                Err(_) => {
                    closed(sh, None);
                    break false;
                }
            }
        };
        let down_at = sh.now_us();
        {
            let mut r = sh.restart.borrow_mut();
            r.closed += 1;
            r.without_close_frame += u64::from(!frame);
        }
        drop(c);
        let mut attempt = 0u32;
        c = loop {
            let wait = full_jitter(attempt, jitter.unit());
            attempt = attempt.saturating_add(1);
            if Instant::now() + wait >= end {
                sh.restart.borrow_mut().not_back += 1;
                return Ok(());
            }
            tokio::time::sleep(wait).await;
            sh.restart.borrow_mut().attempts += 1;
            let session = sh.client.as_ref().map(|c| c.session());
            let tried = tokio::time::timeout(
                ATTEMPT_TIMEOUT.min(end.saturating_duration_since(Instant::now())),
                client::connect(&spec.target, spec.source(i), spec.deflate, session.as_ref()),
            )
            .await;
            let kind = match tried {
                Ok(Ok(c)) => break c,
                Ok(Err(e)) => refusal_kind(&e),
                Err(_) => "timeout".to_string(),
            };
            *sh.restart.borrow_mut().refused.entry(kind).or_default() += 1;
        };
        sh.opened(&c);
        sh.observe(sh.now_us().saturating_sub(down_at));
        let now_ms = super::wall_nanos() / 1_000_000;
        let mut r = sh.restart.borrow_mut();
        r.back += 1;
        r.last_back_unix_ms = Some(now_ms);
        let bucket = now_ms / BUCKET_MS;
        match r.upgrades.last_mut() {
            Some((b, n)) if *b == bucket => *n += 1,
            // Buckets arrive in time order on this single-threaded process, mostly; an older
            // one (a task woken late) is added where it belongs.
            _ => match r.upgrades.iter_mut().find(|(b, _)| *b == bucket) {
                Some((_, n)) => *n += 1,
                None => r.upgrades.push((bucket, 1)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_draws_spread_over_the_unit_interval() {
        let mut j = Jitter::new(7);
        let draws: Vec<f64> = (0..10_000).map(|_| j.unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let low = draws.iter().filter(|d| **d < 0.5).count();
        assert!((4_500..5_500).contains(&low), "{low} of 10000 below 0.5");
        // Two connections do not draw the same sequence.
        assert_ne!(Jitter::new(1).unit(), Jitter::new(2).unit());
    }
}
