//! The journal: what a change replaced, written (and synced) before the first change, so that
//! `wstune rollback` can put everything back exactly, even after `apply` was killed midway.
//!
//! One JSON file per apply under `/var/lib/wstune/journal/` (under `--prefix` when given). Its
//! `state` records how far the apply got: `pending` (written, changes may be partial),
//! `applied`, `undone` (a failure was rolled back automatically), `rolled_back`,
//! `interrupted_undone` (a killed apply that the next apply restored before planning),
//! `partly_rolled_back` (rolled back but for what it had to leave: a NIC refused, or another
//! network namespace's values; [`Entry::left`] says exactly what, and a later rollback of the
//! entry restores only that).
//!
//! One apply or rollback at a time: each holds an exclusive lock ([`Lock`], flock on
//! `DIR/.lock`) for as long as it runs. A `pending` entry whose lock is free was left by a process
//! that died; one whose lock is held belongs to an apply still running.
//!
//! This file is the entry's format (what one records, and which older formats it still reads).
//! Beside it: `files` (saving, loading and listing entries, each checked for its checksum),
//! `paths` (what an entry may name, so that a rollback never writes elsewhere) and `lock`.

mod files;
mod lock;
mod paths;
#[cfg(test)]
mod tests;

pub use files::{check_dir, damaged_fix, list, load, save, scan, Damaged};
pub use lock::{Lock, LockState};
pub use paths::check_paths;

