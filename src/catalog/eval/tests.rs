use super::*;
use crate::catalog::facts::{BootEntry, HostFacts, Instance, Reading};
use crate::catalog::{self, Catalog};
use crate::host::HostInfo;
use std::time::Duration;

fn profile_vars() -> BTreeMap<String, Value> {
    crate::profile::load("100k").unwrap().profile.variables()
}

fn catalog() -> Catalog {
    let known = profile_vars().into_keys().collect();
    catalog::load(crate::host::Platform::Linux, None, &known).unwrap()
}

fn idx(c: &Catalog, id: &str) -> usize {
    c.checks.iter().position(|d| d.check.id == id).unwrap()
}

fn facts(instances: Vec<Instance>) -> HostFacts {
    let mut vars = BTreeMap::new();
    vars.insert("host.cpus".into(), Value::Num(2));
    vars.insert("host.page_size".into(), Value::Num(4096));
    HostFacts {
        vars,
        instances,
        no_nics: Some("none here".into()),
        ..HostFacts::empty(HostInfo::default())
    }
}

fn inst(check: usize, reading: Reading) -> Instance {
    Instance {
        check,
        nic: None,
        reading,
        after: None,
        boot: None,
        defaulted: false,
    }
}

fn one(c: &Catalog, f: &HostFacts, id: &str) -> Finding {
    evaluate(c, &profile_vars(), f)
        .into_iter()
        .find(|x| x.id == id)
        .unwrap()
}

#[test]
fn a_low_fd_limit_says_whether_to_raise_it_or_use_processes() {
    let c = catalog();
    let id = "linux.process.nofile.hard";
    let i = idx(&c, id);
    // This VM: hard limit 20,000 that root cannot raise (no CAP_SYS_RESOURCE).
    let mut f = facts(vec![inst(i, Reading::Value(Value::Num(20_000)))]);
    f.vars.insert("host.can_raise_nofile".into(), Value::Num(0));
    let r = one(&c, &f, id);
    assert_eq!(r.status, Status::Fail);
    assert_eq!(
        r.target,
        Some(Value::Num(200_000)),
        "one process: the profile's nofile"
    );
    let note = r.note.unwrap();
    assert!(note.starts_with("use --processes 6 "), "{note}");
    assert!(note.contains("raising nofile does not fit"), "{note}");
    // Where the limit can be raised, both, the raise first.
    f.vars.insert("host.can_raise_nofile".into(), Value::Num(1));
    let note = one(&c, &f, id).note.unwrap();
    assert!(
        note.starts_with("raise nofile") && note.contains("--processes 6"),
        "{note}"
    );
    // A profile with six processes: each needs its share, and 20,000 is enough.
    let mut vars = profile_vars();
    let (_, per) = crate::profile::nofile_per_process(Some(&Value::Num(6)), 100_000, 200_000);
    vars.insert("estimate.nofile_per_process".into(), Value::Num(per as i64));
    let r = evaluate(&c, &vars, &f)
        .into_iter()
        .find(|x| x.id == id)
        .unwrap();
    assert_eq!(
        (r.status, r.target),
        (Status::Pass, Some(Value::Num(18_398)))
    );
}

#[test]
fn somaxconn_fails_below_and_passes_at_target() {
    let c = catalog();
    let i = idx(&c, "linux.net.core.somaxconn");
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Value(Value::Num(4096)))]),
        "linux.net.core.somaxconn",
    );
    assert_eq!(
        (f.status, f.current, f.target),
        (
            Status::Fail,
            Some(Value::Num(4096)),
            Some(Value::Num(65535))
        )
    );
    assert_eq!(
        f.fix.runtime.as_deref(),
        Some("sudo sysctl -w net.core.somaxconn=65535  # the server must listen() again to use it")
    );
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Value(Value::Num(65535)))]),
        "linux.net.core.somaxconn",
    );
    assert_eq!(f.status, Status::Pass);
}

