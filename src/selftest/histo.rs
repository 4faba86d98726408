//! Latency histograms on the wire: HdrHistogram's V2 encoding in base64, between a generator
//! process and its orchestrator (plain V2: small, and read right away) and in a report's JSON
//! (V2 + DEFLATE: kept in files, merged later by `report merge`).
//!
//! Every histogram comes from one constructor (`histogram()`: 1 us .. 10 min, 3
//! significant figures), so two of them have the same buckets and adding them is exact: the
//! merged percentiles are those of all the samples together, which averaging percentiles
//! never is.

use super::Latency;
use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer, V2Serializer};
use hdrhistogram::Histogram;

/// The longest latency the histograms hold: 10 minutes, in microseconds.
pub(crate) const MAX_LATENCY_US: u64 = 600_000_000;

/// Latencies are recorded in microseconds, 1 us .. 10 min, 3 significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// A histogram's percentiles, in milliseconds, as the reports show them.
pub fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let curve = [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 100.0]
        .iter()
        .map(|&p| (p, ms(h.value_at_quantile(p / 100.0))))
        .collect();
    Latency {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        mean: h.mean() / 1000.0,
        curve,
    }
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// V2, base64 (a worker's result).
pub fn encode(h: &Histogram<u64>) -> String {
    let mut b = Vec::new();
    // Serializing into a Vec cannot fail for a histogram within its own bounds.
    let _ = V2Serializer::new().serialize(h, &mut b);
    B64.encode(&b)
}

/// V2 + DEFLATE, base64 (a report's `histograms`).
pub fn encode_packed(h: &Histogram<u64>) -> String {
    let mut b = Vec::new();
    let _ = V2DeflateSerializer::new().serialize(h, &mut b);
    B64.encode(&b)
}

/// Either encoding back (the reader tells them apart by their cookie).
pub fn decode(s: &str) -> Result<Histogram<u64>, String> {
    let bytes = B64.decode(s).map_err(|e| format!("not base64 ({e})"))?;
    Deserializer::new()
        .deserialize::<u64, _>(&mut &bytes[..])
        .map_err(|e| format!("not an HdrHistogram ({e:?})"))
}

/// `from`'s counts added into `into`, exactly: refused (never approximated) when the buckets
/// differ, which only a histogram made by another program can cause.
pub fn add(into: &mut Histogram<u64>, from: &Histogram<u64>) -> Result<(), String> {
    if from.low() != into.low() || from.high() != into.high() || from.sigfig() != into.sigfig() {
        return Err(format!(
            "its buckets differ (1..{} us at {} figures, not 1..{} us at {})",
            from.high(),
            from.sigfig(),
            into.high(),
            into.sigfig()
        ));
    }
    into.add(from)
        .map_err(|e| format!("cannot be added ({e:?})"))
}

#[cfg(test)]
mod tests {
    use super::histogram;
    use super::*;

    /// A million latencies survive both encodings bit for bit.
    #[test]
    fn both_encodings_round_trip_exactly() {
        let mut h = histogram();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            h.record(1 + x % 250_000).unwrap();
        }
        assert_eq!(decode(&encode(&h)).unwrap(), h);
        let packed = encode_packed(&h);
        assert_eq!(decode(&packed).unwrap(), h);
        assert!(packed.len() < encode(&h).len(), "deflate makes it smaller");
    }

    /// Shards' histograms added give the percentiles of all the samples in one histogram.
    #[test]
    fn added_histograms_equal_one_histogram_of_every_sample() {
        let mut all = histogram();
        let mut shards = vec![histogram(), histogram(), histogram()];
        for i in 0..90_000u64 {
            // Each shard sees a different latency distribution.
            let shard = (i % 3) as usize;
            let v = 50 + (i * 7919) % (1_000 * (shard as u64 + 1) * (shard as u64 + 1));
            all.record(v).unwrap();
            shards[shard].record(v).unwrap();
        }
        let mut merged = histogram();
        for s in &shards {
            add(&mut merged, &decode(&encode_packed(s)).unwrap()).unwrap();
        }
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                merged.value_at_quantile(q),
                all.value_at_quantile(q),
                "q {q}"
            );
        }
        assert_eq!((merged.len(), merged.max()), (all.len(), all.max()));
        // Averaging the shards' p99s, what merging summaries would do, is not the p99.
        let avg = shards
            .iter()
            .map(|s| s.value_at_quantile(0.99))
            .sum::<u64>()
            / 3;
        assert_ne!(avg, all.value_at_quantile(0.99));
    }

    #[test]
    fn foreign_or_broken_histograms_are_refused_not_guessed() {
        assert!(decode("@@@").unwrap_err().contains("not base64"));
        assert!(decode("AAAA").unwrap_err().contains("not an HdrHistogram"));
        let other = Histogram::<u64>::new_with_bounds(1, 1_000, 2).unwrap();
        assert!(add(&mut histogram(), &other)
            .unwrap_err()
            .contains("buckets differ"));
    }
}
