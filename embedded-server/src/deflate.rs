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

#[cfg(test)]
mod differential;
#[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
mod igzip;
#[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
mod isal_inflate;
mod zlib;

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Inflate, InflateFlush, Status};

const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// What the server is willing to do (from the profile and flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateSettings {
    /// Negotiate permessage-deflate at all.
    pub enabled: bool,
    /// The largest window the server compresses with (9..=15; zlib turns 8 into 9).
    pub window_bits: u8,
    /// zlib's memory level (1-9).
    pub mem_level: u8,
    /// zlib's compression level (0-9).
    pub level: u8,
    /// Messages smaller than this go uncompressed (RSV1 clear).
    pub threshold: usize,
    /// Keep contexts between messages (better ratio, memory held per connection).
    pub context_takeover: bool,
}

impl Default for DeflateSettings {
    fn default() -> Self {
        DeflateSettings {
            enabled: false,
            window_bits: 15,
            mem_level: 8,
            level: 1,
            threshold: 256,
            context_takeover: true,
        }
    }
}

/// The parameters both sides agreed on for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// The server resets its compressor after each message.
    pub server_no_context_takeover: bool,
    /// The client resets its compressor after each message (so ours can reset too).
    pub client_no_context_takeover: bool,
    /// The server's (our) window bits, as agreed.
    pub server_window_bits: u8,
    /// The client's window bits, as agreed.
    pub client_window_bits: u8,
    /// The Sec-WebSocket-Extensions response value.
    pub response: String,
}

/// Pick the first offer the server can accept. An offer with unknown or malformed parameters
/// is declined (the next one is tried); None means the connection proceeds uncompressed. The
/// response never claims what the client did not offer.
pub fn negotiate(offers: &[String], s: &DeflateSettings) -> Option<Agreed> {
    if !s.enabled {
        return None;
    }
    // Offers may arrive as one header with several comma-separated extensions (already split by
    // the handshake) whose parameters follow ';'.
    'offer: for offer in offers {
        let mut parts = offer.split(';').map(str::trim);
        if parts.next() != Some("permessage-deflate") {
            continue;
        }
        let (mut snct, mut cnct) = (false, false);
        let mut smwb: Option<u8> = None;
        let mut cmwb: Option<Option<u8>> = None;
        let mut seen = std::collections::HashSet::new();
        for p in parts {
            let (name, value) = match p.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (p, None),
            };
            if !seen.insert(name.to_string()) {
                continue 'offer; // a parameter twice: malformed
            }
            let bits = |v: Option<&str>| {
                v.and_then(|v| v.parse::<u8>().ok())
                    .filter(|b| (8..=15).contains(b))
            };
            match name {
                "server_no_context_takeover" if value.is_none() => snct = true,
                "client_no_context_takeover" if value.is_none() => cnct = true,
                "server_max_window_bits" => match bits(value) {
                    Some(b) => smwb = Some(b),
                    None => continue 'offer,
                },
                "client_max_window_bits" => match value {
                    None => cmwb = Some(None),
                    Some(_) => match bits(value) {
                        Some(b) => cmwb = Some(Some(b)),
                        None => continue 'offer,
                    },
                },
                _ => continue 'offer,
            }
        }
        // Our window: the client's cap if any, else our setting; never below 9 (zlib's raw
        // deflate cannot do 8).
        let server_bits = smwb.unwrap_or(s.window_bits).min(s.window_bits);
        if server_bits < 9 {
            continue;
        }
        let server_nct = snct || !s.context_takeover;
        let mut response = String::from("permessage-deflate");
        if server_nct {
            response.push_str("; server_no_context_takeover");
        }
        if cnct {
            response.push_str("; client_no_context_takeover");
        }
        // RFC 7692 7.1.2.1: the server may announce a smaller window even if not offered.
        if smwb.is_some() || server_bits < 15 {
            response.push_str(&format!("; server_max_window_bits={server_bits}"));
        }
        // client_max_window_bits may only be answered if offered (RFC 7692 7.1.2.2), with at
        // most the offered value. When offered, the client gets our window too: its stream
        // then fits a `2^window_bits` inflate window, the same memory lever in both
        // directions. Not offered, the client may use 15 and our decompressor keeps 32 KiB.
        let client_bits = match cmwb {
            Some(offered) => {
                let b = offered.unwrap_or(15).min(s.window_bits);
                if offered.is_some() || b < 15 {
                    response.push_str(&format!("; client_max_window_bits={b}"));
                }
                b
            }
            None => 15,
        };
        return Some(Agreed {
            server_no_context_takeover: server_nct,
            client_no_context_takeover: cnct,
            server_window_bits: server_bits,
            client_window_bits: client_bits,
            response,
        });
    }
    None
}

