//! `wstune watch`: the check pipeline once (for the advice's words, filled with the profile's
//! targets), then a frame every interval to the chosen view, the recording and the headless
//! endpoint. Read-only: nothing on the host changes.

use crate::engine::check::{self, HostInputs};
use crate::outcome::Outcome;
use crate::watch::advice::Words;
use crate::watch::record::{Header, Recorder, RECORDING};
use crate::watch::sample::Scope;
use crate::watch::serve::{Headless, Hub, Server};
use crate::watch::server::Scraper;
use crate::watch::view::{json::Json, plain::Plain, tui};
use crate::watch::{self, View, Watch};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    /// The full-screen view (a terminal).
    Screen,
    /// One ticker line per interval.
    Plain,
    /// One JSON frame per line.
    Json,
    /// No view: `--serve`.
    Headless,
}

pub struct Request {
    pub host: HostInputs,
    pub scope: Scope,
    pub scraper: Option<Scraper>,
    pub interval: Duration,
    pub count: Option<u64>,
    pub view: ViewKind,
    pub record: Option<PathBuf>,
    pub serve: Option<SocketAddr>,
}

pub fn run(r: Request) -> Result<Outcome> {
    // Listen before anything else: a bad or busy address fails at once, and the endpoint
    // answers (healthz) while the check pipeline below prepares the advice's words.
    let serving = match (r.view, r.serve) {
        (ViewKind::Headless, Some(addr)) => Some(start_serving(addr, r.interval)?),
        _ => None,
    };
    let HostInputs { inputs, backend } = &r.host;
    let report = check::report(inputs, backend.as_ref(), None);
    let words = Words::from_findings(&report.results);
    let scope_words = describe_scope(&r);
    let mut w = Watch::new(r.scope.clone(), r.scraper, words);
    let mut views: Vec<Box<dyn View>> = Vec::new();
    if let Some(path) = &r.record {
        let header = Header {
            recording: RECORDING.to_string(),
            frames: crate::watch::frame::SCHEMA.to_string(),
            started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            host: backend.describe().hostname.clone(),
            interval_s: r.interval.as_secs_f64(),
            wstune: env!("CARGO_PKG_VERSION").to_string(),
            scope: scope_words.clone(),
        };
        views.push(Box::new(Recorder::create(path, &header).with_context(
            || format!("--record {}: cannot write the recording", path.display()),
        )?));
    }
    match r.view {
        // First in line: the run waits on each view in turn, and the screen's wait is the
        // one that reads keys, so a quit is answered at once, not after the recorder's sleep.
        ViewKind::Screen => views.insert(
            0,
            Box::new(
                tui::Tui::new(tui::Head {
                    host: backend.describe().hostname.clone(),
                    scope: scope_words.clone(),
                    interval_s: r.interval.as_secs_f64(),
                })
                .context("cannot take the terminal for the full-screen view (--plain prints lines instead)")?,
            ),
        ),
        ViewKind::Plain => views.push(Box::new(Plain::new(std::io::stdout()))),
        ViewKind::Json => views.push(Box::new(Json::new(std::io::stdout()))),
        ViewKind::Headless => match &serving {
            Some((_, hub)) => views.push(Box::new(Headless::new(hub.clone()))),
            None => anyhow::bail!("a watch without a view needs --serve ADDR"),
        },
    }
    let mut refs: Vec<&mut dyn View> = views
        .iter_mut()
        .map(|v| v.as_mut() as &mut dyn View)
        .collect();
    let ran = watch::run(&mut w, backend.as_ref(), r.interval, r.count, &mut refs);
    drop(refs);
    drop(views);
    if let Some((server, hub)) = serving {
        server.stop();
        let why = if hub.stopping() {
            "stopped by a signal"
        } else {
            "done"
        };
        eprintln!("wstune watch: {why} after {} frames", hub.frames());
    }
    match ran {
        Ok(()) => Ok(Outcome::Ok),
        // A reader that went away (`wstune watch --plain | head`) ends the watch quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Outcome::Ok),
        Err(e) => Err(e).context("watch"),
    }
}

/// `--serve ADDR`: bind, start the HTTP side, and say where it serves (the bound address, so
/// `--serve 127.0.0.1:0` names the port the kernel chose).
fn start_serving(addr: SocketAddr, interval: Duration) -> Result<(Server, Arc<Hub>)> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        let fix = match e.kind() {
            std::io::ErrorKind::AddrInUse => "something else listens there: pick a free port",
            std::io::ErrorKind::AddrNotAvailable => {
                "no interface of this host has that address: give one it has (127.0.0.1 for this host only)"
            }
            std::io::ErrorKind::PermissionDenied => {
                "a port below 1024 needs privileges: pick a port above it (the default is 9977)"
            }
            _ => "give host:port of this host, e.g. 127.0.0.1:9977",
        };
        anyhow::anyhow!("--serve {addr}: cannot listen there ({e}); {fix}")
    })?;
    let hub = Hub::new(interval);
    let server = Server::start(listener, hub.clone())
        .with_context(|| format!("--serve {addr}: cannot start serving"))?;
    let a = server.addr;
    println!(
        "wstune watch: serving http://{a}/metrics, http://{a}/events and http://{a}/healthz (a frame every {} s; SIGTERM or SIGINT stops)",
        interval.as_secs_f64()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    Ok((server, hub))
}

fn describe_scope(r: &Request) -> String {
    let mut parts = Vec::new();
    if !r.scope.ports.is_empty() {
        let p: Vec<String> = r.scope.ports.iter().map(|p| p.to_string()).collect();
        parts.push(format!("ports {}", p.join(",")));
    }
    if let Some(pid) = r.scope.pid {
        parts.push(format!("pid {pid}"));
    }
    if let Some(s) = &r.scraper {
        parts.push(format!("admin {}", s.url));
    }
    if parts.is_empty() {
        "every listener".into()
    } else {
        parts.join(", ")
    }
}
