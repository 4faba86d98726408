//! The queues' interrupts: pinned each on its CPU now, kept at boot and kept from irqbalance:
//! the boot script and its unit (found by the interrupt's name, since the numbers change), and irqbalance's policy
//! script and environment file.

use super::{same_cpus, Inputs, NicPlan};
use crate::apply::plan::{Action, Op};
use crate::host::owned::{IRQBALANCE_POLICY, NIC_IRQ_SCRIPT, NIC_IRQ_UNIT};
use crate::nic::{cpu_list, parse_cpu_list, NicFacts};
use crate::profile::IrqPolicy;
/// Keep irqbalance off the interrupts wstune pins: a policy script (irqbalance(1),
/// --policyscript) that answers `ban=true` for each of them, found by its name as the boot
/// script finds it (a driver reload renumbers them; irqbalance runs the script for every
/// interrupt it discovers, with its number), named in IRQBALANCE_ARGS of irqbalance's own
/// environment file. An operator's policy script is never replaced; a running irqbalance is
/// restarted (`systemctl try-restart`) as a planned action so it reads the change.
pub(super) fn plan_irqbalance(p: &mut NicPlan, i: &Inputs, pins: &[(String, Vec<(String, u32)>)]) {
    let names = || {
        pins.iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // An operator's own policy script (named in IRQBALANCE_ARGS already) is never replaced.
    let mut by_hand = false;
    let config = match i
        .irqbalance_config
        .map(|(path, text)| (path, text, with_policyscript(text)))
    {
        Some((path, _, Err(KeepArgs::Unsure(why)))) => {
            p.notes.push(format!(
                "{}: IRQBALANCE_ARGS in {path} is not an assignment wstune can edit exactly ({why}): left as it is. Add --policyscript={IRQBALANCE_POLICY} to it by hand, or irqbalance may move the pinned interrupts again",
                names()
            ));
            by_hand = true;
            None
        }
        Some((path, _, Err(KeepArgs::Theirs(theirs)))) => {
            let bans: Vec<String> = pins
                .iter()
                .flat_map(|(_, q)| q.iter().map(|(n, _)| n.clone()))
                .collect();
            p.notes.push(format!(
                "{}: IRQBALANCE_ARGS in {path} already names a policy script of its own ({theirs}): left as it is. Have it answer ban=true for the pinned interrupts ({}), or irqbalance may move them again",
                names(),
                bans.join(", ")
            ));
            return;
        }
        Some((path, text, Ok(args))) => Some((path, text, args)),
        None => None,
    };
    // The script whenever interrupts are pinned: it is what a host's irqbalance needs, whether
    // this plan can name it in irqbalance's arguments or an operator does (another host, or
    // one whose irqbalance keeps its arguments elsewhere).
    let policy = irq_policy(i.irq_policy_now, pins);
    let mut changed = false;
    if policy != i.irq_policy_now {
        changed = true;
        p.files.push((IRQBALANCE_POLICY.to_string(), policy));
        p.actions.push(Action {
            check: "linux.nic.irq".into(),
            setting: "irqbalance policy script".into(),
            from: None,
            to: "bans the pinned IRQs".into(),
            op: Op::IrqbalancePolicy,
        });
    }
    let Some((path, text, args)) = config else {
        if by_hand {
            return;
        }
        p.notes.push(if i.for_other_hosts {
            format!(
                "{}: where irqbalance runs, add --policyscript={IRQBALANCE_POLICY} to its arguments (IRQBALANCE_ARGS in {}), or it may move the pinned interrupts again",
                names(),
                crate::host::owned::IRQBALANCE_CONFIGS.join(" or ")
            )
        } else {
            match i.irqbalance {
                Some(true) => format!(
                    "{}: irqbalance runs but has no environment file here ({}): add --policyscript={IRQBALANCE_POLICY} to its arguments by hand, or stop it (systemctl disable --now irqbalance), or it may move the pinned interrupts again",
                    names(),
                    crate::host::owned::IRQBALANCE_CONFIGS.join(", ")
                ),
                _ => format!(
                    "{}: irqbalance is not installed here (no {}): nothing moves the pinned interrupts; {IRQBALANCE_POLICY} keeps it off them once its arguments name it (--policyscript)",
                    names(),
                    crate::host::owned::IRQBALANCE_CONFIGS.join(" or ")
                ),
            }
        });
        return;
    };
    if args != text {
        changed = true;
        p.files.push((path.to_string(), args));
        p.actions.push(Action {
            check: "linux.nic.irq".into(),
            setting: "IRQBALANCE_ARGS".into(),
            from: None,
            to: "adds --policyscript".into(),
            op: Op::IrqbalanceArgs {
                path: path.to_string(),
            },
        });
    }
    if changed && i.scope.runtime && i.irqbalance == Some(true) {
        p.actions.push(Action {
            check: "linux.nic.irq".into(),
            setting: "irqbalance".into(),
            from: Some("active".into()),
            to: "restarted".into(),
            op: Op::TryRestart {
                unit: crate::apply::journal::IRQBALANCE_UNIT.into(),
            },
        });
    }
    p.notes.push(format!(
        "{}: irqbalance leaves the pinned interrupts alone: its policy script {IRQBALANCE_POLICY} answers ban=true for each, found by name, and IRQBALANCE_ARGS in {path} names it{}",
        names(),
        if changed && i.irqbalance == Some(true) && i.scope.runtime {
            " (irqbalance is restarted to read it: systemctl try-restart irqbalance)"
        } else {
            ""
        }
    ));
}

/// Why apply leaves irqbalance's environment file as it is.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum KeepArgs {
    /// The arguments already name a policy script of the operator's (`-l`, `--policyscript`).
    Theirs(String),
    /// The assignment is not one wstune can edit exactly (its value goes on past its line, or is
    /// a command's output): why, in words.
    Unsure(String),
}

