//! What is not restored, in words: a NIC left alone (and what it keeps of the host's), for
//! the journal's record and for the people who read why.

use super::{nic_of_action, nic_of_path};
use crate::apply::journal::{Entry, LeftKind, LeftPart, OldRuntime};
use crate::apply::plan::Op;

/// What is not restored, and why: a NIC's values, or (no NIC) the values of the network
/// namespace the apply ran in.
#[derive(Debug, Clone, PartialEq)]
pub struct Left {
    /// The NIC, by its name in the entry; None: values that are not one NIC's.
    pub nic: Option<String>,
    pub kind: LeftKind,
    pub why: String,
    /// The values not restored, as `channels rx 1, tx 1`, `queues/rx-0/rps_cpus 0`.
    pub values: Vec<String>,
    /// The same as the journal records them: runtime paths, and whether the channel counts
    /// and the receive ring are among them.
    pub runtime: Vec<String>,
    pub channels: bool,
    pub ring: bool,
}

impl Left {
    /// Still there to restore later (refused, elsewhere, unverified): `--force` restores it
    /// here. Else the NIC is gone, and its values with it.
    pub fn refused(&self) -> bool {
        self.kind.kept()
    }

    /// Whose values these are, for people: `eth0's values`.
    pub fn whose(&self) -> String {
        match &self.nic {
            Some(nic) => format!("{nic}'s values"),
            None => "another network namespace's net.* values".into(),
        }
    }

    /// What the journal records of it.
    pub fn part(&self) -> LeftPart {
        LeftPart {
            nic: self.nic.clone(),
            kind: self.kind,
            why: self.why.clone(),
            runtime: self.runtime.clone(),
            channels: self.channels,
            ring: self.ring,
        }
    }

    /// From the journal's record, with the values in words from `entry`.
    pub fn from_part(p: &LeftPart, entry: &Entry) -> Left {
        let mut values = p.nic.as_deref().map_or_else(Vec::new, |n| {
            values_of(entry, n)
                .into_iter()
                .filter(|v| {
                    // Only what this part left: its channel counts and ring if they are.
                    (p.channels || !v.starts_with("channels "))
                        && (p.ring || !v.starts_with("receive ring "))
                })
                .collect()
        });
        for path in &p.runtime {
            let mine = p.nic.as_deref().is_some_and(|n| {
                nic_of_path(path) == Some(n)
                    || entry.actions.iter().any(|a| {
                        matches!(&a.op, Op::KernelFile { path: q, .. } if q == path)
                            && nic_of_action(a) == Some(n)
                    })
            });
            if !mine {
                if let Some(r) = entry.runtime.iter().find(|r| r.path == *path) {
                    values.push(runtime_words(r));
                }
            }
        }
        Left {
            nic: p.nic.clone(),
            kind: p.kind,
            why: p.why.clone(),
            values,
            runtime: p.runtime.clone(),
            channels: p.channels,
            ring: p.ring,
        }
    }
}

/// RFS's flow table: one for the whole host, used by every queue's RPS.
pub(super) const FLOW_TABLE: &str = "net.core.rps_sock_flow_entries";

/// A runtime value outside a NIC's queues, in words: `net.core.somaxconn 4096`, and what RFS's
/// flow table is.
pub(super) fn runtime_words(r: &OldRuntime) -> String {
    let old = r.old.split_whitespace().collect::<Vec<_>>().join(" ");
    let words = match r.path.strip_prefix("/proc/sys/") {
        Some(key) => format!("{} {old}", key.replace('/', ".")),
        None => format!("{} {old}", r.path),
    };
    if r.path == crate::host::procfs::sysctl_path(FLOW_TABLE) {
        format!("{words} (RFS's flow table, one for the whole host, which its RPS uses)")
    } else {
        words
    }
}

/// What an entry would restore on `nic`, in words.
pub(super) fn values_of(entry: &Entry, nic: &str) -> Vec<String> {
    let mut out = Vec::new();
    for c in entry.channels.iter().filter(|c| c.nic == nic) {
        out.push(format!(
            "channels {}",
            channel_words(entry, nic, &c.old).unwrap_or_else(|| "as before".into())
        ));
    }
    for r in entry.rings.iter().filter(|r| r.nic == nic) {
        out.push(format!("receive ring {}", r.old));
    }
    let prefix = format!("/sys/class/net/{nic}/");
    for r in &entry.runtime {
        let irq = entry.actions.iter().any(|a| {
            matches!(&a.op, Op::KernelFile { path, .. } if *path == r.path)
                && nic_of_action(a) == Some(nic)
        });
        let old = r.old.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(rest) = r.path.strip_prefix(&prefix) {
            out.push(format!("{rest} {old}"));
        } else if irq {
            out.push(format!("{} {old}", r.path));
        }
    }
    out
}

/// The old channel counts that a restore sets (those the apply changed), as `ethtool -L`
/// takes them: `rx 1, tx 1`.
pub fn channel_words(entry: &Entry, nic: &str, old: &crate::host::Channels) -> Option<String> {
    let words: Vec<String> = ["rx", "tx", "combined"]
        .iter()
        .zip(entry.channels_to_restore(nic, old))
        .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
        .collect();
    (!words.is_empty()).then(|| words.join(", "))
}

/// What a NIC left unrestored means, for people: one line. `flags`: the run's
/// `--root`/`--prefix` ([`super::flags`]), for the rollback line it gives.
pub fn left_words(l: &Left, id: &str, flags: &str) -> String {
    let values = if l.values.is_empty() {
        String::new()
    } else {
        format!(" ({})", l.values.join(", "))
    };
    match (&l.nic, l.refused()) {
        (Some(nic), true) => format!(
            "{nic}'s values were not restored{values}: {}. That NIC was left alone; `wstune rollback --id {id}{flags}` restores them once it is found again, and `--force` restores them onto the link named {nic} anyway",
            l.why
        ),
        (Some(nic), false) => format!(
            "{nic}'s values were not restored{values}: {}; its queue settings and channel counts went with the device, so nothing is left to restore",
            l.why
        ),
        (None, _) => format!(
            "{} were not restored{values}: {}. They were left alone; `wstune rollback --id {id}{flags}` run in that namespace restores them, and `--force` restores them into this one anyway",
            l.whose(),
            l.why
        ),
    }
}
