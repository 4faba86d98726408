//! docs/reference/metrics.md: every metric family `wstune serve` (and any server built on
//! embedded-server) exposes on the admin listener's `/metrics`, with its type, its labels and
//! its help text, generated from a real server's exposition so the page cannot drift from it.
//! The test below renders the exposition of a fresh server (`embedded_server::admin::render`,
//! what `/metrics` answers) and compares the page; `UPDATE_SNAPSHOTS=1 cargo test --lib
//! metrics_doc` rewrites it.

use std::fmt::Write;

/// One metric family of an exposition.
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: Vec<String>,
}

/// The families of a Prometheus text exposition, in its order, with the label names their
/// samples carry (`le` of a histogram's buckets left out: it is the histogram's own).
fn families(text: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_string(),
                kind: String::new(),
                help: help.to_string(),
                labels: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, kind))) = (out.last_mut(), rest.split_once(' ')) {
                f.kind = kind.to_string();
            }
        } else if let Some((_, labels)) = line.split_once('{') {
            let Some(f) = out.last_mut() else { continue };
            for pair in labels.split('}').next().unwrap_or("").split(',') {
                if let Some((label, _)) = pair.split_once('=') {
                    if label != "le" && !f.labels.iter().any(|l| l == label) {
                        f.labels.push(label.to_string());
                    }
                }
            }
        }
    }
    out
}

/// The whole of docs/reference/metrics.md, from a server's `/metrics` text.
pub fn metrics_markdown(exposition: &str) -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         What `wstune serve` exposes at `http://ADMIN/metrics` (the admin listener, `--admin`), \
         in the Prometheus text format: every metric family, its type, its labels and its help \
         text. Under `serve --processes N` the supervisor sums the processes' series into one \
         exposition of the same families (a per-connection setting such as \
         `ws_send_queue_cap_bytes` is reported once). The `ws_backplane_*` families appear only \
         on a `serve --cluster` node. `wstune check -f prometheus` writes the \
         host's check results as `wstune_check_*` families instead ([Checking a \
         host](../check.md)); `deploy/prometheus/` holds alerting rules over both, and \
         `deploy/grafana/` a dashboard.\n\n\
         Generated from the exposition of a freshly started cluster node (`embedded_server::admin::render`, \
         what `/metrics` answers) by `src/report/metrics_doc.rs`; a unit test fails when this \
         page is stale, and `UPDATE_SNAPSHOTS=1 cargo test --lib metrics_doc` rewrites it. A \
         labelled family lists only the label values it has seen, so some appear once traffic \
         does.\n\n\
         | metric | type | labels | meaning |\n|---|---|---|---|\n",
    );
    for f in families(exposition) {
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            f.name,
            f.kind,
            labels.join(", "),
            f.help.replace('|', "\\|").replace('<', "\\<")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a fresh server's `/metrics` answers.
    fn exposition() -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            // As a `--cluster` node, so the backplane's families are listed too.
            let metrics = embedded_server::metrics::Metrics::default();
            metrics
                .backplane_up
                .store(1, std::sync::atomic::Ordering::Relaxed);
            let hub = embedded_server::Hub::new(
                embedded_server::ServerConfig::default(),
                std::sync::Arc::new(metrics),
            );
            embedded_server::admin::render(&hub)
        })
    }

    /// An operator writing an alert looks a metric up here: the page lists every family the
    /// server exposes, as it is now.
    #[test]
    fn metrics_doc_is_current() {
        crate::report::book::assert_current(
            "docs/reference/metrics.md",
            &metrics_markdown(&exposition()),
            "a metric was added, removed or reworded",
            "metrics_doc",
        );
    }

    #[test]
    fn metrics_doc_reads_families_types_and_labels() {
        let text = "# HELP a_total Things.\n# TYPE a_total counter\na_total{code=\"1000\"} 1\n\
                    # HELP h Latency.\n# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_sum 0\nh_count 1\n";
        let md = metrics_markdown(text);
        assert!(
            md.contains("| `a_total` | counter | `code` | Things. |"),
            "{md}"
        );
        assert!(md.contains("| `h` | histogram |  | Latency. |"), "{md}");
        let real = metrics_markdown(&exposition());
        assert!(real.contains("| `ws_connections` | gauge |"), "{real}");
    }
}