/// irqbalance's environment file with `--policyscript=` ours added to IRQBALANCE_ARGS (the last
/// assignment, the one a shell sourcing the file keeps; appended when there is none), every
/// other line and argument kept. The file has two readers, a shell sourcing it and systemd's
/// EnvironmentFile= (irqbalance.service runs `irqbalance $IRQBALANCE_ARGS`), and the edited
/// assignment reads the same to both: the operator's value (one word of unquoted, 'single-'
/// and "double-quoted" parts) and ours in one plain double-quoted value, `export` (which
/// systemd does not take before a name) on a line of its own after it, and a comment after the
/// value (which systemd reads as part of it) on a line of its own before it. A line inside
/// another variable's value that spans lines is not an assignment. Err: the arguments already
/// name another policy script (the operator's, left alone), or the value is not one both
/// readers take alike (it goes on past its line, expands a variable or a command's output, or
/// a command follows it on the line).
pub(super) fn with_policyscript(text: &str) -> Result<String, KeepArgs> {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    // (line, byte where its value starts) of the last assignment that starts a line.
    let mut last = None;
    let mut open = Open::No;
    for (k, l) in text.lines().enumerate() {
        if open == Open::No {
            if let Some(at) = assignment(l) {
                last = Some((k, at));
            }
        }
        open = scan(open, l, false).0;
    }
    let Some((at, start)) = last else {
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "# Added by wstune apply (nic.irq: pinned): irqbalance leaves the pinned NIC interrupts\n# alone. `wstune rollback` puts back what was here before.\nIRQBALANCE_ARGS=\"{ours}\"\n"
        ));
        return Ok(out);
    };
    let line = text.lines().nth(at).unwrap_or_default();
    let rest = &line[start..];
    let (state, end) = scan(Open::Word, rest, true);
    if state != Open::No {
        return Err(KeepArgs::Unsure(format!(
            "its value goes on past the line ({})",
            line.trim()
        )));
    }
    let (word, trailing) = rest.split_at(end);
    if word.contains("$(") || word.contains('`') {
        return Err(KeepArgs::Unsure(format!(
            "its value is a command's output ({})",
            line.trim()
        )));
    }
    // Two readers take this file: a shell sourcing it (the init scripts) and systemd's
    // EnvironmentFile= (irqbalance.service). systemd expands no `$VAR`, reads `;export X` or
    // `&& ...` after the value as more of the value, and ignores an `export NAME=` line: only a
    // value both read alike is edited.
    if word.contains('$') {
        return Err(KeepArgs::Unsure(format!(
            "its value expands a variable, which a shell does and systemd's EnvironmentFile= does not ({})",
            line.trim()
        )));
    }
    let tail = trailing.trim_matches([' ', '\t', '\r']);
    // A comment after the value is the shell's; systemd reads it as part of the value. It is
    // kept on its own line above the assignment, where both read it as a comment.
    let comment = match tail {
        "" => None,
        t if t.starts_with('#') => Some(t),
        _ => {
            return Err(KeepArgs::Unsure(format!(
                "a command follows its value on the line, which a shell runs and systemd's EnvironmentFile= reads as part of the value ({})",
                line.trim()
            )))
        }
    };
    let exported = line[..start]
        .trim_start_matches([' ', '\t'])
        .starts_with("export");
    let value = unquote(word);
    let words: Vec<&str> = value.split_whitespace().collect();
    let has_ours = words.contains(&ours.as_str());
    if has_ours && !exported && comment.is_none() {
        return Ok(text.to_string());
    }
    let theirs = words.iter().enumerate().find_map(|(k, w)| {
        if *w == ours {
            None
        } else if w.starts_with("--policyscript") {
            Some(w.to_string())
        } else if *w == "-l" {
            Some(format!("-l {}", words.get(k + 1).unwrap_or(&"")))
        } else if w.starts_with("-l") && !w.starts_with("--") {
            Some(w.to_string())
        } else {
            None
        }
    });
    if let Some(theirs) = theirs {
        return Err(KeepArgs::Theirs(theirs));
    }
    let joined = if has_ours {
        value.clone()
    } else if value.trim().is_empty() {
        ours.clone()
    } else {
        format!("{} {ours}", value.trim_end())
    };
    // One plain double-quoted word, no `export` on the line (systemd would skip it): the same
    // value for both readers. `export` goes on a line of its own, which systemd ignores.
    let escaped = joined.replace('\\', "\\\\").replace('"', "\\\"");
    let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
    let mut new = String::new();
    if let Some(c) = comment {
        new.push_str(&format!("{indent}{c}\n"));
    }
    new.push_str(&format!("{indent}IRQBALANCE_ARGS=\"{escaped}\""));
    if exported {
        new.push_str(&format!("\n{indent}export IRQBALANCE_ARGS"));
    }
    let mut out = String::new();
    for (k, l) in text.split_inclusive('\n').enumerate() {
        if k == at {
            out.push_str(&new);
            if l.ends_with('\n') {
                out.push('\n');
            }
        } else {
            out.push_str(l);
        }
    }
    Ok(out)
}

