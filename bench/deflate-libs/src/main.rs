//! zlib-rs (the codec behind `embedded-server/src/deflate.rs`) beside ISA-L (igzip) and
//! libdeflate on the same bytes, the way permessage-deflate uses them (RFC 7692): raw deflate,
//! level 1, a 32 KiB window, each message ended with a sync flush whose `00 00 ff ff` tail is
//! removed on the wire and appended back before inflating.
//!
//! Usage: deflate-libs MESSAGES_FILE MESSAGE_SIZE RUNS. The file (written by
//! bench/deflate_libs.py, so Python's peers read the very same bytes) holds messages of
//! MESSAGE_SIZE bytes back to back. Prints one JSON object per library and mode: the median over
//! RUNS of the per-message thread CPU time (compress, inflate), and the ratio.
//!
//! Modes:
//! - `fresh`: no context takeover. zlib-rs and ISA-L reset one context per message (what the
//!   server does: one shared reset context per I/O thread); libdeflate compresses the whole
//!   message at once, which ends it with a final block (RFC 7692 7.2.3.3 allows one), and
//!   inflates whole buffers.
//! - `takeover`: one compressor and one decompressor for the whole stream of messages.
//!   libdeflate has no streaming API, so it has no row here.

use std::mem::MaybeUninit;

const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
/// After the tail, an empty final block (static Huffman, end-of-block only): a whole-buffer
/// inflater such as libdeflate needs a final block to know the message ended.
const FINAL_EMPTY: [u8; 2] = [0x03, 0x00];
const WINDOW: usize = 1 << 15;

/// Thread CPU time in nanoseconds: the VM is shared, wall time would count the others.
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One library's compressor and decompressor for one mode.
trait Codec {
    /// Compress one message into `out` (cleared), as sent on the wire.
    fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>);
    /// Inflate one wire payload into `out` (cleared); `size` is the message's size (only
    /// whole-buffer inflaters use it, as the bound of their output buffer).
    fn inflate(&mut self, wire: &[u8], out: &mut Vec<u8>, size: usize);
}

fn strip_tail(out: &mut Vec<u8>) {
    if out.ends_with(&TAIL) {
        out.truncate(out.len() - 4);
    }
}

// ---- zlib-rs: the calls embedded-server/src/deflate.rs makes ----

struct ZlibRs {
    c: zlib_rs::Deflate,
    d: zlib_rs::Inflate,
    takeover: bool,
    scratch: Vec<u8>,
}

impl ZlibRs {
    fn new(takeover: bool, level: i32) -> ZlibRs {
        let cfg = zlib_rs::DeflateConfig {
            level,
            window_bits: -15,
            mem_level: 8,
            ..zlib_rs::DeflateConfig::default()
        };
        ZlibRs {
            c: zlib_rs::Deflate::new_with_config(cfg),
            d: zlib_rs::Inflate::new(false, 15),
            takeover,
            scratch: Vec::new(),
        }
    }
}

impl Codec for ZlibRs {
    fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(msg.len() + msg.len() / 8 + 1024);
        let before = self.c.total_out();
        self.c
            .compress_uninit(
                msg,
                out.spare_capacity_mut(),
                zlib_rs::DeflateFlush::SyncFlush,
            )
            .expect("zlib-rs compress");
        let n = (self.c.total_out() - before) as usize;
        // SAFETY: zlib-rs initialised `n` bytes of the spare capacity.
        unsafe { out.set_len(n) };
        strip_tail(out);
        if !self.takeover {
            self.c.reset();
        }
    }

    fn inflate(&mut self, wire: &[u8], out: &mut Vec<u8>, size: usize) {
        self.scratch.clear();
        self.scratch.extend_from_slice(wire);
        self.scratch.extend_from_slice(&TAIL);
        out.clear();
        out.reserve(size + 64);
        let before = self.d.total_out();
        self.d
            .decompress_uninit(
                &self.scratch,
                out.spare_capacity_mut(),
                zlib_rs::InflateFlush::SyncFlush,
            )
            .expect("zlib-rs inflate");
        let n = (self.d.total_out() - before) as usize;
        // SAFETY: zlib-rs initialised `n` bytes of the spare capacity.
        unsafe { out.set_len(n) };
        if !self.takeover {
            self.d.reset(false);
        }
    }
}

