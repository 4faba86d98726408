//! Writing results: atomically to a file (never a half-written report for CI to pick up), or to
//! standard output; and whether colour is wanted.

use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Write `text` to `path` via a temporary file in the same directory, fsync, rename.
///
/// The file keeps the mode (and, where allowed, the owner and group) of the one it replaces; a
/// new file gets 0666 less the umask (0644 under the usual 022), like any other tool's output.
/// A report is read by other users: node_exporter's textfile collector runs unprivileged and
/// cannot read a 0600 `.prom` file written by root, and an operator who chose 0640 for a group
/// must not find it reset on the next run.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = new_temp_in(dir).with_context(|| {
        format!(
            "cannot create a file in {} to write {}",
            dir.display(),
            path.display()
        )
    })?;
    keep_mode_of(path, tmp.as_file())
        .with_context(|| format!("cannot give the new {} the old one's mode", path.display()))?;
    tmp.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("cannot sync {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

/// A temporary file created with mode 0666, which the kernel reduces by the umask. (tempfile's
/// default, 0600, is right for secrets, wrong for reports.)
fn new_temp_in(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut b = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666));
    }
    b.tempfile_in(dir)
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

/// Check, before a long run, that `write_atomic(path, ..)` will be able to write there: the
/// directory exists and takes a new file, and `path` is not a directory. A load test or sweep
/// that ends on "cannot write" would lose minutes of work.
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
    tempfile::NamedTempFile::new_in(dir).with_context(|| {
        format!(
            "{flag} {}: cannot create a file in {} (does the directory exist, is it writable?)",
            path.display(),
            dir.display()
        )
    })?;
    Ok(())
}

/// Standard output or `--output FILE`.
pub fn emit(output: Option<&Path>, text: &str) -> Result<()> {
    match output {
        Some(p) => write_atomic(p, text),
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a message.
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
    }
}

/// Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org).
pub fn colour_wanted(to_file: bool) -> bool {
    !to_file
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Width for tables that do not go to a terminal: $COLUMNS, else 160.
pub fn table_width() -> u16 {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|w| *w >= 60)
        .unwrap_or(160)
}

/// A table in the project's style for standard output: the terminal's width and colours on a
/// terminal, plain and `table_width()` wide elsewhere.
pub fn new_table() -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    if !colour_wanted(false) {
        t.force_no_tty().set_width(table_width());
    }
    t
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
        write_atomic(&fresh, "a\n").unwrap();
        assert_eq!(
            mode(&fresh),
            0o666 & !umask(),
            "a new file: 0666 less the umask"
        );

        let kept = dir.path().join("kept.prom");
        std::fs::write(&kept, "old\n").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&kept, "new\n").unwrap();
        assert_eq!(mode(&kept), 0o640, "an existing 0640 file stays 0640");
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "new\n");

        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o4755)).unwrap();
        write_atomic(&kept, "x\n").unwrap();
        assert_eq!(mode(&kept), 0o755, "set-id bits are never carried over");
    }
}

/// Print a line to stdout without panicking when it cannot be written: `wstune apply ... |
/// head -3` or `wstune rollback | head` must still finish changing the host (println! panics
/// on EPIPE, which stopped a rollback halfway). A lost line is remembered (`stdout_lost`), so a
/// prompt never asks about a plan nobody could read, and any error but a closed pipe (a full
/// disk behind `> plan.txt`) is said on stderr.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            $crate::output::stdout_failed(&e);
        }
    }};
}
pub(crate) use say;

static STDOUT_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `say!` could not write a line.
pub fn stdout_failed(e: &std::io::Error) {
    if !STDOUT_LOST.swap(true, std::sync::atomic::Ordering::Relaxed)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!(
            "wstune: warning: cannot write to standard output ({e}): the output is incomplete"
        );
    }
}

/// Whether a line of this run's output was lost.
pub fn stdout_lost() -> bool {
    STDOUT_LOST.load(std::sync::atomic::Ordering::Relaxed)
}
