use super::budget::NIC_SYSCTL_HEAD;
use super::irq::{irq_script, with_policyscript, KeepArgs};
use super::udev::{rules_file, RULES_HEADER};
use super::*;
use crate::host::owned::{
    IRQBALANCE_POLICY, NIC_IRQ_SCRIPT, NIC_IRQ_UNIT, NIC_RULES_FILE, NIC_SYSCTL_FILE,
};
use crate::nic::{Irq, RxQueue, TxQueue};
use crate::profile::IrqPolicy;

fn veth(rx: u32, tx: u32, cpus: u32) -> NicFacts {
    NicFacts {
        name: "veth0".into(),
        address: Some("02:00:00:00:00:01".into()),
        physical: false,
        rx: (0..rx)
            .map(|index| RxQueue {
                index,
                rps_cpus: Some("0".into()),
                rps_flow_cnt: Some("0".into()),
            })
            .collect(),
        tx: (0..tx)
            .map(|index| TxQueue {
                index,
                xps_cpus: Some("0".into()),
            })
            .collect(),
        cpus: (0..cpus).collect(),
        local_cpus: (0..cpus).collect(),
        cores: (0..cpus).collect(),
        numa_node: None,
        irqs: vec![],
        channels: None,
        rx_ring: None,
        default_link: None,
        pci_slot: None,
    }
}

fn inputs<'a>(
    profile: &'a NicProfile,
    nics: &'a [NicFacts],
    named: bool,
    evidence: &'a Evidence,
) -> Inputs<'a> {
    Inputs {
        profile,
        nics,
        named,
        evidence,
        flow_entries: Some(0),
        irqbalance: Some(true),
        rules_now: "",
        irq_script_now: "",
        irq_policy_now: "",
        irqbalance_config: None,
        nic_sysctl_now: "",
        links_now: &[],
        budget: (Some(300), Some(2000)),
        scope: Scope {
            runtime: true,
            persist: true,
        },
        for_other_hosts: false,
    }
}

#[test]
fn without_evidence_nothing_is_planned_and_the_note_says_how_to_measure() {
    let (profile, nics, e) = (NicProfile::default(), [veth(2, 2, 8)], Evidence::default());
    let p = plan(&inputs(&profile, &nics, false, &e));
    assert!(p.actions.is_empty(), "{p:?}");
    assert!(p.notes[0].contains("--watch 10"), "{:?}", p.notes);
    // Measured and quiet: the note says what was measured.
    let quiet = Evidence {
        measured: true,
        found: vec![],
        quiet: vec!["softirq: busiest cpu0 1.0 %".into()],
        ring_drops: vec![],
        squeezed: None,
    };
    let p = plan(&inputs(&profile, &nics, false, &quiet));
    assert!(p.actions.is_empty());
    assert!(p.notes[0].contains("cpu0 1.0 %"), "{:?}", p.notes);
}

#[test]
fn evidence_tunes_rps_rfs_and_xps_and_persists_them_in_one_udev_rule() {
    let e = Evidence {
        measured: true,
        found: vec!["softnet drops +120 in 10 s".into()],
        quiet: vec![],
        ring_drops: vec![],
        squeezed: None,
    };
    let mut nic = veth(2, 4, 8);
    nic.physical = true;
    let (profile, nics) = (NicProfile::default(), [nic]);
    let p = plan(&inputs(&profile, &nics, false, &e));
    let writes: Vec<(&str, &str)> = p
        .actions
        .iter()
        .filter_map(|a| match &a.op {
            Op::KernelFile { path, value } => Some((path.as_str(), value.as_str())),
            _ => None,
        })
        .collect();
    assert!(writes.contains(&("/sys/class/net/veth0/queues/rx-0/rps_cpus", "ff")));
    // 32768 flow entries over 2 queues.
    assert!(writes.contains(&("/sys/class/net/veth0/queues/rx-1/rps_flow_cnt", "16384")));
    // 8 CPUs over 4 transmit queues: 0 and 4 on tx-0.
    assert!(writes.contains(&("/sys/class/net/veth0/queues/tx-0/xps_cpus", "11")));
    assert!(writes.contains(&("/sys/class/net/veth0/queues/tx-3/xps_cpus", "88")));
    let rules = &p.files.iter().find(|(f, _)| f == NIC_RULES_FILE).unwrap().1;
    assert!(
        rules.contains("ATTR{address}==\"02:00:00:00:00:01\""),
        "{rules}"
    );
    assert!(
        rules.contains("ATTR{queues/tx-3/xps_cpus}=\"88\""),
        "{rules}"
    );
    assert!(p.notes[0].contains("softnet drops +120"), "{:?}", p.notes);
    assert!(p
        .actions
        .iter()
        .any(|a| matches!(&a.op, Op::Sysctl { key, value } if key == "net.core.rps_sock_flow_entries" && value == "32768")));
}

