//! NIC tuning on captured trees and on veths in private namespaces: a NIC's queues applied and
//! rolled back (udev applies the files), interrupts pinned per queue, receive rings raised and kept
//! at boot, the receive budget, and `rings set` against a real driver.

use crate::common;

use super::{default_tree_with, softnet_row, watched_while_rewritten, wstune120};
use common::{
    assert_same_tree, check_json, code, copy_dir, finding, fixture, stderr, stdout, Tree,
};
use std::path::Path;
use std::process::Command;

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

/// RINGS_SET is well formed: sent to a veth in a private namespace, the kernel parses it, finds
/// the device and hands it to the driver, which has no ring (EOPNOTSUPP); sent for a name that
/// is no device, the kernel answers ENODEV. (No NIC here has a ring to change.)
#[test]
fn rings_set_reaches_the_driver_of_a_veth_and_names_a_missing_device() {
    let exe = std::env::current_exe().unwrap();
    let Some(o) = common::in_netns(&format!(
        "ip link add wsr0 type veth peer name wsr1 && WSTUNE_RINGS_IN_NETNS=1 {} --exact cli::nic::rings_set_in_a_private_namespace --ignored --nocapture --test-threads 1",
        exe.display()
    )) else {
        return;
    };
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}");
    // The inner test's lines (libtest prints its own name before the first).
    let line = |tag: &str| {
        out.lines()
            .find_map(|l| l.find(tag).map(|at| l[at..].to_string()))
            .unwrap_or_else(|| panic!("no {tag} in {out}"))
    };
    let veth = line("VETH ");
    assert!(veth.contains("Operation not supported"), "{veth}");
    let missing = line("MISSING ");
    assert!(missing.contains("No such device"), "{missing}");
}

