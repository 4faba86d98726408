//! A client for a server's admin endpoint (`/metrics`, `/healthz`, the `/api/` routes an API key
//! opens): the calls the serving tests make, and the metric asserts that follow them, with a
//! panic that names the series and shows what the server did export.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The admin endpoint on 127.0.0.1:`port` (`Served::admin_api`, or a port a test chose).
#[derive(Clone, Copy, Debug)]
pub struct Admin {
    pub port: u16,
    /// The API key [`Admin::api`] sends (`Authorization: Bearer`); none until `with_key`.
    key: Option<&'static str>,
}

impl Admin {
    pub fn on(port: u16) -> Admin {
        Admin { port, key: None }
    }

    /// The same endpoint, its `/api/` calls made with `key`.
    pub fn with_key(self, key: &'static str) -> Admin {
        Admin {
            key: Some(key),
            ..self
        }
    }

    /// `METHOD path` with the API key and no body: the whole response. A GET is HTTP/1.0, so
    /// its body ends at the close and is never chunked; a POST is HTTP/1.1, as a client's is.
    pub fn api(&self, method: &str, path: &str) -> String {
        let key = self.key.expect("an API call needs Admin::with_key");
        let req = if method == "GET" {
            format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n")
        } else {
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n")
        };
        super::http::http(self.port, req)
    }

    /// The whole response to `GET path` (head and body).
    pub fn get(&self, path: &str) -> String {
        super::http::get(self.port, path)
    }

    /// The /metrics text, as Prometheus would scrape it. One connection per scrape, read to
    /// its end, so a value is never older than the call.
    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    }

    /// One series' value; `name` is the whole series (with its labels, if any) up to the
    /// value. Panics, with the scrape, when the server does not export it.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        series(&text, name).unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }

    /// Asserts that the series `name` satisfies `ok` now: its value. The panic names the
    /// series and its value.
    pub fn assert_metric(&self, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let v = self.metric(name);
        assert!(ok(v), "{name} is {v}");
        v
    }

    /// Asserts that each `(series, value)` holds in one scrape: a panic lists every series that
    /// differs, not only the first, with the scrape.
    pub fn assert_metrics(&self, expected: &[(&str, f64)]) {
        let text = self.metrics();
        let wrong: Vec<String> = expected
            .iter()
            .filter_map(|&(name, want)| match series(&text, name) {
                Some(v) if v == want => None,
                got => Some(format!("{name} is {got:?}, not {want}")),
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "{}
in:
{text}",
            wrong.join("\n")
        );
    }

    /// Waits (bounded) until the series `name` satisfies `ok`: its value then. The panic names
    /// the series and its last value.
    pub fn wait_metric(&self, name: &str, timeout: Duration, ok: impl Fn(f64) -> bool) -> f64 {
        let mut last = f64::NAN;
        super::wait::poll(timeout, || {
            last = self.metric(name);
            ok(last).then_some(last)
        })
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {name} (still {last})"))
    }
}

/// The value of the series `name` in a /metrics text.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
