//! The stand-in for the ISA-L backend (isal.rs) where it is not built (without the `isal`
//! feature, or off x86-64 Linux): the same items, saying that every message goes to zlib.

use super::codec::InflateError;

/// ISA-L is not built in.
pub const BUILT: bool = false;

/// No payload is inflated by igzip.
#[inline]
pub fn inflates(_len: usize) -> bool {
    false
}

/// Always None: zlib compresses every no-context message.
#[inline]
pub fn compress_fresh(_: u8, _: u8, _: &[u8], _: &mut Vec<u8>) -> Option<u64> {
    None
}

/// Always None: there is no igzip to inflate with.
#[inline]
pub fn inflate_fresh(
    _: &[u8],
    _: &mut Vec<u8>,
    _: usize,
    _: &mut dyn FnMut(usize) -> bool,
) -> Option<(u64, Result<(), InflateError>)> {
    None
}

/// Always None: there is no igzip to compress with.
#[cfg(test)]
pub fn igzip_stream(_: &[&[u8]], _: u8, _: bool) -> Option<Vec<u8>> {
    None
}