#[test]
fn rps_is_left_off_where_every_cpu_has_its_hardware_queue() {
    let mut nic = veth(8, 1, 8);
    nic.physical = true;
    let (profile, nics, e) = (NicProfile::default(), [nic], Evidence::default());
    let p = plan(&inputs(&profile, &nics, true, &e));
    assert!(
        p.actions.iter().all(|a| !a.setting.contains("rps")),
        "{p:?}"
    );
    assert!(
        p.notes.iter().any(|n| n.contains("redundant")),
        "{:?}",
        p.notes
    );
}

#[test]
fn pinned_interrupts_go_one_per_cpu_of_the_nics_node_and_irqbalance_is_named() {
    let mut nic = veth(4, 4, 8);
    nic.local_cpus = vec![4, 5, 6, 7];
    nic.irqs = (0..4)
        .map(|k| Irq {
            number: 40 + k,
            name: format!("veth0-TxRx-{k}"),
            affinity: Some("0-7".into()),
        })
        .collect();
    let profile = NicProfile {
        irq: IrqPolicy::Pinned,
        ..NicProfile::default()
    };
    let (nics, e) = ([nic], Evidence::default());
    let mut i = inputs(&profile, &nics, true, &e);
    i.irqbalance_config = Some(("/etc/default/irqbalance", "#IRQBALANCE_ARGS=\n"));
    let p = plan(&i);
    let pins: Vec<(&str, &str)> = p
        .actions
        .iter()
        .filter_map(|a| match &a.op {
            Op::KernelFile { path, value } if path.starts_with("/proc/irq/") => {
                Some((path.as_str(), value.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        pins,
        [
            ("/proc/irq/40/smp_affinity_list", "4"),
            ("/proc/irq/41/smp_affinity_list", "5"),
            ("/proc/irq/42/smp_affinity_list", "6"),
            ("/proc/irq/43/smp_affinity_list", "7")
        ]
    );
    // irqbalance keeps off them: its policy script bans each by name, its arguments name
    // the script, and the running daemon is restarted after the files are written.
    let policy = &p
        .files
        .iter()
        .find(|(f, _)| f == IRQBALANCE_POLICY)
        .unwrap()
        .1;
    assert!(
        policy.ends_with("# nic veth0\nban 'veth0-TxRx-0'\nban 'veth0-TxRx-1'\nban 'veth0-TxRx-2'\nban 'veth0-TxRx-3'\n"),
        "{policy}"
    );
    let args = &p
        .files
        .iter()
        .find(|(f, _)| f == "/etc/default/irqbalance")
        .unwrap()
        .1;
    assert!(
        args.ends_with(&format!(
            "IRQBALANCE_ARGS=\"--policyscript={IRQBALANCE_POLICY}\"\n"
        )),
        "{args}"
    );
    assert!(p.actions.iter().any(|a| a.op
        == Op::TryRestart {
            unit: "irqbalance.service".into()
        }));
    // irqbalance not running: the files, no restart.
    i.irqbalance = Some(false);
    assert!(!plan(&i)
        .actions
        .iter()
        .any(|a| matches!(a.op, Op::TryRestart { .. })));
    // Kept at boot: the rule starts the unit, the script finds each interrupt by name.
    let script = &p.files.iter().find(|(f, _)| f == NIC_IRQ_SCRIPT).unwrap().1;
    assert!(
        script.contains("# nic veth0\npin 'veth0-TxRx-0' 4\npin 'veth0-TxRx-1' 5\n"),
        "{script}"
    );
    let rules = &p.files.iter().find(|(f, _)| f == NIC_RULES_FILE).unwrap().1;
    assert!(
        rules.contains("ENV{SYSTEMD_WANTS}+=\"wstune-nic-irq.service\""),
        "{rules}"
    );
    assert!(p
        .files
        .iter()
        .any(|(f, t)| f == NIC_IRQ_UNIT && t.contains("ExecStart=/bin/sh /etc/wstune/nic-irq.sh")));
    // Another NIC's lines are kept when this one's are replaced.
    let again = irq_script(
        &format!("{script}# nic eth9\npin 'eth9-rx-0' 1\n"),
        &[("veth0".into(), vec![("veth0-TxRx-0".into(), 7)])],
    );
    assert!(
        again.contains("# nic eth9\npin 'eth9-rx-0' 1\n# nic veth0\npin 'veth0-TxRx-0' 7\n"),
        "{again}"
    );
    assert_eq!(again.matches("#!/bin/sh").count(), 1);
}

#[test]
fn channels_are_raised_to_one_queue_per_core_of_the_set_and_kept_at_boot_with_the_default_naming() {
    let mut nic = veth(2, 2, 8);
    nic.physical = true;
    nic.channels = Some(crate::host::Channels {
        combined: 2,
        max_combined: 6,
        ..Default::default()
    });
    nic.default_link = Some(
        "[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=keep kernel\nMACAddressPolicy=persistent\n"
            .into(),
    );
    let (profile, nics, e) = (NicProfile::default(), [nic], Evidence::default());
    let p = plan(&inputs(&profile, &nics, true, &e));
    assert!(
        p.actions.iter().any(|a| matches!(
            &a.op,
            Op::Channels {
                combined: Some(6),
                rx: None,
                tx: None,
                ..
            }
        )),
        "{p:?}"
    );
    // The queues change: RPS and XPS wait for the next apply.
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(&a.op, Op::KernelFile { .. })),
        "{p:?}"
    );
    let link = file_of(&p, "10-wstune-veth0.link");
    assert!(
        link.contains("[Match]\nMACAddress=02:00:00:00:00:01\n"),
        "{link}"
    );
    assert!(
        link.contains("NamePolicy=keep kernel\nMACAddressPolicy=persistent\nCombinedChannels=6\n"),
        "{link}"
    );
    // Never lowered: a NIC with more queues than the set keeps them.
    let mut wide = nics[0].clone();
    wide.channels = Some(crate::host::Channels {
        combined: 16,
        max_combined: 16,
        ..Default::default()
    });
    let p = plan(&inputs(&profile, std::slice::from_ref(&wide), true, &e));
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(&a.op, Op::Channels { .. })),
        "{p:?}"
    );
}

