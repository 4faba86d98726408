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
    let config = match i
        .irqbalance_config
        .map(|(path, text)| (path, text, with_policyscript(text)))
    {
        Some((path, _, Err(theirs))) => {
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

/// irqbalance's environment file with `--policyscript=` ours added to IRQBALANCE_ARGS (its last
/// assignment; appended when there is none), every other line and argument kept. Err: the
/// arguments already name another policy script (`-l`/`--policyscript`), which is the
/// operator's and is left alone.
pub(super) fn with_policyscript(text: &str) -> Result<String, String> {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    let assignment = |l: &str| {
        l.trim_start()
            .strip_prefix("IRQBALANCE_ARGS=")
            .map(|v| v.trim_end().to_string())
    };
    let last = text
        .lines()
        .enumerate()
        .filter(|(_, l)| assignment(l).is_some())
        .map(|(k, _)| k)
        .last();
    let Some(at) = last else {
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
    let raw = assignment(line).unwrap_or_default();
    // The value as the shell reads it (quoted, or one word), and what follows it on the line
    // (a comment), kept.
    let (quote, value, trailing) = match raw.chars().next() {
        Some(q @ ('"' | '\'')) => match raw[1..].find(q) {
            Some(end) => (
                Some(q),
                raw[1..=end].to_string(),
                raw[end + 2..].to_string(),
            ),
            None => return Err(format!("an unterminated quote: {line}")),
        },
        _ => {
            let end = raw.find(char::is_whitespace).unwrap_or(raw.len());
            (None, raw[..end].to_string(), raw[end..].to_string())
        }
    };
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.contains(&ours.as_str()) {
        return Ok(text.to_string());
    }
    let theirs = words.iter().enumerate().find_map(|(k, w)| {
        if w.starts_with("--policyscript") {
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
        return Err(theirs);
    }
    let new_value = if value.trim().is_empty() {
        ours
    } else {
        format!("{} {ours}", value.trim_end())
    };
    let q = quote.unwrap_or('"');
    let indent = &line[..line.len() - line.trim_start().len()];
    let mut out = String::new();
    for (k, l) in text.split_inclusive('\n').enumerate() {
        if k == at {
            out.push_str(&format!(
                "{indent}IRQBALANCE_ARGS={q}{new_value}{q}{trailing}"
            ));
            if l.ends_with('\n') {
                out.push('\n');
            }
        } else {
            out.push_str(l);
        }
    }
    Ok(out)
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
