//! wstune: check, tune and prove a host and a WebSocket server for 100k+ connections.
//!
//! The flow, one way: args -> one typed request per command (`cli::resolve`) -> the command
//! (`cmd`), which runs the shared pipelines (`engine`: profile + catalog -> host facts through a
//! `host::Backend` -> findings, pure -> `report`) and returns an `outcome::Outcome` -> exit code
//! (`cli`, the only module that imports `cli`).

pub mod apply;
pub mod bench;
pub mod catalog;
pub mod cli;
pub mod cmd;
pub mod confirm;
pub mod engine;
pub mod export;
pub mod failpoint;
pub mod gather;
pub mod host;
#[cfg(test)]
mod layering;
pub mod lb;
pub mod nic;
pub mod outcome;
pub mod output;
pub mod pool;
pub mod profile;
pub mod report;
pub mod selftest;
pub mod serve;
pub mod terminal;
pub mod value;
pub mod watch;
mod yaml_lines;