/// scaling.rst: "limit the number of queues to the number of CPU cores", of the NIC's memory
/// domain, and no more than the smallest count that does not overflow: on a two-node host with
/// two threads per core, numa_scaling raises a NIC to its own node's 8 cores (not 32 CPUs), only
/// on evidence or when named, and its queues' interrupts each get a core of their own.
#[test]
fn channels_stop_at_the_physical_cores_of_the_nics_node_and_only_on_evidence() {
    let mut nic = veth(4, 4, 32);
    nic.physical = true;
    // Node 0: CPUs 0-7 and their hyperthreads 16-23; node 1 the rest.
    nic.local_cpus = (0..8).chain(16..24).collect();
    nic.cores = (0..8).collect();
    nic.channels = Some(crate::host::Channels {
        combined: 4,
        max_combined: 63,
        ..Default::default()
    });
    nic.irqs = (0..8)
        .map(|k| Irq {
            number: 40 + k,
            name: format!("veth0-TxRx-{k}"),
            affinity: Some("0-31".into()),
        })
        .collect();
    let profile = NicProfile {
        rss: RssProfile::NumaScaling,
        irq: IrqPolicy::Pinned,
        ..NicProfile::default()
    };
    let channels = |p: &NicPlan| {
        p.actions.iter().find_map(|a| match &a.op {
            Op::Channels { combined, .. } => Some(*combined),
            _ => None,
        })
    };
    let nics = [nic];
    // No evidence, not named: nothing raised (the smallest count that does not overflow).
    let quiet = Evidence {
        measured: true,
        ..Evidence::default()
    };
    assert_eq!(
        channels(&plan(&inputs(&profile, &nics, false, &quiet))),
        None
    );
    // Evidence: raised to the node's 8 cores, never to its 16 threads or the host's 32 CPUs.
    let busy = Evidence {
        measured: true,
        found: vec!["softnet drops +120 in 10 s".into()],
        ..Evidence::default()
    };
    let p = plan(&inputs(&profile, &nics, false, &busy));
    assert_eq!(channels(&p), Some(Some(8)), "{p:?}");
    // The hardware's maximum caps it.
    let mut small = nics[0].clone();
    small.channels = Some(crate::host::Channels {
        combined: 4,
        max_combined: 6,
        ..Default::default()
    });
    let p = plan(&inputs(&profile, &[small], true, &busy));
    assert_eq!(channels(&p), Some(Some(6)), "{p:?}");
    // Queue k's interrupt on the node's k-th core, never on a sibling thread first.
    assert_eq!(
        cpus_for(RssProfile::NumaScaling, &nics[0])[..9],
        [0, 1, 2, 3, 4, 5, 6, 7, 16]
    );
    assert_eq!(
        queues_for(&nics[0], &cpus_for(RssProfile::Conservative, &nics[0])),
        8
    );
    assert_eq!(
        queues_for(&nics[0], &cpus_for(RssProfile::Closest, &nics[0])),
        8
    );
}