/// Run by the test above, inside its namespace (never against the host's own links).
#[test]
#[ignore = "run inside a private network namespace by rings_set_reaches_the_driver_of_a_veth_and_names_a_missing_device"]
fn rings_set_in_a_private_namespace() {
    if std::env::var("WSTUNE_RINGS_IN_NETNS").is_err() {
        return;
    }
    let host = wstune::host::live(None);
    let said = |r: Result<(), wstune::host::WriteError>| match r {
        Ok(()) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    println!("VETH {}", said(host.set_rx_ring("wsr0", 256)));
    println!("MISSING {}", said(host.set_rx_ring("wsnope0", 256)));
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

/// This host's CPUs in the order apply hands them to queues, one thread of each physical core
/// first (`topology/thread_siblings_list`), and how many cores there are.
fn cores_first(cpus: u32) -> (Vec<u32>, usize) {
    let (mut seen, mut first, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for c in 0..cpus {
        let siblings = std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"
        ))
        .map_or_else(|_| c.to_string(), |t| t.trim().to_string());
        if seen.contains(&siblings) {
            rest.push(c);
        } else {
            seen.push(siblings);
            first.push(c);
        }
    }
    let cores = first.len();
    first.extend(rest);
    (first, cores)
}

/// A 4-queue veth in a private namespace, started at one queue each way: `apply --nic` raises
/// its channel counts over ethtool netlink (one queue per physical core, at most the 4 it has) and keeps
/// them in a .link file; a second apply sets each new queue's RPS, RFS and XPS and keeps them
/// in a udev rule. udev itself applies both files (`udevadm test`, `test-builtin
/// net_setup_link`), `check` reports a queue changed by hand as drift, and two rollbacks put
/// every count, queue, value and file back byte for byte.
#[test]
fn apply_tunes_a_nics_queues_and_rollback_restores_them_in_a_private_namespace() {
    if !common::have("ethtool") {
        return common::skip(
            "ethtool",
            "ethtool is not installed (apt-get install ethtool)",
        );
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/nic_apply.sh");
    let Some(o) = common::in_netns(&format!("bash {}", script.display())) else {
        return;
    };
    let out = stdout(&o);
    let line = |tag: &str| common::tagged_line(&o, tag);
    let decoded = |tag: &str| common::tagged_base64(&o, tag);
    // Not physical and not named: the plan leaves it alone.
    assert!(!line("PLAN-UNNAMED ").contains("wsq0"), "{out}");
    assert_eq!(line("STEP dry-run "), "STEP dry-run rc=0 same=yes");
    let plan = line("PLAN ");
    assert!(
        plan.contains("named with --nic") && plan.contains("RSS profile numa_scaling"),
        "{plan}"
    );
    assert!(
        plan.contains("wsq0 channels") && plan.contains("rx 1, tx 1 ->"),
        "{plan}"
    );
    assert_eq!(line("STEP apply "), "STEP apply rc=0 same=no");
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    // One queue per physical core (scaling.rst), at most the veth's 4.
    let (order, cores) = cores_first(cpus);
    let n = (cores as u32).min(4);
    assert_eq!(line("CHANNELS "), format!("CHANNELS RX:{n}TX:{n}"));
    let link = decoded("LINK ");
    assert!(link.contains("[Match]\nOriginalName=wsq0\n"), "{link}");
    assert!(
        link.contains("NamePolicy=") && link.contains(&format!("RxChannels={n}\nTxChannels={n}\n")),
        "{link}"
    );
    assert_eq!(line("STEP second-apply "), "STEP second-apply rc=0");
    let mask = |l: &str| {
        u64::from_str_radix(&l.rsplit('=').next().unwrap().replace(',', ""), 16)
            .unwrap_or_else(|e| panic!("{l}: {e}"))
    };
    let flow = (32768 / n).next_power_of_two();
    for q in 0..n {
        // Every CPU (one NUMA node here) steers each queue: a veth receives on the sender's CPU.
        let rps = line(&format!(
            "AFTER /sys/class/net/wsq0/queues/rx-{q}/rps_cpus="
        ));
        assert_eq!(mask(&rps), (1u64 << cpus) - 1, "{rps}");
        let cnt = line(&format!(
            "AFTER /sys/class/net/wsq0/queues/rx-{q}/rps_flow_cnt="
        ));
        assert!(cnt.ends_with(&format!("={flow}")), "{cnt}");
        // Each transmit queue sent on by the CPUs whose position (cores first) is q modulo the
        // queue count.
        let xps = line(&format!(
            "AFTER /sys/class/net/wsq0/queues/tx-{q}/xps_cpus="
        ));
        let want: u64 = order
            .iter()
            .enumerate()
            .filter(|(k, _)| *k as u32 % n == q)
            .map(|(_, c)| 1u64 << c)
            .sum();
        assert_eq!(mask(&xps), want, "{xps}");
    }
    let rules = decoded("RULES ");
    assert!(
        rules.contains("# nic wsq0\nACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"wsq0\", "),
        "{rules}"
    );
    assert!(
        rules.contains(&format!(
            "ATTR{{queues/rx-{}/rps_flow_cnt}}=\"{flow}\"",
            n - 1
        )),
        "{rules}"
    );
    assert_eq!(line("DRIFT "), "DRIFT ['pass']");
    let hand = line("DRIFT-HAND ");
    assert!(
        hand.starts_with("DRIFT-HAND warn")
            && hand.contains("/sys/class/net/wsq0/queues/rx-0/rps_cpus is 1"),
        "{hand}"
    );
    let refused = line("REFUSED ");
    assert!(
        refused.starts_with("REFUSED rc=3 rx0=") && refused.ends_with("(changed by hand)"),
        "{refused}"
    );
    assert_eq!(
        mask(refused.split_whitespace().nth(2).unwrap()),
        1,
        "left as changed: {refused}"
    );
    if out.contains("UDEV-MISSING") {
        common::skip("udev", "udevadm is not installed (apt-get install udev)");
    } else {
        // The rule writes every queue setting again (3 per queue), the changed one included.
        let rule = line("UDEV-RULE ");
        assert!(
            rule.starts_with("UDEV-RULE rc=0 rx0=")
                && rule.ends_with(&format!(" {} writes", 3 * n)),
            "{rule}"
        );
        assert_eq!(
            mask(rule.split_whitespace().nth(2).unwrap()),
            (1u64 << cpus) - 1,
            "{rule}"
        );
        assert_eq!(
            line("UDEV-LINK "),
            format!("UDEV-LINK rc=0 Config file /etc/systemd/network/10-wstune-wsq0.link is applied channels=RX:{n}TX:{n}")
        );
    }
    assert_eq!(
        line("STEP rollback "),
        "STEP rollback rc=0 same=yes",
        "every count, queue, value and file back, byte for byte: {}",
        stderr(&o)
    );
}

/// tests/scripts/nic_identity.sh's `CASE` in a private namespace; None (a recorded skip) where
/// namespaces or ethtool are missing.
fn identity_case(case: &str) -> Option<std::process::Output> {
    if !common::have("ethtool") {
        common::skip(
            "ethtool",
            "ethtool is not installed (apt-get install ethtool)",
        );
        return None;
    }
    common::in_netns(&common::lib_script(
        "nic_identity.sh",
        &format!("CASE={case}"),
    ))
}

/// The state a NIC line shows, less its tag.
fn nic_state(o: &std::process::Output, tag: &str) -> String {
    common::tagged_line(o, tag)
        .trim_start_matches(tag)
        .trim()
        .to_string()
}

/// Two veths, vb tuned by three applies (channels, then RPS, flow counts and XPS), then renamed
/// vc while va takes the name vb. Rollback finds the tuned NIC by the identity the journal
/// recorded (its index in this namespace) and restores it under its new name, saying so, and
/// never touches the NIC that now has its old name; three rollbacks return every value, queue
/// and file to what it was.
#[test]
fn rollback_restores_a_renamed_nic_and_never_the_nic_that_took_its_name() {
    let Some(o) = identity_case("swap") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let applies = common::tagged(&o, "APPLY ");
    assert!(applies.iter().all(|l| l.starts_with("APPLY rc=0")), "{all}");
    assert_ne!(
        nic_state(&o, "VB-TUNED "),
        nic_state(&o, "VB-BEFORE "),
        "apply tuned vb: {all}"
    );
    assert_eq!(
        nic_state(&o, "VC-AFTER "),
        nic_state(&o, "VB-BEFORE "),
        "the tuned NIC, renamed, is back as it was: {all}"
    );
    assert_eq!(
        nic_state(&o, "VB-AFTER "),
        nic_state(&o, "VA-BEFORE "),
        "the NIC that took the name was never touched: {all}"
    );
    let rollbacks = common::tagged(&o, "ROLLBACK ");
    assert_eq!(rollbacks.len(), 3, "{all}");
    // One rollback per entry apply made; one more finds nothing (apply may have had nothing
    // left to change the third time).
    let made = applies.iter().filter(|l| l.contains("Applied")).count();
    for (k, r) in rollbacks.iter().enumerate() {
        if k < made {
            assert!(r.starts_with("ROLLBACK rc=0"), "{r}\n{all}");
            assert!(r.contains("vb (now vc): the same NIC (ifindex"), "{r}");
            assert!(r.contains("changed back") && !r.contains("Some("), "{r}");
        } else {
            assert!(r.contains("nothing to roll back"), "{r}");
        }
    }
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
}

/// Channel counts changed by hand after apply raised them are listed by rollback and kept
/// without --force (nothing is changed); --force restores them.
#[test]
fn rollback_lists_channel_counts_changed_by_hand_and_keeps_them_without_force() {
    let Some(o) = identity_case("hand") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let hand = nic_state(&o, "HAND ");
    let counts = |s: &str| s.split_whitespace().next().unwrap().to_string();
    let applied = counts(&nic_state(&o, "APPLIED "));
    let now = counts(&hand);
    let n = |c: &str, k: &str| {
        c.split(k)
            .nth(1)
            .unwrap()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    };
    assert_eq!(nic_state(&o, "KEPT "), hand, "kept as changed: {all}");
    let refused = common::tagged_line(&o, "ROLLBACK ");
    assert!(refused.starts_with("ROLLBACK rc=3"), "{refused}\n{all}");
    let want = format!(
        "wsh's channels: applied rx {a}, tx {a}, now rx {h}, tx {h} (changed by hand)",
        a = n(&applied, "RX:"),
        h = n(&now, "RX:")
    );
    assert!(refused.contains(&want), "{want}: {refused}");
    assert!(refused.contains("--force"), "{refused}");
    let forced = common::tagged(&o, "ROLLBACK ");
    assert!(forced[1].starts_with("ROLLBACK rc=0"), "{all}");
    assert!(nic_state(&o, "FORCED ").starts_with("ch=RX:1TX:1"), "{all}");
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
}

/// A NIC deleted after two applies: each rollback restores the rest of its entry (sysctls,
/// files), marks it rolled back so the older one is reached, says plainly which NIC values it
/// could not restore and why, once, in ethtool's words, and exits 3 (a partial restore) without
/// claiming that nothing needed changing; every value and file but the NIC's is back as it was.
#[test]
fn rollback_of_a_deleted_nic_restores_the_rest_and_reaches_older_entries() {
    let Some(o) = identity_case("del") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let r = common::tagged(&o, "ROLLBACK ");
    assert_eq!(r.len(), 3, "{all}");
    for l in &r[..2] {
        assert!(l.starts_with("ROLLBACK rc=3"), "{l}\n{all}");
        assert!(
            l.contains("wsd's values were not restored")
                && l.contains("no link here has its ifindex")
                && l.contains("went with the device"),
            "{l}"
        );
        assert!(!l.contains("Some(") && !l.contains("No such device"), "{l}");
        // Never "nothing needed changing" next to what was left out, and each NIC's values
        // not restored said once, not again in the closing error.
        assert!(!l.contains("nothing needed changing"), "{l}");
        assert_eq!(l.matches("values were not restored").count(), 1, "{l}");
        assert!(
            l.contains("but not all of it: wsd's values (above) were not restored"),
            "{l}"
        );
    }
    assert!(r[1].contains("channels rx 1, tx 1"), "{}", r[1]);
    assert!(r[2].contains("nothing to roll back"), "{}", r[2]);
    let list = common::tagged_line(&o, "LIST ");
    assert_eq!(list.matches("rolled back").count(), 2, "{list}");
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
}

/// The tuned veth deleted and a new link created under its name: rollback never touches that
/// other NIC (its values are listed as not restored, with the fix), restores the rest of the
/// entry and exits 3; the entry is partly rolled back, and `--id ID --force` restores the
/// values onto the link of that name when the operator says so.
#[test]
fn rollback_refuses_a_nic_that_took_the_name_and_restores_the_rest() {
    let Some(o) = identity_case("taken") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        nic_state(&o, "NEW-AFTER "),
        nic_state(&o, "NEW-BEFORE "),
        "the other NIC was never touched: {all}"
    );
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
    let r = common::tagged(&o, "ROLLBACK ");
    assert!(r[0].starts_with("ROLLBACK rc=3"), "{all}");
    assert!(
        r[0].contains("wst's values were not restored (channels rx 1, tx 1)")
            && r[0].contains("the link now named wst is another NIC (ifindex")
            && r[0].contains("--force"),
        "{}",
        r[0]
    );
    let list = common::tagged_line(&o, "LIST ");
    assert!(list.contains("rolled back but for what it left"), "{list}");
    assert!(r[1].starts_with("ROLLBACK rc=0"), "{all}");
    assert!(
        nic_state(&o, "FORCED ").starts_with("ch=RX:1TX:1"),
        "--force restored the counts by name: {all}"
    );
}

/// The NIC an entry tuned is refused (another link took its name), so the first rollback
/// restores the rest and leaves the entry partly rolled back; the operator then sets a sysctl
/// that rollback restored and writes the sysctl file it removed. `--id ID --force`, meant for
/// the refused NIC, restores that NIC's channel counts by name and nothing else: it said so
/// ("restoring the parts left by the earlier rollback: NIC wsf"), and the operator's value and
/// file are as they set them (before, the whole entry was restored again over them).
#[test]
fn a_forced_rollback_of_a_partly_rolled_back_entry_restores_only_what_was_left() {
    let Some(o) = identity_case("forced") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        common::tagged_line(&o, "SOMAXCONN "),
        "SOMAXCONN 777",
        "{all}"
    );
    assert_eq!(
        common::tagged_line(&o, "OPERATOR-FILE "),
        "OPERATOR-FILE net.core.somaxconn = 777",
        "{all}"
    );
    let r = common::tagged(&o, "ROLLBACK ");
    assert_eq!(r.len(), 3, "{all}");
    assert!(r[0].starts_with("ROLLBACK rc=3"), "{all}");
    assert!(r[1].starts_with("ROLLBACK rc=0"), "{all}");
    assert!(
        r[1].contains("Restoring the parts left by the earlier rollback: NIC wsf (refused: channels rx 1, tx 1)"),
        "{}",
        r[1]
    );
    // Only the NIC's part is previewed and compared: the operator's changes are not even
    // listed as hand changes.
    assert!(
        !r[1].contains("somaxconn") && !r[1].contains("60-wstune.conf"),
        "{}",
        r[1]
    );
    assert!(
        nic_state(&o, "FORCED ").starts_with("ch=RX:1TX:1"),
        "--force restored the counts by name: {all}"
    );
    let list = common::tagged_line(&o, "LIST ");
    assert!(
        list.contains("rolled back") && !list.contains("but for"),
        "{list}"
    );
    assert!(r[2].contains("already rolled back"), "{}", r[2]);
}

