//! The checks of containers, Kubernetes nodes and deploys against fixture trees: the
//! `kubernetes-node` tree as a node is installed (a kubelet configuration, a server in a pod
//! whose cgroup limits its tasks and memory, conntrack at the kernel's defaults, two
//! SO_REUSEPORT listeners) fails each of them, and a copy with the tuned values passes; the
//! unit's TasksMax on copies of the `tuned` tree.

use crate::common;

use super::watched_while_rewritten;
use common::{check_json, code, finding, fixture, Tree};
use std::path::Path;

/// The pod and the container cgroups of the server (pid 4242) in the `kubernetes-node` tree.
const POD: &str =
    "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1d2e3f.slice";
const CONTAINER: &str = "cri-containerd-9f3e8a.scope";

/// A copy of fixture `name` with each `(file, text)` written into it.
fn tree_with(name: &str, files: &[(&str, &str)]) -> Tree {
    let tree = Tree::from_fixture(name);
    for (rel, text) in files {
        let p = tree.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    tree
}

fn status_of(r: &serde_json::Value, id: &str) -> String {
    finding(r, id)["status"].as_str().unwrap_or("").to_string()
}

fn note_of(r: &serde_json::Value, id: &str) -> String {
    finding(r, id)["note"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_kubernetes_node_as_installed_fails_the_container_checks_and_its_tuned_copy_passes() {
    let root = fixture("kubernetes-node");
    let (c, r) = check_json(&root, &["--pid", "4242"]);
    assert_eq!(c, 2);
    assert_eq!(r["profile"]["role"], "kubernetes-node", "{}", r["profile"]);

    // The pod's 1024 tasks (the kubelet's podPidsLimit), under the container's own "max".
    let pids = finding(&r, "linux.cgroup.pids_max");
    assert_eq!(
        (
            pids["status"].as_str(),
            pids["current"].as_i64(),
            pids["target"].as_i64()
        ),
        (Some("warn"), Some(1024), Some(4096)),
        "{pids}"
    );
    assert!(
        pids["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("podPidsLimit: 4096"),
        "{pids}"
    );

    // The container's 1 GiB, its sockets holding a quarter of it: an OOM kill in waiting.
    let mem = finding(&r, "linux.cgroup.memory_sock");
    assert_eq!(
        (mem["status"].as_str(), mem["current"].as_i64()),
        (Some("fail"), Some(1 << 30)),
        "{mem}"
    );
    assert!(mem["target"].as_i64().unwrap() > 1 << 30, "{mem}");
    assert_eq!(
        mem["note"],
        "memory.stat sock: 256.0 MiB of socket buffers charged to this cgroup now (25.0 % of memory.max)"
    );
    assert!(mem["fix"]["runtime"]
        .as_str()
        .unwrap()
        .contains("resources.limits.memory"));

    let est = finding(
        &r,
        "linux.net.netfilter.nf_conntrack_tcp_timeout_established",
    );
    assert_eq!(
        (est["status"].as_str(), est["current"].as_i64()),
        (Some("warn"), Some(432000))
    );
    assert!(est["fix"]["persistent"]
        .as_str()
        .unwrap()
        .contains("conntrack.tcpEstablishedTimeout"));

    // Two listeners on 0.0.0.0:8080: a restart of one resets what is queued on it.
    let mig = finding(&r, "linux.net.ipv4.tcp_migrate_req");
    assert_eq!(
        (mig["status"].as_str(), mig["current"].as_i64()),
        (Some("warn"), Some(0)),
        "{mig}"
    );
    assert_eq!(mig["scope"], "netns");

    let reserved = finding(&r, "linux.net.ipv4.ip_local_reserved_ports");
    assert_eq!(reserved["status"], "warn");
    assert_eq!(reserved["target"], "10248-10250,10255-10256,30000-32767");

    // kube-proxy owns the table's size on a node: the why and the fix say so.
    let ct = finding(&r, "linux.net.netfilter.nf_conntrack_max");
    assert!(
        ct["why"].as_str().unwrap().contains("1,048,576")
            && ct["fix"]["persistent"]
                .as_str()
                .unwrap()
                .contains("maxPerCore"),
        "{ct}"
    );

    // Cumulative since boot: shown, judged only on growth.
    let ins = finding(&r, "linux.netfilter.conntrack_insert_failed");
    assert_eq!(
        (ins["status"].as_str(), ins["current"].as_i64()),
        (Some("info"), Some(0x17))
    );

    // The same node tuned: every one of them passes.
    let pod_pids = format!("{POD}/pids.max");
    let pod_mem = format!("{POD}/memory.max");
    let ctr_mem = format!("{POD}/{CONTAINER}/memory.max");
    let tuned = tree_with(
        "kubernetes-node",
        &[
            (&pod_pids, "8192\n"),
            (&pod_mem, "max\n"),
            (&ctr_mem, "17179869184\n"),
            (
                "proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established",
                "86400\n",
            ),
            ("proc/sys/net/ipv4/tcp_migrate_req", "1\n"),
            (
                "proc/sys/net/ipv4/ip_local_reserved_ports",
                "10248-10250,10255-10256,30000-32767\n",
            ),
        ],
    );
    let (_, r) = check_json(&tuned, &["--pid", "4242"]);
    for id in [
        "linux.cgroup.pids_max",
        "linux.cgroup.memory_sock",
        "linux.net.netfilter.nf_conntrack_tcp_timeout_established",
        "linux.net.ipv4.tcp_migrate_req",
        "linux.net.ipv4.ip_local_reserved_ports",
    ] {
        assert_eq!(status_of(&r, id), "pass", "{}", finding(&r, id));
    }
    assert_eq!(finding(&r, "linux.cgroup.pids_max")["current"], 8192);
    assert!(note_of(&r, "linux.cgroup.memory_sock").contains("(1.6 % of memory.max)"));
}

#[test]
fn no_limit_no_listener_group_and_no_conntrack_are_said_never_guessed() {
    // Without --pid, wstune's own cgroup (the tree's /proc/self/cgroup: the root, no limit).
    let root = fixture("kubernetes-node");
    let (_, r) = check_json(&root, &[]);
    assert_eq!(status_of(&r, "linux.cgroup.pids_max"), "pass");
    assert!(note_of(&r, "linux.cgroup.pids_max").contains("no pids.max"));
    assert_eq!(status_of(&r, "linux.cgroup.memory_sock"), "pass");

    // "max" all the way up is no limit: a pass with the value, and the sockets' share unsaid.
    let pod_mem = format!("{POD}/memory.max");
    let ctr_mem = format!("{POD}/{CONTAINER}/memory.max");
    let one_listener = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:1F90 00000000:0000 0A 00000000:00001000 00:00000000 00000000     0        0 31001 1\n";
    let tree = tree_with(
        "kubernetes-node",
        &[
            (&pod_mem, "max\n"),
            (&ctr_mem, "max\n"),
            ("proc/net/tcp", one_listener),
        ],
    );
    let (_, r) = check_json(&tree, &["--pid", "4242"]);
    let mem = finding(&r, "linux.cgroup.memory_sock");
    assert_eq!(
        (mem["status"].as_str(), mem["current"].as_i64()),
        (Some("pass"), Some(i64::MAX)),
        "{mem}"
    );
    assert!(mem["note"]
        .as_str()
        .unwrap()
        .contains("memory.max is no limit"));
    // One listener per address and port: nothing to migrate, a skip that says why.
    assert_eq!(status_of(&r, "linux.net.ipv4.tcp_migrate_req"), "skip");
    assert!(note_of(&r, "linux.net.ipv4.tcp_migrate_req").contains("SO_REUSEPORT"));

    // A kernel before 5.14 has no such setting: a skip naming the version.
    std::fs::remove_file(tree.join("proc/sys/net/ipv4/tcp_migrate_req")).unwrap();
    std::fs::write(
        tree.join("proc/net/tcp"),
        std::fs::read_to_string(root.join("proc/net/tcp")).unwrap(),
    )
    .unwrap();
    let (_, r) = check_json(&tree, &["--pid", "4242"]);
    assert_eq!(status_of(&r, "linux.net.ipv4.tcp_migrate_req"), "skip");
    assert!(note_of(&r, "linux.net.ipv4.tcp_migrate_req").contains("5.14"));

    // A garbled limit is a skip naming the file, never a pass.
    std::fs::write(tree.join(&ctr_mem), "lots\n").unwrap();
    let (_, r) = check_json(&tree, &["--pid", "4242"]);
    assert_eq!(status_of(&r, "linux.cgroup.memory_sock"), "skip");
    assert!(note_of(&r, "linux.cgroup.memory_sock").contains("memory.max"));

    // The default host has no conntrack table: nothing to time out, a pass with the reason.
    let (_, r) = check_json(&fixture("default"), &[]);
    let id = "linux.net.netfilter.nf_conntrack_tcp_timeout_established";
    assert_eq!(status_of(&r, id), "pass", "{}", finding(&r, id));
    assert!(
        note_of(&r, id).contains("not loaded"),
        "{}",
        finding(&r, id)
    );
}

/// /proc/net/stat/nf_conntrack with `insert_failed` in its first row's column.
fn conntrack_stat(insert_failed: u32) -> String {
    let text =
        std::fs::read_to_string(fixture("kubernetes-node").join("proc/net/stat/nf_conntrack"))
            .unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut cols: Vec<String> = lines[1].split_whitespace().map(str::to_string).collect();
    cols[9] = format!("{insert_failed:08x}");
    lines[1] = cols.join(" ");
    lines.join("\n") + "\n"
}

fn watched(tree: &Path, after: &str) -> serde_json::Value {
    let t = tree.to_str().unwrap();
    let o = watched_while_rewritten(
        &["check", "--root", t, "-f", "json", "--watch", "3"],
        tree,
        "proc/net/stat/nf_conntrack",
        after,
    );
    assert!(
        matches!(code(&o), 0..=2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn conntrack_insertions_that_fail_during_a_watch_warn() {
    let tree = tree_with("kubernetes-node", &[]);
    let r = watched(&tree, &conntrack_stat(0x17 + 40));
    let ins = finding(&r, "linux.netfilter.conntrack_insert_failed");
    assert_eq!(ins["status"], "warn", "{ins}");
    assert!(
        ins["note"].as_str().unwrap().starts_with("+40 in "),
        "{ins}"
    );
    assert!(ins["fix"]["runtime"]
        .as_str()
        .unwrap()
        .contains("--random-fully"));

    let tree = tree_with("kubernetes-node", &[]);
    let r = watched(&tree, &conntrack_stat(0x17));
    assert_eq!(
        status_of(&r, "linux.netfilter.conntrack_insert_failed"),
        "pass"
    );
}

#[test]
fn a_units_task_limit_below_the_floor_warns_and_infinity_passes() {
    let unit = "wstune/systemd/wsserver.service.show";
    let show = std::fs::read_to_string(fixture("tuned").join(unit)).unwrap();
    let args = ["--unit", "wsserver.service"];
    let tree = tree_with("tuned", &[(unit, &format!("{show}TasksMax=512\n"))]);
    let (_, r) = check_json(&tree, &args);
    let t = finding(&r, "linux.systemd.tasks_max");
    // 32 CPUs: 16 each is 512, under the 4096 floor.
    assert_eq!(
        (
            t["status"].as_str(),
            t["current"].as_i64(),
            t["target"].as_i64()
        ),
        (Some("warn"), Some(512), Some(4096)),
        "{t}"
    );
    assert_eq!(
        t["fix"]["persistent"],
        "sudo systemctl set-property wsserver.service TasksMax=4096  # kept in /etc/systemd/system.control"
    );
    // apply's unit drop-in holds LimitNOFILE only: TasksMax is never written as one.
    let t_str = tree.to_str().unwrap();
    let o = common::wstune(&[
        "apply",
        "--root",
        t_str,
        "--unit",
        "wsserver.service",
        "--dry-run",
    ]);
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("TasksMax"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let tree = tree_with("tuned", &[(unit, &format!("{show}TasksMax=infinity\n"))]);
    let (_, r) = check_json(&tree, &args);
    assert_eq!(status_of(&r, "linux.systemd.tasks_max"), "pass");
}