#[test]
fn on_evidence_alone_rps_needs_cpus_with_room_and_a_named_nic_gets_it_anyway() {
    let e = Evidence {
        measured: true,
        found: vec!["softirq: cpu0 29.9 %".into()],
        quiet: vec![],
        ring_drops: vec![],
        squeezed: None,
    };
    let rps = |p: &NicPlan| {
        p.actions
            .iter()
            .filter(|a| a.setting.contains("rps_cpus"))
            .count()
    };
    let profile = NicProfile::default();
    // Two CPUs (what bench/rps-veth.sh measured): not on evidence alone; XPS still.
    let small = [veth(2, 2, 2)];
    let p = plan(&inputs(&profile, &small, false, &e));
    assert_eq!(rps(&p), 0, "{p:?}");
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("RPS not set: its 2 CPUs")),
        "{:?}",
        p.notes
    );
    assert!(p.actions.iter().any(|a| a.setting.contains("xps_cpus")));
    // Named with --nic: the operator's call.
    assert_eq!(rps(&plan(&inputs(&profile, &small, true, &e))), 2);
    // Four CPUs: set on the evidence.
    assert_eq!(
        rps(&plan(&inputs(&profile, &[veth(2, 2, 4)], false, &e))),
        2
    );
}

#[test]
fn for_other_hosts_a_physical_nic_is_matched_by_name_and_its_link_file_rendered_at_target() {
    let mut nic = veth(2, 2, 2);
    nic.physical = true;
    nic.channels = Some(crate::host::Channels {
        combined: 2,
        max_combined: 8,
        ..Default::default()
    });
    let (profile, nics, e) = (NicProfile::default(), [nic], Evidence::default());
    let mut i = inputs(&profile, &nics, true, &e);
    i.scope.runtime = false;
    i.for_other_hosts = true;
    let p = plan(&i);
    let file = |name: &str| &p.files.iter().find(|(f, _)| f.ends_with(name)).unwrap().1;
    let rules = file("60-wstune-nic.rules");
    assert!(
        rules.contains("ACTION==\"add|move\", SUBSYSTEM==\"net\", KERNEL==\"veth0\", "),
        "{rules}"
    );
    assert!(!rules.contains("02:00:00:00:00:01"), "{rules}");
    // At the target here already (2 CPUs, 2 queues): rendered for hosts still at the default.
    let link = file("10-wstune-veth0.link");
    assert!(
        link.contains("OriginalName=veth0") && link.contains("CombinedChannels=2"),
        "{link}"
    );
    assert!(p.actions.iter().all(|a| !a.op.is_runtime()), "{p:?}");
    // With its PCI address known, by its path: a name udev gave it cannot be matched.
    let mut pci = nics.clone();
    pci[0].pci_slot = Some("0000:3b:00.0".into());
    let mut i = inputs(&profile, &pci, true, &e);
    i.scope.runtime = false;
    i.for_other_hosts = true;
    let p = plan(&i);
    let link = file_of(&p, "10-wstune-veth0.link");
    assert!(
        link.contains("[Match]\nPath=*pci-0000:3b:00.0\n") && !link.contains("OriginalName"),
        "{link}"
    );
    // For this host, the same NIC is matched by its address and its counts are left alone.
    let p = plan(&inputs(&profile, &nics, true, &e));
    assert!(!p.files.iter().any(|(f, _)| f.ends_with(".link")), "{p:?}");
    let rules = file_of(&p, "60-wstune-nic.rules");
    assert!(
        rules.contains("ACTION==\"add\", SUBSYSTEM==\"net\", ATTR{address}"),
        "{rules}"
    );
}

