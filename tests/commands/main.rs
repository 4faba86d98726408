//! Fast tier: the host commands (check, apply, rollback, snapshot, profiles, export, lb) driven
//! through the real binary, each file checked by the tool that consumes what it writes.
//! Integration tests are grouped into a few binaries so `cargo test` links a handful of
//! executables instead of one per file; each module is one area (docs/development.md, "Tests").

// The helpers every test binary shares, beside the binaries' folders.
#[path = "../common/mod.rs"]
mod common;

mod apply_killed;
mod check_table;
mod cli;
mod deploy;
mod export;
mod journal;
mod lb;
mod lb_tls;
mod reports;
mod windows;
