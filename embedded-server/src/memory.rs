//! Memory cost of one connection, as the check engine's estimate and the server's budget.
//!
//! The figures are deliberately conservative (an estimate that is too low lets a host pass a
//! check and then swap under load) and each one says where it comes from.

/// Kernel memory for one idle, established TCP socket that a process watches with epoll:
/// `struct tcp_sock` (~2.3 KiB on 6.x), the socket inode, dentry and `struct file` (~1 KiB), the
/// epoll item (128 B) and slab rounding. Measured at about 3.5 KiB per idle loopback socket via
/// /proc/slabinfo on a 6.x kernel; rounded up to one page.
pub const KERNEL_BYTES_PER_SOCKET: u64 = 4096;

/// The server's own state for one idle connection without compression, as RSS: what the
/// self-test's idle scenario measures and holds this estimate against (within 25 %). It was
/// 4,096 (the first goal; the sgcWebSockets guide's event-driven server used about 9.4 KB) while a connection
/// cost ~3.9 KB; the idle-memory work took it to 1,284 B per connection at 100,000 (7
/// processes) and 1,304-1,316 B at 10,000 (BENCHMARKS.md#idle-memory;
/// bench/results/2026-12-01-idle-bytes.md: tokio's task cell 768, its I/O registration 256, `Shared` 128, the `Conn`
/// handle 80, tables ~28, page slack). 1.5 KiB keeps the estimate conservative by 17-20 %.
pub const SERVER_BYTES_PER_IDLE_CONN: u64 = 1536;

/// Process-wide memory that does not grow with connections (runtime, tables, code).
pub const SERVER_BASE_BYTES: u64 = 64 << 20;

/// Which deflate implementation a connection's own compressor uses for these settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressorEngine {
    /// zlib-rs: ~3x less CPU per message at level 1 than zlib, but a fixed 128 KiB hash table
    /// whatever memLevel asks for.
    ZlibRs,
    /// Classic zlib: its hash table follows memLevel, so its memory is what the profile asks.
    Zlib,
}

/// What zlib-rs holds for one compressor: its window and chain (`2^(wb+2)`), the fixed
/// 65,536-entry hash (128 KiB), the pending buffer (`2^(memLevel+8)`) and ~11 KiB of state and
/// allocator rounding.
fn zlib_rs_compressor_bytes(window_bits: u8, mem_level: u8) -> u64 {
    (1u64 << (window_bits as u32 + 2)) + (128 << 10) + (1u64 << (mem_level as u32 + 8)) + 11 * 1024
}

/// What classic zlib holds for one compressor: `2^(windowBits+2) + 2^(memLevel+9)` for its
/// window, chain and hash tables and pending buffer (zlib's zconf.h), plus 11 KiB: zlib's
/// ~6 KiB of state and the allocator's rounding of its five blocks (each carries a 16-byte size
/// header for the Rust allocator). Measured with `wstune bench deflate --contexts` (window 11,
/// memLevel 4: 27.3 KB resident per compressor).
fn zlib_compressor_bytes(window_bits: u8, mem_level: u8) -> u64 {
    (1u64 << (window_bits as u32 + 2)) + (1u64 << (mem_level as u32 + 9)) + 11 * 1024
}

/// The engine for a connection's own compressor: zlib-rs, the faster, unless its fixed hash
/// makes it hold more than 1.5x what zlib would for these settings. The profile's small
/// memLevel is then a request for memory over CPU, and zlib honours it: window 11 / memLevel 4
/// (100k) holds 27 KiB instead of 150 KiB and builds in ~15 us instead of ~70 us (38 page
/// faults), at ~3x the CPU per compressed message. Window 15 / memLevel 8 stays on zlib-rs.
pub fn compressor_engine(window_bits: u8, mem_level: u8) -> CompressorEngine {
    if zlib_rs_compressor_bytes(window_bits, mem_level) * 2
        <= zlib_compressor_bytes(window_bits, mem_level) * 3
    {
        CompressorEngine::ZlibRs
    } else {
        CompressorEngine::Zlib
    }
}

/// Bytes one connection's compressor holds with these settings (the engine
/// [`compressor_engine`] picks). Window bits 9..=15, memLevel 1..=9.
pub fn deflate_compressor_bytes(window_bits: u8, mem_level: u8) -> u64 {
    match compressor_engine(window_bits, mem_level) {
        CompressorEngine::ZlibRs => zlib_rs_compressor_bytes(window_bits, mem_level),
        CompressorEngine::Zlib => zlib_compressor_bytes(window_bits, mem_level),
    }
}

/// Bytes one decompressor holds (zlib-rs's inflate): the `2^windowBits` window plus 17 KiB of
/// fixed state (zlib-rs keeps three Huffman code tables of ~13 KiB where zlib keeps one).
/// Measured: 19.8 KB resident per decompressor at window 11.
pub fn deflate_decompressor_bytes(window_bits: u8) -> u64 {
    (1u64 << window_bits as u32) + 17 * 1024
}

/// Deflate memory one connection holds when it keeps both contexts alive (context takeover):
/// one compressor and one decompressor. With default settings (15, 8) this is ~380 KiB, far
/// more than the "32 KB per connection" folklore, which counts only the window.
pub fn deflate_bytes_per_conn(window_bits: u8, mem_level: u8) -> u64 {
    deflate_compressor_bytes(window_bits, mem_level) + deflate_decompressor_bytes(window_bits)
}

/// The size of one connection's task future (`size_of_val` of what is spawned per connection),
/// noted at the first spawn: the largest user-space item of an idle connection
/// (embedded-server/tests/idle_bytes.rs, bench/results/2026-12-01-idle-bytes.md).
static TASK_FUTURE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub(crate) fn note_task_future(bytes: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    if TASK_FUTURE_BYTES.load(Relaxed) == 0 {
        TASK_FUTURE_BYTES.store(bytes, Relaxed);
    }
}

/// The connection task's future size in bytes (0 before the first connection).
#[doc(hidden)]
pub fn task_future_bytes() -> usize {
    TASK_FUTURE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_zlib_settings_cost_about_380_kib() {
        // zlib-rs: 128 KiB window*4 + its 128 KiB hash + 64 KiB pending + 11 KiB, plus 32 KiB +
        // 17 KiB to inflate.
        assert_eq!(compressor_engine(15, 8), CompressorEngine::ZlibRs);
        assert_eq!(
            deflate_bytes_per_conn(15, 8),
            (128 + 128 + 64 + 11 + 32 + 17) * 1024
        );
    }

    #[test]
    fn small_memory_levels_get_the_engine_that_honours_them() {
        // The profiles' large counts ask for small contexts: classic zlib keeps them small.
        for (wb, ml) in [(13, 6), (11, 4), (10, 3), (9, 1)] {
            assert_eq!(
                compressor_engine(wb, ml),
                CompressorEngine::Zlib,
                "{wb}/{ml}"
            );
        }
        // window 11, memLevel 4: 8 KiB + 8 KiB + 11 KiB (zlib-rs would hold 147 KiB).
        assert_eq!(deflate_compressor_bytes(11, 4), 27 * 1024);
    }

    #[test]
    fn small_windows_cost_a_tenth() {
        let small = deflate_bytes_per_conn(9, 1);
        assert!(small < 35 * 1024, "{small}");
        assert!(deflate_bytes_per_conn(15, 8) / small >= 10);
    }
}
