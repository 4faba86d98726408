//! `wstune bench deflate`'s measurements: the sgcWebSockets guide's permessage-deflate table on this machine.
//!
//! 10,000 compress + decompress round trips of a JSON message per size, output checked equal
//! to input, in three modes: a persistent context (context takeover), no context takeover (the
//! server's `compress_fresh`: one reset context per thread, ISA-L for level-1 messages of 4 KiB
//! and more where built), and a fresh zlib-rs compressor per message (the guide's "before"). Two payload streams: the same message repeated (what the guide's figures most
//! likely measure: with context takeover a repeat is almost all back-references) and a ticker
//! feed whose values change in every message.

use anyhow::{bail, Result};
use embedded_server::deflate::{Compressor, Decompressor};
use serde::Serialize;
use std::time::Instant;

/// The codec settings and the work per row.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Round trips per size, stream and mode (broadcast: messages, at most 1000).
    pub iterations: usize,
    pub window_bits: u8,
    pub mem_level: u8,
    pub level: u8,
}

/// The sgcWebSockets guide's 16-core figures, ms per 10,000 round trips: (size KiB, persistent
/// before, after, no-context before, after).
const GUIDE: [(usize, f64, f64, f64, f64); 4] = [
    (1, 437.0, 28.0, 149.0, 75.0),
    (4, 480.0, 88.0, 173.0, 100.0),
    (16, 546.0, 431.0, 302.0, 228.0),
    (64, 1994.0, 1725.0, 1216.0, 1094.0),
];

/// One round-trip measurement (the JSON row of `bench deflate`).
#[derive(Debug, Serialize)]
pub struct Row {
    pub size_bytes: usize,
    pub stream: &'static str,
    pub mode: &'static str,
    pub iterations: usize,
    pub ms_total: f64,
    pub ms_per_10k: f64,
    pub us_per_round_trip: f64,
    /// Compressed bytes / original bytes, averaged over the run.
    pub ratio: f64,
    /// The sgcWebSockets guide's figure after its tuning, for this size and mode (16 cores).
    pub guide_after_ms_per_10k: Option<f64>,
    /// The guide's figure before its tuning.
    pub guide_before_ms_per_10k: Option<f64>,
}

/// A JSON ticker message of about `size` bytes; `i` varies the values (distinct stream).
pub fn message(size: usize, i: u64) -> Vec<u8> {
    let mut s = String::from("[");
    let mut k = 0u64;
    while s.len() < size {
        if k > 0 {
            s.push(',');
        }
        let x = (i.wrapping_mul(2654435761).wrapping_add(k * 40503)) % 100000;
        s.push_str(&format!(
            "{{\"symbol\":\"SYM{k:03}\",\"bid\":{}.{:05},\"ask\":{}.{:05},\"volume\":{},\"seq\":{},\"venue\":\"XNAS\"}}",
            x % 500,
            x,
            x % 500,
            (x + 7) % 100000,
            x * 13 % 1000003,
            i * 100 + k
        ));
        k += 1;
    }
    s.push(']');
    s.into_bytes()
}

/// "1k", "4096": a message size (1 byte .. 16 MiB).
pub fn parse_size(s: &str) -> Result<usize> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.strip_suffix('k') {
        Some(n) => (n, 1024),
        None => (t.as_str(), 1),
    };
    match num.parse::<usize>() {
        Ok(n) if n > 0 && n * mul <= 16 << 20 => Ok(n * mul),
        _ => bail!("--sizes: '{s}' is not a size like 1k or 4096 (1 byte .. 16 MiB)"),
    }
}

/// Round trips of every size, stream and mode.
pub fn round_trips(sizes: &[usize], a: &Settings) -> Vec<Row> {
    let mut rows = Vec::new();
    for &size in sizes {
        for stream in ["repeated", "distinct"] {
            // Messages are made before the clock starts; distinct ones cycle through 64.
            let msgs: Vec<Vec<u8>> = (0..if stream == "repeated" { 1 } else { 64 })
                .map(|i| message(size, i))
                .collect();
            for mode in ["persistent", "no_context_takeover", "fresh_per_message"] {
                rows.push(run(size, stream, mode, &msgs, a));
            }
        }
    }
    rows
}

