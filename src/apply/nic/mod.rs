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
//!
//! Beside this file, which walks the NICs and sets each queue's RPS, RFS and XPS: `link`
//! (channel counts and the receive ring, kept in the NIC's .link file), `budget` (the receive
//! softirq's budget, RFS's flow table and the NIC sysctl file), `irq` (pinned interrupts, their
//! boot script and irqbalance's policy script), `udev` (the rule that writes the queue settings
//! when the NIC appears) and `windows` (an adapter's RSS keywords).

mod budget;
mod irq;
mod link;
#[cfg(test)]
mod tests;
mod udev;
mod windows;

use super::plan::{Action, Op, Scope};
use crate::nic::{cpu_list, mask, parse_mask, Evidence, NicFacts};
use crate::profile::{NicProfile, NicWhen, RssProfile};
use budget::{finish_sysctl_file, plan_budget, plan_flow_table};
use irq::{plan_interrupts, plan_pins_at_boot};
use link::{plan_channels, plan_link_file, plan_ring};
use udev::{plan_rules, udev_line};

pub use windows::plan_windows;

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

/// The CPUs the profile puts a NIC's queues on, in the order queues take them: its own
/// node's physical cores first (one thread each), then their other threads, then (numa_scaling)
/// the other nodes' CPUs. Queue k's interrupt goes to the k-th, so the queues the rule gives a
/// NIC ([`crate::nic::rss_queues`]) each get a core of their own.
pub fn cpus_for(rss: RssProfile, nic: &NicFacts) -> Vec<u32> {
    let mut local: Vec<u32> = nic
        .cores
        .iter()
        .copied()
        .filter(|c| nic.local_cpus.contains(c))
        .collect();
    let threads: Vec<u32> = nic
        .local_cpus
        .iter()
        .copied()
        .filter(|c| !local.contains(c))
        .collect();
    local.extend(threads);
    // A static word is its dynamic twin's set: Linux's drivers never move a queue on their
    // own; what moves at run time is irqbalance's (`nic.irq`).
    match rss {
        RssProfile::Closest | RssProfile::ClosestStatic => local,
        RssProfile::NumaScaling | RssProfile::NumaScalingStatic => {
            let mut v = local;
            v.extend(nic.cpus.iter().filter(|c| !nic.local_cpus.contains(c)));
            v
        }
        RssProfile::Conservative => {
            let n = nic.local_cpus.len().div_ceil(2).max(1);
            local.into_iter().take(n).collect()
        }
    }
}

/// The receive queues the plan raises a NIC to: one per physical core of its own node that the
/// profile's set includes, at most the hardware's maximum ([`crate::nic::rss_queues`], the one
/// rule the `linux.nic.rx_queues` check judges by too).
pub fn queues_for(nic: &NicFacts, cpus: &[u32]) -> u32 {
    let cores = cpus.iter().filter(|c| nic.cores.contains(c)).count();
    crate::nic::rss_queues(cores, nic.channels)
}

pub(super) fn same_cpus(
    now: Option<&str>,
    want: &[u32],
    parse: fn(&str) -> Option<Vec<u32>>,
) -> bool {
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
        p.notes.push(untouched_note(i));
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
        note_spread(&mut p, i, nic, &cpus);
        let mut q = QueueSettings {
            nic,
            runtime: i.scope.runtime,
            attrs: Vec::new(),
        };
        let ring = plan_ring(&mut p, i, nic);
        // The queue count first: up to one queue per physical core of the NIC's node (the
        // rule `linux.nic.rx_queues` judges by), never fewer than now.
        let channels = plan_channels(&mut p, i, nic, queues_for(nic, &cpus));
        // Counts rendered at the target for other hosts do not change this one's queues.
        let queues_change = channels.is_some_and(|(_, grows)| grows);
        let channels = channels.map(|(counts, _)| counts);
        plan_link_file(&mut p, i, nic, channels, ring);
        if queues_change {
            p.notes.push(format!(
                "{}: its queues change with this apply; run apply again afterwards to set RPS and XPS on the new queues",
                nic.name
            ));
            continue;
        }
        rps_planned |= plan_rps(&mut p, i, &mut q, &cpus, forced);
        note_few_queues(&mut p, nic, &cpus);
        plan_xps(&mut p, i, &mut q, &cpus);
        if let Some(nic_pins) = plan_interrupts(&mut p, i, nic, &cpus) {
            pins.push(nic_pins);
        }
        let pinned = pins.iter().any(|(n, _)| *n == nic.name);
        if !q.attrs.is_empty() || pinned {
            rule_lines.push((
                nic.name.clone(),
                udev_line(nic, &q.attrs, pinned, i.for_other_hosts),
            ));
        }
    }
    plan_pins_at_boot(&mut p, i, &pins);
    plan_rules(&mut p, i, &rule_lines);
    if rps_planned {
        plan_flow_table(&mut p, i, &mut sysctl_lines);
    }
    finish_sysctl_file(&mut p, i, &sysctl_lines);
    p
}

/// Why no NIC's queues change: nothing says the kernel is busy receiving, and how to say
/// otherwise.
fn untouched_note(i: &Inputs) -> String {
    let names: Vec<&str> = i.nics.iter().map(|n| n.name.as_str()).collect();
    if i.evidence.measured {
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
    }
}

/// numa_scaling and numa_scaling_static (the built-in profiles' word) reach past the NIC's own
/// node: said, since a host that applied closest before now spreads further.
fn note_spread(p: &mut NicPlan, i: &Inputs, nic: &NicFacts, cpus: &[u32]) {
    if cpus.len() > nic.local_cpus.len() {
        p.notes.push(format!(
            "{}: nic.rss {} spreads XPS, and the interrupts of queues past its own node's cores, over {} CPUs of every NUMA node, its own node's {} first (RPS stays on those); nic.rss: closest keeps them all on its node",
            nic.name,
            i.profile.rss.as_str(),
            cpus.len(),
            cpu_list(&nic.local_cpus)
        ));
    }
}

