//! Fast tier: load and processes: `selftest` and `serve --self-test` at small sizes,
//! `serve --processes` (the supervisor) and `--cluster` over Redis.

mod common;

mod cluster;
mod selftest;
mod selftest_tls;
mod supervisor;
