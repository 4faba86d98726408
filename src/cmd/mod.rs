//! One module per subcommand. Each takes its typed `Request` (built by `cli::resolve`: inputs
//! loaded, flags checked) and returns an `Outcome` (or an error); it runs the shared pipelines
//! in `engine`, has `report` format what people read, and emits it. A command never imports
//! `cli` or another command (a unit test in `cli` keeps it so).

pub mod apply;
pub mod bench;
pub mod check;
pub mod explain;
pub mod export;
pub mod lb;
pub mod pool;
pub mod profiles;
pub mod report;
pub mod rollback;
pub mod selftest;
pub mod serve;
pub mod snapshot;
pub mod token;
pub mod watch;
