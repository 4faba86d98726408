//! Which NIC a journal entry's values belong to, and finding that NIC again later.
//!
//! A NIC's name is not who it is: an operator or udev renames it, and another NIC may take the
//! name. So `apply` records each changed NIC's identity ([`NicIdentity`]: its device and
//! permanent address, else its index in its namespace during one boot), and `rollback`,
//! `check`'s drift and apply's recovery [`resolve`] the entry against the NICs there now:
//! - the same NIC, under its name or a new one: its values are restored there (the entry's
//!   paths are rewritten to the new name: `/sys/class/net/NEW/queues/...`);
//! - gone (removed, or a virtual link from before a reboot that no link is named after now):
//!   its queue settings and channel counts went with it, nothing is left to restore: said,
//!   never an error that blocks the rest of the entry;
//! - refused: the name now belongs to another NIC, the NIC lives in another network namespace
//!   (recorded there, or moved there since: its device is still on the host), or an older
//!   wstune's entry names a link that is not here (removed or renamed, nothing tells which):
//!   that NIC is never touched, unless `--force` says to restore by name;
//! - unverified: an entry of an older wstune (or a tree) recorded no identity, or a virtual
//!   link was recorded before the last reboot (its index names nothing now; a bond or VLAN
//!   comes back under its name): found by name, with a warning.
//!
//! A NIC left alone keeps what it uses beside its own queue, channel and interrupt settings:
//! RFS's flow table (net.core.rps_sock_flow_entries), one for the whole host, which its RPS
//! still uses. And when the entry's NICs were recorded in another network namespace than the
//! one here (during this boot), every net.* value the entry recorded is that namespace's
//! (each namespace has its own; the host-wide ones exist only in the initial namespace), so
//! none is written here. Both are left with a record of why ([`Left`]), for a later rollback.
//!
//! Pure: the NICs there now are read by the caller (`Backend::nic_identities`).
//!
//! This file: who a NIC is and finding it again ([`find`]). Beside it: `resolve` (an entry
//! fitted to the NICs there now) and `left` (what is not restored, in words).

mod left;
mod resolve;
#[cfg(test)]
mod tests;

pub use left::{channel_words, left_words, Left};
pub use resolve::{resolve, Resolved};

use super::journal::LeftKind;
use super::plan::{Action, Op};
use crate::host::{Backend, NicIdentity};

/// The NIC whose setting `path` is (`/sys/class/net/NAME/...`).
pub fn nic_of_path(path: &str) -> Option<&str> {
    path.strip_prefix("/sys/class/net/")?.split('/').next()
}

/// The NIC an action changes: its channel counts or ring, one of its queue files, or one of
/// its queue interrupts (`linux.nic.irq[NAME]`). None for everything else (a sysctl, a file).
pub fn nic_of_action(a: &Action) -> Option<&str> {
    match &a.op {
        Op::Channels { nic, .. } | Op::RxRing { nic, .. } => Some(nic),
        Op::KernelFile { path, .. } => nic_of_path(path).or_else(|| {
            a.check
                .strip_prefix("linux.nic.")
                .and_then(|r| r.split_once('['))
                .map(|(_, n)| n.trim_end_matches(']'))
        }),
        _ => None,
    }
}

/// The NICs the actions change, in order, each once.
pub fn nics_of(actions: &[Action]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in actions.iter().filter_map(nic_of_action) {
        if !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    }
    out
}

/// The identities of `names` as the backend sees them now, for the journal: those it can tell
/// nothing about are left out (rollback then finds them by name, and says it cannot verify).
pub fn identities(backend: &dyn Backend, names: &[String]) -> Vec<NicIdentity> {
    if names.is_empty() {
        return vec![];
    }
    let now = backend.nic_identities().unwrap_or_default();
    names
        .iter()
        .filter_map(|n| now.iter().find(|i| i.name == *n && i.known()).cloned())
        .collect()
}

/// Where a recorded NIC is now.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// The same NIC, named so now.
    Here(String),
    /// Found by name only, with a warning; why its identity could not be checked (the entry
    /// recorded none, or only an index of an earlier boot).
    Unverified(String),
    /// Not here any more; why.
    Gone(String),
    /// Not the NIC of that name; why (the name is another NIC's, or several links are it).
    Refused(String),
    /// In another network namespace: moved there since (its device is still on the host), or
    /// recorded there; why.
    Elsewhere(String),
    /// The entry recorded no identity for it and no link has its name: removed or renamed,
    /// nothing tells which; why.
    Unknown(String),
}

impl Found {
    /// Why the NIC is left, when it is not restored here.
    fn left(self) -> Option<(LeftKind, String)> {
        match self {
            Found::Here(_) | Found::Unverified(_) => None,
            Found::Gone(why) => Some((LeftKind::Gone, why)),
            Found::Refused(why) => Some((LeftKind::Refused, why)),
            Found::Elsewhere(why) => Some((LeftKind::OtherNamespace, why)),
            Found::Unknown(why) => Some((LeftKind::Unverified, why)),
        }
    }
}

