//! `bench deflate --contexts`: each connection's contexts measured, and what does not fit refused.

use crate::common;

#[test]
fn bench_deflate_contexts_measures_each_connections_contexts_and_refuses_what_does_not_fit() {
    // The 100k profile's settings: the estimate is zlib's small contexts (46 KiB), and the
    // first pass (contexts created) costs page faults that the second (reused) does not.
    let o = common::wstune(&[
        "bench",
        "deflate",
        "--contexts",
        "2000",
        "--sizes",
        "1k",
        "--window-bits",
        "11",
        "--mem-level",
        "4",
        "-f",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["connections"], 2000);
    assert_eq!(r["estimate_bytes_per_conn"], 46 * 1024);
    let (first, again) = (&r["passes"][0], &r["passes"][1]);
    assert_eq!(
        (first["pass"].as_str(), again["pass"].as_str()),
        (Some("first"), Some("again"))
    );
    assert!(
        first["faults_per_conn"].as_f64().unwrap() > again["faults_per_conn"].as_f64().unwrap(),
        "{r}"
    );
    assert!(
        first["resident_bytes_per_conn"].as_f64().unwrap() > 16.0 * 1024.0,
        "{r}"
    );
    // Ten million 15/8 connections do not fit this host: refused before anything is built.
    let o = common::wstune(&["bench", "deflate", "--contexts", "10000000"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("more than half of the") && err.contains("give fewer"),
        "{err}"
    );
}
