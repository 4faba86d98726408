//! `wstune apply`: check, plan, show, confirm, journal, change, check again.

use crate::apply::{self, journal, plan};
use crate::catalog::eval::Status;
use crate::catalog::Scope as CheckScope;
use crate::confirm::{confirm, PASS_YES};
use crate::engine::check::{report as make_report, report_and_facts, HostInputs};
use crate::host::store::Store;
use crate::outcome::Outcome;
use crate::output::say;
use anyhow::{bail, Result};

/// `apply`, resolved: inputs and backend (`--unit` known to systemd), where its files and
/// journal go, and what to do.
pub struct Request {
    pub host: HostInputs,
    pub store: Store,
    /// Runtime values, persistent files, or both.
    pub scope: plan::Scope,
    /// Show the plan and change nothing.
    pub dry_run: bool,
    /// Confirmed already (`--yes`).
    pub yes: bool,
    /// `--nic NAME`: tune these NICs' queues without evidence (virtual links too).
    pub nics: Vec<String>,
}

/// The refusal for a real apply without root, wherever it is first noticed.
const NOT_ROOT: &str = "apply changes kernel settings and files under /etc: run it as root (sudo wstune apply ...), or add --dry-run to only see the plan. Nothing was changed.";
/// The same refusal on Windows, where HKLM is writable only from an elevated process.
const NOT_ADMIN: &str = "apply changes registry values under HKLM: run it from an elevated prompt (Run as administrator), or add --dry-run to only see the plan. Nothing was changed.";

/// Why an unprivileged apply is refused, in the platform's words.
pub fn not_privileged(platform: crate::host::Platform) -> &'static str {
    match platform {
        crate::host::Platform::Linux => NOT_ROOT,
        crate::host::Platform::Windows => NOT_ADMIN,
    }
}

pub fn run(a: Request) -> Result<Outcome> {
    let HostInputs { inputs, backend } = &a.host;
    let backend = backend.as_ref();
    let store = &a.store;
    let (mut lock, no_journal) = lock_and_recover(&a, backend)?;
    let (before, facts) = report_and_facts(inputs, backend, None);
    let mut p = plan::plan(&inputs.catalog, &before.results, &facts, a.scope);
    let mut restart = Vec::new();
    match inputs.catalog.platform {
        crate::host::Platform::Linux => add_nic_plan(&mut p, &a, &before.results)?,
        crate::host::Platform::Windows => {
            named_links(backend, &a.nics)?;
            let (n, r) = apply::nic::plan_windows(
                &inputs.catalog,
                &before.results,
                &facts,
                &a.nics,
                &inputs.profile.profile.nic,
                a.scope,
            );
            p.actions.extend(n.actions);
            p.notes.extend(n.notes);
            restart = r;
        }
    }
    let profile = &inputs.profile.profile.name;

    if p.actions.is_empty() {
        say!("Nothing to change: this host already has every setting wstune can change for profile {profile}.");
        print_notes(&p.notes);
        print_remaining(&before.results);
        return Ok(Outcome::Ok);
    }
    say!("{}", crate::report::plan_table(&p));
    print_notes(&p.notes);
    if a.dry_run {
        say!("Dry run: nothing was changed.");
        return Ok(Outcome::Ok);
    }

    if !backend.privileged() {
        bail!(not_privileged(backend.platform()));
    }
    if let Some(e) = no_journal {
        return Err(e.context("the journal cannot be created, and apply changes nothing it cannot record. Nothing was changed"));
    }
    refuse_read_only_proc_sys(&inputs.catalog, &before.results, &p)?;
    if !a.yes {
        confirm(
            &format!("Apply these {} change(s)?", p.actions.len()),
            PASS_YES,
        )?;
    }

    let mut entry = apply::record(
        &p,
        backend,
        store,
        &format!("{profile} ({})", inputs.profile.source),
    )?;
    journal::save(store, &entry)?;
    if let Some(l) = &mut lock {
        l.keep();
    }
    apply::execute(&mut entry, backend, store)?;
    say!(
        "Applied {} change(s); the old values are in journal entry {} (undo with `wstune rollback{}`).",
        entry.actions.len(),
        entry.id,
        apply::flags(store)
    );
    for line in apply::restart_adapters(backend, &restart) {
        say!("{line}");
    }
    let after = make_report(inputs, backend, Some(store));
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
    Ok(Outcome::Ok)
}

