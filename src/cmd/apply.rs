//! `wstune apply`: check, plan, show, confirm, journal, change, check again.

use crate::apply::{self, journal, plan};
use crate::catalog::eval::Status;
use crate::catalog::Scope as CheckScope;
use crate::cli::args::ApplyArgs;
use crate::cli::confirm::{confirm, PASS_YES};
use crate::cli::{exit, resolve};
use crate::cmd::check::{make_report, make_report_and_facts};
use crate::output;
use crate::output::say;
use anyhow::{bail, Result};

/// The refusal for a real apply without root, wherever it is first noticed.
const NOT_ROOT: &str = "apply changes kernel settings and files under /etc: run it as root (sudo wstune apply ...), or add --dry-run to only see the plan. Nothing was changed.";
/// The same refusal on Windows, where HKLM is writable only from an elevated process.
const NOT_ADMIN: &str = "apply changes registry values under HKLM: run it from an elevated prompt (Run as administrator), or add --dry-run to only see the plan. Nothing was changed.";

/// Why an unprivileged apply is refused, in the platform's words.
pub fn not_privileged(platform: crate::catalog::Platform) -> &'static str {
    match platform {
        crate::catalog::Platform::Linux => NOT_ROOT,
        crate::catalog::Platform::Windows => NOT_ADMIN,
    }
}

pub fn run(a: &ApplyArgs) -> Result<u8> {
    let backend = resolve::backend(a.root.as_deref(), a.prefix.as_deref())?;
    let backend = backend.as_ref();
    let store = resolve::store(a.root.as_deref(), a.prefix.as_deref());
    let inputs = resolve::inputs(&a.target, backend)?;
    refuse_unit_without_systemd(a, backend)?;
    // One apply or rollback at a time. Taken before reading the journal so that a `pending`
    // entry seen under the lock is one whose process died. With no journal directory yet there
    // is nothing to recover, and it is taken (creating it) only when there is something to do,
    // so a refusal leaves no trace. Without root there is no lock to take (and nothing will be
    // changed: the refusal comes below, or from the recovery).
    let mut lock = if a.dry_run || !backend.privileged() {
        None
    } else {
        journal::Lock::acquire_existing(&store)?
    };
    let (entries, damaged) = journal::scan(&store)?;
    if let Some(d) = damaged.first() {
        bail!(
            "journal entry {} is damaged ({}): apply cannot tell what an earlier apply changed, so it changes nothing.\nFix: {}",
            d.path.display(),
            d.error,
            journal::damaged_fix(&d.path)
        );
    }
    if entries.iter().any(|e| e.state == journal::State::Pending) {
        if a.dry_run {
            if journal::Lock::probe(&store) == journal::LockState::Held {
                say!("note: another apply or rollback is running now (its entry shows as pending until it ends); this plan may be out of date when it finishes");
            } else {
                say!("note: an earlier apply was interrupted (`wstune rollback --list` shows it as pending); a real apply first undoes it, so this plan may differ from the one it will make");
            }
        } else if !backend.privileged() {
            bail!(not_privileged(backend.platform()));
        } else {
            if !a.yes {
                confirm(
                    "An earlier apply was interrupted midway. Undo its changes first?",
                    PASS_YES,
                )?;
            }
            for line in apply::recover::undo_interrupted(&entries, backend, &store)? {
                // Not eprintln!: a closed stderr (`2>&1 | head`) must not stop the apply here,
                // between the undo and the new changes.
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "wstune: {line}");
            }
        }
    }
    let (before, facts) = make_report_and_facts(&inputs, backend, None);
    let scope = plan::Scope {
        runtime: !a.persist_only,
        persist: !a.runtime_only,
    };
    let p = plan::plan(&inputs.catalog, &before.results, &facts, scope);
    let profile = &inputs.profile.profile.name;

    if p.actions.is_empty() {
        say!("Nothing to change: this host already has every setting wstune can change for profile {profile}.");
        print_notes(&p.notes);
        print_remaining(&before.results);
        return Ok(exit::OK);
    }
    say!("{}", plan_table(&p));
    print_notes(&p.notes);
    if a.dry_run {
        say!("Dry run: nothing was changed.");
        return Ok(exit::OK);
    }

    if !backend.privileged() {
        bail!(not_privileged(backend.platform()));
    }
    refuse_read_only_proc_sys(&inputs.catalog, &before.results, &p)?;
    if !a.yes {
        confirm(
            &format!("Apply these {} change(s)?", p.actions.len()),
            PASS_YES,
        )?;
    }

    if lock.is_none() {
        lock = Some(journal::Lock::acquire(&store)?);
    }
    let mut entry = apply::record(
        &p,
        backend,
        &store,
        &format!("{profile} ({})", inputs.profile.source),
    )?;
    journal::save(&store, &entry)?;
    apply::execute(&mut entry, backend, &store)?;
    say!(
        "Applied {} change(s); the old values are in journal entry {} (undo with `wstune rollback`).",
        entry.actions.len(),
        entry.id
    );
    let after = make_report(&inputs, backend, Some(&store));
    let s = &after.summary;
    say!(
        "check after apply: {} pass, {} fail, {} warn, {} skip, {} info",
        s.pass,
        s.fail,
        s.warn,
        s.skip,
        s.info
    );
    print_remaining(&after.results);
    drop(lock);
    Ok(exit::OK)
}

