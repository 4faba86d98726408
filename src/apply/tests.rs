//! The plan/journal/undo logic against in-memory hosts: a Linux one and a Windows registry,
//! the same properties the namespace tests show on a real kernel.

use super::plan::{self, Op, Plan};
use super::*;
use crate::catalog::facts::{FactsRequest, HostFacts};
use crate::catalog::{self, eval};
use crate::gather::gather;
use crate::host::memory::MemoryBackend;
use crate::host::registry_file::RegistryFile;
use crate::host::Platform;

fn findings(
    backend: &dyn Backend,
    platform: Platform,
) -> (crate::catalog::Catalog, Vec<Finding>, HostFacts) {
    let profile = crate::profile::load("100k").unwrap().profile;
    let vars = profile.variables();
    let cat = catalog::load(platform, None, &vars.keys().cloned().collect())
        .unwrap()
        .for_role(crate::profile::Role::Server);
    let facts = gather(&cat, backend, &FactsRequest::default());
    let f = eval::evaluate(&cat, &vars, &facts);
    (cat, f, facts)
}

fn plan_for(backend: &dyn Backend, platform: Platform) -> Plan {
    let (cat, f, facts) = findings(backend, platform);
    plan::plan(
        &cat,
        &f,
        &facts,
        plan::Scope {
            runtime: true,
            persist: true,
        },
    )
}

const PARAMS: &str = r"HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters";

fn windows(tw_delay: Option<u32>, retrans: Option<u32>) -> MemoryBackend {
    let mut reg = RegistryFile::default();
    reg.set(PARAMS, "Hostname", crate::host::RegType::Sz, Some("w"))
        .unwrap();
    if let Some(v) = tw_delay {
        reg.set(
            PARAMS,
            "TcpTimedWaitDelay",
            crate::host::RegType::Dword,
            Some(&v.to_string()),
        )
        .unwrap();
    }
    if let Some(v) = retrans {
        reg.set(
            PARAMS,
            "TcpMaxConnectResponseRetransmissions",
            crate::host::RegType::Dword,
            Some(&v.to_string()),
        )
        .unwrap();
    }
    MemoryBackend::default().with_registry(reg)
}

fn registry_yaml(b: &MemoryBackend) -> String {
    b.registry.as_ref().unwrap().borrow().to_yaml()
}

#[test]
fn windows_apply_fixes_the_registry_and_rollback_restores_it_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let b = windows(None, Some(5));
    let before = registry_yaml(&b);

    // Dry run: planning changes nothing.
    let p = plan_for(&b, Platform::Windows);
    assert_eq!(registry_yaml(&b), before);
    let ops: Vec<&Op> = p.actions.iter().map(|a| &a.op).collect();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert!(
        matches!(ops[0], Op::Registry { value, data, .. } if value == "TcpTimedWaitDelay" && data == "30")
    );
    assert!(
        matches!(ops[1], Op::Registry { value, data, .. } if value == "TcpMaxConnectResponseRetransmissions" && data == "2")
    );

    let mut entry = record(&p, &b, &store, "100k").unwrap();
    assert_eq!(
        entry.registry[0].old, None,
        "absent before: rollback must delete it"
    );
    assert_eq!(entry.registry[1].old.as_deref(), Some("5"));
    journal::save(&store, &entry).unwrap();
    execute(&mut entry, &b, &store).unwrap();
    assert_eq!(entry.state, State::Applied);

    // The checks it changed now pass, and a second plan is empty.
    let (_, f, _) = findings(&b, Platform::Windows);
    for id in [
        "windows.tcpip.tcp_timed_wait_delay",
        "windows.tcpip.tcp_max_connect_response_retransmissions",
    ] {
        assert_eq!(
            f.iter().find(|x| x.id == id).unwrap().status,
            Status::Pass,
            "{id}"
        );
    }
    assert!(plan_for(&b, Platform::Windows).actions.is_empty());

    assert!(restore(&entry, &b, &store).is_empty());
    assert_eq!(
        registry_yaml(&b),
        before,
        "rollback restores every value, deleting the ones that were absent"
    );
}

