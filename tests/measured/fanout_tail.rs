//! Fan-out and tail (bench/results/2026-12-01-fanout-tail.md): the self-test reports latency from
//! the actual send beside the scheduled one, and the generator's headroom, so neither a generator running behind nor a
//! stalled server can pass for the other. The real binary, real sockets on 127.0.0.1.

use crate::common;

use common::{json_of, run, serve};
use serde_json::Value;

fn echo_rate(port: u16, format: &str) -> std::process::Output {
    let url = format!("ws://127.0.0.1:{port}/");
    run(&[
        "selftest",
        "--url",
        &url,
        "--profile",
        "10k",
        "--conns",
        "20",
        "--rate",
        "10",
        "--secs",
        "2",
        "--format",
        format,
    ])
}

fn ms(v: &Value, field: &str, p: &str) -> f64 {
    v[field][p]
        .as_f64()
        .unwrap_or_else(|| panic!("{field}.{p} missing: {v:#}"))
}

#[test]
fn echo_rate_reports_service_latency_beside_the_scheduled_one() {
    let _area = common::area("fanout_tail");
    let s = serve(&["--profile", "10k"]);
    let o = echo_rate(s.port, "json");
    // Exit 2 is a missed p99 target on a busy machine, 4 a machine too noisy to judge: not
    // what this test is about.
    assert!(matches!(o.status.code(), Some(0 | 2 | 4)), "{o:?}");
    let v = json_of(&o);
    let sc = &v["scenarios"][0];
    let service = &sc["service_latency_ms"];
    let count = service["count"]
        .as_u64()
        .expect("a service latency summary");
    // Every echo is in both histograms (warm-up excluded from both).
    assert_eq!(count, sc["latency_ms"]["count"].as_u64().unwrap(), "{sc:#}");
    assert!(count > 0);
    // Service counts from the send, scheduled from when the message was due (never later than
    // the send), so service is never the larger: per message, hence at every percentile.
    for p in ["p50", "p99", "max"] {
        assert!(
            ms(sc, "service_latency_ms", p) <= ms(sc, "latency_ms", p) + 0.01,
            "{p}: {sc:#}"
        );
    }

    // The text report names both, and the generator's headroom.
    let o = echo_rate(s.port, "table");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("from the send: p50"), "{text}");
    assert!(text.contains("generator headroom"), "{text}");
}

#[test]
fn a_stalled_server_shows_in_the_service_latency_too() {
    let _area = common::area("fanout_tail");
    // One offload thread taking 100 ms per message against 200 msgs/s offered: the server, not
    // the generator, is late, and the latency from the actual send says so as loudly as the
    // scheduled one (a generator running behind would raise only the scheduled figure).
    let s = serve(&[
        "--profile",
        "10k",
        "--handler",
        "block:100",
        "--offload-pool",
        "1",
    ]);
    let o = echo_rate(s.port, "json");
    let v = json_of(&o);
    let sc = &v["scenarios"][0];
    let p99 = ms(sc, "service_latency_ms", "p99");
    assert!(p99 > 500.0, "service p99 {p99} ms: {sc:#}");
}
