//! wstune: check, tune and prove a host and a WebSocket server for 100k+ connections.
//!
//! The flow, one way: args (`cli`) -> profile + catalog -> host facts (`gather`, through a
//! `host::Backend`) -> findings (`catalog::eval`, pure) -> `report` -> exit code (`cli`).

pub mod apply;
pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod cmd;
pub mod export;
pub mod failpoint;
pub mod gather;
pub mod host;
pub mod input;
pub mod lb;
pub mod output;
pub mod pool;
pub mod profile;
pub mod report;
pub mod selftest;
pub mod server_limits;
pub mod supervisor;
pub mod value;
mod yaml_lines;