/// `--unit` on a host where systemd cannot be asked (not running, or a captured tree without
/// the unit): a drop-in would be planned for nothing, so say so instead of planning nothing.
fn refuse_unit_without_systemd(a: &ApplyArgs, backend: &dyn crate::host::Backend) -> Result<()> {
    let Some(unit) = &a.target.unit else {
        return Ok(());
    };
    match backend.systemd_property(unit, "LimitNOFILE") {
        Err(crate::host::ReadError::NotFound(what)) | Err(crate::host::ReadError::Unsupported(what)) => bail!(
            "--unit {unit}: {what} does not exist, so there is no unit to give a LimitNOFILE drop-in; drop --unit and raise the server's limit in whatever starts it (or pass --pid PID for the running process). Nothing was changed."
        ),
        _ => Ok(()),
    }
}

/// The plan for people: one row per setting (its change now and at boot side by side, not two
/// rows), grouped by area in the check table's order, then the files it writes.
fn plan_table(p: &plan::Plan) -> String {
    // (area, setting) -> (now, at boot), in first-seen order within each area.
    let mut rows: Vec<(&'static str, String, Option<String>, Option<String>)> = Vec::new();
    for a in &p.actions {
        let change = format!("{} -> {}", a.from.as_deref().unwrap_or("-"), a.to);
        let area = crate::report::area(&a.check);
        let i = match rows.iter().position(|r| r.0 == area && r.1 == a.setting) {
            Some(i) => i,
            None => {
                rows.push((area, a.setting.clone(), None, None));
                rows.len() - 1
            }
        };
        let slot = if a.op.is_runtime() {
            &mut rows[i].2
        } else {
            &mut rows[i].3
        };
        *slot = Some(match &a.op {
            plan::Op::Sysctl { .. } | plan::Op::SysctlFile { .. } | plan::Op::LimitsFile { .. } => {
                change
            }
            op => format!("{change} ({})", op.place()),
        });
    }
    let order = |area: &str| {
        crate::report::AREAS
            .iter()
            .position(|a| *a == area)
            .unwrap_or(usize::MAX)
    };
    rows.sort_by_key(|r| order(r.0));
    let mut t = output::new_table();
    t.set_header(vec!["Area", "Setting", "Now", "At boot"]);
    let mut last = "";
    for (area, setting, now, boot) in &rows {
        t.add_row(vec![
            if *area == last {
                String::new()
            } else {
                area.to_string()
            },
            setting.clone(),
            now.clone().unwrap_or_else(|| "-".into()),
            boot.clone().unwrap_or_else(|| "-".into()),
        ]);
        last = area;
    }
    let mut files: Vec<String> = Vec::new();
    for a in p.actions.iter().filter(|a| !a.op.is_runtime()) {
        if !files.contains(&a.op.place()) {
            files.push(a.op.place());
        }
    }
    let mut out = format!(
        "Plan ({} change(s) to {} setting(s)):\n{t}",
        p.actions.len(),
        rows.len()
    );
    if !files.is_empty() {
        out.push_str(&format!("\nAt boot: written to {}", files.join(", ")));
    }
    out
}

fn print_notes(notes: &[String]) {
    for n in notes {
        say!("note: {n}");
    }
}

/// What apply cannot fix (memory, cores, NIC queues), so nobody mistakes a clean apply for a
/// host that meets the profile.
fn print_remaining(results: &[crate::catalog::eval::Finding]) {
    let left: Vec<&str> = results
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| f.id.as_str())
        .collect();
    if !left.is_empty() {
        say!("Still failing (these need a new login, a restart, or more hardware; see `wstune check`): {}", left.join(", "));
    }
}

