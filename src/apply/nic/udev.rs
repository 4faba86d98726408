//! The udev rule that writes each NIC's queue settings (RPS, RFS, XPS) again when it appears.

use super::link::nic_address;
use super::{Inputs, NicPlan};
use crate::apply::plan::{Action, Op};
use crate::host::owned::NIC_RULES_FILE;
use crate::nic::NicFacts;

/// One NIC's udev rule, writing each queue attribute when the device appears: matched by its
/// MAC address (a name can change at boot), or by its name. By name for other hosts, also on
/// the "move" event: a NIC that udev renames (eth0 to ens5, after this file's rules ran for
/// "add") gets its name with that event.
pub(super) fn udev_line(
    nic: &NicFacts,
    attrs: &[(String, String)],
    pinned: bool,
    by_name: bool,
) -> String {
    let (action, matcher) = match nic_address(nic, by_name) {
        Some(a) => ("add", format!("ATTR{{address}}==\"{a}\"")),
        None if by_name => ("add|move", format!("KERNEL==\"{}\"", nic.name)),
        None => ("add", format!("KERNEL==\"{}\"", nic.name)),
    };
    let mut sets: Vec<String> = attrs
        .iter()
        .map(|(k, v)| format!("ATTR{{{k}}}=\"{v}\""))
        .collect();
    if pinned {
        // The interrupts exist once the driver has them: a unit, ordered after the network.
        sets.push("ENV{SYSTEMD_WANTS}+=\"wstune-nic-irq.service\"".into());
    }
    format!(
        "# nic {}\nACTION==\"{action}\", SUBSYSTEM==\"net\", {matcher}, {}\n",
        nic.name,
        sets.join(", ")
    )
}

pub(super) const RULES_HEADER: &str = "# Written by wstune apply: each NIC's RPS, RFS and XPS queue settings, written again when\n# the NIC appears (boot, hotplug). `wstune rollback` puts back what was here before.\n";

/// The rules file with these NICs' rules replaced and every other NIC's kept.
pub(super) fn rules_file(now: &str, lines: &[(String, String)]) -> String {
    let mut kept: Vec<String> = Vec::new();
    let mut skip_next = false;
    for l in now.lines() {
        if skip_next {
            skip_next = false;
            continue;
        }
        if let Some(name) = l.strip_prefix("# nic ") {
            if lines.iter().any(|(n, _)| n == name.trim()) {
                skip_next = true;
                continue;
            }
            kept.push(l.to_string());
            continue;
        }
        if l.starts_with('#') && RULES_HEADER.lines().any(|h| h == l) {
            continue;
        }
        kept.push(l.to_string());
    }
    let mut out = String::from(RULES_HEADER);
    for l in kept.iter().filter(|l| !l.trim().is_empty()) {
        out.push_str(l);
        out.push('\n');
    }
    for (_, l) in lines {
        out.push_str(l);
    }
    out
}

/// The udev rule file with these NICs' rules, when it changes.
pub(super) fn plan_rules(p: &mut NicPlan, i: &Inputs, rule_lines: &[(String, String)]) {
    if i.scope.persist {
        let now = i.rules_now;
        if !rule_lines.is_empty() {
            let text = rules_file(now, rule_lines);
            if text != now {
                p.files.push((NIC_RULES_FILE.to_string(), text));
                p.actions.push(Action {
                    check: "linux.nic.queues".into(),
                    setting: format!(
                        "udev rule for {}",
                        rule_lines
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    from: None,
                    to: "the queue settings at every boot and hotplug".into(),
                    op: Op::NicRules,
                });
            }
        }
    }
}