/// Why a compressed message could not be inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InflateError {
    /// The output passed the message cap (a decompression bomb): close 1009.
    TooBig,
    /// Not valid deflate data: close 1007.
    Corrupt,
    /// The server-wide inflate budget refused more memory: close 1013 (try again later).
    OverBudget,
}

/// Output buffers grow from this size by doubling, so their capacity stays within twice what
/// was written: a 15 MiB message that compresses to 15 KB needs 16 KiB of scratch, not the
/// 7.5 MiB that reserving "half the input" took.
const OUT_CHUNK: usize = 16 << 10;

/// The largest LZ77 window (2^15): all a peer may reference.
const WINDOW: usize = 1 << 15;

/// One direction's compressor, kept for the connection's life with context takeover.
///
/// zlib-rs, or classic zlib (`zlib.rs`) where the settings ask for less memory than zlib-rs's
/// fixed hash table allows (`memory::compressor_engine`), so window bits and memLevel are the
/// memory levers `memory.rs` says they are.
pub struct Compressor {
    z: DeflateEngine,
    takeover: bool,
}

/// The two compressors behind [`Compressor`].
enum DeflateEngine {
    ZlibRs(Deflate),
    Zlib(zlib::RawDeflate),
}

impl DeflateEngine {
    /// Deflate with a sync flush into `out`: (input used, output written, ok).
    fn sync_flush(&mut self, input: &[u8], out: &mut [MaybeUninit<u8>]) -> (usize, usize, bool) {
        match self {
            DeflateEngine::ZlibRs(z) => {
                let (before_in, before_out) = (z.total_in(), z.total_out());
                let r = z.compress_uninit(input, out, DeflateFlush::SyncFlush);
                (
                    (z.total_in() - before_in) as usize,
                    (z.total_out() - before_out) as usize,
                    r.is_ok(),
                )
            }
            DeflateEngine::Zlib(z) => z.sync_flush(input, out),
        }
    }

    fn reset(&mut self) {
        match self {
            DeflateEngine::ZlibRs(z) => {
                z.reset();
            }
            DeflateEngine::Zlib(z) => z.reset(),
        }
    }
}

impl Compressor {
    /// A compressor with these zlib parameters; `takeover` keeps the context between messages.
    pub fn new(window_bits: u8, mem_level: u8, level: u8, takeover: bool) -> Compressor {
        let window_bits = window_bits.max(9);
        let z = match crate::memory::compressor_engine(window_bits, mem_level) {
            crate::memory::CompressorEngine::ZlibRs => {
                DeflateEngine::ZlibRs(Deflate::new_with_config(DeflateConfig {
                    level: level as i32,
                    window_bits: -(window_bits as i32),
                    mem_level: mem_level as i32,
                    ..DeflateConfig::default()
                }))
            }
            crate::memory::CompressorEngine::Zlib => {
                DeflateEngine::Zlib(zlib::RawDeflate::new(level, window_bits, mem_level))
            }
        };
        Compressor { z, takeover }
    }

    /// Compress one message into `out` (cleared first), without the sync-flush tail.
    ///
    /// zlib writes straight into the vector's spare capacity: nothing is zero-filled, so
    /// capacity that is never written never becomes resident.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 64 {
                // A small message gets a small buffer (most of them: below SCRATCH sizes a
                // connection keeps); a large one starts at one chunk and doubles.
                let first = (input.len() / 4 + 64).min(OUT_CHUNK);
                out.reserve(out.capacity().max(first));
            }
            let len = out.len();
            let spare = out.spare_capacity_mut();
            let room = spare.len();
            let (used, produced, ok) = self.z.sync_flush(&input[consumed..], spare);
            consumed += used;
            // SAFETY: zlib initialised exactly `produced` bytes of the spare capacity.
            unsafe { out.set_len(len + produced) };
            // All input taken and room left over: the sync flush is complete.
            if !ok || (consumed == input.len() && produced < room) {
                break;
            }
        }
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - 4);
        }
        if out.is_empty() {
            // zlib writes nothing for a flush with no input right after another flush (an
            // empty message after any message, with context takeover). An empty payload is
            // not an empty message: the peer appends 00 00 ff ff, reads those bytes as the
            // header of a stored block whose 3 header bits never came, and every later
            // message of the connection inflates wrong. RFC 7692 7.2.3.6: an empty message
            // is the single byte 0x00 (an empty stored block, less the removed tail).
            out.push(0x00);
        }
        if !self.takeover {
            self.z.reset();
        }
    }
}

