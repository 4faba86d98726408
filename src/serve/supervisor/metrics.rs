//! One Prometheus exposition for N processes: the children's texts summed series by series.
//!
//! Counters, gauges and histogram buckets/_sum/_count of identical series (same name, same
//! labels) add up correctly over processes, so the sum is the default. Two kinds of series do
//! not: a per-connection setting every process shares (reported once, as the largest value)
//! and an up/down gauge (1 only when every process is up: the smallest value). HELP and TYPE
//! come once per family, in the order the first process listed them.

use std::collections::HashMap;
use std::fmt::Write;

/// Settings the same in every process, and views every process shares (the cluster's live
/// nodes, with `--cluster`: each process is one): summing would multiply them.
const SAME_IN_EVERY_PROCESS: &[&str] = &["ws_send_queue_cap_bytes", "ws_backplane_nodes"];
/// Up/down gauges: up only when up in every process.
const ALL_UP: &[&str] = &["ws_backplane_up"];

#[derive(Default)]
struct Family {
    name: String,
    meta: Vec<String>,
    series: Vec<(String, f64)>,
    index: HashMap<String, usize>,
}

fn metric_name(series: &str) -> &str {
    series.split(['{', ' ']).next().unwrap_or(series)
}

/// Sum the text expositions `texts` (one per process) into one.
pub fn sum(texts: &[String]) -> String {
    let mut families: Vec<Family> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for text in texts {
        let mut current: Option<usize> = None;
        for line in text.lines() {
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut w = rest.splitn(3, ' ');
                let (kind, name) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
                if kind != "HELP" && kind != "TYPE" {
                    continue;
                }
                let i = family(&mut families, &mut by_name, name);
                let f = &mut families[i];
                if !f.meta.iter().any(|m| m.starts_with(&format!("# {kind} "))) {
                    f.meta.push(line.to_string());
                }
                current = Some(i);
                continue;
            }
            // `series value` (a timestamp after the value is not used by wstune).
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            let name = metric_name(series);
            let i = match current {
                Some(i) if name.starts_with(families[i].name.as_str()) => i,
                _ => family(&mut families, &mut by_name, name),
            };
            let f = &mut families[i];
            match f.index.get(series) {
                Some(&j) => {
                    let old = &mut f.series[j].1;
                    *old = if SAME_IN_EVERY_PROCESS.contains(&name) {
                        old.max(v)
                    } else if ALL_UP.contains(&name) {
                        old.min(v)
                    } else {
                        *old + v
                    };
                }
                None => {
                    f.index.insert(series.to_string(), f.series.len());
                    f.series.push((series.to_string(), v));
                }
            }
        }
    }
    let mut out = String::new();
    for f in &families {
        for m in &f.meta {
            let _ = writeln!(out, "{m}");
        }
        for (s, v) in &f.series {
            let _ = writeln!(out, "{s} {}", number(*v));
        }
    }
    out
}

