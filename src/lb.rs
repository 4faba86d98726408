//! Load-balancer configurations for WebSocket traffic (HAProxy, nginx), derived from a
//! profile, and the reverse: reading such a configuration back to check it against one.
//!
//! The rules, once: upgraded connections stay open for hours, so the proxy's idle timeout for
//! them must be longer than the server's ping interval (the ping and its pong are the traffic
//! that keeps the tunnel alive); we use interval + heartbeat timeout. Balancing is leastconn
//! (round robin piles long-lived connections on whichever backend was up longest). Each proxied
//! connection costs the proxy two sockets.

mod limits;
pub mod wording;

use crate::profile::Profile;
use std::fmt::Write;

pub use limits::{ProcLimits, FD_MARGIN};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Haproxy,
    Nginx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sticky {
    /// HAProxy inserts a cookie naming the backend.
    Cookie,
    /// The client's address picks the backend.
    Source,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub backends: Vec<String>,
    /// Where the proxy listens (ADDR:PORT).
    pub bind: String,
    /// PEM certificate for TLS at the proxy (HAProxy: chain and key in one file, or the key
    /// beside it as FILE.key; nginx: with `tls_key`).
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub sticky: Option<Sticky>,
}

/// Seconds an upgraded connection may stay silent at the proxy.
pub fn tunnel_timeout(p: &Profile) -> u64 {
    let hb = &p.server.heartbeat;
    hb.interval_secs + hb.timeout_secs.max(hb.interval_secs)
}

/// The connection cap a generated configuration sets: the profile's connections plus 10 %.
/// A reconnect storm opens new connections while the old ones are still counted (a closing
/// client stays under maxconn until `timeout client-fin`), and health checks and the admin
/// socket take their share; 10 % absorbs a tenth of the clients reconnecting at once without
/// letting the proxy accept far more than the backends were sized for.
pub fn with_headroom(connections: u64) -> u64 {
    connections.saturating_add(connections.div_ceil(10))
}

/// File descriptors HAProxy needs for `maxconn`: two per proxied connection (client and
/// backend) plus its own (HAProxy 2.6 adds about 3 per thread, one per listener, health check
/// and socket; [`FD_MARGIN`] covers 64 threads and a few dozen of the rest).
pub fn haproxy_fds(maxconn: u64) -> u64 {
    maxconn.saturating_mul(2).saturating_add(FD_MARGIN)
}

/// Check `--bind`: ADDR:PORT, where ADDR is an IPv4 address, a bracketed IPv6 address, a host
/// name, `*` or nothing (all addresses; written `*` because nginx refuses `:PORT`). Returns
/// the form written into the configuration.
pub fn parse_bind(s: &str) -> Result<String, String> {
    let bad = |why: &str| {
        Err(format!(
            "--bind '{s}': {why}; give ADDR:PORT, like 0.0.0.0:80, *:443, [::]:80 or lb.example.com:80"
        ))
    };
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((v6, port)) = rest.split_once("]:") else {
            return bad("an IPv6 address needs its port after the bracket ([::1]:80)");
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return bad(&format!("'{v6}' is not an IPv6 address"));
        }
        (s[..v6.len() + 2].to_string(), port)
    } else {
        let Some((host, port)) = s.rsplit_once(':') else {
            return bad("there is no port");
        };
        if host.contains(':') {
            return bad("an IPv6 address goes in brackets ([::]:80)");
        }
        let host = match host {
            "" | "*" => "*".to_string(),
            h if h.chars().all(|c| c.is_ascii_digit() || c == '.') => {
                if h.parse::<std::net::Ipv4Addr>().is_err() {
                    return bad(&format!("'{h}' is not an IPv4 address"));
                }
                h.to_string()
            }
            h => {
                let label_ok = |l: &str| {
                    !l.is_empty()
                        && l.len() <= 63
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                };
                if h.len() > 253 || !h.split('.').all(label_ok) {
                    return bad(&format!("'{h}' is neither an address nor a host name"));
                }
                h.to_string()
            }
        };
        (host, port)
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(format!("{host}:{p}")),
        _ => bad(&format!("'{port}' is not a port 1..=65535")),
    }
}

