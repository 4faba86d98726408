//! Scripted sessions (`selftest --script FILE.yaml`): client populations that each connect
//! their own way (path and query, headers, subprotocol, a token) and run a sequence of steps
//! (send, expect a reply, subscribe, publish, think, idle), the way Artillery and k6 describe a
//! WebSocket user. Each waiting step is timed from the message it waits on, into a histogram
//! of its own, so a threshold can name it: `traders.price.p99 < 50ms`.
//!
//! The file is read once by the orchestrator: every mistake is reported with its file and
//! line before anything connects. Tokens are minted (or read) here too, and reach the
//! generator processes on their input, never in argv.

mod file;
mod guard;
mod lines;
mod model;
mod parse;

pub use file::{
    ExpectFile, MintFile, Payload, PopulationFile, PublishFile, ScriptFile, StageFile, StepFile,
    TokenFile,
};
pub use guard::MAX_NESTING;
pub use model::{fill, json_subset, Matcher, Population, Script, Step};
pub use parse::{parse, Tokens, MAX_CONNS};

#[cfg(test)]
mod tests;
