//! The files wstune owns, addressed by their host path (`/etc/sysctl.d/60-wstune.conf`) and
//! placed under a base directory: `/` on a live host, `--prefix DIR` to see exactly what would be
//! written, or the `--root` tree. Every write is atomic (temporary file, fsync, rename, fsync of
//! the directory) so a crash leaves either the old file or the new one, never half of either.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Store {
    base: PathBuf,
    /// Where `/var/lib/wstune` (the journal) lives instead of `base/var/lib/wstune`: the live
    /// Windows host keeps it in `%ProgramData%\wstune`, where Windows operators look for a
    /// service's state. None elsewhere.
    state_dir: Option<PathBuf>,
}

/// The host path of wstune's own state; [`Store::with_state_dir`] can move it.
const STATE: &str = "/var/lib/wstune";

/// A file's bytes and permission bits, as the journal keeps them.
#[derive(Debug, Clone, PartialEq)]
pub struct FileState {
    pub bytes: Vec<u8>,
    pub mode: u32,
}

impl Store {
    pub fn new(base: &Path) -> Store {
        Store {
            base: base.to_path_buf(),
            state_dir: None,
        }
    }

    /// Keep `/var/lib/wstune/...` under `dir` instead (`/var/lib/wstune/journal` -> `dir\journal`).
    pub fn with_state_dir(mut self, dir: &Path) -> Store {
        self.state_dir = Some(dir.to_path_buf());
        self
    }

    pub fn path(&self, host_path: &str) -> PathBuf {
        if let (Some(dir), Some(rest)) = (&self.state_dir, host_path.strip_prefix(STATE)) {
            if rest.is_empty() || rest.starts_with('/') {
                return rest
                    .split('/')
                    .filter(|c| !c.is_empty())
                    .fold(dir.clone(), |p, c| p.join(c));
            }
        }
        self.base.join(host_path.trim_start_matches('/'))
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
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("cannot create a file in {}", dir.display()))?;
        tmp.write_all(&state.bytes)
            .with_context(|| format!("cannot write {}", p.display()))?;
        set_mode(tmp.path(), state.mode)?;
        tmp.as_file()
            .sync_all()
            .with_context(|| format!("cannot sync {}", p.display()))?;
        tmp.persist(&p)
            .with_context(|| format!("cannot replace {}", p.display()))?;
        sync_dir(dir);
        Ok(())
    }

    pub fn remove(&self, host_path: &str) -> Result<()> {
        let p = self.path(host_path);
        match std::fs::remove_file(&p) {
            Ok(()) => {
                if let Some(dir) = p.parent() {
                    sync_dir(dir);
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

#[cfg(unix)]
fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", p.display()))
}

#[cfg(not(unix))]
fn set_mode(_p: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

/// Make a rename durable. Best effort: not every file system supports syncing a directory.
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
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
