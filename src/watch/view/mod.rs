//! The views of a watch: the full-screen terminal view (tui.rs), one ticker line per interval
//! (plain.rs) and one JSON object per interval (json.rs). Each renders the same frames.

pub mod json;
pub mod plain;
pub mod tui;
