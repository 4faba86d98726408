//! A server's own figures beside the kernel's (`watch --admin ADDR`): a `wstune serve` admin
//! listener, or any Prometheus endpoint. Read with a plain HTTP/1.0 GET, bounded in time (one
//! second: a stalled endpoint must not stall the view) and in size (8 MiB), parsed as the
//! Prometheus text format, each family summed over its labels.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What the view shows of a server.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ServerFigures {
    pub url: String,
    /// Whether the endpoint is a `wstune serve` (its `ws_` families), or another program.
    pub wstune: bool,
    pub connections: Option<f64>,
    pub messages_in_per_s: Option<f64>,
    pub messages_out_per_s: Option<f64>,
    /// Connections closed for a full send queue, this interval.
    pub send_queue_closes: Option<f64>,
    pub offload_queue_depth: Option<f64>,
    pub budget_used_bytes: Option<f64>,
    pub budget_bytes: Option<f64>,
    /// Handshakes refused this interval (every reason).
    pub handshakes_rejected: Option<f64>,
    /// Another program's standard process figures, where it exports them.
    pub open_fds: Option<f64>,
    pub resident_bytes: Option<f64>,
    /// Why the endpoint could not be read this time (the view keeps running).
    pub error: Option<String>,
}

/// Reads one endpoint, keeping the last counters for rates.
pub struct Scraper {
    pub url: String,
    host: String,
    path: String,
    last: Option<(Instant, BTreeMap<String, f64>)>,
}

impl Scraper {
    /// `ADDR` (host:port, `/metrics` assumed) or `http://host:port/path`.
    pub fn new(spec: &str) -> Result<Scraper, String> {
        let rest = spec.strip_prefix("http://").unwrap_or(spec);
        if spec.starts_with("https://") {
            return Err(format!(
                "--admin {spec}: https is not read; give the plain-HTTP admin address (host:port) \
                 or put the endpoint behind a local plain listener"
            ));
        }
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/metrics"),
        };
        if host
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .is_none()
        {
            return Err(format!(
                "--admin {spec}: not an address with a port; give host:port (e.g. 127.0.0.1:9090) \
                 or http://host:port/metrics"
            ));
        }
        Ok(Scraper {
            url: format!("http://{host}{path}"),
            host: host.to_string(),
            path: path.to_string(),
            last: None,
        })
    }

    pub fn scrape(&mut self) -> ServerFigures {
        let mut f = ServerFigures {
            url: self.url.clone(),
            ..ServerFigures::default()
        };
        let now = Instant::now();
        let body = match self.get() {
            Ok(b) => b,
            Err(e) => {
                f.error = Some(e);
                return f;
            }
        };
        let families = match families(&body) {
            Ok(m) => m,
            Err(e) => {
                f.error = Some(format!("{}: {e}", self.url));
                return f;
            }
        };
        let prev = self.last.take();
        let dt = prev
            .as_ref()
            .map(|(t, _)| now.duration_since(*t).as_secs_f64());
        let get = |n: &str| families.get(n).copied();
        let delta = |n: &str| -> Option<f64> {
            let (_, before) = prev.as_ref()?;
            Some((get(n)? - before.get(n).copied()?).max(0.0))
        };
        let rate = |n: &str| Some(delta(n)? / dt.filter(|d| *d > 0.0)?);
        f.wstune = families.keys().any(|k| k.starts_with("ws_"));
        f.connections = get("ws_connections");
        f.messages_in_per_s = rate("ws_messages_in_total");
        f.messages_out_per_s = rate("ws_messages_out_total");
        f.send_queue_closes = delta("ws_backpressure_closes_total");
        f.offload_queue_depth = get("ws_offload_queue_depth");
        f.budget_used_bytes = get("ws_memory_budget_used_bytes");
        f.budget_bytes = get("ws_memory_budget_bytes");
        f.handshakes_rejected = delta("ws_handshakes_rejected_total");
        f.open_fds = get("process_open_fds");
        f.resident_bytes = get("process_resident_memory_bytes");
        self.last = Some((now, families));
        f
    }

    fn get(&self) -> Result<String, String> {
        let limit = Duration::from_secs(1);
        let addr = self
            .host
            .to_socket_addrs()
            .map_err(|e| format!("{}: cannot resolve {}: {e}", self.url, self.host))?
            .next()
            .ok_or_else(|| format!("{}: {} has no address", self.url, self.host))?;
        let mut s = TcpStream::connect_timeout(&addr, limit)
            .map_err(|e| format!("{}: cannot connect: {e}", self.url))?;
        s.set_read_timeout(Some(limit)).ok();
        s.set_write_timeout(Some(limit)).ok();
        s.write_all(
            format!(
                "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: text/plain\r\n\r\n",
                self.path, self.host
            )
            .as_bytes(),
        )
        .map_err(|e| format!("{}: {e}", self.url))?;
        let mut raw = Vec::new();
        s.take(8 << 20)
            .read_to_end(&mut raw)
            .map_err(|e| format!("{}: no whole answer in 1 s ({e})", self.url))?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| {
            format!(
                "{}: not an HTTP answer; is this the admin address?",
                self.url
            )
        })?;
        let status = head.split_whitespace().nth(1).unwrap_or("");
        if status != "200" {
            return Err(format!(
                "{}: answered HTTP {status}; --admin wants a Prometheus endpoint (a wstune serve \
                 --admin address, or http://host:port/metrics)",
                self.url
            ));
        }
        Ok(body.to_string())
    }
}

