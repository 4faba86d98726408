//! The per-connection codec of RFC 7692: a [`Compressor`] and a [`Decompressor`] that live
//! as long as the connection when context takeover is on. The compressor is zlib-rs, or
//! classic zlib (zlib.rs) where the settings ask for less memory than zlib-rs's fixed hash
//! table allows; the inflate loop (`inflate_message`, `feed`) drives zlib-rs and igzip alike,
//! so the message cap and the inflate budget see the same growth with either.

use super::zlib;
use super::TAIL;
use std::mem::MaybeUninit;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Inflate, InflateFlush, Status};

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
pub(super) const OUT_CHUNK: usize = 16 << 10;

/// The largest LZ77 window (2^15): all a peer may reference.
pub(super) const WINDOW: usize = 1 << 15;

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

/// What `feed` needs from an inflater: zlib-rs's (`Decompressor`) or igzip's.
pub(super) trait Engine {
    /// Inflate from `input` into `out`: (input bytes used, output bytes written, outcome).
    fn step(&mut self, input: &[u8], out: &mut [MaybeUninit<u8>]) -> (usize, usize, Step);
    /// A final block ended the stream: start a new one whose window is the end of `msg_out`
    /// (this message's output so far) and whatever the engine keeps from earlier messages.
    fn restart(&mut self, msg_out: &[u8]);
}

/// How one `Engine::step` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// More input or more room may give more output.
    Going,
    /// The end of a final block (BFINAL=1): the stream is over.
    End,
    /// Not valid deflate data.
    Corrupt,
}

/// Inflate one whole message (without its removed tail) into `out`, appended.
pub(super) fn inflate_message<E: Engine>(
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
