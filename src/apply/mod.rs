//! `apply` and `rollback`: change a host to a profile safely, and put it back exactly.
//!
//! Flow: findings + facts -> [`plan::plan`] (pure) -> [`record`] (the journal entry, saved
//! before any change) -> [`execute`] (on the first failure, [`restore`] undoes everything and
//! the entry says so) -> check again. `rollback` is [`restore`] of a saved entry. Before planning, apply restores an
//! entry a killed apply left `pending` ([`recover::undo_interrupted`]).

pub mod journal;
pub mod nic;
pub mod nics;
pub mod plan;
pub mod recover;

use crate::catalog::eval::{Finding, Status};
use crate::host::procfs::sysctl_path;
use crate::host::store::{FileState, Store};
use crate::host::{Backend, ReadError};
use crate::value::Value;
use anyhow::{anyhow, Result};
use journal::{Blob, Entry, OldFile, OldLimits, OldRegistry, OldRuntime, State};
use plan::{Op, Plan};

/// The `--root` and `--prefix` this run was given, as flags to append to a `wstune apply` or
/// `rollback` line it tells the user to run (with a leading space; empty on the live host with
/// neither): a hint without them would act on the live host's files and journal instead of
/// the ones this run used.
pub fn flags(store: &Store) -> String {
    let layout = store.layout();
    let mut out = String::new();
    for (flag, dir) in [("--root", layout.tree()), ("--prefix", layout.prefix())] {
        if let Some(dir) = dir {
            out.push_str(&format!(" {flag} {}", shell_word(&dir.to_string_lossy())));
        }
    }
    out
}

/// `s` as one shell word: as it is when it has nothing a shell would read, else in single
/// quotes (a quote inside written as '\'').
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Build the journal entry for `plan`: every old value and file it will replace, and the new
/// file contents. Nothing is changed yet. The old values are read here, once, right before
/// the change and as the bytes the host has (a restore writes back exactly those), not taken
/// from the facts the plan was made from.
pub fn record(plan: &Plan, backend: &dyn Backend, store: &Store, profile: &str) -> Result<Entry> {
    // First, before reading anything else: a merged file must still be what the plan merged
    // into, else its new text would drop what changed meanwhile (an operator's edit, another
    // tool's line) while the journal recorded the newer bytes as "old".
    for (path, from) in &plan.rendered_from {
        let now = store.read(path)?.map(|f| f.bytes).unwrap_or_default();
        if now != from.as_bytes() {
            return Err(anyhow!(
                "{path} changed since the check this plan was made from; nothing was changed: run apply again"
            ));
        }
    }
    let mut e = Entry {
        format: journal::FORMAT,
        checksum: String::new(),
        id: journal::new_id(),
        created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        state: State::Pending,
        profile: profile.to_string(),
        actions: plan.actions.clone(),
        runtime: vec![],
        files: vec![],
        created_dirs: vec![],
        limits: vec![],
        registry: vec![],
        channels: vec![],
        rings: vec![],
        nics: vec![],
        left: vec![],
        failure: None,
    };
    let managed = crate::catalog::managed();
    for a in &plan.actions {
        record_old_value(&mut e, &a.op, backend, managed)?;
    }
    // Who each NIC is, beside its name: rollback finds it by that.
    e.nics = nics::identities(backend, &nics::nics_of(&plan.actions));
    for (path, text) in &plan.files {
        record_file(&mut e, path, text, store)?;
    }
    Ok(e)
}

