/// The allocator of the `wstune` binary on Linux: jemalloc, not glibc's malloc. Under connection
/// churn with permessage-deflate (each connection allocates and frees ~40-300 KiB of zlib state
/// beside its small buffers), glibc's arenas fragmented: the 10-minute soak grew RSS 18.7 %
/// while the live heap (heaptrack) stayed flat, and 247 MiB stayed resident after every client
/// left. jemalloc's size classes keep those apart and it returns freed pages to the kernel
/// (RELIABILITY.md, "Churn soak"; the cost, none measurable, in BENCHMARKS.md).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf`, which the crate's prefixed build names
/// `_rjem_malloc_conf`; `_RJEM_MALLOC_CONF` in the environment adds to them at start-up): a
/// background thread returns unused pages to the kernel (after the default 10 s decay), so that
/// work is never done inline on a connection's allocation path.
#[cfg(target_os = "linux")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 23] = b"background_thread:true\0";

fn main() -> std::process::ExitCode {
    wstune::cli::main()
}