/// Check a backend list: HOST:PORT each.
pub fn parse_backends(s: &str) -> Result<Vec<String>, String> {
    let v: Vec<String> = s
        .split(',')
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect();
    if v.is_empty() {
        return Err("--backends: give at least one HOST:PORT".into());
    }
    for b in &v {
        let ok = b
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok || b.contains(char::is_whitespace) {
            return Err(format!(
                "--backends: '{b}' is not HOST:PORT (like 10.0.0.5:9001)"
            ));
        }
    }
    Ok(v)
}

pub fn generate(kind: Kind, p: &Profile, o: &Options) -> Result<String, String> {
    match kind {
        Kind::Haproxy => Ok(haproxy(p, o)),
        Kind::Nginx => nginx(p, o),
    }
}

fn haproxy(p: &Profile, o: &Options) -> String {
    let tunnel = tunnel_timeout(p);
    let conns = p.connections;
    let maxconn = with_headroom(conns);
    let fds = haproxy_fds(maxconn);
    let per_backend = maxconn.div_ceil(o.backends.len() as u64) * 2; // room when one is drained
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by wstune lb haproxy --profile {}: WebSocket traffic for {conns} connections\n\
         # over {} backend(s). Heartbeat {} s / {} s -> tunnel timeout {tunnel} s.\n\
         # Drain a backend without cutting its connections:\n\
         #   echo 'set server wstune/s1 state drain' | socat stdio /run/haproxy/admin.sock\n\
         # (new connections go elsewhere; open ones stay until they close).\n\
         # maxconn {maxconn} = {conns} + 10 % for reconnect storms (a closing client still counts\n\
         # until timeout client-fin), health checks and the admin socket.\n\
         # File descriptors: this configuration needs an fd limit of at least {fds}\n\
         # (2 per connection, client and backend side, + {FD_MARGIN} for HAProxy's own). HAProxy sets\n\
         # its limit itself from maxconn (ulimit-n is left unset so it stays computed) and refuses\n\
         # to start when the hard limit is lower (\"Cannot raise FD limit\"): LimitNOFILE={fds}\n\
         # in its systemd unit, or `ulimit -Hn {fds}`; `wstune check --lb-config` compares.",
        p.name,
        o.backends.len(),
        p.server.heartbeat.interval_secs,
        p.server.heartbeat.timeout_secs
    );
    let _ = writeln!(
        s,
        "global\n    maxconn {maxconn}\n    stats socket /run/haproxy/admin.sock mode 600 level admin\n"
    );
    let _ = writeln!(
        s,
        "defaults\n    mode http\n    option forwardfor\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n    timeout http-request 10s\n    # A backend that refuses a new connection: try another one.\n    option redispatch\n    retries 3\n    # Upgraded connections: longer than the server's ping interval.\n    timeout tunnel {tunnel}s\n    timeout client-fin 30s\n"
    );
    let ssl = match &o.tls_cert {
        Some(c) => format!(" ssl crt {c} alpn http/1.1"),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "frontend websocket\n    bind {}{ssl}\n    maxconn {maxconn}\n    default_backend wstune\n",
        o.bind
    );
    let _ = writeln!(
        s,
        "backend wstune\n    # Long-lived connections: send each new one to the least loaded backend.\n    balance leastconn\n    option httpchk GET /healthz\n    http-check expect status 200"
    );
    match o.sticky {
        Some(Sticky::Cookie) => {
            let _ = writeln!(s, "    cookie WSTUNE_BACKEND insert indirect nocache");
        }
        Some(Sticky::Source) => {
            let _ = writeln!(
                s,
                "    stick-table type ip size 1m expire {tunnel}s\n    stick on src"
            );
        }
        None => {}
    }
    for (i, b) in o.backends.iter().enumerate() {
        let cookie = if o.sticky == Some(Sticky::Cookie) {
            format!(" cookie s{}", i + 1)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "    server s{} {b} check inter 2s fall 3 rise 2 maxconn {per_backend}{cookie}",
            i + 1
        );
    }
    s
}

/// nginx `worker_connections` for a profile: two per connection (with headroom) + 1024.
pub fn nginx_worker_connections(connections: u64) -> u64 {
    with_headroom(connections)
        .saturating_mul(2)
        .saturating_add(1024)
}

