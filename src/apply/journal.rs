//! The journal: what a change replaced, written (and synced) before the first change, so that
//! `wstune rollback` can put everything back exactly, even after `apply` was killed midway.
//!
//! One JSON file per apply under `/var/lib/wstune/journal/` (under `--prefix` when given). Its
//! `state` records how far the apply got: `pending` (written, changes may be partial),
//! `applied`, `undone` (a failure was rolled back automatically), `rolled_back`,
//! `interrupted_undone` (a killed apply that the next apply restored before planning).
//!
//! One apply or rollback at a time: each holds an exclusive lock ([`Lock`], flock on
//! `DIR/.lock`) for as long as it runs. A `pending` entry whose lock is free was left by a process
//! that died; one whose lock is held belongs to an apply still running.

use super::plan::Action;
use crate::host::store::{FileLock, FileState, Store};
use anyhow::{bail, Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/var/lib/wstune/journal";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Pending,
    Applied,
    Undone,
    RolledBack,
    /// A killed apply's entry, restored by the next apply before it planned its own changes.
    InterruptedUndone,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending (interrupted: roll it back)",
            State::Applied => "applied",
            State::Undone => "undone after a failure",
            State::RolledBack => "rolled back",
            State::InterruptedUndone => "interrupted, undone by the next apply",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub created: String,
    pub state: State,
    /// The profile that was applied (name and source).
    pub profile: String,
    pub actions: Vec<Action>,
    /// Runtime values before the change, exactly as the kernel printed them.
    pub runtime: Vec<OldRuntime>,
    /// Files before the change (`old: null`: it did not exist), and what was written.
    pub files: Vec<OldFile>,
    /// Directories this apply created, outermost first.
    pub created_dirs: Vec<String>,
    pub limits: Vec<OldLimits>,
    pub registry: Vec<OldRegistry>,
    /// Why an apply failed, when it did.
    #[serde(default)]
    pub failure: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OldRuntime {
    pub path: String,
    pub old: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OldFile {
    pub path: String,
    pub old: Option<Blob>,
    pub new: Blob,
}

/// File bytes (base64, so any content survives JSON exactly) and permission bits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blob {
    pub base64: String,
    pub mode: u32,
}

impl From<&FileState> for Blob {
    fn from(s: &FileState) -> Blob {
        Blob {
            base64: base64::engine::general_purpose::STANDARD.encode(&s.bytes),
            mode: s.mode,
        }
    }
}

impl Blob {
    pub fn state(&self) -> Result<FileState> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.base64)
            .context("the journal's file content is not valid base64")?;
        Ok(FileState {
            bytes,
            mode: self.mode,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OldLimits {
    pub pid: u32,
    pub soft: u64,
    pub hard: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OldRegistry {
    pub key: String,
    pub value: String,
    pub kind: crate::host::RegType,
    /// None: the value did not exist.
    pub old: Option<String>,
}

/// A sortable id: UTC time to the nanosecond.
pub fn new_id() -> String {
    let now = std::time::SystemTime::now();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let secs = humantime::format_rfc3339_seconds(now).to_string(); // 2026-11-30T00:25:12Z
    let compact: String = secs
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    format!("{compact}.{nanos:09}")
}

fn path_of(id: &str) -> String {
    format!("{DIR}/{id}.json")
}

/// Write (or rewrite) an entry atomically and durably.
pub fn save(store: &Store, entry: &Entry) -> Result<()> {
    let text = serde_json::to_string_pretty(entry)?;
    store.write(
        &path_of(&entry.id),
        &FileState {
            bytes: text.into_bytes(),
            mode: 0o600,
        },
    )
}

pub fn load(store: &Store, id: &str) -> Result<Entry> {
    if id.is_empty() || id.contains('/') || id.contains("..") {
        bail!("'{id}' is not a journal id; `wstune rollback --list` shows them");
    }
    let path = store.path(&path_of(id));
    let text = store.read_text(&path_of(id)).with_context(|| {
        format!(
            "no journal entry '{id}' ({}); `wstune rollback --list` shows them",
            path.display()
        )
    })?;
    parse(&text).map_err(|e| {
        anyhow::anyhow!(
            "journal entry {} is damaged ({e}): {}",
            path.display(),
            damaged_fix(&path)
        )
    })
}

fn parse(text: &str) -> std::result::Result<Entry, serde_json::Error> {
    serde_json::from_str(text)
}

/// What to do about an entry that cannot be read: nothing can roll it back automatically.
pub fn damaged_fix(path: &std::path::Path) -> String {
    format!(
        "compare the host with it by hand, then move it aside (mv {p} {p}.damaged); `wstune rollback --id ID` still restores the other entries",
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
        let parsed = store
            .read_text(&path_of(&id))
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t).map_err(|e| e.to_string()));
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

/// The ids of the entry files, oldest first.
fn ids(store: &Store) -> Result<Vec<String>> {
    let mut ids: Vec<String> = store
        .list(DIR)?
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    ids.sort();
    Ok(ids)
}

/// The journal lock, held (exclusively) by a running apply or rollback until dropped.
#[derive(Debug)]
pub struct Lock {
    _lock: FileLock,
}

/// Whether an apply or rollback holds the lock right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    Free,
    Held,
}

fn lock_path() -> String {
    format!("{DIR}/.lock")
}

impl Lock {
    /// Take the lock, or fail at once (never wait) naming what holds it.
    pub fn acquire(store: &Store) -> Result<Lock> {
        let lock = FileLock::acquire(store, &lock_path(), |path| {
            format!(
                "another wstune apply or rollback is running (it holds {}); wait for it to finish. Nothing was changed.",
                path.display()
            )
        })?;
        Ok(Lock { _lock: lock })
    }

    /// Take the lock if the journal directory exists; None when it does not (no apply ever
    /// ran: nothing to recover, and nothing is created yet).
    pub fn acquire_existing(store: &Store) -> Result<Option<Lock>> {
        if store.is_dir(DIR) {
            Lock::acquire(store).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Whether someone holds the lock, without taking it or creating anything (for `check`).
    pub fn probe(store: &Store) -> LockState {
        if FileLock::held(store, &lock_path()) {
            LockState::Held
        } else {
            LockState::Free
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_sort_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let a = new_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_id();
        assert!(a < b, "{a} < {b}");
        for id in [&b, &a] {
            let e = Entry {
                id: id.clone(),
                created: "now".into(),
                state: State::Pending,
                profile: "100k".into(),
                actions: vec![],
                runtime: vec![OldRuntime {
                    path: "/proc/sys/x".into(),
                    old: "1\t2\n".into(),
                }],
                files: vec![OldFile {
                    path: "/etc/x".into(),
                    old: None,
                    new: Blob::from(&FileState {
                        bytes: vec![0, 255, 10],
                        mode: 0o644,
                    }),
                }],
                created_dirs: vec![],
                limits: vec![],
                registry: vec![],
                failure: None,
            };
            save(&store, &e).unwrap();
        }
        let all = list(&store).unwrap();
        assert_eq!(
            all.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
            vec![a.clone(), b]
        );
        assert_eq!(all[0].files[0].new.state().unwrap().bytes, vec![0, 255, 10]);
        assert_eq!(all[0].runtime[0].old, "1\t2\n");
        assert!(load(&store, "../etc/passwd").is_err());
        assert!(load(&store, "nope")
            .unwrap_err()
            .to_string()
            .contains("rollback --list"));
    }
}
