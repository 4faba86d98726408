use super::*;
use crate::apply::journal::Entry;

/// A host whose directories cannot be listed (a tree without them).
const NONE: Lister = &|_: &str| None;

fn id(name: &str, ifindex: u32) -> NicIdentity {
    NicIdentity {
        name: name.into(),
        ifindex: Some(ifindex),
        netns: Some(4026532175),
        boot: Some("b1".into()),
        ..NicIdentity::default()
    }
}

fn pci(name: &str, ifindex: u32, slot: &str, mac: &str) -> NicIdentity {
    NicIdentity {
        device: Some(format!("pci:{slot}")),
        permaddr: Some(mac.into()),
        ..id(name, ifindex)
    }
}

#[test]
fn a_virtual_link_is_found_by_its_index_in_its_namespace_and_boot() {
    let rec = id("vb", 5);
    // Renamed, and its old name taken by another link.
    let now = [id("vb", 4), id("vc", 5)];
    assert_eq!(find(&rec, &now, NONE), Found::Here("vc".into()));
    // Deleted, the name free: gone.
    assert!(matches!(find(&rec, &[id("va", 4)], NONE), Found::Gone(w) if w.contains("ifindex 5")));
    // Deleted, and another link took the name: refused, never that one.
    assert!(
        matches!(find(&rec, &[id("vb", 9)], NONE), Found::Refused(w) if w.contains("another NIC (ifindex 9)"))
    );
    // Another boot: the index means nothing.
    let mut later = id("vb", 5);
    later.boot = Some("b2".into());
    assert!(matches!(find(&rec, &[later], NONE), Found::Unverified(_)));
    // Another namespace.
    let mut there = id("vb", 5);
    there.netns = Some(1);
    assert!(
        matches!(find(&rec, &[there], NONE), Found::Elsewhere(w) if w.contains("net:[4026532175]"))
    );
}

