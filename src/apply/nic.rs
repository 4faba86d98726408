//! The NIC part of a plan: which CPUs serve each queue (the profile's `nic.rss`), carried out
//! with RPS and RFS on each receive queue, XPS on each transmit queue and, with `nic.irq:
//! pinned`, each queue's interrupt on its own CPU; persisted by a udev rule that writes the
//! same queue attributes when the NIC appears, and a sysctl.d file for RFS's flow table.
//!
//! Pure, like [`super::plan::plan`]: the NICs' facts ([`crate::nic::read`]) and the evidence
//! (`--watch`) in, actions and file texts out. Nothing is planned for a NIC without evidence
//! that the kernel spends real time receiving, unless the operator names it (`--nic`) or the
//! profile says `nic.when: always`: on an idle NIC the changes cost CPU locality for nothing.
//!
//! What the kernel's scaling.rst suggests, and what is done here:
//! - RPS: "for a multi-queue system, if RSS is configured so that a hardware receive queue is
//!   mapped to each CPU, then RPS is probably redundant"; with fewer queues than CPUs, each
//!   queue's rps_cpus are the CPUs of the NIC's memory domain. So RPS is set only on a NIC with
//!   fewer receive queues than the profile's CPUs, to those CPUs.
//! - RFS: rps_sock_flow_entries 32768 "for a moderately loaded server", and each queue's
//!   rps_flow_cnt that over the number of queues.
//! - XPS: each CPU sends on one queue; with fewer queues than CPUs a queue takes several.
//! - Interrupts: queue k's on the k-th CPU of the set (what the vendors' set_irq_affinity.sh
//!   does for `local`), only with `irq: pinned`; irqbalance is never fought silently.

use super::plan::{Action, Op, Scope};
use crate::host::owned::{
    IRQBALANCE_POLICY, NIC_IRQ_SCRIPT, NIC_IRQ_UNIT, NIC_RULES_FILE, NIC_SYSCTL_FILE,
};
use crate::nic::{cpu_list, mask, parse_cpu_list, parse_mask, Evidence, NicFacts};
use crate::profile::{IrqPolicy, NicProfile, NicWhen, RssProfile};

/// Everything the NIC plan is made from.
pub struct Inputs<'a> {
    pub profile: &'a NicProfile,
    pub nics: &'a [NicFacts],
    /// The operator named these NICs (`--nic`): tuned without evidence.
    pub named: bool,
    pub evidence: &'a Evidence,
    /// net.core.rps_sock_flow_entries now (None: unreadable).
    pub flow_entries: Option<u64>,
    /// Whether irqbalance.service is active (None: unknown, no systemd).
    pub irqbalance: Option<bool>,
    /// The rules file as it is now ("" when absent): lines of NICs not tuned here are kept.
    pub rules_now: &'a str,
    /// The interrupt boot script as it is now ("" when absent), likewise.
    pub irq_script_now: &'a str,
    /// irqbalance's policy script as it is now ("" when absent), likewise.
    pub irq_policy_now: &'a str,
    /// irqbalance's environment file (path, text), the first of
    /// [`crate::host::owned::IRQBALANCE_CONFIGS`] that exists; None: irqbalance has none here.
    pub irqbalance_config: Option<(&'a str, &'a str)>,
    /// The NIC sysctl file as it is now ("" when absent): lines this plan does not set are kept.
    pub nic_sysctl_now: &'a str,
    /// Each NIC's wstune .link file as it is now (NIC, text): the boot settings a later apply
    /// does not change are carried into the new one.
    pub links_now: &'a [(String, String)],
    /// net.core.netdev_budget and netdev_budget_usecs now (None: unreadable).
    pub budget: (Option<u64>, Option<u64>),
    pub scope: Scope,
    /// The files are for other hosts of this one's hardware (`wstune export --to nic`): they
    /// match each NIC by its name (a MAC address is this host's own), and the .link file is
    /// rendered even where this host's channel counts already are the target (another host's
    /// may still be at the driver's default).
    pub for_other_hosts: bool,
}

/// The fewest CPUs (in the NIC's memory domain, of the profile's set) that RPS is set over on
/// evidence alone: below it no CPU has room for the receive work RPS would move there.
pub const RPS_MIN_CPUS: usize = 4;

/// net.core.netdev_budget's default (300 packets) and netdev_budget_usecs' smallest: 2 jiffies,
/// 2000 us at HZ=1000 (8000 at HZ=250: "net: revert default NAPI poll timeout to 2 jiffies",
/// a4837980fd9f; the kernel docs still say 2000). apply raises each to twice this when
/// time_squeeze grew during the watch and never lowers a higher value, so on a kernel of a lower
/// HZ the time is already past it and only the packet count grows.
pub const BUDGET_DEFAULTS: [(&str, u64); 2] = [
    ("net.core.netdev_budget", 300),
    ("net.core.netdev_budget_usecs", 2000),
];

#[derive(Debug, Default, PartialEq)]
pub struct NicPlan {
    pub actions: Vec<Action>,
    pub files: Vec<(String, String)>,
    pub notes: Vec<String>,
}

/// The CPUs the profile puts a NIC's queues on, in the order queues take them.
pub fn cpus_for(rss: RssProfile, nic: &NicFacts) -> Vec<u32> {
    // A static word is its dynamic twin's set: Linux's drivers never move a queue on their
    // own; what moves at run time is irqbalance's (`nic.irq`).
    match rss {
        RssProfile::Closest | RssProfile::ClosestStatic => nic.local_cpus.clone(),
        RssProfile::NumaScaling | RssProfile::NumaScalingStatic => {
            let mut v = nic.local_cpus.clone();
            v.extend(nic.cpus.iter().filter(|c| !nic.local_cpus.contains(c)));
            v
        }
        RssProfile::Conservative => {
            let n = nic.local_cpus.len().div_ceil(2).max(1);
            nic.local_cpus.iter().take(n).copied().collect()
        }
    }
}

