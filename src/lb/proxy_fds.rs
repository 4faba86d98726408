//! The file-descriptor limit a proxy process gets, and whether a configuration fits in it.
//!
//! Each proxied connection costs the proxy two descriptors (client and backend side), so a
//! proxy sized for N connections needs 2N + its own. HAProxy computes that from `maxconn`,
//! raises its limit itself and refuses to start when the hard limit is lower (2.6: "Cannot
//! raise FD limit to N, limit is M"); nginx workers take `worker_rlimit_nofile` where the
//! configuration sets it (a setrlimit that fails past the hard limit without
//! CAP_SYS_RESOURCE) and otherwise keep the soft limit they were started with.
//!
//! Which limit counts is read from the proxy itself where it runs (`/proc/PID/limits` of the
//! master, or `--lb-pid`), else from this process, which stands for the shell the check runs in;
//! the finding names the one it compared.

use super::{Facts, Kind};
use crate::catalog::eval::{Finding, FixText, Status};
use crate::catalog::{Scope, Severity};
use crate::host::procfs::{self, paths};
use crate::host::Backend;
use crate::value::Value;

/// Descriptors a proxy needs beyond two per connection: HAProxy 2.6 adds about 3 per thread
/// (poller, wake-up pipe), one per listener, server health check and socket; nginx workers keep
/// logs, listeners and the channel to the master. 256 covers 64 threads and a few dozen of the
/// rest.
pub const FD_MARGIN: u64 = 256;

/// nginx's worker_connections when the configuration does not set it.
const NGINX_DEFAULT_WORKER_CONNECTIONS: u64 = 512;

/// RLIMIT_NOFILE of the process the proxy is (or will be), and where that came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcLimits {
    pub soft: u64,
    pub hard: u64,
    /// With CAP_SYS_RESOURCE the process may raise its hard limit to fs.nr_open.
    pub raise_to: Option<u64>,
    /// Which process was read, for the finding ("haproxy pid 1234", "this shell").
    pub source: String,
}

impl ProcLimits {
    /// The highest limit the process can set for itself.
    pub fn reachable(&self) -> u64 {
        self.raise_to.map_or(self.hard, |n| n.max(self.hard))
    }
}

fn read_pid(host: &dyn Backend, dir: &str, source: String) -> Result<ProcLimits, String> {
    let limits = host
        .read(&format!("{dir}/limits"))
        .map_err(|e| format!("cannot read {dir}/limits: {e}"))?;
    let (soft, hard) = procfs::nofile_limits(&limits)
        .ok_or_else(|| format!("{dir}/limits has no 'Max open files' line"))?;
    let status = host.read(&format!("{dir}/status")).unwrap_or_default();
    let raise_to = procfs::can_raise_nofile(&status)
        .unwrap_or(false)
        .then(|| {
            host.read(paths::NR_OPEN)
                .ok()
                .and_then(|v| v.trim().parse().ok())
        })
        .flatten();
    Ok(ProcLimits {
        soft,
        hard,
        raise_to,
        source,
    })
}

/// The limits of a given process (`check --lb-pid`) on `host`, the machine the proxy runs
/// on.
pub fn of_pid(host: &dyn Backend, pid: u32) -> Result<ProcLimits, String> {
    let comm = host
        .read(&format!("{}/comm", paths::process(pid)))
        .map_err(|_| format!("--lb-pid {pid}: no such process; give the proxy's (master) pid"))?;
    read_pid(
        host,
        &paths::process(pid),
        format!("{} pid {pid}", comm.trim()),
    )
    .map_err(|e| format!("--lb-pid {pid}: {e}"))
}

