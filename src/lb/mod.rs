//! Load-balancer configurations for WebSocket traffic (HAProxy, nginx), derived from a
//! profile, and the reverse: reading such a configuration back to check it against one.
//!
//! The rules, once: upgraded connections stay open for hours, so the proxy's idle timeout for
//! them must be longer than the server's ping interval (the ping and its pong are the traffic
//! that keeps the tunnel alive); we use interval + heartbeat timeout. Balancing is leastconn
//! (round robin piles long-lived connections on whichever backend was up longest). Each proxied
//! connection costs the proxy two sockets.

//!
//! Beside this file: [`generate()`] (a configuration from a profile), [`read()`] (one read back),
//! the findings of `check --lb-config`, `proxy_fds` (the fd limit a proxy process gets against
//! the one its configuration needs) and [`wording`] (the findings' words).

mod findings;
mod generate;
mod proxy_fds;
mod read;
#[cfg(test)]
mod tests;
pub mod wording;
use crate::profile::Profile;

pub use findings::{findings, findings_with};
pub use generate::{generate, nginx_worker_connections};
pub use proxy_fds::{ProcLimits, FD_MARGIN};
pub use read::{read, Facts};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Haproxy,
    Nginx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sticky {
    /// HAProxy inserts a cookie naming the backend.
    Cookie,
    /// The client's address picks the backend.
    Source,
}

/// What the generated proxy configuration is asked to contain beyond the profile: its
/// backends, where it listens, TLS and stickiness (`wstune lb`'s flags).
#[derive(Debug, Clone)]
pub struct ProxySpec {
    pub backends: Vec<String>,
    /// Where the proxy listens (ADDR:PORT).
    pub bind: String,
    /// PEM certificate for TLS at the proxy (HAProxy: chain and key in one file, or the key
    /// beside it as FILE.key; nginx: with `tls_key`).
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub sticky: Option<Sticky>,
    /// The backends' admin port (`serve --admin`), where HAProxy's health check asks
    /// `GET /readyz`; None: each backend's own port, which answers `/readyz` too.
    pub check_port: Option<u16>,
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
