//! `wstune pool`: the formula from the CLI, measured ratios on a real handler under load, a
//! sweep, the profile it writes, and bad input.

use crate::common;

use common::{code, json_of, run, serve, stderr};
use serde_json::Value;
use std::sync::{Mutex, MutexGuard};

/// Whether this kernel keeps per-thread scheduler statistics (CONFIG_SCHED_INFO, on in every
/// mainstream distribution's kernel). Without them the server cannot tell waiting for a core
/// from blocking, exports no `ws_handler_runqueue_seconds`, and the tests of that part say so
/// and skip it rather than fail on a kernel the feature does not claim to support. CI's
/// kernel has them, so there a missing file is a failure (a skip would pass a test that never
/// ran).
fn schedstat() -> bool {
    let ok = std::path::Path::new("/proc/thread-self/schedstat").exists();
    if !ok {
        common::skip(
            "run-queue",
            "no /proc/thread-self/schedstat on this kernel (CONFIG_SCHED_INFO)",
        );
    }
    ok
}

/// The tests that put load on a pool run one at a time: measured ratios count time spent
/// waiting for a core as blocking, so two load tests sharing a 2-core box would skew each other.
fn one_load_at_a_time() -> MutexGuard<'static, ()> {
    static LOAD: Mutex<()> = Mutex::new(());
    LOAD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn json(args: &[&str]) -> Value {
    ok_json(run(args))
}

/// The JSON a successful run printed.
fn ok_json(o: std::process::Output) -> Value {
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    json_of(&o)
}

#[test]
fn the_formula_from_given_times() {
    let _area = common::area("pool");
    let v = json(&[
        "pool",
        "--blocking-ms",
        "70",
        "--cpu-ms",
        "10",
        "--cores",
        "16",
        "--format",
        "json",
    ]);
    assert_eq!(v["advice"]["pool_size"], 128);
    assert_eq!(v["advice"]["io_workers"], 16);
    assert_eq!(v["chosen"], 128);
    let o = run(&[
        "pool",
        "--blocking-ms",
        "100",
        "--cpu-ms",
        "1",
        "--cores",
        "16",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("1616") && out.contains("pool of their own"),
        "{out}"
    );
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let _area = common::area("pool");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--blocking-ms", "-1", "--cpu-ms", "1"],
            "--blocking-ms -1",
        ),
        (
            &["--blocking-ms", "x", "--cpu-ms", "1"],
            "invalid value 'x'",
        ),
        (
            &["--blocking-ms", "1", "--cpu-ms", "1", "--cores", "0"],
            "--cores must be at least 1",
        ),
        (&["--blocking-ms", "5", "--cpu-ms", "0"], "infinite"),
        (&["--blocking-ms", "5"], "give --blocking-ms and --cpu-ms"),
        (&["--measure"], "--measure needs --handler"),
        (
            &[
                "--measure",
                "--handler",
                "cpu:10",
                "--write-profile",
                "/no/such/dir/p.yaml",
            ],
            "--write-profile /no/such/dir/p.yaml: cannot create a file",
        ),
        (
            &["--measure", "--url", "ws://127.0.0.1:9/"],
            "needs --admin",
        ),
        (&["--measure", "--handler", "echo"], "no pool to size"),
        (&["--measure", "--handler", "nap:3"], "unknown handler"),
        (
            &["--sweep", "--handler", "cpu:10", "--sizes", "2,zero"],
            "--sizes: 'zero'",
        ),
        (
            &[
                "--measure",
                "--url",
                "ws://127.0.0.1:9/",
                "--admin",
                "http://127.0.0.1:1",
            ],
            "cannot reach the admin endpoint http://127.0.0.1:1/metrics",
        ),
    ];
    for (args, want) in cases {
        let mut a = vec!["pool"];
        a.extend_from_slice(args);
        let o = run(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want '{want}' in: {err}");
    }
}

