//! A NIC's channel counts and receive ring: raised now (`ethtool -L`, `-G`) and kept at boot in
//! its systemd .link file.

use super::{Inputs, NicPlan};
use crate::apply::plan::{Action, Op};
use crate::nic::NicFacts;

/// The channel counts as the plan shows them: "rx 4, combined 8".
pub(super) fn channel_words(rx: Option<u32>, tx: Option<u32>, c: Option<u32>) -> String {
    [("rx", rx), ("tx", tx), ("combined", c)]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Channel counts to set: (rx, tx, combined), None each where it stays.
pub(super) type ChannelCounts = (Option<u32>, Option<u32>, Option<u32>);

/// Raise a NIC's channel counts toward `want` ([`super::queues_for`]: one queue per physical
/// core of its node, the kernel's scaling.rst), up to the hardware's maximum (`ethtool -L`),
/// now: the counts to keep at boot (the caller writes them) and whether they grow on this
/// host. Never lowered: a NIC with more queues keeps them. For other hosts the counts are
/// rendered at the target too.
pub(super) fn plan_channels(
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
pub(super) const DEFAULT_LINK: &str = "NamePolicy=keep kernel database onboard slot path\nAlternativeNamesPolicy=database onboard slot path\nMACAddressPolicy=persistent\n";

/// The keys of a NIC's boot settings wstune writes in its .link file (systemd.link(5), [Link]).
pub(super) const LINK_KEYS: [&str; 4] = [
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
pub(super) fn link_file(
    nic: &NicFacts,
    now: &str,
    sets: &[(&str, Option<u32>)],
    by_name: bool,
) -> String {
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
pub(super) fn nic_address(nic: &NicFacts, by_name: bool) -> Option<&str> {
    nic.address.as_deref().filter(|_| nic.physical && !by_name)
}

/// Drops in the NIC itself (no free descriptor): a longer receive ring holds a burst. Only on
/// that evidence: a longer ring costs memory and cache, and its packets wait longer (Red Hat:
/// "Increasing the ring buffers to reduce a high packet drop rate"). The ring to set, if any.
pub(super) fn plan_ring(p: &mut NicPlan, i: &Inputs, nic: &NicFacts) -> Option<u32> {
    if !i.evidence.ring_drops.contains(&nic.name) {
        return None;
    }
    let mut ring = None;
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
    ring
}

/// The NIC's .link file, which keeps its channel counts and receive ring at boot, with one plan
/// row per setting beside its change now (or one row of its own with --persist-only).
pub(super) fn plan_link_file(
    p: &mut NicPlan,
    i: &Inputs,
    nic: &NicFacts,
    channels: Option<ChannelCounts>,
    ring: Option<u32>,
) {
    if !i.scope.persist || (channels.is_none() && ring.is_none()) {
        return;
    }
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

#[cfg(test)]
mod tests;
