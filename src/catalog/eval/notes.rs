//! Notes that count what a value alone does not say: the ports a range holds, the server
//! processes a low fd limit calls for, the source addresses a proxy needs.

use super::{Finding, Status};
use crate::catalog::CheckDef;
use crate::value::Value;
use std::collections::BTreeMap;

/// One proxy address reaches one backend address and port through at most as many connections
/// as the dynamic range has ports: say how many addresses the profile's connections need.
pub(super) fn proxy_addresses_note(
    def: &CheckDef,
    f: &Finding,
    vars: &BTreeMap<String, Value>,
) -> Option<String> {
    if !matches!(
        def.check.source,
        crate::catalog::Source::DynamicPortCount(_)
    ) {
        return None;
    }
    let (Some(Value::Num(ports)), Some(Value::Num(conns))) = (&f.current, vars.get("connections"))
    else {
        return None;
    };
    let addresses = |per: i64| (conns + per - 1) / per.max(1);
    let mut note = format!(
        "{ports} ports: one proxy address reaches {} of the profile's {conns} connections to one backend address and port; {conns} need {} source addresses",
        (*ports).min(*conns),
        addresses(*ports)
    );
    if let Some(Value::Num(best)) = vars.get("windows.dynamic_port_count") {
        if best > ports {
            note.push_str(&format!(
                " ({} with the profile's {best} ports)",
                addresses(*best)
            ));
        }
    }
    Some(note)
}

/// A missed fd limit has two fixes: raise the limit, or spread the connections over server
/// processes (`serve --processes`), each under the limit it has. Say which fits this host:
/// where this process cannot raise its own hard limit (no CAP_SYS_RESOURCE: a container, a
/// managed host), only the processes do.
pub(super) fn nofile_note(
    def: &CheckDef,
    f: &Finding,
    vars: &BTreeMap<String, Value>,
) -> Option<String> {
    let is_nofile = match &def.check.source {
        crate::catalog::Source::Rlimit(r) => matches!(r.resource, crate::catalog::Resource::Nofile),
        crate::catalog::Source::Systemd(p) => p == "LimitNOFILE",
        _ => false,
    };
    if !is_nofile || !matches!(f.status, Status::Fail | Status::Warn) {
        return None;
    }
    let (Some(Value::Num(have)), Some(Value::Num(conns))) = (&f.current, vars.get("connections"))
    else {
        return None;
    };
    let per = |n: u64| crate::profile::connections_per_process(*conns as u64, n);
    let Some(n) = crate::profile::processes_needed(*conns as u64, (*have).max(0) as u64) else {
        return Some(format!(
            "raise nofile: even {} processes cannot share {conns} connections under {have} open files each",
            crate::profile::MAX_PROCESSES
        ));
    };
    let processes = format!(
        "use --processes {n} (server.processes: {n} or auto): {n} processes of at most {} connections fit under {have} open files each",
        per(n)
    );
    Some(match vars.get("host.can_raise_nofile") {
        Some(Value::Num(0)) => format!(
            "{processes}; raising nofile does not fit this host: this process lacks CAP_SYS_RESOURCE (a container or managed host sets the hard limit)"
        ),
        _ if n == 1 => return None,
        _ => format!("raise nofile (the fix below), or {processes}"),
    })
}

/// A port range is judged as `[first, last]`; what an operator sizes by is how many ports it
/// holds, so say that next to it.
pub(super) fn port_count_note(def: &CheckDef, f: &Finding) -> Option<String> {
    if !matches!(def.check.source, crate::catalog::Source::DynamicPorts(_)) {
        return None;
    }
    let range = |v: &Option<Value>| match v {
        Some(Value::List(r)) if r.len() == 2 => Some((r[0], r[1], r[1] - r[0] + 1)),
        _ => None,
    };
    let (_, _, have) = range(&f.current)?;
    Some(match (range(&f.target), f.status) {
        (Some((first, last, need)), Status::Warn | Status::Fail | Status::Info) => {
            format!("{have} ports; the profile wants {first}-{last} ({need} ports)")
        }
        _ => format!("{have} ports"),
    })
}
