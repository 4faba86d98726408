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

use std::cell::RefCell;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Inflate, InflateFlush, Status};

const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// What the server is willing to do (from the profile and flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateSettings {
    pub enabled: bool,
    /// The largest window the server compresses with (9..=15; zlib turns 8 into 9).
    pub window_bits: u8,
    pub mem_level: u8,
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
    pub server_window_bits: u8,
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
        // client_max_window_bits may only be answered if offered; we accept any client window.
        let client_bits = match cmwb {
            Some(Some(b)) => {
                response.push_str(&format!("; client_max_window_bits={b}"));
                b
            }
            _ => 15,
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
}

/// One direction's compressor, kept for the connection's life with context takeover.
pub struct Compressor {
    z: Deflate,
    takeover: bool,
}

impl Compressor {
    pub fn new(window_bits: u8, mem_level: u8, level: u8, takeover: bool) -> Compressor {
        let cfg = DeflateConfig {
            level: level as i32,
            window_bits: -(window_bits.max(9) as i32),
            mem_level: mem_level as i32,
            ..DeflateConfig::default()
        };
        Compressor {
            z: Deflate::new_with_config(cfg),
            takeover,
        }
    }

    /// Compress one message into `out` (cleared first), without the sync-flush tail.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(input.len() / 2 + 64);
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(64));
            }
            let len = out.len();
            let cap = out.capacity();
            out.resize(cap, 0);
            let before_in = self.z.total_in();
            let before_out = self.z.total_out();
            let r = self
                .z
                .compress(&input[consumed..], &mut out[len..], DeflateFlush::SyncFlush);
            consumed += (self.z.total_in() - before_in) as usize;
            let produced = (self.z.total_out() - before_out) as usize;
            out.truncate(len + produced);
            let done = consumed == input.len() && out.len() < out.capacity();
            if r.is_err() || (done && produced < cap - len) {
                break;
            }
        }
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - 4);
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

thread_local! {
    /// Contexts without context takeover, shared by every connection a thread serves. A
    /// message compressed from a reset context depends on nothing before it, so one context
    /// per window size serves all such peers: no per-connection memory, and no ~100 us
    /// construction per message.
    static FRESH_Z: RefCell<Vec<(u8, u8, u8, Compressor)>> = const { RefCell::new(Vec::new()) };
    static FRESH_INFLATE: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
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
/// shared decompressor. Returns the bytes of a context created for the call (0 when reused).
pub fn inflate_fresh(input: &[u8], out: &mut Vec<u8>, max: usize) -> Result<u64, InflateError> {
    FRESH_INFLATE.with(|cell| {
        let mut d = cell.borrow_mut();
        let mut created = 0;
        let d = d.get_or_insert_with(|| {
            created = crate::memory::deflate_decompressor_bytes(15);
            Decompressor::new(false)
        });
        d.decompress(input, out, max).map(|()| created)
    })
}

/// The receiving side: inflates messages, stopping as soon as the output passes the cap.
pub struct Decompressor {
    z: Inflate,
    takeover: bool,
}

impl Decompressor {
    /// Inflating always uses the largest window (32 KiB): it accepts streams made with any
    /// smaller one, so the client's window bits only matter for what it must keep.
    pub fn new(takeover: bool) -> Decompressor {
        Decompressor {
            z: Inflate::new(false, 15),
            takeover,
        }
    }

    /// Inflate one whole message (its frames' payloads concatenated) into `out`, appended.
    pub fn decompress(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<(), InflateError> {
        let start = out.len();
        let r = self
            .feed(input, out, start, max)
            .and_then(|_| self.feed(&TAIL, out, start, max));
        if !self.takeover || r.is_err() {
            self.z.reset(false);
        }
        r
    }

    fn feed(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<u8>,
        start: usize,
        max: usize,
    ) -> Result<(), InflateError> {
        let mut chunk = [0u8; 16 << 10];
        loop {
            let before_in = self.z.total_in();
            let before_out = self.z.total_out();
            let r = self
                .z
                .decompress(input, &mut chunk, InflateFlush::SyncFlush);
            let used = (self.z.total_in() - before_in) as usize;
            let produced = (self.z.total_out() - before_out) as usize;
            input = &input[used..];
            if out.len() - start + produced > max {
                return Err(InflateError::TooBig);
            }
            out.extend_from_slice(&chunk[..produced]);
            match r {
                Err(_) => return Err(InflateError::Corrupt),
                Ok(Status::StreamEnd) => return Ok(()),
                Ok(_) if input.is_empty() && produced < chunk.len() => return Ok(()),
                Ok(_) if used == 0 && produced == 0 => return Err(InflateError::Corrupt),
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
