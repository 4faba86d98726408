//! Fast tier: the tests whose assertions are measurements: hostile clients beside a probe
//! (its latency, the server's RSS), the load generator's send schedule, fan-out tails and
//! `pool`'s measured ratios. Each takes `common::alone()`, so they run one at a time.

mod common;

mod fanout_tail;
mod generator;
mod hostile;
mod pool;