fn file_of<'a>(p: &'a NicPlan, name: &str) -> &'a str {
    &p.files.iter().find(|(f, _)| f.ends_with(name)).unwrap().1
}

#[test]
fn another_nics_rule_is_kept_and_this_ones_replaced() {
    let now = format!("{RULES_HEADER}# nic eth9\nACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth9\", ATTR{{queues/rx-0/rps_cpus}}=\"3\"\n# nic veth0\nold line\n");
    let text = rules_file(&now, &[("veth0".into(), "# nic veth0\nnew line\n".into())]);
    assert!(
        text.contains("eth9") && text.contains("new line") && !text.contains("old line"),
        "{text}"
    );
    assert_eq!(text.matches("Written by wstune").count(), 1, "{text}");
}

fn measured(found: &str) -> Evidence {
    Evidence {
        measured: true,
        found: vec![found.into()],
        quiet: vec![],
        ring_drops: vec![],
        squeezed: None,
    }
}

/// The ring is raised to the NIC's maximum only when its rx_missed_errors grew, and kept
/// at boot in the same .link file as the channel counts.
#[test]
fn the_receive_ring_is_raised_to_its_maximum_only_on_ring_drops_and_shares_the_link_file() {
    let mut nic = veth(2, 2, 8);
    nic.physical = true;
    nic.rx_ring = Some((1024, 8192));
    nic.channels = Some(crate::host::Channels {
        combined: 2,
        max_combined: 8,
        ..Default::default()
    });
    let profile = NicProfile::default();
    let mut e = measured("veth0 rx_missed_errors +500 in 4 s");
    e.ring_drops = vec!["veth0".into()];
    let nics = [nic];
    let p = plan(&inputs(&profile, &nics, false, &e));
    assert!(
        p.actions.iter().any(|a| a.op
            == Op::RxRing {
                nic: "veth0".into(),
                rx: 8192
            }
            && a.from.as_deref() == Some("1024")),
        "{p:?}"
    );
    let link = file_of(&p, "10-wstune-veth0.link");
    assert!(
        link.ends_with("CombinedChannels=8\nRxBufferSize=8192\n"),
        "{link}"
    );
    assert_eq!(
        p.files.iter().filter(|(f, _)| f.ends_with(".link")).count(),
        1
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("+500") && n.contains("link drops")),
        "{:?}",
        p.notes
    );
    // Named, but no ring drops: the ring stays, whatever its size.
    let p = plan(&inputs(&profile, &nics, true, &Evidence::default()));
    assert!(
        !p.actions.iter().any(|a| matches!(a.op, Op::RxRing { .. })),
        "{p:?}"
    );
    // A later apply that raises only the ring keeps the channel counts written before.
    let mut at_max = nics[0].clone();
    at_max.channels = Some(crate::host::Channels {
        combined: 8,
        max_combined: 8,
        ..Default::default()
    });
    let links = [(
        "veth0".to_string(),
        "[Match]\nMACAddress=02:00:00:00:00:01\n\n[Link]\nCombinedChannels=8\n".to_string(),
    )];
    let mut i = inputs(&profile, std::slice::from_ref(&at_max), false, &e);
    i.links_now = &links;
    let p = plan(&i);
    let link = &p
        .files
        .iter()
        .find(|(f, _)| f.ends_with(".link"))
        .unwrap()
        .1;
    assert!(
        link.ends_with("CombinedChannels=8\nRxBufferSize=8192\n"),
        "{link}"
    );
}

