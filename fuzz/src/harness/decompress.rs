//! Inflate on hostile input: zlib-rs under the message cap and the server-wide budget, and
//! igzip (ISA-L) against zlib-rs: the same result, the same bytes, the same growth requests.

use arbitrary::{Arbitrary, Unstructured};
use embedded_server::deflate::{self, Compressor, Decompressor, InflateError};

#[derive(Arbitrary, Debug)]
enum Msg {
    /// Compressed by the server's own compressor: must inflate back exactly.
    Plain(Vec<u8>),
    /// A repeated byte run (a bomb's shape), compressed.
    Run(u8, u32),
    /// Raw bytes: not deflate data, or a hostile stream.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct InflateInput {
    takeover: bool,
    window_bits: u8,
    level: u8,
    cap: u32,
    budget: Option<u32>,
    msgs: Vec<Msg>,
}

/// Inflate under the message cap and the server-wide budget: compressed messages come back
/// exactly, bombs stop at the cap (`TooBig`) without allocating far beyond it, raw bytes are
/// `Corrupt` or decode to something within the cap, and the charged bytes cover the growth.
pub fn inflate(data: &[u8]) {
    let Ok(input) = InflateInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cap = (input.cap as usize % (256 << 10)).max(1);
    let wb = 9 + input.window_bits % 7;
    let mut comp = Compressor::new(wb, 8, input.level % 10, input.takeover);
    let mut decomp = Decompressor::new(input.takeover);
    let mut z = Vec::new();
    // Raw bytes that inflate without an error still become part of a context-takeover
    // window: after them the server's own messages cannot be expected to come back equal.
    let mut in_step = true;
    for m in input.msgs.iter().take(8) {
        let (plain, wire) = match m {
            Msg::Plain(p) => {
                comp.compress(p, &mut z);
                (Some(p.clone()), z.clone())
            }
            Msg::Run(b, n) => {
                let p = vec![*b; (*n as usize) % (512 << 10)];
                comp.compress(&p, &mut z);
                (Some(p), z.clone())
            }
            Msg::Raw(r) => (None, r.clone()),
        };
        let mut charged = 0usize;
        let budget = input.budget.map(|b| b as usize);
        let mut charge = |n: usize| {
            if budget.is_some_and(|b| charged + n > b) {
                return false;
            }
            charged += n;
            true
        };
        let mut out = Vec::new();
        let r = decomp.decompress_within(&wire, &mut out, cap, &mut charge);
        // Every byte of the buffer was charged to the budget, and a bomb never got more than
        // the cap plus the one byte that shows it is over.
        assert!(
            out.capacity() <= charged,
            "capacity {} charged {charged}",
            out.capacity()
        );
        assert!(
            out.capacity() <= cap + 1,
            "capacity {} for a cap of {cap}",
            out.capacity()
        );
        match r {
            Ok(()) => {
                assert!(out.len() <= cap);
                match &plain {
                    Some(p) if in_step => {
                        assert_eq!(&out, p, "a compressed message inflated to something else")
                    }
                    Some(_) => {}
                    None => in_step = !input.takeover,
                }
            }
            Err(InflateError::TooBig) => {
                if let Some(p) = plain.as_ref().filter(|_| in_step) {
                    assert!(
                        p.len() > cap,
                        "{} bytes called too big for a cap of {cap}",
                        p.len()
                    );
                }
                // The context is unusable after a refused message: the connection closes.
                return;
            }
            Err(InflateError::OverBudget) => {
                assert!(budget.is_some());
                return;
            }
            Err(InflateError::Corrupt) => {
                assert!(
                    plain.is_none() || !in_step,
                    "the server's own compressed message was called corrupt"
                );
                return;
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
enum IsalMsg {
    /// Compressed (zlib-rs below 4 KiB or at levels other than 1, igzip above at level 1, as
    /// the server's `compress_fresh`), in fragments each ended with a sync flush; the last
    /// one's tail removed.
    Plain(Vec<Vec<u8>>),
    /// `Plain` of one piece repeated up to 64k times (large messages, igzip's compressor).
    Repeat(Vec<u8>, u16),
    /// Compressed, then bits flipped (byte index, bit) and cut to a length.
    Mutated(Vec<u8>, Vec<(u16, u8)>, Option<u16>),
    /// Raw bytes: not deflate data, or a hostile stream.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct InflateIsalInput {
    window_bits: u8,
    level: u8,
    cap: u32,
    budget: Option<u32>,
    msgs: Vec<IsalMsg>,
}

/// One inflater's answer: result, output, the growth asked of the budget.
type Answer = (Result<(), InflateError>, Vec<u8>, Vec<usize>);

/// An inflater under test: it fills the output, asking the budget (the inner closure) before
/// each growth.
type Run<'a> =
    dyn FnMut(&mut Vec<u8>, &mut dyn FnMut(usize) -> bool) -> Result<(), InflateError> + 'a;

fn answer(f: &mut Run<'_>, budget: Option<usize>) -> Answer {
    let (mut out, mut charges, mut left) = (Vec::new(), Vec::new(), budget);
    let r = f(&mut out, &mut |n| {
        charges.push(n);
        match left.as_mut() {
            Some(l) if *l < n => false,
            Some(l) => {
                *l -= n;
                true
            }
            None => true,
        }
    });
    (r, out, charges)
}

/// igzip's inflater (`inflate_fresh_isal`, one reset state per thread, reused across messages
/// and inputs as the server reuses it) against zlib-rs's (a fresh `Decompressor`): the same
/// result, the same bytes (all of them when inflated, the first `cap` when too big), the same
/// growth requests to the budget. Two known differences are allowed (deflate/isal_inflate.rs):
/// zlib-rs refuses an incomplete Huffman code set ("invalid ... set") that igzip decodes, and
/// on a stream cut inside a block igzip delivers a few bytes less.
pub fn inflate_isal(data: &[u8]) {
    let Ok(input) = InflateIsalInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cap = (input.cap as usize % (1 << 20)).max(1);
    let budget = input.budget.map(|b| b as usize % (2 << 20));
    let wb = 9 + input.window_bits % 7;
    let level = [1, 1, 6, 9][input.level as usize % 4];
    let compress = |frags: &[&[u8]]| -> Vec<u8> {
        let mut wire = Vec::new();
        let mut z = Vec::new();
        for f in frags {
            deflate::compress_fresh(wb, 8, level, f, &mut z);
            // Each fragment flushed and restarted: the tail goes back between fragments.
            if !wire.is_empty() {
                wire.extend_from_slice(&[0, 0, 0xff, 0xff]);
            }
            wire.extend_from_slice(&z);
        }
        wire
    };
    for m in input.msgs.iter().take(6) {
        let (plain, wire) = match m {
            IsalMsg::Plain(frags) => {
                let frags: Vec<&[u8]> = frags.iter().take(16).map(Vec::as_slice).collect();
                let frags = if frags.is_empty() {
                    vec![&[][..]]
                } else {
                    frags
                };
                (Some(frags.concat()), compress(&frags))
            }
            IsalMsg::Repeat(piece, n) => {
                let p = piece
                    .repeat(*n as usize)
                    .into_iter()
                    .take(1 << 20)
                    .collect::<Vec<_>>();
                (Some(p.clone()), compress(&[&p]))
            }
            IsalMsg::Mutated(p, flips, cut) => {
                let mut w = compress(&[p]);
                for &(at, bit) in flips.iter().take(8) {
                    if !w.is_empty() {
                        let i = at as usize % w.len();
                        w[i] ^= 1 << (bit % 8);
                    }
                }
                if let Some(c) = cut {
                    w.truncate(*c as usize);
                }
                (None, w)
            }
            IsalMsg::Raw(r) => (None, r.clone()),
        };
        let mut zlib = Decompressor::new(false);
        let z = answer(
            &mut |out, charge| zlib.decompress_within(&wire, out, cap, charge),
            budget,
        );
        if let (Some(p), Ok(())) = (&plain, &z.0) {
            assert!(
                &z.1 == p,
                "zlib-rs inflated a compressed message to something else"
            );
        }
        if let (Some(p), Err(e)) = (&plain, &z.0) {
            assert!(
                *e != InflateError::Corrupt && (*e != InflateError::TooBig || p.len() > cap),
                "zlib-rs refused a compressed message of {} bytes: {e:?}",
                p.len()
            );
        }
        let routed = answer(
            &mut |out, charge| deflate::inflate_fresh(&wire, out, cap, charge).1,
            budget,
        );
        if !deflate::ISAL {
            // Built without ISA-L: `inflate_fresh` is zlib-rs.
            assert!(routed == z);
            continue;
        }
        let isal = answer(
            &mut |out, charge| match deflate::inflate_fresh_isal(&wire, out, cap, charge) {
                Some((_, r)) => r,
                None => unreachable!("ISA-L is built"),
            },
            budget,
        );
        assert!(
            routed == z || routed == isal,
            "inflate_fresh answered neither as zlib-rs nor as igzip"
        );
        let same_bytes = |a: &Answer, b: &Answer| match a.0 {
            // A refused message's partial output is dropped by the server: not compared.
            Err(InflateError::Corrupt) | Err(InflateError::OverBudget) => true,
            _ => a.1 == b.1,
        };
        if isal.0 == z.0 && isal.2 == z.2 && same_bytes(&isal, &z) {
            continue;
        }
        // A stream cut inside a block: both deliver it, igzip a symbol or so shorter.
        if isal.0 == z.0 && z.1.starts_with(&isal.1) && z.1.len() - isal.1.len() <= 1024 {
            continue;
        }
        let why = zlib.corrupt_reason();
        assert!(
            z.0 == Err(InflateError::Corrupt) && why.is_some_and(|w| w.ends_with(" set")),
            "igzip {:?} ({} bytes, charges {:?}) against zlib-rs {:?} ({} bytes, charges {:?}, {why:?}) on {} bytes",
            isal.0,
            isal.1.len(),
            isal.2,
            z.0,
            z.1.len(),
            z.2,
            wire.len()
        );
    }
}
