//! The echo server `bench/echo-cpu-ab.sh` times (bench/results/2026-12-01-handler-api-cost.md):
//! the built-in echo of the `embedded-server` it is built against, one I/O thread, on
//! 127.0.0.1:PORT (its one argument). Build it twice, against the OLD and the NEW crate, as
//! the `main.rs` of a scratch binary crate:
//!
//! ```text
//! [dependencies]
//! embedded-server = { path = "OLD_OR_NEW/embedded-server" }
//! tokio = { version = "1", features = ["rt", "macros", "net", "signal"] }
//! tikv-jemallocator = "0.6"   # as wstune links it, with wstune's malloc_conf
//! ```
//!
//! then `cargo build --release` with the same Cargo.lock for both. Recreated from the run's
//! description (the scratch crate of that run was not kept); it uses only API both sides have.

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("usage: echo-cpu-harness PORT");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = embedded_server::Server::builtin(
            embedded_server::ServerConfig::default(),
            &embedded_server::BuiltinConfig::default(),
        );
        let listeners = embedded_server::bind(([127, 0, 0, 1], port).into(), false, 1)?;
        server.run(listeners, embedded_server::shutdown_signal()?).await
    })
}
