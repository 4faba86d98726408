//! The codec's and the shared contexts' tests: round trips, bombs, final blocks, the memory
//! ledger, the ISA-L routing.

use super::codec::{OUT_CHUNK, WINDOW};
use super::*;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush};

#[test]
fn a_threads_shared_contexts_give_their_charge_back_when_the_thread_ends() {
    use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
    use std::sync::Arc;
    let gauge = Arc::new(AtomicI64::new(0));
    let g = gauge.clone();
    let during = std::thread::spawn(move || {
        let mut z = Vec::new();
        let msg = vec![b'x'; 8192];
        // Both kinds of shared context (zlib-rs below 4 KiB, ISA-L above where built).
        charge_thread(&g, compress_fresh(15, 8, 1, &msg[..100], &mut z));
        charge_thread(&g, compress_fresh(15, 8, 1, &msg, &mut z));
        // Reused: no second charge.
        charge_thread(&g, compress_fresh(15, 8, 1, &msg[..100], &mut z));
        let mut out = Vec::new();
        let (created, r) = inflate_fresh(&z, &mut out, 1 << 20, &mut |_| true);
        r.unwrap();
        charge_thread(&g, created);
        g.load(Relaxed)
    })
    .join()
    .unwrap();
    assert!(
        during > 0,
        "the contexts were charged while the thread lived"
    );
    assert_eq!(gauge.load(Relaxed), 0, "and given back when it ended");
}

#[test]
fn an_empty_message_after_another_is_an_empty_block_and_keeps_the_stream_in_step() {
    // Found by fuzz/frame_client (fuzz/regressions/frame_client): before the fix the empty
    // message compressed to no bytes at all and the next message failed as corrupt.
    for takeover in [true, false] {
        let mut c = Compressor::new(15, 8, 1, takeover);
        let mut d = Decompressor::new(takeover);
        let mut z = Vec::new();
        for m in [&b"hello"[..], b"", b"", b"world"] {
            c.compress(m, &mut z);
            assert!(!z.is_empty(), "message {m:?} compressed to nothing");
            let mut out = Vec::new();
            d.decompress(&z, &mut out, 1 << 20).unwrap();
            assert_eq!(out, m);
        }
    }
}

fn json(i: usize) -> Vec<u8> {
    format!("{{\"symbol\":\"EURUSD\",\"bid\":1.08{i:03},\"ask\":1.08{:03},\"seq\":{i},\"venue\":\"lmax\",\"ts\":\"2026-11-30T01:{:02}:00Z\"}}", i + 2, i % 60).repeat(8).into_bytes()
}

#[test]
fn round_trips_with_and_without_context_takeover() {
    for takeover in [true, false] {
        for (wb, ml) in [(15, 8), (11, 4), (9, 1)] {
            let mut c = Compressor::new(wb, ml, 1, takeover);
            let mut d = Decompressor::new(takeover);
            let (mut z, mut out) = (Vec::new(), Vec::new());
            for i in 0..50 {
                let msg = json(i);
                c.compress(&msg, &mut z);
                assert!(z.len() < msg.len());
                out.clear();
                d.decompress(&z, &mut out, 1 << 20).unwrap();
                assert_eq!(out, msg, "wb {wb} ml {ml} takeover {takeover} message {i}");
            }
        }
    }
    let big: Vec<u8> = (0..300_000u32)
        .flat_map(|i| (i % 1000).to_le_bytes())
        .collect();
    let mut c = Compressor::new(15, 8, 6, true);
    let mut d = Decompressor::new(true);
    let (mut z, mut out) = (Vec::new(), Vec::new());
    c.compress(&big, &mut z);
    d.decompress(&z, &mut out, 2 << 20).unwrap();
    assert_eq!(out, big);
}

#[test]
fn context_takeover_makes_repeats_almost_free() {
    let msg = json(7);
    let mut c = Compressor::new(15, 8, 1, true);
    let mut z = Vec::new();
    c.compress(&msg, &mut z);
    let first = z.len();
    c.compress(&msg, &mut z);
    assert!(z.len() * 4 < first, "repeat {} vs first {first}", z.len());
}

#[test]
fn bombs_stop_at_the_cap_and_garbage_is_corrupt() {
    let zeros = vec![0u8; 50 << 20];
    let mut c = Compressor::new(15, 8, 9, false);
    let mut z = Vec::new();
    c.compress(&zeros, &mut z);
    assert!(
        z.len() < 100 << 10,
        "50 MiB of zeros is a tiny bomb: {}",
        z.len()
    );
    let mut d = Decompressor::new(true);
    let mut out = Vec::new();
    assert_eq!(
        d.decompress(&z, &mut out, 1 << 20),
        Err(InflateError::TooBig)
    );
    assert!(
        out.len() <= 1 << 20,
        "stopped at the cap, did not inflate 50 MiB: {}",
        out.len()
    );
    let mut d = Decompressor::new(true);
    assert_eq!(
        d.decompress(&[0xff, 0xff, 0xff, 0x00, 0x12], &mut Vec::new(), 1 << 20),
        Err(InflateError::Corrupt)
    );
}

