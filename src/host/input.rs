//! Reading the files a user points wstune at (profiles, catalogs, captured trees and their
//! `registry.yaml`) without trusting them: regular files only, a size cap, optionally confined to
//! a directory. A link to `/dev/zero` must not be read until memory runs out, and a FIFO must
//! not block forever; both are refused at once with the reason. One reader for every caller, so
//! the same hostile file gets the same answer wherever it is named.
//!
//! This and host/ are the only modules that open files: host/ reads and writes the host (its
//! /proc, /sys, /etc, wstune's journal, through a backend), this reads the files a user names
//! on the command line, which are input, not the host. (host/fs.rs reads a host file through
//! [`read_bounded`] too, for the same reasons.)

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file was not read. Callers turn this into their own words (a profile is not a /proc
/// file), so the variants carry facts, not sentences.
#[derive(Debug)]
pub enum Refused {
    /// Opening or reading failed (not found, permission denied, ...).
    Io(std::io::Error),
    /// A directory.
    Directory,
    /// A device, pipe or socket.
    NotRegular,
    /// With a confining directory: the file's real path is outside it.
    Outside(PathBuf),
    /// Larger than the cap (bytes).
    TooLarge(u64),
    NotUtf8,
}

impl Refused {
    /// Why, in the words a message about any input file uses ("is a directory").
    pub fn words(&self) -> String {
        match self {
            Refused::Io(e) => io_words(e),
            Refused::Directory => "is a directory".into(),
            Refused::NotRegular => "not a regular file (a device, pipe or socket)".into(),
            Refused::Outside(real) => format!("resolves to {}", real.display()),
            Refused::TooLarge(cap) => format!("larger than {} MiB", cap >> 20),
            Refused::NotUtf8 => "not UTF-8 text".into(),
        }
    }
}

/// Read `path` as UTF-8 text if it is a regular file of at most `cap` bytes whose real path,
/// with `confine`, lies inside that directory.
pub fn read_bounded(path: &Path, cap: u64, confine: Option<&Path>) -> Result<String, Refused> {
    // stat, not open: opening a FIFO for reading blocks until a writer appears.
    let meta = std::fs::metadata(path).map_err(Refused::Io)?;
    if meta.is_dir() {
        return Err(Refused::Directory);
    }
    if !meta.is_file() {
        return Err(Refused::NotRegular);
    }
    if let Some(root) = confine {
        let real = path.canonicalize().map_err(Refused::Io)?;
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        if !real.starts_with(&root) {
            return Err(Refused::Outside(real));
        }
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(target_os = "linux")]
    {
        // If the file was swapped for a FIFO after the stat, open must not wait for a writer
        // (for a regular file O_NONBLOCK changes nothing: its reads never block).
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(Refused::Io)?;
    if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(Refused::NotRegular);
    }
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(Refused::Io)?;
    if bytes.len() as u64 > cap {
        return Err(Refused::TooLarge(cap));
    }
    String::from_utf8(bytes).map_err(|_| Refused::NotUtf8)
}

/// An I/O error in plain words, without the "(os error N)" suffix the OS text carries.
pub fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let text = e.to_string();
            match text.find(" (os error") {
                Some(i) => text[..i].to_string(),
                None => text,
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_large_files_and_escapes_are_refused() {
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), 1 << 20, None),
            Err(Refused::NotRegular)
        ));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(matches!(
            read_bounded(&fifo, 1 << 20, None),
            Err(Refused::NotRegular)
        ));
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 11]).unwrap();
        assert!(matches!(
            read_bounded(&big, 10, None),
            Err(Refused::TooLarge(10))
        ));
        assert_eq!(read_bounded(&big, 11, None).unwrap().len(), 11);
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::os::unix::fs::symlink(&big, inner.join("link")).unwrap();
        assert!(matches!(
            read_bounded(&inner.join("link"), 100, Some(&inner)),
            Err(Refused::Outside(_))
        ));
        assert!(read_bounded(&inner.join("link"), 100, Some(dir.path())).is_ok());
    }
}