/// Numbers no host has: refused with exit 3, the flag and the reason, and nothing printed
/// (before, 1e300 / 1e-300 printed pool 18446744073709551615 and `"ratio": null`).
#[test]
fn absurd_numbers_are_refused_with_the_reason() {
    let _area = common::area("pool");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--blocking-ms", "1e300", "--cpu-ms", "1e-300"],
            "--blocking-ms 1e300: more than an hour",
        ),
        (
            &["--blocking-ms", "1000", "--cpu-ms", "1e-310"],
            "the ratio is not a finite number",
        ),
        (
            &["--blocking-ms", "inf", "--cpu-ms", "1"],
            "--blocking-ms inf",
        ),
        (
            &[
                "--blocking-ms",
                "1",
                "--cpu-ms",
                "1",
                "--cores",
                "18446744073709551615",
            ],
            "--cores 18446744073709551615: more than 4096 cores",
        ),
        (
            &["--blocking-ms", "1", "--cpu-ms", "1", "--cores", "4097"],
            "--cores 4097",
        ),
        // 64 + 1,000,000 x 64 threads: past the ceiling, with the likely cause.
        (
            &[
                "--blocking-ms",
                "1000",
                "--cpu-ms",
                "0.001",
                "--cores",
                "64",
            ],
            "past the 65536",
        ),
        // Refused before a local server starts one pool thread per core.
        (
            &["--measure", "--handler", "cpu:10", "--cores", "100000"],
            "--cores 100000",
        ),
    ];
    for (args, want) in cases {
        let mut a = vec!["pool", "--format", "json"];
        a.extend_from_slice(args);
        let o = run(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want '{want}' in: {err}");
        assert!(
            o.stdout.is_empty(),
            "{args:?}: printed {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    // The ceilings themselves are allowed: 4096 cores x (1 + 15) = 65536 threads.
    let v = json(&[
        "pool",
        "--blocking-ms",
        "15",
        "--cpu-ms",
        "1",
        "--cores",
        "4096",
        "--format",
        "json",
    ]);
    assert_eq!(v["advice"]["pool_size"], 65536);
    assert_eq!(v["advice"]["ratio"], 15.0);
}

#[test]
fn measured_ratio_of_a_blocking_handler_is_close_to_its_true_ratio() {
    let _area = common::area("pool");
    let _load = one_load_at_a_time();
    // 20 ms blocked per 1 ms of CPU: the measured ratio must land within 20% of 20.
    let v = json(&[
        "pool",
        "--measure",
        "--handler",
        "block:20+cpu:1000us",
        "--conns",
        "32",
        "--secs",
        "2",
        "--format",
        "json",
    ]);
    let m = &v["measured"];
    let ratio = m["ratio"].as_f64().unwrap();
    assert!((16.0..=24.0).contains(&ratio), "ratio {ratio}: {m:#}");
    // Time spent waiting for a core is measured (Linux schedstat) and is not blocking.
    if schedstat() {
        let queued = m["runqueue_ms"]
            .as_f64()
            .expect("runqueue_ms with schedstat");
        let parts = m["cpu_ms"].as_f64().unwrap() + queued + m["blocking_ms"].as_f64().unwrap();
        assert!(
            (parts - m["wall_ms"].as_f64().unwrap()).abs() < 0.01,
            "{m:#}"
        );
    }
    assert!(m["jobs"].as_u64().unwrap() > 50, "{m:#}");
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    let size = v["advice"]["pool_size"].as_f64().unwrap();
    assert!((size - (cores + ratio * cores)).abs() <= 1.0, "{v:#}");

    // CPU only: a small pool.
    let v = json(&[
        "pool",
        "--measure",
        "--handler",
        "cpu:1000us",
        "--conns",
        "16",
        "--secs",
        "2",
        "--format",
        "json",
    ]);
    assert!(v["measured"]["ratio"].as_f64().unwrap() < 0.5, "{v:#}");
    assert!(
        v["advice"]["pool_size"].as_f64().unwrap() <= cores + 1.0,
        "{v:#}"
    );
}

#[test]
fn waiting_for_a_busy_core_is_not_counted_as_blocking() {
    let _area = common::area("pool");
    if !schedstat() {
        return;
    }
    let _load = one_load_at_a_time();
    // A CPU-only handler pinned to one core beside a spinning process: every job's wall time
    // roughly doubles. Counted as blocking, that would call for a bigger pool; it must not.
    // taskset execs the shell, so the child killed on drop (panics included) is the spinner
    // itself; it holds none of the test's pipes.
    let _spinner = common::Kill(
        std::process::Command::new("taskset")
            .args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let o = std::process::Command::new("taskset")
        .args(["-c", "0", common::bin()])
        .args([
            "pool",
            "--measure",
            "--handler",
            "cpu:1000us",
            "--conns",
            "8",
        ])
        .args(["--secs", "2", "--format", "json"])
        .output()
        .unwrap();
    let v = ok_json(o);
    let m = &v["measured"];
    let (wall, cpu) = (
        m["wall_ms"].as_f64().unwrap(),
        m["cpu_ms"].as_f64().unwrap(),
    );
    assert!(
        wall > 1.5 * cpu,
        "the spinner took its share of the core: {m:#}"
    );
    assert!(m["runqueue_ms"].as_f64().unwrap() > 0.3 * cpu, "{m:#}");
    assert!(m["ratio"].as_f64().unwrap() < 0.3, "{m:#}");
    // (Counted as blocking, the ratio here would be ~0.8.)
    assert!(
        v["advice"]["pool_size"].as_u64().unwrap() <= 2,
        "one core, CPU-bound: {v:#}"
    );
    assert!(
        v["advice"]["notes"][1].as_str().unwrap().contains("waited"),
        "the note says the cores were busy: {v:#}"
    );
}

/// The default load (256 clients, all connecting at once from loopback) is more than the
/// pending-handshake cap the local server derives for its size (a quarter of 320): the sweep's
/// own clients must not be refused with 503, which made `pool --sweep` fail with its defaults.
#[test]
fn a_sweep_at_the_default_256_clients_connects_them_all() {
    let _area = common::area("pool");
    let _load = one_load_at_a_time();
    let v = json(&[
        "pool",
        "--sweep",
        "--handler",
        "block:1",
        "--sizes",
        "4",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    let sweep = v["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 1, "{v:#}");
    // Four threads sleeping 1 ms each serve up to ~4,000/s; the run must have carried load.
    assert!(sweep[0]["throughput"].as_f64().unwrap() > 500.0, "{v:#}");
}

#[test]
fn a_sweep_finds_where_more_threads_stop_helping_and_writes_a_profile_serve_accepts() {
    let _area = common::area("pool");
    let _load = one_load_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tuned.yaml");
    let v = json(&[
        "pool",
        "--sweep",
        "--handler",
        "block:50",
        "--sizes",
        "1,8",
        "--conns",
        "8",
        "--secs",
        "2",
        "--profile",
        "10k",
        "--write-profile",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let sweep = v["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 2);
    let t1 = sweep[0]["throughput"].as_f64().unwrap();
    let t8 = sweep[1]["throughput"].as_f64().unwrap();
    // One thread sleeping 50 ms serves 20/s; eight serve the 8 clients at ~160/s.
    assert!(t1 > 10.0 && t1 < 30.0, "{sweep:?}");
    assert!(t8 > 5.0 * t1, "{sweep:?}");
    assert!(
        sweep[0]["queue_max"].as_f64().unwrap() >= 5.0,
        "a queue builds at size 1: {sweep:?}"
    );
    assert_eq!(v["knee"], 8);
    assert_eq!(v["chosen"], 8);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("offload_pool_size: 8"), "{text}");
    assert!(text.contains("# wstune tuning profile"), "comments kept");
    // serve accepts it and runs with the pool it carries.
    let srv = serve(&["--profile", out.to_str().unwrap(), "--admin", "off"]);
    assert!(
        srv.head
            .iter()
            .any(|l| l.contains("offload pool") && l.contains(" 8 ")),
        "serve shows the pool size from the written profile: {:#?}",
        srv.head
    );
}

#[test]
fn measures_a_running_server_through_its_admin_endpoint() {
    let _area = common::area("pool");
    let _load = one_load_at_a_time();
    let srv = serve(&[
        "--profile",
        "10k",
        "--handler",
        "block:20+cpu:1000us",
        "--offload-pool",
        "4",
    ]);
    let (port, admin) = (srv.port, srv.admin);
    let url = format!("ws://127.0.0.1:{port}/");
    let adm = format!("http://127.0.0.1:{admin}");
    let o = run(&[
        "pool",
        "--measure",
        "--url",
        &url,
        "--admin",
        &adm,
        "--conns",
        "16",
        "--secs",
        "2",
        "--format",
        "json",
    ]);
    drop(srv);
    let v = ok_json(o);
    let ratio = v["measured"]["ratio"].as_f64().unwrap();
    assert!((16.0..=24.0).contains(&ratio), "{v:#}");
    // The run-queue wait comes through /metrics too.
    assert_eq!(
        v["measured"]["runqueue_ms"].as_f64().is_some(),
        schedstat(),
        "{v:#}"
    );
}
