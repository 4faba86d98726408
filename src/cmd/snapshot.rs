//! `wstune snapshot OUT_DIR`: run every check against the live host through a recording backend
//! and copy exactly what was read into OUT_DIR, so `wstune check --root OUT_DIR` elsewhere sees
//! the same host. The tree is built beside OUT_DIR and renamed into place (host/snapshot.rs), so
//! a failed snapshot leaves nothing behind.

use crate::engine::check::{inputs, Target};
use crate::gather::gather;
use crate::host::snapshot;
use crate::outcome::Outcome;
use anyhow::Result;
use std::path::PathBuf;

/// `snapshot`, resolved: the directory to create and what the checks are run against (the
/// backend is the recording one this command makes itself).
pub struct Request {
    pub out_dir: PathBuf,
    pub target: Target,
}

pub fn run(a: Request) -> Result<Outcome> {
    let out = &a.out_dir;
    let pending = snapshot::start(out)?;
    let backend = snapshot::recorder();
    let r = inputs(&a.target, &backend)?;
    let facts = gather(&r.catalog, &backend, &r.options);
    let captured = snapshot::save(&pending, &backend, &facts.info)?;
    snapshot::finish(pending, out)?;
    eprintln!(
        "wstune: captured {captured} into {}; inspect it with `wstune check --root {}`",
        out.display(),
        out.display()
    );
    Ok(Outcome::Ok)
}
