use super::*;
use crate::catalog::facts::Reading;
use crate::catalog::facts::{BootConfig, Instance};
use crate::catalog::Compare;
use crate::host::HostInfo;
use std::collections::BTreeMap;

/// A plan from hand-made facts, with no backend anywhere: the catalog, facts written out
/// here, the pure evaluator, the pure plan.
mod pure {
    use super::*;
    use crate::catalog::eval;

    fn catalog() -> (Catalog, BTreeMap<String, Value>) {
        let vars = crate::profile::load("100k").unwrap().profile.variables();
        let known = vars.keys().cloned().collect();
        let c = catalog::load(crate::host::Platform::Linux, None, &known).unwrap();
        (c, vars)
    }

    /// Facts where each named sysctl has a value and the rest of the catalog is missing.
    fn facts(c: &Catalog, sysctls: &[(&str, Value)], nofile: Option<i64>) -> HostFacts {
        let mut f = HostFacts::empty(HostInfo::default());
        f.vars.insert("host.cpus".into(), Value::Num(2));
        f.vars.insert("host.page_size".into(), Value::Num(4096));
        f.vars.insert("host.mem_bytes".into(), Value::Num(8 << 30));
        f.boot = BootConfig {
            skipped: vec![],
            files: vec![],
            any: true,
        };
        for (k, v) in sysctls {
            f.sysctls.insert(k.to_string(), Reading::Value(v.clone()));
        }
        for (i, def) in c.checks.iter().enumerate() {
            let reading = match &def.check.source {
                Source::Sysctl(key) => match (f.sysctls.get(key), def.check.field) {
                    (Some(Reading::Value(Value::List(l))), Some(n)) => {
                        Reading::Value(Value::Num(l[n]))
                    }
                    (Some(r), _) => r.clone(),
                    (None, _) => Reading::Missing("not here".into()),
                },
                Source::Rlimit(r)
                    if r.process == Process::Current
                        && r.resource == crate::catalog::Resource::Nofile =>
                {
                    match nofile {
                        Some(n) => Reading::Value(Value::Num(n)),
                        None => Reading::Missing("not here".into()),
                    }
                }
                _ => Reading::Missing("not here".into()),
            };
            f.instances.push(Instance {
                check: i,
                nic: None,
                reading,
                after: None,
                boot: None,
                defaulted: false,
            });
        }
        f
    }

    /// Set each sysctl instance's boot entry from the facts' boot configuration.
    fn with_boot(c: &Catalog, mut f: HostFacts) -> HostFacts {
        for inst in &mut f.instances {
            let def = &c.checks[inst.check];
            if let (true, Source::Sysctl(key)) = (def.has_boot_view(), &def.check.source) {
                inst.boot = Some(f.boot.entry(key));
            }
        }
        f
    }

    fn plan_of(c: &Catalog, vars: &BTreeMap<String, Value>, f: &HostFacts) -> Plan {
        let findings = eval::evaluate(c, vars, f);
        let scope = Scope {
            runtime: true,
            persist: true,
        };
        plan(c, &findings, f, scope)
    }

    #[test]
    fn a_low_sysctl_is_raised_now_and_persisted_in_one_rendered_file() {
        let (c, vars) = catalog();
        let mut f = facts(&c, &[("net.core.somaxconn", Value::Num(4096))], None);
        f.owned.insert(
            SYSCTL_FILE.into(),
            render_sysctl_file(&[("vm.swappiness".into(), "1".into())]),
        );
        let f = with_boot(&c, f);
        let p = plan_of(&c, &vars, &f);
        let ops: Vec<&Op> = p.actions.iter().map(|a| &a.op).collect();
        assert!(ops.contains(&&Op::Sysctl {
            key: "net.core.somaxconn".into(),
            value: "65535".into()
        }));
        assert!(ops.contains(&&Op::SysctlFile {
            key: "net.core.somaxconn".into(),
            value: "65535".into()
        }));
        // One file, merged into what our file already holds, rendered once.
        assert_eq!(
            p.files,
            vec![(
                SYSCTL_FILE.to_string(),
                render_sysctl_file(&[
                    ("vm.swappiness".into(), "1".into()),
                    ("net.core.somaxconn".into(), "65535".into())
                ])
            )]
        );
    }

    /// Findings are joined to checks by their key, not their position: a finding from
    /// elsewhere first (a proxy's, the journal's) and the rest in another order give the same
    /// plan and settings.
    #[test]
    fn findings_join_by_key_not_by_position() {
        let (c, vars) = catalog();
        let f = facts(&c, &[("net.core.somaxconn", Value::Num(4096))], None);
        let f = with_boot(&c, f);
        let findings = eval::evaluate(&c, &vars, &f);
        let scope = Scope {
            runtime: true,
            persist: true,
        };
        let want = plan(&c, &findings, &f, scope);
        assert!(!want.actions.is_empty());
        let mut shuffled = findings.clone();
        shuffled.reverse();
        let mut foreign = shuffled[0].clone();
        foreign.id = "lb.haproxy.maxconn".into();
        foreign.status = Status::Fail;
        foreign.key = None;
        shuffled.insert(0, foreign);
        assert_eq!(plan(&c, &shuffled, &f, scope), want);
        assert_eq!(
            settings(&c, &shuffled, &f).sysctls,
            settings(&c, &findings, &f).sysctls
        );
    }