/// Read and record in `e` the value `op` will replace, refusing (before anything is changed)
/// what a rollback could not put back.
fn record_old_value(
    e: &mut Entry,
    op: &Op,
    backend: &dyn Backend,
    managed: &crate::catalog::Managed,
) -> Result<()> {
    match op {
        Op::Sysctl { key, .. } => {
            // A rollback restores only what the built-in catalogs change (a journal entry
            // naming anything else is refused): never change what it could not put back.
            if !managed.sysctls.contains(key)
                && !crate::host::owned::NIC_SYSCTLS.contains(&key.as_str())
            {
                return Err(anyhow!(
                    "{key} is not a setting of wstune's built-in catalog, so a rollback would refuse to restore it; nothing was changed. Fix: set it by hand, or apply with the built-in catalog"
                ));
            }
            let path = sysctl_path(key);
            let old = backend
                .read(&path)
                .map_err(|err| anyhow!("cannot read {key} before changing it: {err}"))?;
            e.runtime.push(OldRuntime { path, old });
        }
        Op::Prlimit { pid, .. } => {
            let (soft, hard) = crate::gather::nofile_of(backend, *pid)
                .ok_or_else(|| anyhow!("cannot read the limits of process {pid}"))?;
            e.limits.push(OldLimits {
                pid: *pid,
                soft,
                hard,
            });
        }
        Op::Registry {
            key,
            value,
            reg_type,
            ..
        } => {
            if !managed.registry_value(key, value) {
                return Err(anyhow!(
                    "{key}\\{value} is not a value of wstune's built-in catalog, so a rollback would refuse to restore it; nothing was changed. Fix: set it by hand, or apply with the built-in catalog"
                ));
            }
            let old = match backend.registry(key, value, *reg_type) {
                Ok(v) => Some(v),
                Err(ReadError::NotFound(_)) => None,
                Err(err) => {
                    return Err(anyhow!(
                        "cannot read {key}\\{value} before changing it: {err}"
                    ))
                }
            };
            e.registry.push(OldRegistry {
                key: key.clone(),
                value: value.clone(),
                kind: *reg_type,
                old,
            });
        }
        Op::KernelFile { path, .. } => {
            if !crate::host::owned::nic_runtime_path(path) {
                return Err(anyhow!(
                    "{path} is not a NIC queue or interrupt setting wstune changes, so a rollback would refuse to restore it; nothing was changed"
                ));
            }
            let old = backend
                .read(path)
                .map_err(|err| anyhow!("cannot read {path} before changing it: {err}"))?;
            e.runtime.push(OldRuntime {
                path: path.clone(),
                old,
            });
        }
        Op::Channels { nic, .. } => {
            if !crate::host::owned::nic_name_ok(nic) {
                return Err(anyhow!(
                    "{nic:?} is not a network interface name; nothing was changed"
                ));
            }
            let old = backend.channels(nic).map_err(|err| {
                anyhow!("cannot read {nic}'s channel counts before changing them: {err}")
            })?;
            e.channels.push(journal::OldChannels {
                nic: nic.clone(),
                old,
            });
        }
        Op::RxRing { nic, .. } => {
            if !crate::host::owned::nic_name_ok(nic) {
                return Err(anyhow!(
                    "{nic:?} is not a network interface name; nothing was changed"
                ));
            }
            let (old, _) = backend.rx_ring(nic).map_err(|err| {
                anyhow!("cannot read {nic}'s receive ring before changing it: {err}")
            })?;
            e.rings.push(journal::OldRing {
                nic: nic.clone(),
                old,
            });
        }
        Op::TryRestart { unit } => {
            if unit != journal::IRQBALANCE_UNIT {
                return Err(anyhow!(
                    "{unit} is not a service wstune restarts; nothing was changed"
                ));
            }
        }
        // Files are recorded whole, from the plan's rendered texts (record_file).
        Op::SysctlFile { .. }
        | Op::NicSysctlLine { .. }
        | Op::IrqbalancePolicy
        | Op::IrqbalanceArgs { .. }
        | Op::LimitsFile { .. }
        | Op::UnitDropIn { .. }
        | Op::NicRules
        | Op::NicSysctlFile { .. }
        | Op::NicLinkFile { .. }
        | Op::NicIrqFiles => {}
    }
    Ok(())
}

/// Record in `e` the file at `path` the plan writes `text` to: what is there now (or that it is
/// absent, and the folders it needs), and what will be.
fn record_file(e: &mut Entry, path: &str, text: &str, store: &Store) -> Result<()> {
    for dir in store.missing_dirs(path) {
        if !e.created_dirs.contains(&dir) {
            e.created_dirs.push(dir);
        }
    }
    // What the path is (a link, hard links) first: what cannot be written through and put
    // back exactly is refused here, before anything is changed.
    let shape = store.shape(path)?.unwrap_or_default();
    let old = store.read(path)?;
    // An existing file keeps its mode and owner (a 0640 file stays 0640 while applied). A
    // new script (`#!`) is executable: irqbalance execs its policy script, it does not
    // hand it to a shell.
    let fresh = if text.starts_with("#!") { 0o755 } else { 0o644 };
    let new = FileState {
        bytes: text.as_bytes().to_vec(),
        mode: old.as_ref().map_or(fresh, |o| o.mode),
        owner: old.as_ref().and_then(|o| o.owner),
    };
    e.files.push(OldFile {
        path: path.to_string(),
        old: old.as_ref().map(Blob::from),
        new: Blob::from(&new),
        link: shape.link,
        nlink: shape.nlink,
    });
    Ok(())
}

