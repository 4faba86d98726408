//! permessage-deflate (RFC 7692): negotiation, and the per-connection compressor and
//! decompressor that live as long as the connection when context takeover is on.
//!
//! Built on zlib-rs (the Rust zlib behind flate2's fastest backend) for its memLevel control:
//! compressor memory is `2^(wb+2) + 2^(memLevel+9)` bytes, decompressor `2^wb` plus state, so the
//! window bits and memLevel are the memory levers (see `memory.rs`).
//!
//! Wire rules: each message is compressed and flushed with Z_SYNC_FLUSH, and the trailing
//! `00 00 ff ff` is removed; the receiver appends it back before inflating. Without context
//! takeover the stream is reset after every message.
//!
//! With the `isal` feature on x86-64 Linux, ISA-L's igzip takes the per-thread reset contexts:
//! compressing level-1 messages of 4 KiB and more (`igzip.rs`) and inflating the messages of
//! client_no_context_takeover peers from 2 KiB of compressed input (`isal_inflate.rs`).
//!
//! The parts: `negotiate.rs` (the offer and the answer), `codec.rs` (a connection's compressor
//! and decompressor), `shared.rs` (the contexts a thread shares for no-context messages),
//! `ledger.rs` (their memory, given back when a thread ends), and one file per backend:
//! `zlib.rs` (classic zlib for small-memory compressors), `isal.rs` (ISA-L, through `igzip.rs`
//! and `isal_inflate.rs`) or `no_isal.rs` where ISA-L is not built. The ISA-L backend is
//! chosen once, below, as flate2 chooses its zlib in one place; no other file looks at the
//! feature.

mod codec;
#[cfg(test)]
mod differential;
mod ledger;
mod negotiate;
mod shared;
#[cfg(test)]
mod tests;
mod zlib;
mod zlib_inflate;

#[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
#[path = "isal.rs"]
mod backend;
#[cfg(not(all(feature = "isal", target_os = "linux", target_arch = "x86_64")))]
#[path = "no_isal.rs"]
mod backend;

pub use codec::{Compressor, Decompressor, InflateError};
pub use ledger::charge_thread;
pub use negotiate::{negotiate, Agreed, DeflateSettings};
pub use zlib_inflate::inflate_fresh_zlib;
pub use shared::{
    compress_fresh, inflate_fresh, inflate_fresh_isal, worth_compressing, ISAL,
    SAMPLE_FROM,
};

/// The sync-flush tail (`00 00 ff ff`) each message's compressed form ends with before it is
/// removed for the wire (RFC 7692 7.2.1), and appended again before inflating.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
