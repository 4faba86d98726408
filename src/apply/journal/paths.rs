//! What an entry may name: whoever can write an entry file chooses what a rollback writes, so
//! an entry is trusted only when each of its paths is one wstune itself changes.

use super::{Entry, IRQBALANCE_UNIT};

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
        if let crate::apply::plan::Op::TryRestart { unit } = &a.op {
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