/// The Prometheus text format's samples, summed per family (histogram buckets left out: a
/// `_bucket` series counts each observation many times). An error when the text has no sample
/// at all or a line that is not one: the endpoint is something else (an HTML page, a JSON API).
pub fn families(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    let mut samples = 0;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, rest) = match line.find('{') {
            Some(i) => {
                let close = line[i..].find('}').ok_or_else(|| {
                    format!("not the Prometheus text format (\"{}\")", clip(line))
                })?;
                (&line[..i], &line[i + close + 1..])
            }
            None => line
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("not the Prometheus text format (\"{}\")", clip(line)))?,
        };
        let value: f64 = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("not the Prometheus text format (\"{}\")", clip(line)))?;
        if !series
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            || series.is_empty()
        {
            return Err(format!(
                "not the Prometheus text format (\"{}\")",
                clip(line)
            ));
        }
        samples += 1;
        if series.ends_with("_bucket") {
            continue;
        }
        *out.entry(series.to_string()).or_insert(0.0) += value;
    }
    if samples == 0 {
        return Err("no Prometheus samples in the answer".into());
    }
    Ok(out)
}

fn clip(s: &str) -> String {
    s.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_sum_labels_and_leave_buckets_out() {
        let t = "# HELP x\nws_connections 3\nws_closes_sent_total{code=\"1000\"} 2\nws_closes_sent_total{code=\"1008\"} 5\nh_bucket{le=\"1\"} 9\nh_count 4\n";
        let f = families(t).unwrap();
        assert_eq!(f["ws_connections"], 3.0);
        assert_eq!(f["ws_closes_sent_total"], 7.0);
        assert!(!f.contains_key("h_bucket"));
        assert_eq!(f["h_count"], 4.0);
    }

    #[test]
    fn an_html_page_is_not_prometheus() {
        assert!(families("<html><body>hello</body></html>").is_err());
        assert!(families("").is_err());
        assert!(families("{\"a\": 1}").is_err());
    }

    #[test]
    fn an_admin_address_needs_a_port() {
        assert!(Scraper::new("localhost").is_err());
        assert!(Scraper::new("https://x:1/metrics").is_err());
        assert_eq!(
            Scraper::new("127.0.0.1:9").unwrap().url,
            "http://127.0.0.1:9/metrics"
        );
        assert_eq!(Scraper::new("http://h:80/m").unwrap().url, "http://h:80/m");
    }
}
