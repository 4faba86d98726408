//! Prometheus text exposition for node_exporter's textfile collector
//! (`wstune check --format prometheus > /var/lib/node_exporter/textfile/wstune.prom`).
//!
//! `wstune_check_result{id,status,severity,scope,profile} 1` carries the verdict (alert on
//! `wstune_check_result{status="fail"} == 1`); numeric current values and targets are their own
//! gauges so dashboards can plot headroom.

use super::CheckReport;
use crate::output::prometheus_label as esc;
use crate::value::Value;
use std::fmt::Write;

pub fn prometheus(report: &CheckReport, unix_time: u64) -> String {
    let mut o = String::new();
    let profile = esc(&report.profile.name);
    let _ = writeln!(
        o,
        "# HELP wstune_check_result Result of one wstune check (1 for the status it has)."
    );
    let _ = writeln!(o, "# TYPE wstune_check_result gauge");
    for f in &report.results {
        let _ = writeln!(
            o,
            "wstune_check_result{{id=\"{}\",status=\"{}\",severity=\"{}\",scope=\"{}\",profile=\"{profile}\"}} 1",
            esc(&f.id),
            f.status.as_str(),
            serde_json::to_value(f.severity).unwrap().as_str().unwrap_or(""),
            serde_json::to_value(f.scope).unwrap().as_str().unwrap_or(""),
        );
    }
    let num = |v: &Option<Value>| match v {
        Some(Value::Num(n)) => Some(*n),
        _ => None,
    };
    for (name, help, pick) in [
        (
            "wstune_check_current",
            "Current numeric value of a check.",
            0,
        ),
        (
            "wstune_check_target",
            "Numeric target of a check under the profile.",
            1,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} gauge");
        for f in &report.results {
            let v = if pick == 0 {
                num(&f.current)
            } else {
                num(&f.target)
            };
            if let Some(v) = v {
                let _ = writeln!(
                    o,
                    "{name}{{id=\"{}\",profile=\"{profile}\"}} {v}",
                    esc(&f.id)
                );
            }
        }
    }
    let s = &report.summary;
    let _ = writeln!(o, "# HELP wstune_checks Number of checks by status.");
    let _ = writeln!(o, "# TYPE wstune_checks gauge");
    for (status, n) in [
        ("pass", s.pass),
        ("fail", s.fail),
        ("warn", s.warn),
        ("skip", s.skip),
        ("info", s.info),
    ] {
        let _ = writeln!(
            o,
            "wstune_checks{{status=\"{status}\",profile=\"{profile}\"}} {n}"
        );
    }
    let _ = writeln!(
        o,
        "# HELP wstune_check_timestamp_seconds When the checks ran."
    );
    let _ = writeln!(o, "# TYPE wstune_check_timestamp_seconds gauge");
    let _ = writeln!(
        o,
        "wstune_check_timestamp_seconds{{profile=\"{profile}\"}} {unix_time}"
    );
    o
}
