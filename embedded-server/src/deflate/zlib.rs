//! Classic zlib's raw deflate (libz-sys, built from its bundled source): the compressor a
//! connection keeps with context takeover when the profile's memLevel asks for small contexts
//! (`memory::compressor_engine`; zlib-rs, ~3x faster at level 1, otherwise).
//!
//! Why not always zlib-rs: zlib-rs, like
//! zlib-ng, allocates a fixed 65,536-entry hash table and zeroes it when a context is created,
//! whatever memLevel asks for. A window-11, memLevel-4 context then costs ~150 KiB and ~38 page
//! faults to create instead of zlib's documented `2^(wb+2) + 2^(memLevel+9)` (16 KiB). At 100k
//! connections that each send now and then, creating those contexts was most of the server's
//! CPU per compressed message (bench/results/2026-12-02-deflate-at-100k.md). Classic zlib sizes its hash
//! from memLevel, so the profile's memory levers mean what they say.
//!
//! zlib's memory comes from Rust's global allocator (jemalloc in the `wstune` binary), not the C
//! library's malloc, so it shares the allocator's accounting and page return.

use libz_sys as z;
use std::alloc::{self, Layout};
use std::ffi::{c_int, c_uint, c_void};
use std::mem::MaybeUninit;

/// Room in front of each zlib allocation for its size, so `zfree` can rebuild the layout.
const HEADER: usize = 16;

unsafe extern "C" fn zalloc(_opaque: *mut c_void, items: c_uint, size: c_uint) -> *mut c_void {
    let Some(bytes) = (items as usize)
        .checked_mul(size as usize)
        .and_then(|b| b.checked_add(HEADER))
    else {
        return std::ptr::null_mut();
    };
    let Ok(layout) = Layout::from_size_align(bytes, HEADER) else {
        return std::ptr::null_mut();
    };
    // SAFETY: the layout's size is at least HEADER, never zero.
    let p = unsafe { alloc::alloc(layout) };
    if p.is_null() {
        return p.cast();
    }
    // SAFETY: p is valid for `bytes` >= HEADER bytes and aligned to 16.
    unsafe {
        p.cast::<usize>().write(bytes);
        p.add(HEADER).cast()
    }
}

unsafe extern "C" fn zfree(_opaque: *mut c_void, ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: ptr came from zalloc: its block starts HEADER bytes before, with the size there.
    unsafe {
        let p = ptr.cast::<u8>().sub(HEADER);
        let bytes = p.cast::<usize>().read();
        alloc::dealloc(p, Layout::from_size_align_unchecked(bytes, HEADER));
    }
}

/// One raw-deflate stream (no zlib or gzip wrapper), as permessage-deflate wants.
pub(crate) struct RawDeflate {
    // Boxed: zlib keeps a pointer back to the stream and refuses calls from a moved copy.
    s: Box<z::z_stream>,
}

// SAFETY: the stream's pointers are to memory it owns (its state) or are set for the length of
// one call (next_in/next_out); nothing is shared with another thread.
unsafe impl Send for RawDeflate {}

impl RawDeflate {
    /// A stream at `level` (0-9) with a `2^window_bits` window (9..=15) and `mem_level` (1..=9).
    /// Out-of-range values are clamped to zlib's ranges; zlib itself refuses only those.
    pub(crate) fn new(level: u8, window_bits: u8, mem_level: u8) -> RawDeflate {
        let mut s = Box::new(z::z_stream {
            next_in: std::ptr::null_mut(),
            avail_in: 0,
            total_in: 0,
            next_out: std::ptr::null_mut(),
            avail_out: 0,
            total_out: 0,
            msg: std::ptr::null_mut(),
            state: std::ptr::null_mut(),
            zalloc,
            zfree,
            opaque: std::ptr::null_mut(),
            data_type: 0,
            adler: 0,
            reserved: 0,
        });
        // SAFETY: s is a valid, pinned z_stream; the version and size are this build's own.
        let r = unsafe {
            z::deflateInit2_(
                &mut *s,
                level.min(9) as c_int,
                z::Z_DEFLATED,
                -(window_bits.clamp(9, 15) as c_int),
                mem_level.clamp(1, 9) as c_int,
                z::Z_DEFAULT_STRATEGY,
                z::zlibVersion(),
                std::mem::size_of::<z::z_stream>() as c_int,
            )
        };
        // Only Z_MEM_ERROR is possible with clamped parameters; the global allocator aborts the
        // process on exhaustion rather than return null, as every other allocation here does.
        assert_eq!(r, z::Z_OK, "deflateInit2 failed ({r})");
        RawDeflate { s }
    }

    /// Deflate from `input` into `out` with a sync flush: (input used, output written, ok).
    /// `ok` is false only on a stream error, which zlib reports for misuse, never for data.
    pub(crate) fn sync_flush(
        &mut self,
        input: &[u8],
        out: &mut [MaybeUninit<u8>],
    ) -> (usize, usize, bool) {
        let (in_len, out_len) = (
            input.len().min(c_uint::MAX as usize),
            out.len().min(c_uint::MAX as usize),
        );
        self.s.next_in = input.as_ptr().cast_mut();
        self.s.avail_in = in_len as c_uint;
        self.s.next_out = out.as_mut_ptr().cast();
        self.s.avail_out = out_len as c_uint;
        // SAFETY: next_in/next_out point to live buffers of the lengths given; zlib reads no
        // more than avail_in and writes no more than avail_out (never reading `out`).
        let r = unsafe { z::deflate(&mut *self.s, z::Z_SYNC_FLUSH) };
        let used = in_len - self.s.avail_in as usize;
        let produced = out_len - self.s.avail_out as usize;
        self.s.next_in = std::ptr::null_mut();
        self.s.next_out = std::ptr::null_mut();
        // Z_BUF_ERROR: no progress was possible (a flush with nothing new to write), not an error.
        (used, produced, r == z::Z_OK || r == z::Z_BUF_ERROR)
    }

    /// Forget the history (deflateReset): clears only the memLevel-sized hash.
    pub(crate) fn reset(&mut self) {
        // SAFETY: the stream was initialised by deflateInit2 and not ended.
        unsafe { z::deflateReset(&mut *self.s) };
    }
}

impl Drop for RawDeflate {
    fn drop(&mut self) {
        // SAFETY: initialised by deflateInit2 and ended only here.
        unsafe { z::deflateEnd(&mut *self.s) };
    }
}