fn nginx(p: &Profile, o: &Options) -> Result<String, String> {
    if o.sticky == Some(Sticky::Cookie) {
        return Err(
            "--sticky cookie: open-source nginx cannot insert an affinity cookie (that is \
                    NGINX Plus); use --sticky source (ip_hash) or `wstune lb haproxy`"
                .into(),
        );
    }
    if o.tls_cert.is_some() != o.tls_key.is_some() {
        return Err("nginx needs both --tls-cert and --tls-key".into());
    }
    let tunnel = tunnel_timeout(p);
    let conns = p.connections;
    // Two per proxied connection (worker_connections counts the backend side too), for the
    // same 10 % headroom as HAProxy's maxconn, plus 1024 for the rest (a worker's own sockets).
    let worker_conns = nginx_worker_connections(conns);
    let rlimit = worker_conns + 1024;
    let backlog = p.linux.somaxconn;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by wstune lb nginx --profile {}: WebSocket traffic for {conns} connections\n\
         # over {} backend(s). Heartbeat {} s / {} s -> proxy_read_timeout {tunnel} s.\n\
         # Drain a backend: mark it `down` and `nginx -s reload`; old workers keep serving their\n\
         # open connections until they close (bounded by worker_shutdown_timeout).\n\
         # Open-source nginx has no active health checks: a backend that fails max_fails times is\n\
         # skipped for fail_timeout, and /healthz is for your monitoring.\n\
         # worker_rlimit_nofile {rlimit}: a worker needs a descriptor per connection it counts\n\
         # (client and backend side) plus its logs and listeners; without it workers keep the\n\
         # limit they were started with (1024 under systemd). listen backlog={backlog} matches the\n\
         # profile's net.core.somaxconn (nginx's default is 511, whatever somaxconn allows).",
        p.name,
        o.backends.len(),
        p.server.heartbeat.interval_secs,
        p.server.heartbeat.timeout_secs
    );
    let _ = writeln!(
        s,
        "worker_processes auto;\nworker_rlimit_nofile {rlimit};\nworker_shutdown_timeout {tunnel}s;\n\nevents {{\n    worker_connections {worker_conns};\n}}\n"
    );
    let _ = writeln!(
        s,
        "http {{\n    map $http_upgrade $connection_upgrade {{\n        default upgrade;\n        ''      close;\n    }}\n\n    upstream wstune {{"
    );
    match o.sticky {
        Some(Sticky::Source) => {
            let _ = writeln!(s, "        ip_hash;");
        }
        _ => {
            let _ = writeln!(s, "        least_conn;");
        }
    }
    for b in &o.backends {
        let _ = writeln!(s, "        server {b} max_fails=3 fail_timeout=10s;");
    }
    let _ = writeln!(s, "    }}\n\n    server {{");
    match (&o.tls_cert, &o.tls_key) {
        (Some(c), Some(k)) => {
            let _ = writeln!(
                s,
                "        listen {} ssl backlog={backlog};\n        ssl_certificate {c};\n        ssl_certificate_key {k};",
                o.bind
            );
        }
        _ => {
            let _ = writeln!(s, "        listen {} backlog={backlog};", o.bind);
        }
    }
    let _ = writeln!(
        s,
        "        location / {{\n            proxy_pass http://wstune;\n            proxy_http_version 1.1;\n            proxy_set_header Upgrade $http_upgrade;\n            proxy_set_header Connection $connection_upgrade;\n            proxy_set_header Host $host;\n            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n            proxy_connect_timeout 5s;\n            # Upgraded connections: longer than the server's ping interval.\n            proxy_read_timeout {tunnel}s;\n            proxy_send_timeout {tunnel}s;\n            proxy_buffering off;\n        }}\n    }}\n}}"
    );
    Ok(s)
}

/// What a proxy configuration says that matters to WebSocket traffic.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Facts {
    pub kind: Option<Kind>,
    /// Seconds an upgraded connection may stay idle at the proxy.
    pub idle_timeout_secs: Option<u64>,
    /// Concurrent client connections the proxy accepts (nginx: bounded by the workers' fd
    /// limit where worker_rlimit_nofile sets one).
    pub max_connections: Option<u64>,
    /// HAProxy: the global section's maxconn, from which HAProxy sizes its fd limit.
    pub global_maxconn: Option<u64>,
    /// The fd limit the file itself sets: HAProxy `ulimit-n`, nginx `worker_rlimit_nofile`.
    pub nofile: Option<u64>,
    /// nginx: worker_connections per worker (nginx's default is 512).
    pub worker_connections: Option<u64>,
    /// nginx: each `listen` address and its `backlog=` (None where it has none: 511).
    pub listens: Vec<(String, Option<u64>)>,
}

