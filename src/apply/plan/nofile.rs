//! The open-file limits a plan reasons about: fs.nr_open after the next boot (the ceiling of
//! any nofile limit), and the `--pid` process's soft and hard limits.

use super::SYSCTL_FILE;
use crate::catalog::eval::Finding;
use crate::catalog::facts::{HostFacts, Reading};
use crate::catalog::{Catalog, LimitKind, Process, Resource, Source};

/// The kernel's fs.nr_open when no boot file sets it (1024 * 1024).
pub const KERNEL_NR_OPEN: u64 = 1 << 20;

/// The fs.nr_open the host will have after the next boot, and where it comes from; None when
/// nothing applies sysctls at boot here (a container: its runtime does).
pub fn boot_nr_open(facts: &HostFacts, ours: &[(String, String)]) -> Option<(u64, String)> {
    if let Some((_, v)) = ours.iter().find(|(k, _)| k == "fs.nr_open") {
        return Some((v.trim().parse().ok()?, format!("set by {SYSCTL_FILE}")));
    }
    match facts.boot.entry("fs.nr_open") {
        Reading::Value(e) => Some((
            e.value.trim().parse().ok()?,
            format!("set by {}", e.location()),
        )),
        Reading::Missing(_) => Some((
            KERNEL_NR_OPEN,
            "the kernel's default: no boot file sets it".into(),
        )),
        Reading::Unreadable(_) => None,
    }
}

/// `nofile` lowered to `cap`, the fs.nr_open the host boots with ([`boot_nr_open`]: the value
/// and where it comes from), when above it: every login's (or unit's) setrlimit would fail
/// with EPERM after the next boot. The note names `what` the limit is for and why, and the fix
/// ends with `then` (the command to run again). One rule for the files apply writes and the
/// ones export renders.
pub fn cap_nofile(nofile: &mut u64, cap: &(u64, String), what: &str, then: &str) -> Option<String> {
    let (cap, by) = cap;
    if *nofile <= *cap {
        return None;
    }
    let note = format!(
        "{what}: nofile {nofile} is above the fs.nr_open this host will have after the next boot ({cap}, {by}): the kernel would refuse it to every login (EPERM), so {cap} is written instead. Fix: raise fs.nr_open there (or remove that line), then {then}"
    );
    *nofile = *cap;
    Some(note)
}

/// The fs.nr_open a nofile limit must fit when it is installed without wstune's sysctl file
/// (limits.d, a unit's LimitNOFILE, a container's ulimit): the lower of the host's current value
/// (what a login or container started now is bounded by) and the one its boot files give
/// without ours ([`boot_nr_open`]); with where it comes from. None when neither is known.
pub fn nr_open_without_ours(facts: &HostFacts) -> Option<(u64, String)> {
    let now = match facts.sysctls.get("fs.nr_open") {
        Some(Reading::Value(v)) => v.as_num().and_then(|n| u64::try_from(n).ok()),
        _ => None,
    };
    match (now, boot_nr_open(facts, &[])) {
        (Some(n), Some((b, by))) if b <= n => Some((b, by)),
        (Some(n), _) => Some((n, "its current value".into())),
        (None, boot) => boot,
    }
}

/// `nofile` lowered to `cap` ([`nr_open_without_ours`]) for a file installed without wstune's
/// sysctl file, when that file would have raised fs.nr_open enough: the fix is to install it
/// (or apply) first. The note names `what` the limit is for.
pub fn cap_nofile_without_sysctl_file(
    nofile: &mut u64,
    cap: &(u64, String),
    what: &str,
) -> Option<String> {
    let (cap, by) = cap;
    if *nofile <= *cap {
        return None;
    }
    let note = format!(
        "{what}: nofile {nofile} is above the fs.nr_open this host has without wstune's sysctl file ({cap}, {by}), which this format does not install: the kernel would refuse it to every login, unit or container (EPERM), so {cap} is written instead. Fix: install `wstune export --to sysctl` as {SYSCTL_FILE} and run `sysctl --system`, or run `wstune apply`, to raise fs.nr_open first, then export again"
    );
    *nofile = *cap;
    Some(note)
}

/// The current nofile limits of the `--pid` process, from its two checks.
pub(super) struct PidNofile {
    pub(super) soft: Option<i64>,
    pub(super) hard: Option<i64>,
}

impl PidNofile {
    pub(super) fn of<'a>(
        catalog: &Catalog,
        finding: &impl Fn(usize, bool) -> Option<&'a Finding>,
    ) -> Self {
        let current = |kind: LimitKind| {
            let i = catalog.checks.iter().position(|d| {
                matches!(&d.check.source, Source::Rlimit(r) if r.process == Process::Pid && r.limit == kind && r.resource == Resource::Nofile)
            })?;
            finding(i, false)?.current.as_ref()?.as_num()
        };
        PidNofile {
            soft: current(LimitKind::Soft),
            hard: current(LimitKind::Hard),
        }
    }

    pub(super) fn both(&self) -> Option<(u64, u64)> {
        Some((self.soft? as u64, self.hard? as u64))
    }
}

pub(super) fn fmt_limit(v: Option<i64>) -> String {
    match v {
        Some(i64::MAX) => "unlimited".into(),
        Some(n) => n.to_string(),
        None => "?".into(),
    }
}
