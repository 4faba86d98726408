//! Network faults under the real `wstune serve`, in a pair of network namespaces joined by a
//! veth (tests/scripts/faults.sh; nftables and the tbf qdisc make the faults, there is no netem):
//! a blackhole under 1,000 half-open connections, a 1 Mbit/s link under a broadcast, and an
//! RST storm plus a SYN flood against a small backlog. Figures in RELIABILITY.md#network-faults.

use crate::common;

use common::{stderr, stdout};
use std::path::Path;
use std::process::{Command, Output};

/// Run one case of faults.sh inside fresh namespaces; None (a recorded skip) without root or
/// without nft/tc.
fn case(name: &str) -> Option<Output> {
    for tool in ["nft", "tc", "ip", "curl"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            common::skip(
                "network faults",
                &format!("{tool} is not installed (apt-get install nftables iproute2 curl)"),
            );
            return None;
        }
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts");
    let script = format!(
        "export CASE={name} FAULTS_DIR={d}; source {d}/faults.sh",
        d = dir.display()
    );
    common::in_netns(&script)
}

/// The `key=value` of the first line tagged `tag`.
fn field(o: &Output, tag: &str, key: &str) -> String {
    let out = stdout(o);
    let line = out
        .lines()
        .find(|l| l.starts_with(tag))
        .unwrap_or_else(|| panic!("no {tag} line:\n{out}\nstderr:\n{}", stderr(o)));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .to_string()
}

fn num(o: &Output, tag: &str, key: &str) -> i64 {
    let v = field(o, tag, key);
    v.parse()
        .unwrap_or_else(|_| panic!("{key}={v} is not a number:\n{}", stdout(o)))
}

/// The JSON after a tag (a client's summary).
fn json(o: &Output, tag: &str) -> serde_json::Value {
    let out = stdout(o);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no {tag} line:\n{out}\nstderr:\n{}", stderr(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{tag}: {e}: {line}"))
}

#[test]
fn blackholed_clients_are_closed_by_the_heartbeat_and_the_server_keeps_serving() {
    let _area = common::area("faults");
    let Some(o) = case("blackhole") else { return };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(num(&o, "RESULT", "ready"), 1000, "{all}");
    // Heartbeat interval 2 s + timeout 3 s; the sweep runs once a second: 6 s at most.
    let ms = field(&o, "RESULT", "closed_all_ms");
    assert!(
        ms.parse::<u64>().is_ok_and(|ms| ms <= 6_000),
        "not all 1,000 half-open connections were closed within interval + timeout: {all}"
    );
    // Every one of them by the heartbeat or by backpressure (broadcasts kept going to them),
    // each counted once (the sweeps used to count a dead peer every second until it was gone).
    assert_eq!(
        num(&o, "RESULT", "heartbeat_closes") + num(&o, "RESULT", "backpressure_closes"),
        1000,
        "{all}"
    );
    assert_eq!(num(&o, "RESULT", "gauge_after"), 0, "{all}");
    assert_eq!(num(&o, "RESULT", "deflate_after"), 0, "{all}");
    assert_eq!(num(&o, "RESULT", "log_errors"), 0, "{all}");
    // Memory: closing them did not grow it further (the allocator keeps what it had).
    let (connected, after) = (
        num(&o, "RESULT", "rss_connected_kib"),
        num(&o, "RESULT", "rss_after_kib"),
    );
    assert!(
        after <= connected + connected / 10,
        "RSS grew after the closes: {all}"
    );
    // The loopback client's echo never waited on a write to a dead peer.
    let p = json(&o, "PROBE");
    assert_eq!(p["fails"], 0, "{all}");
    assert!(p["echoes"].as_u64().unwrap() > 100, "{all}");
    assert!(p["max_ms"].as_f64().unwrap() < 1000.0, "{all}");
}

#[test]
fn a_slow_link_gets_its_consumers_closed_and_fast_clients_keep_their_latency() {
    let _area = common::area("faults");
    let Some(o) = case("slow") else { return };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    // All 20 consumers behind the 1 Mbit/s link were closed for backpressure.
    assert!(num(&o, "RESULT", "backpressure_closes") >= 20, "{all}");
    assert_eq!(num(&o, "RESULT", "log_errors"), 0, "{all}");
    let fast = json(&o, "FAST");
    let published = json(&o, "PUB")["published"].as_u64().unwrap();
    assert!(published > 100, "{all}");
    assert_eq!(fast["still_open"], 20, "no fast client was closed: {all}");
    assert_eq!(
        fast["received"].as_u64().unwrap(),
        published * 20,
        "every fast client got every broadcast: {all}"
    );
    assert!(
        fast["p99_ms"].as_f64().unwrap() < 500.0,
        "fast clients kept their latency: {all}"
    );
}

#[test]
fn rst_storm_and_syn_flood_show_in_check_watch_and_established_clients_keep_being_served() {
    let _area = common::area("faults");
    let Some(o) = case("flood") else { return };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let rst = json(&o, "RST");
    assert!(
        rst["reset_after_upgrade"].as_u64().unwrap() > 100
            && rst["reset_mid_handshake"].as_u64().unwrap() > 100,
        "{all}"
    );
    assert!(json(&o, "SYN")["syns"].as_u64().unwrap() > 1000, "{all}");
    // `check --watch` saw the listen drops grow, and says so (fail, with the growth).
    let check = json(&o, "CHECK");
    let drops = common::element(&check["results"], "id", "linux.counter.listen_drops");
    assert_eq!(drops["status"], "fail", "{drops:#}");
    assert!(
        drops["note"].as_str().unwrap_or("").starts_with('+'),
        "{drops:#}"
    );
    // The established clients: all 100 still open, the loopback echo never failed.
    let hold = json(&o, "HOLD");
    assert_eq!(hold["opened"], 100, "{all}");
    assert_eq!(hold["still_open"], 100, "{all}");
    let p = json(&o, "PROBE");
    assert_eq!(p["fails"], 0, "{all}");
    assert!(p["max_ms"].as_f64().unwrap() < 1000.0, "{all}");
    assert_eq!(num(&o, "RESULT", "log_errors"), 0, "{all}");
}
