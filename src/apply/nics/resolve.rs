//! Fitting an entry to the NICs there now, in steps (see the module's words above): each NIC
//! found, renumbered interrupts dropped, the values of NICs left taken out, renamed NICs'
//! values moved, and what the NICs left share settled.

use super::left::{runtime_words, values_of, Left, FLOW_TABLE};
use super::{find, nic_of_action, nic_of_path, nics_of, Found, Lister};
use crate::apply::journal::{Entry, LeftKind, OldRuntime};
use crate::apply::plan::{Action, Op};
use crate::host::{NicIdentity, ReadError};

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
    let theirs: Vec<&OldRuntime> = out
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
