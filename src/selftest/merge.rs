//! The generator processes' results added up: histograms, counters, close codes, the
//! broadcast rounds.

use super::histo::{self, histogram, latency};
use super::{TlsReport, WorkerResult};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// The workers' results added up.
pub(super) struct Merged {
    pub(super) hist: Histogram<u64>,
    pub(super) service: Histogram<u64>,
    pub(super) sent: u64,
    pub(super) received: u64,
    pub(super) errors: u64,
    pub(super) disconnects: u64,
    pub(super) lost: u64,
    pub(super) close_codes: BTreeMap<u16, u64>,
    pub(super) gen_cpu: f64,
    pub(super) gen_rss: Option<u64>,
    pub(super) elapsed: f64,
    pub(super) last_echo: f64,
    /// Broadcast: per round, (deliveries, latest delivery in us).
    pub(super) rounds: Vec<(u64, u64)>,
    pub(super) first_error: Option<String>,
    /// A worker's histogram that could not be read or added: the latencies are short of its
    /// samples, so the run is incomplete rather than quietly missing them.
    pub(super) unreadable: Option<String>,
    /// Connection opening times: TCP, TLS and the upgrade (empty: none was opened and timed).
    pub(super) connect: Histogram<u64>,
    /// wss://: the TLS handshakes' own times.
    pub(super) tls_handshake: Histogram<u64>,
    /// wss://: the handshakes, counted (`handshake_ms` filled from `tls_handshake`).
    pub(super) tls: Option<TlsReport>,
    /// A script's waiting steps, by `POPULATION.STEP`: latencies, matched, timed out, other.
    pub(super) steps: BTreeMap<String, (Histogram<u64>, u64, u64, u64)>,
}

pub(super) fn merge(
    results: &[&WorkerResult],
    n_rounds: usize,
    mut first_error: Option<String>,
) -> Merged {
    let mut hist = histogram();
    let mut service = histogram();
    let (mut sent, mut received, mut errors, mut disconnects, mut lost) = (0, 0, 0, 0, 0);
    let mut close_codes = BTreeMap::new();
    let mut gen_cpu = 0.0;
    let mut gen_rss: Option<u64> = None;
    let mut elapsed: f64 = 0.0;
    let mut last_echo: f64 = 0.0;
    let mut rounds = vec![(0u64, 0u64); n_rounds];
    let mut unreadable = None;
    let mut connect = histogram();
    let mut tls_hs = histogram();
    let mut tls: Option<TlsReport> = None;
    let mut steps: BTreeMap<String, (Histogram<u64>, u64, u64, u64)> = BTreeMap::new();
    for (i, r) in results.iter().enumerate() {
        for s in &r.steps {
            let e = steps
                .entry(s.name.clone())
                .or_insert_with(|| (histogram(), 0, 0, 0));
            if let Err(err) = histo::decode(&s.histogram).and_then(|h| histo::add(&mut e.0, &h)) {
                unreadable.get_or_insert(format!(
                    "generator process {i}'s histogram of step {} could not be read: {err}",
                    s.name
                ));
            }
            e.1 += s.matched;
            e.2 += s.timeouts;
            e.3 += s.other;
        }
        if let Some(t) = &r.tls {
            let sum = tls.get_or_insert_with(TlsReport::default);
            sum.version.clone_from(&t.version);
            sum.cipher.clone_from(&t.cipher);
            if t.signature_scheme.is_some() {
                sum.signature_scheme.clone_from(&t.signature_scheme);
            }
            sum.full += t.full;
            sum.resumed += t.resumed;
        }
        sent += r.sent;
        received += r.received;
        errors += r.errors;
        disconnects += r.disconnects;
        lost += r.lost;
        for (k, v) in &r.close_codes {
            *close_codes.entry(*k).or_insert(0) += v;
        }
        gen_cpu += r.cpu_secs;
        if let Some(b) = r.peak_rss_bytes {
            gen_rss = Some(gen_rss.unwrap_or(0) + b);
        }
        elapsed = elapsed.max(r.elapsed_secs);
        last_echo = last_echo.max(r.last_echo_secs);
        if first_error.is_none() {
            first_error = r.first_error.clone();
        }
        let each = [
            (&mut hist, Some(&r.histogram)),
            (&mut service, r.service_histogram.as_ref()),
            (&mut connect, r.connect_histogram.as_ref()),
            (&mut tls_hs, r.tls_histogram.as_ref()),
        ];
        for (into, encoded) in each {
            let Some(encoded) = encoded else { continue };
            if let Err(e) = histo::decode(encoded).and_then(|h| histo::add(into, &h)) {
                unreadable.get_or_insert(format!(
                    "generator process {i}'s latency histogram could not be read: {e}"
                ));
            }
        }
        for (i, (n, last)) in r.rounds.iter().enumerate() {
            if let Some(slot) = rounds.get_mut(i) {
                slot.0 += n;
                slot.1 = slot.1.max(*last);
            }
        }
    }
    Merged {
        hist,
        service,
        sent,
        received,
        errors,
        disconnects,
        lost,
        close_codes,
        gen_cpu,
        gen_rss,
        elapsed,
        last_echo,
        rounds,
        first_error,
        unreadable,
        tls: tls.map(|t| TlsReport {
            handshake_ms: latency(&tls_hs),
            ..t
        }),
        connect,
        tls_handshake: tls_hs,
        steps,
    }
}