/// time_squeeze that grew doubles both budgets (never lowering a higher one), now and in
/// the NIC sysctl file beside RFS's line; without it nothing is planned.
#[test]
fn the_receive_budget_is_doubled_only_when_time_squeeze_grew() {
    let profile = NicProfile::default();
    let nics = [veth(1, 1, 4)];
    let quiet = measured("softnet drops +9 in 4 s");
    let p = plan(&inputs(&profile, &nics, false, &quiet));
    assert!(
        !p.actions
            .iter()
            .any(|a| a.setting.starts_with("net.core.netdev_budget")),
        "{p:?}"
    );
    let mut e = measured("softnet time_squeeze +40 in 4 s");
    e.squeezed = Some("softnet time_squeeze +40 in 4 s".into());
    let mut i = inputs(&profile, &nics, false, &e);
    i.nic_sysctl_now =
        "# mine\nnet.core.rps_sock_flow_entries = 32768\nnet.core.netdev_budget = 400\n";
    i.budget = (Some(300), Some(8000));
    let p = plan(&i);
    let runtime: Vec<(&str, &str)> = p
        .actions
        .iter()
        .filter_map(|a| match &a.op {
            Op::Sysctl { key, value } if key.contains("netdev_budget") => {
                Some((key.as_str(), value.as_str()))
            }
            _ => None,
        })
        .collect();
    // usecs is already above twice its default: left as it is.
    assert_eq!(runtime, [("net.core.netdev_budget", "600")]);
    let file = &p
        .files
        .iter()
        .find(|(f, _)| f == NIC_SYSCTL_FILE)
        .unwrap()
        .1;
    assert!(file.starts_with(NIC_SYSCTL_HEAD), "{file}");
    assert_eq!(
        file.strip_prefix(NIC_SYSCTL_HEAD),
        // Each key's line replaced where it is, every other line kept in its place.
        Some("# mine\nnet.core.rps_sock_flow_entries = 32768\nnet.core.netdev_budget = 600\n"),
        "{file}"
    );
    assert_eq!(file.matches("netdev_budget =").count(), 1, "{file}");
    assert!(
        p.notes.iter().any(|n| n.contains("time_squeeze +40")),
        "{:?}",
        p.notes
    );
}

/// sysctl.d's `-key = value` form (a key that may be missing) is the same key: the operator's
/// `-net.core.netdev_budget = 400` got a second line for the key appended after it. Its line is
/// replaced in place now, keeping the `-`.
#[test]
fn a_budget_line_with_sysctl_d_optional_prefix_is_replaced_not_doubled() {
    let profile = NicProfile::default();
    let nics = [veth(1, 1, 4)];
    let mut e = measured("softnet time_squeeze +40 in 4 s");
    e.squeezed = Some("softnet time_squeeze +40 in 4 s".into());
    let mut i = inputs(&profile, &nics, false, &e);
    i.nic_sysctl_now =
        "# mine\n-net.core.netdev_budget = 400\n -net.core.netdev_budget_usecs=2000\n";
    i.budget = (Some(300), Some(2000));
    let p = plan(&i);
    let file = &p
        .files
        .iter()
        .find(|(f, _)| f == NIC_SYSCTL_FILE)
        .unwrap()
        .1;
    let body = file.strip_prefix(NIC_SYSCTL_HEAD).unwrap();
    assert!(
        body.starts_with(
            "# mine\n-net.core.netdev_budget = 600\n-net.core.netdev_budget_usecs = 4000\n"
        ),
        "{file}"
    );
    assert_eq!(file.matches("netdev_budget =").count(), 1, "{file}");
    assert_eq!(file.matches("netdev_budget_usecs").count(), 1, "{file}");
}