// ---- libdeflate: whole buffers only (no context takeover) ----

struct Libdeflate {
    c: libdeflater::Compressor,
    d: libdeflater::Decompressor,
    scratch: Vec<u8>,
}

impl Codec for Libdeflate {
    fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        out.resize(self.c.deflate_compress_bound(msg.len()), 0);
        let n = self
            .c
            .deflate_compress(msg, out)
            .expect("libdeflate compress");
        out.truncate(n);
    }

    fn inflate(&mut self, wire: &[u8], out: &mut Vec<u8>, size: usize) {
        // A peer's message ends with a sync flush (no final block): the tail and an empty
        // final block make it a complete stream. Our own messages already end with a final
        // block and libdeflate stops there.
        self.scratch.clear();
        self.scratch.extend_from_slice(wire);
        self.scratch.extend_from_slice(&TAIL);
        self.scratch.extend_from_slice(&FINAL_EMPTY);
        out.resize(size, 0);
        let n = self
            .d
            .deflate_decompress(&self.scratch, out)
            .expect("libdeflate inflate");
        out.truncate(n);
    }
}

// ---- ISA-L (igzip) through its C API ----

use isal_sys::igzip_lib as isal;

struct Isal {
    c: Box<isal::isal_zstream>,
    /// igzip's level 1 needs a caller-owned buffer (hash tables); its size is a speed lever.
    _level_buf: Vec<u8>,
    d: Box<isal::inflate_state>,
    takeover: bool,
    scratch: Vec<u8>,
    /// Context takeover: igzip inflates back-references from the bytes right before
    /// `next_out`, so the previous output's last 32 KiB is kept in front of the new output.
    hist: Vec<u8>,
}

impl Isal {
    fn new(takeover: bool, level_buf: usize) -> Isal {
        // SAFETY: both structs are plain C data that their init functions fill in.
        unsafe {
            let mut c: Box<isal::isal_zstream> = Box::new(MaybeUninit::zeroed().assume_init());
            isal::isal_deflate_init(&mut *c);
            let mut buf = vec![0u8; level_buf];
            c.level = 1;
            c.level_buf = buf.as_mut_ptr();
            c.level_buf_size = buf.len() as u32;
            c.hist_bits = 15;
            c.gzip_flag = isal::IGZIP_DEFLATE as u16;
            c.flush = isal::SYNC_FLUSH as u16;
            let mut d: Box<isal::inflate_state> = Box::new(MaybeUninit::zeroed().assume_init());
            isal::isal_inflate_init(&mut *d);
            d.crc_flag = isal::IGZIP_DEFLATE;
            d.hist_bits = 15;
            Isal {
                c,
                _level_buf: buf,
                d,
                takeover,
                scratch: Vec::new(),
                hist: Vec::new(),
            }
        }
    }
}

