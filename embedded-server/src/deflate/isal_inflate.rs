//! ISA-L's igzip as the inflater for messages a peer compressed without context
//! (client_no_context_takeover: `inflate_fresh`, one reset state per I/O thread, nothing per
//! connection). On the 64 KiB JSON ticker feed it inflates in about two thirds of zlib-rs's CPU
//! (bench/results/2026-12-01-deflate-isal.md, "ISA-L inflates the no-context messages").
//!
//! Why a growing output buffer is safe here (checked in ISA-L 2.31's igzip/igzip_inflate.c,
//! `isal_inflate`): igzip never reads output from before the `next_out` it was called with.
//! Each call first decodes into the state's own `tmp_out_buffer` (2 x 32 KiB + look-ahead),
//! which starts with the last 32 KiB of the stream's earlier output, copies from there into the
//! caller's buffer, and decodes straight into the caller's buffer only once at least 32 KiB of
//! this call's output lies there; every back-reference is checked against the call's own start
//! (`next_out - look_back_dist < start_out` -> ISAL_INVALID_LOOKBACK, in the C decoder and in
//! igzip_decode_block_stateless.asm's `cmp copy_start, [rsp + start_out_mem_offset]`). What
//! does not fit in `avail_out` (`write_overflow_*`, `copy_overflow_*`) is written into
//! `tmp_out_buffer`, and before returning igzip saves the last 32 KiB of output there
//! ("Save decompression history in tmp_out buffer"). So the caller may hand a different,
//! reallocated buffer on every call: the message cap and the inflate budget keep growing the
//! output exactly as they do for zlib-rs (`deflate::feed` drives both).
//!
//! igzip accepts some streams zlib refuses: a Huffman code set that is incomplete (zlib: "invalid
//! literal/lengths set") decodes until a missing code is met (then ISAL_INVALID_SYMBOL). Such a
//! stream is never memory-unsafe and never passes the message cap; its bytes are what the code
//! lengths say, and a text message is still UTF-8 checked. And a stream cut inside a block
//! (not a valid permessage-deflate message: each ends with a sync flush or a final block) is
//! delivered by both, igzip's a symbol or so shorter: it decodes only with enough bits in hand
//! for its widest lookup, zlib-rs down to the last complete symbol.

use crate::deflate::codec::{Engine, Step};
use isal_sys::igzip_lib as isal;
use std::mem::MaybeUninit;

/// Compressed messages shorter than this go to zlib-rs: igzip builds larger decoding tables
/// per block (multi-symbol lookup), which small messages do not repay (bench/deflate-libs.sh:
/// the crossover near 8 KiB of JSON, about 2-3 KiB compressed).
pub(super) const MIN_INPUT: usize = 2 << 10;

/// One reset-per-message igzip inflate state (raw deflate, 32 KiB window).
pub(super) struct IsalInflate {
    s: Box<isal::inflate_state>,
    /// igzip found an error but still holds output decoded before it (`tmp_out_buffer`):
    /// that output is handed out first, as zlib-rs writes everything before a bad symbol, so
    /// the cap, the budget and the error class come out as zlib-rs's (1009 before 1007).
    failed: bool,
    /// A final block (BFINAL=1) ended the stream: igzip reads input ahead past it, and the
    /// exact byte where the next data starts is not reliably known from its state, so such a
    /// message (rare: RFC 7692 7.2.3.3 allows it, browsers do not send it) is inflated again
    /// by zlib-rs from the start (`deflate::inflate_fresh_isal`). Every later step is a no-op.
    pub(super) final_block: bool,
}

impl IsalInflate {
    pub(super) fn new() -> IsalInflate {
        // SAFETY: inflate_state is plain C data; isal_inflate_init sets every field a raw
        // stream reads (crc_flag 0 = IGZIP_DEFLATE: no wrapper, no checksum; hist_bits 0 = any
        // distance up to 32 KiB, as zlib-rs's window 15).
        let s = unsafe {
            // Zeroed on the heap: the ~87 KiB state never passes through the stack.
            let mut s: Box<isal::inflate_state> = Box::new_zeroed().assume_init();
            isal::isal_inflate_init(&mut *s);
            s
        };
        IsalInflate {
            s,
            failed: false,
            final_block: false,
        }
    }

    /// Bytes one state holds (for the deflate memory gauge): ~87 KiB, mostly the 64 KiB
    /// output history and the decoding tables.
    pub(super) fn bytes() -> u64 {
        std::mem::size_of::<isal::inflate_state>() as u64
    }

    /// Forget the message: the next one starts a new stream with an empty window.
    pub(super) fn reset(&mut self) {
        // SAFETY: a state set up by `new`; reset keeps crc_flag and hist_bits.
        unsafe { isal::isal_inflate_reset(&mut *self.s) };
        self.failed = false;
        self.final_block = false;
    }

    /// Output igzip decoded into its own buffer and has not handed out yet.
    fn pending(&self) -> &[u8] {
        let s = &*self.s;
        &s.tmp_out_buffer[s.tmp_out_processed as usize..s.tmp_out_valid.max(0) as usize]
    }
}

impl Engine for IsalInflate {
    fn step(&mut self, input: &[u8], out: &mut [MaybeUninit<u8>]) -> (usize, usize, Step) {
        if self.final_block {
            // Handed over to zlib-rs: `feed` stops at the first step without progress.
            return (0, 0, Step::Going);
        }
        if self.failed {
            let pending = self.pending();
            let n = pending.len().min(out.len());
            for (o, &b) in out.iter_mut().zip(&pending[..n]) {
                o.write(b);
            }
            self.s.tmp_out_processed += n as i32;
            let done = self.pending().is_empty();
            return (0, n, if done { Step::Corrupt } else { Step::Going });
        }
        let s = &mut *self.s;
        let avail_in = input.len().min(u32::MAX as usize);
        let room = out.len().min(u32::MAX as usize);
        s.next_in = input.as_ptr() as *mut u8;
        s.avail_in = avail_in as u32;
        s.next_out = out.as_mut_ptr().cast();
        s.avail_out = room as u32;
        // SAFETY: `next_in` covers `avail_in` readable bytes and `next_out` `room` writable
        // ones, both live for the call; igzip keeps its history in its own state (see the
        // module comment), so neither pointer is remembered across calls.
        let r = unsafe { isal::isal_inflate(s) };
        // On some errors igzip hands back input it had loaded (avail_in grows): that message
        // is refused anyway, and a success that did so would be refused too, never misread.
        let Some(used) = avail_in.checked_sub(s.avail_in as usize) else {
            let produced = room.saturating_sub(s.avail_out as usize);
            return (0, produced, Step::Corrupt);
        };
        let produced = room - s.avail_out as usize;
        if r != isal::ISAL_DECOMP_OK as i32 {
            if self.pending().is_empty() {
                return (used, produced, Step::Corrupt);
            }
            // Output before the error is handed out first (the cap is judged on it, as with
            // zlib-rs). igzip leaves output pending only when the buffer is full; were it ever
            // to leave some with room to spare, hand it out now, so `feed` never reads a short
            // `Going` as the message's end and the error cannot be lost.
            self.failed = true;
            let (_, more, step) = self.step(&[], &mut out[produced..]);
            return (used, produced + more, step);
        }
        if s.block_state == isal::isal_block_state_ISAL_BLOCK_FINISH {
            return (used, produced, Step::End);
        }
        (used, produced, Step::Going)
    }

    fn restart(&mut self, _msg_out: &[u8]) {
        self.final_block = true;
    }
}
