//! A proxy configuration read back: what it says that matters to WebSocket traffic.

use super::Kind;

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
pub(super) fn secs(v: &str, bare_ms: bool) -> Option<u64> {
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
