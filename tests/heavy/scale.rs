//! `serve --self-test` at the profile's size and its honest verdict: the real binary, real
//! sockets on 127.0.0.1, the host check against captured trees (`--host-root`).

use crate::common;

use common::{fixture, json_of, run};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The 10k profile held to `conns` connections and `rate` msgs/s per client, so a full-size
/// run fits a CI machine.
fn small_profile(dir: &Path, conns: usize, rate: u32) -> PathBuf {
    let text = format!(
        "extends: 10k\nname: tiny\nconnections: {conns}\nselftest:\n  rate_per_client: {rate}\n"
    );
    let p = dir.join("tiny.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

fn self_test(profile: &Path, host: &str, extra: &[&str]) -> Output {
    self_test_at(profile, &fixture(host), extra)
}

/// The same against the captured host tree at `root`.
fn self_test_at(profile: &Path, root: &Path, extra: &[&str]) -> Output {
    let root = root.to_str().unwrap();
    let mut args = vec![
        "serve",
        "--self-test",
        "--profile",
        profile.to_str().unwrap(),
        "--host-root",
        root,
        "--scenario",
        "idle",
        "--scenario",
        "storm",
        "--secs",
        "1",
        // These tests are about sizing and the verdict's parts; the test suite keeps the host
        // busy, and noise has tests of its own (tests/load/selftest.rs).
        "--accept-noise",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn the_verdict_is_0_only_when_load_and_host_pass_and_2_when_the_host_fails() {
    let _area = common::area("scale");
    let dir = tempfile::tempdir().unwrap();
    let p = small_profile(dir.path(), 150, 10);

    let o = self_test(&p, "tuned", &["--format", "json"]);
    let r = json_of(&o);
    let v = &r["verdict"];
    assert_eq!(o.status.code(), Some(0), "{r:#}");
    assert_eq!(v["pass"], true, "{v:#}");
    assert_eq!(
        (
            v["load_pass"].clone(),
            v["host_pass"].clone(),
            v["full_size"].clone()
        ),
        (true.into(), true.into(), true.into())
    );
    assert_eq!(
        v["summary"],
        "PASS against profile tiny: load: PASS at 150 connections; host: READY for tiny"
    );
    for s in r["scenarios"].as_array().unwrap() {
        assert_eq!(s["conns_connected"], 150, "{s:#}");
    }
    // Memory for the idle connections, measured: server RSS per connection and the kernel's
    // sockets (both ends of every loopback connection are sockets of this host).
    let m = &r["memory"];
    assert_eq!(m["conns"], 150, "{m:#}");
    assert!(m["server_rss_per_conn_bytes"].as_f64().is_some(), "{m:#}");
    let k = &m["kernel"];
    // (Other tests open and close sockets in this namespace at the same time, so only the
    // level during the run is certain: at least these 300.)
    assert!(
        k["during"]["tcp_inuse"].as_u64().unwrap() >= 300,
        "150 connections are 300 TCP sockets here: {k:#}"
    );
    assert!(k["before"]["tcp_inuse"].as_u64().is_some(), "{k:#}");
    let what: Vec<&str> = m["compared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["what"].as_str().unwrap())
        .collect();
    assert!(what.contains(&"server bytes per idle connection"), "{m:#}");
    // The generator's own memory, beside the server's.
    assert!(
        r["scenarios"][0]["generator"]["peak_rss_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );

    // The same load against a host that fails the profile's checks (a stock host with SYN
    // cookies turned off): exit 2, and the line says which half failed.
    let failing = dir.path().join("no-cookies");
    common::copy_dir(&fixture("default"), &failing);
    std::fs::write(failing.join("proc/sys/net/ipv4/tcp_syncookies"), "0\n").unwrap();
    let o = self_test_at(&p, &failing, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("verdict: "))
        .unwrap_or_else(|| panic!("no verdict line: {out}"));
    assert!(
        line.starts_with("verdict: MISS against profile tiny: load: PASS at 150 connections; host: NOT READY for tiny, "),
        "{line}"
    );
    assert!(
        line.ends_with("failed checks") || line.ends_with("failed check"),
        "{line}"
    );
}

#[test]
fn a_run_below_the_profile_count_never_prints_an_unqualified_pass() {
    let _area = common::area("scale");
    let dir = tempfile::tempdir().unwrap();
    let p = small_profile(dir.path(), 150, 10);
    // Asked for fewer connections: load and host pass, but it proves nothing for the profile.
    let o = self_test(&p, "tuned", &["--conns", "60"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("verdict: NOT PROVEN against profile tiny: load: PASS at 60 of the profile's 150 connections (not a proof for profile tiny); host: READY for tiny"),
        "{out}"
    );
    assert!(!out.contains("verdict: PASS"), "{out}");

    // Scaled down by the fd limit of the one process it may use: the reason is named, with
    // the processes that would hold the count, and the verdict is not a PASS.
    let p = small_profile(dir.path(), 1000, 10);
    let script = format!(
        "ulimit -n 400 && exec \"$0\" serve --self-test --processes 1 --profile {} --host-root {} --scenario idle --secs 1 --format json",
        p.display(),
        fixture("tuned").display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script, common::bin()])
        .output()
        .unwrap();
    let r = json_of(&o);
    assert_eq!(o.status.code(), Some(2), "{r:#}");
    assert_eq!(
        r["conns"], 336,
        "400 files less the 64 the process keeps: {r:#}"
    );
    let why = r["scaled_down"][0].as_str().unwrap();
    assert!(
        why.starts_with("fd limit") && why.contains("--processes 4"),
        "{why}"
    );
    let v = &r["verdict"];
    assert_eq!(
        (v["pass"].clone(), v["full_size"].clone()),
        (false.into(), false.into()),
        "{v:#}"
    );
    assert!(
        v["summary"].as_str().unwrap().contains(
            "336 of the profile's 1,000 connections (scaled down, see above: not a proof"
        ),
        "{v:#}"
    );
}

#[test]
fn the_cpu_budget_lowers_the_rate_never_the_count() {
    let _area = common::area("scale");
    // 1,000 clients x 100 msgs/s is 100,000 msgs/s: more than 5,000 per core on any machine
    // this runs on. The old sizing cut the connections; now idle and storm keep all of them and
    // only the rate scenarios offer less per connection, saying so.
    let dir = tempfile::tempdir().unwrap();
    let p = small_profile(dir.path(), 1000, 100);
    let o = self_test(&p, "tuned", &["--format", "json"]);
    let r = json_of(&o);
    assert_eq!(r["conns"], 1000, "{r:#}");
    assert!(r["scaled_down"].as_array().unwrap().is_empty(), "{r:#}");
    for s in r["scenarios"].as_array().unwrap() {
        assert_eq!(s["conns_connected"], 1000, "{s:#}");
    }
    let note = r["rate_note"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    assert!(note.contains("instead of the profile's 100"), "{note}");
    assert_eq!(o.status.code(), Some(0), "{:#}", r["verdict"]);
}

#[test]
fn past_one_process_fd_limit_the_server_runs_as_several_processes_at_full_count() {
    let _area = common::area("scale");
    // 600 connections under a 400-file limit: one process holds 336, so the self-test starts
    // `serve --processes 3` (200 each + 10% + 64 <= 400) and still runs the profile's count.
    // Broadcast reaches the subscribers of every process through the supervisor's relay.
    let dir = tempfile::tempdir().unwrap();
    let p = small_profile(dir.path(), 600, 10);
    let script = format!(
        "ulimit -n 400 && exec \"$0\" serve --self-test --profile {} --host-root {} \
         --scenario idle --scenario storm --scenario broadcast --rounds 2 --secs 1 --accept-noise \
         --format json",
        p.display(),
        fixture("tuned").display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script, common::bin()])
        .output()
        .unwrap();
    let r = json_of(&o);
    assert_eq!(r["conns"], 600, "{r:#}");
    assert_eq!(r["server_processes"], 3, "{r:#}");
    assert!(r["scaled_down"].as_array().unwrap().is_empty(), "{r:#}");
    for s in r["scenarios"].as_array().unwrap() {
        assert_eq!(s["conns_connected"], 600, "{s:#}");
        assert_eq!(s["errors"], 0, "{s:#}");
    }
    let b = common::element(&r["scenarios"], "scenario", "broadcast");
    assert_eq!(
        b["received"], 1200,
        "600 subscribers x 2 rounds, once each: {b:#}"
    );
    // The server's memory is the whole tree's: the supervisor and three processes.
    let rss = r["memory"]["server_rss_bytes"].as_u64().unwrap();
    assert!(rss > 12 << 20, "{rss}");
    // The budget comes from the supervisors' summed /metrics: the echo and broadcast
    // servers' three processes each, each supervisor's default budget split between them
    // (an eighth of the host's memory beyond the idle connections, at least 64 MiB).
    let mb = &r["memory_budget"];
    let limit = mb["limit_bytes"].as_u64().unwrap();
    assert!(limit >= 6 * (64 << 20), "{mb:#}");
    assert!(mb["peak_bytes"].as_u64().unwrap() < limit, "{mb:#}");
    assert_eq!(mb["budget_closes"], 0, "{mb:#}");
    // The host is the tuned tree: the load at the full count decides, and it passed.
    let v = &r["verdict"];
    assert_eq!(
        (v["pass"].clone(), v["full_size"].clone()),
        (true.into(), true.into()),
        "{v:#}"
    );
    assert_eq!(o.status.code(), Some(0));
    // No server process outlives the run.
    // `--` so pgrep does not read the pattern as its own option; exit 1 is "none found".
    let left = std::process::Command::new("pgrep")
        .args(["-f", "--", &format!("--profile {}", p.display())])
        .output()
        .unwrap();
    assert_eq!(
        left.status.code(),
        Some(1),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// The live host, not a fixture: inside a fresh network namespace (whose accept-path sysctls
/// are its own) the self-test fails the host half for the SYN backlog, `apply` raises it, and
/// the same self-test then passes. `--prefix` keeps apply's persistent files off the host.
#[test]
fn in_a_namespace_the_verdict_follows_what_apply_changed() {
    let _area = common::area("scale");
    let dir = tempfile::tempdir().unwrap();
    let p = small_profile(dir.path(), 150, 10);
    let script = format!(
        r#"set -u
ip link set lo up
P=$(mktemp -d); mkdir "$P/root"
st() {{ "$WSTUNE" serve --self-test --profile {p} --scenario idle --scenario storm --secs 1 --accept-noise; }}
sysctl -qw net.ipv4.tcp_syncookies=0
echo "syncookies before: $(cat /proc/sys/net/ipv4/tcp_syncookies)"
st > "$P/before" 2>&1; echo "before exit $?"
grep '^verdict: ' "$P/before"
"$WSTUNE" apply --profile {p} --yes --prefix "$P/root" > "$P/apply" 2>&1 || {{ echo "apply failed"; cat "$P/apply"; }}
st > "$P/after" 2>&1; echo "after exit $?"
grep '^verdict: ' "$P/after"
"#,
        p = p.display()
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    // A namespace has its own tcp_syncookies: turned off in this one, which the profile fails.
    assert!(out.contains("syncookies before: 0"), "{out}{err}");
    assert!(out.contains("before exit 2"), "{out}{err}");
    assert!(
        out.contains("verdict: MISS against profile tiny: load: PASS at 150 connections; host: NOT READY for tiny, 1 failed check"),
        "{out}{err}"
    );
    assert!(!out.contains("apply failed"), "{out}{err}");
    assert!(out.contains("after exit 0"), "{out}{err}");
    assert!(
        out.contains("verdict: PASS against profile tiny: load: PASS at 150 connections; host: READY for tiny"),
        "{out}{err}"
    );
}
