//! `check` against the captured trees under tests/fixtures: the default distribution, syn cookies
//! and orphans, slow and dead peers, tuned, container, legacy and Windows registry hosts.

use crate::common;
use common::{Script, Tree};

use super::{default_tree_with, wstune120};
use common::{check_json, code, finding, fixture, stderr};

#[test]
fn default_distribution_fails_100k_on_fds_and_accept_queues() {
    let (c, r) = check_json(&fixture("default"), &[]);
    assert_eq!(c, 2);
    // Nothing recorded of the virtio NIC's coalescing: a skip with the reason, never a pass.
    let co = finding(&r, "linux.nic.coalesce[eth0]");
    assert_eq!(co["status"], "skip", "{co}");
    for id in ["linux.process.nofile.hard", "linux.net.core.somaxconn"] {
        assert_eq!(finding(&r, id)["status"], "fail", "{id}");
    }
    // With SYN cookies on (the default), a short SYN backlog drops nothing: a warning.
    assert_eq!(
        finding(&r, "linux.net.ipv4.tcp_syncookies")["status"],
        "pass"
    );
    assert_eq!(
        finding(&r, "linux.net.ipv4.tcp_max_syn_backlog")["status"],
        "warn"
    );
    // The kernel's default 2 does for a server (the default role): only a proxy needs 1.
    assert_eq!(finding(&r, "linux.net.ipv4.tcp_tw_reuse")["current"], 2);
    assert_eq!(finding(&r, "linux.net.ipv4.tcp_tw_reuse")["status"], "pass");
    assert_eq!(
        finding(&r, "linux.net.ipv4.ip_local_port_range")["current"],
        serde_json::json!([32768, 60999])
    );
    let boot = finding(&r, "linux.net.core.somaxconn.boot");
    assert_eq!(boot["status"], "warn");
    assert!(
        boot["note"]
            .as_str()
            .unwrap()
            .contains("kernel default 4096"),
        "{boot}"
    );
    assert_eq!(r["host"]["hostname"], "debian12-default");
    // The 10k profile is within reach of the same host's fd limit.
    let (_, r10) = check_json(&fixture("default"), &["--profile", "10k"]);
    assert_eq!(finding(&r10, "linux.process.nofile.hard")["status"], "pass");
    assert_eq!(finding(&r10, "linux.net.core.somaxconn")["status"], "pass");
}