#[test]
fn irqbalance_args_gain_our_policy_script_and_keep_everything_else() {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    // Debian's file: every line commented; ours is appended.
    let debian = "#IRQBALANCE_ONESHOT=\n#IRQBALANCE_ARGS=\n";
    let t = with_policyscript(debian).unwrap();
    assert!(
        t.starts_with(debian) && t.ends_with(&format!("IRQBALANCE_ARGS=\"{ours}\"\n")),
        "{t}"
    );
    // RHEL's: an assignment with the operator's arguments, in one plain double-quoted value.
    let rhel = "# comment\nIRQBALANCE_ARGS='--powerthresh=2 --banirq=7'\nOTHER=1\n";
    assert_eq!(
        with_policyscript(rhel).unwrap(),
        format!("# comment\nIRQBALANCE_ARGS=\"--powerthresh=2 --banirq=7 {ours}\"\nOTHER=1\n")
    );
    // Done already: unchanged.
    let done = with_policyscript(rhel).unwrap();
    assert_eq!(with_policyscript(&done).unwrap(), done);
    // Another policy script is the operator's: refused, named.
    assert_eq!(
        with_policyscript("IRQBALANCE_ARGS=\"-l /usr/local/bin/pol\"\n").unwrap_err(),
        KeepArgs::Theirs("-l /usr/local/bin/pol".into())
    );
    assert!(with_policyscript("IRQBALANCE_ARGS=--policyscript=/x\n").is_err());
    // A comment after the value goes on its own line above it (systemd would read it as part
    // of the value); an unquoted word gets quotes.
    assert_eq!(
        with_policyscript("IRQBALANCE_ARGS=\"-t 5\"  # slower\n").unwrap(),
        format!("# slower\nIRQBALANCE_ARGS=\"-t 5 {ours}\"\n")
    );
    assert_eq!(
        with_policyscript("IRQBALANCE_ARGS=--journal # mine\n").unwrap(),
        format!("# mine\nIRQBALANCE_ARGS=\"--journal {ours}\"\n")
    );
    // `export NAME=value` is the shell's: the name is exported on a line of its own.
    assert_eq!(
        with_policyscript("  export IRQBALANCE_ARGS=--journal\n").unwrap(),
        format!("  IRQBALANCE_ARGS=\"--journal {ours}\"\n  export IRQBALANCE_ARGS\n")
    );
}