/// One NIC's queue settings as they are planned: every one goes into the udev rule (so the NIC
/// gets it again when it appears); one that differs now is also written now.
struct QueueSettings<'a> {
    nic: &'a NicFacts,
    /// Whether this apply changes the running host (else only the rule is written).
    runtime: bool,
    /// (attribute under /sys/class/net/NIC, value) for the rule, in planning order.
    attrs: Vec<(String, String)>,
}

impl QueueSettings<'_> {
    fn set(&mut self, p: &mut NicPlan, attr: String, now: Option<&String>, to: String, same: bool) {
        self.attrs.push((attr.clone(), to.clone()));
        if self.runtime && !same {
            p.actions.push(Action {
                check: format!("linux.nic.queues[{}]", self.nic.name),
                setting: format!("{} {attr}", self.nic.name),
                from: now.cloned(),
                to: to.clone(),
                op: Op::KernelFile {
                    path: format!("/sys/class/net/{}/{attr}", self.nic.name),
                    value: to,
                },
            });
        }
    }
}

/// RPS and RFS on each receive queue, or a note on why not. Returns whether a queue got RPS
/// (then RFS's flow table is planned too).
fn plan_rps(
    p: &mut NicPlan,
    i: &Inputs,
    q: &mut QueueSettings,
    cpus: &[u32],
    forced: bool,
) -> bool {
    let nic = q.nic;
    // RPS and RFS: only where the hardware has fewer receive queues than the CPUs, or
    // has no receive hardware at all (a veth or a tunnel receives on the sending CPU,
    // whatever its queue count: only RPS spreads it).
    let rx = nic.rx.len();
    let steered_by_hardware = nic.physical && rx >= cpus.len();
    // RPS stays in the NIC's memory domain whatever the word spreads the queues over
    // (scaling.rst, "RPS Configuration": "the CPUs in the same memory domain of the
    // interrupting CPU"): a packet steered to another node is processed from remote
    // memory. numa_scaling's other nodes serve XPS and the interrupts of queues past the
    // node's cores, not RPS.
    let rps_cpus: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|c| nic.local_cpus.contains(c))
        .collect();
    let rps_cpus = if rps_cpus.is_empty() {
        cpus.to_vec()
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
        for rxq in &nic.rx {
            if rxq.rps_cpus.is_some() {
                let same = same_cpus(rxq.rps_cpus.as_deref(), &rps_cpus, parse_mask);
                let attr = format!("queues/rx-{}/rps_cpus", rxq.index);
                q.set(p, attr, rxq.rps_cpus.as_ref(), mask(&rps_cpus), same);
            }
            if rxq.rps_flow_cnt.is_some() {
                let same = rxq.rps_flow_cnt.as_deref() == Some(flow.as_str());
                let attr = format!("queues/rx-{}/rps_flow_cnt", rxq.index);
                q.set(p, attr, rxq.rps_flow_cnt.as_ref(), flow.clone(), same);
            }
        }
        // RFS's table only where a queue has RPS (a kernel without it has no files).
        return nic.rx.iter().any(|q| q.rps_cpus.is_some());
    } else if i.profile.rps && steered_by_hardware {
        p.notes.push(format!(
            "{}: RPS not set: {rx} receive queues for {} CPUs, one each already (scaling.rst: RPS is then redundant)",
            nic.name,
            cpus.len()
        ));
    }
    false
}

/// A physical NIC with fewer receive queues than the cores it should have, whose channel
/// counts cannot be read (so apply cannot raise them): how to do it by hand.
fn note_few_queues(p: &mut NicPlan, nic: &NicFacts, cpus: &[u32]) {
    let rx = nic.rx.len();
    let want = queues_for(nic, cpus);
    if nic.physical && (rx as u32) < want && nic.channels.is_none() {
        p.notes.push(format!(
            "{}: {rx} receive queues for the {want} physical cores of its node the profile's CPUs include (one queue per core: scaling.rst), and its channel counts cannot be read here; if the NIC has more, `ethtool -l {}` shows its maximum and `ethtool -L {} combined {want}` sets them (then apply again: the queues' RPS and XPS are set per queue)",
            nic.name,
            nic.name,
            nic.name
        ));
    }
}

/// XPS: each CPU sends on one queue; with fewer queues than CPUs a queue takes several. A NIC
/// with one transmit queue has nothing to choose.
fn plan_xps(p: &mut NicPlan, i: &Inputs, q: &mut QueueSettings, cpus: &[u32]) {
    let nic = q.nic;
    let tx = nic.tx.len();
    if !(i.profile.xps && tx > 1 && !cpus.is_empty()) {
        return;
    }
    for txq in &nic.tx {
        let mine: Vec<u32> = if cpus.len() >= tx {
            cpus.iter()
                .enumerate()
                .filter(|(k, _)| k % tx == txq.index as usize % tx)
                .map(|(_, c)| *c)
                .collect()
        } else {
            vec![cpus[txq.index as usize % cpus.len()]]
        };
        if txq.xps_cpus.is_none() {
            continue;
        }
        let same = same_cpus(txq.xps_cpus.as_deref(), &mine, parse_mask);
        let attr = format!("queues/tx-{}/xps_cpus", txq.index);
        q.set(p, attr, txq.xps_cpus.as_ref(), mask(&mine), same);
    }
}