/// The counter and histogram series of an exposition (with their HELP and TYPE lines): what a
/// process that is gone keeps adding to the sum, so the summed counters never go down when a
/// roll or a crash replaces a process (a drop would read as a counter reset, and every
/// `increase()` over it would be wrong). Gauges go with the process.
pub fn counters_only(text: &str) -> String {
    let kinds: HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("# TYPE ")?.split_whitespace();
            Some((w.next()?, w.next()?))
        })
        .collect();
    let kept = |name: &str| {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| kinds.get(f) == Some(&"histogram"))
            })
            .unwrap_or(name);
        matches!(kinds.get(family), Some(&"counter" | &"histogram"))
    };
    let mut out = String::new();
    for line in text.lines() {
        let name = match line.strip_prefix("# ") {
            Some(rest) => match rest.split_whitespace().collect::<Vec<_>>()[..] {
                ["HELP" | "TYPE", name, ..] => name,
                _ => continue,
            },
            None => metric_name(line),
        };
        if !name.is_empty() && kept(name) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn family(families: &mut Vec<Family>, by_name: &mut HashMap<String, usize>, name: &str) -> usize {
    *by_name.entry(name.to_string()).or_insert_with(|| {
        families.push(Family {
            name: name.to_string(),
            ..Family::default()
        });
        families.len() - 1
    })
}

/// Whole numbers without a fraction (as the processes printed them), others as f64.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_identical_series_keeps_help_once_and_shared_settings_once() {
        let a = "# HELP ws_connections Open.\n# TYPE ws_connections gauge\nws_connections 3\n\
                 # HELP ws_closes_sent_total Closes.\n# TYPE ws_closes_sent_total counter\n\
                 ws_closes_sent_total{code=\"1000\"} 2\nws_closes_sent_total{code=\"1001\"} 1\n\
                 # HELP h Hist.\n# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.25\nh_count 2\n\
                 # HELP ws_send_queue_cap_bytes Cap.\n# TYPE ws_send_queue_cap_bytes gauge\nws_send_queue_cap_bytes 1048576\n\
                 # HELP ws_backplane_up Up.\n# TYPE ws_backplane_up gauge\nws_backplane_up 1\n"
            .to_string();
        let b = a
            .replace("ws_connections 3", "ws_connections 4")
            .replace("ws_backplane_up 1", "ws_backplane_up 0");
        let s = sum(&[a, b]);
        assert!(s.contains("\nws_connections 7\n"), "{s}");
        assert!(s.contains("ws_closes_sent_total{code=\"1000\"} 4\n"), "{s}");
        assert!(
            s.contains("h_bucket{le=\"+Inf\"} 4\nh_sum 0.5\nh_count 4\n"),
            "{s}"
        );
        assert!(s.contains("ws_send_queue_cap_bytes 1048576\n"), "{s}");
        assert!(s.contains("ws_backplane_up 0\n"), "{s}");
        assert_eq!(s.matches("# HELP ws_connections").count(), 1, "{s}");
        assert_eq!(s.matches("# TYPE h histogram").count(), 1, "{s}");
        assert!(s.starts_with("# HELP ws_connections Open.\n# TYPE ws_connections gauge\n"));
    }

    /// What a process that is gone leaves in the sum: its counters and histograms, never its
    /// gauges; summed with the live processes', every counter keeps what the gone one counted.
    #[test]
    fn a_gone_process_leaves_its_counters_and_histograms_only() {
        let gone = "# HELP ws_connections Open.\n# TYPE ws_connections gauge\nws_connections 3\n\
                    # HELP ws_closes_sent_total Closes.\n# TYPE ws_closes_sent_total counter\n\
                    ws_closes_sent_total{code=\"1012\"} 254\n\
                    # HELP h Hist.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.25\nh_count 2\n\
                    # HELP hits_count_total Hits.\n# TYPE hits_count_total counter\nhits_count_total 5\n";
        let kept = counters_only(gone);
        assert!(!kept.contains("ws_connections"), "{kept}");
        assert!(
            kept.contains(
                "# TYPE ws_closes_sent_total counter\nws_closes_sent_total{code=\"1012\"} 254\n"
            ),
            "{kept}"
        );
        assert!(
            kept.contains("h_bucket{le=\"+Inf\"} 2\nh_sum 0.25\nh_count 2\n"),
            "{kept}"
        );
        assert!(kept.contains("hits_count_total 5\n"), "{kept}");
        let live = "# HELP ws_connections Open.\n# TYPE ws_connections gauge\nws_connections 4\n\
                    # HELP ws_closes_sent_total Closes.\n# TYPE ws_closes_sent_total counter\n\
                    ws_closes_sent_total{code=\"1012\"} 0\n";
        let s = sum(&[live.to_string(), kept]);
        assert!(s.contains("\nws_connections 4\n"), "{s}");
        assert!(
            s.contains("ws_closes_sent_total{code=\"1012\"} 254\n"),
            "{s}"
        );
        assert!(s.contains("h_count 2\n"), "{s}");
    }
}