fn run(
    size: usize,
    stream: &'static str,
    mode: &'static str,
    msgs: &[Vec<u8>],
    a: &Settings,
) -> Row {
    let takeover = mode == "persistent";
    let mut c = Compressor::new(a.window_bits, a.mem_level, a.level, takeover);
    let mut d = Decompressor::new(takeover);
    let (mut z, mut out) = (Vec::new(), Vec::new());
    let mut compressed = 0usize;
    let mut original = 0usize;
    let start = Instant::now();
    for i in 0..a.iterations {
        let msg = &msgs[i % msgs.len()];
        if mode == "fresh_per_message" {
            c = Compressor::new(a.window_bits, a.mem_level, a.level, false);
            d = Decompressor::new(false);
        }
        if mode == "no_context_takeover" {
            // The server's own path for such peers: the thread's shared reset context (ISA-L
            // for level-1 messages of 4 KiB and more where built, zlib-rs otherwise).
            embedded_server::deflate::compress_fresh(
                a.window_bits,
                a.mem_level,
                a.level,
                msg,
                &mut z,
            );
        } else {
            c.compress(msg, &mut z);
        }
        out.clear();
        d.decompress(&z, &mut out, usize::MAX)
            .expect("a message we compressed inflates");
        // Checked on every message: a benchmark that skipped it could measure a broken codec.
        assert!(out == *msg, "round trip changed the message");
        compressed += z.len();
        original += msg.len();
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let guide = GUIDE.iter().find(|s| s.0 * 1024 == size);
    let (before, after) = match (guide, mode) {
        (Some(s), "persistent") => (Some(s.1), Some(s.2)),
        (Some(s), "no_context_takeover") => (Some(s.3), Some(s.4)),
        (Some(s), "fresh_per_message") => (Some(s.1), None),
        _ => (None, None),
    };
    Row {
        size_bytes: size,
        stream,
        mode,
        iterations: a.iterations,
        ms_total: ms,
        ms_per_10k: ms * 10_000.0 / a.iterations as f64,
        us_per_round_trip: ms * 1000.0 / a.iterations as f64,
        ratio: compressed as f64 / original as f64,
        guide_after_ms_per_10k: after,
        guide_before_ms_per_10k: before,
    }
}

/// One broadcast measurement (the JSON row of `bench deflate --broadcast`).
#[derive(Debug, Serialize)]
pub struct BroadcastRow {
    pub size_bytes: usize,
    pub recipients: usize,
    pub mode: &'static str,
    pub messages: usize,
    /// CPU time spent compressing, per broadcast message.
    pub ms_per_broadcast: f64,
    /// Bytes on the wire per recipient, over original bytes.
    pub ratio: f64,
    /// Deflate contexts held for the recipients while the stream runs.
    pub deflate_memory_bytes: u64,
}

/// Messages a broadcast run sends: the iterations, at most 1000 (each goes to every recipient).
pub fn broadcast_messages(a: &Settings) -> usize {
    a.iterations.clamp(1, 1000)
}

/// Broadcast cost: `n` recipients get every message of the ticker stream. "once" compresses
/// each message a single time from a reset context (what `hub.registry().broadcast` does for
/// every deflate peer); "per_connection" keeps one context-takeover compressor per recipient (what
/// a server that compresses per connection pays). Both outputs are inflated by a recipient to
/// check them.
pub fn broadcast(sizes: &[usize], n: usize, a: &Settings) -> Result<Vec<BroadcastRow>> {
    if n == 0 || n > 100_000 {
        bail!("--broadcast: 1..=100000 recipients (each one holds a ~256 KiB context in per-connection mode)");
    }
    let messages = broadcast_messages(a);
    let mut rows = Vec::new();
    for &size in sizes {
        let msgs: Vec<Vec<u8>> = (0..64).map(|i| message(size, i)).collect();
        for mode in ["once", "per_connection"] {
            let mut z = Vec::new();
            let (mut wire, mut original) = (0usize, 0usize);
            let mut per_conn: Vec<Compressor> = Vec::new();
            let mut check = Decompressor::new(mode == "per_connection");
            let mut out = Vec::new();
            let mut cpu = std::time::Duration::ZERO;
            for i in 0..messages {
                let msg = &msgs[i % msgs.len()];
                let start = Instant::now();
                if mode == "once" {
                    embedded_server::deflate::compress_fresh(
                        a.window_bits,
                        a.mem_level,
                        a.level,
                        msg,
                        &mut z,
                    );
                    wire += z.len() * n;
                } else {
                    if per_conn.is_empty() {
                        per_conn = (0..n)
                            .map(|_| Compressor::new(a.window_bits, a.mem_level, a.level, true))
                            .collect();
                    }
                    for c in &mut per_conn {
                        c.compress(msg, &mut z);
                        wire += z.len();
                    }
                }
                cpu += start.elapsed();
                original += msg.len() * n;
                // The last recipient's copy (per connection: its own stream) must inflate back.
                out.clear();
                check
                    .decompress(&z, &mut out, usize::MAX)
                    .expect("a broadcast we compressed inflates");
                assert!(out == *msg, "broadcast changed the message");
            }
            let memory = match mode {
                "once" => {
                    embedded_server::memory::deflate_compressor_bytes(a.window_bits, a.mem_level)
                }
                _ => {
                    n as u64
                        * embedded_server::memory::deflate_compressor_bytes(
                            a.window_bits,
                            a.mem_level,
                        )
                }
            };
            rows.push(BroadcastRow {
                size_bytes: size,
                recipients: n,
                mode,
                messages,
                ms_per_broadcast: cpu.as_secs_f64() * 1000.0 / messages as f64,
                ratio: wire as f64 / original as f64,
                deflate_memory_bytes: memory,
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_json_of_the_asked_size() {
        for size in [1024, 4096, 65536] {
            let m = message(size, 3);
            assert!(m.len() >= size && m.len() < size + 200);
            let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
            assert!(v.as_array().unwrap().len() > 3);
            assert_ne!(message(size, 3), message(size, 4));
        }
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert!(parse_size("0").is_err() && parse_size("x").is_err());
    }

    /// The no-context mode measures what the server sends such peers: with ISA-L built in,
    /// its ratio is well below zlib-rs's (0.35 at level 1 on this feed) and every round trip
    /// still checks out.
    #[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn no_context_rows_use_the_servers_codec() {
        let s = Settings {
            iterations: 8,
            window_bits: 15,
            mem_level: 8,
            level: 1,
        };
        let rows = round_trips(&[65536], &s);
        let ratio = |mode: &str| {
            rows.iter()
                .find(|r| r.stream == "distinct" && r.mode == mode)
                .unwrap()
                .ratio
        };
        assert!(
            ratio("no_context_takeover") < 0.9 * ratio("fresh_per_message"),
            "{} vs {}",
            ratio("no_context_takeover"),
            ratio("fresh_per_message")
        );
    }
}

#[cfg(test)]
mod peer_parity {
    /// bench/deflate_peer.py must generate byte-identical messages, or the comparison is unfair.
    #[test]
    fn python_peer_generates_the_same_messages() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/deflate_peer.py");
        let code = format!("import runpy,sys\nsys.argv=['x']\nsrc=open({script:?}).read().rsplit('main()',1)[0]\nns={{}}\nexec(src,ns)\nsys.stdout.buffer.write(ns['message'](4096,5)+b'|'+ns['message'](1024,63))");
        let Ok(o) = std::process::Command::new("python3")
            .arg("-c")
            .arg(&code)
            .output()
        else {
            return;
        };
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want = [
            super::message(4096, 5),
            b"|".to_vec(),
            super::message(1024, 63),
        ]
        .concat();
        assert_eq!(o.stdout, want);
    }
}

/// One pass over every connection of [`contexts`].
#[derive(Debug, Serialize)]
pub struct ContextsPass {
    /// "first" (contexts created) or "again" (reused).
    pub pass: &'static str,
    pub us_per_conn: f64,
    /// Minor page faults per connection (Linux; None elsewhere).
    pub faults_per_conn: Option<f64>,
    /// Resident memory the pass added, per connection (Linux; None elsewhere).
    pub resident_bytes_per_conn: Option<f64>,
}

/// `bench deflate --contexts`: what `connections` connections' own contexts cost.
#[derive(Debug, Serialize)]
pub struct ContextsRow {
    pub connections: usize,
    pub size_bytes: usize,
    /// `memory::deflate_bytes_per_conn` for these settings: what the profile's estimate
    /// counts per connection.
    pub estimate_bytes_per_conn: u64,
    pub passes: Vec<ContextsPass>,
}

/// Give each of `n` connections a compressor and a decompressor (context takeover, the
/// server's way: its window for both directions) and one `size`-byte message through both,
/// twice: the first pass creates the contexts, the second reuses them cold. Every message is
/// checked to come back as sent.
pub fn contexts(n: usize, size: usize, a: &Settings) -> ContextsRow {
    let msgs: Vec<Vec<u8>> = (0..16).map(|i| message(size, i)).collect();
    // The peer's side: what each connection receives, compressed as a client would.
    let wire: Vec<Vec<u8>> = msgs
        .iter()
        .map(|m| {
            let mut z = Vec::new();
            Compressor::new(a.window_bits, a.mem_level, a.level, false).compress(m, &mut z);
            z
        })
        .collect();
    let mut comps: Vec<Option<Compressor>> = (0..n).map(|_| None).collect();
    let mut decs: Vec<Option<Decompressor>> = (0..n).map(|_| None).collect();
    let (mut plain, mut packed) = (Vec::with_capacity(size * 2), Vec::with_capacity(size * 2));
    let mut passes = Vec::new();
    for pass in ["first", "again"] {
        let (faults, resident) = (
            crate::host::process::own_minor_faults(),
            crate::host::process::own_resident_bytes(),
        );
        let start = Instant::now();
        for i in 0..n {
            plain.clear();
            decs[i]
                .get_or_insert_with(|| Decompressor::with_window(a.window_bits, true))
                .decompress(&wire[i % wire.len()], &mut plain, usize::MAX)
                .expect("a message we compressed inflates");
            comps[i]
                .get_or_insert_with(|| Compressor::new(a.window_bits, a.mem_level, a.level, true))
                .compress(&plain, &mut packed);
        }
        let secs = start.elapsed().as_secs_f64();
        assert!(
            plain == msgs[(n - 1) % msgs.len()],
            "a message changed on its way"
        );
        let per = |after: Option<u64>, before: Option<u64>| {
            Some((after?.saturating_sub(before?)) as f64 / n as f64)
        };
        passes.push(ContextsPass {
            pass,
            us_per_conn: secs * 1e6 / n as f64,
            faults_per_conn: per(crate::host::process::own_minor_faults(), faults),
            resident_bytes_per_conn: per(crate::host::process::own_resident_bytes(), resident),
        });
    }
    ContextsRow {
        connections: n,
        size_bytes: size,
        estimate_bytes_per_conn: embedded_server::memory::deflate_bytes_per_conn(
            a.window_bits,
            a.mem_level,
        ),
        passes,
    }
}
