//! `wstune snapshot OUT_DIR`: run every check against the live host through a recording backend
//! and copy exactly what was read into OUT_DIR, so `wstune check --root OUT_DIR` elsewhere sees
//! the same host. The tree is built in a temporary directory and renamed into place, so a failed
//! snapshot leaves nothing behind.

use crate::engine::check::{inputs, Target};
use crate::gather::gather;
use crate::host::fs::META_DIR;
#[cfg(not(windows))]
use crate::host::fs::{FsBackend, Recording, KEEP};
use crate::host::Backend;
use crate::outcome::Outcome;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// `snapshot`, resolved: the directory to create and what the checks are run against (the
/// backend is the recording one this command makes itself).
pub struct Request {
    pub out_dir: PathBuf,
    pub target: Target,
}

pub fn run(a: Request) -> Result<Outcome> {
    let out = &a.out_dir;
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
    let captured = capture(&a, tmp.path())?;
    if out.exists() {
        std::fs::remove_dir(out)
            .with_context(|| format!("cannot replace the empty directory {}", out.display()))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, out)
        .with_context(|| format!("cannot move the snapshot into {}", out.display()))?;
    eprintln!(
        "wstune: captured {captured} into {}; inspect it with `wstune check --root {}`",
        out.display(),
        out.display()
    );
    Ok(Outcome::Ok)
}

/// The live Linux host: every file the checks read, as a tree. Returns what was captured.
#[cfg(not(windows))]
fn capture(a: &Request, dir: &Path) -> Result<String> {
    let backend = FsBackend::recording();
    let r = inputs(&a.target, &backend)?;
    let facts = gather(&r.catalog, &backend, &r.options);
    let rec = backend
        .take_recording()
        .expect("a recording backend records");
    write_tree(dir, &rec)?;
    write_meta(dir, &facts.info, backend.page_size())?;
    Ok(format!(
        "{} files and {} directories",
        rec.files.len(),
        rec.dirs.len()
    ))
}

/// The live Windows host: every registry value, adapter and port range the checks read, as the
/// `registry.yaml` that makes a tree a Windows host for `check --root`.
#[cfg(windows)]
fn capture(a: &Request, dir: &Path) -> Result<String> {
    let backend = crate::host::windows::WindowsBackend::recording();
    let r = inputs(&a.target, &backend)?;
    let facts = gather(&r.catalog, &backend, &r.options);
    let rec = backend
        .take_recording()
        .expect("a recording backend records");
    std::fs::create_dir_all(dir.join(META_DIR))?;
    std::fs::write(dir.join("registry.yaml"), rec.to_yaml())?;
    write_meta(dir, &facts.info, backend.page_size())?;
    Ok("the registry values the checks read".into())
}

/// `wstune/host.yaml`: what a captured tree cannot hold as /proc, /sys or registry values.
fn write_meta(dir: &Path, info: &crate::host::HostInfo, page_size: u64) -> Result<()> {
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

#[cfg(not(windows))]
fn write_tree(root: &Path, rec: &Recording) -> Result<()> {
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
    for (unit, props) in &rec.systemd {
        let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(
            root.join(META_DIR)
                .join("systemd")
                .join(format!("{unit}.show")),
            text,
        )?;
    }
    Ok(())
}
