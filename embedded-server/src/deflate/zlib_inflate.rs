//! The inflater a thread shares among every peer without context takeover, through zlib-rs:
//! what shared.rs takes for the messages ISA-L does not (or cannot: a final block igzip cannot
//! find the end of), and the differential tests' reference. A leaf below both, so the ISA-L
//! backend can fall back to it without reaching up into the dispatch that calls the backend.

use super::codec::{Decompressor, InflateError};
use std::cell::RefCell;

thread_local! {
    static FRESH_INFLATE: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
}

/// `inflate_fresh` through zlib-rs whatever the size (the differential tests' reference).
pub fn inflate_fresh_zlib(
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> (u64, Result<(), InflateError>) {
    FRESH_INFLATE.with(|cell| {
        let mut d = cell.borrow_mut();
        let mut created = 0;
        let d = d.get_or_insert_with(|| {
            created = crate::memory::deflate_decompressor_bytes(15);
            Decompressor::new(false)
        });
        (created, d.decompress_within(input, out, max, charge))
    })
}
