//! `watch --serve ADDR`: no view; the frames are served over HTTP for Prometheus and agents.
//!
//! - `GET /metrics`: the latest frame in the Prometheus text format (`wstune_watch_*`), the
//!   kernel's counters as counters (cumulative, so `rate()` works across scrapes), the rest as
//!   gauges, and the advice as `wstune_watch_advice_active{id}` with its interval count.
//! - `GET /events`: the advice as JSON lines, one line per check id ([`advice::Log`]): first
//!   and last seen and in how many intervals; a counter that keeps moving stays one line.
//! - `GET /healthz`: 200 while frames are fresh (the last one younger than three intervals),
//!   503 otherwise: a stuck collector is a dead watch.
//!
//! The frame loop stays the one `watch::run` drives (a [`Headless`] view hands each frame to a
//! [`Hub`]); the HTTP side runs on its own thread with a single-threaded runtime. It is a
//! minimal HTTP/1.1 server for scrapers, bounded against a hostile client: a request head of
//! at most [`MAX_HEAD`] bytes, read within [`HEAD_TIMEOUT`], at most [`MAX_CONNECTIONS`]
//! connections at once, one request per connection.

mod exposition;
mod http;
mod hub;

pub use exposition::{events, metrics};
pub use http::{respond, Response, Server, HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_HEAD};
pub use hub::{Hub, Snapshot, FRESH_INTERVALS};

use super::frame::Frame;
use super::{Flow, View};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The view of a headless watch: each frame goes to the hub; a signal ends the loop.
pub struct Headless {
    hub: Arc<Hub>,
}

impl Headless {
    pub fn new(hub: Arc<Hub>) -> Headless {
        Headless { hub }
    }
}

impl View for Headless {
    fn show(&mut self, f: &Frame) -> std::io::Result<Flow> {
        self.hub.put(f);
        Ok(if self.hub.stopping() {
            Flow::Stop
        } else {
            Flow::Go
        })
    }

    fn wait(&mut self, until: Instant) -> std::io::Result<Flow> {
        loop {
            if self.hub.stopping() {
                return Ok(Flow::Stop);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(Flow::Go);
            }
            std::thread::sleep((until - now).min(Duration::from_millis(100)));
        }
    }
}

#[cfg(test)]
mod tests;