use super::plan::Action;
use crate::host::store::FileState;
use anyhow::{Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/var/lib/wstune/journal";

/// The only service apply restarts: irqbalance, after its configuration changed.
pub const IRQBALANCE_UNIT: &str = "irqbalance.service";

/// The journal's format: the newest this wstune reads. 2 added the checksum, owners and what a
/// file was (a link, hard links); 3 the receive ring, irqbalance's files and restart, and the
/// NIC sysctl file's lines; 4 each changed NIC's identity ([`Entry::nics`]) and the state
/// `partly_rolled_back`; 5 what a rollback left of a partly rolled back entry ([`Entry::left`])
/// ([`format_of`]: an entry without them is still written as the older format, which older
/// versions read). An entry without `format` is a 1 (no checksum, read as before). A higher one
/// was written by a newer wstune and is refused: its fields might mean more than this one knows.
pub const FORMAT: u32 = 5;

/// The format an entry is written in: the oldest that holds what it has, so a wstune that
/// reads only older formats says "written by a newer wstune, roll it back with that version"
/// for an entry it cannot read in full and reads the others, rather than calling any damaged.
pub fn format_of(e: &Entry) -> u32 {
    use super::plan::Op;
    if !e.left.is_empty() {
        return 5;
    }
    if !e.nics.is_empty() || e.state == State::PartlyRolledBack {
        return 4;
    }
    let three = !e.rings.is_empty()
        || e.actions.iter().any(|a| {
            matches!(
                a.op,
                Op::RxRing { .. }
                    | Op::NicSysctlLine { .. }
                    | Op::IrqbalancePolicy
                    | Op::IrqbalanceArgs { .. }
                    | Op::TryRestart { .. }
            )
        });
    if three {
        3
    } else {
        2
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Pending,
    Applied,
    Undone,
    RolledBack,
    /// A killed apply's entry, restored by the next apply before it planned its own changes.
    InterruptedUndone,
    /// Rolled back except what the rollback had to leave ([`Entry::left`]): a NIC's values,
    /// refused (the NIC of that name now is another one, or the NIC is in another network
    /// namespace), or the values of the network namespace the apply ran in, when rollback ran
    /// in another. `rollback --id ID` later restores only those (`--force`: onto the NIC of that
    /// name, into that namespace); a plain `rollback` goes on to older entries.
    PartlyRolledBack,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending (interrupted: roll it back)",
            State::Applied => "applied",
            State::Undone => "undone after a failure",
            State::RolledBack => "rolled back",
            State::InterruptedUndone => "interrupted, undone by the next apply",
            State::PartlyRolledBack => {
                "rolled back but for what it left (a NIC refused, or another network namespace's values)"
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// [`FORMAT`] when written; 1 for an entry of an older wstune.
    #[serde(default = "format_1")]
    pub format: u32,
    /// sha256 (hex) of the entry as written with this field empty: a changed byte (a base64
    /// character, a path) is found before anything is restored from it.
    #[serde(default)]
    pub checksum: String,
    pub id: String,
    pub created: String,
    pub state: State,
    /// The profile that was applied (name and source).
    pub profile: String,
    pub actions: Vec<Action>,
    /// Runtime values before the change, exactly as the kernel printed them.
    pub runtime: Vec<OldRuntime>,
    /// Files before the change (`old: null`: it did not exist), and what was written.
    pub files: Vec<OldFile>,
    /// Directories this apply created, outermost first.
    pub created_dirs: Vec<String>,
    pub limits: Vec<OldLimits>,
    pub registry: Vec<OldRegistry>,
    /// NICs' channel counts before the change. Left out when empty, so an entry written before
    /// NIC changes existed keeps its checksum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<OldChannels>,
    /// NICs' receive ring sizes before the change; left out when empty, likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<OldRing>,
    /// Who each NIC the entry changes is (index, permanent address, device), read right
    /// before the change: rollback finds it by that, not by a name that may have moved to
    /// another NIC. Left out when empty (no NIC changed, or an entry of an older wstune, whose
    /// NICs are found by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<crate::host::NicIdentity>,
    /// What a rollback left of a `partly_rolled_back` entry, and why: a later rollback of the
    /// entry restores these parts and nothing else (what the first one restored may have been
    /// set anew since, by an operator or a newer apply). Left out when empty; a
    /// `partly_rolled_back` entry without it (an older wstune's) is restored whole, as then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<LeftPart>,
    /// Why an apply failed, when it did.
    #[serde(default)]
    pub failure: Option<String>,
}

fn format_1() -> u32 {
    1
}

/// Why a rollback left part of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftKind {
    /// The NIC's name is another NIC's now, or several links have its identity.
    Refused,
    /// The NIC is in another network namespace (moved there, or recorded there), or the values
    /// are those of the network namespace the apply ran in, not the one rollback ran in.
    OtherNamespace,
    /// The NIC is gone, its values with it.
    Gone,
    /// The entry recorded no identity for the NIC and no link has its name: removed or renamed,
    /// nothing tells which.
    Unverified,
}

impl LeftKind {
    /// Whether what was left is still there to restore later (everything but a NIC gone).
    pub fn kept(self) -> bool {
        self != LeftKind::Gone
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LeftKind::Refused => "refused",
            LeftKind::OtherNamespace => "in another network namespace",
            LeftKind::Gone => "gone",
            LeftKind::Unverified => "unverified",
        }
    }
}

/// One part of an entry a rollback did not restore: a NIC's values, or (no `nic`) the values of
/// another network namespace. Each names the entry's own records, as the entry names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeftPart {
    /// The NIC, by its name in the entry; None: values that are not one NIC's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    pub kind: LeftKind,
    pub why: String,
    /// The runtime values left ([`OldRuntime::path`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime: Vec<String>,
    /// Whether the NIC's channel counts were left; its receive ring.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub channels: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ring: bool,
}

impl Entry {
    /// Whether a rollback of this entry restores only what an earlier rollback left.
    pub fn resumes(&self) -> bool {
        self.state == State::PartlyRolledBack && !self.left.is_empty()
    }

    /// What a rollback of this entry restores: the parts an earlier rollback left, when it
    /// recorded them ([`Entry::resumes`]), else the whole entry. The parts restored then are
    /// not in it: no value, file, limit or restart of theirs is written again.
    pub fn remaining(&self) -> Entry {
        use super::plan::Op;
        if !self.resumes() {
            return self.clone();
        }
        let runtime: Vec<&str> = self
            .left
            .iter()
            .flat_map(|p| p.runtime.iter().map(String::as_str))
            .collect();
        let of = |pick: fn(&LeftPart) -> bool| -> Vec<&str> {
            self.left
                .iter()
                .filter(|p| pick(p))
                .filter_map(|p| p.nic.as_deref())
                .collect()
        };
        let (channels, rings) = (of(|p| p.channels), of(|p| p.ring));
        let sysctl = |key: &str| crate::host::procfs::sysctl_path(key);
        let mut e = self.clone();
        e.runtime.retain(|r| runtime.contains(&r.path.as_str()));
        e.channels.retain(|c| channels.contains(&c.nic.as_str()));
        e.rings.retain(|r| rings.contains(&r.nic.as_str()));
        e.actions.retain(|a| match &a.op {
            Op::Sysctl { key, .. } => runtime.contains(&sysctl(key).as_str()),
            Op::KernelFile { path, .. } => runtime.contains(&path.as_str()),
            Op::Channels { nic, .. } => channels.contains(&nic.as_str()),
            Op::RxRing { nic, .. } => rings.contains(&nic.as_str()),
            // Files, limits, registry values and the restart that reads the files: restored
            // by the earlier rollback, whole.
            _ => false,
        });
        e.files.clear();
        e.created_dirs.clear();
        e.limits.clear();
        e.registry.clear();
        e
    }

