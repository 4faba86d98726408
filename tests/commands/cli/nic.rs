//! NIC tuning on captured trees: interrupts pinned per queue and rolled back, irqbalance's
//! arguments kept, receive rings raised and kept at boot, the receive budget, and a queue count
//! a watch found short; on veths in private namespaces: namespaces.rs.

use crate::common;

use super::{default_tree_with, softnet_row, watched_while_rewritten, wstune120};
use common::{
    assert_same_tree, check_json, code, copy_dir, finding, fixture, stderr, stdout, Tree,
};
use std::path::Path;
use std::process::Command;

mod namespaces;

/// A captured host with an 8-queue mlx5 NIC on node 1 (its 8 cores 8-15, their second threads
/// 24-31), RPS in its kernel,
/// irqbalance running, and a profile with `nic.irq: pinned` beside it: (its directory, the
/// tree, a copy of the tree as it was, the profile, an empty --prefix).
fn pinned_tree() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host");
    copy_dir(&fixture("tuned"), &tree);
    let pristine = dir.path().join("pristine");
    // The NIC on node 1 (CPUs 8-15 and 24-31), every queue interrupt allowed anywhere now; the
    // kernel's /proc/irq/N/NAME directory names each one's handler.
    std::fs::write(
        tree.join("sys/class/net/eth0/device/local_cpulist"),
        "8-15,24-31\n",
    )
    .unwrap();
    // A kernel with RPS: 8 hardware queues for the node's 16 CPUs (8 cores: the 8 queues the
    // rule gives it) get it too, and RFS's table.
    std::fs::write(tree.join("proc/sys/net/core/rps_sock_flow_entries"), "0\n").unwrap();
    for q in 0..8 {
        std::fs::write(
            tree.join(format!("sys/class/net/eth0/queues/rx-{q}/rps_cpus")),
            "00000000\n",
        )
        .unwrap();
        std::fs::write(
            tree.join(format!("sys/class/net/eth0/queues/rx-{q}/rps_flow_cnt")),
            "0\n",
        )
        .unwrap();
    }
    for (k, irq) in (40..48).enumerate() {
        let d = tree.join(format!("proc/irq/{irq}"));
        std::fs::create_dir_all(d.join(format!("mlx5_comp{k}@pci:0000:3b:00.0"))).unwrap();
        std::fs::write(d.join(format!("mlx5_comp{k}@pci:0000:3b:00.0/.keep")), "").unwrap();
        std::fs::write(d.join("smp_affinity_list"), "0-31\n").unwrap();
    }
    // irqbalance runs (the unit's state as captured), and another interrupt is the disk's.
    std::fs::write(
        tree.join("wstune/systemd/irqbalance.service.show"),
        "LoadState=loaded\nActiveState=active\n",
    )
    .unwrap();
    std::fs::create_dir_all(tree.join("proc/irq/30/nvme0q1")).unwrap();
    std::fs::write(tree.join("proc/irq/30/nvme0q1/.keep"), "").unwrap();
    copy_dir(&tree, &pristine);
    let profile = dir.path().join("pinned.yaml");
    std::fs::write(
        &profile,
        "extends: 100k\nname: pinned\nnic:\n  irq: pinned\n",
    )
    .unwrap();
    let prefix = dir.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    (dir, tree, pristine, profile, prefix)
}