/// RFS's flow table is one for the whole host (the initial network namespace has it; a
/// scratch file stands in for it here): apply raised it for the RPS it set on a veth's queues.
/// Another link then takes the veth's name: the rollback leaves that NIC alone, and the table
/// its RPS uses with it (before, the table was restored while the NIC kept its RPS), restores
/// everything else, and `--id ID --force` restores both.
#[test]
fn a_refused_nic_keeps_the_rfs_flow_table_its_rps_uses() {
    let Some(o) = identity_case("flow") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    // The net.core values the NIC plan sets are not per network namespace: a fresh one has
    // none of them. So a rollback cannot write them into the wrong namespace's copy; what it
    // must not do is restore the one table while a NIC left alone still uses it.
    assert_eq!(common::tagged_line(&o, "NS-HAS "), "NS-HAS ", "{all}");
    assert_eq!(
        common::tagged_line(&o, "FLOW-BEFORE "),
        "FLOW-BEFORE 0",
        "{all}"
    );
    assert_eq!(
        common::tagged_line(&o, "FLOW-APPLIED "),
        "FLOW-APPLIED 32768",
        "{all}"
    );
    assert_eq!(
        common::tagged_line(&o, "FLOW-LEFT "),
        "FLOW-LEFT 32768",
        "left with the NIC: {all}"
    );
    let r = common::tagged(&o, "ROLLBACK ");
    assert!(r[0].starts_with("ROLLBACK rc=3"), "{all}");
    assert!(
        r[0].contains("net.core.rps_sock_flow_entries 0 (RFS's flow table, one for the whole host, which its RPS uses)): no link here has its ifindex"),
        "{}",
        r[0]
    );
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
    assert!(r[1].starts_with("ROLLBACK rc=0"), "{all}");
    assert_eq!(
        common::tagged_line(&o, "FLOW-FORCED "),
        "FLOW-FORCED 0",
        "{all}"
    );
}