#[test]
fn windows_failure_midway_leaves_the_registry_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let mut b = windows(Some(240), Some(5));
    b.fail_writes_to = Some("TcpMaxConnectResponseRetransmissions".into());
    let before = registry_yaml(&b);
    let p = plan_for(&b, Platform::Windows);
    let mut entry = record(&p, &b, &store, "100k").unwrap();
    journal::save(&store, &entry).unwrap();
    let err = execute(&mut entry, &b, &store).unwrap_err().to_string();
    assert!(
        err.starts_with("action 2/2 failed: TcpMaxConnectResponseRetransmissions -> 2"),
        "{err}"
    );
    assert!(err.contains("Nothing was left changed"), "{err}");
    assert_eq!(registry_yaml(&b), before);
    assert!(
        b.writes
            .borrow()
            .iter()
            .any(|w| w.contains("TcpTimedWaitDelay")),
        "the first change happened and was undone"
    );
    let saved = journal::load(&store, &entry.id).unwrap();
    assert_eq!(saved.state, State::Undone);
    assert!(saved.failure.unwrap().contains("action 2/2"));
}

#[test]
fn windows_interrupted_apply_rolls_back_from_its_journal() {
    // A process killed after the journal was saved and the first change made.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let b = windows(Some(240), Some(5));
    let before = registry_yaml(&b);
    let p = plan_for(&b, Platform::Windows);
    let entry = record(&p, &b, &store, "100k").unwrap();
    journal::save(&store, &entry).unwrap();
    let Op::Registry {
        key,
        value,
        reg_type,
        data,
    } = &p.actions[0].op
    else {
        panic!()
    };
    b.set_registry(key, value, *reg_type, Some(data)).unwrap();
    assert_ne!(registry_yaml(&b), before);

    let pending = journal::list(&store).unwrap().pop().unwrap();
    assert_eq!(pending.state, State::Pending);
    assert!(restore(&pending, &b, &store).is_empty());
    assert_eq!(registry_yaml(&b), before);
}

fn linux() -> MemoryBackend {
    MemoryBackend::default()
        .file("/proc/sys/net/core/somaxconn", "4096\n")
        .file("/proc/sys/net/ipv4/tcp_fin_timeout", "60\n")
        .file("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n")
}

fn linux_plan() -> Plan {
    linux_plan_over("")
}

/// The plan with its sysctl file merged into `existing`, as [`plan::plan`] renders it.
fn linux_plan_over(existing: &str) -> Plan {
    let act = |key: &str, from: &str, to: &str| plan::Action {
        check: format!("linux.{key}"),
        setting: key.into(),
        from: Some(from.into()),
        to: to.into(),
        op: Op::Sysctl {
            key: key.into(),
            value: to.into(),
        },
    };
    let mut p = Plan::default();
    p.actions.push(act("net.core.somaxconn", "4096", "65535"));
    p.actions.push(act(
        "net.ipv4.ip_local_port_range",
        "32768 60999",
        "10000 65535",
    ));
    p.actions.push(act("net.ipv4.tcp_fin_timeout", "60", "15"));
    p.actions.push(plan::Action {
        check: "linux.net.core.somaxconn".into(),
        setting: "net.core.somaxconn".into(),
        from: None,
        to: "65535".into(),
        op: Op::SysctlFile {
            key: "net.core.somaxconn".into(),
            value: "65535".into(),
        },
    });
    let lines =
        plan::merge_sysctl_lines(existing, &[("net.core.somaxconn".into(), "65535".into())]);
    p.files
        .push((plan::SYSCTL_FILE.into(), plan::render_sysctl_file(&lines)));
    p.rendered_from
        .push((plan::SYSCTL_FILE.into(), existing.into()));
    p
}

/// A line added to our sysctl file after the plan was made (between check and lock) must not
/// be dropped by writing the plan's text: record refuses, before any change or journal entry.
#[test]
fn record_refuses_when_the_merged_file_changed_since_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let b = linux();
    let before = b.files.borrow().clone();
    let p = linux_plan_over("");
    // Meanwhile an operator adds a line to the file the plan was rendered from (absent then).
    let edited = "vm.swappiness = 10\n";
    let file = store.path(plan::SYSCTL_FILE);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, edited).unwrap();
    let err = record(&p, &b, &store, "100k").unwrap_err().to_string();
    assert!(err.contains("changed since the check"), "{err}");
    assert!(err.contains("run apply again"), "{err}");
    // Nothing changed: the runtime values, the edited file, no journal entry.
    assert_eq!(*b.files.borrow(), before);
    assert_eq!(
        std::fs::read_to_string(store.path(plan::SYSCTL_FILE)).unwrap(),
        edited
    );
    assert!(journal::list(&store).unwrap().is_empty());
}

