//! The files wstune owns (its /etc files, its journal), addressed by their host path
//! (`/etc/sysctl.d/60-wstune.conf`) and placed by the host's [`Layout`]: `/` on a live host,
//! `--prefix DIR` to see exactly what would be written, or the `--root` tree. Every write goes
//! through the one atomic writer (host/atomic.rs), so a crash leaves either the old file or
//! the new one, never half of either. `apply` and its journal touch files only through this.

use super::atomic::{self, Mode};
use super::layout::Layout;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Store {
    layout: Layout,
}

/// A file's bytes and permission bits, as the journal keeps them.
#[derive(Debug, Clone, PartialEq)]
pub struct FileState {
    pub bytes: Vec<u8>,
    pub mode: u32,
}

impl Store {
    pub fn new(base: &Path) -> Store {
        Store {
            layout: Layout::at(base),
        }
    }

    /// The files as `layout` places them (the same layout the backend reads through).
    pub fn with_layout(layout: Layout) -> Store {
        Store { layout }
    }

    /// Keep `/var/lib/wstune/...` under `dir` instead (`/var/lib/wstune/journal` -> `dir\journal`).
    pub fn with_state_dir(mut self, dir: &Path) -> Store {
        self.layout = self.layout.with_state_dir(dir);
        self
    }

    /// Where `host_path` is on disk.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.layout.path(host_path)
    }

    /// A file's text (a journal entry); the error is the OS's.
    pub fn read_text(&self, host_path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(self.path(host_path))
    }

    /// The entry names of a directory, unsorted; None when it does not exist.
    pub fn list(&self, host_dir: &str) -> Result<Option<Vec<String>>> {
        let dir = self.path(host_dir);
        match std::fs::read_dir(&dir) {
            Ok(rd) => Ok(Some(
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .collect(),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
        }
    }

    pub fn is_dir(&self, host_path: &str) -> bool {
        self.path(host_path).is_dir()
    }

    /// The file's state, or None when it does not exist.
    pub fn read(&self, host_path: &str) -> Result<Option<FileState>> {
        let p = self.path(host_path);
        match std::fs::read(&p) {
            Ok(bytes) => Ok(Some(FileState {
                bytes,
                mode: mode_of(&p)?,
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
        }
    }

    /// Create the parent directories that are missing; returns them (host paths), outermost
    /// first, so a rollback can remove exactly those.
    pub fn missing_dirs(&self, host_path: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = Path::new(host_path).parent();
        while let Some(dir) = cur {
            let s = dir.to_string_lossy().to_string();
            if s == "/" || s.is_empty() || self.path(&s).exists() {
                break;
            }
            out.push(s);
            cur = dir.parent();
        }
        out.reverse();
        out
    }

    pub fn write(&self, host_path: &str, state: &FileState) -> Result<()> {
        let p = self.path(host_path);
        let dir = p.parent().expect("host paths are absolute");
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        atomic::write(&p, &state.bytes, Mode::Exact(state.mode))
    }

    pub fn remove(&self, host_path: &str) -> Result<()> {
        let p = self.path(host_path);
        match std::fs::remove_file(&p) {
            Ok(()) => {
                if let Some(dir) = p.parent() {
                    atomic::sync_dir(dir);
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot remove {}", p.display())),
        }
    }

    /// Remove a directory wstune created, if nothing else has been put in it since.
    pub fn remove_dir_if_empty(&self, host_path: &str) {
        let _ = std::fs::remove_dir(self.path(host_path));
    }
}

#[cfg(unix)]
fn mode_of(p: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(p)
        .with_context(|| format!("cannot stat {}", p.display()))?
        .permissions()
        .mode()
        & 0o7777)
}

#[cfg(not(unix))]
fn mode_of(_p: &Path) -> Result<u32> {
    Ok(0o644)
}

/// An advisory lock on a file (flock), held until dropped: the journal's, so two applies or
/// rollbacks never run at once.
#[derive(Debug)]
pub struct FileLock {
    _file: std::fs::File,
}

impl FileLock {
    /// Take the lock on `host_path` (creating it and its directory), or fail at once, never
    /// wait: `busy` is the message when another process holds it.
    pub fn acquire(
        store: &Store,
        host_path: &str,
        busy: impl FnOnce(&Path) -> String,
    ) -> Result<FileLock> {
        let path = store.path(host_path);
        let dir = path.parent().expect("host paths are absolute");
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open the journal lock {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(FileLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => bail!(busy(&path)),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }

    /// Whether another process holds the lock on `host_path`, without taking it or creating
    /// anything.
    pub fn held(store: &Store, host_path: &str) -> bool {
        let Ok(file) = std::fs::File::open(store.path(host_path)) else {
            return false;
        };
        matches!(
            file.try_lock_shared(),
            Err(std::fs::TryLockError::WouldBlock)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_remove_keep_bytes_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::new(dir.path());
        assert_eq!(s.read("/etc/a/b.conf").unwrap(), None);
        assert_eq!(
            s.missing_dirs("/etc/a/b.conf"),
            vec!["/etc".to_string(), "/etc/a".to_string()]
        );
        let st = FileState {
            bytes: b"x = 1\n\xff".to_vec(),
            mode: 0o600,
        };
        s.write("/etc/a/b.conf", &st).unwrap();
        assert_eq!(s.read("/etc/a/b.conf").unwrap(), Some(st));
        assert!(s.missing_dirs("/etc/a/b.conf").is_empty());
        s.remove("/etc/a/b.conf").unwrap();
        s.remove("/etc/a/b.conf").unwrap();
        s.remove_dir_if_empty("/etc/a");
        assert!(!dir.path().join("etc/a").exists());
    }

    /// Windows keeps the journal in %ProgramData%\wstune\journal, not under a /var tree.
    #[test]
    fn a_lock_is_exclusive_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::new(dir.path());
        assert!(!FileLock::held(&s, "/var/lib/wstune/journal/.lock"));
        let l = FileLock::acquire(&s, "/var/lib/wstune/journal/.lock", |_| "busy".into()).unwrap();
        assert!(FileLock::held(&s, "/var/lib/wstune/journal/.lock"));
        let again = FileLock::acquire(&s, "/var/lib/wstune/journal/.lock", |_| "busy".into());
        assert_eq!(again.unwrap_err().to_string(), "busy");
        drop(l);
        assert!(!FileLock::held(&s, "/var/lib/wstune/journal/.lock"));
    }

    #[test]
    fn the_state_dir_moves_only_var_lib_wstune() {
        let s = Store::new(Path::new("/base")).with_state_dir(Path::new("/pd/wstune"));
        assert_eq!(
            s.path("/var/lib/wstune/journal/.lock"),
            Path::new("/pd/wstune/journal/.lock")
        );
        assert_eq!(s.path("/var/lib/wstune"), Path::new("/pd/wstune"));
        assert_eq!(
            s.path("/var/lib/wstunex"),
            Path::new("/base/var/lib/wstunex")
        );
        assert_eq!(s.path("/etc/x.conf"), Path::new("/base/etc/x.conf"));
    }
}
