//! `wstune rollback`: restore a journal entry exactly, or list the entries.

use crate::apply::journal::{self, Entry, Lock, State};
use crate::apply::{self, recover};
use crate::confirm::{confirm, PASS_YES};
use crate::host::store::Store;
use crate::host::Backend;
use crate::outcome::Outcome;
use crate::output::say;
use anyhow::{anyhow, bail, Result};

/// `rollback`, resolved: where the journal is, and what to do with it.
pub struct Request {
    pub store: Store,
    pub action: Action,
}

pub enum Action {
    /// List the entries; change nothing (no backend is needed).
    List,
    Restore {
        backend: Box<dyn Backend>,
        /// This entry, else the newest one applied or interrupted.
        id: Option<String>,
        /// Confirmed already (`--yes`).
        yes: bool,
        /// Overwrite values changed by hand since the apply.
        force: bool,
        /// Sysctl keys whose runtime value is left as it is now.
        keep: Vec<String>,
    },
}

pub fn run(r: Request) -> Result<Outcome> {
    let store = r.store;
    let (backend, id, yes, force, keep) = match r.action {
        Action::List => return list(&store),
        Action::Restore {
            backend,
            id,
            yes,
            force,
            keep,
        } => (backend, id, yes, force, keep),
    };
    // Never restore under an apply that is still running (its entry is `pending` too). Without
    // a journal directory there is nothing to lock, and `pick` says there is nothing to do.
    let lock = if backend.privileged() {
        Lock::acquire_existing(&store)?
    } else {
        None
    };
    let mut entry = match pick(&store, id.as_deref()) {
        Ok(entry) => entry,
        Err(e) => {
            // Nothing to restore, but an apply killed before its entry was saved may have left
            // the entry's temporary file (under the lock: no write is running).
            if lock.is_some() {
                say_removed(&apply::remove_temporaries(&store, backend.as_ref(), []));
            }
            return Err(e);
        }
    };
    // What is restored: the entry (of one an earlier rollback left partly rolled back, only
    // what that one left: what it restored may have been set anew since, and is never written
    // again) less the runtime values to keep (the entry itself is saved whole, as rolled back).
    let restored = without(&entry, &entry.remaining(), &keep)?;
    if !backend.privileged() {
        bail!(match backend.platform() {
            crate::host::Platform::Linux => "rollback changes kernel settings and files under /etc: run it as root. Nothing was changed.",
            crate::host::Platform::Windows => "rollback changes registry values under HKLM: run it from an elevated prompt (Run as administrator). Nothing was changed.",
        });
    }
    // Each NIC as it is now, found by the identity the entry recorded, not by a name another
    // NIC may have taken since: renamed, its values go to its new name; gone or another NIC's
    // name, they are left (said below, and the rest of the entry is still restored).
    let fitted = apply::nics::resolve(
        &restored,
        backend.nic_identities(),
        &apply::nics::lister(backend.as_ref()),
        force,
    );
    let restored = fitted.entry;
    if entry.resumes() {
        say!(
            "Restoring the parts left by the earlier rollback: {}; everything else the entry recorded was restored then and is not written again.",
            left_parts(&entry).join("; ")
        );
    }
    say!("{}", crate::report::restore_preview(&restored));
    for n in &fitted.notes {
        say!("note: {n}");
    }
    for w in &fitted.warnings {
        say!("warning: {w}");
    }
    for l in &fitted.left {
        say!(
            "Not restored: {}",
            apply::nics::left_words(l, &entry.id, &apply::flags(&store))
        );
    }
    // Someone changed a value after the apply: restoring silently would undo their change.
    let hand = recover::hand_changes(&restored, backend.as_ref(), &store);
    if !hand.is_empty() {
        say!("Changed by hand since the apply (rollback overwrites these with the values from before it):");
        for h in &hand {
            say!("  {h}");
        }
        if !force {
            confirm(
                "Overwrite these hand changes too?",
                &format!(
                    "{} value(s) or file(s) were changed by hand since apply {}: {}. Pass --force to restore them anyway (the hand-made values are lost). Nothing was changed.",
                    hand.len(),
                    entry.id,
                    hand.iter().map(|h| h.to_string()).collect::<Vec<_>>().join("; ")
                ),
            )?;
        }
    }
    if !yes {
        confirm("Restore these?", PASS_YES)?;
    }
    // Under the lock: no write of wstune's is running, so these are a killed one's.
    say_removed(&apply::remove_temporaries(
        &store,
        backend.as_ref(),
        entry.files.iter(),
    ));
    let done = apply::restore_counted(&restored, backend.as_ref(), &store);
    if !done.errors.is_empty() {
        bail!("could not restore: {}\nThe entry is kept as it was; fix the cause and run `wstune rollback --id {}{}` again.", done.errors.join("; "), entry.id, apply::flags(&store));
    }
    // A NIC refused (another NIC has its name, or it is elsewhere), or another namespace's
    // values, keep the entry reachable for `--id ID`, which then restores exactly what is
    // recorded as left here; a NIC gone has nothing left to restore. Either way the rest is
    // restored, and a plain rollback goes on to older entries.
    let kept = fitted.left.iter().any(|l| l.refused());
    entry.state = if kept {
        State::PartlyRolledBack
    } else {
        State::RolledBack
    };
    entry.left = if kept {
        fitted.left.iter().map(apply::nics::Left::part).collect()
    } else {
        vec![]
    };
    journal::save(&store, &entry)?;
    say_restored(
        &entry.id,
        &done,
        fitted.left.is_empty(),
        &keep,
        backend.as_ref(),
        &restored,
    );
    // A partial restore is an error, as a value that could not be written is: a script must
    // not take it for a complete one. What was left, and why, was said above, once.
    if !fitted.left.is_empty() {
        let whose: Vec<String> = fitted.left.iter().map(|l| l.whose()).collect();
        bail!(
            "entry {} was rolled back, but not all of it: {} (above) were not restored; everything else it recorded is restored, and it is marked {}.",
            entry.id,
            whose.join(", "),
            entry.state.as_str(),
        );
    }
    Ok(Outcome::Ok)
}

