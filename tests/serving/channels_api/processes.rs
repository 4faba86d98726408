//! Channels across processes: two Redis nodes, the `--processes` supervisor relaying to every
//! process, a publish a process took but did not answer, and a restarted process's API key.

use crate::common;

use super::{connect, curl, json, nothing_more, path, publish, secrets, subscribe};
use common::tungstenite::next_text;
use common::{free_port, Served};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_publish_on_one_redis_node_reaches_subscribers_on_the_other() {
    let rp = free_port();
    let Some(_r) = common::redis(rp) else { return };
    let d = secrets();
    let url = format!("redis://127.0.0.1:{rp}/0");
    let node = || {
        common::serve(&[
            "--profile",
            "10k",
            "--app",
            "channels",
            "--cluster",
            &url,
            "--api-key-file",
            &path(&d, "api-key"),
        ])
    };
    let (a, b) = (node(), node());
    for n in [&a, &b] {
        common::wait_until("the backplane up", Duration::from_secs(20), || {
            common::get(n.admin, "/healthz").contains("\"backplane\":\"up\"")
        });
    }
    let mut on_a = connect(a.port, "", None).await.unwrap();
    let mut on_b = connect(b.port, "", None).await.unwrap();
    assert!(subscribe(&mut on_a, "prices").await.contains("subscribed"));
    assert!(subscribe(&mut on_b, "prices").await.contains("subscribed"));
    let (code, body) = publish(&a, &d, r#"{"channel":"prices","data":7}"#);
    assert_eq!(
        (code, json(&body)),
        (
            200,
            serde_json::json!({"queued": 1, "dropped": 0, "delivered": 1, "backplane": "up"})
        )
    );
    let (code, _) = publish(&a, &d, r#"{"channel":"prices","data":8}"#);
    assert_eq!(code, 200);
    // Each node's subscriber gets each message once (the next one is the next publish).
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"prices","data":7}"#
        );
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"prices","data":8}"#
        );
        nothing_more(ws).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_the_supervisor_reaches_subscribers_in_every_process() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    // Subscribers until both processes hold some (the kernel spreads connections by hash), so
    // the publish must cross the relay to reach them all.
    let mut subs = Vec::new();
    let per_process = |s: &Served| -> Vec<u64> {
        let h = json(common::body(&common::get(s.admin, "/healthz")));
        h["process"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["connections"].as_u64().unwrap_or(0))
            .collect()
    };
    while subs.len() < 4 || per_process(&s).contains(&0) {
        assert!(
            subs.len() < 64,
            "every connection went to one process: {:?}",
            per_process(&s)
        );
        let mut ws = connect(s.port, "", None).await.unwrap();
        assert!(subscribe(&mut ws, "a").await.contains("subscribed"));
        subs.push(ws);
    }
    let n = subs.len() as u64;
    let h = d.path().join("auth-header");
    let (code, body) = curl(s.admin, "GET", "/api/channels", Some(&h), "");
    let v = json(&body);
    assert_eq!(
        (code, v["channels"]["a"].as_u64(), v["processes"].as_u64()),
        (200, Some(n), Some(2)),
        "{body}"
    );
    let (code, body) = curl(
        s.admin,
        "GET",
        "/api/channels?prefix=a&limit=1",
        Some(&h),
        "",
    );
    assert_eq!(
        (code, json(&body)["channels"]["a"].as_u64()),
        (200, Some(n)),
        "{body}"
    );
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":"all"}"#);
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["process"].is_u64(), "{body}");
    let (code, _) = publish(&s, &d, r#"{"channel":"a","data":"again"}"#);
    assert_eq!(code, 200);
    // Everyone, in every process, once: the message after the first is the second publish.
    for ws in subs.iter_mut() {
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"a","data":"all"}"#
        );
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"a","data":"again"}"#
        );
    }
    for ws in subs.iter_mut() {
        nothing_more(ws).await;
    }
    // Without the key the supervisor refuses too.
    let (code, _) = curl(
        s.admin,
        "POST",
        "/api/publish",
        None,
        r#"{"channel":"a","data":1}"#,
    );
    assert_eq!(code, 401);
    assert_eq!(
        s.metric(r#"ws_supervisor_api_requests_total{route="publish",code="401"}"#),
        1.0
    );
    // The supervisor's own polling of its processes (every /healthz and /metrics above) is
    // not traffic: the summed counter holds the forwarded API calls only.
    let text = s.get("/metrics");
    for route in ["healthz", "metrics"] {
        assert!(
            !text.contains(&format!(r#"ws_api_requests_total{{route="{route}""#)),
            "{route} scrapes counted: {text}"
        );
    }
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="200"}"#),
        2.0
    );
}

/// Sends SIGCONT to a process on drop, so a failing test never leaves one stopped.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is the test's own server process.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// A process that took a publish and stopped answering is not bypassed by a retry on another
/// (which would deliver it twice once the first resumes): the supervisor answers 504 "may or
/// may not have been delivered", and after SIGCONT every subscriber gets the message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_the_process_took_but_did_not_answer_is_a_504_not_a_duplicate() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    let health = |s: &Served| json(common::body(&common::get(s.admin, "/healthz")));
    let mut subs = Vec::new();
    while subs.len() < 2
        || health(&s)["process"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["connections"].as_u64().unwrap_or(0) == 0)
    {
        assert!(subs.len() < 64, "every connection went to one process");
        let mut ws = connect(s.port, "", None).await.unwrap();
        assert!(subscribe(&mut ws, "a").await.contains("subscribed"));
        subs.push(ws);
    }
    // The supervisor hands a publish to the lowest index that is up: process 0.
    let pid0 = health(&s)["process"][0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: as in Resume::drop.
    unsafe { libc::kill(pid0, libc::SIGSTOP) };
    let resume = Resume(pid0);
    let t0 = std::time::Instant::now();
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":"once"}"#);
    assert_eq!(code, 504, "{body}");
    assert!(
        body.contains("may or may not have been delivered"),
        "{body}"
    );
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
    drop(resume);
    for ws in subs.iter_mut() {
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"a","data":"once"}"#
        );
    }
    for ws in subs.iter_mut() {
        nothing_more(ws).await;
    }
}

/// A restarted server process expects the key the supervisor presents: the supervisor hands
/// down its own copy (in the process's environment only) instead of letting the process
/// re-read a key file that may have changed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_agrees_with_the_supervisor_on_the_api_key() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    let health = |s: &Served| json(common::body(&common::get(s.admin, "/healthz")));
    let pid0 = health(&s)["process"][0]["pid"].as_i64().unwrap() as i32;
    // The file is rotated; process 0 dies and is restarted.
    std::fs::write(
        d.path().join("api-key"),
        "a-rotated-key-nobody-has-yet-0000\n",
    )
    .unwrap();
    // SAFETY: kill has no memory preconditions; the pid is the test's own server process.
    unsafe { libc::kill(pid0, libc::SIGKILL) };
    common::wait_until("process 0 restarted", Duration::from_secs(20), || {
        let h = health(&s);
        let p = &h["process"][0];
        p["state"] == "up" && p["pid"].as_i64() != Some(pid0 as i64)
    });
    // The supervisor hands a publish to process 0, presenting the key it read at start.
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":1}"#);
    assert_eq!(
        (code, json(&body)["process"].as_u64()),
        (200, Some(0)),
        "{body}"
    );
    let child = health(&s)["process"][0]["pid"].as_i64().unwrap();
    let env = std::fs::read(format!("/proc/{child}/environ")).unwrap();
    assert!(String::from_utf8_lossy(&env).contains("WSTUNE_API_KEY="));
    let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("--api-key-file"));
}