impl Codec for Isal {
    fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(msg.len() + msg.len() / 8 + 1024);
        let c = &mut *self.c;
        c.next_in = msg.as_ptr() as *mut u8;
        c.avail_in = msg.len() as u32;
        c.next_out = out.as_mut_ptr();
        c.avail_out = out.capacity() as u32;
        c.end_of_stream = 0;
        c.flush = isal::SYNC_FLUSH as u16;
        // SAFETY: the pointers cover `msg` and `out`'s capacity, which outlive the call.
        let r = unsafe { isal::isal_deflate(c) };
        assert_eq!(r, 0, "isal_deflate");
        assert!(c.avail_in == 0 && c.avail_out > 0, "one call is enough");
        let n = out.capacity() - c.avail_out as usize;
        // SAFETY: igzip wrote `n` bytes.
        unsafe { out.set_len(n) };
        strip_tail(out);
        if !self.takeover {
            // SAFETY: a stream set up by isal_deflate_init; level and buffers are kept.
            unsafe { isal::isal_deflate_reset(c) };
        }
    }

    fn inflate(&mut self, wire: &[u8], out: &mut Vec<u8>, size: usize) {
        self.scratch.clear();
        self.scratch.extend_from_slice(wire);
        self.scratch.extend_from_slice(&TAIL);
        let d = &mut *self.d;
        d.next_in = self.scratch.as_ptr() as *mut u8;
        d.avail_in = self.scratch.len() as u32;
        if self.takeover {
            // Keep the window in front of where this message's output goes.
            let keep = self.hist.len().min(WINDOW);
            let from = self.hist.len() - keep;
            self.hist.copy_within(from.., 0);
            self.hist.truncate(keep);
            self.hist.reserve(size + 64);
            // SAFETY: `next_out` points into `hist`'s capacity, right after the window.
            unsafe {
                d.next_out = self.hist.as_mut_ptr().add(keep);
            }
            d.avail_out = (self.hist.capacity() - keep) as u32;
            // SAFETY: pointers cover live buffers for the call.
            let r = unsafe { isal::isal_inflate(d) };
            assert_eq!(r, 0, "isal_inflate");
            let n = self.hist.capacity() - keep - d.avail_out as usize;
            // SAFETY: igzip wrote `n` bytes after the window.
            unsafe { self.hist.set_len(keep + n) };
            out.clear();
            out.extend_from_slice(&self.hist[keep..]);
        } else {
            out.clear();
            out.reserve(size + 64);
            d.next_out = out.as_mut_ptr();
            d.avail_out = out.capacity() as u32;
            // SAFETY: pointers cover live buffers for the call.
            let r = unsafe { isal::isal_inflate(d) };
            assert_eq!(r, 0, "isal_inflate");
            let n = out.capacity() - d.avail_out as usize;
            // SAFETY: igzip wrote `n` bytes.
            unsafe { out.set_len(n) };
            // SAFETY: a state set up by isal_inflate_init.
            unsafe {
                isal::isal_inflate_reset(d);
            }
            d.crc_flag = isal::IGZIP_DEFLATE;
            d.hist_bits = 15;
        }
    }
}

/// What the server did for a message sent without context before igzip inflated too: igzip
/// compresses (embedded-server/src/deflate/igzip.rs: level 1, default level buffer, reset per
/// message) and zlib-rs inflates (deflate.rs's `Decompressor`).
struct Wired {
    c: Isal,
    d: ZlibRs,
}

impl Codec for Wired {
    fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        self.c.compress(msg, out)
    }

    fn inflate(&mut self, wire: &[u8], out: &mut Vec<u8>, size: usize) {
        self.d.inflate(wire, out, size)
    }
}

/// The server's own code for a message without context (embedded-server/src/deflate.rs, built
/// with its `isal` feature): `compress_fresh` at level 1 and `inflate_fresh` under a 16 MiB cap
/// with a budget that always agrees, the calls `conn/compression.rs` makes. `zlib_inflate`
/// forces the inflate half through zlib-rs (the server before igzip inflated) for an A/B in
/// one run.
struct Server {
    zlib_inflate: bool,
}

impl Codec for Server {
    fn compress(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        embedded_server::deflate::compress_fresh(15, 8, 1, msg, out);
    }