/// Make the changes the entry describes. The entry must already be saved. On the first failure
/// everything is restored and the entry is saved as `undone`; the error names the action.
pub fn execute(entry: &mut Entry, backend: &dyn Backend, store: &Store) -> Result<()> {
    // Failpoint steps (tests/commands/apply_killed.rs kills apply at each): 0 = the entry is saved and
    // nothing is changed yet, 1..=A after each action, A+1..=A+F after each file, A+F+1 after
    // the commit.
    crate::failpoint::pause_after_action(0);
    let result = run_steps(entry, backend, store).and_then(|()| {
        entry.state = State::Applied;
        // A commit that cannot be written (a full disk) is a failed step like any other: the
        // changes are undone below, not left in place under an apply that reports failure and
        // an entry that still says pending.
        journal::save(store, entry)
            .map_err(|e| format!("the journal could not record the apply as done: {e:#}"))
    });
    match result {
        Ok(()) => {
            crate::failpoint::pause_after_action(entry.actions.len() + entry.files.len() + 1);
            Ok(())
        }
        Err(failure) => {
            let undo = restore(entry, backend, store);
            entry.state = State::Undone;
            entry.failure = Some(failure.clone());
            let saved = journal::save(store, entry);
            let mut msg = format!("{failure}\nNothing was left changed: every change made before it was undone (journal entry {}).", entry.id);
            if !undo.is_empty() {
                msg = format!(
                    "{failure}\nUndoing the changes made before it failed for: {}.\nFix that, then run `wstune rollback --id {}{}`.",
                    undo.join("; "),
                    entry.id,
                    flags(store)
                );
            }
            if let Err(e) = saved {
                msg.push_str(&format!("\nThe journal could not be updated: {e:#}"));
            }
            Err(anyhow!(msg))
        }
    }
}