/// A veth in a container's network namespace tuned by an apply run there; the rollback is run
/// in another namespace (the host's, here a test namespace), whose own somaxconn already is
/// what the profile sets. The NIC is refused (recorded in the other namespace), and so are the
/// entry's net.* values: they are that namespace's, and writing them here would have set this
/// namespace's somaxconn to the container's old 4096. The files are restored; `rollback --id`
/// run in the container's namespace then restores the NIC and its net.* values there, and
/// nothing here.
#[test]
fn a_rollback_in_another_network_namespace_leaves_that_namespaces_values() {
    let Some(o) = identity_case("netns") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert!(
        common::tagged_line(&o, "APPLY ").starts_with("APPLY rc=0 Applied"),
        "{all}"
    );
    let before = nic_state(&o, "B-BEFORE ");
    let applied = nic_state(&o, "B-APPLIED ");
    assert!(
        before.starts_with("4096 ") && applied.starts_with("65535 "),
        "{all}"
    );
    assert_eq!(
        common::tagged_line(&o, "HERE-SOMAXCONN "),
        "HERE-SOMAXCONN 65535",
        "this namespace's own value: {all}"
    );
    let r = common::tagged(&o, "ROLLBACK ");
    assert!(r[0].starts_with("ROLLBACK rc=3"), "{all}");
    assert!(
        r[0].contains(
            "another network namespace's net.* values were not restored (net.core.somaxconn 4096"
        ) && r[0].contains("the apply ran in network namespace net:["),
        "{}",
        r[0]
    );
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
    assert_eq!(nic_state(&o, "B-LEFT "), applied, "{all}");
    assert!(
        common::tagged_line(&o, "LIST ").contains("rolled back but for what it left"),
        "{all}"
    );
    assert!(r[1].starts_with("ROLLBACK rc=0"), "{all}");
    assert!(
        r[1].contains("Restoring the parts left by the earlier rollback: NIC vn (in another network namespace: channels rx 1, tx 1); the net.* values of the network namespace the apply ran in (net.core.somaxconn 4096"),
        "{}",
        r[1]
    );
    assert_eq!(nic_state(&o, "B-AFTER "), before, "{all}");
    assert_eq!(
        common::tagged_line(&o, "HERE-AFTER "),
        "HERE-AFTER 65535",
        "{all}"
    );
    let lists = common::tagged(&o, "LIST ");
    assert!(
        lists[1].contains("rolled back") && !lists[1].contains("but for"),
        "{}",
        lists[1]
    );
}

/// A tuned veth renamed after two applies: both rollbacks find it by its index and restore
/// every count and queue setting under its new name, saying `wsr (now wsz)`.
#[test]
fn rollback_restores_a_renamed_nic_under_its_new_name() {
    let Some(o) = identity_case("rename") else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        nic_state(&o, "AFTER "),
        nic_state(&o, "BEFORE "),
        "restored under its new name: {all}"
    );
    for r in common::tagged(&o, "ROLLBACK ") {
        assert!(r.starts_with("ROLLBACK rc=0"), "{r}\n{all}");
        assert!(
            r.contains("note: wsr (now wsz): the same NIC (ifindex"),
            "{r}"
        );
        assert!(
            r.contains("/sys/class/net/wsz/") || r.contains("wsz's channels"),
            "{r}"
        );
    }
    assert_eq!(common::tagged_line(&o, "SAME "), "SAME yes", "{all}");
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