    /// The channel counts the entry's apply set on `nic` (rx, tx, combined; None: that count
    /// was left as it was), or None when the entry has no channel change for it.
    pub fn channels_set(&self, nic: &str) -> Option<[Option<u32>; 3]> {
        self.actions.iter().find_map(|a| match &a.op {
            super::plan::Op::Channels {
                nic: n,
                rx,
                tx,
                combined,
            } if n == nic => Some([*rx, *tx, *combined]),
            _ => None,
        })
    }

    /// The counts of `old` (`nic`'s before the apply) that a restore sets, (rx, tx, combined):
    /// those the apply changed (all three when its action is not there to say), never a 0 (a
    /// NIC without that kind of channel, which `ethtool -L` refuses).
    pub fn channels_to_restore(&self, nic: &str, old: &crate::host::Channels) -> [Option<u32>; 3] {
        let set = self
            .channels_set(nic)
            .map_or([true; 3], |s| s.map(|c| c.is_some()));
        let pick = |on: bool, n: u32| (on && n > 0).then_some(n);
        [
            pick(set[0], old.rx),
            pick(set[1], old.tx),
            pick(set[2], old.combined),
        ]
    }
}

/// A NIC's channel counts before apply changed them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OldChannels {
    pub nic: String,
    pub old: crate::host::Channels,
}

/// A NIC's receive ring size before apply changed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OldRing {
    pub nic: String,
    pub old: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OldRuntime {
    pub path: String,
    pub old: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OldFile {
    pub path: String,
    pub old: Option<Blob>,
    pub new: Blob,
    /// The path was a symbolic link with this target: apply wrote through it (`old` and `new`
    /// are the target's), and a rollback makes it that link again if it was replaced.
    #[serde(default)]
    pub link: Option<String>,
    /// How many names the file had (1: a file with hard links is refused before any change);
    /// 0 when it did not exist or the entry is older.
    #[serde(default)]
    pub nlink: u64,
}

/// File bytes (base64, so any content survives JSON exactly), permission bits and owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blob {
    pub base64: String,
    pub mode: u32,
    /// (uid, gid); None: the writer's (a file apply created), or an older entry.
    #[serde(default)]
    pub owner: Option<(u32, u32)>,
}

impl From<&FileState> for Blob {
    fn from(s: &FileState) -> Blob {
        Blob {
            base64: base64::engine::general_purpose::STANDARD.encode(&s.bytes),
            mode: s.mode,
            owner: s.owner,
        }
    }
}

impl Blob {
    pub fn state(&self) -> Result<FileState> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.base64)
            .context("the journal's file content is not valid base64")?;
        Ok(FileState {
            bytes,
            mode: self.mode,
            owner: self.owner,
        })
    }

    /// The same bytes and mode, and the same owner where both know one.
    pub fn same_as(&self, other: &Blob) -> bool {
        self.base64 == other.base64
            && self.mode == other.mode
            && match (self.owner, other.owner) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OldLimits {
    pub pid: u32,
    pub soft: u64,
    pub hard: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OldRegistry {
    pub key: String,
    pub value: String,
    pub kind: crate::host::RegType,
    /// None: the value did not exist.
    pub old: Option<String>,
}

/// A sortable id: UTC time to the nanosecond.
pub fn new_id() -> String {
    let now = std::time::SystemTime::now();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let secs = humantime::format_rfc3339_seconds(now).to_string(); // 2026-11-30T00:25:12Z
    let compact: String = secs
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    format!("{compact}.{nanos:09}")
}