    #[test]
    fn a_later_boot_file_is_named_not_overridden() {
        let (c, vars) = catalog();
        let mut f = facts(&c, &[("net.core.somaxconn", Value::Num(65535))], None);
        f.boot.files.push((
            "/etc/sysctl.d/99-x.conf".into(),
            "net.core.somaxconn = 1024\n".into(),
        ));
        let f = with_boot(&c, f);
        let p = plan_of(&c, &vars, &f);
        assert!(p.actions.iter().all(|a| a.setting != "net.core.somaxconn"));
        assert!(p.files.is_empty());
        assert!(
            p.notes.iter().any(|n| n.starts_with(
                "net.core.somaxconn: /etc/sysctl.d/99-x.conf:1 sets 1024 and is applied after"
            )),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn a_limits_file_that_already_says_it_is_left_alone() {
        let (c, vars) = catalog();
        let f = facts(&c, &[], Some(1024));
        let p = plan_of(&c, &vars, &f);
        let nofile = p
            .actions
            .iter()
            .find_map(|a| match a.op {
                Op::LimitsFile { nofile } => Some(nofile),
                _ => None,
            })
            .expect("a low nofile is persisted for PAM logins");
        assert_eq!(
            p.files,
            vec![(LIMITS_FILE.to_string(), render_limits_file(nofile))]
        );

        let mut f = f;
        f.owned
            .insert(LIMITS_FILE.into(), render_limits_file(nofile));
        let p = plan_of(&c, &vars, &f);
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        assert!(p.files.is_empty());
        assert!(p.notes[0].contains("already sets nofile"), "{:?}", p.notes);
    }
}

#[test]
fn desired_never_lowers_a_deliberate_value() {
    assert_eq!(
        desired(
            Compare::AtLeast,
            &Value::Num(4096),
            None,
            &Value::Num(65535)
        ),
        Some(Value::Num(65535))
    );
    assert_eq!(
        desired(
            Compare::AtLeast,
            &Value::Num(100000),
            None,
            &Value::Num(65535)
        ),
        Some(Value::Num(100000))
    );
    assert_eq!(
        desired(Compare::AtMost, &Value::Num(60), None, &Value::Num(15)),
        Some(Value::Num(15))
    );
    assert_eq!(
        desired(Compare::AtMost, &Value::Num(5), None, &Value::Num(15)),
        Some(Value::Num(5))
    );
    assert_eq!(
        desired(Compare::Equal, &Value::Num(2), None, &Value::Num(1)),
        Some(Value::Num(1))
    );
}

#[test]
fn desired_keeps_the_other_fields_and_widens_ranges() {
    let mem = Value::List(vec![100, 200, 300]);
    assert_eq!(
        desired(Compare::AtLeast, &mem, Some(2), &Value::Num(1000)),
        Some(Value::List(vec![100, 200, 1000]))
    );
    let rmem = Value::List(vec![4096, 131072, 6291456]);
    assert_eq!(
        desired(Compare::AtMost, &rmem, Some(1), &Value::Num(11792)),
        Some(Value::List(vec![4096, 11792, 6291456]))
    );
    let ports = Value::List(vec![32768, 60999]);
    assert_eq!(
        desired(
            Compare::Covers,
            &ports,
            None,
            &Value::List(vec![10000, 65535])
        ),
        Some(Value::List(vec![10000, 65535]))
    );
    assert_eq!(
        desired(
            Compare::Covers,
            &Value::List(vec![1024, 60999]),
            None,
            &Value::List(vec![10000, 65535])
        ),
        Some(Value::List(vec![1024, 65535]))
    );
    assert_eq!(
        desired(Compare::AtLeast, &mem, Some(7), &Value::Num(1)),
        None
    );
}

#[test]
fn our_file_is_merged_not_duplicated() {
    let existing = render_sysctl_file(&[("a.b".into(), "1".into()), ("c.d".into(), "2".into())]);
    let merged = merge_sysctl_lines(
        &existing,
        &[("c.d".into(), "3".into()), ("e.f".into(), "4 5".into())],
    );
    assert_eq!(
        merged,
        vec![
            ("a.b".into(), "1".into()),
            ("c.d".into(), "3".into()),
            ("e.f".into(), "4 5".into())
        ]
    );
}