#[test]
fn linux_failure_undoes_earlier_changes_and_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let mut b = linux();
    b.fail_writes_to = Some("/proc/sys/net/ipv4/tcp_fin_timeout".into());
    let before = b.files.borrow().clone();
    let mut entry = record(&linux_plan(), &b, &store, "100k").unwrap();
    journal::save(&store, &entry).unwrap();
    let err = execute(&mut entry, &b, &store).unwrap_err().to_string();
    assert!(
        err.contains("action 3/4 failed: net.ipv4.tcp_fin_timeout -> 15"),
        "{err}"
    );
    assert!(err.contains("the kernel rejected"), "{err}");
    assert_eq!(
        *b.files.borrow(),
        before,
        "runtime values restored byte for byte"
    );
    assert_eq!(
        store.read(plan::SYSCTL_FILE).unwrap(),
        None,
        "no file written"
    );
    assert_eq!(
        b.writes.borrow().len(),
        4,
        "two changes, two restores: {:?}",
        b.writes.borrow()
    );
}

#[test]
fn linux_apply_then_restore_is_exact_and_keeps_a_file_it_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let mine = FileState {
        bytes: b"# hand-written\nnet.core.somaxconn=8192\n".to_vec(),
        mode: 0o640,
        owner: None,
    };
    store.write(plan::SYSCTL_FILE, &mine).unwrap();
    let b = linux();
    let before = b.files.borrow().clone();
    let p = linux_plan_over(std::str::from_utf8(&mine.bytes).unwrap());
    let mut entry = record(&p, &b, &store, "100k").unwrap();
    journal::save(&store, &entry).unwrap();
    execute(&mut entry, &b, &store).unwrap();
    assert_eq!(
        b.files.borrow()["/proc/sys/net/ipv4/ip_local_port_range"],
        "10000 65535\n"
    );
    let written = String::from_utf8(store.read(plan::SYSCTL_FILE).unwrap().unwrap().bytes).unwrap();
    assert!(written.contains("net.core.somaxconn = 65535"), "{written}");
    assert_eq!(
        written.matches("somaxconn").count(),
        1,
        "merged, not appended: {written}"
    );
    assert!(restore(&entry, &b, &store).is_empty());
    assert_eq!(*b.files.borrow(), before);
    let back = store.read(plan::SYSCTL_FILE).unwrap().unwrap();
    assert_eq!((back.bytes, back.mode), (mine.bytes, mine.mode));
}

#[test]
fn hand_changes_list_only_values_neither_applied_nor_old() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let b = linux();
    let mut entry = record(&linux_plan(), &b, &store, "100k").unwrap();
    journal::save(&store, &entry).unwrap();
    // Killed after its first change: the values it never reached still hold their old value,
    // which is not a hand change.
    b.write_runtime("/proc/sys/net/core/somaxconn", "65535")
        .unwrap();
    assert!(recover::hand_changes(&entry, &b, &store).is_empty());

    execute(&mut entry, &b, &store).unwrap();
    assert!(recover::hand_changes(&entry, &b, &store).is_empty());
    b.write_runtime("/proc/sys/net/core/somaxconn", "100000")
        .unwrap();
    // Set back to the old value by hand: restoring changes nothing, so nothing to confirm.
    b.write_runtime("/proc/sys/net/ipv4/tcp_fin_timeout", "60")
        .unwrap();
    let mut edited = store.read(plan::SYSCTL_FILE).unwrap().unwrap();
    edited.bytes.extend_from_slice(b"vm.swappiness = 1\n");
    store.write(plan::SYSCTL_FILE, &edited).unwrap();
    let hand: Vec<String> = recover::hand_changes(&entry, &b, &store)
        .iter()
        .map(|h| h.to_string())
        .collect();
    assert_eq!(
        hand,
        vec![
            "net.core.somaxconn: applied 65535, now 100000 (changed by hand)".to_string(),
            format!(
                "{}: applied by wstune, now edited (changed by hand)",
                plan::SYSCTL_FILE
            ),
        ]
    );
}

#[test]
fn an_interrupted_entry_is_undone_and_marked_so_one_rollback_suffices() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let b = linux();
    let before = b.files.borrow().clone();
    let entry = record(&linux_plan(), &b, &store, "100k").unwrap();
    journal::save(&store, &entry).unwrap();
    b.write_runtime("/proc/sys/net/core/somaxconn", "65535")
        .unwrap();
    b.write_runtime("/proc/sys/net/ipv4/ip_local_port_range", "10000 65535")
        .unwrap();

    let said = recover::undo_interrupted(&journal::list(&store).unwrap(), &b, &store).unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("was interrupted"), "{said:?}");
    assert_eq!(*b.files.borrow(), before);
    let all = journal::list(&store).unwrap();
    assert_eq!(all[0].state, State::InterruptedUndone);
    // Nothing pending any more: a second call does nothing.
    assert!(recover::undo_interrupted(&all, &b, &store)
        .unwrap()
        .is_empty());
}

