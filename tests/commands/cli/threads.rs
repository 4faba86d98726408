//! `check` on what a server's own design, its proxy's source ports and its cloud limit: the
//! `--pid` server's I/O model and the thread limits a thread per connection meets, orphans'
//! retransmissions, ports per destination on a proxy, and AWS ENA's allowance counters.

use crate::common;

use super::{default_tree_with, watched_while_rewritten};
use common::{check_json, finding, json_of};
use std::path::Path;

/// A captured `--pid 4242` with `threads` threads and `sockets` socket descriptors (plus a
/// log file), its limits, and the thread sysctls at their usual defaults.
fn server(tree: &Path, threads: usize, sockets: usize) {
    let p = tree.join("proc/4242");
    std::fs::create_dir_all(p.join("fd")).unwrap();
    std::fs::write(
        p.join("limits"),
        "Limit                     Soft Limit           Hard Limit           Units     \n\
         Max stack size            8388608              unlimited            bytes     \n\
         Max processes             4096                 4096                 processes \n\
         Max open files            1048576              1048576              files     \n",
    )
    .unwrap();
    std::fs::write(
        p.join("status"),
        format!("Name:\tchat\nPid:\t4242\nThreads:\t{threads}\n"),
    )
    .unwrap();
    for n in 0..sockets {
        std::fs::write(
            p.join(format!("fd/{}", n + 3)),
            format!("socket:[{}]", 9000 + n),
        )
        .unwrap();
    }
    std::fs::write(p.join("fd/2"), "/var/log/chat.log").unwrap();
    for (rel, v) in [
        ("proc/sys/kernel/threads-max", "63000"),
        ("proc/sys/kernel/pid_max", "32768"),
        ("proc/sys/vm/max_map_count", "65530"),
    ] {
        std::fs::create_dir_all(tree.join(rel).parent().unwrap()).unwrap();
        std::fs::write(tree.join(rel), format!("{v}\n")).unwrap();
    }
}

const THREAD_LIMITS: [&str; 5] = [
    "linux.kernel.threads-max",
    "linux.kernel.pid_max",
    "linux.vm.max_map_count",
    "linux.pid.nproc",
    "linux.pid.thread_stacks",
];

