//! Fast tier: `wstune serve` from outside, over real sockets on 127.0.0.1: the protocol, its
//! edges and memory, abuse limits, the channels API, draining, users' own servers and
//! the fuzz corpora replayed.

// The helpers every test binary shares, beside the binaries' folders.
#[path = "../common/mod.rs"]
mod common;

mod channels_api;
mod drain;
mod fuzz_corpus;
mod limits;
mod server;
mod server_memory;
mod server_protocol;
mod user_app;
