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

/// Raise a NIC's channel counts toward one queue per CPU of its set, up to the hardware's
/// maximum (`ethtool -L`), now: the counts to keep at boot (the caller writes them) and
/// whether they grow on this host. For other hosts the counts are rendered at the target too.
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
