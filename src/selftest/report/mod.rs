//! The self-test's outputs: the verdict against the profile's targets, a table for people,
//! JSON for machines, and a self-contained HTML page with inline SVG charts.
//!
//! Beside this file: the verdict ([`verdict()`], [`combine`]) and what it covers ([`Scope`]),
//! the capacity and memory figures held against the profile's estimates, the table, the HTML
//! page and the Prometheus textfile.

mod baseline;
mod capacity;
pub(crate) mod html;
mod memory;
mod prometheus;
mod restart;
mod scope;
mod shards;
mod table;
#[cfg(test)]
mod tests;
mod verdict;

pub use baseline::Baseline;
pub use capacity::{CapacityReport, CpuTarget};
pub use html::html;
pub use memory::{BudgetReport, Compared, MemoryEstimate, MemoryReport, ESTIMATE_TOLERANCE};
pub use prometheus::prometheus;
pub(crate) use restart::{restart_checks, restart_lines};
pub use scope::{Scope, Standing};
pub use shards::{merge as merge_shards, Input as ShardReport};
pub use table::{table, wrap, Layout, TABLE_MIN_WIDTH};
pub use verdict::{combine, verdict, Check, Judging, Verdict};

use super::ScenarioReport;
use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Targets {
    pub profile: String,
    /// The profile's connection count: a run is a proof for the profile only at this size.
    pub connections: usize,
    pub p99_ms: f64,
    pub rate_per_client: f64,
    pub payload_bytes: usize,
    /// The profile's memory estimate per connection (check's `estimate.*`), to hold against
    /// what the idle scenario measured.
    pub estimate: MemoryEstimate,
    /// The profile's CPU estimate for its message rate, to hold against what echo-rate
    /// measured.
    pub cpu: CpuTarget,
    /// `selftest.restart`: what the restart scenario must meet.
    #[serde(default)]
    pub restart: crate::profile::RestartTargets,
}

/// What `check` said about this host before a `serve --self-test`: half of its verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostCheck {
    pub profile: String,
    pub failed: Vec<String>,
    pub warnings: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub url: String,
    /// The user's server the run measured (`--command`), as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Scenarios left out, and why (a user's server that does not do what they need).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub skipped: Vec<String>,
    /// Scenarios refused before any load: the server found cannot serve them (a broadcast
    /// against an echo server). Nothing ran; the run exits 3.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub refused: Vec<crate::selftest::Refusal>,
    pub cores: usize,
    pub targets: Targets,
    /// Connections the scenarios ran with.
    pub conns: usize,
    /// Where the run was made smaller than the profile, and why.
    pub scaled_down: Vec<String>,
    /// Why the rate scenarios offer less per connection than the profile says (CPU budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_note: Option<String>,
    /// Server processes the self-test's server ran as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_processes: Option<usize>,
    /// Memory for the idle connections, measured, against the profile's estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
    /// The server's CPU per message, measured, and the cores the profile's rate needs at it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityReport>,
    /// The servers' memory budget over the run: what clients made them hold at most, against
    /// the budget (the embedded server's, or a user's that serves its /metrics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<BudgetReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_check: Option<HostCheck>,
    /// This report is one shard's slice of a run over several hosts (`selftest --shard`);
    /// its verdict is provisional, `wstune report merge` judges the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::selftest::shard::Shard>,
    /// This report is the merge of shards' reports (`wstune report merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<MergedFrom>,
    /// An earlier run's figures to compare with (`--baseline OLD.json`): shown, not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    pub scenarios: Vec<ScenarioReport>,
    pub verdict: Verdict,
}

/// The report in a file that may also hold other lines: a pod's log (`kubectl logs`) carries
/// the shard's standard error beside its report. Lines before the report's first line (`{` at
/// the start of a line) and anything after its closing brace are skipped.
pub fn parse(text: &str) -> serde_json::Result<Report> {
    let start = if text.starts_with('{') {
        0
    } else {
        text.find("\n{").map_or(0, |i| i + 1)
    };
    serde_json::Deserializer::from_str(&text[start..])
        .into_iter::<Report>()
        .next()
        .unwrap_or_else(|| serde_json::from_str(""))
}

/// Where a merged report came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedFrom {
    /// The shards' count, as they were started (`--shard I/N`'s N).
    pub count: usize,
    /// The shards whose reports were merged, by index.
    pub shards: Vec<usize>,
    /// The first shard whose `--pid` sampled a server, if any. The server figures of every
    /// shard given `--pid` are summed: one per server host (a cluster's nodes); give `--pid`
    /// on one shard per host, or a server's CPU counts twice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_from: Option<usize>,
    /// The largest difference between the shards' first scenario starts, ms (clock skew and
    /// late shards; a few ms on hosts kept by NTP).
    pub start_skew_ms: u64,
}

impl Report {
    /// The fewest connections any scenario ran with: what the verdict can vouch for (deflate
    /// may run fewer than the headline count, for its own memory).
    pub fn smallest_conns(&self) -> usize {
        self.scenarios
            .iter()
            .map(|s| s.conns_requested)
            .chain([self.conns])
            .min()
            .unwrap_or(self.conns)
    }
}

/// Thousands separated by commas: 100,000.
pub fn count(n: usize) -> String {
    crate::output::thousands(n as u64)
}

pub(super) fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A duration given in milliseconds, in the unit that reads: "0.21 ms", "12.3 ms", "1.52 s".
pub fn ms_words(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{} s", num(ms / 1000.0))
    } else {
        format!("{} ms", num(ms))
    }
}

/// A rate or count per second: digit groups from 100 up ("12,345"), a whole number as one
/// ("10"), else two or three figures ("2.50").
pub fn rate_words(v: f64) -> String {
    if v >= 100.0 {
        crate::output::thousands(v.round() as u64)
    } else if v == v.round() {
        format!("{v:.0}")
    } else {
        num(v)
    }
}

pub(super) fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} GiB", b / 1024.0 / 1024.0 / 1024.0)
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}