/// The byte where IRQBALANCE_ARGS's value starts on `line`, when the line assigns it
/// (`IRQBALANCE_ARGS=...`, `export IRQBALANCE_ARGS=...`, indented or not).
fn assignment(line: &str) -> Option<usize> {
    let blank = [' ', '\t'];
    let t = line.trim_start_matches(blank);
    let t = match t.strip_prefix("export") {
        Some(r) if r.starts_with(blank) => r.trim_start_matches(blank),
        _ => t,
    };
    let value = t.strip_prefix("IRQBALANCE_ARGS=")?;
    Some(line.len() - value.len())
}

/// Where the shell's quoting stands at a point of a line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Open {
    /// Between words, or at the start of one (a `#` there starts a comment).
    No,
    /// Inside an unquoted word (a `#` there is a plain character).
    Word,
    /// Inside '...'.
    Single,
    /// Inside "...".
    Double,
    /// After a backslash that ended the line: the command goes on on the next one.
    Continued,
}

/// Read `line` as the shell would, from `open`: the quoting at its end (`No` when everything
/// closed on it) and, with `one_word`, the byte where the first word ends (the line's length
/// when it does not). A comment ends the line.
fn scan(mut open: Open, line: &str, one_word: bool) -> (Open, usize) {
    let b = line.as_bytes();
    let mut i = 0;
    if open == Open::Continued {
        open = Open::Word;
    }
    while i < b.len() {
        let c = b[i];
        match open {
            Open::Single => {
                if c == b'\'' {
                    open = Open::Word;
                }
                i += 1;
            }
            Open::Double => match c {
                b'\\' => i += 2,
                b'"' => {
                    open = Open::Word;
                    i += 1;
                }
                _ => i += 1,
            },
            Open::No | Open::Word | Open::Continued => match c {
                b'\'' => {
                    open = Open::Single;
                    i += 1;
                }
                b'"' => {
                    open = Open::Double;
                    i += 1;
                }
                b'\\' if i + 1 == b.len() => return (Open::Continued, b.len()),
                b'\\' => {
                    open = Open::Word;
                    i += 2;
                }
                b'#' if open == Open::No => return (Open::No, b.len()),
                // `$(`: a command's output, kept in the word (and refused by the caller).
                b'(' if i > 0 && b[i - 1] == b'$' => {
                    open = Open::Word;
                    i += 1;
                }
                b' ' | b'\t' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')' => {
                    if one_word {
                        return (Open::No, i);
                    }
                    open = Open::No;
                    i += 1;
                }
                _ => {
                    open = Open::Word;
                    i += 1;
                }
            },
        }
    }
    let end = match open {
        Open::Word => Open::No,
        // A backslash as the last character inside double quotes continues the line too.
        other => other,
    };
    (end, b.len())
}