impl Compressor {
    /// Forget the history: the next message references nothing sent before it. Always valid
    /// for the peer, whose window simply holds data we no longer point into.
    pub fn reset(&mut self) {
        self.z.reset();
    }
}

/// What this thread's shared contexts were charged to: subtracted again when the thread
/// ends, so a gauge does not keep counting contexts that went with a thread the user spawned
/// (an I/O or pool thread lives as long as the server, a user's thread may not).
struct Charges(Vec<(Arc<AtomicI64>, i64)>);

impl Drop for Charges {
    fn drop(&mut self) {
        for (gauge, bytes) in &self.0 {
            gauge.fetch_sub(*bytes, Relaxed);
        }
    }
}

thread_local! {
    static CHARGES: RefCell<Charges> = const { RefCell::new(Charges(Vec::new())) };
}

/// Charge `bytes` of contexts created on this thread by [`compress_fresh`] or
/// [`inflate_fresh`] to `gauge`, and give them back when the thread ends.
pub fn charge_thread(gauge: &Arc<AtomicI64>, bytes: u64) {
    if bytes == 0 {
        return;
    }
    gauge.fetch_add(bytes as i64, Relaxed);
    // A thread being torn down has nothing left to charge; ignore that case.
    let _ = CHARGES.try_with(|c| {
        let mut c = c.borrow_mut();
        match c.0.iter_mut().find(|(g, _)| Arc::ptr_eq(g, gauge)) {
            Some((_, b)) => *b += bytes as i64,
            None => c.0.push((gauge.clone(), bytes as i64)),
        }
    });
}