/// A server with about a thread per socket fails the I/O model check with the guide's numbers,
/// and each thread limit it meets first is named; an event-driven one passes and the thread
/// limits skip with the reason; without --pid they say what they need.
#[test]
fn a_thread_per_connection_server_fails_and_its_thread_limits_are_judged() {
    let tree = default_tree_with("proc/sys/net/ipv4/tcp_orphan_retries", "0\n");
    server(&tree, 190, 200);
    let (code, r) = check_json(&tree, &["--pid", "4242"]);
    assert_eq!(code, 2);
    let m = finding(&r, "linux.pid.io_model");
    assert_eq!(
        (m["status"].as_str(), m["current"].as_i64()),
        (Some("fail"), Some(190)),
        "{m}"
    );
    // Two CPUs: an event loop's share is 4 x 2 + 64 = 72; half the 200 sockets is 100.
    assert_eq!(m["target"], 100, "{m}");
    assert_eq!(
        m["note"],
        "190 threads for 200 sockets: about a thread per connection"
    );
    let why = m["why"].as_str().unwrap();
    assert!(
        why.contains("near 5,000") && why.contains("near 10,000"),
        "{why}"
    );
    assert!(
        m["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("event-driven"),
        "{m}"
    );
    for (id, status, target) in [
        ("linux.kernel.threads-max", "fail", 200_000i64),
        ("linux.kernel.pid_max", "fail", 200_000),
        ("linux.vm.max_map_count", "fail", 265_530),
        ("linux.pid.nproc", "fail", 200_000),
        // 24,684,092 kB of memory over 100k connections: 252,765 bytes a thread's stack.
        ("linux.pid.thread_stacks", "warn", 252_765),
    ] {
        let f = finding(&r, id);
        assert_eq!(
            (f["status"].as_str(), f["target"].as_i64()),
            (Some(status), Some(target)),
            "{f}"
        );
    }
    assert_eq!(
        finding(&r, "linux.pid.nproc")["fix"]["runtime"],
        "sudo prlimit --pid 4242 --nproc=200000:200000"
    );

    // Event-driven: 12 threads for the same sockets.
    server(&tree, 12, 200);
    let (_, r) = check_json(&tree, &["--pid", "4242"]);
    let m = finding(&r, "linux.pid.io_model");
    assert_eq!(m["status"], "pass");
    assert_eq!(
        m["note"],
        "12 threads for 200 sockets: the threads do not grow with the sockets"
    );
    for id in THREAD_LIMITS {
        let f = finding(&r, id);
        assert_eq!(
            (f["status"].as_str(), f["note"].as_str()),
            (
                Some("skip"),
                Some("event-driven: threads do not grow with sockets")
            ),
            "{f}"
        );
    }
    // Nor does apply change them there.
    let t = tree.to_str().unwrap();
    let o = common::wstune(&["apply", "--root", t, "--pid", "4242", "--dry-run"]);
    let plan = common::stdout(&o);
    assert!(
        !plan.contains("threads-max") && !plan.contains("max_map_count"),
        "{plan}"
    );

    // Without --pid nothing says which model it is.
    let (_, r) = check_json(&tree, &[]);
    let f = finding(&r, "linux.kernel.threads-max");
    assert_eq!(f["status"], "skip");
    assert_eq!(
        f["note"],
        "linux.pid.io_model was not judged: pass --pid PID to check a running server"
    );
}

/// tcp_orphan_retries' default 0 is 8 retransmissions: advice to lower it on a loaded
/// server, judged as 8 and shown as read; a lowered value passes.
#[test]
fn orphan_retries_zero_means_eight_and_a_lowered_value_passes() {
    let rel = "proc/sys/net/ipv4/tcp_orphan_retries";
    let tree = default_tree_with(rel, "0\n");
    let (_, r) = check_json(&tree, &[]);
    let f = finding(&r, "linux.net.ipv4.tcp_orphan_retries");
    assert_eq!(
        (f["status"].as_str(), f["current"].as_i64()),
        (Some("info"), Some(0)),
        "{f}"
    );
    assert_eq!(f["note"], "0 means 8 to the kernel");
    assert_eq!(
        f["fix"]["runtime"],
        "sudo sysctl -w net.ipv4.tcp_orphan_retries=3"
    );
    std::fs::write(tree.join(rel), "2\n").unwrap();
    let (_, r) = check_json(&tree, &[]);
    assert_eq!(
        finding(&r, "linux.net.ipv4.tcp_orphan_retries")["status"],
        "pass"
    );
}

/// A proxy's connections to one backend take one source port each: the widened range holds
/// 55,536, which the 10k profile fits and the 100k profile does not (2 source addresses);
/// reserved ports inside the range count out; a server skips it with the reason.
#[test]
fn a_proxy_needs_a_source_port_per_connection_to_one_backend() {
    let rel = "proc/sys/net/ipv4/ip_local_port_range";
    let tree = default_tree_with(rel, "10000\t65535\n");
    let id = "linux.net.ipv4.ip_local_port_range.per_destination";
    let (_, r) = check_json(&tree, &["--role", "proxy"]);
    let f = finding(&r, id);
    assert_eq!(
        (f["status"].as_str(), f["current"].as_i64()),
        (Some("fail"), Some(55_536)),
        "{f}"
    );
    assert_eq!(f["target"], 100_000);
    assert_eq!(
        f["note"],
        "55536 ports: one source address reaches 55536 of the profile's 100000 connections to one backend address and port; 100000 need 2 source addresses"
    );
    // The range passes its own check: only this one counts the connections.
    assert_eq!(
        finding(&r, "linux.net.ipv4.ip_local_port_range")["status"],
        "pass"
    );
    let (_, r10) = check_json(&tree, &["--role", "proxy", "--profile", "10k"]);
    assert_eq!(finding(&r10, id)["status"], "pass");
    // Reserved ports inside the range are not a proxy's.
    std::fs::write(
        tree.join("proc/sys/net/ipv4/ip_local_reserved_ports"),
        "10250,30000-32767\n",
    )
    .unwrap();
    let (_, r) = check_json(&tree, &["--role", "proxy"]);
    assert_eq!(finding(&r, id)["current"], 55_536 - 2_769);
    let (_, server) = check_json(&tree, &[]);
    let s = finding(&server, id);
    assert_eq!(s["status"], "skip");
    assert!(
        s["note"]
            .as_str()
            .unwrap()
            .starts_with("not needed on a server: its clients all connect to its listening port"),
        "{s}"
    );
}

/// AWS's hypervisor drops past the instance's allowances while every host check passes; the
/// ENA driver counts them (`ethtool -S`). Growth during --watch fails or warns, a quiet watch
/// passes, the available tracked connections are shown, and a NIC without the counters skips.
#[test]
fn ena_allowance_counters_that_grow_during_a_watch_are_reported() {
    let capture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/captures/ena-eth0-ethtool-S.txt"),
    )
    .unwrap();
    let rel = "wstune/ethtool/eth0.stats";
    let tree = default_tree_with("proc/sys/net/ipv4/tcp_orphan_retries", "0\n");
    std::fs::create_dir_all(tree.join("wstune/ethtool")).unwrap();
    std::fs::write(tree.join(rel), &capture).unwrap();
    let (_, once) = check_json(&tree, &[]);
    let pps = finding(&once, "linux.nic.ena.pps_allowance_exceeded[eth0]");
    assert_eq!(
        (pps["status"].as_str(), pps["current"].as_i64()),
        (Some("info"), Some(1841)),
        "{pps}"
    );
    let avail = finding(&once, "linux.nic.ena.conntrack_allowance_available[eth0]");
    assert_eq!(
        (avail["status"].as_str(), avail["current"].as_i64()),
        (Some("info"), Some(136_812))
    );
    let (_, quiet) = check_json(&tree, &["--watch", "1"]);
    for name in [
        "bw_in_allowance_exceeded",
        "bw_out_allowance_exceeded",
        "pps_allowance_exceeded",
        "conntrack_allowance_exceeded",
        "linklocal_allowance_exceeded",
    ] {
        let f = finding(&quiet, &format!("linux.nic.ena.{name}[eth0]"));
        assert_eq!(f["status"], "pass", "{f}");
    }
    let grown = capture
        .replace(
            "pps_allowance_exceeded: 1841",
            "pps_allowance_exceeded: 2041",
        )
        .replace(
            "conntrack_allowance_exceeded: 0",
            "conntrack_allowance_exceeded: 37",
        );
    let t = tree.to_str().unwrap();
    let r = json_of(&watched_while_rewritten(
        &["check", "--root", t, "--watch", "4", "-f", "json"],
        &tree,
        rel,
        &grown,
    ));
    let pps = finding(&r, "linux.nic.ena.pps_allowance_exceeded[eth0]");
    assert_eq!(pps["status"], "warn", "{pps}");
    assert!(pps["note"].as_str().unwrap().contains("+200"), "{pps}");
    let ct = finding(&r, "linux.nic.ena.conntrack_allowance_exceeded[eth0]");
    assert_eq!(ct["status"], "fail", "{ct}");
    assert!(ct["note"].as_str().unwrap().contains("+37"), "{ct}");
    assert_eq!(
        finding(&r, "linux.nic.ena.bw_in_allowance_exceeded[eth0]")["status"],
        "pass"
    );

    // A virtio NIC (no capture, or a driver without the counters): a skip with the reason.
    std::fs::write(
        tree.join(rel),
        "NIC statistics:\n     rx_queue_0_packets: 5\n",
    )
    .unwrap();
    let (_, plain) = check_json(&tree, &[]);
    let f = finding(&plain, "linux.nic.ena.pps_allowance_exceeded[eth0]");
    assert_eq!(
        (f["status"].as_str(), f["note"].as_str()),
        (
            Some("skip"),
            Some("the NIC's driver has no ENA allowance counters (not an AWS ENA interface)")
        )
    );
    std::fs::remove_file(tree.join(rel)).unwrap();
    let (_, none) = check_json(&tree, &[]);
    assert_eq!(
        finding(&none, "linux.nic.ena.pps_allowance_exceeded[eth0]")["status"],
        "skip"
    );
}
