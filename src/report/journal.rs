//! `rollback`'s words for people: the journal entries (`rollback --list`) and what restoring
//! one will put back.

use crate::apply::journal::{Damaged, Entry};
use crate::output;
use std::path::Path;

/// `rollback --list`: one row per entry, oldest first, the damaged ones last (they cannot be
/// read, so only their id is known); `dir` is named when there is none.
pub fn entry_list(dir: &Path, entries: &[Entry], damaged: &[Damaged]) -> String {
    if entries.is_empty() && damaged.is_empty() {
        return format!("No journal entries under {}.", dir.display());
    }
    let mut t = output::new_table();
    t.set_header(vec!["Id", "Created", "Profile", "Changes", "State"]);
    for e in entries {
        t.add_row(vec![
            e.id.clone(),
            e.created.clone(),
            e.profile.clone(),
            e.actions.len().to_string(),
            e.state.as_str().to_string(),
        ]);
    }
    for d in damaged {
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
    t.to_string()
}

/// What restoring `entry` puts back, one line per value or file, before it is confirmed.
pub fn restore_preview(entry: &Entry) -> String {
    let mut lines = vec![format!(
        "Rolling back entry {} ({}, {}):",
        entry.id,
        entry.profile,
        entry.state.as_str()
    )];
    for r in &entry.runtime {
        lines.push(format!(
            "  {} <- {}",
            r.path,
            r.old.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    for l in &entry.limits {
        lines.push(format!(
            "  nofile of process {} <- {}:{}",
            l.pid, l.soft, l.hard
        ));
    }
    for r in &entry.registry {
        lines.push(format!(
            "  {}\\{} <- {}",
            r.key,
            r.value,
            r.old.as_deref().unwrap_or("(delete)")
        ));
    }
    for f in &entry.files {
        lines.push(format!(
            "  {} {}",
            f.path,
            if f.old.is_some() {
                "<- previous content"
            } else {
                "(remove: it did not exist)"
            }
        ));
    }
    lines.join("\n")
}