/// The parts an earlier rollback left, in words: each NIC with its kind and values, or the
/// network namespace's net.* values.
fn left_parts(entry: &Entry) -> Vec<String> {
    entry
        .left
        .iter()
        .map(|p| {
            let l = apply::nics::Left::from_part(p, entry);
            let values = if l.values.is_empty() {
                String::new()
            } else {
                format!(": {}", l.values.join(", "))
            };
            match &l.nic {
                Some(nic) => format!("NIC {nic} ({}{values})", l.kind.as_str()),
                None => format!(
                    "the net.* values of the network namespace the apply ran in ({})",
                    l.values.join(", ")
                ),
            }
        })
        .collect()
}

/// Say what the restore changed back, the values kept (`--keep`), and what still waits for a
/// restart. `nothing_left`: no part of the entry was left out.
fn say_restored(
    id: &str,
    done: &apply::Restoration,
    nothing_left: bool,
    keep: &[String],
    backend: &dyn Backend,
    restored: &Entry,
) {
    // What was changed back, counted as it was written: a value already as it was is not.
    // "Nothing needed changing" only when nothing was left out either.
    if done.values + done.files == 0 && nothing_left {
        say!(
            "Rolled back entry {}: nothing needed changing, every value and file it recorded was already as before the apply.",
            id
        );
    } else {
        say!(
            "Restored entry {}: {} runtime value(s), {} file(s) changed back.",
            id,
            done.values,
            done.files
        );
    }
    for k in keep {
        let now = backend
            .read(&crate::host::procfs::sysctl_path(k))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|e| e.to_string());
        say!("Kept {k} at {now} (--keep); the next boot applies what the restored files say.");
    }
    // Adapters read their restored keywords when they restart.
    for line in apply::restart_adapters(backend, &apply::adapters_of(restored)) {
        say!("{line}");
    }
    for a in &restored.actions {
        if let apply::plan::Op::UnitDropIn { unit, .. } = &a.op {
            say!("note: {unit} keeps its LimitNOFILE until systemd rereads its units and it restarts: systemctl daemon-reload && systemctl restart {unit}");
        }
    }
}

