//! The NIC plan's tests of which NICs are tuned and their queues' RPS, RFS and XPS, and the
//! NICs and inputs every NIC test shares. The tests of interrupts, links and the budget sit
//! beside their code (`irq/tests.rs`, `link/tests.rs`, `budget/tests.rs`).

pub(super) use super::budget::NIC_SYSCTL_HEAD;
pub(super) use super::irq::{irq_script, with_policyscript, KeepArgs};
pub(super) use super::udev::{rules_file, RULES_HEADER};
use super::*;
pub(super) use crate::host::owned::{
    IRQBALANCE_POLICY, NIC_IRQ_SCRIPT, NIC_IRQ_UNIT, NIC_RULES_FILE, NIC_SYSCTL_FILE,
};
pub(super) use crate::nic::{Irq, RxQueue, TxQueue};
pub(super) use crate::profile::IrqPolicy;

pub(super) fn veth(rx: u32, tx: u32, cpus: u32) -> NicFacts {
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

pub(super) fn inputs<'a>(
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

pub(super) fn file_of<'a>(p: &'a NicPlan, name: &str) -> &'a str {
    &p.files.iter().find(|(f, _)| f.ends_with(name)).unwrap().1
}

pub(super) fn measured(found: &str) -> Evidence {
    Evidence {
        measured: true,
        found: vec![found.into()],
        quiet: vec![],
        ring_drops: vec![],
        squeezed: None,
    }
}

/// IRQBALANCE_ARGS as systemd's EnvironmentFile= reads it (what irqbalance.service passes to
/// `irqbalance $IRQBALANCE_ARGS`), by systemd's own parser: its environment.d generator reads a
/// file by the same rules (it expands `$VAR` too, which no file read here holds). None when
/// systemd is not installed.
pub(super) fn systemd_reads(text: &str) -> Option<String> {
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
fn another_nics_rule_is_kept_and_this_ones_replaced() {
    let now = format!("{RULES_HEADER}# nic eth9\nACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth9\", ATTR{{queues/rx-0/rps_cpus}}=\"3\"\n# nic veth0\nold line\n");
    let text = rules_file(&now, &[("veth0".into(), "# nic veth0\nnew line\n".into())]);
    assert!(
        text.contains("eth9") && text.contains("new line") && !text.contains("old line"),
        "{text}"
    );
    assert_eq!(text.matches("Written by wstune").count(), 1, "{text}");
}
