//! `wstune watch`: the host's connection counters live, per listener, with the catalog's
//! advice beside each one that moves. One collector ([`sample::Collector`]) reads everything
//! once per interval into a [`sample::Sample`]; two samples make a [`frame::Frame`], the one
//! typed shape that every consumer renders: the full-screen view, the ticker line, JSON lines,
//! the recording (`--record`), the headless endpoint (`--serve`) and the self-test's timeline.
//! A watch changes nothing on the host.

pub mod advice;
pub mod frame;
pub mod record;
pub mod sample;
pub mod serve;
pub mod server;
pub mod timeline;
pub mod view;

use crate::host::Backend;
use advice::Words;
use frame::Frame;
use sample::{Collector, Sample, Scope};
use server::Scraper;
use std::time::{Duration, Instant};

/// Reads frames: the collector, the server's scraper, and the sample before.
pub struct Watch {
    collector: Collector,
    scraper: Option<Scraper>,
    words: Words,
    prev: Option<Sample>,
    started: Instant,
}

impl Watch {
    pub fn new(scope: Scope, scraper: Option<Scraper>, words: Words) -> Watch {
        Watch {
            collector: Collector::new(scope),
            scraper,
            words,
            prev: None,
            started: Instant::now(),
        }
    }

    /// Read the host now and make the frame since the last reading.
    pub fn frame(&mut self, b: &dyn Backend) -> Frame {
        let cur = self.collector.sample(b);
        let server = self.scraper.as_mut().map(Scraper::scrape);
        let mut f = Frame::between(self.prev.as_ref(), &cur, self.started, server);
        f.advice = advice::for_frame(&f, &self.words);
        self.prev = Some(cur);
        f
    }
}

/// What a view says after a frame, or while it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Go,
    Stop,
}

/// A consumer of frames.
pub trait View {
    fn show(&mut self, f: &Frame) -> std::io::Result<Flow>;
    /// Wait until `until`, or less if the user asks to stop (the full-screen view reads keys
    /// meanwhile).
    fn wait(&mut self, until: Instant) -> std::io::Result<Flow> {
        let now = Instant::now();
        if until > now {
            std::thread::sleep(until - now);
        }
        Ok(Flow::Go)
    }
    /// Called once at the end (the full-screen view gives the terminal back).
    fn end(&mut self) {}
}

/// Run the watch: a frame every `interval` to every view, `count` frames (None: until a view
/// stops or the process is interrupted). The first reading makes no frame of its own (rates
/// need two), so the first frame comes after one interval.
pub fn run(
    watch: &mut Watch,
    b: &dyn Backend,
    interval: Duration,
    count: Option<u64>,
    views: &mut [&mut dyn View],
) -> std::io::Result<()> {
    let first = watch.collector.sample(b);
    if let Some(s) = watch.scraper.as_mut() {
        s.scrape();
    }
    watch.prev = Some(first);
    let mut next = Instant::now() + interval;
    let mut shown = 0u64;
    'outer: loop {
        for v in views.iter_mut() {
            if v.wait(next)? == Flow::Stop {
                break 'outer;
            }
        }
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        // Keep the cadence; after a stall (a suspended terminal) start again from now.
        next += interval;
        if next < Instant::now() {
            next = Instant::now() + interval;
        }
        let f = watch.frame(b);
        for v in views.iter_mut() {
            if v.show(&f)? == Flow::Stop {
                break 'outer;
            }
        }
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            break;
        }
    }
    for v in views.iter_mut() {
        v.end();
    }
    Ok(())
}