fn run_steps(
    entry: &Entry,
    backend: &dyn Backend,
    store: &Store,
) -> std::result::Result<(), String> {
    let total = entry.actions.len();
    let fail = |i: usize, a: &plan::Action, err: String| {
        format!(
            "action {}/{total} failed: {} -> {} at {}: {err}",
            i + 1,
            a.setting,
            a.to,
            a.op.place()
        )
    };
    for (i, a) in entry.actions.iter().enumerate() {
        let r = match &a.op {
            Op::Sysctl { key, value } => backend
                .write_runtime(&sysctl_path(key), value)
                .map_err(|e| e.to_string()),
            Op::KernelFile { path, value } => backend
                .write_runtime(path, value)
                .map_err(|e| e.to_string()),
            Op::Channels {
                nic,
                rx,
                tx,
                combined,
            } => backend
                .set_channels(nic, *rx, *tx, *combined)
                .map_err(|e| e.to_string()),
            Op::RxRing { nic, rx } => backend.set_rx_ring(nic, *rx).map_err(|e| e.to_string()),
            Op::Prlimit { pid, soft, hard } => backend
                .set_nofile(*pid, *soft, *hard)
                .map_err(|e| e.to_string()),
            Op::Registry {
                key,
                value,
                reg_type,
                data,
            } => backend
                .set_registry(key, value, *reg_type, Some(data))
                .map_err(|e| e.to_string()),
            _ => Ok(()),
        };
        r.map_err(|e| fail(i, a, e))?;
        crate::failpoint::pause_after_action(i + 1);
    }
    for (k, f) in entry.files.iter().enumerate() {
        let state = f.new.state().map_err(|e| format!("{e:#}"))?;
        store.write(&f.path, &state).map_err(|e| {
            // The file holds several actions (every sysctl.d line): name them all, not the
            // first one's setting as if it alone had failed.
            let mine: Vec<usize> = entry
                .actions
                .iter()
                .enumerate()
                .filter(|(_, a)| a.op.place() == f.path)
                .map(|(i, _)| i + 1)
                .collect();
            let which = match (mine.first(), mine.last()) {
                (Some(a), Some(b)) if a == b => format!("action {a}/{total}"),
                (Some(a), Some(b)) if b - a + 1 == mine.len() => format!("actions {a}-{b}/{total}"),
                _ => format!(
                    "actions {}/{total}",
                    mine.iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            format!("writing {} failed ({which}): {e:#}", f.path)
        })?;
        crate::failpoint::pause_after_action(total + k + 1);
    }
    // A service reads its changed files only when restarted: after they are all written.
    for (i, a) in entry.actions.iter().enumerate() {
        if let Op::TryRestart { unit } = &a.op {
            backend
                .try_restart(unit)
                .map_err(|e| fail(i, a, e.to_string()))?;
        }
    }
    Ok(())
}

/// What a restore did: how many values and files it changed back (those already as they were
/// are not written, nor counted), and what could not be restored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Restoration {
    /// Runtime values written back: sysctls, queue files, channel counts, rings, limits,
    /// registry values.
    pub values: usize,
    /// Files written back or removed.
    pub files: usize,
    pub errors: Vec<String>,
}

/// Put back every old value and file in the entry. Values already equal are not written again.
/// Returns what could not be restored (empty on success).
pub fn restore(entry: &Entry, backend: &dyn Backend, store: &Store) -> Vec<String> {
    restore_counted(entry, backend, store).errors
}

/// [`restore`], counting what it changed.
pub fn restore_counted(entry: &Entry, backend: &dyn Backend, store: &Store) -> Restoration {
    let mut done = Restoration::default();
    let mut errors = Vec::new();
    let same = |a: &str, b: &str| a.split_whitespace().eq(b.split_whitespace());
    // Channels first: a queue added by the apply goes with them, and the queues that stay get
    // their old settings below.
    for c in entry.channels.iter().rev() {
        if backend.channels(&c.nic).ok() == Some(c.old) {
            continue;
        }
        let [rx, tx, combined] = entry.channels_to_restore(&c.nic, &c.old);
        match backend.set_channels(&c.nic, rx, tx, combined) {
            Ok(()) => done.values += 1,
            Err(e) => errors.push(format!("{}'s channels: {e}", c.nic)),
        }
    }
    for r in entry.rings.iter().rev() {
        if backend.rx_ring(&r.nic).ok().map(|(now, _)| now) == Some(r.old) {
            continue;
        }
        match backend.set_rx_ring(&r.nic, r.old) {
            Ok(()) => done.values += 1,
            Err(e) => errors.push(format!("{}'s receive ring: {e}", r.nic)),
        }
    }
    for r in entry.runtime.iter().rev() {
        match backend.read(&r.path) {
            Ok(now) if same(&now, &r.old) => continue,
            // A NIC queue or interrupt that is gone (fewer channels now, the NIC removed, the
            // driver reloaded) took its setting with it: nothing is left to put back.
            Err(ReadError::NotFound(_)) if crate::host::owned::nic_runtime_path(&r.path) => {
                continue
            }
            _ => {}
        }
        // Exactly what was read (less the newline the backend adds back): a captured tree gets
        // its bytes back, and the kernel parses tabs and spaces alike.
        let value = r.old.strip_suffix('\n').unwrap_or(&r.old);
        match backend.write_runtime(&r.path, value) {
            Ok(()) => done.values += 1,
            Err(e) => errors.push(format!("{}: {e}", r.path)),
        }
    }
    for l in &entry.limits {
        if crate::gather::nofile_of(backend, l.pid) == Some((l.soft, l.hard)) {
            continue;
        }
        match backend.set_nofile(l.pid, l.soft, l.hard) {
            Ok(()) => done.values += 1,
            Err(e) => errors.push(format!("nofile of process {}: {e}", l.pid)),
        }
    }
    for r in &entry.registry {
        let now = backend.registry(&r.key, &r.value, r.kind).ok();
        if now == r.old {
            continue;
        }
        match backend.set_registry(&r.key, &r.value, r.kind, r.old.as_deref()) {
            Ok(()) => done.values += 1,
            Err(e) => errors.push(format!("{}\\{}: {e}", r.key, r.value)),
        }
    }
    for f in entry.files.iter().rev() {
        // Already as it was (never written, or written back): nothing to undo. A file apply
        // never got to write may sit in a directory nothing can write (read-only), and
        // removing what is not there must not count as a failed undo.
        let now = store.read(&f.path).ok().flatten().map(|n| Blob::from(&n));
        let linked = f
            .link
            .as_ref()
            .is_none_or(|t| store.link_target(&f.path).as_ref() == Some(t));
        let unchanged = linked
            && match (&f.old, &now) {
                (None, None) => true,
                (Some(old), Some(now)) => old.same_as(now),
                _ => false,
            };
        if unchanged {
            continue;
        }
        let r = match (&f.old, &f.link) {
            (Some(old), Some(target)) => store
                .relink(&f.path, target)
                .and_then(|()| old.state())
                .and_then(|s| store.write(&f.path, &s)),
            (Some(old), None) => old.state().and_then(|s| store.write(&f.path, &s)),
            (None, _) => store.remove(&f.path),
        };
        match r {
            Ok(()) => done.files += 1,
            Err(e) => errors.push(format!("{}: {e:#}", f.path)),
        }
    }
    for d in entry.created_dirs.iter().rev() {
        store.remove_dir_if_empty(d);
    }
    // The restored files are read by the service only once it restarts (only if it runs).
    for a in &entry.actions {
        if let Op::TryRestart { unit } = &a.op {
            if unit != journal::IRQBALANCE_UNIT {
                continue;
            }
            if let Err(e) = backend.try_restart(unit) {
                errors.push(format!("{unit}: {e}"));
            }
        }
    }
    done.errors = errors;
    done
}

/// Restart the adapters whose keywords changed, so their drivers read them; what happened, a
/// line each. A restart that fails leaves the values written (they take effect at the
/// adapter's next restart or the next boot): it is said, with the command, never undone.
pub fn restart_adapters(backend: &dyn Backend, names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|name| match backend.restart_adapter(name) {
            Ok(()) => format!("Restarted adapter {name}: it now reads its RSS keywords."),
            Err(e) => format!(
                "note: adapter {name} could not be restarted here ({e}); its keywords take effect when it restarts: Restart-NetAdapter -InterfaceDescription '{name}'"
            ),
        })
        .collect()
}

