//! ISA-L's igzip as the compressor for messages sent without context (the per-thread reset
//! context of `compress_fresh`: no-context-takeover peers, broadcasts compressed once for
//! everybody). Measured on one 64 KiB JSON ticker feed at level 1
//! (bench/results/2026-12-01-deflate-isal.md): about half zlib-rs's CPU and a ratio of 0.28 instead
//! of 0.39. Below `MIN_INPUT` zlib-rs stays faster (igzip's per-message reset dominates).
//!
//! The inflating side for peers without context takeover is `isal_inflate.rs` (igzip keeps its
//! own 32 KiB history, so the growing output buffer may move between calls).
//!
//! The wire form is zlib's: a sync flush per message (never a final block), its 00 00 ff ff
//! tail removed, so every peer inflates it the same way, context takeover or not.

use isal_sys::igzip_lib as isal;
use std::mem::MaybeUninit;

/// Messages smaller than this go to zlib-rs: at 1 KiB igzip took 13.8 us against zlib-rs's
/// 11.2 us, at 4 KiB 23 us against 29 us (bench/deflate-libs.sh, fresh mode).
pub(super) const MIN_INPUT: usize = 4 << 10;

/// igzip level 1's buffer for its hash tables: the default size (ISAL_DEF_LVL1_DEFAULT). The
/// minimum (24 KiB) made 64 KiB messages 1.5x slower; one buffer per I/O thread and window size.
const LEVEL_BUF: usize = isal::ISAL_DEF_LVL1_DEFAULT as usize;

/// One reset-per-message igzip stream at level 1.
pub(super) struct Igzip {
    z: Box<isal::isal_zstream>,
    /// Pointed to by `z.level_buf`; boxed so it never moves.
    _level_buf: Box<[u8]>,
}

impl Igzip {
    /// A stream with a window of `2^window_bits` bytes (9..=15).
    pub(super) fn new(window_bits: u8) -> Igzip {
        let mut level_buf = vec![0u8; LEVEL_BUF].into_boxed_slice();
        // SAFETY: isal_zstream is plain C data; isal_deflate_init fills in every field it
        // needs, then the fields it documents as the caller's are set.
        let z = unsafe {
            let mut z: Box<isal::isal_zstream> = Box::new(MaybeUninit::zeroed().assume_init());
            isal::isal_deflate_init(&mut *z);
            z.level = 1;
            z.level_buf = level_buf.as_mut_ptr();
            z.level_buf_size = LEVEL_BUF as u32;
            z.hist_bits = window_bits.clamp(9, 15) as u16;
            z.gzip_flag = isal::IGZIP_DEFLATE as u16;
            z
        };
        Igzip {
            z,
            _level_buf: level_buf,
        }
    }

    /// Bytes one stream holds (for the deflate memory gauge).
    pub(super) fn bytes() -> u64 {
        (std::mem::size_of::<isal::isal_zstream>() + LEVEL_BUF) as u64
    }

    /// Compress one whole message into `out` (cleared first) with a sync flush, then reset:
    /// the next message references nothing of this one. The 00 00 ff ff tail is left for the
    /// caller to remove, as zlib-rs's is.
    pub(super) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        let z = &mut *self.z;
        z.next_in = input.as_ptr() as *mut u8;
        z.avail_in = input.len() as u32;
        z.end_of_stream = 0;
        z.flush = isal::SYNC_FLUSH as u16;
        loop {
            if out.capacity() - out.len() < 64 {
                // As zlib-rs's loop: a first chunk sized from the input, then doubling.
                let first = (input.len() / 4 + 64).min(crate::deflate::codec::OUT_CHUNK);
                out.reserve(out.capacity().max(first));
            }
            let len = out.len();
            let room = (out.capacity() - len).min(u32::MAX as usize);
            // SAFETY: `next_out` covers `room` bytes of `out`'s spare capacity; igzip keeps its
            // history in its own buffers, so the output may move between calls.
            z.next_out = unsafe { out.as_mut_ptr().add(len) };
            z.avail_out = room as u32;
            // SAFETY: a stream set up by `new`; the input and output pointers are live for the
            // call.
            let r = unsafe { isal::isal_deflate(z) };
            let produced = room - z.avail_out as usize;
            // SAFETY: igzip wrote exactly `produced` bytes after `len`.
            unsafe { out.set_len(len + produced) };
            // All input taken and room left over: the sync flush is complete. An error (none
            // is possible with these parameters) ends the message where it is.
            if r != 0 || (z.avail_in == 0 && produced < room) {
                break;
            }
        }
        // SAFETY: a stream set up by `new`: level, level buffer and window are kept.
        unsafe { isal::isal_deflate_reset(z) };
    }
}
