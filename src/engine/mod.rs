//! The pipelines more than one command runs, as library functions the commands call (never
//! one command calling another):
//!
//! - [`check`]: profile + catalog + backend -> host facts -> findings -> one `CheckReport`
//!   (`check`, `apply` before and after its changes, `export`, `serve`'s host warning and
//!   `serve --self-test`'s host half);
//! - [`selftest`]: load settings + profile -> a sized plan -> the scenarios -> one self-test
//!   report and its outcome (`selftest`, `serve --self-test`).
//!
//! Their inputs are typed values `cli::resolve` builds; they return typed values, and decide
//! no exit code (that is `Outcome` -> `cli`).

pub mod check;
pub mod selftest;
