//! What is left when an apply did not finish, and what changed behind wstune's back since one did.
//!
//! - [`hand_changes`]: values and files that are neither what the entry applied nor what it
//!   replaced, i.e. someone changed them after the apply. `rollback` lists them and wants
//!   `--force` (or a yes on a terminal) before overwriting them; apply's recovery refuses.
//! - [`undo_interrupted`]: a `pending` entry whose process died (its lock is free) is restored
//!   by the next apply before it plans, so that one rollback of the new entry returns the host
//!   to the state before both.
//! - [`finding`]: `wstune.journal.pending` for `check`: an interrupted or damaged entry.

use super::journal::{self, Entry, Lock, LockState, State};
use super::plan::Op;
use crate::catalog::eval::{Finding, Status};
use crate::host::procfs::sysctl_path;
use crate::host::store::Store;
use crate::host::Backend;
use crate::value::Value;
use anyhow::{bail, Result};

/// One value or file changed since the apply: "KEY: applied X, now Y (changed by hand)".
#[derive(Debug, Clone, PartialEq)]
pub struct HandChange(pub String);

impl std::fmt::Display for HandChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Everything the entry changed that now holds neither the applied value nor the old one. A
/// value back at its old value is not listed: restoring it changes nothing. For a `pending`
/// entry a value still at its old value is one the apply never reached.
pub fn hand_changes(entry: &Entry, backend: &dyn Backend, store: &Store) -> Vec<HandChange> {
    let mut out = Vec::new();
    for r in &entry.runtime {
        // A NIC queue's or interrupt's setting, compared as the kernel prints it (a padded
        // mask reads back for the one written).
        let nic = entry.actions.iter().find_map(|a| match &a.op {
            Op::KernelFile { path, value } if *path == r.path => Some(value),
            _ => None,
        });
        if let (Some(applied), Ok(now)) = (nic, backend.read(&r.path)) {
            let same = |v: &str| crate::nic::same_setting(&r.path, &now, v);
            if !same(applied) && !same(&r.old) {
                out.push(HandChange(format!(
                    "{}: applied {applied}, now {} (changed by hand)",
                    r.path,
                    now.trim()
                )));
            }
            continue;
        }
        let applied = entry.actions.iter().find_map(|a| match &a.op {
            Op::Sysctl { key, value } if sysctl_path(key) == r.path => Some((key, value)),
            _ => None,
        });
        let (Some((key, applied)), Ok(now)) = (applied, backend.read(&r.path)) else {
            continue; // unreadable now: restore reports it
        };
        let now = words(&now);
        if now != words(applied) && now != words(&r.old) {
            out.push(HandChange(format!(
                "{key}: applied {}, now {now} (changed by hand)",
                words(applied)
            )));
        }
    }
    for l in &entry.limits {
        let applied = entry.actions.iter().find_map(|a| match a.op {
            Op::Prlimit { pid, soft, hard } if pid == l.pid => Some((soft, hard)),
            _ => None,
        });
        let (Some(applied), Some(now)) = (applied, crate::gather::nofile_of(backend, l.pid)) else {
            continue;
        };
        if now != applied && now != (l.soft, l.hard) {
            out.push(HandChange(format!(
                "nofile of process {}: applied {}:{}, now {}:{} (changed by hand)",
                l.pid, applied.0, applied.1, now.0, now.1
            )));
        }
    }
    for c in &entry.channels {
        let (Some([rx, tx, combined]), Ok(now)) =
            (entry.channels_set(&c.nic), backend.channels(&c.nic))
        else {
            continue; // gone or unreadable now: restore reports it
        };
        // Only the counts the apply set: (applied, old, now) for each.
        let set: Vec<(&str, u32, u32, u32)> = [
            ("rx", rx, c.old.rx, now.rx),
            ("tx", tx, c.old.tx, now.tx),
            ("combined", combined, c.old.combined, now.combined),
        ]
        .into_iter()
        .filter_map(|(k, applied, old, now)| applied.map(|a| (k, a, old, now)))
        .collect();
        let is_applied = set.iter().all(|(_, a, _, n)| a == n);
        let is_old = set.iter().all(|(_, _, o, n)| o == n);
        if !set.is_empty() && !is_applied && !is_old {
            let words = |pick: fn(&(&str, u32, u32, u32)) -> u32| {
                set.iter()
                    .map(|s| format!("{} {}", s.0, pick(s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push(HandChange(format!(
                "{}'s channels: applied {}, now {} (changed by hand)",
                c.nic,
                words(|s| s.1),
                words(|s| s.3)
            )));
        }
    }
    for r in &entry.rings {
        let applied = entry.actions.iter().find_map(|a| match &a.op {
            Op::RxRing { nic, rx } if *nic == r.nic => Some(*rx),
            _ => None,
        });
        let (Some(applied), Ok((now, _))) = (applied, backend.rx_ring(&r.nic)) else {
            continue;
        };
        if now != applied && now != r.old {
            out.push(HandChange(format!(
                "{}'s receive ring: applied {applied}, now {now} (changed by hand)",
                r.nic
            )));
        }
    }
    for r in &entry.registry {
        let applied = entry.actions.iter().find_map(|a| match &a.op {
            Op::Registry {
                key, value, data, ..
            } if *key == r.key && *value == r.value => Some(data.clone()),
            _ => None,
        });
        let Some(applied) = applied else { continue };
        let now = backend.registry(&r.key, &r.value, r.kind).ok();
        if now.as_deref() != Some(applied.as_str()) && now != r.old {
            out.push(HandChange(format!(
                "{}\\{}: applied {applied}, now {} (changed by hand)",
                r.key,
                r.value,
                now.as_deref().unwrap_or("(deleted)")
            )));
        }
    }
    for f in &entry.files {
        let Ok(now) = store.read(&f.path) else {
            continue;
        };
        let now = now.as_ref().map(journal::Blob::from);
        let is = |b: &Option<journal::Blob>| match (b, &now) {
            (Some(b), Some(n)) => b.same_as(n),
            (None, None) => true,
            _ => false,
        };
        if !is(&Some(f.new.clone())) && !is(&f.old) {
            out.push(HandChange(format!(
                "{}: applied by wstune, now {} (changed by hand)",
                f.path,
                if now.is_some() { "edited" } else { "removed" }
            )));
        }
    }
    out
}

/// Restore every `pending` entry (newest first) whose apply died, and mark it
/// `interrupted_undone`. The caller holds the journal lock, so no pending entry belongs to a
/// live apply. Returns one line per entry undone, for stderr. Refuses (changing nothing) when
/// something was changed by hand since, or when the backend cannot write (not root).
pub fn undo_interrupted(
    entries: &[Entry],
    backend: &dyn Backend,
    store: &Store,
) -> Result<Vec<String>> {
    let mut said = Vec::new();
    let flags = super::flags(store);
    for e in entries.iter().rev().filter(|e| e.state == State::Pending) {
        if !backend.privileged() {
            bail!(
                "apply {} was interrupted (its process died midway) and must be undone first: run `wstune apply{flags}` as root, or `wstune rollback --id {}{flags}` as root. Nothing was changed.",
                e.id,
                e.id
            );
        }
        // Its NICs as they are now (renamed: under the new name; gone: nothing to undo).
        let fitted = super::nics::resolve(
            e,
            backend.nic_identities(),
            &super::nics::lister(backend),
            false,
        );
        if let Some(l) = fitted.left.iter().find(|l| l.refused()) {
            bail!(
                "apply {id} was interrupted (its process died midway), and {}: {}. Run `wstune rollback --id {id}{flags}` (it restores the rest and says what it cannot), then apply again. Nothing was changed.",
                l.nic.clone().unwrap_or_else(|| l.whose()),
                l.why,
                id = e.id
            );
        }
        let hand = hand_changes(&fitted.entry, backend, store);
        if !hand.is_empty() {
            bail!(
                "apply {id} was interrupted (its process died midway), and since then:\n  {}\nRun `wstune rollback --id {id}{flags}` (it lists these and asks before overwriting them), then apply again. Nothing was changed.",
                hand.iter().map(|h| h.to_string()).collect::<Vec<_>>().join("\n  "),
                id = e.id
            );
        }
        let undone = super::restore_counted(&fitted.entry, backend, store);
        if !undone.errors.is_empty() {
            bail!(
                "apply {id} was interrupted and could not be undone: {}\nFix that, then run `wstune rollback --id {id}{flags}` and apply again.",
                undone.errors.join("; "),
                id = e.id
            );
        }
        let mut done = e.clone();
        done.state = State::InterruptedUndone;
        journal::save(store, &done)?;
        said.push(format!(
            "apply {} was interrupted (its process died midway): changed back {} value(s) and {} file(s) it had changed before planning again (the rest of what it recorded was still as before), so one `wstune rollback{flags}` returns to the state before it{}",
            e.id,
            undone.values,
            undone.files,
            fitted
                .left
                .iter()
                .map(|l| format!("; {}", super::nics::left_words(l, &e.id, &flags)))
                .collect::<String>()
        ));
    }
    Ok(said)
}

/// `wstune.journal.pending`: fails on an interrupted apply (pending, no live process) or a
/// damaged entry. None when there is no journal at all.
pub fn finding(store: &Store, privileged: bool) -> Option<Finding> {
    let (entries, damaged) = match journal::scan(store) {
        Ok(found) => found,
        // The journal directory is root's and private (0700): a check without root cannot
        // read it, which says nothing about the journal.
        Err(e)
            if !privileged
                && e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
                }) =>
        {
            return Some(
                crate::catalog::computed::get("wstune.journal.pending").finding(
                    Status::Skip,
                    Value::Text("not readable".into()),
                    Value::Text("none".into()),
                    format!(
                        "{e:#}: the journal is readable only by root; run check as root to see it"
                    ),
                    None,
                ),
            )
        }
        // A journal directory others can write (or one that cannot be listed) is a problem
        // `check` must show, not a journal that is not there.
        Err(e) => {
            return Some(
                crate::catalog::computed::get("wstune.journal.pending").finding(
                    Status::Fail,
                    Value::Text("journal refused".into()),
                    Value::Text("none".into()),
                    format!("{e:#}"),
                    None,
                ),
            )
        }
    };
    if entries.is_empty() && damaged.is_empty() {
        return None;
    }
    let running = Lock::probe(store) == LockState::Held;
    let pending: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.state == State::Pending)
        .collect();
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    for d in &damaged {
        problems.push(format!(
            "{} is damaged and cannot be rolled back automatically ({})",
            d.path.display(),
            d.error
        ));
        fixes.push(journal::damaged_fix(&d.path, &super::flags(store)));
    }
    if !running {
        for e in &pending {
            problems.push(format!(
                "apply {} was interrupted (its process died midway): some of its changes are made, some not",
                e.id
            ));
            fixes.push(format!("`wstune rollback --id {}{flags}` restores the state before it (a new `wstune apply{flags}` also undoes it first)", e.id, flags = super::flags(store)));
        }
    }
    let (status, current, note) = match (problems.is_empty(), running && !pending.is_empty()) {
        (false, _) => (
            Status::Fail,
            format!("{} problem(s)", problems.len()),
            problems.join("; "),
        ),
        (true, true) => (
            Status::Info,
            "apply running".into(),
            format!(
                "an apply is running now (entry {})",
                pending.last().map(|e| e.id.as_str()).unwrap_or("?")
            ),
        ),
        (true, false) => (
            Status::Pass,
            "none".into(),
            format!("{} entr(ies), none interrupted or damaged", entries.len()),
        ),
    };
    // The words are checks/wstune.yaml's; the verdict and the fix (entry ids) are computed.
    Some(
        crate::catalog::computed::get("wstune.journal.pending").finding(
            status,
            Value::Text(current),
            Value::Text("none".into()),
            note,
            (!fixes.is_empty()).then(|| fixes.join("; ")),
        ),
    )
}