/// Raw DEFLATE of `input` from a fresh context primed with `dict`, ended with `flush`
/// (Finish: a final block; SyncFlush: the permessage-deflate tail removed).
fn raw(input: &[u8], dict: &[u8], flush: DeflateFlush) -> Vec<u8> {
    let mut z = Deflate::new_with_config(DeflateConfig {
        level: 6,
        window_bits: -15,
        ..DeflateConfig::default()
    });
    if !dict.is_empty() {
        z.set_dictionary(dict).unwrap();
    }
    let mut out = vec![0u8; input.len() * 2 + 1024];
    z.compress(input, &mut out, flush).unwrap();
    out.truncate(z.total_out() as usize);
    if out.ends_with(&TAIL) && flush == DeflateFlush::SyncFlush {
        out.truncate(out.len() - 4);
    }
    out
}

fn text(i: usize, n: usize) -> Vec<u8> {
    (0..n).flat_map(|j| json(i * 7 + j)).collect()
}

#[test]
fn final_blocks_keep_the_window_with_context_takeover() {
    let mut d = Decompressor::new(true);
    let (a, b, c, e) = (text(1, 4), text(2, 4), text(3, 4), text(4, 100));
    let mut prev: Vec<u8> = Vec::new();
    for (msg, flush) in [
        (&a, DeflateFlush::Finish),
        (&b, DeflateFlush::Finish),
        (&c, DeflateFlush::SyncFlush),
        (&b, DeflateFlush::Finish),
        (&e, DeflateFlush::Finish),
        (&a, DeflateFlush::SyncFlush),
    ] {
        // Each message refers to the previous one's plaintext (the peer's window).
        let z = raw(msg, &prev[prev.len().saturating_sub(WINDOW)..], flush);
        let mut out = Vec::new();
        let r = d.decompress(&z, &mut out, 1 << 20);
        assert_eq!(
            r,
            Ok(()),
            "flush {flush:?}, {} after {}",
            msg.len(),
            prev.len()
        );
        assert_eq!(&out, msg, "flush {flush:?}");
        assert!(d.extra_bytes() <= WINDOW);
        prev = msg.clone();
    }
    // A bomb after a final block is still stopped at the cap.
    let z = raw(&vec![0u8; 4 << 20], &[], DeflateFlush::Finish);
    assert_eq!(
        d.decompress(&z, &mut Vec::new(), 1 << 20),
        Err(InflateError::TooBig)
    );
    // Without context takeover, every message may end with a final block.
    let mut d = Decompressor::new(false);
    for msg in [&a, &b, &c] {
        let mut out = Vec::new();
        d.decompress(&raw(msg, &[], DeflateFlush::Finish), &mut out, 1 << 20)
            .unwrap();
        assert_eq!(&out, msg);
    }
}

#[test]
fn data_after_a_final_block_in_the_same_message_is_inflated() {
    let (x, y) = (text(5, 3), text(6, 3));
    let z = [
        raw(&x, &[], DeflateFlush::Finish),
        raw(&y, &x, DeflateFlush::SyncFlush),
    ]
    .concat();
    let mut out = Vec::new();
    Decompressor::new(true)
        .decompress(&z, &mut out, 1 << 20)
        .unwrap();
    assert_eq!(out, [x, y].concat());
    // RFC 7692 7.2.3.3: a final block padded with one 0x00 byte, then a message after it.
    let mut d = Decompressor::new(true);
    for msg in [&b"Hello"[..], b"Hello again"] {
        let mut z = raw(msg, &[], DeflateFlush::Finish);
        z.push(0x00);
        let mut out = Vec::new();
        d.decompress(&z, &mut out, 1 << 20).unwrap();
        assert_eq!(out, msg);
    }
}

#[test]
fn an_unknown_older_window_is_an_error_never_wrong_bytes() {
    // A short final-block message after earlier ones: only its own output is known when
    // the stream restarts, so a reference further back must fail, not inflate garbage.
    let (a, b) = (text(7, 2), b"short".to_vec());
    let mut d = Decompressor::new(true);
    let mut out = Vec::new();
    d.decompress(&raw(&a, &[], DeflateFlush::SyncFlush), &mut out, 1 << 20)
        .unwrap();
    out.clear();
    d.decompress(&raw(&b, &a, DeflateFlush::Finish), &mut out, 1 << 20)
        .unwrap();
    assert_eq!(out, b);
    let window = [a.clone(), b.clone()].concat();
    out.clear();
    let r = d.decompress(
        &raw(&a, &window, DeflateFlush::SyncFlush),
        &mut out,
        1 << 20,
    );
    assert!(
        r == Err(InflateError::Corrupt) || out == a,
        "{r:?}, {} bytes",
        out.len()
    );
}

