//! One module per subcommand, wiring the pieces: resolve -> gather -> evaluate -> report.

pub mod apply;
pub mod bench;
pub mod check;
pub mod docs;
pub mod export;
pub mod lb;
pub mod pool;
pub mod profiles;
pub mod rollback;
pub mod selftest;
pub mod serve;
pub mod snapshot;
