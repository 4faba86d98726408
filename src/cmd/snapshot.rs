//! `wstune snapshot OUT_DIR`: run every check against the live host through a recording backend
//! and copy exactly what was read into OUT_DIR, so `wstune check --root OUT_DIR` elsewhere sees
//! the same host. The tree is built in a temporary directory and renamed into place, so a failed
//! snapshot leaves nothing behind.

use crate::cli::args::SnapshotArgs;
use crate::cli::{exit, resolve};
use crate::gather::gather;
use crate::host::fs::{FsBackend, Recording, KEEP, META_DIR};
use crate::host::Backend;
use anyhow::{bail, Context, Result};
use std::path::Path;

pub fn run(a: &SnapshotArgs) -> Result<u8> {
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
    let backend = FsBackend::recording();
    let r = resolve::inputs(&a.target, &backend)?;
    let facts = gather(&r.catalog, &backend, &r.options);
    let page_size = backend.page_size();
    let rec = backend
        .take_recording()
        .expect("a recording backend records");

    let tmp = tempfile::Builder::new()
        .prefix(".wstune-snapshot-")
        .tempdir_in(parent)
        .context("cannot create a temporary directory")?;
    write_tree(tmp.path(), &rec)?;
    let meta = format!(
        "# Written by wstune snapshot: what a captured tree cannot hold as /proc or /sys files.\nhostname: {:?}\nos: {:?}\nkernel: {:?}\npage_size: {}\ncaptured_at: {:?}\nwstune: {:?}\n",
        facts.info.hostname,
        facts.info.os,
        facts.info.kernel,
        page_size,
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        env!("CARGO_PKG_VERSION"),
    );
    std::fs::write(tmp.path().join(META_DIR).join("host.yaml"), meta)?;
    if out.exists() {
        std::fs::remove_dir(out)
            .with_context(|| format!("cannot replace the empty directory {}", out.display()))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, out)
        .with_context(|| format!("cannot move the snapshot into {}", out.display()))?;
    eprintln!(
        "wstune: captured {} files and {} directories into {}; inspect it with `wstune check --root {}`",
        rec.files.len(),
        rec.dirs.len(),
        out.display(),
        out.display()
    );
    Ok(exit::OK)
}

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
