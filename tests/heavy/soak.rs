//! The churn soak (bench/soak.sh) for 90 seconds at CI's size: 1,000 connections, 50 closes and
//! reconnects per second (close frames, resets, bare FINs), echo, broadcasts and
//! permessage-deflate on half, against the test build of `wstune serve`. The script's own
//! criteria decide: the gauge equals the kernel's count at every sample, RSS flat after
//! warm-up, fds back to the baseline, a clean server log, no lost client. The 10-minute,
//! 10,000-connection run and its chart are in RELIABILITY.md#soak.

use crate::common;

use std::path::Path;
use std::process::Command;

#[test]
fn churn_soak_at_ci_size_keeps_memory_fds_and_the_gauge_true() {
    let _area = common::area("soak");
    let has = |cmd: &str| {
        Command::new("sh")
            .args(["-c", cmd])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("python3 -c 'import websockets.asyncio.client'")
        || !has("command -v ss && command -v curl")
    {
        common::skip(
            "soak",
            "python3 websockets (pip install -r tests/requirements.txt), ss or curl is missing",
        );
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = Command::new("bash")
        .arg(root.join("bench/soak.sh"))
        .arg("1.5")
        // RSS judged from 20 s on. With glibc's malloc this size grew 7-9 % from there
        // (fragmentation under deflate churn, RELIABILITY.md#soak); with jemalloc
        // 1.6 % in a debug build (0 in a release one). 5 % fails the first and leaves the
        // second room for a slower CI machine; the 10-minute run applies 2 %.
        .env("WARMUP_SECS", "20")
        .env("RSS_MAX_GROWTH_PCT", "5")
        // Python's websockets, not bench's wssoak: an independent client (its own framing and
        // zlib) checks the server here, and 50 reconnects/s needs no release build of ours.
        .env("CLIENT", "python")
        .env("RETURN_SECS", "0")
        .env("CONNS", "1000")
        .env("CHURN", "50")
        .env("BIN", common::bin())
        .env("OUT", out.path())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "the soak failed:\n{text}");
    assert!(text.contains("soak passed"), "{text}");
    // The samples are really there: at least 6 (every 10 s), each with gauge == real == 1000.
    let csv = std::fs::read_to_string(out.path().join("samples.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(rows.len() >= 6, "{csv}");
    for r in rows {
        let f: Vec<&str> = r.split(',').collect();
        assert_eq!((f[3], f[4]), ("1000", "1000"), "{csv}");
    }
    assert!(out.path().join("chart.svg").exists());
}