/// With `nic.irq: pinned`, each queue interrupt of an 8-queue mlx5 NIC goes to its own core of
/// the NIC's node (never to a second thread of a core while a core has none), on a captured tree with files under --prefix. The boot script finds each
/// interrupt by its name and pins it again (run here against the tree), systemd-analyze
/// accepts its unit, and rollback restores the tree.
#[test]
fn pinned_interrupts_are_set_per_queue_on_a_captured_tree_and_rolled_back() {
    let (dir, tree, pristine, profile, prefix) = pinned_tree();
    // Debian's irqbalance environment file, with an argument of the operator's.
    let irqbalance_env =
        "# irqbalance's settings\n#IRQBALANCE_ONESHOT=\nIRQBALANCE_ARGS=\"--powerthresh=2\"\n";
    std::fs::create_dir_all(prefix.join("etc/default")).unwrap();
    std::fs::write(prefix.join("etc/default/irqbalance"), irqbalance_env).unwrap();
    let (t, p, pr) = (
        tree.to_str().unwrap(),
        prefix.to_str().unwrap(),
        profile.to_str().unwrap(),
    );
    let o = wstune120(&[
        "apply",
        "--root",
        t,
        "--prefix",
        p,
        "--profile",
        pr,
        "--nic",
        "eth0",
        "--yes",
    ]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let affinity = |irq: u32| {
        std::fs::read_to_string(tree.join(format!("proc/irq/{irq}/smp_affinity_list"))).unwrap()
    };
    for (k, irq) in (40..48).enumerate() {
        assert_eq!(affinity(irq).trim(), (8 + k).to_string(), "IRQ {irq}");
    }
    let rps =
        std::fs::read_to_string(tree.join("sys/class/net/eth0/queues/rx-3/rps_cpus")).unwrap();
    assert_eq!(rps.trim(), "ff00ff00", "the node's CPUs 8-15 and 24-31");
    let flow =
        std::fs::read_to_string(tree.join("proc/sys/net/core/rps_sock_flow_entries")).unwrap();
    assert_eq!(flow.trim(), "32768");
    assert!(
        stdout(&o).contains("kept at boot by wstune-nic-irq.service"),
        "{}",
        stdout(&o)
    );
    // irqbalance keeps off them: its arguments name wstune's policy script, the operator's
    // argument kept, and the running daemon is restarted as a planned action.
    assert_eq!(
        std::fs::read_to_string(prefix.join("etc/default/irqbalance")).unwrap(),
        "# irqbalance's settings\n#IRQBALANCE_ONESHOT=\nIRQBALANCE_ARGS=\"--powerthresh=2 --policyscript=/etc/wstune/irqbalance-policy.sh\"\n"
    );
    assert!(
        stdout(&o).contains("active -> restarted")
            && stdout(&o)
                .contains("(irqbalance is restarted to read it: systemctl try-restart irqbalance)"),
        "{}",
        stdout(&o)
    );
    // Done already: a second apply plans nothing, files included.
    let again = wstune120(&[
        "apply",
        "--root",
        t,
        "--prefix",
        p,
        "--profile",
        pr,
        "--nic",
        "eth0",
        "--yes",
    ]);
    assert!(
        stdout(&again).contains("Nothing to change"),
        "{}",
        stdout(&again)
    );
    // The files apply wrote, wherever --root and --prefix put them.
    let find = |name: &str| {
        walk(dir.path())
            .into_iter()
            .find(|f| f.ends_with(name) && !f.starts_with(&pristine))
            .unwrap_or_else(|| panic!("no {name} written"))
    };
    let script = find("etc/wstune/nic-irq.sh");
    // irqbalance runs the policy script for each interrupt (device path, number): ban=true for
    // exactly the pinned ones, found by name; nothing for the disk's; always exit 0.
    let policy = find("etc/wstune/irqbalance-policy.sh");
    // irqbalance execs it (popen "exec SCRIPT DEVPATH IRQ"), so it is run here as it runs
    // it: directly, which needs the executable bit.
    for irq in [30].into_iter().chain(40..48) {
        let o = Command::new(&policy)
            .args(["/sys/devices/pci0000:00/0000:3b:00.0", &irq.to_string()])
            .arg(&tree)
            .output()
            .unwrap();
        assert!(o.status.success(), "IRQ {irq}: {}", stderr(&o));
        let want = if irq == 30 { "" } else { "ban=true\n" };
        assert_eq!(stdout(&o), want, "IRQ {irq}");
    }
    let unit = find("etc/systemd/system/wstune-nic-irq.service");
    let rules = std::fs::read_to_string(find("etc/udev/rules.d/60-wstune-nic.rules")).unwrap();
    assert!(
        rules.contains("ENV{SYSTEMD_WANTS}+=\"wstune-nic-irq.service\""),
        "{rules}"
    );
    // A reboot: the numbers are the kernel's again, and the script finds them by name.
    for irq in 40..48 {
        std::fs::write(
            tree.join(format!("proc/irq/{irq}/smp_affinity_list")),
            "0-31\n",
        )
        .unwrap();
    }
    let sh = Command::new("sh").arg(&script).arg(&tree).output().unwrap();
    assert!(
        sh.status.success(),
        "{}",
        String::from_utf8_lossy(&sh.stderr)
    );
    for (k, irq) in (40..48).enumerate() {
        assert_eq!(
            affinity(irq).trim(),
            (8 + k).to_string(),
            "IRQ {irq} after the boot script"
        );
    }
    if common::have("systemd-analyze") {
        let v = Command::new("systemd-analyze")
            .args(["verify", unit.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            v.status.success(),
            "systemd-analyze verify: {}",
            String::from_utf8_lossy(&v.stderr)
        );
    } else {
        common::skip(
            "systemd-analyze",
            "systemd is not installed (apt-get install systemd)",
        );
    }
    let o = wstune120(&["rollback", "--root", t, "--prefix", p, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(tree.join("var"));
    common::assert_same_tree(&pristine, &tree);
    assert!(
        walk(&prefix)
            .iter()
            .all(|f| !f.to_string_lossy().contains("wstune-nic")
                && !f.to_string_lossy().contains("irqbalance-policy")),
        "the prefix holds only the operator's file and the journal again"
    );
    assert_eq!(
        std::fs::read_to_string(prefix.join("etc/default/irqbalance")).unwrap(),
        irqbalance_env,
        "irqbalance's file back byte for byte"
    );
}

/// `apply --nic` on the pinned host, files under --prefix.
fn apply_pinned(tree: &Path, prefix: &Path, profile: &Path) -> std::process::Output {
    wstune120(&[
        "apply",
        "--root",
        tree.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
        "--nic",
        "eth0",
        "--yes",
    ])
}

/// irqbalance's environment file as operators write it, `export` before the assignment and a
/// comment after it: apply adds its policy script to that same assignment, and rollback puts
/// the file back byte for byte. It was not recognised: a second assignment was appended, and
/// the operator's argument was lost when the file was sourced. Edited in place, `export
/// IRQBALANCE_ARGS=...` was still skipped by systemd's EnvironmentFile= (irqbalance.service),
/// and the comment would have joined its value: the assignment is a plain one now, with
/// `export` and the comment on lines of their own, so a shell and systemd read the same.
#[test]
fn an_exported_irqbalance_args_keeps_the_operators_argument_and_rollback_restores_it() {
    let (_dir, tree, pristine, profile, prefix) = pinned_tree();
    let env = "# irqbalance's settings\nexport IRQBALANCE_ARGS=\"--banirq=77\"   # the disk's interrupt\nIRQBALANCE_ONESHOT=no\n";
    let file = prefix.join("etc/default/irqbalance");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, env).unwrap();
    let o = apply_pinned(&tree, &prefix, &profile);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let ours = "--policyscript=/etc/wstune/irqbalance-policy.sh";
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("# irqbalance's settings\n# the disk's interrupt\nIRQBALANCE_ARGS=\"--banirq=77 {ours}\"\nexport IRQBALANCE_ARGS\nIRQBALANCE_ONESHOT=no\n")
    );
    // As irqbalance's init script reads it: sourced by a shell.
    let sh = Command::new("sh")
        .args(["-c", ". \"$1\"; printf '%s' \"$IRQBALANCE_ARGS\"", "sh"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&sh),
        format!("--banirq=77 {ours}"),
        "{}",
        stderr(&sh)
    );
    let o = wstune120(&[
        "rollback",
        "--root",
        tree.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
        "--yes",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), env);
    let _ = std::fs::remove_dir_all(tree.join("var"));
    assert_same_tree(&pristine, &tree);
}

/// An operator's comment under the header of the NIC sysctl file, and a blank line, were taken
/// for part of wstune's header: a second apply dropped them, rewrote a file whose settings had
/// not changed and reported "Applied 1 change(s)". It plans nothing now and keeps the file.
#[test]
fn a_second_apply_keeps_an_operators_comment_in_the_nic_sysctl_file_and_changes_nothing() {
    let (_dir, tree, _, profile, prefix) = pinned_tree();
    let o = apply_pinned(&tree, &prefix, &profile);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let path = prefix.join("etc/sysctl.d/60-wstune-nic.conf");
    let written = std::fs::read_to_string(&path).unwrap();
    let at = written
        .find("net.core.rps_sock_flow_entries")
        .unwrap_or_else(|| panic!("{written}"));
    let annotated = format!(
        "{}# RFS table sized with the proxy tier in mind (ops)\n\n{}",
        &written[..at],
        &written[at..]
    );
    std::fs::write(&path, &annotated).unwrap();
    let again = apply_pinned(&tree, &prefix, &profile);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(
        stdout(&again).contains("Nothing to change"),
        "{}",
        stdout(&again)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), annotated);
}

/// A copy of the default fixture with its eth0's ethtool settings (`wstune/ethtool/eth0`: what
/// the captured-tree backend answers for ethtool netlink), and an empty --prefix beside it.
fn tree_with_ethtool(ethtool: &str) -> (Tree, std::path::PathBuf, std::path::PathBuf) {
    let tree = default_tree_with("proc/sys/net/core/netdev_budget", "300\n");
    std::fs::write(tree.join("proc/sys/net/core/netdev_budget_usecs"), "2000\n").unwrap();
    std::fs::create_dir_all(tree.join("wstune/ethtool")).unwrap();
    std::fs::write(tree.join("wstune/ethtool/eth0"), ethtool).unwrap();
    let pristine = tree.scratch().join("pristine");
    copy_dir(&tree, &pristine);
    let prefix = tree.scratch().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    (tree, pristine, prefix)
}

/// A NIC whose rx_missed_errors grow during `apply --watch` gets its receive ring raised to its
/// maximum (through the captured tree's ethtool settings, the Backend methods the live host
/// answers over ethtool netlink), kept at boot by RxBufferSize= in the same .link file as its
/// raised channel counts. udev's net_setup_link reads that file and tries the ring (in a
/// private namespace, on a veth of the NIC's name), and rollback restores tree and prefix.
#[test]
fn a_receive_ring_that_ran_out_during_the_watch_is_raised_kept_at_boot_and_rolled_back() {
    let (tree, pristine, prefix) =
        tree_with_ethtool("rx_ring: 512\nrx_ring_max: 4096\ncombined: 1\nmax_combined: 4\n");
    let (t, p) = (tree.to_str().unwrap(), prefix.to_str().unwrap());
    let o = watched_while_rewritten(
        &["apply", "--root", t, "--prefix", p, "--watch", "4", "--yes"],
        &tree,
        "sys/class/net/eth0/statistics/rx_missed_errors",
        "500\n",
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 0, "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("eth0 receive ring") && out.contains("512 -> 4096"),
        "{out}"
    );
    assert!(
        out.contains("eth0 rx_missed_errors +500") && out.contains("the link drops for a moment"),
        "{out}"
    );
    // One queue per core of the two (a tree without topology: each CPU its own core), and the
    // ring at its maximum.
    assert_eq!(
        std::fs::read_to_string(tree.join("wstune/ethtool/eth0")).unwrap(),
        "rx_ring: 4096\nrx_ring_max: 4096\ncombined: 2\nmax_combined: 4\n"
    );
    let link_path = prefix.join("etc/systemd/network/10-wstune-eth0.link");
    let link = std::fs::read_to_string(&link_path).unwrap();
    assert!(
        link.contains("[Match]\nOriginalName=eth0\n")
            && link.ends_with("CombinedChannels=2\nRxBufferSize=4096\n"),
        "{link}"
    );
    // udev's own reader: the file is applied, and its ring setting reaches the driver (a veth
    // has no ring, and says so).
    if !common::have("udevadm") {
        common::skip("udev", "udevadm is not installed (apt-get install udev)");
    } else if let Some(u) = common::in_netns(&format!(
        "mount --make-rprivate / && mount -t sysfs sysfs /sys && ip link add eth0 type veth peer name eth1 && mount --bind {} /etc/systemd/network && udevadm test-builtin net_setup_link /sys/class/net/eth0",
        link_path.parent().unwrap().display()
    )) {
        let text = format!("{}{}", stdout(&u), stderr(&u));
        assert!(u.status.success(), "{text}");
        assert!(
            text.contains("eth0: Config file /etc/systemd/network/10-wstune-eth0.link is applied"),
            "{text}"
        );
        assert!(
            text.contains("Could not set ring buffer, ignoring: Operation not supported"),
            "RxBufferSize= read and tried: {text}"
        );
    }
    // Changed by hand since: check reports the drift, and rollback refuses without --force.
    std::fs::write(
        tree.join("wstune/ethtool/eth0"),
        "rx_ring: 2048\nrx_ring_max: 4096\ncombined: 2\nmax_combined: 4\n",
    )
    .unwrap();
    let (_, r) = check_json(&tree, &["--prefix", p]);
    let drift = finding(&r, "wstune.journal.drift");
    assert!(
        drift["note"]
            .as_str()
            .unwrap()
            .contains("eth0's receive ring is 2048 (applied 4096)"),
        "{drift}"
    );
    let o = wstune120(&["rollback", "--root", t, "--prefix", p, "--yes"]);
    assert_eq!(code(&o), 3, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("eth0's receive ring: applied 4096, now 2048 (changed by hand)"),
        "{}",
        stderr(&o)
    );
    let o = wstune120(&["rollback", "--root", t, "--prefix", p, "--yes", "--force"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("eth0's receive ring <- 512")
            && stdout(&o).contains("eth0's channels <- rx 0 tx 0 combined 1"),
        "{}",
        stdout(&o)
    );
    let _ = std::fs::remove_dir_all(tree.join("var"));
    // The counter the watch saw grow is the kernel's, not apply's: put back for the comparison.
    std::fs::write(
        tree.join("sys/class/net/eth0/statistics/rx_missed_errors"),
        "0\n",
    )
    .unwrap();
    assert_same_tree(&pristine, &tree);
    assert!(!link_path.exists(), "the .link file is removed again");
}

/// The receive budget follows the watch: a quiet softnet plans nothing, a growing time_squeeze
/// doubles net.core.netdev_budget and netdev_budget_usecs (now and in the NIC sysctl file),
/// and rollback puts the tree back.
#[test]
fn the_receive_budget_is_raised_only_when_time_squeeze_grew_during_the_watch() {
    let (tree, _, prefix) = tree_with_ethtool("combined: 1\nmax_combined: 1\n");
    let rel = "proc/net/softnet_stat";
    let before = softnet_row(1000, 3, 7) + &softnet_row(2000, 0, 1);
    std::fs::write(tree.join(rel), &before).unwrap();
    let pristine = tree.parent().unwrap().join("pristine2");
    copy_dir(&tree, &pristine);
    let (t, p) = (tree.to_str().unwrap(), prefix.to_str().unwrap());
    let o = wstune120(&[
        "apply",
        "--root",
        t,
        "--prefix",
        p,
        "--watch",
        "1",
        "--dry-run",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("the kernel is not busy receiving"),
        "{}",
        stdout(&o)
    );
    assert!(!stdout(&o).contains("netdev_budget"), "{}", stdout(&o));

    let squeezed = softnet_row(1500, 3, 40) + &softnet_row(2600, 0, 1);
    let o = watched_while_rewritten(
        &["apply", "--root", t, "--prefix", p, "--watch", "4", "--yes"],
        &tree,
        rel,
        &squeezed,
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 0, "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(
            "the receive softirq ran out of budget during the watch (softnet time_squeeze +33"
        ),
        "{out}"
    );
    let value =
        |k: &str| std::fs::read_to_string(tree.join(format!("proc/sys/net/core/{k}"))).unwrap();
    assert_eq!(
        (
            value("netdev_budget").trim(),
            value("netdev_budget_usecs").trim()
        ),
        ("600", "4000")
    );
    let file = std::fs::read_to_string(prefix.join("etc/sysctl.d/60-wstune-nic.conf")).unwrap();
    assert!(
        file.ends_with("net.core.netdev_budget = 600\nnet.core.netdev_budget_usecs = 4000\n"),
        "{file}"
    );
    let o = wstune120(&["rollback", "--root", t, "--prefix", p, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(tree.join("var"));
    std::fs::write(tree.join(rel), &before).unwrap();
    assert_same_tree(&pristine, &tree);
    assert!(!prefix.join("etc/sysctl.d/60-wstune-nic.conf").exists());
}

/// A NIC check that misses its target is advice until a watch shows the kernel busy
/// receiving: then it is a warning whose fix is shown whole, not an optional extra.
#[test]
fn a_queue_count_the_watch_found_short_is_a_warning_not_advice() {
    let tree = default_tree_with("proc/sys/net/core/somaxconn", "4096\n");
    let quiet = check_json(&tree, &[]).1;
    let rx = finding(&quiet, "linux.nic.rx_queues[eth0]");
    assert_eq!(
        (rx["status"].as_str(), rx["advice"].as_bool()),
        (Some("info"), Some(true)),
        "{rx}"
    );
    let t = tree.to_str().unwrap();
    let o = watched_while_rewritten(
        &["check", "--root", t, "--watch", "4", "-f", "json"],
        &tree,
        "sys/class/net/eth0/statistics/rx_missed_errors",
        "500\n",
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let rx = finding(&r, "linux.nic.rx_queues[eth0]");
    assert_eq!(
        (rx["status"].as_str(), rx["advice"].as_bool()),
        (Some("warn"), Some(false)),
        "{rx}"
    );
    assert!(
        rx["note"].as_str().unwrap().contains("busy receiving"),
        "{rx}"
    );
    // People see its commands without --why.
    let o = watched_while_rewritten(
        &["check", "--root", t, "--watch", "4", "--show", "all"],
        &tree,
        "sys/class/net/eth0/statistics/rx_missed_errors",
        "900\n",
    );
    let out = stdout(&o);
    let block = out
        .split("\n\n")
        .find(|b| b.contains("linux.nic.rx_queues[eth0]"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(block.starts_with("WARN"), "{block}");
    assert!(block.contains("ethtool -L eth0 combined"), "{block}");
    assert!(!block.contains("advice, optional"), "{block}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