/// An entry that tuned vb (ifindex 5) and a sysctl: the queue file and channel counts of
/// the NIC, its interrupt, and somaxconn.
fn entry() -> Entry {
    serde_json::from_value(serde_json::json!({
        "id": "1", "created": "now", "state": "applied", "profile": "100k",
        "actions": [
            {"check": "linux.nic.queues[vb]", "setting": "vb channels", "from": "rx 1, tx 1", "to": "rx 2, tx 2",
             "op": {"kind": "channels", "nic": "vb", "rx": 2, "tx": 2, "combined": null}},
            {"check": "linux.nic.queues[vb]", "setting": "vb queues/rx-0/rps_cpus", "from": "0", "to": "3",
             "op": {"kind": "kernel_file", "path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "value": "3"}},
            {"check": "linux.nic.irq[vb]", "setting": "IRQ 40 (vb-rx-0)", "from": "0-1", "to": "1",
             "op": {"kind": "kernel_file", "path": "/proc/irq/40/smp_affinity_list", "value": "1"}},
            {"check": "linux.net.somaxconn", "setting": "net.core.somaxconn", "from": "4096", "to": "65535",
             "op": {"kind": "sysctl", "key": "net.core.somaxconn", "value": "65535"}}
        ],
        "runtime": [
            {"path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "old": "0\n"},
            {"path": "/proc/irq/40/smp_affinity_list", "old": "0-1\n"},
            {"path": "/proc/sys/net/core/somaxconn", "old": "4096\n"}
        ],
        "files": [], "created_dirs": [], "limits": [], "registry": [],
        "channels": [{"nic": "vb", "old": {"rx": 1, "tx": 1, "combined": 0, "max_rx": 4, "max_tx": 4, "max_combined": 0}}],
        "nics": [{"name": "vb", "ifindex": 5, "netns": 4026532175u64, "boot": "b1"}]
    }))
    .unwrap()
}

#[test]
fn a_renamed_nics_values_are_restored_under_its_new_name_and_a_swap_does_not_chain() {
    // vb became vc, and va (4) took the name vb.
    let r = resolve(&entry(), Ok(vec![id("vb", 4), id("vc", 5)]), NONE, false);
    assert!(r.left.is_empty(), "{:?}", r.left);
    assert_eq!(r.notes.len(), 1);
    assert!(
        r.notes[0].starts_with("vb (now vc): the same NIC (ifindex 5)"),
        "{:?}",
        r.notes
    );
    assert_eq!(r.entry.channels[0].nic, "vc");
    let paths: Vec<&str> = r.entry.runtime.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/sys/class/net/vc/queues/rx-0/rps_cpus",
            "/proc/irq/40/smp_affinity_list",
            "/proc/sys/net/core/somaxconn"
        ]
    );
    assert!(r
        .entry
        .actions
        .iter()
        .all(|a| !format!("{:?}", a.op).contains("\"vb\"")));
    assert!(r
        .entry
        .actions
        .iter()
        .all(|a| !matches!(&a.op, Op::KernelFile { path, .. } if path.contains("/vb/"))));
}

#[test]
fn a_gone_or_refused_nics_values_leave_the_entry_and_the_rest_stays() {
    for (now, refused) in [(vec![id("va", 4)], false), (vec![id("vb", 9)], true)] {
        let r = resolve(&entry(), Ok(now.clone()), NONE, false);
        assert_eq!(r.left.len(), 1, "{now:?}");
        let l = &r.left[0];
        assert_eq!((l.nic.as_deref(), l.refused()), (Some("vb"), refused));
        assert_eq!(
            l.values,
            [
                "channels rx 1, tx 1",
                "queues/rx-0/rps_cpus 0",
                "/proc/irq/40/smp_affinity_list 0-1"
            ]
        );
        // Only somaxconn is left to restore; its interrupt went with it.
        assert_eq!(r.entry.runtime.len(), 1);
        assert!(r.entry.channels.is_empty());
        assert_eq!(r.entry.actions.len(), 1);
        let words = left_words(l, "1", "");
        assert!(!words.contains("Some("), "{words}");
        assert_eq!(words.contains("--force"), refused, "{words}");
    }
    // --force restores a refused NIC's values by name.
    let r = resolve(&entry(), Ok(vec![id("vb", 9)]), NONE, true);
    assert!(
        r.left.is_empty() && r.entry.runtime.len() == 3,
        "{:?}",
        r.left
    );
    assert!(r.notes[0].contains("--force"), "{:?}", r.notes);
}

/// [`entry`] that also raised RFS's flow table (host-wide) and fs.file-max (host-wide).
fn entry_with_host_values() -> Entry {
    let mut e = entry();
    let more: Vec<Action> = serde_json::from_value(serde_json::json!([
        {"check": "linux.nic.queues", "setting": "net.core.rps_sock_flow_entries", "from": "0", "to": "32768",
         "op": {"kind": "sysctl", "key": "net.core.rps_sock_flow_entries", "value": "32768"}},
        {"check": "linux.fs.file_max", "setting": "fs.file-max", "from": "1000", "to": "2000000",
         "op": {"kind": "sysctl", "key": "fs.file-max", "value": "2000000"}}
    ]))
    .unwrap();
    e.actions.extend(more);
    for (path, old) in [
        ("/proc/sys/net/core/rps_sock_flow_entries", "0\n"),
        ("/proc/sys/fs/file-max", "1000\n"),
    ] {
        e.runtime.push(super::super::journal::OldRuntime {
            path: path.into(),
            old: old.into(),
        });
    }
    e
}

fn paths(e: &Entry) -> Vec<&str> {
    e.runtime.iter().map(|r| r.path.as_str()).collect()
}

/// RFS's flow table is one for the whole host: a NIC left alone (refused) still uses it
/// for the RPS on its queues, so it stays with that NIC; a NIC gone uses nothing, and
/// the table is restored with the rest. Host-wide values that are no NIC's are restored.
#[test]
fn a_refused_nic_keeps_rfs_flow_table_and_a_gone_one_does_not() {
    let flow = "/proc/sys/net/core/rps_sock_flow_entries";
    let r = resolve(
        &entry_with_host_values(),
        Ok(vec![id("vb", 9)]),
        NONE,
        false,
    );
    let l = &r.left[0];
    assert_eq!(l.kind, LeftKind::Refused);
    assert_eq!(
        l.runtime,
        [
            "/sys/class/net/vb/queues/rx-0/rps_cpus",
            "/proc/irq/40/smp_affinity_list",
            flow
        ]
    );
    assert!(l.channels && !l.ring, "{l:?}");
    assert!(
        l.values
            .last()
            .unwrap()
            .starts_with("net.core.rps_sock_flow_entries 0 (RFS's flow table"),
        "{:?}",
        l.values
    );
    assert_eq!(
        paths(&r.entry),
        ["/proc/sys/net/core/somaxconn", "/proc/sys/fs/file-max"]
    );
    assert!(r.entry.actions.iter().all(
        |a| !matches!(&a.op, Op::Sysctl { key, .. } if key == "net.core.rps_sock_flow_entries")
    ));
    // The journal's record of it reads back as the same part.
    let back = Left::from_part(&l.part(), &entry_with_host_values());
    assert_eq!(back, *l);
    // Gone: the table is restored with the rest.
    let r = resolve(
        &entry_with_host_values(),
        Ok(vec![id("va", 4)]),
        NONE,
        false,
    );
    assert_eq!(r.left[0].kind, LeftKind::Gone);
    assert!(paths(&r.entry).contains(&flow), "{:?}", paths(&r.entry));
    // --force: onto the link of that name, the table with it.
    let r = resolve(&entry_with_host_values(), Ok(vec![id("vb", 9)]), NONE, true);
    assert!(r.left.is_empty() && paths(&r.entry).contains(&flow));
}

/// No setting wstune journals is one NIC's own sysctl (net.ipv4.conf.NIC.*, a neighbour
/// table's): a rollback refuses any runtime path outside the catalogs and
/// [`crate::host::owned::NIC_SYSCTLS`], so an entry can hold none, and a NIC's part of an
/// entry is its queue, channel, ring and interrupt settings plus RFS's shared table.
#[test]
fn no_sysctl_wstune_restores_is_one_nics_own() {
    let managed = crate::catalog::managed();
    let per_device = |k: &str| [".conf.", ".neigh."].iter().any(|d| k.contains(d));
    let all: Vec<&str> = managed
        .sysctls
        .iter()
        .map(String::as_str)
        .chain(crate::host::owned::NIC_SYSCTLS)
        .collect();
    assert!(all.len() > 10, "{all:?}");
    assert!(all.iter().all(|k| !per_device(k)), "{all:?}");
}

/// An entry whose NICs were recorded in another network namespace was applied there: each
/// of its net.* values is that namespace's, and none is written here (they are left with
/// a part of their own), while host-wide values of other kinds are restored. After a
/// reboot the namespace's number means nothing, and nothing is left for it.
#[test]
fn an_entry_applied_in_another_namespace_leaves_its_net_values_there() {
    let mut here = id("vb", 5);
    here.netns = Some(1);
    let r = resolve(
        &entry_with_host_values(),
        Ok(vec![here.clone()]),
        NONE,
        false,
    );
    let kinds: Vec<(Option<&str>, LeftKind)> =
        r.left.iter().map(|l| (l.nic.as_deref(), l.kind)).collect();
    assert_eq!(
        kinds,
        [
            (Some("vb"), LeftKind::OtherNamespace),
            (None, LeftKind::OtherNamespace)
        ]
    );
    // The flow table goes with the NIC that uses it; the namespace's own values apart.
    assert!(r.left[0]
        .runtime
        .iter()
        .any(|p| p.ends_with("rps_sock_flow_entries")));
    assert_eq!(r.left[1].runtime, ["/proc/sys/net/core/somaxconn"]);
    assert_eq!(r.left[1].values, ["net.core.somaxconn 4096"]);
    assert!(r.left[1].why.contains("net:[4026532175]") && r.left[1].why.contains("net:[1]"));
    assert_eq!(paths(&r.entry), ["/proc/sys/fs/file-max"]);
    let words = left_words(&r.left[1], "1", "");
    assert!(
        words.starts_with(
            "another network namespace's net.* values were not restored (net.core.somaxconn 4096)"
        ),
        "{words}"
    );
    // --force restores them here, saying so.
    let r = resolve(
        &entry_with_host_values(),
        Ok(vec![here.clone()]),
        NONE,
        true,
    );
    assert!(
        r.left.is_empty() && r.entry.runtime.len() == 5,
        "{:?}",
        r.left
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("--force: its net.* values (net.core.somaxconn 4096, ")),
        "{:?}",
        r.notes
    );
    // Another boot: that namespace is gone, and the link of that name is taken as before.
    here.boot = Some("b2".into());
    let r = resolve(&entry_with_host_values(), Ok(vec![here]), NONE, false);
    assert!(r.left.is_empty(), "{:?}", r.left);
}

