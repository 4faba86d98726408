//! wstune's own short-lived files in the system's temporary directory: the configuration a
//! user's program reads at start (`selftest::command`), named so a later run can sweep what a
//! killed one left.

use std::path::PathBuf;

/// `name` in the temporary directory.
pub fn path(name: &str) -> PathBuf {
    std::env::temp_dir().join(name)
}

/// The files in the temporary directory whose name starts with `prefix`: the rest of each
/// name, and its path. Nothing when the directory cannot be listed.
pub fn named(prefix: &str) -> Vec<(String, PathBuf)> {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let rest = e.file_name().to_str()?.strip_prefix(prefix)?.to_string();
            Some((rest, e.path()))
        })
        .collect()
}

/// Remove one of them; one already gone is no error worth reporting.
pub fn remove(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
}

/// A new directory only this user can enter (0700), removed with everything in it when the
/// value is dropped: for files that hold a key for one run (`serve --self-test --tls`).
pub fn private_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("wstune-").tempdir()
}

/// Write `bytes` to a new file `name` in `dir` (from [`private_dir`]), readable by this user
/// alone.
pub fn write_private(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let path = dir.join(name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(&path)?.write_all(bytes)?;
    Ok(path)
}
