//! Everything `check` prints: one [`CheckReport`], four renderings; and the other tables
//! commands show people: `apply`'s plan, `rollback`'s journal entries, `serve`'s settings.
//! Commands build the typed values and emit what these functions return; nothing here
//! decides an exit code.

mod bench;
mod blocks;
mod explain;
mod journal;
mod junit;
mod plan;
mod pool;
mod profiles;
mod prometheus;
mod serve;
mod shown;
mod table;
pub mod text;

pub(crate) mod book;
pub mod checks_doc;
pub mod coverage_doc;
pub mod metrics_doc;
pub mod profile_doc;
pub mod schema_doc;
pub mod watch;

pub use bench::{broadcast_table, contexts_table, round_trip_table};
pub use explain::{
    explain_json, explain_text, id_list, Explanation, FixTemplate, IdEntry, ProfileTarget,
    RoleChange,
};
pub use journal::{entry_list, restore_preview};
pub use junit::junit;
pub use plan::plan_table;
pub use pool::pool_table;
pub use profiles::profile_list;
pub use prometheus::prometheus;
pub use serve::{settings_table, Setting};
pub use shown::{value_shown, Human, Layout, Show};
pub use table::{area, table, AREAS, TABLE_MIN_COLUMNS};

use crate::catalog::eval::{Finding, Summary};
use crate::host::HostInfo;
use crate::host::Platform;
use serde::Serialize;

/// How a report other than the check's is written: a table for people or JSON for machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListFormat {
    #[default]
    Table,
    Json,
}

/// The check report's formats (`check --format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Junit,
    Prometheus,
}

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
    /// The host's role the checks followed.
    pub role: crate::profile::Role,
    /// Where the role came from: `--role`, `profile`, `detected: PATH` or `default`.
    pub role_from: String,
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