/// Running processes named `name` whose parent is not (their masters), lowest pid first.
fn masters(host: &dyn Backend, name: &str) -> Vec<u32> {
    let comm = |pid: u32| {
        host.read(&format!("{}/comm", paths::process(pid)))
            .map(|c| c.trim().to_string())
            .unwrap_or_default()
    };
    let Ok(entries) = host.list(paths::PROC) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .iter()
        .filter_map(|e| e.parse::<u32>().ok())
        .filter(|pid| comm(*pid) == name)
        .filter(|pid| {
            // An unreadable parent counts as not the same program.
            host.read(&format!("{}/stat", paths::process(pid)))
                .ok()
                .and_then(|s| procfs::stat_ppid(&s))
                .is_none_or(|ppid| comm(ppid) != name)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The limits of the running proxy of this kind, else of this process (the shell the check
/// runs in), on `host`, the machine they run on. Err where neither can be read (no /proc).
pub fn detect(host: &dyn Backend, kind: Kind) -> Result<ProcLimits, String> {
    let name = match kind {
        Kind::Haproxy => "haproxy",
        Kind::Nginx => "nginx",
    };
    let found = masters(host, name);
    if let Some(&pid) = found.first() {
        let also = if found.len() > 1 {
            format!(
                " (one of {} running: {:?}; pick one with --lb-pid)",
                found.len(),
                found
            )
        } else {
            String::new()
        };
        if let Ok(l) = read_pid(
            host,
            &paths::process(pid),
            format!("running {name} pid {pid}{also}"),
        ) {
            return Ok(l);
        }
    }
    read_pid(
        host,
        &paths::process("self"),
        format!(
            "this shell (no running {name} found: run the check on the proxy's host as the user \
             that starts it, or pass --lb-pid)"
        ),
    )
}

/// `lb.fd_limit`: the descriptors the configuration needs against those the proxy gets.
pub fn finding(kind: Kind, f: &Facts, limits: Result<ProcLimits, String>, file: &str) -> Finding {
    let (name, directive) = match kind {
        Kind::Haproxy => ("haproxy", "ulimit-n"),
        Kind::Nginx => ("nginx", "worker_rlimit_nofile"),
    };
    let mut out = Finding {
        id: "lb.fd_limit".into(),
        title: format!("{name}: the fd limit covers two descriptors per connection"),
        status: Status::Fail,
        current: None,
        compare: ">=",
        target: None,
        severity: Severity::Fail,
        scope: Scope::Proxy,
        why: String::new(),
        fix: FixText {
            runtime: None,
            persistent: None,
        },
        refs: super::wording::defs()
            .iter()
            .find(|d| d.id == "lb.fd_limit")
            .map(|d| d.refs.clone())
            .unwrap_or_default(),
        note: None,
        key: None,
    };
    let l = match limits {
        Ok(l) => l,
        Err(e) => {
            out.status = Status::Warn;
            out.why =
                format!("The proxy's fd limit could not be read ({e}), so it was not compared.");
            out.fix.runtime = Some(format!(
                "run the check on the proxy's host (Linux), or pass --lb-pid with the {name} master's pid"
            ));
            return out;
        }
    };
    let reach = l.reachable();
    let how_far = match l.raise_to {
        Some(n) => format!(
            "hard limit {}, raisable to fs.nr_open {n} (CAP_SYS_RESOURCE)",
            l.hard
        ),
        None => format!("hard limit {}", l.hard),
    };
    out.note = Some(format!(
        "{file}; compared with {}: soft {}, {how_far}",
        l.source, l.soft
    ));
    match kind {
        Kind::Haproxy => haproxy(&mut out, f, reach, file),
        Kind::Nginx => nginx(&mut out, f, &l, reach, file, directive),
    }
    out
}

/// HAProxy's side: maxconn's descriptors against the limit it raises itself to (ulimit-n, or
/// the reachable hard limit).
fn haproxy(out: &mut Finding, f: &Facts, reach: u64, file: &str) {
    let Some(maxconn) = f.global_maxconn.or(f.max_connections) else {
        out.status = Status::Warn;
        out.current = Some(Value::Num(reach as i64));
        out.why = format!(
            "{file} sets no maxconn, so HAProxy derives it from the fd limit (about {} \
             connections here) instead of from the connections you expect.",
            reach.saturating_sub(FD_MARGIN) / 2
        );
        out.fix.runtime = Some(format!(
            "set maxconn in the global section of {file} (`wstune lb haproxy` prints one)"
        ));
        return;
    };
    let need = super::haproxy_fds(maxconn);
    out.target = Some(Value::Num(need as i64));
    // ulimit-n, when set, is the limit HAProxy asks for instead of its computed one.
    let got = f.nofile.map_or(reach, |u| u.min(reach));
    out.current = Some(Value::Num(got as i64));
    out.status = if got >= need {
        Status::Pass
    } else {
        Status::Fail
    };
    out.why = match f.nofile {
        Some(u) if u < need => format!(
            "ulimit-n {u} in {file} caps HAProxy below the {need} descriptors maxconn \
             {maxconn} needs (2 per connection + {FD_MARGIN}): connections past about {} \
             fail to open.",
            u.saturating_sub(FD_MARGIN) / 2
        ),
        _ => format!(
            "maxconn {maxconn} needs {need} descriptors (2 per connection, client and \
             backend side, + {FD_MARGIN} for HAProxy's own). HAProxy raises its limit to \
             that itself, but not past the hard limit without CAP_SYS_RESOURCE: below it, \
             HAProxy refuses to start (\"Cannot raise FD limit\")."
        ),
    };
    out.fix.runtime = Some(if f.nofile.is_some_and(|u| u < need) {
        format!("remove ulimit-n from {file} (HAProxy computes it) or set it to {need}")
    } else {
        format!(
            "raise the hard limit of the user that starts HAProxy to {need} or more \
             (`ulimit -Hn {need}` before starting it), or lower maxconn"
        )
    });
    out.fix.persistent = Some(format!(
        "LimitNOFILE={need} in the haproxy.service drop-in \
         (systemctl edit haproxy), or `nofile {need}` in /etc/security/limits.d/"
    ));
}

/// nginx's side: worker_connections' descriptors against the limit a worker keeps
/// (worker_rlimit_nofile where it may set it, else the soft limit it started with).
fn nginx(out: &mut Finding, f: &Facts, l: &ProcLimits, reach: u64, file: &str, directive: &str) {
    let wc = f
        .worker_connections
        .unwrap_or(NGINX_DEFAULT_WORKER_CONNECTIONS);
    let need = wc.saturating_add(FD_MARGIN);
    out.target = Some(Value::Num(need as i64));
    // A worker sets worker_rlimit_nofile (as both limits) where it may; where it may
    // not, or without the directive, it keeps the soft limit it was started with.
    let got = match f.nofile {
        Some(n) if n <= reach => n,
        _ => l.soft,
    };
    out.current = Some(Value::Num(got as i64));
    out.status = if got >= need {
        Status::Pass
    } else {
        Status::Fail
    };
    out.why = format!(
        "worker_connections {wc} counts both sides of each proxied connection; a worker \
         needs a descriptor for each + {FD_MARGIN} (logs, listeners). {}",
        match f.nofile {
            None => format!(
                "{file} has no worker_rlimit_nofile, so workers keep the soft limit {} \
                 they start with and accept() fails with EMFILE past it.",
                l.soft
            ),
            Some(n) if n > reach => format!(
                "worker_rlimit_nofile {n} is past the hard limit {reach} the workers may \
                 raise to, so setrlimit fails and they keep the soft limit {}.",
                l.soft
            ),
            Some(n) => format!("worker_rlimit_nofile is {n}."),
        }
    );
    out.fix.runtime = Some(if f.nofile.is_some_and(|n| n > reach) {
        format!(
            "raise the hard limit of the user that starts nginx to {need} or more, or \
             start nginx as root (workers set worker_rlimit_nofile before dropping \
             privileges)"
        )
    } else {
        format!("set {directive} {need} (or more) in the main context of {file} and reload nginx")
    });
    out.fix.persistent = Some(format!(
        "keep {directive} in {file}; LimitNOFILE={need} in an nginx.service drop-in \
         covers a master that runs without root"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(soft: u64, hard: u64, raise_to: Option<u64>) -> Result<ProcLimits, String> {
        Ok(ProcLimits {
            soft,
            hard,
            raise_to,
            source: "test".into(),
        })
    }

    #[test]
    fn reads_this_hosts_limits() {
        // The parsers are host/procfs.rs's, tested there; this reads the real /proc.
        let me = detect(crate::host::live(None).as_ref(), Kind::Haproxy).unwrap();
        assert!(me.hard >= me.soft && me.soft > 0, "{me:?}");
    }

    #[test]
    fn haproxy_needs_two_per_connection_within_the_hard_limit() {
        let f = Facts {
            kind: Some(Kind::Haproxy),
            global_maxconn: Some(11000),
            max_connections: Some(11000),
            ..Facts::default()
        };
        let r = finding(Kind::Haproxy, &f, limits(1024, 20000, None), "h.cfg");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.target, Some(Value::Num(22256)));
        assert_eq!(r.current, Some(Value::Num(20000)));
        assert!(r
            .note
            .unwrap()
            .contains("test: soft 1024, hard limit 20000"));
        // Root with CAP_SYS_RESOURCE raises it itself.
        let r = finding(
            Kind::Haproxy,
            &f,
            limits(1024, 20000, Some(1 << 20)),
            "h.cfg",
        );
        assert_eq!(r.status, Status::Pass);
        // ulimit-n below what maxconn needs caps it whatever the hard limit.
        let mut g = f.clone();
        g.nofile = Some(4096);
        let r = finding(Kind::Haproxy, &g, limits(1024, 1 << 20, None), "h.cfg");
        assert_eq!(r.status, Status::Fail);
        assert!(r.why.contains("ulimit-n 4096"), "{}", r.why);
        // No maxconn: a warning, not a guess.
        let r = finding(
            Kind::Haproxy,
            &Facts::default(),
            limits(1024, 20000, None),
            "h",
        );
        assert_eq!(r.status, Status::Warn);
        // Unreadable: a warning that says so.
        let r = finding(Kind::Haproxy, &f, Err("no /proc".into()), "h");
        assert_eq!(r.status, Status::Warn);
        assert!(r.why.contains("no /proc"));
    }

    #[test]
    fn nginx_workers_get_worker_rlimit_nofile_or_keep_their_soft_limit() {
        let f = Facts {
            kind: Some(Kind::Nginx),
            worker_connections: Some(20000),
            nofile: Some(24000),
            ..Facts::default()
        };
        let ok = finding(Kind::Nginx, &f, limits(1024, 1 << 20, None), "n");
        assert_eq!(ok.status, Status::Pass, "{}", ok.why);
        assert_eq!(ok.current, Some(Value::Num(24000)));
        // Past the hard limit: setrlimit fails, the soft limit stays.
        let r = finding(Kind::Nginx, &f, limits(1024, 20000, None), "n");
        assert_eq!(
            (r.status, r.current),
            (Status::Fail, Some(Value::Num(1024)))
        );
        // No directive: the soft limit it starts with.
        let mut g = f.clone();
        g.nofile = None;
        let r = finding(Kind::Nginx, &g, limits(1024, 1 << 20, None), "n");
        assert_eq!(r.status, Status::Fail);
        assert!(r
            .fix
            .runtime
            .unwrap()
            .contains("worker_rlimit_nofile 20256"));
        // Too small a directive.
        g.nofile = Some(1024);
        let r = finding(Kind::Nginx, &g, limits(1 << 20, 1 << 20, None), "n");
        assert_eq!(
            (r.status, r.current),
            (Status::Fail, Some(Value::Num(1024)))
        );
    }
}