/// A shell word's text with its quotes removed and backslashes applied (what `--policyscript`
/// and `-l` are looked for in; `$VAR` stays as it is written).
fn unquote(word: &str) -> String {
    let mut out = String::new();
    let mut chars = word.chars();
    let mut open = None;
    while let Some(c) = chars.next() {
        match (open, c) {
            (None, '\'' | '"') => open = Some(c),
            (Some(q), c) if c == q => open = None,
            (Some('"'), '\\') | (None, '\\') => {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            (_, c) => out.push(c),
        }
    }
    out
}

pub(super) const IRQ_POLICY_HEAD: &str = "#!/bin/sh\n# Written by wstune apply: irqbalance's policy script (irqbalance(1), --policyscript).\n# irqbalance runs it for each interrupt it finds, with the device's sysfs path and the\n# interrupt's number; it answers ban=true for the NIC queue interrupts wstune pins (nic.irq:\n# pinned), found by name (/proc/irq/N/NAME), so a renumbered one stays banned. Any other\n# interrupt gets no answer and is balanced. `wstune rollback` puts back what was here before.\n# $3: a root, for tests.\nIRQ=\"$2\"\nR=\"${3:-}\"\nban() { if [ -d \"$R/proc/irq/$IRQ/$1\" ]; then echo ban=true; exit 0; fi; }\n";

/// The policy script with these NICs' interrupts replaced and every other NIC's kept.
pub(super) fn irq_policy(now: &str, pins: &[(String, Vec<(String, u32)>)]) -> String {
    per_nic_script(IRQ_POLICY_HEAD, now, pins, |name, _| format!("ban {name}"))
}

/// A script of `head` and one block per NIC (`# nic NAME`, then `line(quoted interrupt name,
/// CPU)` per interrupt): these NICs' blocks replaced, every other NIC's kept from `now`.
pub(super) fn per_nic_script(
    head: &str,
    now: &str,
    pins: &[(String, Vec<(String, u32)>)],
    line: impl Fn(&str, u32) -> String,
) -> String {
    let mut out = String::from(head);
    let mut keep = false;
    for l in now.lines().skip_while(|l| !l.starts_with("# nic ")) {
        if let Some(name) = l.strip_prefix("# nic ") {
            keep = !pins.iter().any(|(n, _)| n == name.trim());
        }
        if keep {
            out.push_str(l);
            out.push('\n');
        }
    }
    for (nic, irqs) in pins {
        out.push_str(&format!("# nic {nic}\n"));
        for (name, cpu) in irqs {
            let quoted = format!("'{}'", name.replace('\'', "'\\''"));
            out.push_str(&line(&quoted, *cpu));
            out.push('\n');
        }
    }
    out
}
/// The unit that runs the boot script; the udev rule pulls it in when a pinned NIC appears.
pub(super) const IRQ_UNIT: &str = "# Written by wstune apply: pins the NICs' queue interrupts (nic.irq: pinned) each time\n# a NIC the udev rule /etc/udev/rules.d/60-wstune-nic.rules names appears. `wstune rollback`\n# removes it.\n[Unit]\nDescription=wstune: NIC queue interrupts on their CPUs\nWants=network-online.target\nAfter=network-online.target\n\n[Service]\nType=oneshot\nExecStart=/bin/sh /etc/wstune/nic-irq.sh\n";

pub(super) const IRQ_SCRIPT_HEAD: &str = "#!/bin/sh\n# Written by wstune apply: each pinned NIC queue interrupt on its CPU, found by its name\n# (the directory /proc/irq/N/NAME; the numbers change when the driver loads again). Run by\n# wstune-nic-irq.service; `wstune rollback` puts back what was here before. $1: a root.\nR=\"${1:-}\"\npin() { for d in \"$R\"/proc/irq/*/\"$1\"; do [ -d \"$d\" ] && echo \"$2\" > \"${d%/*}/smp_affinity_list\"; done; }\n";

/// The boot script with these NICs' interrupts replaced and every other NIC's kept.
pub(super) fn irq_script(now: &str, pins: &[(String, Vec<(String, u32)>)]) -> String {
    per_nic_script(IRQ_SCRIPT_HEAD, now, pins, |name, cpu| {
        format!("pin {name} {cpu}")
    })
}

/// One NIC's queue interrupts under the profile's `nic.irq`: pinned each on its CPU now (the
/// NIC's pins returned for the boot script), or left to irqbalance, said when it is not running.
pub(super) fn plan_interrupts(
    p: &mut NicPlan,
    i: &Inputs,
    nic: &NicFacts,
    cpus: &[u32],
) -> Option<(String, Vec<(String, u32)>)> {
    match i.profile.irq {
        IrqPolicy::Irqbalance => match i.irqbalance {
            Some(true) => {}
            _ => p.notes.push(format!(
                "{}: interrupts are left to irqbalance (nic.irq: irqbalance), which is not running here: systemctl enable --now irqbalance",
                nic.name
            )),
        },
        IrqPolicy::Pinned if nic.irqs.is_empty() => p.notes.push(format!(
            "{}: no queue interrupts found in /proc/interrupts (a virtual NIC, or a driver that names them unlike its queues): none pinned",
            nic.name
        )),
        IrqPolicy::Pinned => {
            for (k, irq) in nic.irqs.iter().enumerate() {
                let cpu = cpus[k % cpus.len()];
                if same_cpus(irq.affinity.as_deref(), &[cpu], parse_cpu_list) {
                    continue;
                }
                if i.scope.runtime {
                    p.actions.push(Action {
                        check: format!("linux.nic.irq[{}]", nic.name),
                        setting: format!("IRQ {} ({})", irq.number, irq.name),
                        from: irq.affinity.clone(),
                        to: cpu_list(&[cpu]),
                        op: Op::KernelFile {
                            path: format!("/proc/irq/{}/smp_affinity_list", irq.number),
                            value: cpu_list(&[cpu]),
                        },
                    });
                }
            }
            return Some((
                nic.name.clone(),
                nic.irqs
                    .iter()
                    .enumerate()
                    .map(|(k, q)| (q.name.clone(), cpus[k % cpus.len()]))
                    .collect(),
            ));
        }
    }
    None
}

/// The pinned interrupts kept at boot (the boot script and its unit) and kept from irqbalance;
/// with --runtime-only, said that irqbalance may move them again.
pub(super) fn plan_pins_at_boot(
    p: &mut NicPlan,
    i: &Inputs,
    pins: &[(String, Vec<(String, u32)>)],
) {
    if !i.scope.persist && !pins.is_empty() && i.irqbalance == Some(true) {
        p.notes.push(format!(
            "{}: irqbalance runs and may move the pinned interrupts again; apply without --runtime-only gives it a policy script that leaves them alone",
            pins.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if i.scope.persist && !pins.is_empty() {
        let script = irq_script(i.irq_script_now, pins);
        if script != i.irq_script_now {
            p.files.push((NIC_IRQ_SCRIPT.to_string(), script));
            p.files
                .push((NIC_IRQ_UNIT.to_string(), IRQ_UNIT.to_string()));
            p.actions.push(Action {
                check: "linux.nic.irq".into(),
                setting: format!(
                    "interrupts of {} at boot",
                    pins.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                from: None,
                to: "pinned by wstune-nic-irq.service".into(),
                op: Op::NicIrqFiles,
            });
        }
        p.notes.push(format!(
            "{}: the pinned interrupts are kept at boot by wstune-nic-irq.service, which the udev rule starts when the NIC appears and which finds each interrupt by its name (their numbers change when the driver loads again)",
            pins.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ));
        plan_irqbalance(p, i, pins);
    }
}

#[cfg(test)]
mod tests;
