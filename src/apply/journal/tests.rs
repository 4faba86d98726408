use super::*;
use crate::host::store::Store;

#[test]
fn an_entry_with_a_ring_is_format_3_and_one_without_stays_2_for_older_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let mut e: Entry = serde_json::from_value(serde_json::json!({
        "id": new_id(), "created": "now", "state": "pending", "profile": "100k",
        "actions": [], "runtime": [], "files": [], "created_dirs": [], "limits": [], "registry": []
    }))
    .unwrap();
    assert_eq!(format_of(&e), 2);
    save(&store, &e).unwrap();
    assert_eq!(load(&store, &e.id).unwrap().format, 2);
    e.rings.push(OldRing {
        nic: "eth0".into(),
        old: 512,
    });
    assert_eq!(format_of(&e), 3);
    save(&store, &e).unwrap();
    assert_eq!(load(&store, &e.id).unwrap().format, 3);
}

/// A rollback that leaves a NIC records exactly what it left; a later rollback of the
/// entry is given only that (no sysctl, file, limit or restart the first one restored). An
/// entry of the previous format (partly rolled back, nothing recorded) is restored whole,
/// as then, and only an entry that records what was left is written as format 5.
#[test]
fn a_partly_rolled_back_entry_remains_only_what_its_rollback_left() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let mut e: Entry = serde_json::from_value(serde_json::json!({
        "id": new_id(), "created": "now", "state": "partly_rolled_back", "profile": "100k",
        "actions": [
            {"check": "linux.nic.queues[vb]", "setting": "vb channels", "from": "rx 1, tx 1", "to": "rx 2, tx 2",
             "op": {"kind": "channels", "nic": "vb", "rx": 2, "tx": 2, "combined": null}},
            {"check": "linux.nic.queues[vb]", "setting": "vb queues/rx-0/rps_cpus", "from": "0", "to": "3",
             "op": {"kind": "kernel_file", "path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "value": "3"}},
            {"check": "linux.net.somaxconn", "setting": "net.core.somaxconn", "from": "4096", "to": "65535",
             "op": {"kind": "sysctl", "key": "net.core.somaxconn", "value": "65535"}},
            {"check": "linux.net.somaxconn", "setting": "net.core.somaxconn", "from": null, "to": "65535",
             "op": {"kind": "sysctl_file", "key": "net.core.somaxconn", "value": "65535"}}
        ],
        "runtime": [
            {"path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "old": "0\n"},
            {"path": "/proc/sys/net/core/somaxconn", "old": "4096\n"}
        ],
        "files": [{"path": "/etc/sysctl.d/60-wstune.conf", "old": null,
                   "new": {"base64": "", "mode": 420}}],
        "created_dirs": ["/etc/sysctl.d"], "limits": [{"pid": 1, "soft": 1024, "hard": 4096}],
        "registry": [],
        "channels": [{"nic": "vb", "old": {"rx": 1, "tx": 1, "combined": 0, "max_rx": 4, "max_tx": 4, "max_combined": 0}}],
        "nics": [{"name": "vb", "ifindex": 5, "netns": 4026532175u64, "boot": "b1"}]
    }))
    .unwrap();
    // The previous format: nothing recorded, so all of it, as before.
    assert!(!e.resumes());
    assert_eq!(e.remaining().runtime.len(), 2);
    assert_eq!(format_of(&e), 4);
    e.left = vec![LeftPart {
        nic: Some("vb".into()),
        kind: LeftKind::Refused,
        why: "the link now named vb is another NIC".into(),
        runtime: vec!["/sys/class/net/vb/queues/rx-0/rps_cpus".into()],
        channels: true,
        ring: false,
    }];
    let rest = e.remaining();
    assert_eq!(rest.runtime.len(), 1);
    assert_eq!(
        rest.runtime[0].path,
        "/sys/class/net/vb/queues/rx-0/rps_cpus"
    );
    assert_eq!(rest.channels.len(), 1);
    assert!(rest.files.is_empty() && rest.created_dirs.is_empty() && rest.limits.is_empty());
    assert_eq!(rest.actions.len(), 2, "{:?}", rest.actions);
    assert!(rest.actions.iter().all(|a| a.setting.starts_with("vb ")));
    save(&store, &e).unwrap();
    let back = load(&store, &e.id).unwrap();
    assert_eq!((back.format, back.left.clone()), (5, e.left.clone()));
    // A record naming what the entry never changed is refused like any foreign path.
    e.left[0]
        .runtime
        .push("/proc/sys/net/ipv4/tcp_fin_timeout".into());
    assert!(check_paths(&e)
        .unwrap_err()
        .contains("names /proc/sys/net/ipv4/tcp_fin_timeout, which the entry did not change"));
    e.left[0].runtime.pop();
    e.left[0].ring = true;
    assert!(check_paths(&e).unwrap_err().contains("vb's receive ring"));
}

#[test]
fn entries_round_trip_and_sort_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let a = new_id();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let b = new_id();
    assert!(a < b, "{a} < {b}");
    for id in [&b, &a] {
        let e = Entry {
            format: FORMAT,
            checksum: String::new(),
            id: id.clone(),
            created: "now".into(),
            state: State::Pending,
            profile: "100k".into(),
            actions: vec![],
            runtime: vec![OldRuntime {
                path: "/proc/sys/net/core/somaxconn".into(),
                old: "1\t2\n".into(),
            }],
            files: vec![OldFile {
                path: "/etc/sysctl.d/60-wstune.conf".into(),
                old: None,
                new: Blob::from(&FileState {
                    bytes: vec![0, 255, 10],
                    mode: 0o644,
                    owner: None,
                }),
                link: None,
                nlink: 0,
            }],
            created_dirs: vec![],
            limits: vec![],
            registry: vec![],
            channels: vec![],
            rings: vec![],
            nics: vec![],
            left: vec![],
            failure: None,
        };
        save(&store, &e).unwrap();
    }
    let all = list(&store).unwrap();
    assert_eq!(
        all.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        vec![a.clone(), b]
    );
    assert_eq!(all[0].files[0].new.state().unwrap().bytes, vec![0, 255, 10]);
    assert_eq!(all[0].runtime[0].old, "1\t2\n");
    assert!(load(&store, "../etc/passwd").is_err());
    // Only what the catalogs change: not any /proc/sys key, not any HKLM value.
    let mut e = all[0].clone();
    e.runtime[0].path = "/proc/sys/kernel/core_pattern".into();
    assert!(check_paths(&e).unwrap_err().contains("not a setting"));
    let reg = |key: &str, value: &str| {
        let mut e = all[0].clone();
        e.registry = vec![OldRegistry {
            key: key.into(),
            value: value.into(),
            kind: crate::host::RegType::Dword,
            old: None,
        }];
        check_paths(&e)
    };
    let tcpip = "HKLM\\SYSTEM\\CurrentControlSet\\Services\\Tcpip\\Parameters";
    assert!(reg(tcpip, "TcpTimedWaitDelay").is_ok());
    assert!(reg(tcpip, "ImagePath").is_err());
    assert!(reg(
        "HKLM\\SYSTEM\\CurrentControlSet\\Services\\EvilSvc",
        "ImagePath"
    )
    .unwrap_err()
    .contains("not one wstune's catalog changes"));
    assert!(load(&store, "nope")
        .unwrap_err()
        .to_string()
        .contains("rollback --list"));
}
