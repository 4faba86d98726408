//! The NIC's sysctls: the receive softirq's budget (net.core.netdev_budget,
//! netdev_budget_usecs) when the watch saw it squeezed, RFS's flow table where RPS is set, and
//! the NIC sysctl.d file that keeps both at boot.

use super::{Inputs, NicPlan, BUDGET_DEFAULTS};
use crate::apply::plan::{Action, Op};
use crate::host::owned::NIC_SYSCTL_FILE;

/// Raise the receive softirq's budget when time_squeeze grew during the watch: the softirq
/// stopped with packets still queued because it used up netdev_budget packets or
/// netdev_budget_usecs (sysctl/net.rst; Red Hat's network performance guide raises both).
/// Each to twice the kernel's default, never lowered; only on that evidence, since a longer
/// softirq run delays the rest of the CPU's work.
pub(super) fn plan_budget(p: &mut NicPlan, i: &Inputs, lines: &mut Vec<(String, String)>) {
    let Some(squeezed) = &i.evidence.squeezed else {
        return;
    };
    let mut raised = Vec::new();
    for ((key, default), now) in BUDGET_DEFAULTS.iter().zip([i.budget.0, i.budget.1]) {
        let want = default * 2;
        let Some(now) = now else {
            p.notes.push(format!(
                "{key} cannot be read here: the receive budget is left as it is"
            ));
            continue;
        };
        if now >= want {
            continue;
        }
        raised.push(format!("{key} {now} -> {want}"));
        if i.scope.runtime {
            p.actions.push(Action {
                check: "linux.softnet.time_squeeze".into(),
                setting: key.to_string(),
                from: Some(now.to_string()),
                to: want.to_string(),
                op: Op::Sysctl {
                    key: key.to_string(),
                    value: want.to_string(),
                },
            });
        }
        if i.scope.persist {
            lines.push((key.to_string(), want.to_string()));
            p.actions.push(Action {
                check: "linux.softnet.time_squeeze".into(),
                setting: key.to_string(),
                from: None,
                to: want.to_string(),
                op: Op::NicSysctlLine {
                    key: key.to_string(),
                    value: want.to_string(),
                },
            });
        }
    }
    p.notes.push(if raised.is_empty() {
        format!(
            "the receive softirq ran out of budget during the watch ({squeezed}) with net.core.netdev_budget and netdev_budget_usecs already at 600 packets and 4000 us or more: spread the receive work over more queues and CPUs"
        )
    } else {
        format!(
            "the receive softirq ran out of budget during the watch ({squeezed}): {} (twice 300 packets and 2000 us, a higher value kept; each softirq run may take longer before other work on that CPU)",
            raised.join(", ")
        )
    });
}

/// The NIC sysctl file with this plan's lines, keeping every other line it has (an operator's
/// comment or blank line, a key this plan does not set) where it is: each of this plan's keys
/// replaces its line in place, and a key the file lacks is appended. So a file that already
/// says this comes out byte for byte the same, and apply neither rewrites nor counts it.
pub(super) fn finish_sysctl_file(p: &mut NicPlan, i: &Inputs, lines: &[(String, String)]) {
    if !i.scope.persist || lines.is_empty() {
        return;
    }
    let mut out = String::from(NIC_SYSCTL_HEAD);
    // wstune's own header, of this version or an older one (whose words differ), gives way to
    // the one above; only those exact lines: a comment under it is the operator's.
    let now = i.nic_sysctl_now;
    let body = std::iter::once(NIC_SYSCTL_HEAD)
        .chain(OLD_NIC_SYSCTL_HEADS.iter().copied())
        .find_map(|head| now.strip_prefix(head))
        .unwrap_or(now);
    let mut done: Vec<&str> = Vec::new();
    for l in body.lines() {
        let key = (!l.trim_start().starts_with(['#', ';']))
            .then(|| l.split_once('=').map(|(k, _)| k.trim()))
            .flatten();
        // sysctl.d's `-key = value` is the same key (a failure to set it is not an error);
        // a replaced line keeps that form.
        let optional = key.is_some_and(|k| k.starts_with('-'));
        let key = key.map(|k| k.trim_start_matches('-').trim_start());
        match lines.iter().find(|(n, _)| Some(n.as_str()) == key) {
            // A second line for a key already written would override it at boot (sysctl
            // applies lines in order, the last one winning): it goes.
            Some((k, _)) if done.contains(&k.as_str()) => {}
            Some((k, v)) => {
                let dash = if optional { "-" } else { "" };
                out.push_str(&format!("{dash}{k} = {v}\n"));
                done.push(k);
            }
            None => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    for (k, v) in lines.iter().filter(|(k, _)| !done.contains(&k.as_str())) {
        out.push_str(&format!("{k} = {v}\n"));
    }
    // Pushed even when unchanged: apply drops a file that already says this, with its actions.
    p.files.push((NIC_SYSCTL_FILE.to_string(), out));
}

/// The headers older versions wrote on the NIC sysctl file, replaced by [`NIC_SYSCTL_HEAD`].
const OLD_NIC_SYSCTL_HEADS: &[&str] = &["# Written by wstune apply: RFS's flow table for the RPS set on the NICs' queues\n# (/etc/udev/rules.d/60-wstune-nic.rules). `wstune rollback` removes it.\n"];

pub(super) const NIC_SYSCTL_HEAD: &str = "# Written by wstune apply: RFS's flow table for the RPS set on the NICs' queues\n# (/etc/udev/rules.d/60-wstune-nic.rules) and the receive softirq's budget. `wstune\n# rollback` puts back what was here before.\n";

/// RFS's flow table (net.core.rps_sock_flow_entries) where RPS is set on a queue: raised now,
/// and kept in the NIC sysctl file, never lowered.
pub(super) fn plan_flow_table(
    p: &mut NicPlan,
    i: &Inputs,
    sysctl_lines: &mut Vec<(String, String)>,
) {
    let want = i.profile.rps_flow_entries;
    if i.scope.runtime && i.flow_entries.is_some_and(|n| n < want) {
        p.actions.push(Action {
            check: "linux.nic.queues".into(),
            setting: "net.core.rps_sock_flow_entries".into(),
            from: i.flow_entries.map(|n| n.to_string()),
            to: want.to_string(),
            op: Op::Sysctl {
                key: "net.core.rps_sock_flow_entries".into(),
                value: want.to_string(),
            },
        });
    }
    if i.scope.persist && i.flow_entries.is_some_and(|n| n <= want) {
        sysctl_lines.push(("net.core.rps_sock_flow_entries".into(), want.to_string()));
        p.actions.push(Action {
            check: "linux.nic.queues".into(),
            setting: "net.core.rps_sock_flow_entries".into(),
            from: None,
            to: want.to_string(),
            op: Op::NicSysctlFile { value: want },
        });
    }
}

#[cfg(test)]
mod tests;
