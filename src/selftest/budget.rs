//! The servers' memory budget as a self-test saw it: read from each server's /metrics (or an
//! in-process server's counters) and summed. Data only: the report layer renders it, and the
//! runner and `serve --self-test` fill it, so it sits below both.

use serde::{Deserialize, Serialize};

/// The memory budget of the servers a self-test ran against, summed over them (the echo and
/// broadcast servers, and every process of a supervised one): from their /metrics, or from an
/// in-process server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The budgets, in all.
    pub limit_bytes: u64,
    /// The most each server held at once, summed (an upper bound on what they held together).
    pub peak_bytes: u64,
    /// Connections closed with 1013 (or subscribes refused) because the budget was full.
    pub budget_closes: u64,
    /// Connections closed with 1009 for passing their own share.
    pub share_closes: u64,
}

impl BudgetReport {
    /// Read from a server's Prometheus text; None when it has no budget series (an older
    /// server, or another program).
    pub fn from_metrics(text: &str) -> Option<BudgetReport> {
        let mut r = BudgetReport::default();
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            let v = v as u64;
            let series = name.split('{').next().unwrap_or(name);
            match series {
                "ws_memory_budget_bytes" => {
                    r.limit_bytes += v;
                    seen = true;
                }
                "ws_memory_budget_peak_bytes" => r.peak_bytes += v,
                "ws_memory_budget_closes_total" => r.budget_closes += v,
                "ws_memory_share_closes_total" => r.share_closes += v,
                _ => {}
            }
        }
        seen.then_some(r)
    }
}

/// Two servers' budgets as one.
impl std::ops::Add for BudgetReport {
    type Output = BudgetReport;
    fn add(self, o: BudgetReport) -> BudgetReport {
        BudgetReport {
            limit_bytes: self.limit_bytes + o.limit_bytes,
            peak_bytes: self.peak_bytes + o.peak_bytes,
            budget_closes: self.budget_closes + o.budget_closes,
            share_closes: self.share_closes + o.share_closes,
        }
    }
}
