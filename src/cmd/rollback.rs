//! `wstune rollback`: restore a journal entry exactly, or list the entries.

use crate::apply::journal::{self, Entry, Lock, State};
use crate::apply::{self, recover, store::Store};
use crate::cli::args::RollbackArgs;
use crate::cli::confirm::{confirm, PASS_YES};
use crate::cli::{exit, resolve};
use crate::output;
use anyhow::{anyhow, bail, Result};

use crate::output::say;

pub fn run(a: &RollbackArgs) -> Result<u8> {
    let store: Store = resolve::store(a.root.as_deref(), a.prefix.as_deref());
    if a.list {
        return list(&store);
    }
    let backend = resolve::backend(a.root.as_deref(), a.prefix.as_deref())?;
    // Never restore under an apply that is still running (its entry is `pending` too). Without
    // a journal directory there is nothing to lock, and `pick` says there is nothing to do.
    let _lock = if backend.privileged() {
        Lock::acquire_existing(&store)?
    } else {
        None
    };
    let mut entry = pick(&store, a.id.as_deref())?;
    if !backend.privileged() {
        bail!(match backend.platform() {
            crate::catalog::Platform::Linux => "rollback changes kernel settings and files under /etc: run it as root. Nothing was changed.",
            crate::catalog::Platform::Windows => "rollback changes registry values under HKLM: run it from an elevated prompt (Run as administrator). Nothing was changed.",
        });
    }
    say!(
        "Rolling back entry {} ({}, {}):",
        entry.id,
        entry.profile,
        entry.state.as_str()
    );
    for r in &entry.runtime {
        say!(
            "  {} <- {}",
            r.path,
            r.old.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
    for l in &entry.limits {
        say!("  nofile of process {} <- {}:{}", l.pid, l.soft, l.hard);
    }
    for r in &entry.registry {
        say!(
            "  {}\\{} <- {}",
            r.key,
            r.value,
            r.old.as_deref().unwrap_or("(delete)")
        );
    }
    for f in &entry.files {
        say!(
            "  {} {}",
            f.path,
            if f.old.is_some() {
                "<- previous content"
            } else {
                "(remove: it did not exist)"
            }
        );
    }
    // Someone changed a value after the apply: restoring silently would undo their change.
    let hand = recover::hand_changes(&entry, backend.as_ref(), &store);
    if !hand.is_empty() {
        say!("Changed by hand since the apply (rollback overwrites these with the values from before it):");
        for h in &hand {
            say!("  {h}");
        }
        if !a.force {
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
    if !a.yes {
        confirm("Restore these?", PASS_YES)?;
    }
    let errors = apply::restore(&entry, backend.as_ref(), &store);
    if !errors.is_empty() {
        bail!("could not restore: {}\nThe entry is kept as it was; fix the cause and run `wstune rollback --id {}` again.", errors.join("; "), entry.id);
    }
    entry.state = State::RolledBack;
    journal::save(&store, &entry)?;
    say!(
        "Restored entry {}: {} runtime value(s), {} file(s).",
        entry.id,
        entry.runtime.len() + entry.limits.len() + entry.registry.len(),
        entry.files.len()
    );
    for a in &entry.actions {
        if let apply::plan::Op::UnitDropIn { unit, .. } = &a.op {
            say!("note: {unit} keeps its LimitNOFILE until systemd rereads its units and it restarts: systemctl daemon-reload && systemctl restart {unit}");
        }
    }
    Ok(exit::OK)
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
            State::Applied | State::Pending => Ok(e),
        };
    }
    let (entries, damaged) = journal::scan(store)?;
    if let Some(d) = damaged.first() {
        // It may be the newest: restoring an older one would skip it.
        bail!(
            "journal entry {} is damaged ({}); rollback cannot tell whether it is the newest change.\nFix: {}",
            d.path.display(),
            d.error,
            journal::damaged_fix(&d.path)
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

fn list(store: &Store) -> Result<u8> {
    let (entries, damaged) = journal::scan(store)?;
    if entries.is_empty() && damaged.is_empty() {
        say!(
            "No journal entries under {}.",
            store.path(journal::DIR).display()
        );
        return Ok(exit::OK);
    }
    let mut t = output::new_table();
    t.set_header(vec!["Id", "Created", "Profile", "Changes", "State"]);
    for e in &entries {
        t.add_row(vec![
            e.id.clone(),
            e.created.clone(),
            e.profile.clone(),
            e.actions.len().to_string(),
            e.state.as_str().to_string(),
        ]);
    }
    for d in &damaged {
        t.add_row(vec![
            d.path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            "?".into(),
            "?".into(),
            "?".into(),
            "damaged, cannot be read (`wstune check` says what to do)".into(),
        ]);
    }
    say!("{t}");
    Ok(exit::OK)
}
