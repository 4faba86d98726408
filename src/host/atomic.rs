//! The one atomic file writer: every file wstune writes (reports, exports, man pages, the
//! files it owns under /etc, its journal, a captured tree's registry.yaml and limits) goes
//! through [`write`]. A temporary file in the same directory, fsync, rename over the old one,
//! fsync of the directory: a crash or a full disk leaves the old file or the new one, never
//! half of either, and a reader (CI picking up a report, `sysctl --system` at boot) never sees
//! a partial file.

use crate::host::input::io_words;
use anyhow::{anyhow, Context, Result};
use std::io::Write;
use std::path::Path;

/// The permission bits the new file gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Exactly these (the files wstune owns and its journal: the journal restores a file's
    /// old mode with its bytes).
    Exact(u32),
    /// Those of the file it replaces (and its owner and group, where allowed), else 0666 less
    /// the umask, like any other tool's output. A report is read by other users:
    /// node_exporter's textfile collector runs unprivileged and cannot read a 0600 `.prom`
    /// file written by root, and an operator who chose 0640 for a group must not find it reset
    /// on the next run.
    LikeExisting,
}

/// How every temporary file of [`write`] starts, so that wstune can tell its own leftovers (a
/// write killed between the temporary file and the rename) from anything else in a directory
/// and remove them ([`remove_temporaries`]).
pub const TEMP_PREFIX: &str = ".wstune-tmp.";

/// Write `bytes` to `path` atomically and durably, with `mode`. The directory must exist.
pub fn write(path: &Path, bytes: &[u8], mode: Mode) -> Result<()> {
    write_owned(path, bytes, mode, None)
}

/// [`write`], and give the new file `owner` (uid, gid) before it replaces the old one, so a
/// restored file is never seen with the wrong owner.
pub fn write_owned(path: &Path, bytes: &[u8], mode: Mode, owner: Option<(u32, u32)>) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // The OS's words once: tempfile's errors carry the error as their source too, and `{:#}`
    // printed it twice.
    let mut tmp = new_temp_in(dir).map_err(|e| {
        anyhow!(
            "cannot create a file in {} to write {}: {}",
            dir.display(),
            path.display(),
            io_words(&e)
        )
    })?;
    if let Some(owner) = owner {
        // Before the chmod: a chown clears set-id bits.
        set_owner(tmp.as_file(), owner)
            .map_err(|e| anyhow!("cannot give {} its owner: {}", path.display(), io_words(&e)))?;
    }
    // After the owner (a chown drops some), before the mode (an ACL is one and sets the group
    // bits, which the mode then decides).
    keep_xattrs_of(path, tmp.as_file(), matches!(mode, Mode::Exact(_))).map_err(|e| {
        anyhow!(
            "cannot give the new {} the old one's extended attribute {e}; nothing was replaced",
            path.display()
        )
    })?;
    match mode {
        Mode::Exact(bits) => set_mode(tmp.as_file(), bits)
            .map_err(|e| anyhow!("cannot chmod {}: {}", tmp.path().display(), io_words(&e)))?,
        Mode::LikeExisting => keep_mode_of(path, tmp.as_file()).with_context(|| {
            format!("cannot give the new {} the old one's mode", path.display())
        })?,
    }
    tmp.write_all(bytes)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), io_words(&e)))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| anyhow!("cannot sync {}: {}", path.display(), io_words(&e)))?;
    crate::failpoint::pause_in_write();
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot replace {}: {}", path.display(), io_words(&e.error)))?;
    sync_dir(dir);
    Ok(())
}

/// Remove the temporaries a killed [`write`] left in `dir` (only files named [`TEMP_PREFIX`]...).
/// Returns the names removed. The caller must hold the journal lock: a running writer's
/// temporary is not a leftover.
pub fn remove_temporaries(dir: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        // A file, or the link Store::relink was about to rename into place.
        let is_file = e
            .file_type()
            .map(|t| t.is_file() || t.is_symlink())
            .unwrap_or(false);
        if is_file && name.starts_with(TEMP_PREFIX) && std::fs::remove_file(e.path()).is_ok() {
            removed.push(name);
        }
    }
    if !removed.is_empty() {
        sync_dir(dir);
    }
    removed
}

/// Check, before a long run, that [`write`] will be able to write `path`: `path` is not a
/// directory and its directory exists and takes a new file (a temporary one, created with the
/// same call [`write`] uses and removed at once). `flag` names the option in the error.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!(
            "{flag} {}: is a directory; give a file name",
            path.display()
        );
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    new_temp_in(dir).map_err(|e| {
        anyhow!(
            "{flag} {}: cannot create a file in {} (does the directory exist, is it writable?): {}",
            path.display(),
            dir.display(),
            io_words(&e)
        )
    })?;
    Ok(())
}

/// A temporary file created with mode 0666, which the kernel reduces by the umask. (tempfile's
/// default, 0600, is right for secrets, wrong for reports.)
fn new_temp_in(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut b = tempfile::Builder::new();
    b.prefix(TEMP_PREFIX);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666));
    }
    b.tempfile_in(dir)
}

