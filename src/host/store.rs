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

/// Who owns a path and who may write it ([`Store::ownership`]).
#[derive(Debug, Clone, Copy)]
pub struct Ownership {
    /// A directory itself, not a link to one nor a file.
    pub real_dir: bool,
    /// The permission bits (`st_mode`).
    pub mode: u32,
    pub uid: u32,
}

/// A file's bytes, permission bits and owner, as the journal keeps them.
#[derive(Debug, Clone, PartialEq)]
pub struct FileState {
    pub bytes: Vec<u8>,
    pub mode: u32,
    /// Owner and group (uid, gid); None: whatever the writer creates (a new file, or a platform
    /// without owners).
    pub owner: Option<(u32, u32)>,
}

/// What a path is besides its content, so that a rollback puts back the same kind of thing:
/// wstune writes through a symbolic link to a plain file beside it, and restores the link. A
/// file with hard links is refused (see [`Store::shape`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shape {
    /// The path is a symbolic link with this target (as readlink gives it).
    pub link: Option<String>,
    /// How many names the file (the link's target) has; more than 1: hard links.
    pub nlink: u64,
}

/// The largest file of wstune's own (a journal entry, a file under /etc it owns) it reads: far
/// above any real one, and a bound on what a hostile file (a link to /dev/zero) can cost.
pub const MAX_OWN_FILE: u64 = 16 << 20;

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

    /// Where the files are: the live host, the `--root` tree, `--prefix`.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Where `host_path` is on disk.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.layout.path(host_path)
    }

    /// A file's text (a journal entry), through the bounded reader: a FIFO, a device or a link
    /// to one is refused at once (never opened for a blocking read), as is a file over
    /// [`MAX_OWN_FILE`] or one that is not UTF-8.
    pub fn read_text(&self, host_path: &str) -> std::result::Result<String, String> {
        use crate::host::input::{io_words, read_bounded, Refused};
        read_bounded(&self.path(host_path), MAX_OWN_FILE, None).map_err(|r| match r {
            Refused::Io(e) => io_words(&e),
            Refused::Directory => "is a directory".into(),
            Refused::NotRegular => "is not a regular file (a FIFO, device or socket): wstune writes only plain files there".into(),
            Refused::Outside(p) => format!("leads outside ({})", p.display()),
            Refused::TooLarge(cap) => format!("is larger than {} MiB, which no journal entry is", cap >> 20),
            Refused::NotUtf8 => "is not UTF-8 text".into(),
        })
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

    /// Whether anything is at `host_path`: a file, a directory, or a link, dangling or not.
    pub fn occupied(&self, host_path: &str) -> bool {
        std::fs::symlink_metadata(self.path(host_path)).is_ok()
    }

    /// A directory's kind, permission bits and owner, not following a link at `host_path`
    /// (None: nothing there). What a check of who may write there needs.
    /// Not Unix: None, as there are no mode bits to check (Windows guards a directory with its
    /// ACL, which the state directory inherits from ProgramData's).
    #[cfg(not(unix))]
    pub fn ownership(&self, _host_path: &str) -> Option<Ownership> {
        None
    }

    #[cfg(unix)]
    pub fn ownership(&self, host_path: &str) -> Option<Ownership> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::symlink_metadata(self.path(host_path)).ok()?;
        Some(Ownership {
            real_dir: !m.file_type().is_symlink() && m.is_dir(),
            mode: m.permissions().mode(),
            uid: m.uid(),
        })
    }

    pub fn is_dir(&self, host_path: &str) -> bool {
        self.path(host_path).is_dir()
    }

    /// The file's state (through a symbolic link: its target's), or None when it does not
    /// exist. Only a regular file of at most [`MAX_OWN_FILE`] is read: a FIFO or a device in
    /// its place is an error, never a read that blocks or does not end.
    pub fn read(&self, host_path: &str) -> Result<Option<FileState>> {
        let p = self.path(host_path);
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if std::fs::symlink_metadata(&p).is_ok() {
                    bail!(
                        "{} is a symbolic link to {}, which does not exist (or loops); wstune writes only what it can put back exactly, so it changes nothing. Fix: remove the link or make it lead to a file under /etc",
                        p.display(),
                        link_text(&p)
                    );
                }
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
        };
        if !meta.is_file() {
            bail!(
                "{} is not a regular file (a directory, FIFO, device or socket); wstune owns only plain files there: move it aside",
                p.display()
            );
        }
        self.refuse_outside_tree(&p, host_path)?;
        let bytes = read_capped(&p)?;
        Ok(Some(FileState {
            bytes,
            mode: mode_bits(&meta),
            owner: owner_of(&meta),
        }))
    }

    /// A captured tree (`--root`) answers only from its own files: the backend that `check`
    /// and the plan read through refuses a link leading out of it (host/fixture.rs), so this
    /// store refuses it too, rather than read, merge and replace a file of the machine wstune
    /// runs on, or see it as changed since the check. A link is not resolved inside the tree as
    /// a chroot would: `/etc/x` in a link there names this machine's /etc/x.
    fn refuse_outside_tree(&self, p: &Path, host_path: &str) -> Result<()> {
        if self.layout.tree().is_none() {
            return Ok(());
        }
        let base = self.layout.base(host_path);
        let base = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
        let real = p
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", p.display()))?;
        if real.starts_with(&base) {
            return Ok(());
        }
        bail!(
            "{} is a link to {}, outside the tree {}: a captured tree answers only from its own files (check cannot read it either), so wstune changes nothing. Fix: put the file itself in the tree in the link's place (cp --remove-destination \"$(readlink -f {p})\" {p}), or remove the link",
            p.display(),
            real.display(),
            base.display(),
            p = p.display()
        )
    }

    /// What `host_path` is (a link), or None when nothing is there. Refuses what wstune cannot
    /// write through and put back exactly: a dangling link or a loop, a link to anything but a
    /// plain file beside it in the same directory, a file with hard links, or a path whose
    /// directory really is outside the tree it belongs to (`/etc` for its configuration, its
    /// state directory for the journal).
    pub fn shape(&self, host_path: &str) -> Result<Option<Shape>> {
        match self.real_dir(host_path, false)? {
            Some(dir) => self.shape_at(&dir.join(file_name(host_path)), host_path),
            None => Ok(None),
        }
    }

    /// [`Store::shape`] of `p`, the path in its real directory ([`Store::real_dir`]).
    fn shape_at(&self, p: &Path, host_path: &str) -> Result<Option<Shape>> {
        let p = p.to_path_buf();
        let lmeta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot stat {}", p.display())),
        };
        let refuse = |why: String| {
            anyhow::anyhow!(
                "{} {why}; wstune writes only what it can put back exactly, so it changes nothing. Fix: replace the link with the file itself (cp --remove-destination \"$(readlink -f {p})\" {p}) or move it aside",
                p.display(),
                p = p.display()
            )
        };
        if lmeta.file_type().is_symlink() {
            let target = link_text(&p);
            let real = match p.canonicalize() {
                Ok(r) => r,
                Err(_) => {
                    return Err(refuse(format!(
                        "is a symbolic link to {target}, which does not exist or loops"
                    )))
                }
            };
            let allowed = self.allowed_tree(host_path);
            if !real.starts_with(&allowed) {
                return Err(refuse(format!(
                    "is a symbolic link to {}, outside {}",
                    real.display(),
                    allowed.display()
                )));
            }
            let dir = p.parent().expect("a path in a directory");
            if let Err(why) = beside(dir, &target) {
                return Err(refuse(format!(
                    "is a symbolic link to {target} ({}), {why}: wstune writes through a link only to a plain file beside it in {}, never over another file's whole content (limits.conf, say)",
                    real.display(),
                    dir.display()
                )));
            }
            let meta = std::fs::metadata(&real)
                .with_context(|| format!("cannot stat {}", real.display()))?;
            refuse_hard_links(&real, &meta)?;
            return Ok(Some(Shape {
                link: Some(target),
                nlink: nlink_of(&meta),
            }));
        }
        if !lmeta.is_file() {
            bail!(
                "{} is not a regular file (a directory, FIFO, device or socket); wstune owns only plain files there: move it aside. Nothing was changed.",
                p.display()
            );
        }
        refuse_hard_links(&p, &lmeta)?;
        Ok(Some(Shape {
            link: None,
            nlink: nlink_of(&lmeta),
        }))
    }

    /// The real directory a link at `host_path` may lead into.
    fn allowed_tree(&self, host_path: &str) -> PathBuf {
        let top = if host_path.starts_with(super::layout::STATE) {
            super::layout::STATE
        } else {
            "/etc"
        };
        resolve_existing(&self.path(top))
    }

    /// `host_path`'s directory as it really is (every link in it resolved), refused unless it
    /// is inside the tree the path belongs to ([`Store::allowed_tree`]): a link in a parent
    /// (`etc/security/limits.d -> /tmp/x`) must not carry a write, a removal or a new link out
    /// of it. `create`: make what is missing first (inside the tree only). None: it does not
    /// exist (and `create` is false).
    fn real_dir(&self, host_path: &str, create: bool) -> Result<Option<PathBuf>> {
        let p = self.path(host_path);
        let dir = p.parent().expect("host paths are absolute");
        let allowed = self.allowed_tree(host_path);
        let outside = |real: &Path| {
            anyhow::anyhow!(
                "{} leads to {} (a symbolic link in a directory above the file), outside {}; wstune writes only inside the tree its files belong to, so it changes nothing. Fix: make it a real directory (or move the link aside)",
                dir.display(),
                real.display(),
                allowed.display()
            )
        };
        let known = resolve_existing(dir);
        if !known.starts_with(&allowed) {
            return Err(outside(&known));
        }
        if !dir.is_dir() {
            if !create {
                return Ok(None);
            }
            // Created by its resolved name: nothing here follows a link made meanwhile
            // above the part that already existed.
            std::fs::create_dir_all(&known)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let real = dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        if !real.starts_with(&allowed) {
            return Err(outside(&real));
        }
        Ok(Some(real))
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

    /// Create `dirs` (host paths, outermost first, as [`Store::missing_dirs`] gives them) with
    /// their modes set, not left to the umask: wstune's state directory and what is under it
    /// 0700 (the journal check refuses one others can write, and with `umask 000` a plain
    /// create made it 0777), anything above it 0755.
    pub fn create_dirs(&self, dirs: &[String]) -> Result<()> {
        for d in dirs {
            let p = self.path(d);
            let mode = if d.starts_with(super::layout::STATE) {
                0o700
            } else {
                0o755
            };
            // Above the first one, what the layout places elsewhere (`--prefix` keeps the host's
            // /var/lib but moves /var/lib/wstune): made as any tool would.
            if let Some(up) = p.parent().filter(|up| !up.exists()) {
                std::fs::create_dir_all(up)
                    .with_context(|| format!("cannot create {}", up.display()))?;
            }
            #[cfg_attr(not(unix), allow(unused_mut))]
            let mut b = std::fs::DirBuilder::new();
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                b.mode(mode);
            }
            match b.create(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", p.display())),
            }
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                    .with_context(|| format!("cannot chmod {}", p.display()))?;
            }
            #[cfg(not(unix))]
            let _ = mode;
        }
        Ok(())
    }

    /// Write `state` at `host_path`: atomically (a temporary file renamed over it), through a
    /// symbolic link to its target beside it (the link stays). [`Store::shape`]'s refusals
    /// apply.
    pub fn write(&self, host_path: &str, state: &FileState) -> Result<()> {
        let dir = self
            .real_dir(host_path, true)?
            .expect("real_dir creates the directory");
        let p = dir.join(file_name(host_path));
        // A link's target is a plain file in the same real directory (shape_at): written by
        // that name, not by resolving the link again.
        let p = match self.shape_at(&p, host_path)? {
            Some(Shape {
                link: Some(target), ..
            }) => dir.join(target),
            _ => p,
        };
        atomic::write_owned(&p, &state.bytes, Mode::Exact(state.mode), state.owner)
    }

    /// The target of the symbolic link at `host_path`, or None when it is not one.
    pub fn link_target(&self, host_path: &str) -> Option<String> {
        std::fs::read_link(self.path(host_path))
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    }

    /// Make `host_path` the symbolic link `target` again (what a rollback restores when the link
    /// was replaced since); atomic: a new link renamed over whatever is there.
    #[cfg(unix)]
    pub fn relink(&self, host_path: &str, target: &str) -> Result<()> {
        let Some(dir) = self.real_dir(host_path, false)? else {
            bail!(
                "{} is not made a link again: its directory does not exist",
                self.path(host_path).display()
            );
        };
        let p = dir.join(file_name(host_path));
        if std::fs::read_link(&p).is_ok_and(|t| t.to_string_lossy() == target) {
            return Ok(());
        }
        let dir = dir.as_path();
        // What shape() would refuse for the link, refused before it is made: a target that
        // is not a plain file beside it.
        if let Err(why) = beside(dir, target) {
            bail!(
                "{} is not made a link to {target} again: {why}",
                p.display()
            );
        }
        let tmp = dir.join(format!(
            "{}link.{}",
            atomic::TEMP_PREFIX,
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)
            .with_context(|| format!("cannot create the link {} -> {target}", p.display()))?;
        std::fs::rename(&tmp, &p).with_context(|| format!("cannot replace {}", p.display()))?;
        atomic::sync_dir(dir);
        Ok(())
    }

    #[cfg(not(unix))]
    pub fn relink(&self, host_path: &str, _target: &str) -> Result<()> {
        bail!("{host_path}: symbolic links are not restored on this platform")
    }

    /// Remove the temporaries a killed write left beside `host_path` (see
    /// [`atomic::remove_temporaries`]); the names removed, as host paths.
    pub fn remove_temporaries_beside(&self, host_path: &str) -> Vec<String> {
        let Some(dir) = Path::new(host_path).parent() else {
            return vec![];
        };
        let shown = dir.to_string_lossy();
        atomic::remove_temporaries(&self.path(&shown))
            .into_iter()
            .map(|n| format!("{}/{n}", shown.trim_end_matches('/')))
            .collect()
    }

    /// Remove the temporaries an older wstune's killed write left beside `host_path`: plain
    /// files named `.tmp` and six letters or digits (its temporary-file library's names) whose
    /// bytes are exactly one of `known` (what a journal entry says was written there). The
    /// names removed, as host paths.
    pub fn remove_legacy_temporaries_beside(
        &self,
        host_path: &str,
        known: &[Vec<u8>],
    ) -> Vec<String> {
        let Some(dir) = Path::new(host_path).parent() else {
            return vec![];
        };
        let shown = dir.to_string_lossy().trim_end_matches('/').to_string();
        let Ok(Some(real)) = self.real_dir(host_path, false) else {
            return vec![];
        };
        let Ok(rd) = std::fs::read_dir(&real) else {
            return vec![];
        };
        let mut removed = Vec::new();
        for e in rd.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let legacy = name
                .strip_prefix(".tmp")
                .is_some_and(|r| r.len() == 6 && r.chars().all(|c| c.is_ascii_alphanumeric()));
            if !legacy || !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let same = read_capped(&e.path()).is_ok_and(|b| known.contains(&b));
            if same && std::fs::remove_file(e.path()).is_ok() {
                removed.push(format!("{shown}/{name}"));
            }
        }
        if !removed.is_empty() {
            atomic::sync_dir(&real);
        }
        removed
    }

    pub fn remove(&self, host_path: &str) -> Result<()> {
        let Some(dir) = self.real_dir(host_path, false)? else {
            return Ok(());
        };
        let p = dir.join(file_name(host_path));
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
fn same_file(f: &std::fs::File, p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::symlink_metadata(p)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_f: &std::fs::File, p: &Path) -> bool {
    p.exists()
}

/// Whether the link text `target`, of a link in the real directory `dir`, names a plain
/// (regular, not linked again) file in `dir` itself: the only target wstune writes through.
fn beside(dir: &Path, target: &str) -> std::result::Result<(), String> {
    if target.is_empty() || target.contains('/') || target == "." || target == ".." {
        return Err("not a file in the link's own directory".into());
    }
    match std::fs::symlink_metadata(dir.join(target)) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err("which is not a plain file (a link again, a directory, a device)".into()),
        Err(_) => Err("which does not exist".into()),
    }
}

