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

use super::journal::{Entry, LeftKind, LeftPart};
use super::plan::{Action, Op};
use crate::host::{Backend, NicIdentity, ReadError};

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
const FLOW_TABLE: &str = "net.core.rps_sock_flow_entries";

/// A runtime value outside a NIC's queues, in words: `net.core.somaxconn 4096`, and what RFS's
/// flow table is.
fn runtime_words(r: &super::journal::OldRuntime) -> String {
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

/// An entry made to fit the NICs there now.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The entry with each NIC's values under its name now, and without those of NICs left.
    pub entry: Entry,
    /// What was found, for people: renamed, restored by name under `--force`.
    pub notes: Vec<String>,
    /// What could not be verified: a NIC found by name only.
    pub warnings: Vec<String>,
    pub left: Vec<Left>,
}

/// Fit `entry` to the NICs here now (`now`; an error when they cannot be listed: every NIC is
/// then taken by name, unverified; `list`: the host's directories, see [`Lister`]). `force`:
/// restore a refused NIC's values by name anyway.
///
/// In steps: each NIC of the entry is found here (same, renamed, unverified or left); the
/// interrupts renumbered since are dropped; the values of the NICs left are taken out; the
/// renamed NICs' values are moved to their new names; and what the NICs left share is settled.
pub fn resolve(
    entry: &Entry,
    now: Result<Vec<NicIdentity>, ReadError>,
    list: Lister,
    force: bool,
) -> Resolved {
    let names = names_in(entry);
    let mut out = Resolved {
        entry: entry.clone(),
        notes: vec![],
        warnings: vec![],
        left: vec![],
    };
    let now = match now {
        Ok(now) => now,
        Err(e) if !names.is_empty() => {
            out.warnings.push(format!(
                "the NICs here cannot be listed ({e}): {} found by name only, which cannot be verified",
                names.join(", ")
            ));
            return out;
        }
        Err(_) => return out,
    };
    let (renames, drop) = find_each(&mut out, entry, &names, &now, list, force);
    let stale = stale_interrupts(&mut out, entry, &drop, list);
    take_out(&mut out, entry, &stale, &drop);
    rename(&mut out.entry, &renames);
    leave_shared(&mut out, entry, &now, force);
    out
}

/// Every NIC the entry changed: by its actions, then by its recorded values.
fn names_in(entry: &Entry) -> Vec<String> {
    let mut names = nics_of(&entry.actions);
    for n in entry
        .channels
        .iter()
        .map(|c| c.nic.as_str())
        .chain(entry.rings.iter().map(|r| r.nic.as_str()))
        .chain(entry.runtime.iter().filter_map(|r| nic_of_path(&r.path)))
    {
        if !names.iter().any(|o| o == n) {
            names.push(n.to_string());
        }
    }
    names
}

/// Find each of `names` among the NICs `now`, saying what was found. Returns the renames
/// (recorded name, name now) and the NICs left alone (their values are not restored).
fn find_each(
    out: &mut Resolved,
    entry: &Entry,
    names: &[String],
    now: &[NicIdentity],
    list: Lister,
    force: bool,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut renames: Vec<(String, String)> = Vec::new();
    let mut drop: Vec<String> = Vec::new();
    for name in names {
        let rec = entry
            .nics
            .iter()
            .find(|i| i.name == *name)
            .cloned()
            .unwrap_or_else(|| NicIdentity {
                name: name.clone(),
                ..NicIdentity::default()
            });
        match find(&rec, now, list) {
            Found::Here(n) if n == *name => {}
            Found::Here(n) => {
                out.notes.push(format!(
                    "{name} (now {n}): the same NIC ({}), restored under its new name",
                    rec.words()
                ));
                renames.push((name.clone(), n));
            }
            Found::Unverified(why) => out.warnings.push(format!(
                "{name}: {why}, so it is found by name only, which cannot be verified"
            )),
            found => {
                let Some((kind, why)) = found.left() else {
                    continue;
                };
                if force && kind.kept() {
                    out.notes.push(format!(
                        "{name}: {why}; --force: its values are restored onto the link named {name} anyway"
                    ));
                    continue;
                }
                out.left.push(Left {
                    nic: Some(name.clone()),
                    kind,
                    values: values_of(entry, name),
                    why,
                    runtime: vec![],
                    channels: entry.channels.iter().any(|c| c.nic == *name),
                    ring: entry.rings.iter().any(|r| r.nic == *name),
                });
                drop.push(name.clone());
            }
        }
    }
    (renames, drop)
}