#[cfg(unix)]
fn set_owner(f: &std::fs::File, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata()?;
    if (m.uid(), m.gid()) == (uid, gid) {
        return Ok(());
    }
    std::os::unix::fs::fchown(f, Some(uid), Some(gid))
}

#[cfg(not(unix))]
fn set_owner(_f: &std::fs::File, _owner: (u32, u32)) -> std::io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn set_mode(f: &std::fs::File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_f: &std::fs::File, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

/// Give `new` the permission bits of the regular file at `path`, when there is one, and its
/// owner and group when this process may (root); otherwise leave the umask's mode. Only the
/// rwx bits are copied: a report must never inherit set-id bits.
#[cfg(unix)]
fn keep_mode_of(path: &Path, new: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(old) = std::fs::metadata(path) else {
        return Ok(());
    };
    if !old.is_file() {
        return Ok(());
    }
    let mine = new.metadata()?;
    if (old.uid(), old.gid()) != (mine.uid(), mine.gid()) {
        // Best effort: only root may give a file away; an unprivileged writer keeps its own.
        // Before the chmod, since a chown clears set-id bits and may touch the mode.
        let _ = std::os::unix::fs::fchown(new, Some(old.uid()), Some(old.gid()));
    }
    new.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o777))
}

#[cfg(not(unix))]
fn keep_mode_of(_path: &Path, _new: &std::fs::File) -> std::io::Result<()> {
    Ok(())
}

/// Give `new` the extended attributes of the regular file at `path` that it replaces (SELinux's
/// label, an ACL, an operator's `user.*` marks): a rename would otherwise drop them, and a
/// rollback, written the same way, could not put them back. Not those bound to the old bytes
/// or program (IMA's hash, EVM's signature, file capabilities). A file system without extended
/// attributes has none to keep. `strict` (wstune's own files and journal): a `user.*` or
/// `system.*` (an ACL) one that cannot be set is an error naming it; otherwise (a report)
/// kept where allowed, like the owner. A `security.*` one (SELinux's label) is always best
/// effort: a confining domain may not relabel files (EACCES, EPERM), and the module labels
/// the new file itself. One the new file already has is not set again (the usual SELinux case:
/// the new file got the directory's label, the same as the old one's).
#[cfg(target_os = "linux")]
fn keep_xattrs_of(path: &Path, new: &std::fs::File, strict: bool) -> std::io::Result<()> {
    use xattr::FileExt;
    const BOUND_TO_CONTENT: [&str; 3] = ["security.ima", "security.evm", "security.capability"];
    let unsupported = |e: &std::io::Error| e.raw_os_error() == Some(libc::EOPNOTSUPP);
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let names = match xattr::list(path) {
        Ok(names) => names,
        Err(e) if unsupported(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        if BOUND_TO_CONTENT.iter().any(|n| name == *n) {
            continue;
        }
        let shown = name.to_string_lossy().into_owned();
        let named =
            |e: std::io::Error| std::io::Error::new(e.kind(), format!("{shown}: {}", io_words(&e)));
        let Some(value) = xattr::get(path, &name).map_err(named)? else {
            continue;
        };
        if new.get_xattr(&name).ok().flatten().as_deref() == Some(value.as_slice()) {
            continue;
        }
        let best_effort = !strict || shown.starts_with("security.");
        match new.set_xattr(&name, &value) {
            Ok(()) => {}
            Err(e) if unsupported(&e) || best_effort => {}
            Err(e) => return Err(named(e)),
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn keep_xattrs_of(_path: &Path, _new: &std::fs::File, _strict: bool) -> std::io::Result<()> {
    Ok(())
}

/// Make a rename or removal durable. Best effort: not every file system syncs a directory.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// This process's umask, read without changing it (umask(2) is process-wide and tests run
    /// in parallel threads).
    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
    }

    #[test]
    fn new_files_follow_the_umask_and_existing_files_keep_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh.prom");
        write(&fresh, b"a\n", Mode::LikeExisting).unwrap();
        assert_eq!(
            mode(&fresh),
            0o666 & !umask(),
            "a new file: 0666 less the umask"
        );

        let kept = dir.path().join("kept.prom");
        std::fs::write(&kept, "old\n").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        write(&kept, b"new\n", Mode::LikeExisting).unwrap();
        assert_eq!(mode(&kept), 0o640, "an existing 0640 file stays 0640");
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "new\n");

        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o4755)).unwrap();
        write(&kept, b"x\n", Mode::LikeExisting).unwrap();
        assert_eq!(mode(&kept), 0o755, "set-id bits are never carried over");

        write(&kept, b"y\n", Mode::Exact(0o600)).unwrap();
        assert_eq!(mode(&kept), 0o600, "an exact mode is exactly that");
    }
}

/// Create the directories a file at `path` goes in (an export writes a tree of files).
pub fn create_parents(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir),
        None => Ok(()),
    }
}

/// Make `path` executable by everyone (0755), as a script must be that is copied into place
/// with `cp -r` and executed by a daemon.
#[cfg(unix)]
pub fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

/// Not Unix: a file's being executable is its name's business, so there is nothing to set.
#[cfg(not(unix))]
pub fn make_executable(_path: &Path) -> std::io::Result<()> {
    Ok(())
}
