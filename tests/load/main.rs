//! Fast tier: load and processes: `selftest` and `serve --self-test` at small sizes and
//! their outputs read by their consumers (promtool, node_exporter, Chromium),
//! `serve --processes` (the supervisor) and `--cluster` over Redis.

// The helpers every test binary shares, beside the binaries' folders.
#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod selftest;
mod selftest_first_run;
mod selftest_outputs;
mod selftest_restart;
mod selftest_script;
mod selftest_shards;
mod selftest_tls;
mod supervisor;
mod supervisor_restart;
