//! Entry files: one JSON file per apply, written atomically with its checksum, read back only
//! when the checksum and every path it names hold ([`super::check_paths`]); a damaged one is
//! named, never skipped silently.

use super::{check_paths, format_of, Entry, DIR, FORMAT};
use crate::host::store::{FileState, Store};
use anyhow::{bail, Result};

fn path_of(id: &str) -> String {
    format!("{DIR}/{id}.json")
}

/// The checksum of `entry`: sha256 of its compact JSON with `checksum` empty.
fn checksum_of(entry: &Entry) -> String {
    use sha2::Digest;
    let mut e = entry.clone();
    e.checksum.clear();
    let text = serde_json::to_string(&e).expect("an entry always serializes");
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Write (or rewrite) an entry atomically and durably, in the current [`FORMAT`] with its
/// checksum.
pub fn save(store: &Store, entry: &Entry) -> Result<()> {
    check_dir(store)?;
    let mut e = entry.clone();
    e.format = format_of(&e);
    e.checksum = checksum_of(&e);
    let text = serde_json::to_string_pretty(&e)?;
    store.write(
        &path_of(&entry.id),
        &FileState {
            bytes: text.into_bytes(),
            mode: 0o600,
            owner: None,
        },
    )
}

/// Refuse a journal directory (or the state directory above it) that someone but its owner
/// may write, or that another user owns, as sudo refuses such a sudoers file: whoever can
/// write an entry can make a rollback write any value wstune may restore.
pub fn check_dir(store: &Store) -> Result<()> {
    for host in [crate::host::layout::STATE, DIR] {
        let p = store.path(host);
        let Some(m) = store.ownership(host) else {
            continue;
        };
        let me = crate::host::process::effective_uid();
        if !m.real_dir {
            bail!(
                "the journal directory {} is not a directory (a link or a file): wstune keeps its journal only in a directory of its own. Fix: move it aside. Nothing was changed.",
                p.display()
            );
        }
        let mode = m.mode;
        if mode & 0o022 != 0 || (m.uid != 0 && Some(m.uid) != me) {
            bail!(
                "the journal directory {} is writable by others or owned by another user (mode {:o}, uid {}): anyone who can write there could make a rollback write what they like. Fix: chown root:root {p} && chmod 700 {p}. Nothing was changed.",
                p.display(),
                mode & 0o7777,
                m.uid,
                p = p.display()
            );
        }
    }
    Ok(())
}

pub fn load(store: &Store, id: &str) -> Result<Entry> {
    if id.is_empty() || id.contains('/') || id.contains("..") {
        bail!(
            "'{id}' is not a journal id; `wstune rollback --list{}` shows them",
            crate::apply::flags(store)
        );
    }
    let path = store.path(&path_of(id));
    if !store.occupied(&path_of(id)) {
        bail!(
            "no journal entry '{id}' ({}); `wstune rollback --list{}` shows them",
            path.display(),
            crate::apply::flags(store)
        );
    }
    let text = store.read_text(&path_of(id)).map_err(|e| {
        anyhow::anyhow!(
            "journal entry {} cannot be read ({e}): {}",
            path.display(),
            damaged_fix(&path, &crate::apply::flags(store))
        )
    })?;
    parse(&text, id).map_err(|e| {
        anyhow::anyhow!(
            "journal entry {} is damaged ({e}): {}",
            path.display(),
            damaged_fix(&path, &crate::apply::flags(store))
        )
    })
}

/// An entry, verified: it parses with no unknown field, its format is one this wstune knows,
/// its checksum matches, its id is its file's name, and every path in it is one wstune may own
/// ([`check_paths`]).
fn parse(text: &str, id: &str) -> std::result::Result<Entry, String> {
    // The format first: a newer entry's unknown fields are its format's, not damage.
    let format = serde_json::from_str::<serde_json::Value>(text)
        .map_err(|e| e.to_string())?
        .get("format")
        .map(|f| f.as_u64().unwrap_or(u64::MAX))
        .unwrap_or(1);
    if format > FORMAT as u64 {
        return Err(format!(
            "written by a newer wstune (journal format {format}; this one reads up to {FORMAT}): roll it back with that version"
        ));
    }
    if format < 1 {
        return Err(format!(
            "its journal format {format} is not one any wstune wrote (1 is the oldest)"
        ));
    }
    let e: Entry = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if e.format >= 2 {
        let want = checksum_of(&e);
        if e.checksum != want {
            return Err(
                "its checksum does not match its content (changed after it was written)".into(),
            );
        }
    }
    if e.id != id {
        return Err(format!("its id {} is not its file name's ({id})", e.id));
    }
    check_paths(&e)?;
    // Format 1 has no checksum; it never had these fields either. One that carries them was
    // changed after it was written (its format and checksum taken out, so nothing verifies it).
    if e.format < 2 {
        let newer = e.files.iter().any(|f| {
            f.link.is_some()
                || f.nlink != 0
                || f.new.owner.is_some()
                || f.old.as_ref().is_some_and(|o| o.owner.is_some())
        });
        if newer {
            return Err(
                "it has no format and no checksum (an entry of an older wstune), but carries fields only format 2 has (link, owner, nlink): no wstune wrote it so, it was changed after it was written".into(),
            );
        }
    }
    Ok(e)
}

/// What to do about an entry that cannot be read: nothing can roll it back automatically.
/// `flags`: the run's `--root`/`--prefix` ([`super::flags`]).
pub fn damaged_fix(path: &std::path::Path, flags: &str) -> String {
    format!(
        "compare the host with it by hand, then move it aside (mv {p} {p}.damaged); `wstune rollback --id ID{flags}` still restores the other entries",
        p = path.display()
    )
}

/// An entry file that does not parse, and why.
#[derive(Debug, Clone)]
pub struct Damaged {
    pub path: std::path::PathBuf,
    pub error: String,
}

/// Every readable entry, oldest first, and the damaged ones, for callers that must report a
/// damaged entry rather than stop at it (`check`).
pub fn scan(store: &Store) -> Result<(Vec<Entry>, Vec<Damaged>)> {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for id in ids(store)? {
        let path = store.path(&path_of(&id));
        let parsed = store.read_text(&path_of(&id)).and_then(|t| parse(&t, &id));
        match parsed {
            Ok(e) => good.push(e),
            Err(error) => bad.push(Damaged { path, error }),
        }
    }
    Ok((good, bad))
}

/// Every entry, oldest first. A damaged file is an error naming it, not skipped silently.
pub fn list(store: &Store) -> Result<Vec<Entry>> {
    ids(store)?.iter().map(|id| load(store, id)).collect()
}

/// The ids of the entry files, oldest first. The directory is checked first ([`check_dir`]).
fn ids(store: &Store) -> Result<Vec<String>> {
    check_dir(store)?;
    let mut ids: Vec<String> = store
        .list(DIR)?
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    ids.sort();
    Ok(ids)
}
