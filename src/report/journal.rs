//! `rollback`'s words for people: the journal entries (`rollback --list`) and what restoring
//! one will put back.

use crate::apply::journal::{Damaged, Entry};
use crate::output;
use std::path::Path;

/// `rollback --list`: one row per entry, oldest first, the damaged ones last (they cannot be
/// read, so only their id is known; `check` is the command that says what to do, with the
/// flags that find this journal); `dir` is named when there is none.
pub fn entry_list(dir: &Path, entries: &[Entry], damaged: &[Damaged], check: &str) -> String {
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
            format!("damaged, cannot be read (`{check}` says what to do)"),
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
    for c in &entry.channels {
        lines.push(format!(
            "  {}'s channels <- rx {} tx {} combined {}",
            c.nic, c.old.rx, c.old.tx, c.old.combined
        ));
    }
    for r in &entry.rings {
        lines.push(format!("  {}'s receive ring <- {}", r.nic, r.old));
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
    for a in &entry.actions {
        if let crate::apply::plan::Op::TryRestart { unit } = &a.op {
            lines.push(format!(
                "  then systemctl try-restart {unit} (it rereads the restored files if it runs)"
            ));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        serde_json::from_value(serde_json::json!({
            "id": "20261201-120000-1", "created": "2026-12-01T12:00:00Z", "state": "applied",
            "profile": "100k (builtin:100k)", "actions": [],
            "runtime": [{"path": "/proc/sys/net/ipv4/tcp_rmem", "old": "4096\t131072\t6291456\n"}],
            "files": [{"path": "/etc/sysctl.d/60-wstune.conf", "old": null,
                       "new": {"base64": "", "mode": 420}}],
            "created_dirs": [], "limits": [{"pid": 42, "soft": 1024, "hard": 4096}],
            "registry": []
        }))
        .expect("a journal entry")
    }

    #[test]
    fn the_preview_names_each_value_and_file_to_put_back() {
        assert_eq!(
            restore_preview(&entry()),
            "Rolling back entry 20261201-120000-1 (100k (builtin:100k), applied):\n\
             \x20 /proc/sys/net/ipv4/tcp_rmem <- 4096 131072 6291456\n\
             \x20 nofile of process 42 <- 1024:4096\n\
             \x20 /etc/sysctl.d/60-wstune.conf (remove: it did not exist)"
        );
    }

    #[test]
    fn the_list_says_where_it_looked_when_empty_and_shows_damaged_entries() {
        let dir = Path::new("/var/lib/wstune/journal");
        assert_eq!(
            entry_list(dir, &[], &[], "wstune check"),
            "No journal entries under /var/lib/wstune/journal."
        );
        let damaged = Damaged {
            path: dir.join("20261201-130000-2.json"),
            error: "EOF".into(),
        };
        let t = entry_list(dir, &[entry()], &[damaged], "wstune check --root /srv/copy");
        assert!(
            t.contains("20261201-120000-1") && t.contains("applied"),
            "{t}"
        );
        assert!(
            t.contains("20261201-130000-2") && t.contains("damaged, cannot be read"),
            "{t}"
        );
        // The advice finds the same journal: a copy's, not the host's.
        assert!(t.contains("wstune check --root /srv/copy"), "{t}");
    }
}