/// A queue interrupt is recorded by number, and a driver reload hands the numbers out
/// again: /proc/irq/N may now be another device's. Restored only where N still carries the
/// recorded name (`IRQ 40 (vb-rx-0)`: /proc/irq/40/vb-rx-0), as the boot script pins them.
/// Returns the paths of the interrupts that are someone else's now (said in `out`'s notes).
fn stale_interrupts(
    out: &mut Resolved,
    entry: &Entry,
    drop: &[String],
    list: Lister,
) -> Vec<String> {
    let mut stale: Vec<String> = Vec::new();
    for a in &entry.actions {
        let Op::KernelFile { path, .. } = &a.op else {
            continue;
        };
        let Some((number, irq)) = irq_of_setting(&a.setting) else {
            continue;
        };
        if !path.starts_with(&format!("/proc/irq/{number}/"))
            || nic_of_action(a).is_some_and(|n| drop.iter().any(|d| d == n))
        {
            continue;
        }
        let Some(names) = list(&format!("/proc/irq/{number}")) else {
            continue; // the interrupt is gone: restore skips what is not there
        };
        if !names.iter().any(|n| n == irq) {
            let old = entry
                .runtime
                .iter()
                .find(|r| r.path == *path)
                .map(|r| r.old.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default();
            out.notes.push(format!(
                "{}: interrupt {number} is no longer {irq} (no /proc/irq/{number}/{irq}: the driver was loaded again and numbered its interrupts anew), so its affinity {old} is not restored; it went with that interrupt",
                a.setting
            ));
            stale.push(path.clone());
        }
    }
    stale
}

/// Take out of `out`'s entry the stale interrupts' values and everything of the NICs in
/// `drop`, writing down in each [`Left`] the runtime paths it keeps.
fn take_out(out: &mut Resolved, entry: &Entry, stale: &[String], drop: &[String]) {
    let e = &mut out.entry;
    e.runtime.retain(|r| !stale.contains(&r.path));
    e.actions
        .retain(|a| !matches!(&a.op, Op::KernelFile { path, .. } if stale.contains(path)));
    let mine = |a: &Action, n: &str| nic_of_action(a) == Some(n);
    // A queue interrupt's path names no NIC: its action does.
    let irq_of = |path: &str| {
        entry.actions.iter().find_map(|a| match &a.op {
            Op::KernelFile { path: p, .. } if p == path => nic_of_action(a).map(str::to_string),
            _ => None,
        })
    };
    let nic_of_runtime = |path: &str| {
        nic_of_path(path)
            .map(str::to_string)
            .or_else(|| irq_of(path))
    };
    for l in &mut out.left {
        l.runtime = e
            .runtime
            .iter()
            .filter(|r| l.nic.is_some() && nic_of_runtime(&r.path).as_deref() == l.nic.as_deref())
            .map(|r| r.path.clone())
            .collect();
    }
    e.runtime.retain(|r| {
        let nic = nic_of_runtime(&r.path);
        !nic.is_some_and(|n| drop.contains(&n))
    });
    e.channels.retain(|c| !drop.contains(&c.nic));
    e.rings.retain(|r| !drop.contains(&r.nic));
    e.actions.retain(|a| !drop.iter().any(|n| mine(a, n)));
}

/// Move the renamed NICs' values to their names now, all at once (a swap of two names must
/// not chain).
fn rename(e: &mut Entry, renames: &[(String, String)]) {
    let renamed = |n: &str| {
        renames
            .iter()
            .find(|(from, _)| from == n)
            .map(|(_, to)| to.clone())
    };
    let repath = |p: &str| match nic_of_path(p).and_then(renamed) {
        Some(to) => {
            let rest = &p["/sys/class/net/".len()..];
            let rest = rest.split_once('/').map_or("", |(_, r)| r);
            format!("/sys/class/net/{to}/{rest}")
        }
        None => p.to_string(),
    };
    for r in &mut e.runtime {
        r.path = repath(&r.path);
    }
    for c in &mut e.channels {
        if let Some(to) = renamed(&c.nic) {
            c.nic = to;
        }
    }
    for r in &mut e.rings {
        if let Some(to) = renamed(&r.nic) {
            r.nic = to;
        }
    }
    for a in &mut e.actions {
        match &mut a.op {
            Op::Channels { nic, .. } | Op::RxRing { nic, .. } => {
                if let Some(to) = renamed(nic) {
                    *nic = to;
                }
            }
            Op::KernelFile { path, .. } => *path = repath(path),
            _ => {}
        }
    }
}

/// What a NIC left alone, or the namespace it was recorded in, keeps beside its own settings
/// (see the module's words): RFS's flow table goes with the first NIC left that is still there,
/// and the net.* values of an entry recorded in another network namespace with a part of
/// their own. `--force` restores them here, saying so.
fn leave_shared(out: &mut Resolved, entry: &Entry, now: &[NicIdentity], force: bool) {
    let take = |e: &mut Entry, paths: &[String]| {
        e.runtime.retain(|r| !paths.contains(&r.path));
        e.actions.retain(|a| {
            !matches!(&a.op, Op::Sysctl { key, .. }
                if paths.contains(&crate::host::procfs::sysctl_path(key)))
        });
    };
    let flow = crate::host::procfs::sysctl_path(FLOW_TABLE);
    let flow_old = out.entry.runtime.iter().find(|r| r.path == flow).cloned();
    if let (Some(old), Some(l)) = (flow_old, out.left.iter_mut().find(|l| l.refused())) {
        l.runtime.push(flow.clone());
        l.values.push(runtime_words(&old));
        take(&mut out.entry, &[flow]);
    }
    // The namespace the entry's NICs were recorded in, and this one, during one boot: a
    // namespace's number means nothing in another boot (that namespace is gone).
    let Some(rec) = entry.nics.iter().find(|n| n.netns.is_some()) else {
        return;
    };
    let Some(here) = now.iter().find(|n| n.netns.is_some()) else {
        return;
    };
    let same_boot = match (&rec.boot, &here.boot) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let (was, is) = (rec.netns.unwrap_or(0), here.netns.unwrap_or(0));
    if was == is || !same_boot {
        return;
    }
    let theirs: Vec<&super::journal::OldRuntime> = out
        .entry
        .runtime
        .iter()
        .filter(|r| r.path.starts_with("/proc/sys/net/"))
        .collect();
    if theirs.is_empty() {
        return;
    }
    let values: Vec<String> = theirs.iter().map(|r| runtime_words(r)).collect();
    if force {
        out.notes.push(format!(
            "the apply ran in network namespace net:[{was}], and this is net:[{is}]; --force: its net.* values ({}) are restored into this one anyway",
            values.join(", ")
        ));
        return;
    }
    let runtime: Vec<String> = theirs.iter().map(|r| r.path.clone()).collect();
    out.left.push(Left {
        nic: None,
        kind: LeftKind::OtherNamespace,
        why: format!(
            "the apply ran in network namespace net:[{was}] (its NICs were recorded there), and this is net:[{is}]: each network namespace has its own net.* values (the host-wide ones only the initial one has), so these are that namespace's; run the rollback there"
        ),
        values,
        runtime: runtime.clone(),
        channels: false,
        ring: false,
    });
    take(&mut out.entry, &runtime);
}

/// The number and name of a queue interrupt from its action's setting, `IRQ 40 (vb-rx-0)`.
fn irq_of_setting(setting: &str) -> Option<(u32, &str)> {
    let (number, name) = setting.strip_prefix("IRQ ")?.split_once(" (")?;
    let name = name.strip_suffix(')')?;
    (!name.is_empty() && !name.contains('/')).then_some((number.parse().ok()?, name))
}

/// What an entry would restore on `nic`, in words.
fn values_of(entry: &Entry, nic: &str) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A host whose directories cannot be listed (a tree without them).
    const NONE: Lister = &|_: &str| None;

    fn id(name: &str, ifindex: u32) -> NicIdentity {
        NicIdentity {
            name: name.into(),
            ifindex: Some(ifindex),
            netns: Some(4026532175),
            boot: Some("b1".into()),
            ..NicIdentity::default()
        }
    }

    fn pci(name: &str, ifindex: u32, slot: &str, mac: &str) -> NicIdentity {
        NicIdentity {
            device: Some(format!("pci:{slot}")),
            permaddr: Some(mac.into()),
            ..id(name, ifindex)
        }
    }

    #[test]
    fn a_virtual_link_is_found_by_its_index_in_its_namespace_and_boot() {
        let rec = id("vb", 5);
        // Renamed, and its old name taken by another link.
        let now = [id("vb", 4), id("vc", 5)];
        assert_eq!(find(&rec, &now, NONE), Found::Here("vc".into()));
        // Deleted, the name free: gone.
        assert!(
            matches!(find(&rec, &[id("va", 4)], NONE), Found::Gone(w) if w.contains("ifindex 5"))
        );
        // Deleted, and another link took the name: refused, never that one.
        assert!(
            matches!(find(&rec, &[id("vb", 9)], NONE), Found::Refused(w) if w.contains("another NIC (ifindex 9)"))
        );
        // Another boot: the index means nothing.
        let mut later = id("vb", 5);
        later.boot = Some("b2".into());
        assert!(matches!(find(&rec, &[later], NONE), Found::Unverified(_)));
        // Another namespace.
        let mut there = id("vb", 5);
        there.netns = Some(1);
        assert!(
            matches!(find(&rec, &[there], NONE), Found::Elsewhere(w) if w.contains("net:[4026532175]"))
        );
    }

    /// An entry that tuned vb (ifindex 5) and a sysctl: the queue file and channel counts of
    /// the NIC, its interrupt, and somaxconn.
    fn entry() -> Entry {
        serde_json::from_value(serde_json::json!({
            "id": "1", "created": "now", "state": "applied", "profile": "100k",
            "actions": [
                {"check": "linux.nic.queues[vb]", "setting": "vb channels", "from": "rx 1, tx 1", "to": "rx 2, tx 2",
                 "op": {"kind": "channels", "nic": "vb", "rx": 2, "tx": 2, "combined": null}},
                {"check": "linux.nic.queues[vb]", "setting": "vb queues/rx-0/rps_cpus", "from": "0", "to": "3",
                 "op": {"kind": "kernel_file", "path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "value": "3"}},
                {"check": "linux.nic.irq[vb]", "setting": "IRQ 40 (vb-rx-0)", "from": "0-1", "to": "1",
                 "op": {"kind": "kernel_file", "path": "/proc/irq/40/smp_affinity_list", "value": "1"}},
                {"check": "linux.net.somaxconn", "setting": "net.core.somaxconn", "from": "4096", "to": "65535",
                 "op": {"kind": "sysctl", "key": "net.core.somaxconn", "value": "65535"}}
            ],
            "runtime": [
                {"path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "old": "0\n"},
                {"path": "/proc/irq/40/smp_affinity_list", "old": "0-1\n"},
                {"path": "/proc/sys/net/core/somaxconn", "old": "4096\n"}
            ],
            "files": [], "created_dirs": [], "limits": [], "registry": [],
            "channels": [{"nic": "vb", "old": {"rx": 1, "tx": 1, "combined": 0, "max_rx": 4, "max_tx": 4, "max_combined": 0}}],
            "nics": [{"name": "vb", "ifindex": 5, "netns": 4026532175u64, "boot": "b1"}]
        }))
        .unwrap()
    }

    #[test]
    fn a_renamed_nics_values_are_restored_under_its_new_name_and_a_swap_does_not_chain() {
        // vb became vc, and va (4) took the name vb.
        let r = resolve(&entry(), Ok(vec![id("vb", 4), id("vc", 5)]), NONE, false);
        assert!(r.left.is_empty(), "{:?}", r.left);
        assert_eq!(r.notes.len(), 1);
        assert!(
            r.notes[0].starts_with("vb (now vc): the same NIC (ifindex 5)"),
            "{:?}",
            r.notes
        );
        assert_eq!(r.entry.channels[0].nic, "vc");
        let paths: Vec<&str> = r.entry.runtime.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/sys/class/net/vc/queues/rx-0/rps_cpus",
                "/proc/irq/40/smp_affinity_list",
                "/proc/sys/net/core/somaxconn"
            ]
        );
        assert!(r
            .entry
            .actions
            .iter()
            .all(|a| !format!("{:?}", a.op).contains("\"vb\"")));
        assert!(r
            .entry
            .actions
            .iter()
            .all(|a| !matches!(&a.op, Op::KernelFile { path, .. } if path.contains("/vb/"))));
    }

    #[test]
    fn a_gone_or_refused_nics_values_leave_the_entry_and_the_rest_stays() {
        for (now, refused) in [(vec![id("va", 4)], false), (vec![id("vb", 9)], true)] {
            let r = resolve(&entry(), Ok(now.clone()), NONE, false);
            assert_eq!(r.left.len(), 1, "{now:?}");
            let l = &r.left[0];
            assert_eq!((l.nic.as_deref(), l.refused()), (Some("vb"), refused));
            assert_eq!(
                l.values,
                [
                    "channels rx 1, tx 1",
                    "queues/rx-0/rps_cpus 0",
                    "/proc/irq/40/smp_affinity_list 0-1"
                ]
            );
            // Only somaxconn is left to restore; its interrupt went with it.
            assert_eq!(r.entry.runtime.len(), 1);
            assert!(r.entry.channels.is_empty());
            assert_eq!(r.entry.actions.len(), 1);
            let words = left_words(l, "1", "");
            assert!(!words.contains("Some("), "{words}");
            assert_eq!(words.contains("--force"), refused, "{words}");
        }
        // --force restores a refused NIC's values by name.
        let r = resolve(&entry(), Ok(vec![id("vb", 9)]), NONE, true);
        assert!(
            r.left.is_empty() && r.entry.runtime.len() == 3,
            "{:?}",
            r.left
        );
        assert!(r.notes[0].contains("--force"), "{:?}", r.notes);
    }

    /// [`entry`] that also raised RFS's flow table (host-wide) and fs.file-max (host-wide).
    fn entry_with_host_values() -> Entry {
        let mut e = entry();
        let more: Vec<Action> = serde_json::from_value(serde_json::json!([
            {"check": "linux.nic.queues", "setting": "net.core.rps_sock_flow_entries", "from": "0", "to": "32768",
             "op": {"kind": "sysctl", "key": "net.core.rps_sock_flow_entries", "value": "32768"}},
            {"check": "linux.fs.file_max", "setting": "fs.file-max", "from": "1000", "to": "2000000",
             "op": {"kind": "sysctl", "key": "fs.file-max", "value": "2000000"}}
        ]))
        .unwrap();
        e.actions.extend(more);
        for (path, old) in [
            ("/proc/sys/net/core/rps_sock_flow_entries", "0\n"),
            ("/proc/sys/fs/file-max", "1000\n"),
        ] {
            e.runtime.push(super::super::journal::OldRuntime {
                path: path.into(),
                old: old.into(),
            });
        }
        e
    }

    fn paths(e: &Entry) -> Vec<&str> {
        e.runtime.iter().map(|r| r.path.as_str()).collect()
    }

    /// RFS's flow table is one for the whole host: a NIC left alone (refused) still uses it
    /// for the RPS on its queues, so it stays with that NIC; a NIC gone uses nothing, and
    /// the table is restored with the rest. Host-wide values that are no NIC's are restored.
    #[test]
    fn a_refused_nic_keeps_rfs_flow_table_and_a_gone_one_does_not() {
        let flow = "/proc/sys/net/core/rps_sock_flow_entries";
        let r = resolve(
            &entry_with_host_values(),
            Ok(vec![id("vb", 9)]),
            NONE,
            false,
        );
        let l = &r.left[0];
        assert_eq!(l.kind, LeftKind::Refused);
        assert_eq!(
            l.runtime,
            [
                "/sys/class/net/vb/queues/rx-0/rps_cpus",
                "/proc/irq/40/smp_affinity_list",
                flow
            ]
        );
        assert!(l.channels && !l.ring, "{l:?}");
        assert!(
            l.values
                .last()
                .unwrap()
                .starts_with("net.core.rps_sock_flow_entries 0 (RFS's flow table"),
            "{:?}",
            l.values
        );
        assert_eq!(
            paths(&r.entry),
            ["/proc/sys/net/core/somaxconn", "/proc/sys/fs/file-max"]
        );
        assert!(r.entry.actions.iter().all(
            |a| !matches!(&a.op, Op::Sysctl { key, .. } if key == "net.core.rps_sock_flow_entries")
        ));
        // The journal's record of it reads back as the same part.
        let back = Left::from_part(&l.part(), &entry_with_host_values());
        assert_eq!(back, *l);
        // Gone: the table is restored with the rest.
        let r = resolve(
            &entry_with_host_values(),
            Ok(vec![id("va", 4)]),
            NONE,
            false,
        );
        assert_eq!(r.left[0].kind, LeftKind::Gone);
        assert!(paths(&r.entry).contains(&flow), "{:?}", paths(&r.entry));
        // --force: onto the link of that name, the table with it.
        let r = resolve(&entry_with_host_values(), Ok(vec![id("vb", 9)]), NONE, true);
        assert!(r.left.is_empty() && paths(&r.entry).contains(&flow));
    }

    /// No setting wstune journals is one NIC's own sysctl (net.ipv4.conf.NIC.*, a neighbour
    /// table's): a rollback refuses any runtime path outside the catalogs and
    /// [`crate::host::owned::NIC_SYSCTLS`], so an entry can hold none, and a NIC's part of an
    /// entry is its queue, channel, ring and interrupt settings plus RFS's shared table.
    #[test]
    fn no_sysctl_wstune_restores_is_one_nics_own() {
        let managed = crate::catalog::managed();
        let per_device = |k: &str| [".conf.", ".neigh."].iter().any(|d| k.contains(d));
        let all: Vec<&str> = managed
            .sysctls
            .iter()
            .map(String::as_str)
            .chain(crate::host::owned::NIC_SYSCTLS)
            .collect();
        assert!(all.len() > 10, "{all:?}");
        assert!(all.iter().all(|k| !per_device(k)), "{all:?}");
    }

    /// An entry whose NICs were recorded in another network namespace was applied there: each
    /// of its net.* values is that namespace's, and none is written here (they are left with
    /// a part of their own), while host-wide values of other kinds are restored. After a
    /// reboot the namespace's number means nothing, and nothing is left for it.
    #[test]
    fn an_entry_applied_in_another_namespace_leaves_its_net_values_there() {
        let mut here = id("vb", 5);
        here.netns = Some(1);
        let r = resolve(
            &entry_with_host_values(),
            Ok(vec![here.clone()]),
            NONE,
            false,
        );
        let kinds: Vec<(Option<&str>, LeftKind)> =
            r.left.iter().map(|l| (l.nic.as_deref(), l.kind)).collect();
        assert_eq!(
            kinds,
            [
                (Some("vb"), LeftKind::OtherNamespace),
                (None, LeftKind::OtherNamespace)
            ]
        );
        // The flow table goes with the NIC that uses it; the namespace's own values apart.
        assert!(r.left[0]
            .runtime
            .iter()
            .any(|p| p.ends_with("rps_sock_flow_entries")));
        assert_eq!(r.left[1].runtime, ["/proc/sys/net/core/somaxconn"]);
        assert_eq!(r.left[1].values, ["net.core.somaxconn 4096"]);
        assert!(r.left[1].why.contains("net:[4026532175]") && r.left[1].why.contains("net:[1]"));
        assert_eq!(paths(&r.entry), ["/proc/sys/fs/file-max"]);
        let words = left_words(&r.left[1], "1", "");
        assert!(
            words.starts_with("another network namespace's net.* values were not restored (net.core.somaxconn 4096)"),
            "{words}"
        );
        // --force restores them here, saying so.
        let r = resolve(
            &entry_with_host_values(),
            Ok(vec![here.clone()]),
            NONE,
            true,
        );
        assert!(
            r.left.is_empty() && r.entry.runtime.len() == 5,
            "{:?}",
            r.left
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("--force: its net.* values (net.core.somaxconn 4096, ")),
            "{:?}",
            r.notes
        );
        // Another boot: that namespace is gone, and the link of that name is taken as before.
        here.boot = Some("b2".into());
        let r = resolve(&entry_with_host_values(), Ok(vec![here]), NONE, false);
        assert!(r.left.is_empty(), "{:?}", r.left);
    }

    /// An entry of an older wstune recorded no identity: its NIC is found by name, and the
    /// note says that cannot be verified; a name no link has any more is gone.
    #[test]
    fn an_entry_without_identities_finds_its_nics_by_name_with_a_warning() {
        let mut old = entry();
        old.nics.clear();
        let r = resolve(&old, Ok(vec![id("vb", 9)]), NONE, false);
        assert!(r.left.is_empty());
        assert!(
            r.warnings[0].contains("found by name only, which cannot be verified"),
            "{:?}",
            r.warnings
        );
        assert_eq!(r.entry.runtime.len(), 3);
        // No link of that name: removed or renamed, which nothing tells; refused, so that
        // `--id ID --force` still reaches the entry, and never "went with the device".
        let r = resolve(&old, Ok(vec![id("va", 4)]), NONE, false);
        let l = &r.left[0];
        assert!(l.refused() && l.kind == LeftKind::Unverified, "{l:?}");
        assert_eq!(
            l.why,
            "no link named vb now: removed or renamed, which an entry of an older wstune cannot tell"
        );
        let words = left_words(l, "1", "");
        assert!(
            !words.contains("went with the device") && words.contains("--force"),
            "{words}"
        );
    }

    #[test]
    fn a_physical_nic_is_found_by_device_and_permanent_address_whatever_its_index() {
        let rec = pci("eth0", 2, "0000:3b:00.0", "52:54:00:00:00:01");
        // A driver reload gave it another index and udev another name.
        let now = [
            pci("eth0", 3, "0000:3c:00.0", "52:54:00:00:00:02"),
            pci("eth9", 7, "0000:3b:00.0", "52:54:00:00:00:01"),
        ];
        assert_eq!(find(&rec, &now, NONE), Found::Here("eth9".into()));
        // Another card in the same slot is another NIC.
        let swapped = [pci("eth0", 2, "0000:3b:00.0", "52:54:00:00:00:99")];
        assert!(matches!(find(&rec, &swapped, NONE), Found::Refused(_)));
        // No identity recorded: by name, unverified.
        let bare = NicIdentity {
            name: "eth0".into(),
            ..NicIdentity::default()
        };
        assert!(matches!(find(&bare, &now, NONE), Found::Unverified(_)));
        assert!(
            matches!(find(&bare, &[id("eth1", 1)], NONE), Found::Unknown(w) if w.contains("removed or renamed"))
        );
    }

    /// A NIC moved to another network namespace (`ip link set X netns Y`) leaves no link here,
    /// but its device is still on the host: refused (its values live on there), not gone.
    #[test]
    fn a_physical_nic_whose_device_is_still_here_is_in_another_namespace_not_gone() {
        let rec = pci("eth0", 2, "0000:3b:00.0", "52:54:00:00:00:01");
        let now = [pci("eth1", 3, "0000:3c:00.0", "52:54:00:00:00:02")];
        let host: Lister = &|dir: &str| {
            (dir == "/sys/bus/pci/devices")
                .then(|| vec!["0000:3b:00.0".to_string(), "0000:3c:00.0".to_string()])
        };
        assert!(
            matches!(find(&rec, &now, host), Found::Elsewhere(w) if w.contains("moved to another namespace") && w.contains("pci:0000:3b:00.0")),
            "{:?}",
            find(&rec, &now, host)
        );
        // The device removed from the host: gone.
        let removed: Lister = &|_: &str| Some(vec!["0000:3c:00.0".to_string()]);
        assert!(matches!(find(&rec, &now, removed), Found::Gone(_)));
    }

    /// After a reboot a virtual link's recorded index names nothing, but a bond, VLAN or veth
    /// comes back under its name: found by that name with a warning, never refused (rollback
    /// would end partly rolled back, recovery would refuse, drift would never clear).
    #[test]
    fn a_virtual_link_after_a_reboot_is_found_by_its_name_with_a_warning() {
        let mut after = id("vb", 9);
        after.boot = Some("b2".into());
        let mut other = id("va", 5);
        other.boot = Some("b2".into());
        let r = resolve(&entry(), Ok(vec![other.clone(), after]), NONE, false);
        assert!(r.left.is_empty(), "{:?}", r.left);
        assert_eq!(r.entry.runtime.len(), 3);
        assert!(
            r.warnings[0].starts_with("vb: it is a virtual link recorded before the last reboot")
                && r.warnings[0].ends_with("found by name only, which cannot be verified"),
            "{:?}",
            r.warnings
        );
        // No link of that name after the reboot: gone, its values with it.
        let r = resolve(&entry(), Ok(vec![other]), NONE, false);
        assert!(!r.left[0].refused() && r.left[0].why.contains("no link is named vb now"));
    }

    /// A queue interrupt is restored by number only where that number still carries the
    /// recorded name: after a driver reload /proc/irq/40 may be another device's.
    #[test]
    fn a_queue_interrupt_renumbered_by_a_driver_reload_is_not_restored_onto_another() {
        let now = || Ok(vec![id("vb", 5)]);
        let irq = "/proc/irq/40/smp_affinity_list";
        let other: Lister = &|dir: &str| {
            (dir == "/proc/irq/40")
                .then(|| vec!["smp_affinity_list".to_string(), "nvme0q3".to_string()])
        };
        let r = resolve(&entry(), now(), other, false);
        assert!(
            r.entry.runtime.iter().all(|x| x.path != irq),
            "{:?}",
            r.entry.runtime
        );
        assert!(r
            .entry
            .actions
            .iter()
            .all(|a| !matches!(&a.op, Op::KernelFile { path, .. } if path == irq)));
        assert!(
            r.notes.iter().any(|n| n
                .starts_with("IRQ 40 (vb-rx-0): interrupt 40 is no longer vb-rx-0")
                && n.contains("affinity 0-1 is not restored")),
            "{:?}",
            r.notes
        );
        assert!(r.left.is_empty());
        // Still vb-rx-0's (or not listable here): restored as recorded.
        let same: Lister = &|dir: &str| {
            (dir == "/proc/irq/40")
                .then(|| vec!["smp_affinity_list".to_string(), "vb-rx-0".to_string()])
        };
        for list in [same, NONE] {
            let r = resolve(&entry(), now(), list, false);
            assert!(r.entry.runtime.iter().any(|x| x.path == irq) && r.notes.is_empty());
        }
    }
}