/// The lock and the journal before anything is planned: the lock taken (None for a dry run
/// or without privileges), a damaged journal refused, an interrupted apply undone. Also the
/// error that kept a journal from being made, for an apply that then plans a change.
fn lock_and_recover(
    a: &Request,
    backend: &dyn crate::host::Backend,
) -> Result<(Option<journal::Lock>, Option<anyhow::Error>)> {
    let store = &a.store;
    // One apply or rollback at a time, and the lock is taken before anything is read: the
    // journal (a `pending` entry seen under the lock is one whose process died) and the host
    // (the plan is made from values no other apply can change until this one ends; planned
    // before the lock, a concurrent first apply could lower what another just raised). It
    // creates the journal directory on a first apply (removed again if nothing is recorded, so a
    // refusal leaves no trace). Without root there is no lock to take
    // (and nothing will be changed: the refusal comes below, or from the recovery).
    // No journal yet and none can be made (a read-only /var): there is nothing to recover, and
    // an apply that plans nothing changes nothing and needs no lock. One that plans a change is
    // refused with this error before it makes any.
    let mut no_journal = None;
    let lock = if a.dry_run || !backend.privileged() {
        None
    } else {
        journal::check_dir(store)?;
        match journal::Lock::acquire(store) {
            Ok(l) => Some(l),
            Err(e) if !store.is_dir(journal::DIR) => {
                no_journal = Some(e);
                None
            }
            Err(e) => return Err(e),
        }
    };
    let (entries, damaged) = journal::scan(store)?;
    if let Some(d) = damaged.first() {
        bail!(
            "journal entry {} is damaged ({}): apply cannot tell what an earlier apply changed, so it changes nothing.\nFix: {}",
            d.path.display(),
            d.error,
            journal::damaged_fix(&d.path, &apply::flags(store))
        );
    }
    // Before the recovery: a directory it removes must not keep a leftover temporary.
    if lock.is_some() {
        let removed =
            apply::remove_temporaries(store, backend, entries.iter().flat_map(|e| &e.files));
        if !removed.is_empty() {
            say!(
                "note: removed {} temporary file(s) an interrupted write had left: {}",
                removed.len(),
                removed.join(", ")
            );
        }
        if entries.iter().any(|e| e.state == journal::State::Pending) {
            if a.dry_run {
                if journal::Lock::probe(store) == journal::LockState::Held {
                    say!("note: another apply or rollback is running now (its entry shows as pending until it ends); this plan may be out of date when it finishes");
                } else {
                    say!("note: an earlier apply was interrupted (`wstune rollback --list{}` shows it as pending); a real apply first undoes it, so this plan may differ from the one it will make", apply::flags(store));
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
                for line in apply::recover::undo_interrupted(&entries, backend, store)? {
                    // Not eprintln!: a closed stderr (`2>&1 | head`) must not stop the apply here,
                    // between the undo and the new changes.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "wstune: {line}");
                }
            }
        }
    }
    Ok((lock, no_journal))
}

/// The links `--nic` names (each must exist: a typo is an error, not a NIC left alone), or
/// every physical one when none is named.
fn named_links(
    backend: &dyn crate::host::Backend,
    names: &[String],
) -> Result<Vec<crate::host::Link>> {
    let links = backend.links().unwrap_or_default();
    if names.is_empty() {
        return Ok(links.into_iter().filter(|l| l.physical).collect());
    }
    let mut chosen = Vec::new();
    for name in names {
        match links.iter().find(|l| &l.name == name) {
            Some(l) => chosen.push(l.clone()),
            None => bail!(
                "--nic {name}: no such network interface here ({}); `ip link` (Linux) or `Get-NetAdapter` (Windows: the InterfaceDescription) lists them. Nothing was changed.",
                if links.is_empty() {
                    "none found".to_string()
                } else {
                    format!(
                        "found: {}",
                        links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
                    )
                }
            ),
        }
    }
    Ok(chosen)
}

/// The NICs' part of the plan ([`apply::nic`]): the links `--nic` names, else every physical
/// one, read now; the evidence is what `--watch` measured in `results`.
fn add_nic_plan(
    p: &mut plan::Plan,
    a: &Request,
    results: &[crate::catalog::eval::Finding],
) -> Result<()> {
    use crate::host::owned::NIC_RULES_FILE;
    let backend = a.host.backend.as_ref();
    let chosen = named_links(backend, &a.nics)?;
    let nics: Vec<crate::nic::NicFacts> = chosen
        .iter()
        .map(|l| crate::nic::read(backend, &l.name, l.physical))
        .collect();
    let evidence = crate::nic::Evidence::from_findings(&a.host.inputs.catalog, results);
    let flow_entries = backend
        .read("/proc/sys/net/core/rps_sock_flow_entries")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let irqbalance = backend
        .systemd_property("irqbalance.service", "ActiveState")
        .ok()
        .map(|s| s.trim() == "active");
    let rules_now = a
        .store
        .read(NIC_RULES_FILE)?
        .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
        .unwrap_or_default();
    let irq_script_now = a
        .store
        .read(crate::host::owned::NIC_IRQ_SCRIPT)?
        .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
        .unwrap_or_default();
    let text_of = |path: &str| -> Result<Option<String>> {
        Ok(a.store
            .read(path)?
            .map(|f| String::from_utf8_lossy(&f.bytes).into_owned()))
    };
    let irq_policy_now = text_of(crate::host::owned::IRQBALANCE_POLICY)?.unwrap_or_default();
    let nic_sysctl_now = text_of(crate::host::owned::NIC_SYSCTL_FILE)?.unwrap_or_default();
    let mut irqbalance_config = None;
    for path in crate::host::owned::IRQBALANCE_CONFIGS {
        if let Some(text) = text_of(path)? {
            irqbalance_config = Some((path, text));
            break;
        }
    }
    let mut links_now = Vec::new();
    for nic in &nics {
        if let Some(text) = text_of(&crate::host::owned::nic_link_file(&nic.name))? {
            links_now.push((nic.name.clone(), text));
        }
    }
    let sysctl = |key: &str| {
        backend
            .read(&crate::host::procfs::sysctl_path(key))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    let budget = (
        sysctl("net.core.netdev_budget"),
        sysctl("net.core.netdev_budget_usecs"),
    );
    let n = apply::nic::plan(&apply::nic::Inputs {
        profile: &a.host.inputs.profile.profile.nic,
        nics: &nics,
        named: !a.nics.is_empty(),
        evidence: &evidence,
        flow_entries,
        irqbalance,
        rules_now: &rules_now,
        irq_script_now: &irq_script_now,
        irq_policy_now: &irq_policy_now,
        irqbalance_config: irqbalance_config.as_ref().map(|(p, t)| (*p, t.as_str())),
        nic_sysctl_now: &nic_sysctl_now,
        links_now: &links_now,
        budget,
        scope: a.scope,
        for_other_hosts: false,
    });
    // Merged with other NICs' lines: refused at record time if they changed meanwhile.
    if n.files.iter().any(|(f, _)| f == NIC_RULES_FILE) {
        p.rendered_from
            .push((NIC_RULES_FILE.to_string(), rules_now));
    }
    if n.files
        .iter()
        .any(|(f, _)| f == crate::host::owned::NIC_IRQ_SCRIPT)
    {
        p.rendered_from.push((
            crate::host::owned::NIC_IRQ_SCRIPT.to_string(),
            irq_script_now,
        ));
    }
    // Likewise the files merged with lines this plan does not set.
    let mut merged: Vec<(String, String)> = vec![
        (
            crate::host::owned::IRQBALANCE_POLICY.into(),
            irq_policy_now.clone(),
        ),
        (
            crate::host::owned::NIC_SYSCTL_FILE.into(),
            nic_sysctl_now.clone(),
        ),
    ];
    merged.extend(
        irqbalance_config
            .iter()
            .map(|(p, t)| (p.to_string(), t.clone())),
    );
    merged.extend(
        links_now
            .iter()
            .map(|(nic, t)| (crate::host::owned::nic_link_file(nic), t.clone())),
    );
    for (path, from) in merged {
        if n.files.iter().any(|(f, _)| *f == path) {
            p.rendered_from.push((path, from));
        }
    }
    // A file that already says exactly this (an earlier apply's) is not written again, and
    // the actions it stands for are not changes: a second apply plans nothing.
    let mut same = Vec::new();
    for (path, text) in &n.files {
        if a.store
            .read(path)?
            .is_some_and(|f| f.bytes == text.as_bytes())
        {
            same.push(path.clone());
        }
    }
    p.actions.extend(
        n.actions
            .into_iter()
            .filter(|x| x.op.is_runtime() || !same.contains(&x.op.place())),
    );
    p.files
        .extend(n.files.into_iter().filter(|(path, _)| !same.contains(path)));
    p.notes.extend(n.notes);
    Ok(())
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
    use crate::host::Platform;

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
