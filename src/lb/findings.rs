//! `check --lb-config`'s findings: the configuration read back against the profile.

use super::{
    nginx_worker_connections, proxy_fds, read, tunnel_timeout, with_headroom, wording, Facts, Kind,
    ProcLimits,
};
use crate::profile::Profile;

/// `check --lb-config`: the proxy's idle timeout against the server's heartbeat, its
/// connection cap and listen backlog against the profile, and its fd limit against what the
/// running proxy (`pid`, else the one found, else this shell) on `machine` gets. Err: `pid`
/// unreadable.
pub fn findings(
    path: &std::path::Path,
    text: &str,
    p: &Profile,
    pid: Option<u32>,
    machine: &crate::host::Machine,
) -> Result<Vec<crate::catalog::eval::Finding>, String> {
    let limits = match (read(text).kind, pid) {
        (_, Some(pid)) => Ok(machine.with(|host| proxy_fds::of_pid(host, pid))?),
        (Some(kind), None) => machine.with(|host| proxy_fds::detect(host, kind)),
        (None, None) => Err("not a proxy configuration".into()),
    };
    Ok(findings_with(path, text, p, limits))
}

/// [`findings`] with the proxy's fd limits given.
pub fn findings_with(
    path: &std::path::Path,
    text: &str,
    p: &Profile,
    limits: Result<ProcLimits, String>,
) -> Vec<crate::catalog::eval::Finding> {
    use crate::catalog::eval::{Finding, FixText, Status};
    use crate::catalog::{Scope, Severity};
    use crate::value::Value;
    let f = read(text);
    let file = path.display().to_string();
    let Some(kind) = f.kind else {
        let w = wording::words("lb.config", None, vec![("file", file.clone())]);
        return vec![Finding {
            id: "lb.config".into(),
            title: w.title(),
            status: Status::Fail,
            current: Some(Value::Text("unrecognised".into())),
            compare: "==",
            target: Some(Value::Text("haproxy or nginx".into())),
            severity: Severity::Fail,
            scope: Scope::Proxy,
            why: w.why(&[]),
            fix: FixText {
                runtime: Some(w.fix()),
                persistent: None,
            },
            refs: w.refs(),
            note: None,
            key: None,
        }];
    };
    let hb = &p.server.heartbeat;
    let want_idle = tunnel_timeout(p);
    let idle_ok = f.idle_timeout_secs.is_some_and(|t| t > hb.interval_secs);
    let idle_status = match f.idle_timeout_secs {
        Some(t) if t > hb.interval_secs && t >= want_idle => Status::Pass,
        Some(t) if t > hb.interval_secs => Status::Warn,
        _ => Status::Fail,
    };
    let w = wording::words(
        "lb.idle_timeout",
        Some(kind),
        vec![
            ("file", file.clone()),
            ("interval", hb.interval_secs.to_string()),
            ("timeout", hb.timeout_secs.to_string()),
            ("want", want_idle.to_string()),
        ],
    );
    let mut out = vec![Finding {
        id: "lb.idle_timeout".into(),
        title: w.title(),
        status: idle_status,
        current: f.idle_timeout_secs.map(|t| Value::Num(t as i64)),
        compare: ">=",
        target: Some(Value::Num(want_idle as i64)),
        severity: Severity::Fail,
        scope: Scope::Proxy,
        why: w.why(if idle_ok { &["little_margin"] } else { &[] }),
        fix: FixText {
            runtime: Some(w.fix()),
            persistent: None,
        },
        refs: w.refs(),
        note: Some(file.clone()),
        key: None,
    }];
    let want_cap = with_headroom(p.connections);
    let cap_status = match f.max_connections {
        Some(m) if m >= want_cap => Status::Pass,
        Some(m) if m >= p.connections => Status::Warn,
        _ => Status::Fail,
    };
    let wc = nginx_worker_connections(p.connections);
    let w = wording::words(
        "lb.max_connections",
        Some(kind),
        vec![
            ("file", file.clone()),
            ("want_cap", want_cap.to_string()),
            ("wc", wc.to_string()),
            ("rlimit", (wc + 1024).to_string()),
        ],
    );
    out.push(Finding {
        id: "lb.max_connections".into(),
        title: w.title(),
        status: cap_status,
        current: f.max_connections.map(|m| Value::Num(m as i64)),
        compare: ">=",
        target: Some(Value::Num(p.connections as i64)),
        severity: Severity::Fail,
        scope: Scope::Proxy,
        why: w.why(if cap_status == Status::Warn {
            &["no_headroom"]
        } else {
            &[]
        }),
        fix: FixText {
            runtime: Some(w.fix()),
            persistent: None,
        },
        refs: w.refs(),
        note: Some(file.clone()),
        key: None,
    });
    if kind == Kind::Nginx {
        out.push(backlog_finding(&f, p, &file));
    }
    out.push(proxy_fds::finding(kind, &f, limits, &file));
    out
}

/// `lb.backlog` (nginx): every `listen` asks for the profile's accept queue. nginx's default
/// backlog is 511 whatever net.core.somaxconn allows, so a reconnect storm overflows it and the
/// kernel drops SYNs the tuned host could have queued (nginx's value is capped at somaxconn).
fn backlog_finding(f: &Facts, p: &Profile, file: &str) -> crate::catalog::eval::Finding {
    use crate::catalog::eval::{Finding, FixText, Status};
    use crate::catalog::{Scope, Severity};
    use crate::value::Value;
    const NGINX_DEFAULT_BACKLOG: u64 = 511;
    let want = p.linux.somaxconn;
    // No listen at all: nginx listens on *:80 with the default backlog.
    let lowest = f
        .listens
        .iter()
        .map(|(_, b)| b.unwrap_or(NGINX_DEFAULT_BACKLOG))
        .min()
        .unwrap_or(NGINX_DEFAULT_BACKLOG);
    let short: Vec<String> = f
        .listens
        .iter()
        .filter(|(_, b)| b.is_none_or(|b| b < want))
        .map(|(a, b)| match b {
            Some(b) => format!("{a} (backlog={b})"),
            None => format!("{a} (no backlog=, so 511)"),
        })
        .collect();
    let w = wording::words(
        "lb.backlog",
        Some(Kind::Nginx),
        vec![
            ("file", file.to_string()),
            ("want", want.to_string()),
            ("short", short.join(", ")),
        ],
    );
    let detail: &[&str] = if f.listens.is_empty() {
        &["no_listen"]
    } else if short.is_empty() {
        &[]
    } else {
        &["short_listens"]
    };
    Finding {
        id: "lb.backlog".into(),
        title: w.title(),
        status: if lowest >= want {
            Status::Pass
        } else {
            Status::Fail
        },
        current: Some(Value::Num(lowest as i64)),
        compare: ">=",
        target: Some(Value::Num(want as i64)),
        severity: Severity::Fail,
        scope: Scope::Proxy,
        why: w.why(detail),
        fix: FixText {
            runtime: Some(w.fix()),
            persistent: None,
        },
        refs: w.refs(),
        note: Some(file.to_string()),
        key: None,
    }
}