/// IRQBALANCE_ARGS as systemd's EnvironmentFile= reads it (what irqbalance.service passes to
/// `irqbalance $IRQBALANCE_ARGS`), by systemd's own parser: its environment.d generator reads a
/// file by the same rules (it expands `$VAR` too, which no file read here holds). None when
/// systemd is not installed.
fn systemd_reads(text: &str) -> Option<String> {
    let generator =
        "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator";
    if !std::path::Path::new(generator).exists() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("environment.d")).unwrap();
    std::fs::write(dir.path().join("environment.d/irqbalance.conf"), text).unwrap();
    let o = std::process::Command::new(generator)
        .env_clear()
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env("XDG_CONFIG_DIRS", dir.path().join("none"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // It prints NAME=value, quoted as a shell reads it back.
    let line = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .find(|l| l.starts_with("IRQBALANCE_ARGS="))
        .map(str::to_string)
        .unwrap_or_default();
    let o = std::process::Command::new("sh")
        .args([
            "-c",
            "eval \"$1\"; printf '%s' \"${IRQBALANCE_ARGS:-}\"",
            "sh",
            &line,
        ])
        .output()
        .unwrap();
    Some(String::from_utf8(o.stdout).unwrap())
}

/// IRQBALANCE_ARGS as operators write it, each file read before and after by both its readers:
/// a shell sourcing it, and systemd's EnvironmentFile= (irqbalance.service). After the edit
/// both read the operator's arguments (as the shell read them) and ours, and every other line
/// is kept. `export IRQBALANCE_ARGS=...`, edited in place, was still skipped by systemd, so the
/// service never got the policy script. A value the two read differently (a `$VAR` systemd does
/// not expand, a command after it on the line that systemd reads as value) or that goes on past
/// its line leaves the file alone.
#[test]
fn irqbalance_args_in_every_shell_form_keep_their_arguments_and_gain_ours() {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    let sourced = |text: &str| {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("irqbalance");
        std::fs::write(&f, text).unwrap();
        let o = std::process::Command::new("sh")
            .args(["-c", ". \"$1\" && printf '%s' \"$IRQBALANCE_ARGS\"", "sh"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{text}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    if systemd_reads("").is_none() {
        eprintln!("skipped the systemd reader: systemd is not installed (apt-get install systemd)");
    }
    let forms = [
        "export IRQBALANCE_ARGS=\"--banirq=77\"\n",
        "export\tIRQBALANCE_ARGS='--banirq=77 --banirq=78'  # disks\n",
        "IRQBALANCE_ARGS='--banirq='\"77\"\n",
        "IRQBALANCE_ARGS=\"--banirq=77 \\\"#\\\"\"\n",
        "IRQBALANCE_ARGS=--banirq=77\\ --banirq=78\n",
        "IRQBALANCE_ARGS='a\\b'\n",
        "IRQBALANCE_ARGS=#77\n",
        "IRQBALANCE_ARGS=\n",
        "IRQBALANCE_ARGS=\"\" # none yet\n",
        "IRQBALANCE_ARGS=--banirq=77",
        // Inside another variable's value that spans lines: not an assignment.
        "IRQBALANCE_ARGS=\"--banirq=77\"\nNOTE=\"one\nIRQBALANCE_ARGS=--nothing\n\"\n",
    ];
    for text in forms {
        let before = sourced(text);
        let after = with_policyscript(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        let want = if before.is_empty() {
            ours.clone()
        } else {
            format!("{before} {ours}")
        };
        assert_eq!(sourced(&after), want, "{text} became {after}");
        if let Some(systemd) = systemd_reads(&after) {
            assert_eq!(systemd, want, "systemd: {text} became {after}");
        }
        // Every other line kept, in order.
        let assignment = |l: &&str| {
            l.trim_start().starts_with("IRQBALANCE_ARGS=")
                || l.trim_start().starts_with("export")
                || l.trim_start().starts_with('#')
        };
        let others = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !assignment(l))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(others(&after), others(text), "{text} became {after}");
        // Applied again, nothing changes.
        assert_eq!(with_policyscript(&after).unwrap(), after);
    }
    // Out of reach: the file is left alone, with the reason.
    for text in [
        "IRQBALANCE_ARGS=\"--banirq=77\n --banirq=78\"\n",
        "IRQBALANCE_ARGS=--banirq=77\\\n--banirq=78\n",
        "IRQBALANCE_ARGS=$(cat /etc/irq-args)\n",
        "IRQBALANCE_ARGS=\"`cat /etc/irq-args`\"\n",
        // systemd expands no variable: the two readers would differ.
        "IRQBALANCE_ARGS=\"--banirq=77\"\nIRQBALANCE_ARGS=\"$IRQBALANCE_ARGS --powerthresh=2\"\n",
        "B=77\nIRQBALANCE_ARGS=--banirq=$B\n",
        // systemd reads `;export ...` and `&& ...` as more of the value.
        "  IRQBALANCE_ARGS=--banirq=77;export IRQBALANCE_ARGS\n",
        "IRQBALANCE_ARGS=--banirq=77 && export IRQBALANCE_ARGS\n",
    ] {
        assert!(
            matches!(with_policyscript(text), Err(KeepArgs::Unsure(_))),
            "{text}: {:?}",
            with_policyscript(text)
        );
    }
}
