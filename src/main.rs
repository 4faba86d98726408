/// The allocator of the `wstune` binary on Linux: jemalloc, not glibc's malloc. Under connection
/// churn with permessage-deflate (each connection allocates and frees ~40-300 KiB of zlib state
/// beside its small buffers), glibc's arenas fragmented: the 10-minute soak grew RSS 18.7 %
/// while the live heap (heaptrack) stayed flat, and 247 MiB stayed resident after every client
/// left. jemalloc's size classes keep those apart and it returns freed pages to the kernel
/// (RELIABILITY.md#soak; the cost, none measurable, in bench/results/2026-12-01-jemalloc-ab.md).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf`, which the crate's prefixed build names
/// `_rjem_malloc_conf`; `_RJEM_MALLOC_CONF` in the environment adds to them at start-up): pages
/// are handed back to the kernel as soon as they are free (no decay), as glibc did for its
/// mmapped blocks: a refused 16 MiB inflate buffer leaves RSS at once (tests/serving/server_memory.rs),
/// not 10 s later.
#[cfg(target_os = "linux")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 34] = b"dirty_decay_ms:0,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    wstune::cli::main()
}