/// Refuse a file with more than one name: an atomic write (a rename) would split its hard
/// links, and rewriting it in place leaves it empty or half-written if the power fails midway
/// (and systemd-sysctl reads it at boot).
fn refuse_hard_links(p: &Path, meta: &std::fs::Metadata) -> Result<()> {
    let n = nlink_of(meta);
    if n > 1 {
        bail!(
            "{} has {n} names (hard links): replacing it would split them, and rewriting it in place can leave it empty or half-written after a power loss, so wstune changes nothing. Fix: give it a name of its own (cp -p {p} {p}.new && mv {p}.new {p}), or remove the other names",
            p.display(),
            p = p.display()
        );
    }
    Ok(())
}

/// The last component of a host path.
fn file_name(host_path: &str) -> &str {
    host_path.rsplit('/').next().unwrap_or(host_path)
}

/// `p` with every link in the part of it that exists resolved, the rest (not there yet)
/// appended as it is.
fn resolve_existing(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |acc, c| acc.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(up), Some(name)) => {
                rest.push(name.to_os_string());
                at = up;
            }
            _ => return p.to_path_buf(),
        }
    }
}

fn link_text(p: &Path) -> String {
    std::fs::read_link(p)
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// A regular file's bytes, at most [`MAX_OWN_FILE`] of them.
fn read_capped(p: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let f = opts
        .open(p)
        .with_context(|| format!("cannot read {}", p.display()))?;
    if !f.metadata().map(|m| m.is_file()).unwrap_or(false) {
        bail!("{} is not a regular file", p.display());
    }
    let mut bytes = Vec::new();
    f.take(MAX_OWN_FILE + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", p.display()))?;
    if bytes.len() as u64 > MAX_OWN_FILE {
        bail!(
            "{} is larger than {} MiB, which no file of wstune's is",
            p.display(),
            MAX_OWN_FILE >> 20
        );
    }
    Ok(bytes)
}

#[cfg(unix)]
fn mode_bits(m: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode_bits(_m: &std::fs::Metadata) -> u32 {
    0o644
}

#[cfg(unix)]
fn owner_of(m: &std::fs::Metadata) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    Some((m.uid(), m.gid()))
}

#[cfg(not(unix))]
fn owner_of(_m: &std::fs::Metadata) -> Option<(u32, u32)> {
    None
}

#[cfg(unix)]
fn nlink_of(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.nlink()
}

#[cfg(not(unix))]
fn nlink_of(_m: &std::fs::Metadata) -> u64 {
    1
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
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true).truncate(false).write(true);
        #[cfg(target_os = "linux")]
        {
            // A FIFO put in its place must not block the open (it fails with ENXIO instead).
            use std::os::unix::fs::OpenOptionsExt;
            opts.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
        }
        let file = opts.open(&path).with_context(|| {
            format!(
                "cannot open the journal lock {} (it must be a plain file)",
                path.display()
            )
        })?;
        if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            bail!(
                "the journal lock {} is not a plain file: move it aside. Nothing was changed.",
                path.display()
            );
        }
        match file.try_lock() {
            Ok(()) => {
                // The holder before may have removed the file as it finished (a first apply
                // that changed nothing): a lock on a file no longer at the path excludes no one.
                if !same_file(&file, &path) {
                    bail!(busy(&path));
                }
                Ok(FileLock { _file: file })
            }
            Err(std::fs::TryLockError::WouldBlock) => bail!(busy(&path)),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }

    /// Whether another process holds the lock on `host_path`, without taking it or creating
    /// anything.
    pub fn held(store: &Store, host_path: &str) -> bool {
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
        }
        let Ok(file) = opts.open(store.path(host_path)) else {
            return false;
        };
        if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            return false;
        }
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
            owner: None,
        };
        s.write("/etc/a/b.conf", &st).unwrap();
        let back = s.read("/etc/a/b.conf").unwrap().unwrap();
        assert_eq!((back.bytes, back.mode), (st.bytes, st.mode));
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