/// An entry of an older wstune recorded no identity: its NIC is found by name, and the
/// note says that cannot be verified; a name no link has any more is gone.
#[test]
fn an_entry_without_identities_finds_its_nics_by_name_with_a_warning() {
    let mut old = entry();
    old.nics.clear();
    let r = resolve(&old, Ok(vec![id("vb", 9)]), NONE, false);
    assert!(r.left.is_empty());
    assert!(
        r.warnings[0].contains("found by name only, which cannot be verified"),
        "{:?}",
        r.warnings
    );
    assert_eq!(r.entry.runtime.len(), 3);
    // No link of that name: removed or renamed, which nothing tells; refused, so that
    // `--id ID --force` still reaches the entry, and never "went with the device".
    let r = resolve(&old, Ok(vec![id("va", 4)]), NONE, false);
    let l = &r.left[0];
    assert!(l.refused() && l.kind == LeftKind::Unverified, "{l:?}");
    assert_eq!(
        l.why,
        "no link named vb now: removed or renamed, which an entry of an older wstune cannot tell"
    );
    let words = left_words(l, "1", "");
    assert!(
        !words.contains("went with the device") && words.contains("--force"),
        "{words}"
    );
}

#[test]
fn a_physical_nic_is_found_by_device_and_permanent_address_whatever_its_index() {
    let rec = pci("eth0", 2, "0000:3b:00.0", "52:54:00:00:00:01");
    // A driver reload gave it another index and udev another name.
    let now = [
        pci("eth0", 3, "0000:3c:00.0", "52:54:00:00:00:02"),
        pci("eth9", 7, "0000:3b:00.0", "52:54:00:00:00:01"),
    ];
    assert_eq!(find(&rec, &now, NONE), Found::Here("eth9".into()));
    // Another card in the same slot is another NIC.
    let swapped = [pci("eth0", 2, "0000:3b:00.0", "52:54:00:00:00:99")];
    assert!(matches!(find(&rec, &swapped, NONE), Found::Refused(_)));
    // No identity recorded: by name, unverified.
    let bare = NicIdentity {
        name: "eth0".into(),
        ..NicIdentity::default()
    };
    assert!(matches!(find(&bare, &now, NONE), Found::Unverified(_)));
    assert!(
        matches!(find(&bare, &[id("eth1", 1)], NONE), Found::Unknown(w) if w.contains("removed or renamed"))
    );
}

