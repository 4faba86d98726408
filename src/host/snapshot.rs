//! `wstune snapshot`'s side of the host: a recording backend for this host, and writing what
//! it recorded as a tree `check --root` reads (host/fixture.rs). The tree is built in a
//! temporary directory beside the destination and renamed into place, so a failed snapshot
//! leaves nothing behind.

use super::fs::META_DIR;
use super::{Backend, HostInfo};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// The recording backend for this host.
#[cfg(not(windows))]
pub type Recorder = super::linux::LinuxBackend;
#[cfg(windows)]
pub type Recorder = super::windows::WindowsBackend;

pub fn recorder() -> Recorder {
    Recorder::recording()
}

/// Where the tree is being built; [`finish`] moves it to `out`.
pub struct Pending {
    tmp: tempfile::TempDir,
}

/// Check `out` can take a snapshot (absent or an empty directory, in an existing parent) and
/// start the tree beside it.
pub fn start(out: &Path) -> Result<Pending> {
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{}: already exists and is not empty; name a new directory",
            out.display()
        );
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "{}: the parent directory {} does not exist",
            out.display(),
            parent.display()
        );
    }
    let tmp = tempfile::Builder::new()
        .prefix(".wstune-snapshot-")
        .tempdir_in(parent)
        .context("cannot create a temporary directory")?;
    Ok(Pending { tmp })
}

/// Write what `rec` recorded (and `info`, which a tree cannot hold as files) into the tree;
/// returns what was captured, for people.
pub fn save(p: &Pending, rec: &Recorder, info: &HostInfo) -> Result<String> {
    let dir = p.tmp.path();
    let captured = write_recording(dir, rec)?;
    write_meta(dir, info, rec.page_size())?;
    Ok(captured)
}

/// Move the finished tree to `out`.
pub fn finish(p: Pending, out: &Path) -> Result<()> {
    if out.exists() {
        std::fs::remove_dir(out)
            .with_context(|| format!("cannot replace the empty directory {}", out.display()))?;
    }
    let kept = p.tmp.keep();
    std::fs::rename(&kept, out)
        .with_context(|| format!("cannot move the snapshot into {}", out.display()))?;
    Ok(())
}

/// The live Linux host: every file the checks read, as a tree.
#[cfg(not(windows))]
fn write_recording(root: &Path, backend: &Recorder) -> Result<String> {
    use super::fs::KEEP;
    let rec = backend
        .take_recording()
        .expect("a recording backend records");
    std::fs::create_dir_all(root.join(META_DIR).join("systemd"))?;
    let host = |p: &str| root.join(p.trim_start_matches('/'));
    for (dir, entries) in &rec.dirs {
        std::fs::create_dir_all(host(dir))?;
        for (name, is_dir) in entries {
            let p = host(dir).join(name);
            if *is_dir {
                std::fs::create_dir_all(&p)?;
                if std::fs::read_dir(&p)?.next().is_none() {
                    std::fs::write(p.join(KEEP), "")?;
                }
            } else if !rec.files.contains_key(&format!("{dir}/{name}")) {
                // Listed but never read (e.g. msi_irqs entries): its name is what counts.
                std::fs::write(&p, "")?;
            }
        }
    }
    for (path, text) in &rec.files {
        let p = host(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
    }
    // What ethtool netlink answered, as the tree's ethtool files (host/fixture.rs reads them).
    for (nic, values) in &rec.ethtool {
        let dir = root.join(META_DIR).join("ethtool");
        std::fs::create_dir_all(&dir)?;
        let text: String = values.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        std::fs::write(dir.join(nic), text)?;
    }
    // What `ethtool -S` listed, in its own format (host/fixture.rs reads it back).
    for (nic, stats) in &rec.nic_stats {
        let dir = root.join(META_DIR).join("ethtool");
        std::fs::create_dir_all(&dir)?;
        let mut text = "NIC statistics:\n".to_string();
        for (k, v) in stats {
            text.push_str(&format!("     {k}: {v}\n"));
        }
        std::fs::write(dir.join(format!("{nic}.stats")), text)?;
    }
    for (unit, props) in &rec.systemd {
        let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(
            root.join(META_DIR)
                .join("systemd")
                .join(format!("{unit}.show")),
            text,
        )?;
    }
    Ok(format!(
        "{} files and {} directories",
        rec.files.len(),
        rec.dirs.len()
    ))
}

/// The live Windows host: every registry value, adapter and port range the checks read, as the
/// `registry.yaml` that makes a tree a Windows host for `check --root`.
#[cfg(windows)]
fn write_recording(dir: &Path, backend: &Recorder) -> Result<String> {
    let rec = backend
        .take_recording()
        .expect("a recording backend records");
    std::fs::create_dir_all(dir.join(META_DIR))?;
    std::fs::write(dir.join("registry.yaml"), rec.to_yaml())?;
    Ok("the registry values the checks read".into())
}

/// `wstune/host.yaml`: what a captured tree cannot hold as /proc, /sys or registry values.
fn write_meta(dir: &Path, info: &HostInfo, page_size: u64) -> Result<()> {
    let meta = format!(
        "# Written by wstune snapshot: what a captured tree cannot hold as /proc or /sys files.\nhostname: {:?}\nos: {:?}\nkernel: {:?}\npage_size: {}\ncaptured_at: {:?}\nwstune: {:?}\n",
        info.hostname,
        info.os,
        info.kernel,
        page_size,
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        env!("CARGO_PKG_VERSION"),
    );
    std::fs::write(dir.join(META_DIR).join("host.yaml"), meta)?;
    Ok(())
}