#[test]
fn unreadable_is_a_skip_never_a_pass() {
    let c = catalog();
    let i = idx(&c, "linux.net.core.somaxconn");
    let f = one(
        &c,
        &facts(vec![inst(
            i,
            Reading::Unreadable("permission denied".into()),
        )]),
        "linux.net.core.somaxconn",
    );
    assert_eq!(
        (f.status, f.note.as_deref()),
        (Status::Skip, Some("permission denied"))
    );
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Missing("gone".into()))]),
        "linux.net.core.somaxconn",
    );
    assert_eq!(f.status, Status::Skip);
}

#[test]
fn missing_conntrack_is_a_pass_with_the_reason() {
    let c = catalog();
    let i = idx(&c, "linux.net.netfilter.nf_conntrack_max");
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Missing("x".into()))]),
        "linux.net.netfilter.nf_conntrack_max",
    );
    assert_eq!(f.status, Status::Pass);
    assert!(f.note.unwrap().contains("not loaded"));
}

#[test]
fn tw_reuse_two_is_loopback_only_and_misses_one() {
    let c = catalog();
    let i = idx(&c, "linux.net.ipv4.tcp_tw_reuse");
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Value(Value::Num(2)))]),
        "linux.net.ipv4.tcp_tw_reuse",
    );
    assert_eq!(f.status, Status::Warn);
}

#[test]
fn port_range_must_cover() {
    assert_eq!(
        meets(
            Compare::Covers,
            &Value::List(vec![1024, 65535]),
            &Value::List(vec![10000, 65535])
        ),
        Ok(true)
    );
    assert_eq!(
        meets(
            Compare::Covers,
            &Value::List(vec![32768, 60999]),
            &Value::List(vec![10000, 65535])
        ),
        Ok(false)
    );
    assert!(meets(Compare::Covers, &Value::Num(1), &Value::List(vec![1, 2])).is_err());
}

#[test]
fn port_lists_are_read_merged_and_reserved_as_a_union() {
    let t = |s: &str| Value::Text(s.into());
    assert_eq!(
        port_set(&t("30000-32767,10250, 10251")).unwrap(),
        vec![(10250, 10251), (30000, 32767)]
    );
    assert_eq!(port_set(&t("")).unwrap(), vec![]);
    assert!(port_set(&t("9-3")).is_none() && port_set(&t("70000")).is_none());
    let target = t("30000-32767,10250");
    assert!(meets(Compare::Reserves, &t("10000-40000"), &target).unwrap());
    assert!(!meets(Compare::Reserves, &t("30000-32767"), &target).unwrap());
    assert!(!meets(Compare::Reserves, &Value::Num(10250), &target).unwrap());
    assert_eq!(
        desired(Compare::Reserves, &Value::Num(9100), None, &target),
        Some(t("9100,10250,30000-32767"))
    );
}

#[test]
fn versions_compare_numerically() {
    assert_eq!(
        meets(
            Compare::VersionAtLeast,
            &Value::Text("3.10.0-1160".into()),
            &Value::Text("3.9".into())
        ),
        Ok(true)
    );
    assert_eq!(
        meets(
            Compare::VersionAtLeast,
            &Value::Text("3.8.13".into()),
            &Value::Text("3.9".into())
        ),
        Ok(false)
    );
    assert_eq!(
        meets(
            Compare::VersionAtLeast,
            &Value::Text("6.18.44-fc".into()),
            &Value::Text("3.9".into())
        ),
        Ok(true)
    );
}

#[test]
fn counters_are_info_without_watch_and_judged_on_growth_with_it() {
    let c = catalog();
    let i = idx(&c, "linux.counter.listen_overflows");
    let mut fx = facts(vec![inst(i, Reading::Value(Value::Num(100)))]);
    assert_eq!(
        one(&c, &fx, "linux.counter.listen_overflows").status,
        Status::Info
    );
    fx.watched = Some(Duration::from_secs(5));
    fx.instances[0].after = Some(Reading::Value(Value::Num(100)));
    assert_eq!(
        one(&c, &fx, "linux.counter.listen_overflows").status,
        Status::Pass
    );
    fx.instances[0].after = Some(Reading::Value(Value::Num(107)));
    let f = one(&c, &fx, "linux.counter.listen_overflows");
    assert_eq!(
        (f.status, f.note.as_deref()),
        (Status::Fail, Some("+7 in 5 s"))
    );
}