/// A full accept queue that resets clients turns a reconnect storm into errors: the kernel's
/// default 0 passes, 1 warns with the fix that puts it back.
#[test]
fn aborting_on_a_full_accept_queue_warns_and_the_default_passes() {
    let (_, r) = check_json(&fixture("default"), &[]);
    let f = finding(&r, "linux.net.ipv4.tcp_abort_on_overflow");
    assert_eq!(
        (f["status"].as_str(), f["current"].as_u64()),
        (Some("pass"), Some(0)),
        "{f}"
    );
    let tree = default_tree_with("proc/sys/net/ipv4/tcp_abort_on_overflow", "1\n");
    let (_, r) = check_json(&tree, &[]);
    let f = finding(&r, "linux.net.ipv4.tcp_abort_on_overflow");
    assert_eq!(
        (f["status"].as_str(), f["current"].as_u64()),
        (Some("warn"), Some(1)),
        "{f}"
    );
    assert!(
        f["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("net.ipv4.tcp_abort_on_overflow=0"),
        "{f}"
    );
}

#[test]
fn syn_cookies_off_fails_and_the_orphan_limit_follows_the_connection_count() {
    let tree = default_tree_with("proc/sys/net/ipv4/tcp_syncookies", "0\n");
    let (_, r) = check_json(&tree, &[]);
    let cookies = finding(&r, "linux.net.ipv4.tcp_syncookies");
    assert_eq!(
        (cookies["status"].as_str(), cookies["current"].as_u64()),
        (Some("fail"), Some(0))
    );
    assert!(cookies["fix"]["runtime"]
        .as_str()
        .unwrap()
        .contains("tcp_syncookies=1"));
    // 131,072 here (a 24 GB host's default): enough for 100k, not for a million.
    assert_eq!(
        finding(&r, "linux.net.ipv4.tcp_max_orphans")["status"],
        "pass"
    );
    let (_, r1m) = check_json(&tree, &["--profile", "1m"]);
    let o = finding(&r1m, "linux.net.ipv4.tcp_max_orphans");
    assert_eq!(
        (
            o["status"].as_str(),
            o["current"].as_u64(),
            o["target"].as_u64()
        ),
        (Some("warn"), Some(131072), Some(1_000_000)),
        "{o}"
    );
    assert_eq!(o["scope"], "global");
    // The conntrack hash: a quarter of the profile's table or more (262,144 here).
    assert_eq!(
        finding(&r, "linux.net.netfilter.nf_conntrack_buckets")["status"],
        "pass"
    );
    let b = finding(&r1m, "linux.net.netfilter.nf_conntrack_buckets");
    assert_eq!(
        (b["status"].as_str(), b["target"].as_u64()),
        (Some("warn"), Some(524_288)),
        "{b}"
    );
}

/// The checks for stalled and dead peers and TCP's memory budget: what a default host gets,
/// what a tuned one passes, and what apply changes (the warnings) and leaves as advice (info).
#[test]
fn slow_and_dead_peers_and_tcp_memory_pressure_are_checked_and_only_warnings_applied() {
    let (_, r) = check_json(&fixture("default"), &[]);
    let row = |r: &serde_json::Value, id: &str| {
        let f = finding(r, id);
        (
            f["status"].as_str().unwrap().to_string(),
            f["current"].clone(),
            f["target"].clone(),
        )
    };
    let j = |v: u64| serde_json::json!(v);
    // No limit on unsent bytes (the kernel's default): a warning, 128 KiB asked.
    assert_eq!(
        row(&r, "linux.net.ipv4.tcp_notsent_lowat"),
        ("warn".into(), j(4_294_967_295), j(131_072))
    );
    // Advice only: 15 retries (~924 s) and 7200 s before a keepalive.
    assert_eq!(
        row(&r, "linux.net.ipv4.tcp_retries2"),
        ("info".into(), j(15), j(8))
    );
    assert_eq!(
        row(&r, "linux.net.ipv4.tcp_keepalive_time"),
        ("info".into(), j(7200), j(120))
    );
    // Shown, not judged.
    assert_eq!(finding(&r, "linux.net.core.netdev_budget")["current"], 300);
    assert_eq!(
        finding(&r, "linux.net.ipv4.tcp_wmem.max")["current"],
        4_194_304
    );
    // 24 GB of RAM: pressure at 383,868 pages holds 100k connections' 8 KiB (200,000 pages)...
    assert_eq!(
        row(&r, "linux.net.ipv4.tcp_mem.pressure"),
        ("pass".into(), j(383_868), j(200_000))
    );
    // ...a million's (2,000,000) not; the hard limit keeps the kernel's 3/2 above it.
    let (_, r1m) = check_json(&fixture("default"), &["--profile", "1m"]);
    assert_eq!(
        row(&r1m, "linux.net.ipv4.tcp_mem.pressure"),
        ("warn".into(), j(383_868), j(2_000_000))
    );
    assert_eq!(
        row(&r1m, "linux.net.ipv4.tcp_mem.high"),
        ("warn".into(), j(575_802), j(3_000_000))
    );
    // Never past half the host's memory (the hard mark three quarters): a 2 GiB host at a
    // million connections is held at 1 GiB and 1.5 GiB, and the memory check fails instead.
    let (_, small) = check_json(&fixture("container"), &["--profile", "1m"]);
    assert_eq!(
        finding(&small, "linux.net.ipv4.tcp_mem.pressure")["target"],
        262_144
    );
    assert_eq!(
        finding(&small, "linux.net.ipv4.tcp_mem.high")["target"],
        393_216
    );
    assert_eq!(finding(&small, "linux.host.memory")["status"], "fail");
    let fix = finding(&r1m, "linux.net.ipv4.tcp_mem.pressure")["fix"]["runtime"].clone();
    assert!(
        fix.as_str()
            .unwrap()
            .contains("tcp_mem=\"287901 2000000 3000000\""),
        "{fix}"
    );
    // The tuned host passes all of them.
    let (_, t) = check_json(&fixture("tuned"), &[]);
    for id in [
        "linux.net.ipv4.tcp_notsent_lowat",
        "linux.net.ipv4.tcp_retries2",
        "linux.net.ipv4.tcp_keepalive_time",
        "linux.net.ipv4.tcp_mem.pressure",
        "linux.net.ipv4.tcp_mem.high",
        "linux.net.ipv4.tcp_notsent_lowat.boot",
    ] {
        assert_eq!(finding(&t, id)["status"], "pass", "{id}");
    }
    // apply at 1m: the warnings change (tcp_mem's two marks in one write, the host's min
    // kept), the advice does not.
    let tree = Tree::from_fixture("default");
    let t = tree.root();
    let o = wstune120(&["apply", "--root", t, "--profile", "1m", "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let read = |rel: &str| std::fs::read_to_string(tree.join(rel)).unwrap();
    assert_eq!(read("proc/sys/net/ipv4/tcp_notsent_lowat"), "131072\n");
    assert_eq!(
        read("proc/sys/net/ipv4/tcp_mem")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["287901", "2000000", "3000000"]
    );
    assert_eq!(read("proc/sys/net/ipv4/tcp_retries2"), "15\n");
    assert_eq!(read("proc/sys/net/ipv4/tcp_keepalive_time"), "7200\n");
    let conf = read("etc/sysctl.d/60-wstune.conf");
    assert!(
        conf.contains("net.ipv4.tcp_notsent_lowat = 131072")
            && conf.contains("net.ipv4.tcp_mem = 287901 2000000 3000000")
            && !conf.contains("tcp_retries2")
            && !conf.contains("tcp_keepalive_time"),
        "{conf}"
    );
}

#[test]
fn tuned_host_passes_strictly_and_checks_a_pid_and_a_unit() {
    let (c, r) = check_json(&fixture("tuned"), &["--strict"]);
    assert_eq!(
        c,
        0,
        "{}",
        serde_json::to_string_pretty(&r["summary"]).unwrap()
    );
    assert_eq!(
        (r["summary"]["fail"].as_u64(), r["summary"]["warn"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(finding(&r, "linux.nic.rx_queues[eth0]")["current"], 8);
    assert_eq!(finding(&r, "linux.nic.irq_spread[eth0]")["status"], "pass");
    // The NIC's receive interrupt coalescing, as its tree's ethtool file records it: shown.
    let co = finding(&r, "linux.nic.coalesce[eth0]");
    assert_eq!(
        (co["status"].as_str(), co["current"].as_str()),
        (
            Some("info"),
            Some("adaptive-rx on, rx-usecs 8, rx-frames 128")
        ),
        "{co}"
    );
    assert_eq!(finding(&r, "linux.host.numa_nodes")["current"], 2);
    assert!(finding(&r, "linux.fs.file-max.boot")["note"]
        .as_str()
        .unwrap()
        .starts_with("set by /etc/sysctl.d/60-wstune.conf:"));

    let (c, r) = check_json(
        &fixture("tuned"),
        &["--pid", "4242", "--unit", "wsserver.service"],
    );
    assert_eq!(c, 2);
    let soft = finding(&r, "linux.pid.nofile.soft");
    assert_eq!(
        (soft["status"].as_str(), soft["current"].as_i64()),
        (Some("fail"), Some(1024))
    );
    assert_eq!(
        soft["fix"]["runtime"],
        "sudo prlimit --pid 4242 --nofile=200000:200000"
    );
    assert_eq!(finding(&r, "linux.pid.nofile.hard")["status"], "pass");
    assert_eq!(finding(&r, "linux.systemd.limit_nofile")["current"], 262144);
    assert_eq!(finding(&r, "linux.systemd.limit_nofile")["status"], "pass");
}

#[test]
fn container_with_read_only_proc_sys_skips_what_it_cannot_see() {
    let (c, r) = check_json(&fixture("container"), &[]);
    assert_eq!(c, 2);
    assert_eq!(finding(&r, "linux.proc.sys_writable")["current"], 0);
    assert!(finding(&r, "linux.proc.sys_writable")["why"]
        .as_str()
        .unwrap()
        .contains("--sysctl"));
    let hidden = finding(&r, "linux.net.core.netdev_max_backlog");
    assert_eq!(hidden["status"], "skip");
    assert!(hidden["note"].as_str().unwrap().contains("does not exist"));
    // The cgroup's 2 GiB, not the host's RAM, is what the container can use.
    let mem = finding(&r, "linux.host.memory");
    assert_eq!(
        (mem["status"].as_str(), mem["current"].as_i64()),
        (Some("fail"), Some(2 << 30))
    );
    let boot = finding(&r, "linux.net.core.somaxconn.boot");
    assert_eq!(boot["status"], "skip");
    assert!(
        boot["note"].as_str().unwrap().contains("container"),
        "{boot}"
    );
    assert_eq!(finding(&r, "linux.nic.rx_queues")["status"], "skip");
    // Nothing unreadable ever passes.
    for x in r["results"].as_array().unwrap() {
        if x["current"].is_null() && x["status"] == "pass" {
            assert!(
                x["note"].is_string(),
                "a pass without a value must say why: {x}"
            );
        }
    }
}

#[test]
fn legacy_host_is_warned_about_boot_overrides_and_tw_recycle() {
    let (c, r) = check_json(&fixture("legacy"), &[]);
    assert_eq!(c, 0, "warnings alone exit 0");
    let (c, _) = check_json(&fixture("legacy"), &["--strict"]);
    assert_eq!(c, 1, "--strict makes warnings exit 1");
    let boot = finding(&r, "linux.net.core.somaxconn.boot");
    assert_eq!(
        (boot["status"].as_str(), boot["current"].as_i64()),
        (Some("warn"), Some(1024))
    );
    assert!(
        boot["note"]
            .as_str()
            .unwrap()
            .starts_with("/usr/lib/sysctl.d/99-vendor.conf:2 sets 1024"),
        "{boot}"
    );
    assert!(
        boot["fix"]["persistent"]
            .as_str()
            .unwrap()
            .starts_with("edit /usr/lib/sysctl.d/99-vendor.conf:2 to `net.core.somaxconn = 65535`"),
        "{boot}"
    );
    assert_eq!(
        finding(&r, "linux.net.core.somaxconn")["status"],
        "pass",
        "the runtime value is fine today"
    );
    let recycle = finding(&r, "linux.boot.tcp_tw_recycle");
    assert_eq!(recycle["status"], "warn");
    assert_eq!(
        recycle["fix"]["persistent"],
        "delete the line at /etc/sysctl.conf:2"
    );
}

#[test]
fn windows_registry_hosts_are_evaluated_with_the_windows_catalog() {
    let (c, r) = check_json(&fixture("windows-default"), &["--strict"]);
    // 2: 16,384 dynamic ports cannot carry 100k connections through one proxy address.
    assert_eq!(c, 2);
    assert_eq!(r["host"]["platform"], "windows");
    assert_eq!(r["host"]["hostname"], "WIN-EDGE-01");
    let tw = finding(&r, "windows.tcpip.tcp_timed_wait_delay");
    assert_eq!(
        (tw["status"].as_str(), tw["current"].as_i64()),
        (Some("warn"), Some(120))
    );
    assert_eq!(tw["note"], "not set: the built-in default applies");
    let rss = finding(
        &r,
        "windows.nic.rss_profile[Intel(R) Ethernet Controller X710]",
    );
    assert_eq!(
        (rss["current"].as_str(), rss["target"].as_str()),
        (Some("NUMAScalingStatic"), Some("NUMAScalingStatic"))
    );
    assert!(finding(&r, "windows.tcpip.max_user_port")["why"]
        .as_str()
        .unwrap()
        .contains("not a file-descriptor limit"));
    let (c, r) = check_json(&fixture("windows-tuned"), &["--strict"]);
    assert_eq!(c, 0, "{}", r["summary"]);
}

/// The fix lines `check` prints are commands that work pasted as written by a user with sudo
/// (or by root): each one that is a command is valid shell (a note after `#`, not in
/// parentheses the shell would choke on) and writes no root-owned file through its own shell's
/// `>` or `>>`. Then they are run: the persistent sysctl line by a shell that can write nothing
/// itself and whose `sudo` alone may (the file it names moved into a directory only that
/// `sudo` can write), and the nofile lines (`prlimit --pid $$`, `ulimit -Sn`) by a shell whose
/// limits they must then show.
#[test]
fn fix_lines_work_pasted_as_written_by_a_sudo_user() {
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;
    let (_, report) = check_json(&fixture("default"), &[]);
    let commands = [
        "sudo ",
        "echo ",
        "printf ",
        "ulimit ",
        "sysctl ",
        "prlimit ",
        "ethtool ",
        "systemctl ",
    ];
    let mut checked = 0;
    for f in report["results"].as_array().unwrap() {
        if f["status"] == "skip" {
            continue;
        }
        for text in [&f["fix"]["runtime"], &f["fix"]["persistent"]] {
            let Some(text) = text.as_str() else { continue };
            if !commands.iter().any(|c| text.starts_with(c)) || text.contains('<') {
                continue;
            }
            let o = Command::new("sh")
                .args(["-n", "-c", text])
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{}: not valid shell as written: {text}\n{}",
                f["id"],
                stderr(&o)
            );
            let command = text.split(" #").next().unwrap();
            for (i, _) in command.match_indices('>') {
                assert!(
                    command[i..].starts_with(">/dev/null"),
                    "{}: a redirection the user's own shell opens: {text}",
                    f["id"]
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} command fixes checked");

    if !is_root() {
        common::skip("fix-lines", "running the fix lines needs root (setpriv)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The "root" of this run is uid 65534: only it may write `etc`; the pasting shell is uid
    // 0 stripped of every capability but changing its uid, which the `sudo` below uses.
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&etc, Some(65534), Some(65534)).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    Script::sh()
        .line(r#"exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@""#)
        .write(&bin, "sudo");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let persistent = finding(&report, "linux.net.core.somaxconn")["fix"]["persistent"]
        .as_str()
        .unwrap()
        .to_string();
    let file = etc.join("60-wstune.conf");
    assert!(
        persistent.contains("/etc/sysctl.d/60-wstune.conf"),
        "{persistent}"
    );
    let line = persistent.replace("/etc/sysctl.d/60-wstune.conf", file.to_str().unwrap());
    let o = Command::new("setpriv")
        .args([
            "--bounding-set=-all,+setuid,+setgid",
            "--inh-caps=-all",
            "sh",
            "-c",
            &line,
        ])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pasted as written by a user whose sudo alone may write the file: {line}\n{}",
        stderr(&o)
    );
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, "net.core.somaxconn = 65535\n", "{line}");

    // The nofile lines, pasted one after the other into one shell, raise that shell's limits
    // (its `sudo` is plain root here: raising a hard limit needs it).
    Script::sh().line(r#"exec "$@""#).write(&bin, "sudo");
    let fix = |id: &str| {
        finding(&report, id)["fix"]["runtime"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (hard, soft) = (
        fix("linux.process.nofile.hard"),
        fix("linux.process.nofile.soft"),
    );
    // A target below this shell's hard limit: raising a hard limit needs CAP_SYS_RESOURCE,
    // which a container's root may lack, and lowering shows the same thing (the lines act on
    // the shell they are pasted into).
    let now = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .unwrap();
    let now: u64 = String::from_utf8_lossy(&now.stdout).trim().parse().unwrap();
    let want = (now - 1).to_string();
    assert!(
        hard.contains("200000") && soft.contains("200000"),
        "{hard}\n{soft}"
    );
    let (hard, soft) = (hard.replace("200000", &want), soft.replace("200000", &want));
    let script = format!("{hard}\n{soft}\nulimit -Hn; ulimit -Sn\n");
    let o = Command::new("sh")
        .args(["-c", &script])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}\n{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{want}\n{want}\n"),
        "{script}\n{}",
        stderr(&o)
    );
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `linux.nic.rx_queues` judges a NIC by the one rule apply follows too: one receive queue per
/// physical core of its NUMA node (scaling.rst). The tuned host's 8-queue NIC sits on node 0,
/// 8 cores with 2 threads each: it passes. Without its local_cpulist the NIC is taken to reach
/// every CPU, 16 cores (32 threads): 8 queues are then advice, never a failure. The default
/// VM's one queue for its 2 CPUs is advice too.
#[test]
fn rx_queues_are_judged_by_the_physical_cores_of_the_nics_node() {
    let (_, r) = check_json(&fixture("tuned"), &[]);
    let q = finding(&r, "linux.nic.rx_queues[eth0]");
    assert_eq!(
        (
            q["status"].as_str(),
            q["current"].as_i64(),
            q["target"].as_i64()
        ),
        (Some("pass"), Some(8), Some(8)),
        "{q}"
    );
    let tree = Tree::from_fixture("tuned");
    std::fs::remove_file(tree.join("sys/class/net/eth0/device/local_cpulist")).unwrap();
    let (_, r) = check_json(&tree, &[]);
    let q = finding(&r, "linux.nic.rx_queues[eth0]");
    assert_eq!(
        (q["status"].as_str(), q["target"].as_i64()),
        (Some("info"), Some(16)),
        "{q}"
    );
    assert_eq!(
        q["fix"]["runtime"].as_str().unwrap(),
        "sudo ethtool -L eth0 combined 16  # only when softnet drops or squeezes grow: apply --watch 10 raises it on that evidence"
    );
    let (_, r) = check_json(&fixture("default"), &[]);
    let q = finding(&r, "linux.nic.rx_queues[eth0]");
    assert_eq!(
        (
            q["status"].as_str(),
            q["current"].as_i64(),
            q["target"].as_i64()
        ),
        (Some("info"), Some(1), Some(2)),
        "{q}"
    );
}