/// A container's /proc/sys is read-only: say which keys its runtime must set instead.
fn refuse_read_only_proc_sys(
    catalog: &crate::catalog::Catalog,
    results: &[crate::catalog::eval::Finding],
    p: &plan::Plan,
) -> Result<()> {
    let read_only = results.iter().any(|f| {
        f.id == "linux.proc.sys_writable" && f.current == Some(crate::value::Value::Num(0))
    });
    let runtime: Vec<&plan::Action> = p
        .actions
        .iter()
        .filter(|a| matches!(a.op, plan::Op::Sysctl { .. }))
        .collect();
    if !read_only || runtime.is_empty() {
        return Ok(());
    }
    let scope_of = |check: &str| {
        catalog
            .checks
            .iter()
            .find(|d| d.check.id == check)
            .map(|d| d.check.scope)
    };
    let (netns, global): (Vec<&&plan::Action>, Vec<&&plan::Action>) = runtime
        .iter()
        .partition(|a| scope_of(&a.check) == Some(CheckScope::Netns));
    let mut msg = String::from("/proc/sys is read-only here (a container): nothing was changed.");
    if !netns.is_empty() {
        let flags: Vec<String> = netns
            .iter()
            .map(|a| format!("--sysctl {}={}", a.setting, a.to.replace(' ', "\\ ")))
            .collect();
        msg.push_str(&format!("\nPer network namespace, set by the container runtime: docker run {} (Kubernetes: securityContext.sysctls)", flags.join(" ")));
    }
    if !global.is_empty() {
        let keys: Vec<String> = global
            .iter()
            .map(|a| format!("{}={}", a.setting, a.to))
            .collect();
        msg.push_str(&format!(
            "\nGlobal, only on the host itself (wstune apply there): {}",
            keys.join(", ")
        ));
    }
    msg.push_str("\nUse --persist-only to write only the files (e.g. when building an image).");
    bail!(msg)
}

#[cfg(test)]
mod privilege_tests {
    use super::not_privileged;
    use crate::catalog::Platform;

    /// Wine runs everything as an administrator, so the Windows refusal is checked here: it
    /// names what elevation means on that platform, and that nothing was changed, as on Linux.
    #[test]
    fn an_unprivileged_apply_is_refused_in_the_platforms_words() {
        let linux = not_privileged(Platform::Linux);
        assert!(linux.contains("run it as root") && linux.ends_with("Nothing was changed."));
        let windows = not_privileged(Platform::Windows);
        assert!(
            windows.contains("elevated prompt (Run as administrator)"),
            "{windows}"
        );
        assert!(windows.contains("--dry-run") && windows.ends_with("Nothing was changed."));
        assert!(!windows.contains("root") && !windows.contains("/etc"));
    }
}