    fn inflate(&mut self, wire: &[u8], out: &mut Vec<u8>, _size: usize) {
        out.clear();
        let f = if self.zlib_inflate {
            embedded_server::deflate::inflate_fresh_zlib
        } else {
            embedded_server::deflate::inflate_fresh
        };
        f(wire, out, 16 << 20, &mut |_| true)
            .1
            .expect("the server inflates");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// RUNS passes over every message with a new codec each pass; per pass the mean CPU time of a
/// compress and of an inflate per message. Every inflated message is compared with the input.
fn measure(name: &str, mode: &str, msgs: &[&[u8]], runs: usize, make: &dyn Fn() -> Box<dyn Codec>) {
    let (mut cs, mut ds, mut ratio) = (Vec::new(), Vec::new(), 0.0);
    let (mut z, mut out) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut codec = make();
        let (mut c_ns, mut d_ns, mut wire, mut orig) = (0u64, 0u64, 0usize, 0usize);
        for m in msgs {
            let t0 = cpu_ns();
            codec.compress(m, &mut z);
            let t1 = cpu_ns();
            codec.inflate(&z, &mut out, m.len());
            let t2 = cpu_ns();
            assert!(
                out == *m,
                "{name} {mode}: the round trip changed the message"
            );
            c_ns += t1 - t0;
            d_ns += t2 - t1;
            wire += z.len();
            orig += m.len();
        }
        cs.push(c_ns as f64 / msgs.len() as f64 / 1000.0);
        ds.push(d_ns as f64 / msgs.len() as f64 / 1000.0);
        ratio = wire as f64 / orig as f64;
    }
    let rt: Vec<f64> = cs.iter().zip(&ds).map(|(a, b)| a + b).collect();
    println!(
        "{{\"lib\":\"{name}\",\"lang\":\"rust\",\"mode\":\"{mode}\",\"compress_us\":{:.1},\"inflate_us\":{:.1},\"round_trip_us\":{:.1},\"ratio\":{ratio:.4},\"runs\":{runs}}}",
        median(cs),
        median(ds),
        median(rt)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: deflate-libs MESSAGES_FILE MESSAGE_SIZE RUNS");
        std::process::exit(3);
    }
    let data =
        std::fs::read(&args[1]).expect("the messages file (bench/deflate_libs.py writes it)");
    let size: usize = args[2].parse().expect("MESSAGE_SIZE");
    let runs: usize = args[3].parse().expect("RUNS");
    let msgs: Vec<&[u8]> = data.chunks(size).collect();
    for takeover in [false, true] {
        let mode = if takeover { "takeover" } else { "fresh" };
        // Level 1 is the server's; zlib-rs's level 1 is its "quick" strategy (ratio ~0.39 on
        // this feed), so level 2 shows what zlib-rs costs at a ratio near the others'.
        for level in [1, 2] {
            let name = format!("zlib-rs 0.6 level {level}");
            measure(&name, mode, &msgs, runs, &|| {
                Box::new(ZlibRs::new(takeover, level))
            });
        }
        for (label, buf) in [
            (
                "isa-l 2.31 (level_buf 276 KiB)",
                isal::ISAL_DEF_LVL1_DEFAULT as usize,
            ),
            (
                "isa-l 2.31 (level_buf 24 KiB)",
                isal::ISAL_DEF_LVL1_MIN as usize,
            ),
        ] {
            measure(label, mode, &msgs, runs, &|| {
                Box::new(Isal::new(takeover, buf))
            });
        }
        if !takeover {
            measure(
                "wstune: isa-l compress + zlib-rs inflate",
                mode,
                &msgs,
                runs,
                &|| {
                    Box::new(Wired {
                        c: Isal::new(false, isal::ISAL_DEF_LVL1_DEFAULT as usize),
                        d: ZlibRs::new(false, 1),
                    })
                },
            );
            for (label, zlib_inflate) in [
                (
                    "wstune server path: isa-l compress + zlib-rs inflate (before)",
                    true,
                ),
                (
                    "wstune server path: isa-l compress + inflate_fresh (now)",
                    false,
                ),
            ] {
                measure(label, mode, &msgs, runs, &|| {
                    Box::new(Server { zlib_inflate })
                });
            }
            measure("libdeflate 1.26", mode, &msgs, runs, &|| {
                Box::new(Libdeflate {
                    c: libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).unwrap()),
                    d: libdeflater::Decompressor::new(),
                    scratch: Vec::new(),
                })
            });
        }
    }
    // The per-connection state each library keeps with context takeover (zlib-rs's is in
    // embedded-server/src/memory.rs: ~262 KiB + ~39 KiB at window 15, memLevel 8).
    eprintln!(
        "isa-l state: isal_zstream {} B + level_buf, inflate_state {} B",
        std::mem::size_of::<isal::isal_zstream>(),
        std::mem::size_of::<isal::inflate_state>()
    );
}
