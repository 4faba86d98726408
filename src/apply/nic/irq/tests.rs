//! Pinned interrupts, their boot script, and irqbalance told to leave them alone.

use crate::apply::nic::tests::*;
use crate::apply::nic::*;

#[test]
fn pinned_interrupts_go_one_per_cpu_of_the_nics_node_and_irqbalance_is_named() {
    let mut nic = veth(4, 4, 8);
    nic.local_cpus = vec![4, 5, 6, 7];
    nic.irqs = (0..4)
        .map(|k| Irq {
            number: 40 + k,
            name: format!("veth0-TxRx-{k}"),
            affinity: Some("0-7".into()),
        })
        .collect();
    let profile = NicProfile {
        irq: IrqPolicy::Pinned,
        ..NicProfile::default()
    };
    let (nics, e) = ([nic], Evidence::default());
    let mut i = inputs(&profile, &nics, true, &e);
    i.irqbalance_config = Some(("/etc/default/irqbalance", "#IRQBALANCE_ARGS=\n"));
    let p = plan(&i);
    let pins: Vec<(&str, &str)> = p
        .actions
        .iter()
        .filter_map(|a| match &a.op {
            Op::KernelFile { path, value } if path.starts_with("/proc/irq/") => {
                Some((path.as_str(), value.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        pins,
        [
            ("/proc/irq/40/smp_affinity_list", "4"),
            ("/proc/irq/41/smp_affinity_list", "5"),
            ("/proc/irq/42/smp_affinity_list", "6"),
            ("/proc/irq/43/smp_affinity_list", "7")
        ]
    );
    // irqbalance keeps off them: its policy script bans each by name, its arguments name
    // the script, and the running daemon is restarted after the files are written.
    let policy = &p
        .files
        .iter()
        .find(|(f, _)| f == IRQBALANCE_POLICY)
        .unwrap()
        .1;
    assert!(
        policy.ends_with("# nic veth0\nban 'veth0-TxRx-0'\nban 'veth0-TxRx-1'\nban 'veth0-TxRx-2'\nban 'veth0-TxRx-3'\n"),
        "{policy}"
    );
    let args = &p
        .files
        .iter()
        .find(|(f, _)| f == "/etc/default/irqbalance")
        .unwrap()
        .1;
    assert!(
        args.ends_with(&format!(
            "IRQBALANCE_ARGS=\"--policyscript={IRQBALANCE_POLICY}\"\n"
        )),
        "{args}"
    );
    assert!(p.actions.iter().any(|a| a.op
        == Op::TryRestart {
            unit: "irqbalance.service".into()
        }));
    // irqbalance not running: the files, no restart.
    i.irqbalance = Some(false);
    assert!(!plan(&i)
        .actions
        .iter()
        .any(|a| matches!(a.op, Op::TryRestart { .. })));
    // Kept at boot: the rule starts the unit, the script finds each interrupt by name.
    let script = &p.files.iter().find(|(f, _)| f == NIC_IRQ_SCRIPT).unwrap().1;
    assert!(
        script.contains("# nic veth0\npin 'veth0-TxRx-0' 4\npin 'veth0-TxRx-1' 5\n"),
        "{script}"
    );
    let rules = &p.files.iter().find(|(f, _)| f == NIC_RULES_FILE).unwrap().1;
    assert!(
        rules.contains("ENV{SYSTEMD_WANTS}+=\"wstune-nic-irq.service\""),
        "{rules}"
    );
    assert!(p
        .files
        .iter()
        .any(|(f, t)| f == NIC_IRQ_UNIT && t.contains("ExecStart=/bin/sh /etc/wstune/nic-irq.sh")));
    // Another NIC's lines are kept when this one's are replaced.
    let again = irq_script(
        &format!("{script}# nic eth9\npin 'eth9-rx-0' 1\n"),
        &[("veth0".into(), vec![("veth0-TxRx-0".into(), 7)])],
    );
    assert!(
        again.contains("# nic eth9\npin 'eth9-rx-0' 1\n# nic veth0\npin 'veth0-TxRx-0' 7\n"),
        "{again}"
    );
    assert_eq!(again.matches("#!/bin/sh").count(), 1);
}

#[test]
fn irqbalance_args_gain_our_policy_script_and_keep_everything_else() {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    // Debian's file: every line commented; ours is appended.
    let debian = "#IRQBALANCE_ONESHOT=\n#IRQBALANCE_ARGS=\n";
    let t = with_policyscript(debian).unwrap();
    assert!(
        t.starts_with(debian) && t.ends_with(&format!("IRQBALANCE_ARGS=\"{ours}\"\n")),
        "{t}"
    );
    // RHEL's: an assignment with the operator's arguments, in one plain double-quoted value.
    let rhel = "# comment\nIRQBALANCE_ARGS='--powerthresh=2 --banirq=7'\nOTHER=1\n";
    assert_eq!(
        with_policyscript(rhel).unwrap(),
        format!("# comment\nIRQBALANCE_ARGS=\"--powerthresh=2 --banirq=7 {ours}\"\nOTHER=1\n")
    );
    // Done already: unchanged.
    let done = with_policyscript(rhel).unwrap();
    assert_eq!(with_policyscript(&done).unwrap(), done);
    // Another policy script is the operator's: refused, named.
    assert_eq!(
        with_policyscript("IRQBALANCE_ARGS=\"-l /usr/local/bin/pol\"\n").unwrap_err(),
        KeepArgs::Theirs("-l /usr/local/bin/pol".into())
    );
    assert!(with_policyscript("IRQBALANCE_ARGS=--policyscript=/x\n").is_err());
    // A comment after the value goes on its own line above it (systemd would read it as part
    // of the value); an unquoted word gets quotes.
    assert_eq!(
        with_policyscript("IRQBALANCE_ARGS=\"-t 5\"  # slower\n").unwrap(),
        format!("# slower\nIRQBALANCE_ARGS=\"-t 5 {ours}\"\n")
    );
    assert_eq!(
        with_policyscript("IRQBALANCE_ARGS=--journal # mine\n").unwrap(),
        format!("# mine\nIRQBALANCE_ARGS=\"--journal {ours}\"\n")
    );
    // `export NAME=value` is the shell's: the name is exported on a line of its own.
    assert_eq!(
        with_policyscript("  export IRQBALANCE_ARGS=--journal\n").unwrap(),
        format!("  IRQBALANCE_ARGS=\"--journal {ours}\"\n  export IRQBALANCE_ARGS\n")
    );
}

/// IRQBALANCE_ARGS as operators write it, each file read before and after by both its readers:
/// a shell sourcing it, and systemd's EnvironmentFile= (irqbalance.service). After the edit
/// both read the operator's arguments (as the shell read them) and ours, and every other line
/// is kept. `export IRQBALANCE_ARGS=...`, edited in place, was still skipped by systemd, so the
/// service never got the policy script. A value the two read differently (a `$VAR` systemd does
/// not expand, a command after it on the line that systemd reads as value) or that goes on past
/// its line leaves the file alone.
#[test]
fn irqbalance_args_in_every_shell_form_keep_their_arguments_and_gain_ours() {
    let ours = format!("--policyscript={IRQBALANCE_POLICY}");
    let sourced = |text: &str| {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("irqbalance");
        std::fs::write(&f, text).unwrap();
        let o = std::process::Command::new("sh")
            .args(["-c", ". \"$1\" && printf '%s' \"$IRQBALANCE_ARGS\"", "sh"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{text}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    if systemd_reads("").is_none() {
        eprintln!("skipped the systemd reader: systemd is not installed (apt-get install systemd)");
    }
    let forms = [
        "export IRQBALANCE_ARGS=\"--banirq=77\"\n",
        "export\tIRQBALANCE_ARGS='--banirq=77 --banirq=78'  # disks\n",
        "IRQBALANCE_ARGS='--banirq='\"77\"\n",
        "IRQBALANCE_ARGS=\"--banirq=77 \\\"#\\\"\"\n",
        "IRQBALANCE_ARGS=--banirq=77\\ --banirq=78\n",
        "IRQBALANCE_ARGS='a\\b'\n",
        "IRQBALANCE_ARGS=#77\n",
        "IRQBALANCE_ARGS=\n",
        "IRQBALANCE_ARGS=\"\" # none yet\n",
        "IRQBALANCE_ARGS=--banirq=77",
        // Inside another variable's value that spans lines: not an assignment.
        "IRQBALANCE_ARGS=\"--banirq=77\"\nNOTE=\"one\nIRQBALANCE_ARGS=--nothing\n\"\n",
    ];
    for text in forms {
        let before = sourced(text);
        let after = with_policyscript(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        let want = if before.is_empty() {
            ours.clone()
        } else {
            format!("{before} {ours}")
        };
        assert_eq!(sourced(&after), want, "{text} became {after}");
        if let Some(systemd) = systemd_reads(&after) {
            assert_eq!(systemd, want, "systemd: {text} became {after}");
        }
        // Every other line kept, in order.
        let assignment = |l: &&str| {
            l.trim_start().starts_with("IRQBALANCE_ARGS=")
                || l.trim_start().starts_with("export")
                || l.trim_start().starts_with('#')
        };
        let others = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !assignment(l))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(others(&after), others(text), "{text} became {after}");
        // Applied again, nothing changes.
        assert_eq!(with_policyscript(&after).unwrap(), after);
    }
    // Out of reach: the file is left alone, with the reason.
    for text in [
        "IRQBALANCE_ARGS=\"--banirq=77\n --banirq=78\"\n",
        "IRQBALANCE_ARGS=--banirq=77\\\n--banirq=78\n",
        "IRQBALANCE_ARGS=$(cat /etc/irq-args)\n",
        "IRQBALANCE_ARGS=\"`cat /etc/irq-args`\"\n",
        // systemd expands no variable: the two readers would differ.
        "IRQBALANCE_ARGS=\"--banirq=77\"\nIRQBALANCE_ARGS=\"$IRQBALANCE_ARGS --powerthresh=2\"\n",
        "B=77\nIRQBALANCE_ARGS=--banirq=$B\n",
        // systemd reads `;export ...` and `&& ...` as more of the value.
        "  IRQBALANCE_ARGS=--banirq=77;export IRQBALANCE_ARGS\n",
        "IRQBALANCE_ARGS=--banirq=77 && export IRQBALANCE_ARGS\n",
    ] {
        assert!(
            matches!(with_policyscript(text), Err(KeepArgs::Unsure(_))),
            "{text}: {:?}",
            with_policyscript(text)
        );
    }
}
