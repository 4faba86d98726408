//! The host's connection counters during each scenario: the same frames `wstune watch`
//! reads (listeners' accept queues, the counters that predict failure, the marks, with the
//! catalog's advice), one a second on a thread of its own, never on the generator's path,
//! folded into the scenario's `host_timeline` (see watch::timeline). A run that overflowed
//! an accept queue says so beside its latencies, with the check that explains it.

use crate::watch::advice::Words;
use crate::watch::frame::Frame;
use crate::watch::sample::Scope;
use crate::watch::timeline::Timeline;
use crate::watch::Watch;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to watch: the catalog's words for the advice (the host check's, filled with the
/// profile's targets; empty: the advice names its check id only) and the server's port.
#[derive(Debug, Clone, Default)]
pub struct HostWatch {
    pub words: Arc<Words>,
    /// Only these listeners (the target's port); empty: every listener.
    pub ports: Vec<u16>,
    /// The server runs on another host: what is read here is the generator's host (its
    /// ports, TIME_WAIT and drops), not the server's accept queue.
    pub remote: bool,
}

/// A reading a second, as `watch` does by default.
const EVERY: Duration = Duration::from_secs(1);
/// At the end, the part of a second since the last reading is read too when it is at least
/// this long (a storm over in half a second still gets its frame).
const LAST_AT_LEAST: Duration = Duration::from_millis(200);

/// A watch under way; [`Recording::finish`] stops it and gives the timeline.
pub struct Recording {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Frame>>>,
    remote: bool,
}

impl HostWatch {
    /// Start reading `machine` now: the timeline's seconds count from here.
    pub fn start(&self, machine: &crate::host::Machine) -> Recording {
        let backend = machine.reader();
        let stop = Arc::new(AtomicBool::new(false));
        let (words, ports, flag) = ((*self.words).clone(), self.ports.clone(), stop.clone());
        let remote = self.remote;
        let thread = std::thread::Builder::new()
            .name("host-watch".into())
            .spawn(move || {
                // No walk over every connection: its bursts would land in the windows this
                // watch sits beside; queues, counters and marks are read every second.
                let scope = Scope {
                    ports,
                    pid: None,
                    no_connection_walk: true,
                };
                let mut w = Watch::new(scope, None, words);
                // The first reading makes no frame of its own: rates need two.
                let _ = w.frame(backend.as_ref());
                let mut last = Instant::now();
                let mut frames = Vec::new();
                loop {
                    let stopping = flag.load(Ordering::Acquire);
                    let since = last.elapsed();
                    if since >= EVERY || (stopping && since >= LAST_AT_LEAST) {
                        frames.push(w.frame(backend.as_ref()));
                        last = Instant::now();
                    }
                    if stopping {
                        return frames;
                    }
                    std::thread::park_timeout(
                        EVERY
                            .saturating_sub(last.elapsed())
                            .max(Duration::from_millis(10)),
                    );
                }
            })
            .ok();
        Recording {
            stop,
            thread,
            remote,
        }
    }
}

impl Recording {
    /// Stop reading and brief what was read (None when the thread could not run).
    pub fn finish(mut self) -> Option<Timeline> {
        self.stop.store(true, Ordering::Release);
        let t = self.thread.take()?;
        t.thread().unpark();
        let frames = t.join().ok()?;
        let mut timeline = Timeline::of(&frames);
        timeline.generator_only = self.remote;
        Some(timeline)
    }
}

impl Drop for Recording {
    /// A scenario that ends early (an error) stops its watch too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}
