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

use super::plan::Action;
use crate::host::store::{FileLock, FileState, Store};
use anyhow::{bail, Context, Result};
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

fn path_of(id: &str) -> String {
    format!("{DIR}/{id}.json")
}

/// The checksum of `entry`: sha256 of its compact JSON with `checksum` empty.
fn checksum_of(entry: &Entry) -> String {
    use sha2::Digest;
    let mut e = entry.clone();
    e.checksum.clear();
    let text = serde_json::to_string(&e).expect("an entry always serializes");
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Write (or rewrite) an entry atomically and durably, in the current [`FORMAT`] with its
/// checksum.
pub fn save(store: &Store, entry: &Entry) -> Result<()> {
    check_dir(store)?;
    let mut e = entry.clone();
    e.format = format_of(&e);
    e.checksum = checksum_of(&e);
    let text = serde_json::to_string_pretty(&e)?;
    store.write(
        &path_of(&entry.id),
        &FileState {
            bytes: text.into_bytes(),
            mode: 0o600,
            owner: None,
        },
    )
}

/// Refuse a journal directory (or the state directory above it) that someone but its owner
/// may write, or that another user owns, as sudo refuses such a sudoers file: whoever can
/// write an entry can make a rollback write any value wstune may restore.
pub fn check_dir(store: &Store) -> Result<()> {
    #[cfg(unix)]
    for host in [crate::host::layout::STATE, DIR] {
        let p = store.path(host);
        let Some(m) = store.ownership(host) else {
            continue;
        };
        let me = crate::host::process::effective_uid();
        if !m.real_dir {
            bail!(
                "the journal directory {} is not a directory (a link or a file): wstune keeps its journal only in a directory of its own. Fix: move it aside. Nothing was changed.",
                p.display()
            );
        }
        let mode = m.mode;
        if mode & 0o022 != 0 || (m.uid != 0 && Some(m.uid) != me) {
            bail!(
                "the journal directory {} is writable by others or owned by another user (mode {:o}, uid {}): anyone who can write there could make a rollback write what they like. Fix: chown root:root {p} && chmod 700 {p}. Nothing was changed.",
                p.display(),
                mode & 0o7777,
                m.uid,
                p = p.display()
            );
        }
    }
    let _ = store;
    Ok(())
}

pub fn load(store: &Store, id: &str) -> Result<Entry> {
    if id.is_empty() || id.contains('/') || id.contains("..") {
        bail!(
            "'{id}' is not a journal id; `wstune rollback --list{}` shows them",
            super::flags(store)
        );
    }
    let path = store.path(&path_of(id));
    if !store.occupied(&path_of(id)) {
        bail!(
            "no journal entry '{id}' ({}); `wstune rollback --list{}` shows them",
            path.display(),
            super::flags(store)
        );
    }
    let text = store.read_text(&path_of(id)).map_err(|e| {
        anyhow::anyhow!(
            "journal entry {} cannot be read ({e}): {}",
            path.display(),
            damaged_fix(&path, &super::flags(store))
        )
    })?;
    parse(&text, id).map_err(|e| {
        anyhow::anyhow!(
            "journal entry {} is damaged ({e}): {}",
            path.display(),
            damaged_fix(&path, &super::flags(store))
        )
    })
}

/// An entry, verified: it parses with no unknown field, its format is one this wstune knows,
/// its checksum matches, its id is its file's name, and every path in it is one wstune may own
/// ([`check_paths`]).
fn parse(text: &str, id: &str) -> std::result::Result<Entry, String> {
    // The format first: a newer entry's unknown fields are its format's, not damage.
    let format = serde_json::from_str::<serde_json::Value>(text)
        .map_err(|e| e.to_string())?
        .get("format")
        .map(|f| f.as_u64().unwrap_or(u64::MAX))
        .unwrap_or(1);
    if format > FORMAT as u64 {
        return Err(format!(
            "written by a newer wstune (journal format {format}; this one reads up to {FORMAT}): roll it back with that version"
        ));
    }
    if format < 1 {
        return Err(format!(
            "its journal format {format} is not one any wstune wrote (1 is the oldest)"
        ));
    }
    let e: Entry = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if e.format >= 2 {
        let want = checksum_of(&e);
        if e.checksum != want {
            return Err(
                "its checksum does not match its content (changed after it was written)".into(),
            );
        }
    }
    if e.id != id {
        return Err(format!("its id {} is not its file name's ({id})", e.id));
    }
    check_paths(&e)?;
    // Format 1 has no checksum; it never had these fields either. One that carries them was
    // changed after it was written (its format and checksum taken out, so nothing verifies it).
    if e.format < 2 {
        let newer = e.files.iter().any(|f| {
            f.link.is_some()
                || f.nlink != 0
                || f.new.owner.is_some()
                || f.old.as_ref().is_some_and(|o| o.owner.is_some())
        });
        if newer {
            return Err(
                "it has no format and no checksum (an entry of an older wstune), but carries fields only format 2 has (link, owner, nlink): no wstune wrote it so, it was changed after it was written".into(),
            );
        }
    }
    Ok(e)
}

/// Every path an entry names must be one wstune may own, so that a rollback can never be made
/// to write elsewhere: runtime values under /proc/sys only, files only wstune's own (its
/// sysctl.d and limits.d files, its systemd drop-ins), directories only theirs, each written
/// without `.`, `..` or empty components.
pub fn check_paths(e: &Entry) -> std::result::Result<(), String> {
    use crate::host::owned::{unit_dropin, LIMITS_FILE, SYSCTL_FILE};
    let canonical = |p: &str| {
        p.starts_with('/')
            && p[1..]
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
    };
    let managed = crate::catalog::managed();
    for r in &e.runtime {
        // A NIC queue's or interrupt's setting: only those paths, exactly.
        if crate::host::owned::nic_runtime_path(&r.path) && canonical(&r.path) {
            continue;
        }
        let key_ok = r.path.strip_prefix("/proc/sys/").is_some_and(|k| {
            k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        });
        if !canonical(&r.path) || !key_ok {
            return Err(format!(
                "runtime path {} is not a kernel setting under /proc/sys",
                r.path
            ));
        }
        let nic_own = crate::host::owned::NIC_SYSCTLS
            .iter()
            .any(|k| crate::host::procfs::sysctl_path(k) == r.path);
        if !nic_own
            && !managed
                .sysctls
                .iter()
                .any(|k| crate::host::procfs::sysctl_path(k) == r.path)
        {
            return Err(format!(
                "runtime path {} is not a setting wstune's catalog changes",
                r.path
            ));
        }
    }
    let own_file = |p: &str| {
        p == SYSCTL_FILE
            || p == LIMITS_FILE
            || p == crate::host::owned::NIC_RULES_FILE
            || p == crate::host::owned::NIC_SYSCTL_FILE
            || p == crate::host::owned::NIC_IRQ_SCRIPT
            || p == crate::host::owned::NIC_IRQ_UNIT
            || p == crate::host::owned::IRQBALANCE_POLICY
            || crate::host::owned::IRQBALANCE_CONFIGS.contains(&p)
            || p.strip_prefix("/etc/systemd/network/10-wstune-")
                .and_then(|r| r.strip_suffix(".link"))
                .is_some_and(|nic| {
                    crate::host::owned::nic_name_ok(nic)
                        && crate::host::owned::nic_link_file(nic) == p
                })
            || p.strip_prefix("/etc/systemd/system/")
                .and_then(|r| r.strip_suffix(".d/60-wstune.conf"))
                .is_some_and(|unit| !unit.contains('/') && unit_dropin(unit) == p)
    };
    for f in &e.files {
        if !canonical(&f.path) || !own_file(&f.path) {
            return Err(format!("file {} is not one wstune writes", f.path));
        }
        if let Some(target) = &f.link {
            if !link_target_ok(&f.path, target) {
                return Err(format!(
                    "file {} is to be a link to {target}, which is not a file wstune may write through",
                    f.path
                ));
            }
        }
    }
    for d in &e.created_dirs {
        let parent_of_own = e.files.iter().any(|f| f.path.starts_with(&format!("{d}/")));
        if !canonical(d) || !parent_of_own {
            return Err(format!(
                "directory {d} is not one wstune created for its files"
            ));
        }
    }
    for c in e
        .channels
        .iter()
        .map(|c| &c.nic)
        .chain(e.rings.iter().map(|r| &r.nic))
        .chain(e.nics.iter().map(|n| &n.name))
    {
        if !crate::host::owned::nic_name_ok(c) {
            return Err(format!("{c:?} is not a network interface name"));
        }
    }
    // What a rollback left names the entry's own records, never anything else.
    for p in &e.left {
        if let Some(nic) = &p.nic {
            if !crate::host::owned::nic_name_ok(nic) {
                return Err(format!("{nic:?} is not a network interface name"));
            }
        }
        let nic = p.nic.as_deref();
        let outside = p
            .runtime
            .iter()
            .find(|path| !e.runtime.iter().any(|r| r.path == **path))
            .cloned()
            .or_else(|| {
                (p.channels && !e.channels.iter().any(|c| Some(c.nic.as_str()) == nic))
                    .then(|| format!("{}'s channels", nic.unwrap_or("?")))
            })
            .or_else(|| {
                (p.ring && !e.rings.iter().any(|r| Some(r.nic.as_str()) == nic))
                    .then(|| format!("{}'s receive ring", nic.unwrap_or("?")))
            });
        if let Some(what) = outside {
            return Err(format!(
                "its record of what a rollback left names {what}, which the entry did not change"
            ));
        }
    }
    // The one service an apply restarts (and a rollback restarts again).
    for a in &e.actions {
        if let super::plan::Op::TryRestart { unit } = &a.op {
            if unit != IRQBALANCE_UNIT {
                return Err(format!("{unit} is not a service wstune restarts"));
            }
        }
    }
    for r in &e.registry {
        if !managed.registry_value(&r.key, &r.value) {
            return Err(format!(
                "registry value {}\\{} is not one wstune's catalog changes",
                r.key, r.value
            ));
        }
    }
    Ok(())
}

/// Whether a journaled link target may be restored: a plain name, in the link's own directory
/// (the only link apply writes through), other than the link itself.
fn link_target_ok(path: &str, target: &str) -> bool {
    !target.is_empty()
        && !target.contains('/')
        && !target.contains('\0')
        && target != "."
        && target != ".."
        && path.rsplit('/').next() != Some(target)
}

/// What to do about an entry that cannot be read: nothing can roll it back automatically.
/// `flags`: the run's `--root`/`--prefix` ([`super::flags`]).
pub fn damaged_fix(path: &std::path::Path, flags: &str) -> String {
    format!(
        "compare the host with it by hand, then move it aside (mv {p} {p}.damaged); `wstune rollback --id ID{flags}` still restores the other entries",
        p = path.display()
    )
}

/// An entry file that does not parse, and why.
#[derive(Debug, Clone)]
pub struct Damaged {
    pub path: std::path::PathBuf,
    pub error: String,
}

/// Every readable entry, oldest first, and the damaged ones, for callers that must report a
/// damaged entry rather than stop at it (`check`).
pub fn scan(store: &Store) -> Result<(Vec<Entry>, Vec<Damaged>)> {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for id in ids(store)? {
        let path = store.path(&path_of(&id));
        let parsed = store.read_text(&path_of(&id)).and_then(|t| parse(&t, &id));
        match parsed {
            Ok(e) => good.push(e),
            Err(error) => bad.push(Damaged { path, error }),
        }
    }
    Ok((good, bad))
}

/// Every entry, oldest first. A damaged file is an error naming it, not skipped silently.
pub fn list(store: &Store) -> Result<Vec<Entry>> {
    ids(store)?.iter().map(|id| load(store, id)).collect()
}

/// The ids of the entry files, oldest first. The directory is checked first ([`check_dir`]).
fn ids(store: &Store) -> Result<Vec<String>> {
    check_dir(store)?;
    let mut ids: Vec<String> = store
        .list(DIR)?
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    ids.sort();
    Ok(ids)
}

/// The journal lock, held (exclusively) by a running apply or rollback until dropped.
#[derive(Debug)]
pub struct Lock {
    _lock: FileLock,
    /// The directories taking the lock created (no journal existed yet), outermost first.
    /// Dropped without [`Lock::keep`] (a refusal, nothing to change), the lock file and these
    /// go again, while the lock is still held: an apply that changed nothing leaves no trace.
    created: Vec<String>,
    store: Store,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        let _ = self.store.remove(&lock_path());
        for d in self.created.iter().rev() {
            self.store.remove_dir_if_empty(d);
        }
    }
}

