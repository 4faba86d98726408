//! Memory: the idle connections measured against the profile's estimate, and the servers'
//! memory budget.

use super::super::ScenarioReport;
use super::bytes;
pub use crate::selftest::budget::BudgetReport;
use serde::{Deserialize, Serialize};

/// The parts of the profile's memory estimate that an idle connection can be measured against.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct MemoryEstimate {
    /// `estimate.server_bytes_per_conn`: the server's state for an idle connection.
    pub server_bytes_per_conn: u64,
    /// `estimate.kernel_bytes_per_conn`: one socket's kernel objects.
    pub kernel_bytes_per_socket: u64,
    /// `estimate.bytes_per_conn`: everything, deflate and buffers in flight included.
    pub bytes_per_conn: u64,
}

impl MemoryEstimate {
    pub fn of(p: &crate::profile::Profile) -> MemoryEstimate {
        let e = p.estimate();
        MemoryEstimate {
            server_bytes_per_conn: e.server_bytes_per_conn,
            kernel_bytes_per_socket: e.kernel_bytes_per_conn,
            bytes_per_conn: e.bytes_per_conn(),
        }
    }
}

/// How far the estimate may be from the measurement before it must change (25%).
pub const ESTIMATE_TOLERANCE: f64 = 0.25;

/// One estimated figure held against its measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Compared {
    pub what: String,
    pub estimate_bytes: u64,
    pub measured_bytes: f64,
    /// (estimate - measured) / measured: positive when the estimate is conservative.
    pub error: f64,
    pub within_tolerance: bool,
}

/// Memory for the idle connections, measured, beside the profile's estimate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryReport {
    pub conns: usize,
    /// Server RSS growth while connecting / connections (all server processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_per_conn_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<super::super::KernelMemory>,
    pub compared: Vec<Compared>,
}

impl MemoryReport {
    /// From the idle scenario, if it ran and anything was measured.
    pub fn of(scenarios: &[ScenarioReport], e: &MemoryEstimate) -> Option<MemoryReport> {
        let idle = scenarios.iter().find(|s| s.scenario.holds_idle())?;
        let rss = idle.server.as_ref().and_then(|s| s.rss_per_conn_bytes);
        let kernel = idle.kernel.clone();
        if rss.is_none() && kernel.is_none() {
            return None;
        }
        let mut compared = Vec::new();
        let mut cmp = |what: &'static str, est: u64, measured: Option<f64>| {
            if let Some(m) = measured.filter(|m| *m > 0.0) {
                let error = (est as f64 - m) / m;
                compared.push(Compared {
                    what: what.to_string(),
                    estimate_bytes: est,
                    measured_bytes: m,
                    error,
                    within_tolerance: error.abs() <= ESTIMATE_TOLERANCE,
                });
            }
        };
        cmp(
            "server bytes per idle connection",
            e.server_bytes_per_conn,
            rss,
        );
        cmp(
            "kernel bytes per socket",
            e.kernel_bytes_per_socket,
            kernel.as_ref().and_then(|k| k.slab_bytes_per_socket),
        );
        Some(MemoryReport {
            conns: idle.conns_connected,
            server_rss_per_conn_bytes: rss,
            server_rss_bytes: idle.server.as_ref().and_then(|s| s.rss_after_bytes),
            kernel,
            compared,
        })
    }
}

/// The budget's line in the report (the figures themselves are `budget`'s).
impl BudgetReport {
    /// The report's line.
    pub fn line(&self) -> String {
        let pct = if self.limit_bytes > 0 {
            format!(
                " ({:.1}%)",
                self.peak_bytes as f64 * 100.0 / self.limit_bytes as f64
            )
        } else {
            String::new()
        };
        format!(
            "memory budget: clients made the server hold at most {} of {}{pct}; {} closed \
             over the budget (1013), {} past their share (1009)\n",
            bytes(self.peak_bytes as f64),
            bytes(self.limit_bytes as f64),
            self.budget_closes,
            self.share_closes
        )
    }
}
