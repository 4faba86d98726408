//! The contexts a thread shares among every connection it serves, for messages without
//! context takeover: a message compressed from a reset context depends on nothing before it,
//! so one compressor per (window bits, memLevel, level) and one inflater per thread serve all
//! such peers and every broadcast compressed once for everybody, with no per-connection memory
//! and no construction per message. Where ISA-L is built (backend.rs) it takes the messages it
//! is faster on; zlib-rs or classic zlib (codec.rs) the rest.

use super::backend;
use super::codec::{Compressor, InflateError};
use super::zlib_inflate::inflate_fresh_zlib;
use std::cell::RefCell;

thread_local! {
    /// Contexts without context takeover, shared by every connection a thread serves. A
    /// message compressed from a reset context depends on nothing before it, so one context
    /// per window size serves all such peers: no per-connection memory, and no ~100 us
    /// construction per message.
    static FRESH_Z: RefCell<Vec<(u8, u8, u8, Compressor)>> = const { RefCell::new(Vec::new()) };
}

/// Messages at least this large are sampled before they are compressed (`worth_compressing`).
pub const SAMPLE_FROM: usize = 256 << 10;

/// The sample: the message's first bytes.
const SAMPLE: usize = 32 << 10;

/// Whether compressing `payload` can pay for itself: always below [`SAMPLE_FROM`]; above,
/// when its first 32 KiB, compressed alone with the same settings, shrink by at least an
/// eighth. Random or already-compressed data (and data whose repeats lie beyond the window)
/// does not, and compressing megabytes of it at a low memLevel costs tens of milliseconds a
/// MiB (a Huffman tree built every few thousand symbols) for a result that is then thrown
/// away. The price: a large message incompressible at its start but compressible later is
/// sent plain. Btrfs decides the same way for the same reason (a sample before compressing).
pub fn worth_compressing(payload: &[u8], window_bits: u8, mem_level: u8, level: u8) -> bool {
    if payload.len() < SAMPLE_FROM {
        return true;
    }
    let sample = &payload[..SAMPLE];
    let mut out = Vec::with_capacity(SAMPLE + 64);
    compress_fresh(window_bits, mem_level, level, sample, &mut out);
    out.len() <= SAMPLE - SAMPLE / 8
}

/// Compress one message with no context (a reset context of `window_bits`), using this
/// thread's shared compressor. Returns the bytes of a context created for the call (0 when one
/// was reused), for memory accounting.
pub fn compress_fresh(
    window_bits: u8,
    mem_level: u8,
    level: u8,
    input: &[u8],
    out: &mut Vec<u8>,
) -> u64 {
    // ISA-L where built and where it is faster (backend.rs says when); zlib otherwise.
    if let Some(created) = backend::compress_fresh(window_bits, level, input, out) {
        return created;
    }
    FRESH_Z.with(|cell| {
        let mut all = cell.borrow_mut();
        let key = (window_bits.max(9), mem_level, level);
        let mut created = 0;
        let i = match all.iter().position(|c| (c.0, c.1, c.2) == key) {
            Some(i) => i,
            None => {
                all.push((
                    key.0,
                    key.1,
                    key.2,
                    Compressor::new(key.0, key.1, key.2, false),
                ));
                created = crate::memory::deflate_compressor_bytes(key.0, key.1);
                all.len() - 1
            }
        };
        all[i].3.compress(input, out);
        created
    })
}

/// Inflate one message that was compressed without context takeover, using this thread's
/// shared decompressor. Returns the bytes of a context created for the call (0 when reused)
/// whatever the outcome: the context stays with the thread even when the message is refused,
/// so the memory gauge must count it either way.
///
/// Where built (the `isal` feature on x86-64 Linux), payloads `backend::inflates` takes (its
/// minimum size and more) go through igzip, smaller ones (and every other build) through
/// zlib-rs; both are driven by the same loop (`feed`), so the message cap and the inflate
/// budget see the same growth either way.
pub fn inflate_fresh(
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> (u64, Result<(), InflateError>) {
    if backend::inflates(input.len()) {
        if let Some(r) = backend::inflate_fresh(input, out, max, charge) {
            return r;
        }
    }
    inflate_fresh_zlib(input, out, max, charge)
}

/// Whether ISA-L's codec is built in (the `isal` feature on x86-64 Linux).
pub const ISAL: bool = backend::BUILT;

/// `inflate_fresh` through igzip whatever the size; None where ISA-L is not built (other
/// targets, or without the `isal` feature). For the differential tests and fuzz target.
pub fn inflate_fresh_isal(
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> Option<(u64, Result<(), InflateError>)> {
    backend::inflate_fresh(input, out, max, charge)
}
