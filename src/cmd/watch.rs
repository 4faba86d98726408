//! `wstune watch`: the check pipeline once (for the advice's words, filled with the profile's
//! targets), then a frame every interval to the chosen view, the recording and the headless
//! endpoint. Read-only: nothing on the host changes.

use crate::engine::check::{self, HostInputs};
use crate::outcome::Outcome;
use crate::watch::advice::Words;
use crate::watch::record::{Header, Recorder, RECORDING};
use crate::watch::sample::Scope;
use crate::watch::server::Scraper;
use crate::watch::view::{json::Json, plain::Plain, tui::Tui};
use crate::watch::{self, View, Watch};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
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
            scope: scope_words,
        };
        views.push(Box::new(Recorder::create(path, &header).with_context(
            || format!("--record {}: cannot write the recording", path.display()),
        )?));
    }
    match r.view {
        ViewKind::Screen => views.push(Box::new(Tui)),
        ViewKind::Plain => views.push(Box::new(Plain::new(std::io::stdout()))),
        ViewKind::Json => views.push(Box::new(Json::new(std::io::stdout()))),
        ViewKind::Headless => anyhow::bail!("watch --serve is not built yet"),
    }
    let mut refs: Vec<&mut dyn View> = views
        .iter_mut()
        .map(|v| v.as_mut() as &mut dyn View)
        .collect();
    match watch::run(&mut w, backend.as_ref(), r.interval, r.count, &mut refs) {
        Ok(()) => Ok(Outcome::Ok),
        // A reader that went away (`wstune watch --plain | head`) ends the watch quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Outcome::Ok),
        Err(e) => Err(e).context("watch"),
    }
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
