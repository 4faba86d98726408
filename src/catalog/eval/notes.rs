//! Notes that count what a value alone does not say: the ports a range holds, the server
//! processes a low fd limit calls for, the source addresses a proxy needs. The code counts; the
//! words, and which checks carry a note, are the catalog's (`notes:` and a check's `note:`).

use super::{Finding, Status};
use crate::catalog::{NoteCount, NoteDef};
use crate::value::Value;
use std::collections::BTreeMap;

/// The note `def` gives finding `f`, None when its case does not arise.
pub(super) fn note(def: &NoteDef, f: &Finding, vars: &BTreeMap<String, Value>) -> Option<String> {
    match def.counts {
        NoteCount::PortRange => port_range(def, f),
        NoteCount::Processes => processes(def, f, vars),
        NoteCount::ProxyAddresses => proxy_addresses(def, f, vars),
        NoteCount::Threads => threads(def, f, vars),
        NoteCount::CgroupSocket => cgroup_socket(def, f, vars),
    }
}

/// `case`'s words with each `{name}` filled (the catalog validated both when it loaded).
fn words(def: &NoteDef, case: &str, counts: &[(&str, String)]) -> String {
    let mut s = def.words.get(case).cloned().unwrap_or_default();
    for (name, v) in counts {
        s = s.replace(&format!("{{{name}}}"), v);
    }
    s
}

/// A port range is judged as `[first, last]`; what an operator sizes by is how many ports it
/// holds, so say that next to it.
fn port_range(def: &NoteDef, f: &Finding) -> Option<String> {
    let range = |v: &Option<Value>| match v {
        Some(Value::List(r)) if r.len() == 2 => Some((r[0], r[1], r[1] - r[0] + 1)),
        _ => None,
    };
    let (_, _, have) = range(&f.current)?;
    Some(match (range(&f.target), f.status) {
        (Some((first, last, need)), Status::Warn | Status::Fail | Status::Info) => words(
            def,
            "held_and_wanted",
            &[
                ("ports", have.to_string()),
                ("first", first.to_string()),
                ("last", last.to_string()),
                ("wanted_ports", need.to_string()),
            ],
        ),
        _ => words(def, "held", &[("ports", have.to_string())]),
    })
}

/// A missed fd limit has two fixes: raise the limit, or spread the connections over server
/// processes (`serve --processes`), each under the limit it has. Say which fits this host:
/// where this process cannot raise its own hard limit (no CAP_SYS_RESOURCE: a container, a
/// managed host), only the processes do.
fn processes(def: &NoteDef, f: &Finding, vars: &BTreeMap<String, Value>) -> Option<String> {
    if !matches!(f.status, Status::Fail | Status::Warn) {
        return None;
    }
    let (Some(Value::Num(have)), Some(Value::Num(conns))) = (&f.current, vars.get("connections"))
    else {
        return None;
    };
    let mut counts = vec![
        ("current", have.to_string()),
        ("connections", conns.to_string()),
        ("max_processes", crate::profile::MAX_PROCESSES.to_string()),
    ];
    let Some(n) = crate::profile::processes_needed(*conns as u64, (*have).max(0) as u64) else {
        return Some(words(def, "none_fit", &counts));
    };
    let per = crate::profile::connections_per_process(*conns as u64, n);
    counts.push(("processes", n.to_string()));
    counts.push(("per_process", per.to_string()));
    Some(match vars.get("host.can_raise_nofile") {
        Some(Value::Num(0)) => words(def, "processes_only", &counts),
        _ if n == 1 => return None,
        _ => words(def, "raise_or_processes", &counts),
    })
}

/// One proxy address reaches one backend address and port through at most as many connections
/// as the dynamic range has ports: say how many addresses the profile's connections need.
fn proxy_addresses(def: &NoteDef, f: &Finding, vars: &BTreeMap<String, Value>) -> Option<String> {
    let (Some(Value::Num(ports)), Some(Value::Num(conns))) = (&f.current, vars.get("connections"))
    else {
        return None;
    };
    let addresses = |per: i64| (conns + per - 1) / per.max(1);
    let mut note = words(
        def,
        "addresses",
        &[
            ("current", ports.to_string()),
            ("connections", conns.to_string()),
            ("reach", (*ports).min(*conns).to_string()),
            ("addresses", addresses(*ports).to_string()),
        ],
    );
    // The profile's port count, or the ports of its `[first, last]` range.
    let profile = match def.variable.as_ref().and_then(|v| vars.get(v)) {
        Some(Value::Num(n)) => Some(*n),
        Some(Value::List(r)) if r.len() == 2 => Some(r[1] - r[0] + 1),
        _ => None,
    };
    if let Some(best) = profile {
        if best > *ports {
            note.push_str(&words(
                def,
                "with_profile_ports",
                &[
                    ("profile_ports", best.to_string()),
                    ("profile_addresses", addresses(best).to_string()),
                ],
            ));
        }
    }
    Some(note)
}

/// A server's threads are read beside its sockets: say both, and which way they point.
fn threads(def: &NoteDef, f: &Finding, vars: &BTreeMap<String, Value>) -> Option<String> {
    let (Some(Value::Num(threads)), Some(Value::Num(sockets))) =
        (&f.current, vars.get("host.pid_sockets"))
    else {
        return None;
    };
    let case = match f.status {
        Status::Fail | Status::Warn => "per_connection",
        _ => "shared",
    };
    Some(words(
        def,
        case,
        &[
            ("threads", threads.to_string()),
            ("sockets", sockets.to_string()),
        ],
    ))
}

/// cgroup v2 charges a container's socket buffers to its memory.max: say how much they hold
/// now (`host.cgroup_sock_bytes`, memory.stat `sock`) and what share of the limit that is.
fn cgroup_socket(def: &NoteDef, f: &Finding, vars: &BTreeMap<String, Value>) -> Option<String> {
    let Some(Value::Num(sock)) = vars.get("host.cgroup_sock_bytes") else {
        return None;
    };
    let share = match &f.current {
        Some(Value::Num(max)) if *max > 0 && *max < i64::MAX => {
            format!("{:.1} % of memory.max", *sock as f64 * 100.0 / *max as f64)
        }
        _ => "memory.max is no limit".into(),
    };
    Some(words(
        def,
        "charged",
        &[
            ("sock_mib", format!("{:.1}", *sock as f64 / 1048576.0)),
            ("share", share),
        ],
    ))
}