/// HAProxy and nginx time values: plain numbers (HAProxy: ms; nginx: s) or with a unit.
fn secs(v: &str, bare_ms: bool) -> Option<u64> {
    let v = v.trim().trim_end_matches(';');
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "" if bare_ms => n / 1000,
        "" | "s" => n,
        "ms" => n / 1000,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return None,
    })
}

/// Read the facts from a HAProxy or nginx configuration (comments ignored; the first value of
/// each directive wins, as the proxies' defaults sections would need more care than this).
pub fn read(text: &str) -> Facts {
    let uncommented: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    // nginx statements end with ';' or open/close a block; HAProxy's are lines.
    let joined = uncommented.join("\n");
    let statements: Vec<&str> = joined
        .split([';', '{', '}'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let nginx = statements
        .iter()
        .any(|l| l.starts_with("proxy_pass") || l.starts_with("upstream"));
    let mut f = Facts::default();
    if nginx {
        f.kind = Some(Kind::Nginx);
        // nginx's default proxy_read_timeout is 60 s.
        f.idle_timeout_secs = Some(60);
        let mut workers = None;
        for l in &statements {
            let mut w = l.split_whitespace();
            match (w.next(), w.next()) {
                (Some("proxy_read_timeout"), Some(v)) => f.idle_timeout_secs = secs(v, false),
                (Some("worker_connections"), Some(v)) => f.worker_connections = v.parse().ok(),
                (Some("worker_rlimit_nofile"), Some(v)) => f.nofile = v.parse().ok(),
                (Some("worker_processes"), Some(v)) => {
                    workers = match v {
                        "auto" => std::thread::available_parallelism()
                            .ok()
                            .map(|n| n.get() as u64),
                        n => n.parse().ok(),
                    }
                }
                (Some("listen"), Some(addr)) => {
                    let backlog = l
                        .split_whitespace()
                        .find_map(|p| p.strip_prefix("backlog="))
                        .and_then(|v| v.parse().ok());
                    f.listens.push((addr.to_string(), backlog));
                }
                _ => {}
            }
        }
        // Each proxied connection holds two of a worker's connections, and a worker cannot hold
        // more connections than its fd limit lets it open.
        let per_worker = match (f.worker_connections, f.nofile) {
            (Some(c), Some(n)) => Some(c.min(n)),
            (c, _) => c,
        };
        f.max_connections = per_worker.map(|c| c.saturating_mul(workers.unwrap_or(1)) / 2);
    } else if uncommented
        .iter()
        .any(|l| l.starts_with("backend") || l.starts_with("frontend"))
    {
        f.kind = Some(Kind::Haproxy);
        let (mut tunnel, mut client) = (None, None);
        let mut section = "";
        for l in &uncommented {
            let w: Vec<&str> = l.split_whitespace().collect();
            if let Some(first) = w.first().copied().filter(|s| {
                [
                    "global",
                    "defaults",
                    "frontend",
                    "backend",
                    "listen",
                    "peers",
                    "resolvers",
                    "userlist",
                    "program",
                    "cache",
                    "ring",
                    "mailers",
                ]
                .contains(s)
            }) {
                section = first;
            }
            match w.as_slice() {
                ["timeout", "tunnel", v, ..] => tunnel = tunnel.or(secs(v, true)),
                ["timeout", "client", v, ..] => client = client.or(secs(v, true)),
                ["maxconn", v, ..] => {
                    let v = v.parse::<u64>().ok();
                    if section == "global" {
                        f.global_maxconn = f.global_maxconn.or(v);
                    }
                    f.max_connections = match (f.max_connections, v) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                ["ulimit-n", v, ..] if section == "global" => f.nofile = v.parse().ok(),
                _ => {}
            }
        }
        // Without `timeout tunnel`, an upgraded connection falls under `timeout client`.
        f.idle_timeout_secs = tunnel.or(client);
    }
    f
}

/// `check --lb-config`: the proxy's idle timeout against the server's heartbeat, its
/// connection cap and listen backlog against the profile, and its fd limit against what the
/// running proxy (`pid`, else the one found, else this shell) gets. Err: `pid` unreadable.
pub fn findings(
    path: &std::path::Path,
    text: &str,
    p: &Profile,
    pid: Option<u32>,
) -> Result<Vec<crate::catalog::eval::Finding>, String> {
    let limits = match (read(text).kind, pid) {
        (_, Some(pid)) => Ok(limits::of_pid(pid)?),
        (Some(kind), None) => limits::detect(kind),
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
    out.push(limits::finding(kind, &f, limits, &file));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        crate::profile::load("10k").unwrap().profile
    }

    fn opts() -> Options {
        Options {
            backends: vec!["10.0.0.1:9001".into(), "10.0.0.2:9001".into()],
            bind: "0.0.0.0:8080".into(),
            tls_cert: None,
            tls_key: None,
            sticky: None,
        }
    }

    #[test]
    fn absurd_nginx_numbers_do_not_overflow() {
        let f = read(
            "worker_processes 2;\nevents {\n    worker_connections 18446744073709551615;\n}\nhttp { server { listen 80; location / { proxy_pass http://b; } } }\n",
        );
        assert_eq!(f.max_connections, Some(u64::MAX / 2));
    }

    #[test]
    fn generated_configs_read_back_to_the_profile() {
        let p = profile();
        for kind in [Kind::Haproxy, Kind::Nginx] {
            let text = generate(kind, &p, &opts()).unwrap();
            let f = read(&text);
            assert_eq!(f.kind, Some(kind), "{text}");
            assert_eq!(f.idle_timeout_secs, Some(30 + 90), "{text}");
            assert!(
                f.max_connections.unwrap() >= p.connections,
                "{kind:?}: {f:?}"
            );
        }
        let h = generate(Kind::Haproxy, &p, &opts()).unwrap();
        assert!(h.contains("balance leastconn") && h.contains("option httpchk GET /healthz"));
        let n = generate(Kind::Nginx, &p, &opts()).unwrap();
        assert!(n.contains("least_conn;") && n.contains("proxy_set_header Upgrade $http_upgrade;"));
    }

    #[test]
    fn sticky_and_tls_options() {
        let p = profile();
        let mut o = opts();
        o.sticky = Some(Sticky::Cookie);
        let h = generate(Kind::Haproxy, &p, &o).unwrap();
        assert!(h.contains("cookie WSTUNE_BACKEND insert") && h.contains(" cookie s2"));
        assert!(generate(Kind::Nginx, &p, &o)
            .unwrap_err()
            .contains("NGINX Plus"));
        o.sticky = Some(Sticky::Source);
        assert!(generate(Kind::Nginx, &p, &o).unwrap().contains("ip_hash;"));
        assert!(generate(Kind::Haproxy, &p, &o)
            .unwrap()
            .contains("stick on src"));
        o.tls_cert = Some("/etc/ssl/ws.pem".into());
        assert!(generate(Kind::Haproxy, &p, &o)
            .unwrap()
            .contains("ssl crt /etc/ssl/ws.pem"));
        assert!(generate(Kind::Nginx, &p, &o)
            .unwrap_err()
            .contains("--tls-key"));
    }

    #[test]
    fn reading_hand_written_configs() {
        let f = read("defaults\n  timeout client 50000\nfrontend f\n  maxconn 2000\nbackend b\n");
        assert_eq!(f.idle_timeout_secs, Some(50));
        assert_eq!(f.max_connections, Some(2000));
        let f = read("events { worker_connections 1024; }\nhttp { upstream u { server a:1; } server { location / { proxy_pass http://u; } } }\nworker_processes 2;");
        assert_eq!(f.idle_timeout_secs, Some(60), "nginx's default");
        assert_eq!(
            f.max_connections,
            Some(1024),
            "2 workers x 1024 / 2 sockets each"
        );
        assert_eq!(read("nothing here").kind, None);
        assert_eq!(secs("2m", true), Some(120));
        assert_eq!(secs("1h", false), Some(3600));
    }

    #[test]
    fn headroom_backlog_and_fd_limits_in_what_is_generated() {
        let p = profile();
        let h = generate(Kind::Haproxy, &p, &opts()).unwrap();
        // 10,000 + 10 %: global and frontend; the fd limit it needs is said.
        assert_eq!(h.matches("\n    maxconn 11000\n").count(), 2, "{h}");
        assert!(h.contains("fd limit of at least 22256"), "{h}");
        let f = read(&h);
        assert_eq!((f.global_maxconn, f.nofile), (Some(11000), None));
        let n = generate(Kind::Nginx, &p, &opts()).unwrap();
        assert!(n.contains("listen 0.0.0.0:8080 backlog=4096;"), "{n}");
        assert!(
            n.contains("worker_connections 23024;") && n.contains("worker_rlimit_nofile 24048;")
        );
        let f = read(&n);
        assert_eq!(f.listens, vec![("0.0.0.0:8080".to_string(), Some(4096))]);
        let mut o = opts();
        o.tls_cert = Some("c.pem".into());
        o.tls_key = Some("k.pem".into());
        let n = generate(Kind::Nginx, &p, &o).unwrap();
        assert!(n.contains("listen 0.0.0.0:8080 ssl backlog=4096;"), "{n}");
        // Both pass their own checks (the fd limit given, so this host's does not matter).
        let big = || {
            Ok(ProcLimits {
                soft: 1 << 20,
                hard: 1 << 20,
                raise_to: None,
                source: "t".into(),
            })
        };
        for text in [h, n] {
            for r in findings_with(std::path::Path::new("x"), &text, &p, big()) {
                assert_eq!(r.status, crate::catalog::eval::Status::Pass, "{r:?}");
            }
        }
    }

    #[test]
    fn nginx_cap_counts_the_workers_fd_limit_and_its_backlog() {
        use crate::catalog::eval::Status;
        let p = profile();
        let text = "worker_processes 1;\nworker_rlimit_nofile 1024;\nevents { worker_connections 30000; }\nhttp { upstream u { server a:1; } server { listen 80; listen [::]:80 backlog=8192; location / { proxy_pass http://u; proxy_read_timeout 120s; } } }";
        let f = read(text);
        assert_eq!(f.max_connections, Some(512), "1024 fds / 2 per connection");
        let lim = Ok(ProcLimits {
            soft: 1 << 20,
            hard: 1 << 20,
            raise_to: None,
            source: "t".into(),
        });
        let r = findings_with(std::path::Path::new("n.conf"), text, &p, lim);
        let by = |id: &str| r.iter().find(|f| f.id == id).unwrap();
        assert_eq!(by("lb.max_connections").status, Status::Fail);
        assert_eq!(by("lb.fd_limit").status, Status::Fail);
        let b = by("lb.backlog");
        assert_eq!(b.status, Status::Fail);
        assert!(b.why.contains("80 (no backlog=, so 511)"), "{}", b.why);
        assert!(!b.why.contains("[::]:80 ("), "8192 >= 4096: {}", b.why);
        // A cap at the connections but without headroom is a warning.
        let t = "global\n maxconn 10000\ndefaults\n timeout tunnel 120s\nfrontend f\n bind :80\nbackend b\n";
        let r = findings_with(std::path::Path::new("h"), t, &p, Err("x".into()));
        assert_eq!(r[1].id, "lb.max_connections");
        assert_eq!(r[1].status, Status::Warn);
        assert!(r[1].fix.runtime.as_ref().unwrap().contains("maxconn 11000"));
    }

    #[test]
    fn bind_addresses() {
        for (given, written) in [
            ("0.0.0.0:80", "0.0.0.0:80"),
            ("*:443", "*:443"),
            (":8080", "*:8080"),
            ("[::]:80", "[::]:80"),
            ("[::1]:9000", "[::1]:9000"),
            ("lb.example.com:80", "lb.example.com:80"),
        ] {
            assert_eq!(parse_bind(given).unwrap(), written);
        }
        for (bad, why) in [
            ("nonsense", "no port"),
            ("1.2.3:80", "not an IPv4"),
            ("0.0.0.0:0", "not a port"),
            ("0.0.0.0:65536", "not a port"),
            ("::1:80", "in brackets"),
            ("[::g]:80", "not an IPv6"),
            ("[::1]80", "after the bracket"),
            ("a b:80", "neither an address"),
            ("-x:80", "neither an address"),
            ("0.0.0.0:", "not a port"),
        ] {
            let e = parse_bind(bad).unwrap_err();
            assert!(e.contains(why) && e.contains("--bind"), "{bad}: {e}");
        }
    }

    #[test]
    fn backend_lists() {
        assert_eq!(parse_backends("a:1, b:2").unwrap().len(), 2);
        assert!(parse_backends("").is_err());
        assert!(parse_backends("a")
            .unwrap_err()
            .contains("'a' is not HOST:PORT"));
        assert!(parse_backends("a:0").is_err());
    }
}