/// A NIC moved to another network namespace (`ip link set X netns Y`) leaves no link here,
/// but its device is still on the host: refused (its values live on there), not gone.
#[test]
fn a_physical_nic_whose_device_is_still_here_is_in_another_namespace_not_gone() {
    let rec = pci("eth0", 2, "0000:3b:00.0", "52:54:00:00:00:01");
    let now = [pci("eth1", 3, "0000:3c:00.0", "52:54:00:00:00:02")];
    let host: Lister = &|dir: &str| {
        (dir == "/sys/bus/pci/devices")
            .then(|| vec!["0000:3b:00.0".to_string(), "0000:3c:00.0".to_string()])
    };
    assert!(
        matches!(find(&rec, &now, host), Found::Elsewhere(w) if w.contains("moved to another namespace") && w.contains("pci:0000:3b:00.0")),
        "{:?}",
        find(&rec, &now, host)
    );
    // The device removed from the host: gone.
    let removed: Lister = &|_: &str| Some(vec!["0000:3c:00.0".to_string()]);
    assert!(matches!(find(&rec, &now, removed), Found::Gone(_)));
}

/// After a reboot a virtual link's recorded index names nothing, but a bond, VLAN or veth
/// comes back under its name: found by that name with a warning, never refused (rollback
/// would end partly rolled back, recovery would refuse, drift would never clear).
#[test]
fn a_virtual_link_after_a_reboot_is_found_by_its_name_with_a_warning() {
    let mut after = id("vb", 9);
    after.boot = Some("b2".into());
    let mut other = id("va", 5);
    other.boot = Some("b2".into());
    let r = resolve(&entry(), Ok(vec![other.clone(), after]), NONE, false);
    assert!(r.left.is_empty(), "{:?}", r.left);
    assert_eq!(r.entry.runtime.len(), 3);
    assert!(
        r.warnings[0].starts_with("vb: it is a virtual link recorded before the last reboot")
            && r.warnings[0].ends_with("found by name only, which cannot be verified"),
        "{:?}",
        r.warnings
    );
    // No link of that name after the reboot: gone, its values with it.
    let r = resolve(&entry(), Ok(vec![other]), NONE, false);
    assert!(!r.left[0].refused() && r.left[0].why.contains("no link is named vb now"));
}

/// A queue interrupt is restored by number only where that number still carries the
/// recorded name: after a driver reload /proc/irq/40 may be another device's.
#[test]
fn a_queue_interrupt_renumbered_by_a_driver_reload_is_not_restored_onto_another() {
    let now = || Ok(vec![id("vb", 5)]);
    let irq = "/proc/irq/40/smp_affinity_list";
    let other: Lister = &|dir: &str| {
        (dir == "/proc/irq/40")
            .then(|| vec!["smp_affinity_list".to_string(), "nvme0q3".to_string()])
    };
    let r = resolve(&entry(), now(), other, false);
    assert!(
        r.entry.runtime.iter().all(|x| x.path != irq),
        "{:?}",
        r.entry.runtime
    );
    assert!(r
        .entry
        .actions
        .iter()
        .all(|a| !matches!(&a.op, Op::KernelFile { path, .. } if path == irq)));
    assert!(
        r.notes.iter().any(|n| n
            .starts_with("IRQ 40 (vb-rx-0): interrupt 40 is no longer vb-rx-0")
            && n.contains("affinity 0-1 is not restored")),
        "{:?}",
        r.notes
    );
    assert!(r.left.is_empty());
    // Still vb-rx-0's (or not listable here): restored as recorded.
    let same: Lister = &|dir: &str| {
        (dir == "/proc/irq/40")
            .then(|| vec!["smp_affinity_list".to_string(), "vb-rx-0".to_string()])
    };
    for list in [same, NONE] {
        let r = resolve(&entry(), now(), list, false);
        assert!(r.entry.runtime.iter().any(|x| x.path == irq) && r.notes.is_empty());
    }
}
