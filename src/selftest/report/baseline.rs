//! `--baseline OLD.json`: an earlier run's figures beside this one's, per scenario, so a
//! regression shows as a change (p99 0.9 -> 1.4 ms, +56 %) in the table, the JSON and the
//! page. Shown, not judged: a gate on it is a `--threshold`.

use super::super::{Latency, Scenario};
use super::{num, Report};
use serde::{Deserialize, Serialize};

/// The earlier run, as far as the comparison needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baseline {
    /// The file it was read from, as given.
    pub file: String,
    /// The server that run measured.
    pub url: String,
    pub scenarios: Vec<BaselineScenario>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineScenario {
    pub scenario: Scenario,
    pub conns: usize,
    pub latency_ms: Latency,
    pub achieved_rate: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_us_per_msg: Option<f64>,
}

impl Baseline {
    /// The figures of `old`, a self-test report read from `file`; refused when it cannot be
    /// compared (another schema, no scenario).
    pub fn of(old: &Report, file: &str) -> Result<Baseline, String> {
        if old.schema_version != super::SCHEMA_VERSION {
            return Err(format!(
                "--baseline {file}: a report of schema {} (this wstune writes {}); give a \
                 report this version wrote",
                old.schema_version,
                super::SCHEMA_VERSION
            ));
        }
        if old.scenarios.is_empty() {
            return Err(format!(
                "--baseline {file}: the report has no scenario to compare"
            ));
        }
        Ok(Baseline {
            file: file.to_string(),
            url: old.url.clone(),
            scenarios: old
                .scenarios
                .iter()
                .map(|s| BaselineScenario {
                    scenario: s.scenario,
                    conns: s.conns_connected,
                    latency_ms: s.latency_ms.clone(),
                    achieved_rate: s.achieved_rate,
                    server_cpu_us_per_msg: s.server_cpu_us_per_msg,
                })
                .collect(),
        })
    }

    pub fn scenario(&self, s: Scenario) -> Option<&BaselineScenario> {
        self.scenarios.iter().find(|b| b.scenario == s)
    }
}

/// One figure, old against new: "0.90 -> 1.40 ms (+56 %)".
pub fn change(old: f64, new: f64, unit: &str) -> String {
    let pct = if old > 0.0 {
        format!(" ({:+.0} %)", (new - old) / old * 100.0)
    } else {
        String::new()
    };
    format!("{} -> {}{unit}{pct}", num(old), num(new))
}

/// The table's lines: one per scenario both runs have.
pub fn lines(r: &Report) -> String {
    let Some(b) = &r.baseline else {
        return String::new();
    };
    let mut out = format!("vs baseline {} ({}):\n", b.file, b.url);
    let mut any = false;
    for s in &r.scenarios {
        let Some(o) = b.scenario(s.scenario) else {
            continue;
        };
        any = true;
        let mut parts = Vec::new();
        if s.latency_ms.count > 0 && o.latency_ms.count > 0 {
            parts.push(format!(
                "p50 {}",
                change(o.latency_ms.p50, s.latency_ms.p50, " ms")
            ));
            parts.push(format!(
                "p99 {}",
                change(o.latency_ms.p99, s.latency_ms.p99, " ms")
            ));
        }
        parts.push(format!(
            "rate {}",
            change(o.achieved_rate, s.achieved_rate, "/s")
        ));
        if let (Some(a), Some(n)) = (o.server_cpu_us_per_msg, s.server_cpu_us_per_msg) {
            parts.push(format!("server CPU/msg {}", change(a, n, " us")));
        }
        if o.conns != s.conns_connected {
            parts.push(format!("connections {} -> {}", o.conns, s.conns_connected));
        }
        out.push_str(&format!("  {}: {}\n", s.scenario.name(), parts.join(", ")));
    }
    if !any {
        out.push_str("  no scenario of this run is in the baseline\n");
    }
    out
}
