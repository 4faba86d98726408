//! NIC tuning on veths in private namespaces, against a real driver and a real kernel: `rings
//! set` reaching the driver, a NIC's queues applied and rolled back, and rollback finding each
//! NIC again when it was renamed, deleted, changed by hand or taken over by another's name.

use crate::common;

use common::{stderr, stdout};
use std::path::Path;

/// RINGS_SET is well formed: sent to a veth in a private namespace, the kernel parses it, finds
/// the device and hands it to the driver, which has no ring (EOPNOTSUPP); sent for a name that
/// is no device, the kernel answers ENODEV. (No NIC here has a ring to change.)
#[test]
fn rings_set_reaches_the_driver_of_a_veth_and_names_a_missing_device() {
    let exe = std::env::current_exe().unwrap();
    let Some(o) = common::in_netns(&format!(
        "ip link add wsr0 type veth peer name wsr1 && WSTUNE_RINGS_IN_NETNS=1 {} --exact cli::nic::namespaces::rings_set_in_a_private_namespace --ignored --nocapture --test-threads 1",
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