#[test]
fn target_over_an_unreadable_host_value_is_a_skip() {
    let c = catalog();
    let i = idx(&c, "linux.sockstat.orphans");
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Value(Value::Num(3)))]),
        "linux.sockstat.orphans",
    );
    assert_eq!(f.status, Status::Skip);
    assert!(f
        .note
        .unwrap()
        .contains("sysctl.net.ipv4.tcp_max_orphans, which could not be read"));
}

#[test]
fn pid_checks_skip_without_pid() {
    let c = catalog();
    let i = idx(&c, "linux.pid.nofile.soft");
    let f = one(
        &c,
        &facts(vec![inst(i, Reading::Unreadable("needs --pid".into()))]),
        "linux.pid.nofile.soft",
    );
    assert_eq!(
        (f.status, f.note.as_deref()),
        (
            Status::Skip,
            Some("pass --pid PID to check a running server")
        )
    );
}

#[test]
fn per_nic_checks_without_nics_skip_once_with_the_reason() {
    let c = catalog();
    let f = one(&c, &facts(vec![]), "linux.nic.rx_queues");
    assert_eq!(
        (f.status, f.note.as_deref()),
        (Status::Skip, Some("none here"))
    );
}

fn boot(c: &Catalog, runtime: i64, entry: Reading<BootEntry>) -> Finding {
    let i = idx(c, "linux.net.core.somaxconn");
    let mut x = inst(i, Reading::Value(Value::Num(runtime)));
    x.boot = Some(entry);
    one(c, &facts(vec![x]), "linux.net.core.somaxconn.boot")
}

#[test]
fn boot_view_catches_overrides_and_unpersisted_values() {
    let c = catalog();
    let f = boot(
        &c,
        65535,
        Reading::Value(BootEntry {
            file: "/etc/sysctl.d/99-x.conf".into(),
            line: 3,
            value: "1024".into(),
        }),
    );
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.note
            .as_deref()
            .unwrap()
            .starts_with("/etc/sysctl.d/99-x.conf:3 sets 1024"),
        "{f:?}"
    );
    let f = boot(
        &c,
        65535,
        Reading::Value(BootEntry {
            file: "/etc/sysctl.d/60-wstune.conf".into(),
            line: 1,
            value: "65535".into(),
        }),
    );
    assert_eq!(f.status, Status::Pass);
    let f = boot(&c, 65535, Reading::Missing("no".into()));
    assert_eq!(f.status, Status::Warn);
    assert!(f
        .note
        .as_deref()
        .unwrap()
        .contains("lost at the next boot (kernel default 4096)"));
}

#[test]
fn summary_counts() {
    let c = catalog();
    let i = idx(&c, "linux.net.core.somaxconn");
    let all = evaluate(
        &c,
        &profile_vars(),
        &facts(vec![inst(i, Reading::Value(Value::Num(1)))]),
    );
    let s = Summary::of(&all);
    assert_eq!(s.total, all.len());
    assert_eq!(s.pass + s.warn + s.fail + s.skip + s.info, s.total);
    assert!(s.fail >= 1);
}