/// The adapters an entry changed keywords of (its `windows.nic.*[NAME]` actions).
pub fn adapters_of(entry: &Entry) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in &entry.actions {
        if let (Op::Registry { .. }, Some(rest)) = (&a.op, a.check.strip_prefix("windows.nic.")) {
            if let Some(name) = rest.split_once('[').map(|(_, n)| n.trim_end_matches(']')) {
                if !out.iter().any(|o| o == name) {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

/// Remove the temporaries a killed write left beside wstune's files (`files`, journaled) and
/// in its journal directory: its own (`.wstune-tmp.*`), also in the directory a link led to,
/// and an older wstune's (`.tmpXXXXXX`) where their bytes are exactly a journaled new content
/// (anything else of that name is not known to be wstune's and stays); and those the
/// backend's own writes left (a captured tree's values). The caller holds the journal lock,
/// so no write of wstune's is running. Returns the host paths removed.
pub fn remove_temporaries<'a>(
    store: &Store,
    backend: &dyn Backend,
    files: impl IntoIterator<Item = &'a OldFile>,
) -> Vec<String> {
    use crate::host::owned::{LIMITS_FILE, SYSCTL_FILE};
    let files: Vec<&OldFile> = files.into_iter().collect();
    let journal_file = format!("{}/.lock", journal::DIR);
    let mut dirs: Vec<String> = vec![SYSCTL_FILE.into(), LIMITS_FILE.into(), journal_file];
    for f in &files {
        dirs.push(f.path.clone());
        if let Some(target) = &f.link {
            if let Some((dir, _)) = f.path.rsplit_once('/') {
                if !target.starts_with('/') {
                    dirs.push(format!("{dir}/{target}"));
                }
            }
        }
    }
    let new: Vec<Vec<u8>> = files
        .iter()
        .filter_map(|f| f.new.state().ok().map(|s| s.bytes))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut removed = Vec::new();
    for p in &dirs {
        let dir = p
            .rsplit_once('/')
            .map_or(p.as_str(), |(d, _)| d)
            .to_string();
        if seen.insert(dir) {
            removed.extend(store.remove_temporaries_beside(p));
            removed.extend(store.remove_legacy_temporaries_beside(p, &new));
        }
    }
    removed.extend(backend.remove_temporaries());
    removed
}

/// What `check` reports about the journal: an interrupted or damaged entry, and drift.
pub fn journal_findings(store: &Store, backend: &dyn Backend) -> Vec<Finding> {
    recover::finding(store, backend.privileged())
        .into_iter()
        .chain(drift(store, backend))
        .collect()
}

/// Whether the host still matches what wstune applied: for each value and file, what the newest
/// applied entry that set it says (an older entry's value that no later apply changed is
/// compared too). A NIC is found by its identity (renamed, it is compared under its new name);
/// one gone since is drift. A finding for `check`, or None when nothing was ever applied.
pub fn drift(store: &Store, backend: &dyn Backend) -> Option<Finding> {
    let (entries, _damaged) = journal::scan(store).ok()?;
    let applied: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.state == State::Applied)
        .collect();
    let newest = applied.last()?;
    let any_nic = applied
        .iter()
        .any(|e| !nics::nics_of(&e.actions).is_empty());
    let now = if any_nic {
        backend.nic_identities()
    } else {
        Ok(vec![])
    };
    let mut drifted = Vec::new();
    // What a newer entry already compared: (kind, key).
    let mut seen = std::collections::BTreeSet::new();
    for e in applied.iter().rev() {
        let resolved = nics::resolve(e, now.clone(), &nics::lister(backend), false);
        for l in &resolved.left {
            let whose = l.nic.clone().unwrap_or_else(|| l.whose());
            if seen.insert(("nic", whose.clone())) {
                drifted.push(format!("{whose}: {}", l.why));
            }
        }
        drift_of(&resolved.entry, backend, &mut seen, &mut drifted);
        for f in &e.files {
            if !seen.insert(("file", f.path.clone())) {
                continue;
            }
            let now = store.read(&f.path).ok().flatten();
            if now.as_ref().map(Blob::from).map(|b| b.base64) != Some(f.new.base64.clone()) {
                drifted.push(format!(
                    "{} was {}",
                    f.path,
                    if now.is_some() { "edited" } else { "removed" }
                ));
            }
        }
    }
    let ok = drifted.is_empty();
    let ids: Vec<&str> = applied.iter().map(|e| e.id.as_str()).collect();
    let target = match ids.as_slice() {
        [one] => format!("apply {one}"),
        many => format!("{} applies, newest {}", many.len(), newest.id),
    };
    // The words are checks/wstune.yaml's; the verdict is this comparison's, and the commands
    // it names carry this run's --root/--prefix.
    let check = crate::catalog::computed::get("wstune.journal.drift");
    let flags = flags(store);
    let fix = (!flags.is_empty()).then(|| {
        check
            .fix
            .runtime
            .as_deref()
            .unwrap_or_default()
            .replace("wstune apply", &format!("wstune apply{flags}"))
            .replace("wstune rollback", &format!("wstune rollback{flags}"))
    });
    Some(check.finding(
        if ok { Status::Pass } else { Status::Warn },
        Value::Text(if ok {
            "unchanged".into()
        } else {
            format!("{} drifted", drifted.len())
        }),
        Value::Text(target),
        if ok {
            match ids.as_slice() {
                [one] => format!("entry {one}"),
                many => format!("entries {}", many.join(", ")),
            }
        } else {
            drifted.join("; ")
        },
        fix,
    ))
}

/// The runtime values of one applied entry that drifted, each compared only if no newer entry
/// set it (`seen`).
fn drift_of(
    entry: &Entry,
    backend: &dyn Backend,
    seen: &mut std::collections::BTreeSet<(&'static str, String)>,
    drifted: &mut Vec<String>,
) {
    for a in &entry.actions {
        match &a.op {
            Op::Channels {
                nic,
                rx,
                tx,
                combined,
            } if seen.insert(("channels", nic.clone())) => {
                if let Ok(now) = backend.channels(nic) {
                    let off = |want: &Option<u32>, have: u32| want.is_some_and(|w| w != have);
                    if off(rx, now.rx) || off(tx, now.tx) || off(combined, now.combined) {
                        drifted.push(format!(
                            "{nic}'s channels are rx {} tx {} combined {} (applied {})",
                            now.rx, now.tx, now.combined, a.to
                        ));
                    }
                }
            }
            Op::RxRing { nic, rx } if seen.insert(("ring", nic.clone())) => {
                if let Ok((now, _)) = backend.rx_ring(nic) {
                    if now != *rx {
                        drifted.push(format!("{nic}'s receive ring is {now} (applied {rx})"));
                    }
                }
            }
            Op::KernelFile { path, value } if seen.insert(("runtime", path.clone())) => {
                match backend.read(path) {
                    Ok(now) if crate::nic::same_setting(path, &now, value) => {}
                    Ok(now) => drifted.push(format!("{path} is {} (applied {value})", now.trim())),
                    Err(e) => drifted.push(format!("{path}: {e}")),
                }
            }
            Op::Sysctl { key, value } if seen.insert(("runtime", sysctl_path(key))) => {
                match backend.read(&sysctl_path(key)) {
                    Ok(now) if now.split_whitespace().eq(value.split_whitespace()) => {}
                    Ok(now) => drifted.push(format!(
                        "{key} is {} (applied {value})",
                        now.split_whitespace().collect::<Vec<_>>().join(" ")
                    )),
                    Err(e) => drifted.push(format!("{key}: {e}")),
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
