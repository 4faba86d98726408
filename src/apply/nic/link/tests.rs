//! A NIC's channel counts and receive ring, kept in its .link file (also for other hosts).

use crate::apply::nic::tests::*;
use crate::apply::nic::*;

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