/// The thread limits are judged only after linux.pid.io_model finds a thread per connection:
/// an event-driven server skips them with the reason, a server not given with --pid with
/// io_model's own reason, and the boot view of a gated sysctl skips with them (so apply
/// leaves the setting alone).
#[test]
fn thread_limits_follow_the_io_model_verdict() {
    let c = catalog();
    let model = idx(&c, "linux.pid.io_model");
    let tmax = idx(&c, "linux.kernel.threads-max");
    let with = |threads: i64, sockets: i64, pid: bool| {
        let mut t = inst(tmax, Reading::Value(Value::Num(63_000)));
        t.boot = Some(Reading::Missing("no sysctl.d file sets it".into()));
        let mut f = facts(vec![inst(model, Reading::Value(Value::Num(threads))), t]);
        f.vars
            .insert("host.pid_sockets".into(), Value::Num(sockets));
        f.request.pid = pid.then_some(4242);
        evaluate(&c, &profile_vars(), &f)
    };
    let get = |all: &[Finding], id: &str| all.iter().find(|x| x.id == id).unwrap().clone();
    // 4,100 threads for 4,000 sockets on 2 CPUs: a thread per connection.
    let all = with(4_100, 4_000, true);
    let m = get(&all, "linux.pid.io_model");
    assert_eq!(
        (m.status, m.target.clone()),
        (Status::Fail, Some(Value::Num(2_000)))
    );
    let t = get(&all, "linux.kernel.threads-max");
    assert_eq!(
        (t.status, t.target),
        (Status::Fail, Some(Value::Num(200_000)))
    );
    assert_eq!(
        get(&all, "linux.kernel.threads-max.boot").status,
        Status::Info
    );
    // 12 threads for the same sockets: event-driven; a few sockets never count either.
    for (threads, sockets) in [(12, 4_000), (40, 10)] {
        let all = with(threads, sockets, true);
        assert_eq!(get(&all, "linux.pid.io_model").status, Status::Pass);
        for id in ["linux.kernel.threads-max", "linux.kernel.threads-max.boot"] {
            let t = get(&all, id);
            assert_eq!(
                (t.status, t.note.as_deref()),
                (
                    Status::Skip,
                    Some("event-driven: threads do not grow with sockets")
                ),
                "{id}"
            );
        }
    }
    // Without --pid nothing says which it is.
    let t = get(&with(4_100, 4_000, false), "linux.kernel.threads-max");
    assert_eq!(t.status, Status::Skip);
    assert_eq!(
        t.note.as_deref(),
        Some("linux.pid.io_model was not judged: pass --pid PID to check a running server")
    );
}

/// tcp_orphan_retries' 0 is 8 to the kernel: judged as 8, shown as read, and the boot view's
/// kernel default (0) misses too.
#[test]
fn a_value_the_kernel_reads_as_another_is_judged_as_that_one() {
    let c = catalog();
    let i = idx(&c, "linux.net.ipv4.tcp_orphan_retries");
    let mut x = inst(i, Reading::Value(Value::Num(0)));
    x.boot = Some(Reading::Missing("no sysctl.d file sets it".into()));
    let all = evaluate(&c, &profile_vars(), &facts(vec![x]));
    let r = all
        .iter()
        .find(|f| f.id == "linux.net.ipv4.tcp_orphan_retries")
        .unwrap();
    assert_eq!(
        (r.status, r.current.clone()),
        (Status::Info, Some(Value::Num(0)))
    );
    assert_eq!(r.note.as_deref(), Some("0 means 8 to the kernel"));
    let b = all
        .iter()
        .find(|f| f.id == "linux.net.ipv4.tcp_orphan_retries.boot")
        .unwrap();
    assert_eq!(b.status, Status::Info, "{b:?}");
    assert!(
        b.note.as_deref().unwrap().contains("kernel default 8"),
        "{b:?}"
    );
    let two = one(
        &c,
        &facts(vec![inst(i, Reading::Value(Value::Num(2)))]),
        "linux.net.ipv4.tcp_orphan_retries",
    );
    assert_eq!((two.status, two.note), (Status::Pass, None));
}

/// A gate must name a check above it.
#[test]
fn only_if_missed_names_an_earlier_check() {
    let known = profile_vars().into_keys().collect();
    let text = "platform: linux\nchecks:\n  - id: linux.x.y\n    title: t\n    source: {sysctl: kernel.pid_max}\n    scope: global\n    compare: \">=\"\n    target: 1\n    severity: fail\n    only_if_missed: {check: linux.a.b, otherwise: o}\n    why: w\n    fix: {}\n";
    let err = catalog::parse(text, "c.yaml", &known)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("only_if_missed: `linux.a.b` is no check above this one"),
        "{err}"
    );
}
