//! The ISA-L backend (the `isal` feature on x86-64 Linux): igzip compresses the no-context
//! messages of level 1 from `igzip::MIN_INPUT` bytes and inflates the no-context messages from
//! `isal_inflate::MIN_INPUT` compressed bytes, each through one stream per I/O thread. Chosen
//! in deflate/mod.rs, the one place that looks at the feature; no_isal.rs is its stand-in
//! elsewhere, with the same items.

#[path = "igzip.rs"]
mod igzip;
#[path = "isal_inflate.rs"]
mod isal_inflate;

use super::codec::{inflate_message, InflateError};
use super::zlib_inflate::inflate_fresh_zlib;
use super::TAIL;
use std::cell::RefCell;

/// ISA-L is built in.
pub const BUILT: bool = true;

/// Whether a compressed payload of `len` bytes is inflated by igzip (at least
/// `isal_inflate::MIN_INPUT`).
#[inline]
pub fn inflates(len: usize) -> bool {
    len >= isal_inflate::MIN_INPUT
}

thread_local! {
    /// igzip's inflater for `inflate_fresh` (see `isal_inflate`).
    static FRESH_ISAL_INFLATE: RefCell<Option<isal_inflate::IsalInflate>> = const { RefCell::new(None) };
    /// igzip streams for `compress_fresh`, by window bits (see `igzip`).
    static FRESH_IGZIP: RefCell<Vec<(u8, igzip::Igzip)>> = const { RefCell::new(Vec::new()) };
}

/// Compress one no-context message with this thread's igzip stream when igzip takes it (level
/// 1, the profiles' setting, and `igzip::MIN_INPUT` bytes or more: about twice zlib-rs's speed
/// and a better ratio there; other levels keep zlib's meaning). The bytes of a context created
/// for it; None when zlib takes the message.
#[inline]
pub fn compress_fresh(window_bits: u8, level: u8, input: &[u8], out: &mut Vec<u8>) -> Option<u64> {
    if level != 1 || input.len() < igzip::MIN_INPUT {
        return None;
    }
    Some(FRESH_IGZIP.with(|cell| {
        let mut all = cell.borrow_mut();
        let bits = window_bits.clamp(9, 15);
        let mut created = 0;
        let i = match all.iter().position(|c| c.0 == bits) {
            Some(i) => i,
            None => {
                all.push((bits, igzip::Igzip::new(bits)));
                created = igzip::Igzip::bytes();
                all.len() - 1
            }
        };
        all[i].1.compress(input, out);
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - 4);
        }
        created
    }))
}

/// Inflate one no-context message through this thread's igzip inflater, whatever its size:
/// the bytes of a context created for it and the outcome.
pub fn inflate_fresh(
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> Option<(u64, Result<(), InflateError>)> {
    Some(FRESH_ISAL_INFLATE.with(|cell| {
        let mut d = cell.borrow_mut();
        let mut created = 0;
        let d = d.get_or_insert_with(|| {
            created = isal_inflate::IsalInflate::bytes();
            isal_inflate::IsalInflate::new()
        });
        let start = out.len();
        let mut r = inflate_message(d, input, out, max, charge);
        if d.final_block {
            // igzip cannot say where a final block's stream ends in the input: zlib-rs does
            // this (rare) message again. The output so far is the same bytes zlib-rs writes
            // and its capacity is already charged, so the budget sees zlib-rs's own growth.
            out.truncate(start);
            let (zlib_created, zr) = inflate_fresh_zlib(input, out, max, charge);
            created += zlib_created;
            r = zr;
        }
        // Without context takeover nothing outlives the message, whatever its outcome.
        d.reset();
        (created, r)
    }))
}

/// A stream from igzip's compressor at level 1, for the differential tests: each fragment
/// sync-flushed, no reset between them, the last ending in a final block when `final_block`.
#[cfg(test)]
pub fn igzip_stream(frags: &[&[u8]], bits: u8, final_block: bool) -> Option<Vec<u8>> {
    use isal_sys::igzip_lib as isal;
    let mut level_buf = vec![0u8; isal::ISAL_DEF_LVL1_DEFAULT as usize];
    // SAFETY: as igzip.rs's `Igzip::new`; the pointers below cover live buffers per call.
    unsafe {
        let mut z: Box<isal::isal_zstream> =
            Box::new(std::mem::MaybeUninit::zeroed().assume_init());
        isal::isal_deflate_init(&mut *z);
        z.level = 1;
        z.level_buf = level_buf.as_mut_ptr();
        z.level_buf_size = level_buf.len() as u32;
        z.hist_bits = bits as u16;
        z.gzip_flag = isal::IGZIP_DEFLATE as u16;
        let mut out = Vec::new();
        for (i, f) in frags.iter().enumerate() {
            let last = i + 1 == frags.len();
            let mut buf = vec![0u8; f.len() + f.len() / 8 + 1024];
            z.next_in = f.as_ptr() as *mut u8;
            z.avail_in = f.len() as u32;
            z.next_out = buf.as_mut_ptr();
            z.avail_out = buf.len() as u32;
            z.flush = isal::SYNC_FLUSH as u16;
            z.end_of_stream = (last && final_block) as u16;
            assert_eq!(isal::isal_deflate(&mut *z), 0);
            assert_eq!(z.avail_in, 0);
            buf.truncate(buf.len() - z.avail_out as usize);
            out.extend_from_slice(&buf);
        }
        Some(out)
    }
}
