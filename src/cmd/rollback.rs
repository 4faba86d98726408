//! `wstune rollback`: restore a journal entry exactly, or list the entries.

use crate::apply::journal::{self, State};
use crate::apply::{self, store::Store};
use crate::cli::args::RollbackArgs;
use crate::cli::{exit, resolve};
use crate::output;
use anyhow::{anyhow, bail, Result};
use std::io::{BufRead, IsTerminal, Write};

pub fn run(a: &RollbackArgs) -> Result<u8> {
    let store: Store = resolve::store(a.root.as_deref(), a.prefix.as_deref());
    let entries = journal::list(&store)?;
    if a.list {
        if entries.is_empty() {
            println!(
                "No journal entries under {}.",
                store.path(journal::DIR).display()
            );
        } else {
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
            println!("{t}");
        }
        return Ok(exit::OK);
    }
    let mut entry = match &a.id {
        Some(id) => {
            let e = journal::load(&store, id)?;
            match e.state {
                State::RolledBack => {
                    bail!("entry {id} was already rolled back; nothing was changed")
                }
                State::Undone => bail!(
                    "entry {id} failed and was undone automatically; there is nothing to roll back"
                ),
                _ => e,
            }
        }
        None => entries
            .into_iter()
            .rev()
            .find(|e| matches!(e.state, State::Applied | State::Pending))
            .ok_or_else(|| {
                anyhow!(
                    "nothing to roll back: no applied entry under {}",
                    store.path(journal::DIR).display()
                )
            })?,
    };
    let backend = resolve::backend(a.root.as_deref(), a.prefix.as_deref())?;
    if !backend.privileged() {
        bail!("rollback changes kernel settings and files under /etc: run it as root. Nothing was changed.");
    }
    println!(
        "Rolling back entry {} ({}, {}):",
        entry.id,
        entry.profile,
        entry.state.as_str()
    );
    for r in &entry.runtime {
        println!(
            "  {} <- {}",
            r.path,
            r.old.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
    for l in &entry.limits {
        println!("  nofile of process {} <- {}:{}", l.pid, l.soft, l.hard);
    }
    for r in &entry.registry {
        println!(
            "  {}\\{} <- {}",
            r.key,
            r.value,
            r.old.as_deref().unwrap_or("(delete)")
        );
    }
    for f in &entry.files {
        println!(
            "  {} {}",
            f.path,
            if f.old.is_some() {
                "<- previous content"
            } else {
                "(remove: it did not exist)"
            }
        );
    }
    if !a.yes {
        if !std::io::stdin().is_terminal() {
            bail!("refusing to change the host without confirmation: not a terminal; pass --yes. Nothing was changed.");
        }
        eprint!("Restore these? [y/N] ");
        std::io::stderr().flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            bail!("aborted: nothing was changed");
        }
    }
    let errors = apply::restore(&entry, backend.as_ref(), &store);
    if !errors.is_empty() {
        bail!("could not restore: {}\nThe entry is kept as it was; fix the cause and run `wstune rollback --id {}` again.", errors.join("; "), entry.id);
    }
    entry.state = State::RolledBack;
    journal::save(&store, &entry)?;
    println!(
        "Restored entry {}: {} runtime value(s), {} file(s).",
        entry.id,
        entry.runtime.len() + entry.limits.len() + entry.registry.len(),
        entry.files.len()
    );
    Ok(exit::OK)
}