thread_local! {
    /// Contexts without context takeover, shared by every connection a thread serves. A
    /// message compressed from a reset context depends on nothing before it, so one context
    /// per window size serves all such peers: no per-connection memory, and no ~100 us
    /// construction per message.
    static FRESH_Z: RefCell<Vec<(u8, u8, u8, Compressor)>> = const { RefCell::new(Vec::new()) };
    static FRESH_INFLATE: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
    /// igzip's inflater for `inflate_fresh` (see `isal_inflate`).
    #[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
    static FRESH_ISAL_INFLATE: RefCell<Option<isal_inflate::IsalInflate>> = const { RefCell::new(None) };
    /// igzip streams for `compress_fresh`, by window bits (see `igzip`).
    #[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
    static FRESH_IGZIP: RefCell<Vec<(u8, igzip::Igzip)>> = const { RefCell::new(Vec::new()) };
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
    // Level 1 (the profiles' setting) on x86-64 Linux: ISA-L, about twice zlib-rs's speed and
    // a better ratio on messages of 4 KiB and more; other levels keep zlib's meaning.
    #[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
    if level == 1 && input.len() >= igzip::MIN_INPUT {
        return FRESH_IGZIP.with(|cell| {
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
        });
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
/// Where built (the `isal` feature on x86-64 Linux), payloads of `isal_inflate::MIN_INPUT`
/// compressed bytes and more go through igzip, smaller ones (and every other build) through
/// zlib-rs; both are driven by the same loop (`feed`), so the message cap and the inflate
/// budget see the same growth either way.
pub fn inflate_fresh(
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> (u64, Result<(), InflateError>) {
    #[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
    if input.len() >= isal_inflate::MIN_INPUT {
        return inflate_fresh_isal(input, out, max, charge).expect("built with ISA-L");
    }
    inflate_fresh_zlib(input, out, max, charge)
}

/// Whether ISA-L's codec is built in (the `isal` feature on x86-64 Linux).
pub const ISAL: bool = cfg!(all(
    feature = "isal",
    target_os = "linux",
    target_arch = "x86_64"
));

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

/// `inflate_fresh` through igzip whatever the size; None where ISA-L is not built (other
/// targets, or without the `isal` feature). For the differential tests and fuzz target.
#[allow(unused_variables)]
pub fn inflate_fresh_isal(
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> Option<(u64, Result<(), InflateError>)> {
    #[cfg(all(feature = "isal", target_os = "linux", target_arch = "x86_64"))]
    return Some(FRESH_ISAL_INFLATE.with(|cell| {
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
    }));
    #[cfg(not(all(feature = "isal", target_os = "linux", target_arch = "x86_64")))]
    None
}

/// What `feed` needs from an inflater: zlib-rs's (`Decompressor`) or igzip's.
trait Engine {
    /// Inflate from `input` into `out`: (input bytes used, output bytes written, outcome).
    fn step(&mut self, input: &[u8], out: &mut [MaybeUninit<u8>]) -> (usize, usize, Step);
    /// A final block ended the stream: start a new one whose window is the end of `msg_out`
    /// (this message's output so far) and whatever the engine keeps from earlier messages.
    fn restart(&mut self, msg_out: &[u8]);
}

/// How one `Engine::step` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// More input or more room may give more output.
    Going,
    /// The end of a final block (BFINAL=1): the stream is over.
    End,
    /// Not valid deflate data.
    Corrupt,
}

/// Inflate one whole message (without its removed tail) into `out`, appended.
fn inflate_message<E: Engine>(
    e: &mut E,
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> Result<(), InflateError> {
    let start = out.len();
    // The first growth is sized from the input (most messages inflate a few times their
    // size), later ones double: a bomb's buffer reaches the cap in a few steps.
    let first = input.len().saturating_mul(4).clamp(1 << 10, OUT_CHUNK);
    // A payload that ends exactly with a final block is complete: the appended tail would
    // be read by the restarted stream as a broken stored block (the tail is the end of
    // an empty stored block whose 3 header bits sit in the previous byte). A payload with
    // bytes after its final block (RFC 7692 7.2.3.3 pads with 0x00) gets the tail as usual.
    feed(e, input, out, start, max, first, charge)
        .and_then(|ended| match ended {
            true => Ok(true),
            false => feed(e, &TAIL, out, start, max, first, charge),
        })
        .map(|_| ())
}

/// Inflate `input` into `out`; true when it ended exactly at the end of a final block.
fn feed<E: Engine>(
    e: &mut E,
    mut input: &[u8],
    out: &mut Vec<u8>,
    start: usize,
    max: usize,
    first: usize,
    charge: &mut dyn FnMut(usize) -> bool,
) -> Result<bool, InflateError> {
    // One byte past the cap is room enough to see that a message is over it.
    let limit = start.saturating_add(max).saturating_add(1);
    loop {
        if out.len() == out.capacity() {
            let want = out
                .capacity()
                .saturating_mul(2)
                .max(out.len() + first)
                .min(limit);
            if !charge(want - out.capacity()) {
                return Err(InflateError::OverBudget);
            }
            out.reserve_exact(want - out.len());
        }
        let len = out.len();
        let room = (out.capacity() - len).min(limit - len);
        let (used, produced, r) = e.step(input, &mut out.spare_capacity_mut()[..room]);
        // SAFETY: the engine initialised exactly `produced` bytes of the spare capacity.
        unsafe { out.set_len(len + produced) };
        input = &input[used..];
        if out.len() - start > max {
            out.truncate(start + max);
            return Err(InflateError::TooBig);
        }
        match r {
            Step::Corrupt => return Err(InflateError::Corrupt),
            Step::End => {
                // A final block: without this, the stream stays "ended" and every later
                // message would inflate to nothing, silently.
                e.restart(&out[start..]);
                if input.is_empty() {
                    return Ok(true);
                }
            }
            Step::Going if input.is_empty() && produced < room => return Ok(false),
            Step::Going if used == 0 && produced == 0 => return Err(InflateError::Corrupt),
            Step::Going => {}
        }
    }
}

/// The receiving side: inflates messages, stopping as soon as the output passes the cap.
pub struct Decompressor {
    z: Inflate,
    takeover: bool,
    /// Kept only for a context-takeover peer that ended a message with a final (BFINAL=1)
    /// block, which RFC 7692 7.2.3.3 allows: zlib's stream ends there, and the next stream
    /// must start primed with the window the peer may still reference. A suffix of all
    /// plaintext up to `out[start + history_upto]` of the current message; at most 32 KiB.
    history: Option<Vec<u8>>,
    history_upto: usize,
    /// zlib's reason for the last `Corrupt` (fuzz/inflate_isal tells igzip's known leniency,
    /// incomplete Huffman code sets, from a real disagreement).
    corrupt_reason: Option<&'static str>,
}

impl Decompressor {
    /// Inflating always uses the largest window (32 KiB): it accepts streams made with any
    /// smaller one, so the client's window bits only matter for what it must keep.
    pub fn new(takeover: bool) -> Decompressor {
        Decompressor {
            z: Inflate::new(false, 15),
            takeover,
            history: None,
            history_upto: 0,
            corrupt_reason: None,
        }
    }

    /// A decompressor for a peer known to compress with at most `window_bits` (its
    /// negotiated max_window_bits): zlib keeps a window of that size instead of 32 KiB. A
    /// load generator holding 100k server streams is where that matters.
    pub fn with_window(window_bits: u8, takeover: bool) -> Decompressor {
        Decompressor {
            z: Inflate::new(false, window_bits.clamp(9, 15)),
            takeover,
            history: None,
            history_upto: 0,
            corrupt_reason: None,
        }
    }

    /// zlib's message for the last message refused as `Corrupt` ("invalid distance too far
    /// back", "invalid literal/lengths set", ...).
    pub fn corrupt_reason(&self) -> Option<&'static str> {
        self.corrupt_reason
    }

    /// Bytes held beyond zlib's own state (the window copy kept for final-block peers).
    pub fn extra_bytes(&self) -> usize {
        self.history.as_ref().map_or(0, Vec::capacity)
    }

    /// Inflate one whole message (its frames' payloads concatenated) into `out`, appended.
    pub fn decompress(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<(), InflateError> {
        self.decompress_within(input, out, max, &mut |_| true)
    }

    /// `decompress`, asking `charge(bytes)` before `out` grows by that many bytes of capacity:
    /// false refuses the growth (the server-wide inflate budget) and fails with `OverBudget`.
    pub fn decompress_within(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max: usize,
        charge: &mut dyn FnMut(usize) -> bool,
    ) -> Result<(), InflateError> {
        let start = out.len();
        self.corrupt_reason = None;
        let r = inflate_message(self, input, out, max, charge);
        if !self.takeover || r.is_err() {
            self.z.reset(false);
            self.history = None;
        } else if let Some(h) = self.history.as_mut() {
            push_window(h, &out[start + self.history_upto..]);
        }
        self.history_upto = 0;
        r
    }

    /// Start a new raw stream after a final block, primed with the last 32 KiB of plaintext
    /// (`msg_out` is this message's output so far), so later data may keep referencing it as
    /// RFC 7692 7.2.2 requires. The window is exact when this message alone fills it, when the
    /// stream began with this message, or once `history` is kept (from the first final block
    /// on). Otherwise the older part is unknown here (zlib-rs does not expose its window) and
    /// the dictionary is shorter than the real window: a later reference into the missing
    /// part is an invalid distance, so the connection fails with 1007; it is never inflated
    /// to wrong bytes.
    fn restart(&mut self, msg_out: &[u8]) {
        let mut dict = self
            .history
            .take()
            .unwrap_or_else(|| Vec::with_capacity(WINDOW));
        push_window(&mut dict, &msg_out[self.history_upto..]);
        self.z.reset(false);
        // Raw inflate accepts a dictionary at any point after a reset; it cannot fail here.
        let _ = self.z.set_dictionary(&dict);
        if self.takeover {
            self.history = Some(dict);
            self.history_upto = msg_out.len();
        }
    }
}

impl Engine for Decompressor {
    fn step(&mut self, input: &[u8], out: &mut [MaybeUninit<u8>]) -> (usize, usize, Step) {
        let before_in = self.z.total_in();
        let before_out = self.z.total_out();
        let r = self
            .z
            .decompress_uninit(input, out, InflateFlush::SyncFlush);
        let used = (self.z.total_in() - before_in) as usize;
        let produced = (self.z.total_out() - before_out) as usize;
        // zlib-rs may notice bad data in one call and fail only in the next ("repeated call
        // with bad state"): the first message is the reason.
        if self.corrupt_reason.is_none() {
            self.corrupt_reason = self.z.error_message();
        }
        let step = match r {
            Err(_) => Step::Corrupt,
            Ok(Status::StreamEnd) => Step::End,
            Ok(_) => Step::Going,
        };
        (used, produced, step)
    }

    fn restart(&mut self, msg_out: &[u8]) {
        Decompressor::restart(self, msg_out)
    }
}

/// Append `data` to the window copy `h`, keeping its last 32 KiB (its capacity never grows
/// past that, whatever the message size).
fn push_window(h: &mut Vec<u8>, data: &[u8]) {
    if data.len() >= WINDOW {
        h.clear();
        h.extend_from_slice(&data[data.len() - WINDOW..]);
    } else {
        let keep = WINDOW - data.len();
        if h.len() > keep {
            h.drain(..h.len() - keep);
        }
        h.extend_from_slice(data);
    }
}

#[cfg(test)]
mod tests {
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
            super::charge_thread(&g, super::compress_fresh(15, 8, 1, &msg[..100], &mut z));
            super::charge_thread(&g, super::compress_fresh(15, 8, 1, &msg, &mut z));
            // Reused: no second charge.
            super::charge_thread(&g, super::compress_fresh(15, 8, 1, &msg[..100], &mut z));
            let mut out = Vec::new();
            let (created, r) = super::inflate_fresh(&z, &mut out, 1 << 20, &mut |_| true);
            r.unwrap();
            super::charge_thread(&g, created);
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
            let mut c = super::Compressor::new(15, 8, 1, takeover);
            let mut d = super::Decompressor::new(takeover);
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

    use super::*;

    fn on() -> DeflateSettings {
        DeflateSettings {
            enabled: true,
            ..DeflateSettings::default()
        }
    }

    fn offers(s: &str) -> Vec<String> {
        s.split(',').map(|x| x.trim().to_string()).collect()
    }

    #[test]
    fn negotiation() {
        let a = negotiate(&offers("permessage-deflate; client_max_window_bits"), &on()).unwrap();
        assert_eq!(a.response, "permessage-deflate");
        assert_eq!((a.server_window_bits, a.client_window_bits), (15, 15));
        // A smaller window of ours caps the client's when it offered the parameter (so our
        // decompressor needs only that window), and only then.
        let small = DeflateSettings {
            window_bits: 11,
            ..on()
        };
        let a = negotiate(
            &offers("permessage-deflate; client_max_window_bits"),
            &small,
        )
        .unwrap();
        assert_eq!(
            a.response,
            "permessage-deflate; server_max_window_bits=11; client_max_window_bits=11"
        );
        assert_eq!((a.server_window_bits, a.client_window_bits), (11, 11));
        let a = negotiate(
            &offers("permessage-deflate; client_max_window_bits=10"),
            &small,
        )
        .unwrap();
        assert_eq!(a.client_window_bits, 10);
        let a = negotiate(&offers("permessage-deflate"), &small).unwrap();
        assert_eq!(a.response, "permessage-deflate; server_max_window_bits=11");
        assert_eq!(a.client_window_bits, 15);
        let a = negotiate(&offers("permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12"), &on()).unwrap();
        assert_eq!(a.response, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12");
        assert!(a.server_no_context_takeover && a.client_no_context_takeover);
        // A malformed first offer is declined, the second accepted.
        let a = negotiate(
            &offers("permessage-deflate; server_max_window_bits=20, permessage-deflate"),
            &on(),
        )
        .unwrap();
        assert_eq!(a.response, "permessage-deflate");
        assert!(negotiate(&offers("permessage-deflate; foo=1"), &on()).is_none());
        assert!(negotiate(
            &offers("permessage-deflate; client_no_context_takeover; client_no_context_takeover"),
            &on()
        )
        .is_none());
        assert!(negotiate(&offers("x-webkit-deflate-frame"), &on()).is_none());
        assert!(
            negotiate(&offers("permessage-deflate"), &DeflateSettings::default()).is_none(),
            "disabled"
        );
        // 8 is not something zlib can do raw: declined.
        assert!(negotiate(
            &offers("permessage-deflate; server_max_window_bits=8"),
            &on()
        )
        .is_none());
        // The server's own smaller window is announced.
        let small = DeflateSettings {
            window_bits: 11,
            context_takeover: false,
            ..on()
        };
        let a = negotiate(&offers("permessage-deflate"), &small).unwrap();
        assert_eq!(
            a.response,
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=11"
        );
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
        if cfg!(all(
            feature = "isal",
            target_os = "linux",
            target_arch = "x86_64"
        )) {
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
}
