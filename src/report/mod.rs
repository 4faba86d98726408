//! Everything `check` prints: one [`CheckReport`], four renderings. Nothing else in the crate
//! writes a report, and nothing here decides an exit code.

mod junit;
mod prometheus;
mod table;

pub use junit::junit;
pub use prometheus::prometheus;
pub use table::{area, table, Show, AREAS};

use crate::catalog::eval::{Finding, Summary};
use crate::catalog::Platform;
use crate::host::HostInfo;
use serde::Serialize;

/// Bumped only when a field changes meaning or disappears; new fields may be added.
pub const SCHEMA_VERSION: u32 = 1;

/// The documented JSON shape of `wstune check --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub schema_version: u32,
    pub profile: ProfileRef,
    pub host: HostRef,
    pub results: Vec<Finding>,
    pub summary: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProfileRef {
    pub name: String,
    /// `builtin:NAME` or a file path.
    pub source: String,
    pub connections: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostRef {
    pub platform: Platform,
    #[serde(flatten)]
    pub info: HostInfo,
}

pub fn json(report: &CheckReport) -> String {
    serde_json::to_string_pretty(report).expect("a report always serializes") + "\n"
}
