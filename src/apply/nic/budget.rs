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

/// The NIC sysctl file with this plan's lines, keeping any other line it has.
pub(super) fn finish_sysctl_file(p: &mut NicPlan, i: &Inputs, lines: &[(String, String)]) {
    if !i.scope.persist || lines.is_empty() {
        return;
    }
    let mut out = String::from(NIC_SYSCTL_HEAD);
    // The file's leading "# Written by wstune apply" comment, of this version or an older one
    // (whose words differ), gives way to the header above.
    let mut head = i.nic_sysctl_now.starts_with("# Written by wstune apply");
    for l in i.nic_sysctl_now.lines() {
        head &= l.starts_with('#');
        let key = l.split_once('=').map(|(k, _)| k.trim());
        let ours = key.is_some_and(|k| lines.iter().any(|(n, _)| n == k));
        if head || ours || l.trim().is_empty() {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    for (k, v) in lines {
        out.push_str(&format!("{k} = {v}\n"));
    }
    // Pushed even when unchanged: apply drops a file that already says this, with its actions.
    p.files.push((NIC_SYSCTL_FILE.to_string(), out));
}

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