/// What is in a directory of the host now (`Backend::list`), None when it cannot be listed:
/// whether a NIC's device is still on the host, and which interrupt a number names now.
pub type Lister<'a> = &'a dyn Fn(&str) -> Option<Vec<String>>;

/// [`Lister`] over a backend.
pub fn lister(backend: &dyn Backend) -> impl Fn(&str) -> Option<Vec<String>> + '_ {
    move |dir| backend.list(dir).ok()
}

/// Whether the device `BUS:NAME` (`pci:0000:3b:00.0`) is on the host now
/// (`/sys/bus/BUS/devices/NAME`): a NIC moved to another network namespace leaves it here.
fn device_here(device: &str, list: Lister) -> bool {
    device.split_once(':').is_some_and(|(bus, name)| {
        list(&format!("/sys/bus/{bus}/devices")).is_some_and(|l| l.iter().any(|d| d == name))
    })
}

/// Find the NIC recorded as `rec` among `now` (every link here, with its identity); `list`
/// tells whether its device is still on the host.
pub fn find(rec: &NicIdentity, now: &[NicIdentity], list: Lister) -> Found {
    let named = now.iter().find(|n| n.name == rec.name);
    let other_has_name = |why: String| match named {
        Some(n) => Found::Refused(format!(
            "{why}, and the link now named {} is another NIC ({})",
            rec.name,
            n.words()
        )),
        None => Found::Gone(why),
    };
    if !rec.known() {
        // Removed or renamed: without an identity nothing tells which, so the entry stays
        // reachable (`--id ID --force`) rather than being closed as if the NIC were gone.
        return match named {
            Some(_) => Found::Unverified(
                "the entry recorded no identity for it (an older wstune's entry, or a tree without one)".into(),
            ),
            None => Found::Unknown(format!(
                "no link named {} now: removed or renamed, which an entry of an older wstune cannot tell",
                rec.name
            )),
        };
    }
    let same_boot = |n: &NicIdentity| match (&rec.boot, &n.boot) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    if rec.stable() {
        let port = |n: &NicIdentity| n.dev_port.unwrap_or(0);
        let hits: Vec<&NicIdentity> = now
            .iter()
            .filter(|n| {
                rec.device
                    .as_ref()
                    .is_none_or(|d| n.device.as_ref() == Some(d) && port(n) == port(rec))
                    && rec
                        .permaddr
                        .as_ref()
                        .is_none_or(|a| n.permaddr.as_ref() == Some(a))
            })
            .collect();
        return match hits.as_slice() {
            [one] => Found::Here(one.name.clone()),
            // Its device is still on the host, but no link here is it: it was moved to another
            // network namespace (a VF or veth handed to a pod), where its settings live on.
            [] if rec.device.as_deref().is_some_and(|d| device_here(d, list)) => {
                Found::Elsewhere(format!(
                    "its device {} is still on this host, but no link in this network namespace is it: it was moved to another namespace (`ip link set {} netns ...`), where its values live on; run rollback in that namespace",
                    rec.device.as_deref().unwrap_or_default(),
                    rec.name
                ))
            }
            [] => other_has_name(format!(
                "no link here is its {} any more (the device was removed, or moved to another network namespace)",
                rec.words()
            )),
            many => Found::Refused(format!(
                "several links here have its {} ({}): rollback cannot tell which it is",
                rec.words(),
                many.iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
    }
    // A virtual link: its index, in its namespace, during its boot.
    let here = now.first();
    if here.is_some_and(|h| !same_boot(h)) {
        // Its index meant something only during that boot. A bond, VLAN or veth comes back
        // under its name after a reboot (wstune's own udev rule matches virtual links by name),
        // so that name is the link, unverified; no link of that name: it is gone.
        return match named {
            Some(_) => Found::Unverified(
                "it is a virtual link recorded before the last reboot, and its index then names nothing now".into(),
            ),
            None => Found::Gone(format!(
                "it is a virtual link recorded before the last reboot, and no link is named {} now",
                rec.name
            )),
        };
    }
    if let (Some(was), Some(is)) = (rec.netns, here.and_then(|h| h.netns)) {
        if was != is {
            return Found::Elsewhere(format!(
                "it was recorded in network namespace net:[{was}], and this is net:[{is}]: run rollback in that namespace"
            ));
        }
    }
    match now.iter().find(|n| n.ifindex == rec.ifindex) {
        Some(n) => Found::Here(n.name.clone()),
        None => other_has_name(format!(
            "no link here has its ifindex {} any more (it was removed)",
            rec.ifindex.unwrap_or(0)
        )),
    }
}
