use super::http::find_end;
use super::*;
use crate::watch::advice::Advice;
use crate::watch::frame::{CounterRow, GaugeRow, ListenerRow, SCHEMA};
use std::collections::BTreeMap;

fn frame(time: &str, overflows: u64, firing: bool) -> Frame {
    Frame {
        schema: SCHEMA.into(),
        time: time.into(),
        elapsed_s: 1.0,
        interval_s: 1.0,
        listeners: vec![
            ListenerRow {
                local: "127.0.0.1:9001".into(),
                queue: 2,
                backlog: 1,
                fill: 1.0,
                full: true,
                states: None,
                queue_unavailable: None,
            },
            // An SO_REUSEPORT sibling: one series for the address.
            ListenerRow {
                local: "127.0.0.1:9001".into(),
                queue: 0,
                backlog: 1,
                fill: 0.0,
                full: false,
                states: None,
                queue_unavailable: None,
            },
            ListenerRow {
                local: "[::1]:9\"\\\n".into(),
                queue: 0,
                backlog: 5,
                fill: 0.0,
                full: false,
                states: None,
                queue_unavailable: None,
            },
        ],
        somaxconn: Some(4096),
        totals: None,
        connections_age_s: None,
        counters: vec![CounterRow {
            name: "TcpExt.ListenOverflows".into(),
            total: overflows,
            delta: 3,
            per_s: 3.0,
            check: Some("linux.counter.listen_overflows".into()),
            turned: firing,
        }],
        gauges: vec![GaugeRow {
            name: "orphans".into(),
            value: 3,
            mark: 100,
            mark_is: "x".into(),
            limit: Some(400),
            check: "linux.sockstat.orphans".into(),
            turned: false,
        }],
        cpus: Vec::new(),
        ports: None,
        process: None,
        server: None,
        advice: if firing {
            vec![Advice {
                id: "linux.counter.listen_overflows".into(),
                title: "t".into(),
                what: format!("TcpExt.ListenOverflows +3 (total {overflows})"),
                why: "w".into(),
                fix: vec!["sysctl -w net.core.somaxconn=65535".into()],
                current: None,
                target: None,
            }]
        } else {
            Vec::new()
        },
        unavailable: BTreeMap::new(),
        notes: Vec::new(),
    }
}

#[test]
fn metrics_carry_the_frame_with_escaped_labels_and_one_series_per_address() {
    let hub = Hub::new(Duration::from_secs(1));
    let mut v = Headless::new(hub.clone());
    v.show(&frame("2026-01-01T00:00:01Z", 10, true)).unwrap();
    let m = metrics(&hub.snapshot());
    assert!(m.contains("wstune_watch_up 1\n"), "{m}");
    assert!(m.contains("wstune_watch_frames_total 1\n"), "{m}");
    assert!(
        m.contains("wstune_watch_listener_queue{listener=\"127.0.0.1:9001\"} 2\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_listener_backlog{listener=\"127.0.0.1:9001\"} 2\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_listener_full{listener=\"127.0.0.1:9001\"} 1\n"),
        "{m}"
    );
    assert_eq!(m.matches("wstune_watch_listener_full{").count(), 2, "{m}");
    assert!(
        m.contains("wstune_watch_listener_full{listener=\"[::1]:9\\\"\\\\\\n\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_kernel_stat_total{name=\"TcpExt.ListenOverflows\"} 10\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_value_mark{name=\"orphans\"} 100\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_value_limit{name=\"orphans\"} 400\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_advice_active{id=\"linux.counter.listen_overflows\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("wstune_watch_advice_active{id=\"linux.sockstat.orphans\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains(
            "wstune_watch_advice_intervals_total{id=\"linux.counter.listen_overflows\"} 1\n"
        ),
        "{m}"
    );
    // Every family once.
    for l in m.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert_eq!(m.matches(&format!("{l}\n")).count(), 1, "{l}");
    }
}

#[test]
fn events_keep_one_line_per_check_while_it_keeps_firing() {
    let hub = Hub::new(Duration::from_secs(1));
    let mut v = Headless::new(hub.clone());
    v.show(&frame("2026-01-01T00:00:01Z", 10, true)).unwrap();
    v.show(&frame("2026-01-01T00:00:02Z", 13, true)).unwrap();
    v.show(&frame("2026-01-01T00:00:03Z", 13, false)).unwrap();
    let e = events(&hub.snapshot());
    let lines: Vec<serde_json::Value> = e
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{e}");
    assert_eq!(lines[0]["id"], "linux.counter.listen_overflows");
    assert_eq!(lines[0]["count"], 2);
    assert_eq!(lines[0]["first_seen"], "2026-01-01T00:00:01Z");
    assert_eq!(lines[0]["last_seen"], "2026-01-01T00:00:02Z");
    assert_eq!(lines[0]["active"], false);
    assert_eq!(lines[0]["fix"][0], "sysctl -w net.core.somaxconn=65535");
}

#[test]
fn requests_are_routed_and_bad_ones_refused() {
    let hub = Hub::new(Duration::from_secs(1));
    let get = |h: &str| respond(h.as_bytes(), &hub);
    assert_eq!(get("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").code, 200);
    assert_eq!(get("GET /metrics?x=1 HTTP/1.0\r\n\r\n").code, 200);
    assert_eq!(get("GET /events HTTP/1.1\r\n\r\n").code, 200);
    assert_eq!(get("GET / HTTP/1.1\r\n\r\n").code, 404);
    assert_eq!(get("GET /metricsx HTTP/1.1\r\n\r\n").code, 404);
    let post = get("POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(post.code, 405);
    assert!(post.headers.contains(&("Allow", "GET")));
    assert_eq!(get("GARBAGE\r\n\r\n").code, 400);
    assert_eq!(get("GET metrics HTTP/1.1\r\n\r\n").code, 400);
    assert_eq!(get("GET /metrics SPDY/3\r\n\r\n").code, 400);
}

#[test]
fn healthz_turns_503_when_frames_stop() {
    let hub = Hub::new(Duration::from_millis(20));
    Headless::new(hub.clone())
        .show(&frame("2026-01-01T00:00:01Z", 1, false))
        .unwrap();
    assert_eq!(respond(b"GET /healthz HTTP/1.1\r\n\r\n", &hub).code, 200);
    std::thread::sleep(Duration::from_millis(80));
    let r = respond(b"GET /healthz HTTP/1.1\r\n\r\n", &hub);
    assert_eq!(r.code, 503);
    assert!(r.body.contains("stale"), "{}", r.body);
    assert!(metrics(&hub.snapshot()).contains("wstune_watch_up 0\n"));
}

#[test]
fn a_signal_ends_the_wait() {
    let hub = Hub::new(Duration::from_secs(1));
    let mut v = Headless::new(hub.clone());
    hub.stop();
    let t = Instant::now();
    assert_eq!(v.wait(t + Duration::from_secs(30)).unwrap(), Flow::Stop);
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn the_head_ends_at_the_blank_line() {
    assert_eq!(find_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
    assert_eq!(find_end(b"GET / HTTP/1.1\n\n"), Some(16));
    assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
}
