//! Fast tier: the tests whose assertions are measurements: the load generator's send
//! schedule, fan-out tails and `pool`'s measured ratios. Each test holds its area (`common::area`),
//! so one area's tests never run beside another's: each is measured as it would be in a binary of
//! its own.

// The helpers every test binary shares, beside the binaries' folders.
#[path = "../common/mod.rs"]
mod common;

mod fanout_tail;
mod generator;
mod pool;