/// Whether an apply or rollback holds the lock right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    Free,
    Held,
}

fn lock_path() -> String {
    format!("{DIR}/.lock")
}

impl Lock {
    /// Take the lock, or fail at once (never wait) naming what holds it.
    pub fn acquire(store: &Store) -> Result<Lock> {
        let created = store.missing_dirs(&lock_path());
        if let Err(e) = store.create_dirs(&created) {
            for d in created.iter().rev() {
                store.remove_dir_if_empty(d);
            }
            return Err(e);
        }
        let lock = FileLock::acquire(store, &lock_path(), |path| {
            format!(
                "another wstune apply or rollback is running (it holds {}); wait for it to finish. Nothing was changed.",
                path.display()
            )
        })?;
        Ok(Lock {
            _lock: lock,
            created,
            store: store.clone(),
        })
    }

    /// Keep the journal directory this lock created: an entry is saved in it now.
    pub fn keep(&mut self) {
        self.created.clear();
    }

    /// Take the lock if the journal directory exists; None when it does not (no apply ever
    /// ran: nothing to recover, and nothing is created yet).
    pub fn acquire_existing(store: &Store) -> Result<Option<Lock>> {
        if store.is_dir(DIR) {
            Lock::acquire(store).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Whether someone holds the lock, without taking it or creating anything (for `check`).
    pub fn probe(store: &Store) -> LockState {
        if FileLock::held(store, &lock_path()) {
            LockState::Held
        } else {
            LockState::Free
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_with_a_ring_is_format_3_and_one_without_stays_2_for_older_versions() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut e: Entry = serde_json::from_value(serde_json::json!({
            "id": new_id(), "created": "now", "state": "pending", "profile": "100k",
            "actions": [], "runtime": [], "files": [], "created_dirs": [], "limits": [], "registry": []
        }))
        .unwrap();
        assert_eq!(format_of(&e), 2);
        save(&store, &e).unwrap();
        assert_eq!(load(&store, &e.id).unwrap().format, 2);
        e.rings.push(OldRing {
            nic: "eth0".into(),
            old: 512,
        });
        assert_eq!(format_of(&e), 3);
        save(&store, &e).unwrap();
        assert_eq!(load(&store, &e.id).unwrap().format, 3);
    }

    /// A rollback that leaves a NIC records exactly what it left; a later rollback of the
    /// entry is given only that (no sysctl, file, limit or restart the first one restored). An
    /// entry of the previous format (partly rolled back, nothing recorded) is restored whole,
    /// as then, and only an entry that records what was left is written as format 5.
    #[test]
    fn a_partly_rolled_back_entry_remains_only_what_its_rollback_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut e: Entry = serde_json::from_value(serde_json::json!({
            "id": new_id(), "created": "now", "state": "partly_rolled_back", "profile": "100k",
            "actions": [
                {"check": "linux.nic.queues[vb]", "setting": "vb channels", "from": "rx 1, tx 1", "to": "rx 2, tx 2",
                 "op": {"kind": "channels", "nic": "vb", "rx": 2, "tx": 2, "combined": null}},
                {"check": "linux.nic.queues[vb]", "setting": "vb queues/rx-0/rps_cpus", "from": "0", "to": "3",
                 "op": {"kind": "kernel_file", "path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "value": "3"}},
                {"check": "linux.net.somaxconn", "setting": "net.core.somaxconn", "from": "4096", "to": "65535",
                 "op": {"kind": "sysctl", "key": "net.core.somaxconn", "value": "65535"}},
                {"check": "linux.net.somaxconn", "setting": "net.core.somaxconn", "from": null, "to": "65535",
                 "op": {"kind": "sysctl_file", "key": "net.core.somaxconn", "value": "65535"}}
            ],
            "runtime": [
                {"path": "/sys/class/net/vb/queues/rx-0/rps_cpus", "old": "0\n"},
                {"path": "/proc/sys/net/core/somaxconn", "old": "4096\n"}
            ],
            "files": [{"path": "/etc/sysctl.d/60-wstune.conf", "old": null,
                       "new": {"base64": "", "mode": 420}}],
            "created_dirs": ["/etc/sysctl.d"], "limits": [{"pid": 1, "soft": 1024, "hard": 4096}],
            "registry": [],
            "channels": [{"nic": "vb", "old": {"rx": 1, "tx": 1, "combined": 0, "max_rx": 4, "max_tx": 4, "max_combined": 0}}],
            "nics": [{"name": "vb", "ifindex": 5, "netns": 4026532175u64, "boot": "b1"}]
        }))
        .unwrap();
        // The previous format: nothing recorded, so all of it, as before.
        assert!(!e.resumes());
        assert_eq!(e.remaining().runtime.len(), 2);
        assert_eq!(format_of(&e), 4);
        e.left = vec![LeftPart {
            nic: Some("vb".into()),
            kind: LeftKind::Refused,
            why: "the link now named vb is another NIC".into(),
            runtime: vec!["/sys/class/net/vb/queues/rx-0/rps_cpus".into()],
            channels: true,
            ring: false,
        }];
        let rest = e.remaining();
        assert_eq!(rest.runtime.len(), 1);
        assert_eq!(
            rest.runtime[0].path,
            "/sys/class/net/vb/queues/rx-0/rps_cpus"
        );
        assert_eq!(rest.channels.len(), 1);
        assert!(rest.files.is_empty() && rest.created_dirs.is_empty() && rest.limits.is_empty());
        assert_eq!(rest.actions.len(), 2, "{:?}", rest.actions);
        assert!(rest.actions.iter().all(|a| a.setting.starts_with("vb ")));
        save(&store, &e).unwrap();
        let back = load(&store, &e.id).unwrap();
        assert_eq!((back.format, back.left.clone()), (5, e.left.clone()));
        // A record naming what the entry never changed is refused like any foreign path.
        e.left[0]
            .runtime
            .push("/proc/sys/net/ipv4/tcp_fin_timeout".into());
        assert!(check_paths(&e)
            .unwrap_err()
            .contains("names /proc/sys/net/ipv4/tcp_fin_timeout, which the entry did not change"));
        e.left[0].runtime.pop();
        e.left[0].ring = true;
        assert!(check_paths(&e).unwrap_err().contains("vb's receive ring"));
    }

    #[test]
    fn entries_round_trip_and_sort_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let a = new_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_id();
        assert!(a < b, "{a} < {b}");
        for id in [&b, &a] {
            let e = Entry {
                format: FORMAT,
                checksum: String::new(),
                id: id.clone(),
                created: "now".into(),
                state: State::Pending,
                profile: "100k".into(),
                actions: vec![],
                runtime: vec![OldRuntime {
                    path: "/proc/sys/net/core/somaxconn".into(),
                    old: "1\t2\n".into(),
                }],
                files: vec![OldFile {
                    path: "/etc/sysctl.d/60-wstune.conf".into(),
                    old: None,
                    new: Blob::from(&FileState {
                        bytes: vec![0, 255, 10],
                        mode: 0o644,
                        owner: None,
                    }),
                    link: None,
                    nlink: 0,
                }],
                created_dirs: vec![],
                limits: vec![],
                registry: vec![],
                channels: vec![],
                rings: vec![],
                nics: vec![],
                left: vec![],
                failure: None,
            };
            save(&store, &e).unwrap();
        }
        let all = list(&store).unwrap();
        assert_eq!(
            all.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
            vec![a.clone(), b]
        );
        assert_eq!(all[0].files[0].new.state().unwrap().bytes, vec![0, 255, 10]);
        assert_eq!(all[0].runtime[0].old, "1\t2\n");
        assert!(load(&store, "../etc/passwd").is_err());
        // Only what the catalogs change: not any /proc/sys key, not any HKLM value.
        let mut e = all[0].clone();
        e.runtime[0].path = "/proc/sys/kernel/core_pattern".into();
        assert!(check_paths(&e).unwrap_err().contains("not a setting"));
        let reg = |key: &str, value: &str| {
            let mut e = all[0].clone();
            e.registry = vec![OldRegistry {
                key: key.into(),
                value: value.into(),
                kind: crate::host::RegType::Dword,
                old: None,
            }];
            check_paths(&e)
        };
        let tcpip = "HKLM\\SYSTEM\\CurrentControlSet\\Services\\Tcpip\\Parameters";
        assert!(reg(tcpip, "TcpTimedWaitDelay").is_ok());
        assert!(reg(tcpip, "ImagePath").is_err());
        assert!(reg(
            "HKLM\\SYSTEM\\CurrentControlSet\\Services\\EvilSvc",
            "ImagePath"
        )
        .unwrap_err()
        .contains("not one wstune's catalog changes"));
        assert!(load(&store, "nope")
            .unwrap_err()
            .to_string()
            .contains("rollback --list"));
    }
}