/// A trade feed whose values vary in every record (C zlib level 1: ratio ~0.30), like
/// bench/deflate_libs.py's.
fn ticker(size: usize, seed: u64) -> Vec<u8> {
    let mut st = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut rnd = |n: u64| {
        st = st
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (st >> 33) % n
    };
    let mut s = String::from("[");
    while s.len() < size {
        s.push_str(&format!(
            "{{\"s\":\"S{}\",\"p\":\"{}.{:02}\",\"q\":{},\"b\":{},\"T\":{}}},",
            rnd(16),
            100 + rnd(900),
            rnd(100),
            rnd(50000),
            rnd(1_000_000_000),
            1764547200000000 + rnd(1_000_000)
        ));
    }
    s.truncate(size);
    s.into_bytes()
}

#[test]
fn fresh_messages_inflate_everywhere_and_level_1_uses_isal_where_built() {
    // Every window, sizes on both sides of igzip's threshold, read by a fresh inflater
    // and by a context-takeover one that already holds a window (a broadcast reaching a
    // takeover peer between its own messages).
    let mut ratio = (0, 0);
    for bits in 9..=15u8 {
        let mut keep = Decompressor::with_window(bits, true);
        for (i, size) in [100usize, 4095, 4096, 20_000, 65_536, 300_000]
            .into_iter()
            .enumerate()
        {
            let msg = ticker(size, i as u64 + bits as u64);
            let mut z = Vec::new();
            compress_fresh(bits, 8, 1, &msg, &mut z);
            assert!(!z.ends_with(&TAIL), "the sync-flush tail is removed");
            for d in [&mut Decompressor::new(false), &mut keep] {
                let mut out = Vec::new();
                d.decompress(&z, &mut out, 1 << 20).unwrap();
                assert!(out == msg, "window {bits}, {size} bytes");
            }
            if size == 65_536 && bits == 15 {
                ratio = (ratio.0 + z.len(), ratio.1 + size);
            }
        }
    }
    let r = ratio.0 as f64 / ratio.1 as f64;
    // zlib-rs's level 1 (its quick strategy) gives 0.45 on this feed, igzip 0.32.
    if ISAL {
        assert!(r < 0.38, "ratio {r:.3}: igzip was not used");
    } else {
        assert!(r < 0.5, "ratio {r:.3}");
    }
}

#[test]
fn scratch_grows_with_what_is_written_and_the_budget_can_refuse() {
    // 15 MiB that compresses to a few KB: the output buffer stays near its size.
    let big = vec![b'a'; 15 << 20];
    let mut c = Compressor::new(15, 8, 1, true);
    let mut z = Vec::new();
    c.compress(&big, &mut z);
    assert!(
        z.capacity() <= 2 * z.len() + OUT_CHUNK,
        "{} for {}",
        z.capacity(),
        z.len()
    );
    // Inflating it asks for every byte of capacity, and a refusal stops it.
    let mut d = Decompressor::new(true);
    let (mut out, mut asked) = (Vec::new(), 0);
    d.decompress_within(&z, &mut out, 16 << 20, &mut |n| {
        asked += n;
        true
    })
    .unwrap();
    assert_eq!(out, big);
    assert_eq!(asked, out.capacity());
    let mut d = Decompressor::new(true);
    let mut budget = 1usize << 20;
    let r = d.decompress_within(&z, &mut Vec::new(), 16 << 20, &mut |n| {
        budget.checked_sub(n).map(|b| budget = b).is_some()
    });
    assert_eq!(r, Err(InflateError::OverBudget));
}

#[test]
fn only_large_messages_are_sampled_and_noise_is_not_worth_compressing() {
    let mut x = 7u64;
    let noise: Vec<u8> = (0..(SAMPLE_FROM * 2))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    assert!(
        worth_compressing(&noise[..SAMPLE_FROM - 1], 15, 8, 1),
        "below: not judged"
    );
    assert!(!worth_compressing(&noise, 15, 8, 1));
    assert!(!worth_compressing(&noise, 11, 4, 1));
    let text = b"{\"symbol\":\"EURUSD\",\"bid\":1.0842}\n".repeat(SAMPLE_FROM / 16);
    assert!(worth_compressing(&text, 11, 4, 1));
    // Repeats beyond the window are noise to it: a 3,000-byte block repeated.
    let block = &noise[..3000];
    let far: Vec<u8> = block
        .iter()
        .copied()
        .cycle()
        .take(SAMPLE_FROM * 2)
        .collect();
    assert!(!worth_compressing(&far, 11, 4, 1));
    assert!(worth_compressing(&far, 15, 8, 1));
}