fn same_cpus(now: Option<&str>, want: &[u32], parse: fn(&str) -> Option<Vec<u32>>) -> bool {
    let mut want = want.to_vec();
    want.sort_unstable();
    now.and_then(parse).is_some_and(|n| n == want)
}

pub fn plan(i: &Inputs) -> NicPlan {
    let mut p = NicPlan::default();
    // Lines of the NIC sysctl file (key, value), rendered once at the end.
    let mut sysctl_lines: Vec<(String, String)> = Vec::new();
    plan_budget(&mut p, i, &mut sysctl_lines);
    if i.nics.is_empty() {
        finish_sysctl_file(&mut p, i, &sysctl_lines);
        return p;
    }
    let forced = i.named || i.profile.when == NicWhen::Always;
    if !forced && i.evidence.found.is_empty() {
        let names: Vec<&str> = i.nics.iter().map(|n| n.name.as_str()).collect();
        p.notes.push(if i.evidence.measured {
            format!(
                "NIC queues of {} not changed: the kernel is not busy receiving ({}). --nic NAME tunes one anyway",
                names.join(", "),
                i.evidence.quiet.join("; ")
            )
        } else {
            format!(
                "NIC queues of {} not changed: nothing measured says the kernel spends real time receiving. Run apply --watch 10 under the real load (it tunes them when softnet drops or squeezes grow, or one CPU's softirq share passes {} %), or name a NIC with --nic NAME",
                names.join(", "),
                crate::nic::SOFTIRQ_BUSY_PERCENT
            )
        });
        finish_sysctl_file(&mut p, i, &sysctl_lines);
        return p;
    }
    let why = if !i.evidence.found.is_empty() {
        format!("evidence: {}", i.evidence.found.join("; "))
    } else if i.named {
        "named with --nic".to_string()
    } else {
        "profile nic.when: always".to_string()
    };
    p.notes.push(format!(
        "NIC queues tuned ({why}) to RSS profile {}: {}",
        i.profile.rss.as_str(),
        i.profile.rss.linux_cpus()
    ));
    let mut rule_lines: Vec<(String, String)> = Vec::new();
    // Per NIC with pinned interrupts: (interrupt name, CPU) for the boot script.
    let mut pins: Vec<(String, Vec<(String, u32)>)> = Vec::new();
    let mut rps_planned = false;
    for nic in i.nics {
        let cpus = cpus_for(i.profile.rss, nic);
        // numa_scaling (the built-in profiles' word, Windows' NUMAScaling) reaches past the
        // NIC's own node: said, since a host that applied closest before now spreads further.
        if cpus.len() > nic.local_cpus.len() {
            p.notes.push(format!(
                "{}: nic.rss {} spreads its queues, interrupts and XPS over {} CPUs of every NUMA node, its own node's {} first (RPS stays on those); nic.rss: closest keeps them all on its node",
                nic.name,
                i.profile.rss.as_str(),
                cpus.len(),
                cpu_list(&nic.local_cpus)
            ));
        }
        let mut attrs: Vec<(String, String)> = Vec::new();
        // Every queue setting goes into the rule; one that differs now is also written now.
        let mut set =
            |p: &mut NicPlan, attr: String, now: Option<&String>, to: String, same: bool| {
                attrs.push((attr.clone(), to.clone()));
                if i.scope.runtime && !same {
                    p.actions.push(Action {
                        check: format!("linux.nic.queues[{}]", nic.name),
                        setting: format!("{} {attr}", nic.name),
                        from: now.cloned(),
                        to: to.clone(),
                        op: Op::KernelFile {
                            path: format!("/sys/class/net/{}/{attr}", nic.name),
                            value: to,
                        },
                    });
                }
            };
        // Drops in the NIC itself (no free descriptor): a longer receive ring holds a burst.
        // Only on that evidence: a longer ring costs memory and cache, and its packets wait
        // longer (Red Hat: "Increasing the ring buffers to reduce a high packet drop rate").
        let mut ring = None;
        if i.evidence.ring_drops.contains(&nic.name) {
            p.notes.push(match nic.rx_ring {
                Some((now, max)) if now < max => {
                    ring = Some(max);
                    if i.scope.runtime {
                        p.actions.push(Action {
                            check: format!("linux.nic.rx_missed[{}]", nic.name),
                            setting: format!("{} receive ring", nic.name),
                            from: Some(now.to_string()),
                            to: max.to_string(),
                            op: Op::RxRing {
                                nic: nic.name.clone(),
                                rx: max,
                            },
                        });
                    }
                    let how = match (i.scope.runtime, i.scope.persist) {
                        (true, true) => format!("raised from {now} to the {max} the NIC allows (ethtool -G {} rx {max}; RxBufferSize={max} in its .link file keeps it at boot)", nic.name),
                        (true, false) => format!("raised from {now} to the {max} the NIC allows (ethtool -G {} rx {max}; not kept at boot: --runtime-only)", nic.name),
                        _ => format!("RxBufferSize={max}, the most the NIC allows, in its .link file for the next boot (it has {now} now; --persist-only)"),
                    };
                    format!(
                        "{}: its receive ring ran out of descriptors during the watch ({}): {how}. The driver reallocates the ring, so the link drops for a moment; the longer ring holds more memory",
                        nic.name,
                        i.evidence
                            .found
                            .iter()
                            .find(|f| f.starts_with(&format!("{} rx_missed_errors", nic.name)))
                            .map(String::as_str)
                            .unwrap_or("rx_missed_errors grew"),
                    )
                }
                Some((now, _)) => format!(
                    "{}: its receive ring ran out of descriptors during the watch and is at its maximum ({now}): spread the receive work over more queues and CPUs",
                    nic.name
                ),
                None => format!(
                    "{}: its receive ring ran out of descriptors during the watch: `ethtool -g {}` shows its size and maximum, `ethtool -G {} rx N` raises it",
                    nic.name, nic.name, nic.name
                ),
            });
        }
        // The queue count first: up to one queue per CPU of the set, never fewer than now.
        let channels = plan_channels(&mut p, i, nic, cpus.len() as u32);
        // Counts rendered at the target for other hosts do not change this one's queues.
        let queues_change = channels.is_some_and(|(_, grows)| grows);
        let channels = channels.map(|(counts, _)| counts);
        if i.scope.persist && (channels.is_some() || ring.is_some()) {
            let (rx, tx, combined) = channels.unwrap_or_default();
            // For other hosts, this host's own .link file has nothing to keep.
            let now = i
                .links_now
                .iter()
                .find(|(n, _)| *n == nic.name && !i.for_other_hosts)
                .map_or("", |(_, t)| t.as_str());
            p.files.push((
                crate::host::owned::nic_link_file(&nic.name),
                link_file(
                    nic,
                    now,
                    &[
                        ("RxChannels", rx),
                        ("TxChannels", tx),
                        ("CombinedChannels", combined),
                        ("RxBufferSize", ring),
                    ],
                    i.for_other_hosts,
                ),
            ));
            // One row per setting, beside its change now.
            let rows = [
                p.actions
                    .iter()
                    .find(|a| matches!(&a.op, Op::Channels { nic: n, .. } if *n == nic.name))
                    .filter(|_| channels.is_some()),
                p.actions
                    .iter()
                    .find(|a| matches!(&a.op, Op::RxRing { nic: n, .. } if *n == nic.name))
                    .filter(|_| ring.is_some()),
            ];
            let mut boot: Vec<Action> = rows
                .into_iter()
                .flatten()
                .map(|a| Action {
                    op: Op::NicLinkFile {
                        nic: nic.name.clone(),
                    },
                    ..a.clone()
                })
                .collect();
            if boot.is_empty() {
                // --persist-only: no change now to stand beside.
                // The counts this host has now, where they are what the file sets: export
                // refuses to render counts this host's queues do not have yet.
                let from = channels.zip(nic.channels).map(|((rx, tx, c), ch)| {
                    channel_words(rx.map(|_| ch.rx), tx.map(|_| ch.tx), c.map(|_| ch.combined))
                });
                boot.push(Action {
                    check: format!("linux.nic.queues[{}]", nic.name),
                    setting: format!("{} boot settings", nic.name),
                    from: from.filter(|_| ring.is_none()),
                    to: [
                        channels.map(|(rx, tx, c)| channel_words(rx, tx, c)),
                        ring.map(|r| format!("receive ring {r}")),
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(", "),
                    op: Op::NicLinkFile {
                        nic: nic.name.clone(),
                    },
                });
            }
            p.actions.extend(boot);
        }
        if queues_change {
            p.notes.push(format!(
                "{}: its queues change with this apply; run apply again afterwards to set RPS and XPS on the new queues",
                nic.name
            ));
            continue;
        }
        // RPS and RFS: only where the hardware has fewer receive queues than the CPUs, or
        // has no receive hardware at all (a veth or a tunnel receives on the sending CPU,
        // whatever its queue count: only RPS spreads it).
        let rx = nic.rx.len();
        let steered_by_hardware = nic.physical && rx >= cpus.len();
        // RPS stays in the NIC's memory domain whatever the word spreads the queues over
        // (scaling.rst, "RPS Configuration": "the CPUs in the same memory domain of the
        // interrupting CPU"): a packet steered to another node is processed from remote
        // memory. numa_scaling's other nodes serve queues and interrupts, not RPS.
        let rps_cpus: Vec<u32> = cpus
            .iter()
            .copied()
            .filter(|c| nic.local_cpus.contains(c))
            .collect();
        let rps_cpus = if rps_cpus.is_empty() {
            cpus.clone()
        } else {
            rps_cpus
        };
        // RPS moves receive work to other CPUs: it needs CPUs with room to take it. Measured
        // on two (bench/rps-veth.sh), both already busy, it doubled the softirq time for the
        // same messages and gained no throughput, while the evidence rule had fired. On a
        // set that small, evidence alone does not set it; --nic or when: always still does.
        let too_few = !forced && rps_cpus.len() < RPS_MIN_CPUS;
        if i.profile.rps && rx > 0 && !steered_by_hardware && too_few {
            p.notes.push(format!(
                "{}: RPS not set: its {} CPUs leave none with room for the receive work it would move (on 2 busy CPUs it doubled softirq time and gained no throughput: BENCHMARKS.md, \"RPS and XPS on a NIC\"); --nic {} sets it anyway",
                nic.name,
                rps_cpus.len(),
                nic.name
            ));
        } else if i.profile.rps && rx > 0 && !steered_by_hardware {
            let flow = (i.profile.rps_flow_entries / rx as u64)
                .max(1)
                .next_power_of_two()
                .to_string();
            for q in &nic.rx {
                if q.rps_cpus.is_some() {
                    let same = same_cpus(q.rps_cpus.as_deref(), &rps_cpus, parse_mask);
                    let attr = format!("queues/rx-{}/rps_cpus", q.index);
                    set(&mut p, attr, q.rps_cpus.as_ref(), mask(&rps_cpus), same);
                }
                if q.rps_flow_cnt.is_some() {
                    let same = q.rps_flow_cnt.as_deref() == Some(flow.as_str());
                    let attr = format!("queues/rx-{}/rps_flow_cnt", q.index);
                    set(&mut p, attr, q.rps_flow_cnt.as_ref(), flow.clone(), same);
                }
            }
            // RFS's table only where a queue has RPS (a kernel without it has no files).
            rps_planned |= nic.rx.iter().any(|q| q.rps_cpus.is_some());
        } else if i.profile.rps && steered_by_hardware {
            p.notes.push(format!(
                "{}: RPS not set: {rx} receive queues for {} CPUs, one each already (scaling.rst: RPS is then redundant)",
                nic.name,
                cpus.len()
            ));
        }
        if nic.physical && rx < cpus.len() && nic.channels.is_none() {
            p.notes.push(format!(
                "{}: {rx} receive queues for the profile's {} CPUs, and its channel counts cannot be read here; if the NIC has more, `ethtool -l {}` shows its maximum and `ethtool -L {} combined N` sets them (then apply again: the queues' RPS and XPS are set per queue)",
                nic.name,
                cpus.len(),
                nic.name,
                nic.name
            ));
        }
        // XPS: a NIC with one transmit queue has nothing to choose.
        let tx = nic.tx.len();
        if i.profile.xps && tx > 1 && !cpus.is_empty() {
            for q in &nic.tx {
                let mine: Vec<u32> = if cpus.len() >= tx {
                    cpus.iter()
                        .enumerate()
                        .filter(|(k, _)| k % tx == q.index as usize % tx)
                        .map(|(_, c)| *c)
                        .collect()
                } else {
                    vec![cpus[q.index as usize % cpus.len()]]
                };
                if q.xps_cpus.is_none() {
                    continue;
                }
                let same = same_cpus(q.xps_cpus.as_deref(), &mine, parse_mask);
                let attr = format!("queues/tx-{}/xps_cpus", q.index);
                set(&mut p, attr, q.xps_cpus.as_ref(), mask(&mine), same);
            }
        }
        // Interrupts.
        match i.profile.irq {
            IrqPolicy::Irqbalance => match i.irqbalance {
                Some(true) => {}
                _ => p.notes.push(format!(
                    "{}: interrupts are left to irqbalance (nic.irq: irqbalance), which is not running here: systemctl enable --now irqbalance",
                    nic.name
                )),
            },
            IrqPolicy::Pinned if nic.irqs.is_empty() => p.notes.push(format!(
                "{}: no queue interrupts found in /proc/interrupts (a virtual NIC, or a driver that names them unlike its queues): none pinned",
                nic.name
            )),
            IrqPolicy::Pinned => {
                for (k, irq) in nic.irqs.iter().enumerate() {
                    let cpu = cpus[k % cpus.len()];
                    if same_cpus(irq.affinity.as_deref(), &[cpu], parse_cpu_list) {
                        continue;
                    }
                    if i.scope.runtime {
                        p.actions.push(Action {
                            check: format!("linux.nic.irq[{}]", nic.name),
                            setting: format!("IRQ {} ({})", irq.number, irq.name),
                            from: irq.affinity.clone(),
                            to: cpu_list(&[cpu]),
                            op: Op::KernelFile {
                                path: format!("/proc/irq/{}/smp_affinity_list", irq.number),
                                value: cpu_list(&[cpu]),
                            },
                        });
                    }
                }
                pins.push((
                    nic.name.clone(),
                    nic.irqs
                        .iter()
                        .enumerate()
                        .map(|(k, q)| (q.name.clone(), cpus[k % cpus.len()]))
                        .collect(),
                ));
            }
        }
        let pinned = pins.iter().any(|(n, _)| *n == nic.name);
        if !attrs.is_empty() || pinned {
            rule_lines.push((
                nic.name.clone(),
                udev_line(nic, &attrs, pinned, i.for_other_hosts),
            ));
        }
    }
    if !i.scope.persist && !pins.is_empty() && i.irqbalance == Some(true) {
        p.notes.push(format!(
            "{}: irqbalance runs and may move the pinned interrupts again; apply without --runtime-only gives it a policy script that leaves them alone",
            pins.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if i.scope.persist && !pins.is_empty() {
        let script = irq_script(i.irq_script_now, &pins);
        if script != i.irq_script_now {
            p.files.push((NIC_IRQ_SCRIPT.to_string(), script));
            p.files
                .push((NIC_IRQ_UNIT.to_string(), IRQ_UNIT.to_string()));
            p.actions.push(Action {
                check: "linux.nic.irq".into(),
                setting: format!(
                    "interrupts of {} at boot",
                    pins.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                from: None,
                to: "pinned by wstune-nic-irq.service".into(),
                op: Op::NicIrqFiles,
            });
        }
        p.notes.push(format!(
            "{}: the pinned interrupts are kept at boot by wstune-nic-irq.service, which the udev rule starts when the NIC appears and which finds each interrupt by its name (their numbers change when the driver loads again)",
            pins.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ));
        plan_irqbalance(&mut p, i, &pins);
    }
    if i.scope.persist {
        let now = i.rules_now;
        if !rule_lines.is_empty() {
            let text = rules_file(now, &rule_lines);
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
    if rps_planned {
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
    finish_sysctl_file(&mut p, i, &sysctl_lines);
    p
}

/// Raise the receive softirq's budget when time_squeeze grew during the watch: the softirq
/// stopped with packets still queued because it used up netdev_budget packets or
/// netdev_budget_usecs (sysctl/net.rst; Red Hat's network performance guide raises both).
/// Each to twice the kernel's default, never lowered; only on that evidence, since a longer
/// softirq run delays the rest of the CPU's work.
fn plan_budget(p: &mut NicPlan, i: &Inputs, lines: &mut Vec<(String, String)>) {
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
fn finish_sysctl_file(p: &mut NicPlan, i: &Inputs, lines: &[(String, String)]) {
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

const NIC_SYSCTL_HEAD: &str = "# Written by wstune apply: RFS's flow table for the RPS set on the NICs' queues\n# (/etc/udev/rules.d/60-wstune-nic.rules) and the receive softirq's budget. `wstune\n# rollback` puts back what was here before.\n";

/// Keep irqbalance off the interrupts wstune pins: a policy script (irqbalance(1),
/// --policyscript) that answers `ban=true` for each of them, found by its name as the boot
/// script finds it (a driver reload renumbers them; irqbalance runs the script for every
/// interrupt it discovers, with its number), named in IRQBALANCE_ARGS of irqbalance's own
/// environment file. An operator's policy script is never replaced; a running irqbalance is
/// restarted (`systemctl try-restart`) as a planned action so it reads the change.
fn plan_irqbalance(p: &mut NicPlan, i: &Inputs, pins: &[(String, Vec<(String, u32)>)]) {
    let names = || {
        pins.iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // An operator's own policy script (named in IRQBALANCE_ARGS already) is never replaced.
    let config = match i
        .irqbalance_config
        .map(|(path, text)| (path, text, with_policyscript(text)))
    {
        Some((path, _, Err(theirs))) => {
            let bans: Vec<String> = pins
                .iter()
                .flat_map(|(_, q)| q.iter().map(|(n, _)| n.clone()))
                .collect();
            p.notes.push(format!(
                "{}: IRQBALANCE_ARGS in {path} already names a policy script of its own ({theirs}): left as it is. Have it answer ban=true for the pinned interrupts ({}), or irqbalance may move them again",
                names(),
                bans.join(", ")
            ));
            return;
        }
        Some((path, text, Ok(args))) => Some((path, text, args)),
        None => None,
    };
    // The script whenever interrupts are pinned: it is what a host's irqbalance needs, whether
    // this plan can name it in irqbalance's arguments or an operator does (another host, or
    // one whose irqbalance keeps its arguments elsewhere).
    let policy = irq_policy(i.irq_policy_now, pins);
    let mut changed = false;
    if policy != i.irq_policy_now {
        changed = true;
        p.files.push((IRQBALANCE_POLICY.to_string(), policy));
        p.actions.push(Action {
            check: "linux.nic.irq".into(),
            setting: "irqbalance policy script".into(),
            from: None,
            to: "bans the pinned IRQs".into(),
            op: Op::IrqbalancePolicy,
        });
    }
    let Some((path, text, args)) = config else {
        p.notes.push(if i.for_other_hosts {
            format!(
                "{}: where irqbalance runs, add --policyscript={IRQBALANCE_POLICY} to its arguments (IRQBALANCE_ARGS in {}), or it may move the pinned interrupts again",
                names(),
                crate::host::owned::IRQBALANCE_CONFIGS.join(" or ")
            )
        } else {
            match i.irqbalance {
                Some(true) => format!(
                    "{}: irqbalance runs but has no environment file here ({}): add --policyscript={IRQBALANCE_POLICY} to its arguments by hand, or stop it (systemctl disable --now irqbalance), or it may move the pinned interrupts again",
                    names(),
                    crate::host::owned::IRQBALANCE_CONFIGS.join(", ")
                ),
                _ => format!(
                    "{}: irqbalance is not installed here (no {}): nothing moves the pinned interrupts; {IRQBALANCE_POLICY} keeps it off them once its arguments name it (--policyscript)",
                    names(),
                    crate::host::owned::IRQBALANCE_CONFIGS.join(" or ")
                ),
            }
        });
        return;
    };
    if args != text {
        changed = true;
        p.files.push((path.to_string(), args));
        p.actions.push(Action {
            check: "linux.nic.irq".into(),
            setting: "IRQBALANCE_ARGS".into(),
            from: None,
            to: "adds --policyscript".into(),
            op: Op::IrqbalanceArgs {
                path: path.to_string(),
            },
        });
    }
    if changed && i.scope.runtime && i.irqbalance == Some(true) {
        p.actions.push(Action {
            check: "linux.nic.irq".into(),
            setting: "irqbalance".into(),
            from: Some("active".into()),
            to: "restarted".into(),
            op: Op::TryRestart {
                unit: super::journal::IRQBALANCE_UNIT.into(),
            },
        });
    }
    p.notes.push(format!(
        "{}: irqbalance leaves the pinned interrupts alone: its policy script {IRQBALANCE_POLICY} answers ban=true for each, found by name, and IRQBALANCE_ARGS in {path} names it{}",
        names(),
        if changed && i.irqbalance == Some(true) && i.scope.runtime {
            " (irqbalance is restarted to read it: systemctl try-restart irqbalance)"
        } else {
            ""
        }
    ));
}

/// irqbalance's environment file with `--policyscript=` ours added to IRQBALANCE_ARGS (its last
/// assignment; appended when there is none), every other line and argument kept. Err: the
/// arguments already name another policy script (`-l`/`--policyscript`), which is the
/// operator's and is left alone.
fn with_policyscript(text: &str) -> Result<String, String> {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    let assignment = |l: &str| {
        l.trim_start()
            .strip_prefix("IRQBALANCE_ARGS=")
            .map(|v| v.trim_end().to_string())
    };
    let last = text
        .lines()
        .enumerate()
        .filter(|(_, l)| assignment(l).is_some())
        .map(|(k, _)| k)
        .last();
    let Some(at) = last else {
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "# Added by wstune apply (nic.irq: pinned): irqbalance leaves the pinned NIC interrupts\n# alone. `wstune rollback` puts back what was here before.\nIRQBALANCE_ARGS=\"{ours}\"\n"
        ));
        return Ok(out);
    };
    let line = text.lines().nth(at).unwrap_or_default();
    let raw = assignment(line).unwrap_or_default();
    // The value as the shell reads it (quoted, or one word), and what follows it on the line
    // (a comment), kept.
    let (quote, value, trailing) = match raw.chars().next() {
        Some(q @ ('"' | '\'')) => match raw[1..].find(q) {
            Some(end) => (
                Some(q),
                raw[1..=end].to_string(),
                raw[end + 2..].to_string(),
            ),
            None => return Err(format!("an unterminated quote: {line}")),
        },
        _ => {
            let end = raw.find(char::is_whitespace).unwrap_or(raw.len());
            (None, raw[..end].to_string(), raw[end..].to_string())
        }
    };
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.contains(&ours.as_str()) {
        return Ok(text.to_string());
    }
    let theirs = words.iter().enumerate().find_map(|(k, w)| {
        if w.starts_with("--policyscript") {
            Some(w.to_string())
        } else if *w == "-l" {
            Some(format!("-l {}", words.get(k + 1).unwrap_or(&"")))
        } else if w.starts_with("-l") && !w.starts_with("--") {
            Some(w.to_string())
        } else {
            None
        }
    });
    if let Some(theirs) = theirs {
        return Err(theirs);
    }
    let new_value = if value.trim().is_empty() {
        ours
    } else {
        format!("{} {ours}", value.trim_end())
    };
    let q = quote.unwrap_or('"');
    let indent = &line[..line.len() - line.trim_start().len()];
    let mut out = String::new();
    for (k, l) in text.split_inclusive('\n').enumerate() {
        if k == at {
            out.push_str(&format!(
                "{indent}IRQBALANCE_ARGS={q}{new_value}{q}{trailing}"
            ));
            if l.ends_with('\n') {
                out.push('\n');
            }
        } else {
            out.push_str(l);
        }
    }
    Ok(out)
}

const IRQ_POLICY_HEAD: &str = "#!/bin/sh\n# Written by wstune apply: irqbalance's policy script (irqbalance(1), --policyscript).\n# irqbalance runs it for each interrupt it finds, with the device's sysfs path and the\n# interrupt's number; it answers ban=true for the NIC queue interrupts wstune pins (nic.irq:\n# pinned), found by name (/proc/irq/N/NAME), so a renumbered one stays banned. Any other\n# interrupt gets no answer and is balanced. `wstune rollback` puts back what was here before.\n# $3: a root, for tests.\nIRQ=\"$2\"\nR=\"${3:-}\"\nban() { if [ -d \"$R/proc/irq/$IRQ/$1\" ]; then echo ban=true; exit 0; fi; }\n";

/// The policy script with these NICs' interrupts replaced and every other NIC's kept.
fn irq_policy(now: &str, pins: &[(String, Vec<(String, u32)>)]) -> String {
    per_nic_script(IRQ_POLICY_HEAD, now, pins, |name, _| format!("ban {name}"))
}

/// A script of `head` and one block per NIC (`# nic NAME`, then `line(quoted interrupt name,
/// CPU)` per interrupt): these NICs' blocks replaced, every other NIC's kept from `now`.
fn per_nic_script(
    head: &str,
    now: &str,
    pins: &[(String, Vec<(String, u32)>)],
    line: impl Fn(&str, u32) -> String,
) -> String {
    let mut out = String::from(head);
    let mut keep = false;
    for l in now.lines().skip_while(|l| !l.starts_with("# nic ")) {
        if let Some(name) = l.strip_prefix("# nic ") {
            keep = !pins.iter().any(|(n, _)| n == name.trim());
        }
        if keep {
            out.push_str(l);
            out.push('\n');
        }
    }
    for (nic, irqs) in pins {
        out.push_str(&format!("# nic {nic}\n"));
        for (name, cpu) in irqs {
            let quoted = format!("'{}'", name.replace('\'', "'\\''"));
            out.push_str(&line(&quoted, *cpu));
            out.push('\n');
        }
    }
    out
}

/// A Windows adapter's RSS keywords (`*RSS`, `*RSSProfile`, `*NumRssQueues` under its network
/// class key, the standardized INF keywords) set to what the catalog's per-adapter checks want:
/// what `Set-NetAdapterRss` and `Set-NetAdapterAdvancedProperty` write. Only for the adapters
/// named (`--nic`), or every adapter with `nic.when: always`: the driver reads them when the
/// adapter restarts, and its link drops for that moment. Returns the plan and the adapters to
/// restart once the values are written.
pub fn plan_windows(
    catalog: &crate::catalog::Catalog,
    findings: &[crate::catalog::eval::Finding],
    facts: &crate::catalog::facts::HostFacts,
    named: &[String],
    profile: &NicProfile,
    scope: Scope,
) -> (NicPlan, Vec<String>) {
    use crate::catalog::eval::{desired, Status};
    use crate::catalog::Source;
    use crate::value::Value;
    let mut p = NicPlan::default();
    let mut restart: Vec<String> = Vec::new();
    let all = profile.when == NicWhen::Always;
    let mut seen: Vec<String> = Vec::new();
    for inst in &facts.instances {
        let (Some(link), Some(def)) = (&inst.nic, catalog.checks.get(inst.check)) else {
            continue;
        };
        let Source::Registry(r) = &def.check.source else {
            continue;
        };
        if !seen.contains(&link.name) {
            seen.push(link.name.clone());
        }
        if !(all || named.contains(&link.name)) || !scope.runtime {
            continue;
        }
        let (Some(sub), id) = (
            &link.registry_key,
            format!("{}[{}]", def.check.id, link.name),
        ) else {
            continue;
        };
        // By id: a finding's key names its check but not its adapter (one key per NIC check).
        let Some(f) = findings.iter().find(|f| f.id == id) else {
            continue;
        };
        // A keyword the driver does not have (no current value, no documented default) is
        // not one it reads: writing it would change nothing.
        let known = f.current.is_some();
        if !known || matches!(f.status, Status::Pass | Status::Skip) || f.compare == "report" {
            continue;
        }
        let Some(target) = &f.target else { continue };
        let value = match (f.current.as_ref(), target) {
            (Some(c @ Value::Num(_)), Value::Num(_)) => {
                desired(def.check.compare, c, None, target).unwrap_or_else(|| target.clone())
            }
            _ => target.clone(),
        };
        // An enumerated keyword is written as its number (*RSSProfile NUMAScaling -> "3").
        let data = r
            .names
            .iter()
            .find(|(_, n)| Value::Text((*n).clone()) == value)
            .map(|(raw, _)| raw.clone())
            .unwrap_or_else(|| value.to_string());
        p.actions.push(Action {
            check: id.clone(),
            setting: format!("{} {}", link.name, r.value),
            from: f.current.as_ref().map(|v| v.to_string()),
            to: value.to_string(),
            op: Op::Registry {
                key: r.key.replace("{nic_key}", sub),
                value: r.value.clone(),
                reg_type: r.kind,
                data,
            },
        });
        if !restart.contains(&link.name) {
            restart.push(link.name.clone());
        }
    }
    if restart.is_empty() && !all && named.is_empty() && !seen.is_empty() {
        p.notes.push(format!(
            "adapters' RSS keywords not changed ({}): the change restarts an adapter (its link drops for a moment), so apply makes it only for one named with --nic NAME, or every one with the profile's nic.when: always",
            seen.join(", ")
        ));
    }
    for name in &restart {
        p.notes.push(format!(
            "{name}: the adapter restarts after its keywords are written (Restart-NetAdapter), and its link drops for a moment"
        ));
    }
    (p, restart)
}

/// The channel counts as the plan shows them: "rx 4, combined 8".
fn channel_words(rx: Option<u32>, tx: Option<u32>, c: Option<u32>) -> String {
    [("rx", rx), ("tx", tx), ("combined", c)]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Channel counts to set: (rx, tx, combined), None each where it stays.
type ChannelCounts = (Option<u32>, Option<u32>, Option<u32>);

/// Raise a NIC's channel counts toward one queue per CPU of its set, up to the hardware's
/// maximum (`ethtool -L`), now: the counts to keep at boot (the caller writes them) and
/// whether they grow on this host. For other hosts the counts are rendered at the target too.
fn plan_channels(
    p: &mut NicPlan,
    i: &Inputs,
    nic: &NicFacts,
    want: u32,
) -> Option<(ChannelCounts, bool)> {
    let ch = nic.channels?;
    let raise = |now: u32, max: u32| {
        let t = want.min(max);
        (max > 0 && (now < t || (i.for_other_hosts && now == t))).then_some(t)
    };
    let (rx, tx, combined) = if ch.max_combined > 0 {
        (None, None, raise(ch.combined, ch.max_combined))
    } else {
        (raise(ch.rx, ch.max_rx), raise(ch.tx, ch.max_tx), None)
    };
    if rx.is_none() && tx.is_none() && combined.is_none() {
        return None;
    }
    let grows = rx.is_some_and(|t| ch.rx < t)
        || tx.is_some_and(|t| ch.tx < t)
        || combined.is_some_and(|t| ch.combined < t);
    let from = channel_words(
        rx.map(|_| ch.rx),
        tx.map(|_| ch.tx),
        combined.map(|_| ch.combined),
    );
    if i.scope.runtime && grows {
        p.actions.push(Action {
            check: format!("linux.nic.queues[{}]", nic.name),
            setting: format!("{} channels", nic.name),
            from: Some(from),
            to: channel_words(rx, tx, combined),
            op: Op::Channels {
                nic: nic.name.clone(),
                rx,
                tx,
                combined,
            },
        });
    }
    Some(((rx, tx, combined), grows))
}

/// systemd 252's 99-default.link [Link] lines, for a host whose own cannot be read.
const DEFAULT_LINK: &str = "NamePolicy=keep kernel database onboard slot path\nAlternativeNamesPolicy=database onboard slot path\nMACAddressPolicy=persistent\n";

/// The keys of a NIC's boot settings wstune writes in its .link file (systemd.link(5), [Link]).
const LINK_KEYS: [&str; 4] = [
    "RxChannels",
    "TxChannels",
    "CombinedChannels",
    "RxBufferSize",
];

/// The .link file that sets the channel counts and receive ring at boot. udev applies only
/// the first .link file that matches a device, so this one repeats the [Link] settings of the
/// host's 99-default.link (interface naming, MAC address policy): without them the NIC would
/// lose its predictable name at the next boot. `sets` are this apply's values (None: not
/// changed now); a value an earlier apply wrote in `now` (the file as it is) is kept. Matched
/// by the NIC's name instead of its address for other hosts (`by_name`).
fn link_file(nic: &NicFacts, now: &str, sets: &[(&str, Option<u32>)], by_name: bool) -> String {
    // For other hosts a physical NIC is matched by its PCI path (udev's ID_PATH, the same on
    // the same hardware): OriginalName= cannot match a name udev gave it (systemd.link(5)),
    // and most physical NICs have one (eth0 becomes ens5f0).
    let matcher = match (nic_address(nic, by_name), &nic.pci_slot) {
        (Some(a), _) => format!("MACAddress={a}"),
        (None, Some(slot)) if by_name && nic.physical => format!("Path=*pci-{slot}"),
        (None, _) => format!("OriginalName={}", nic.name),
    };
    let ours = |l: &str| {
        l.split_once('=')
            .is_some_and(|(k, _)| LINK_KEYS.contains(&k.trim()))
    };
    let defaults: Vec<String> = nic
        .default_link
        .as_deref()
        .map(|t| {
            t.lines()
                .skip_while(|l| l.trim() != "[Link]")
                .skip(1)
                .take_while(|l| !l.trim_start().starts_with('['))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
                .filter(|l| !l.contains("Channels=") && !ours(l))
                .map(str::to_string)
                .collect()
        })
        .filter(|v: &Vec<String>| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_LINK.lines().map(str::to_string).collect());
    let earlier = |key: &str| {
        now.lines().find_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            (k.trim() == key).then(|| v.trim().parse::<u32>().ok())?
        })
    };
    let mut out = format!(
        "# Written by wstune apply: {}'s channel counts and receive ring at every boot (udev's\n# net_setup_link applies it). Only the first .link file that matches a NIC is applied, so\n# the [Link] settings of systemd's 99-default.link are repeated. `wstune rollback` removes it.\n[Match]\n{matcher}\n\n[Link]\n",
        nic.name
    );
    for l in defaults {
        out.push_str(&l);
        out.push('\n');
    }
    for key in LINK_KEYS {
        let set = sets.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v);
        if let Some(v) = set.or_else(|| earlier(key)) {
            out.push_str(&format!("{key}={v}\n"));
        }
    }
    out
}

/// What a boot file matches a NIC by: a physical NIC's hardware address (its name can change
/// at boot, the address not); a virtual link's name, since its address is random or rewritten
/// at creation (99-default.link's MACAddressPolicy=persistent); and the name for other hosts
/// (`by_name`), whose addresses are their own.
fn nic_address(nic: &NicFacts, by_name: bool) -> Option<&str> {
    nic.address.as_deref().filter(|_| nic.physical && !by_name)
}

/// One NIC's udev rule, writing each queue attribute when the device appears: matched by its
/// MAC address (a name can change at boot), or by its name. By name for other hosts, also on
/// the "move" event: a NIC that udev renames (eth0 to ens5, after this file's rules ran for
/// "add") gets its name with that event.
fn udev_line(nic: &NicFacts, attrs: &[(String, String)], pinned: bool, by_name: bool) -> String {
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

/// The unit that runs the boot script; the udev rule pulls it in when a pinned NIC appears.
const IRQ_UNIT: &str = "# Written by wstune apply: pins the NICs' queue interrupts (nic.irq: pinned) each time\n# a NIC the udev rule /etc/udev/rules.d/60-wstune-nic.rules names appears. `wstune rollback`\n# removes it.\n[Unit]\nDescription=wstune: NIC queue interrupts on their CPUs\nWants=network-online.target\nAfter=network-online.target\n\n[Service]\nType=oneshot\nExecStart=/bin/sh /etc/wstune/nic-irq.sh\n";

const IRQ_SCRIPT_HEAD: &str = "#!/bin/sh\n# Written by wstune apply: each pinned NIC queue interrupt on its CPU, found by its name\n# (the directory /proc/irq/N/NAME; the numbers change when the driver loads again). Run by\n# wstune-nic-irq.service; `wstune rollback` puts back what was here before. $1: a root.\nR=\"${1:-}\"\npin() { for d in \"$R\"/proc/irq/*/\"$1\"; do [ -d \"$d\" ] && echo \"$2\" > \"${d%/*}/smp_affinity_list\"; done; }\n";

/// The boot script with these NICs' interrupts replaced and every other NIC's kept.
fn irq_script(now: &str, pins: &[(String, Vec<(String, u32)>)]) -> String {
    per_nic_script(IRQ_SCRIPT_HEAD, now, pins, |name, cpu| {
        format!("pin {name} {cpu}")
    })
}

const RULES_HEADER: &str = "# Written by wstune apply: each NIC's RPS, RFS and XPS queue settings, written again when\n# the NIC appears (boot, hotplug). `wstune rollback` puts back what was here before.\n";

/// The rules file with these NICs' rules replaced and every other NIC's kept.
fn rules_file(now: &str, lines: &[(String, String)]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::{Irq, RxQueue, TxQueue};

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
            .any(|(f, t)| f == NIC_IRQ_UNIT
                && t.contains("ExecStart=/bin/sh /etc/wstune/nic-irq.sh")));
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
    fn channels_are_raised_to_one_queue_per_cpu_of_the_set_and_kept_at_boot_with_the_default_naming(
    ) {
        let mut nic = veth(2, 2, 8);
        nic.physical = true;
        nic.channels = Some(crate::host::Channels {
            combined: 2,
            max_combined: 6,
            ..Default::default()
        });
        nic.default_link = Some("[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=keep kernel\nMACAddressPolicy=persistent\n".into());
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
            link.contains(
                "NamePolicy=keep kernel\nMACAddressPolicy=persistent\nCombinedChannels=6\n"
            ),
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
            Some("# mine\nnet.core.netdev_budget = 600\nnet.core.rps_sock_flow_entries = 32768\n"),
            "{file}"
        );
        assert_eq!(file.matches("netdev_budget =").count(), 1, "{file}");
        assert!(
            p.notes.iter().any(|n| n.contains("time_squeeze +40")),
            "{:?}",
            p.notes
        );
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
        // RHEL's: an assignment with the operator's arguments, kept with its quotes.
        let rhel = "# comment\nIRQBALANCE_ARGS='--powerthresh=2 --banirq=7'\nOTHER=1\n";
        assert_eq!(
            with_policyscript(rhel).unwrap(),
            format!("# comment\nIRQBALANCE_ARGS='--powerthresh=2 --banirq=7 {ours}'\nOTHER=1\n")
        );
        // Done already: unchanged.
        let done = with_policyscript(rhel).unwrap();
        assert_eq!(with_policyscript(&done).unwrap(), done);
        // Another policy script is the operator's: refused, named.
        assert_eq!(
            with_policyscript("IRQBALANCE_ARGS=\"-l /usr/local/bin/pol\"\n").unwrap_err(),
            "-l /usr/local/bin/pol"
        );
        assert!(with_policyscript("IRQBALANCE_ARGS=--policyscript=/x\n").is_err());
        // A comment after the value stays after it; an unquoted word gets quotes.
        assert_eq!(
            with_policyscript("IRQBALANCE_ARGS=\"-t 5\"  # slower\n").unwrap(),
            format!("IRQBALANCE_ARGS=\"-t 5 {ours}\"  # slower\n")
        );
        assert_eq!(
            with_policyscript("IRQBALANCE_ARGS=--journal # mine\n").unwrap(),
            format!("IRQBALANCE_ARGS=\"--journal {ours}\" # mine\n")
        );
    }
}
