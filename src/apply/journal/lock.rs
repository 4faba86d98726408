//! One apply or rollback at a time: the journal's lock, and what it leaves when nothing was
//! changed (nothing).

use super::DIR;
use crate::host::store::{FileLock, Store};
use anyhow::Result;

/// The journal lock, held (exclusively) by a running apply or rollback until dropped.
#[derive(Debug)]
pub struct Lock {
    _lock: FileLock,
    /// The directories taking the lock created (no journal existed yet), outermost first.
    /// Dropped without [`Lock::keep`] (a refusal, nothing to change), the lock file and these
    /// go again, while the lock is still held: an apply that changed nothing leaves no trace.
    created: Vec<String>,
    store: Store,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        let _ = self.store.remove(&lock_path());
        for d in self.created.iter().rev() {
            self.store.remove_dir_if_empty(d);
        }
    }
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
        let created = store.missing_dirs(&lock_path());
        if let Err(e) = store.create_dirs(&created) {
            for d in created.iter().rev() {
                store.remove_dir_if_empty(d);
            }
            return Err(e);
        }
        let lock = FileLock::acquire(store, &lock_path(), |path| {
            format!(
                "another wstune apply or rollback is running (it holds {}); wait for it to finish. Nothing was changed.",
                path.display()
            )
        })?;
        Ok(Lock {
            _lock: lock,
            created,
            store: store.clone(),
        })
    }

    /// Keep the journal directory this lock created: an entry is saved in it now.
    pub fn keep(&mut self) {
        self.created.clear();
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