/// A sysctl at "no limit" (i64::MAX, shown as `unlimited` to people) is written back as the
/// number: `fs.file-max = unlimited` in sysctl.d would make `sysctl --system` fail on the line.
#[test]
fn a_no_limit_value_is_persisted_as_a_number() {
    let b = MemoryBackend::default()
        .file("/proc/sys/fs/file-max", "9223372036854775807\n")
        .file("/proc/sys/net/core/somaxconn", "4096\n")
        .file("/etc/sysctl.d/10-other.conf", "kernel.pid_max = 4194304\n");
    let p = plan_for(&b, Platform::Linux);
    let file_max: Vec<&Op> = p
        .actions
        .iter()
        .map(|a| &a.op)
        .filter(|op| matches!(op, Op::SysctlFile { key, .. } if key == "fs.file-max"))
        .collect();
    assert!(
        matches!(file_max.as_slice(), [Op::SysctlFile { value, .. }] if value == "9223372036854775807"),
        "{file_max:?}"
    );
}

/// export's settings: every sysctl the profile targets, passing or not, never lowered; the
/// open-file limit at least the target.
#[test]
fn export_settings_list_every_target_and_never_lower() {
    let b = MemoryBackend::default()
        .file("/proc/sys/net/core/somaxconn", "100000\n")
        .file("/proc/sys/net/ipv4/tcp_fin_timeout", "60\n")
        .file("/proc/sys/net/ipv4/tcp_max_syn_backlog", "128\n");
    let (cat, f, facts) = findings(&b, Platform::Linux);
    let s = plan::settings(&cat, &f, &facts);
    let value = |k: &str| {
        s.sysctls
            .iter()
            .find(|(_, key, _, _)| key == k)
            .map(|(_, _, v, _)| v.clone())
    };
    assert_eq!(
        value("net.core.somaxconn").as_deref(),
        Some("100000"),
        "passing, kept"
    );
    // The ceiling (30) and the floor (25) of one key: written once, inside both.
    assert_eq!(value("net.ipv4.tcp_fin_timeout").as_deref(), Some("30"));
    assert_eq!(
        s.sysctls
            .iter()
            .filter(|(_, k, _, _)| k == "net.ipv4.tcp_fin_timeout")
            .count(),
        1
    );
    // A server does not need a wider port range: not exported.
    assert_eq!(value("net.ipv4.ip_local_port_range"), None);
    assert_eq!(
        value("net.ipv4.tcp_max_syn_backlog").as_deref(),
        Some("65535")
    );
    // Not readable here: not exported, and said why.
    assert_eq!(value("fs.nr_open"), None);
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("fs.nr_open: not readable")),
        "{:?}",
        s.notes
    );
}

/// TcpNumConnections capped by an old hardening script: apply writes what its fix says,
/// Windows' own default and maximum (16,777,214, what the absent value means), not a new cap
/// at the profile's connections, and the check passes on it.
#[test]
fn windows_apply_sets_tcp_num_connections_back_to_its_default_as_the_fix_says() {
    let b = windows(Some(30), Some(2));
    b.registry
        .as_ref()
        .unwrap()
        .borrow_mut()
        .set(
            PARAMS,
            "TcpNumConnections",
            crate::host::RegType::Dword,
            Some("5000"),
        )
        .unwrap();
    let (cat, f, _) = findings(&b, Platform::Windows);
    let check = f
        .iter()
        .find(|x| x.id == "windows.tcpip.tcp_num_connections")
        .unwrap();
    assert_eq!(check.status, Status::Fail);
    assert!(
        check
            .fix
            .runtime
            .as_deref()
            .unwrap()
            .contains("/d 16777214"),
        "{:?}",
        check.fix
    );
    let p = plan_for(&b, Platform::Windows);
    let ops: Vec<&Op> = p.actions.iter().map(|a| &a.op).collect();
    assert!(
        ops.iter().any(|o| matches!(o, Op::Registry { value, data, .. } if value == "TcpNumConnections" && data == "16777214")),
        "{ops:?}"
    );
    let def = cat
        .checks
        .iter()
        .find(|d| d.check.id == "windows.tcpip.tcp_num_connections")
        .unwrap();
    assert_eq!(def.default, Some(crate::value::Value::Num(16_777_214)));
}