/// Say which temporary files an interrupted write had left (and were removed), if any.
fn say_removed(removed: &[String]) {
    if !removed.is_empty() {
        say!(
            "Removed {} temporary file(s) an interrupted write had left: {}",
            removed.len(),
            removed.join(", ")
        );
    }
}

/// `remaining` (what is left to restore of `entry`) less the runtime values of `keep` (sysctl
/// keys). A key the entry did not change is refused, naming those it did: a typo must not roll
/// back the value meant to be kept; so is one an earlier rollback already restored.
fn without(entry: &Entry, remaining: &Entry, keep: &[String]) -> Result<Entry> {
    let mut e = remaining.clone();
    for k in keep {
        let path = crate::host::procfs::sysctl_path(k);
        let before = e.runtime.len();
        e.runtime.retain(|r| r.path != path);
        if e.runtime.len() == before && entry.runtime.iter().any(|r| r.path == path) {
            bail!(
                "--keep {k}: the earlier rollback of entry {} restored {k} already, and this one restores only what it left, which is not {k}. Nothing was changed.",
                entry.id
            );
        }
        if e.runtime.len() == before {
            let changed: Vec<String> = entry
                .actions
                .iter()
                .filter_map(|a| match &a.op {
                    apply::plan::Op::Sysctl { key, .. } => Some(key.clone()),
                    _ => None,
                })
                .collect();
            bail!(
                "--keep {k}: entry {} did not change {k} at runtime; it changed: {}. Nothing was changed.",
                entry.id,
                if changed.is_empty() { "no runtime value".into() } else { changed.join(", ") }
            );
        }
    }
    Ok(e)
}

/// The entry to restore: `--id`, else the newest one applied or interrupted.
fn pick(store: &Store, id: Option<&str>) -> Result<Entry> {
    if let Some(id) = id {
        // Only this entry is read: a damaged other entry must not block restoring this one.
        let e = journal::load(store, id)?;
        return match e.state {
            State::RolledBack => bail!("entry {id} was already rolled back; nothing was changed"),
            State::Undone => bail!(
                "entry {id} failed and was undone automatically; there is nothing to roll back"
            ),
            State::InterruptedUndone => bail!(
                "entry {id} was interrupted and the next apply already undid it; there is nothing to roll back"
            ),
            State::Applied | State::Pending | State::PartlyRolledBack => Ok(e),
        };
    }
    let (entries, damaged) = journal::scan(store)?;
    if let Some(d) = damaged.first() {
        // It may be the newest: restoring an older one would skip it.
        bail!(
            "journal entry {} is damaged ({}); rollback cannot tell whether it is the newest change.\nFix: {}",
            d.path.display(),
            d.error,
            journal::damaged_fix(&d.path, &apply::flags(store))
        );
    }
    entries
        .into_iter()
        .rev()
        .find(|e| matches!(e.state, State::Applied | State::Pending))
        .ok_or_else(|| {
            anyhow!(
                "nothing to roll back: no applied entry under {}",
                store.path(journal::DIR).display()
            )
        })
}

fn list(store: &Store) -> Result<Outcome> {
    let (entries, damaged) = journal::scan(store)?;
    say!(
        "{}",
        crate::report::entry_list(
            &store.path(journal::DIR),
            &entries,
            &damaged,
            &format!("wstune check{}", crate::apply::flags(store))
        )
    );
    Ok(Outcome::Ok)
}
