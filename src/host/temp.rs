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
