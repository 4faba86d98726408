//! A scenario the probe refused before the load: data the report renders and the error
//! prints, apart from the probe that decides it (so the report need not reach the probe).

use super::Scenario;
use serde::{Deserialize, Serialize};

/// A scenario refused before the load, and why: in the report and in the error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    pub scenario: Scenario,
    /// The server the scenario would have run against.
    pub url: String,
    /// Why it cannot work there, in a sentence.
    pub reason: String,
    /// What to run instead, each a command or flag to use.
    pub instead: Vec<String>,
}

impl Refusal {
    /// One paragraph: the scenario, why, and what to run instead.
    pub fn line(&self) -> String {
        format!(
            "--scenario {} cannot work against {}: {}; instead: {}",
            self.scenario.name(),
            self.url,
            self.reason,
            self.instead.join(", or ")
        )
    }

    /// The same over lines, for the error: the why first, then each thing to run instead.
    pub fn message(&self) -> String {
        format!(
            "--scenario {} cannot work against {}: {}\ninstead: {}",
            self.scenario.name(),
            self.url,
            self.reason,
            self.instead.join("\nor: ")
        )
    }
}
