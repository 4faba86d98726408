//! The latest frame and the advice over time, shared by the frame loop and the HTTP side.

use crate::watch::advice::{Event, Log};
use crate::watch::frame::Frame;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Frames older than this many intervals make the watch stale (/healthz 503).
pub const FRESH_INTERVALS: u32 = 3;

/// The latest frame and the advice over time, shared by the frame loop and the HTTP side.
pub struct Hub {
    state: Mutex<State>,
    stop: AtomicBool,
    interval: Duration,
    started: Instant,
}

#[derive(Default)]
struct State {
    frame: Option<Arc<Frame>>,
    at: Option<Instant>,
    frames: u64,
    log: Log,
}

/// What one response is rendered from, taken under the lock and rendered outside it.
pub struct Snapshot {
    pub frame: Option<Arc<Frame>>,
    /// Seconds since the last frame (or since the start, before the first).
    pub age_s: f64,
    pub fresh: bool,
    pub frames: u64,
    pub interval_s: f64,
    pub events: Vec<Event>,
}

impl Hub {
    pub fn new(interval: Duration) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            interval,
            started: Instant::now(),
        })
    }

    pub(super) fn put(&self, f: &Frame) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.log.add(f);
        s.frame = Some(Arc::new(f.clone()));
        s.at = Some(Instant::now());
        s.frames += 1;
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let age = s.at.unwrap_or(self.started).elapsed();
        Snapshot {
            frame: s.frame.clone(),
            age_s: age.as_secs_f64(),
            fresh: age < self.interval * FRESH_INTERVALS,
            frames: s.frames,
            interval_s: self.interval.as_secs_f64(),
            events: s.log.events.clone(),
        }
    }

    /// Ask the frame loop to end (a signal); it stops within a tenth of a second.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn frames(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).frames
    }
}
