//! What the supervisor's tasks share: the plan `serve` resolved, one slot per server process,
//! and the counters its admin endpoint reports. Data only, below the tasks that work on it
//! (`process.rs` starts a process, `keep.rs` keeps one running, `roll.rs` replaces them, and
//! `run.rs` runs them all), so none of those imports another's caller.

use super::relay::Hubs;
use crate::profile::ProcessSizing;
use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A line on stderr that never panics: `eprintln!` panics when stderr is a closed pipe (`| head`,
/// a parent that died), and a panic here would stop a process from ever being restarted.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
pub(super) use say;

/// What `serve` resolved for the supervisor.
pub struct Supervision {
    pub sizing: ProcessSizing,
    /// `--bind` and `--port` (0: any free port).
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The server's configuration, each process's own with its share of the server (see
    /// `ServeConfig::for_supervised_process`); its secrets go to each process's environment
    /// only: the API key as the supervisor read it, so the supervisor and a restarted process
    /// present and expect the same key even if a key file changed since.
    pub config: crate::serve::config::ServeConfig,
    /// Each process's I/O threads.
    pub workers: usize,
    /// Relay broadcast/channels locally (false with `--cluster`: Redis relays).
    pub relay: bool,
    pub grace: Duration,
    pub scheme: &'static str,
    /// Accept loops (SO_REUSEPORT sockets) per process: --acceptors, 0 for one per worker.
    pub acceptors: usize,
    /// How long a rolling restart waits for a replaced process to drain and exit before it
    /// kills it: its shutdown grace plus a margin.
    pub old_exit_wait: Duration,
    /// Listening sockets from systemd (LISTEN_FDS): every process accepts on all of them,
    /// instead of the supervisor's own per-process sockets.
    pub inherited: Option<Vec<OwnedFd>>,
}

#[derive(Clone)]
pub(super) struct Slot {
    pub(super) pid: Option<u32>,
    pub(super) admin: Option<SocketAddr>,
    pub(super) up: bool,
    pub(super) restarts: u64,
    /// The last exit, as the log said it.
    pub(super) last_exit: Option<String>,
    /// What a restart after a crash runs: the binary of the last roll.
    pub(super) binary: Binary,
    /// The listening sockets the process inherits (the supervisor owns them).
    pub(super) fds: Vec<RawFd>,
}

impl Slot {
    /// Its admin listener, while the process is up.
    pub(super) fn up_admin(&self) -> Option<SocketAddr> {
        self.admin.filter(|_| self.up)
    }
}

pub(super) struct State {
    pub(super) plan: Supervision,
    pub(super) port: u16,
    pub(super) slots: Mutex<Vec<Slot>>,
    pub(super) hubs: Arc<Hubs>,
    /// Set once every process first came up; a death before that fails the start.
    pub(super) started: AtomicBool,
    pub(super) stopping: AtomicBool,
    /// Bumped on every change of a slot (startup and shutdown wait on it).
    pub(super) changed: tokio::sync::watch::Sender<u64>,
    pub(super) start_failure: Mutex<Option<String>>,
    /// Processes that are in no slot: a replacement coming up, a replaced one draining (a
    /// SIGTERM to the supervisor reaches them too).
    pub(super) others: Mutex<Vec<u32>>,
    pub(super) roll: Counters,
    /// What the processes that are gone counted, and the draining ones (`tally.rs`): taken
    /// by every scrape and every change to the set of processes a scrape reads.
    pub(super) tally: tokio::sync::Mutex<super::tally::Tally>,
    /// Where each process writes its final metrics as it exits (private to the supervisor).
    pub(super) final_dir: tempfile::TempDir,
    /// The TLS session-ticket keys' file every process shares (TLS with ticket resumption):
    /// rotated by the supervisor every `shared_tickets::ROTATE`.
    pub(super) ticket_keys: Option<std::path::PathBuf>,
    /// Processes started, for their final metrics' file names.
    pub(super) spawned: std::sync::atomic::AtomicU64,
    /// The listening sockets, open for as long as the supervisor runs.
    pub(super) _sockets: Vec<OwnedFd>,
}

impl State {
    pub(super) fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }
}

/// Which binary a (re)started process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binary {
    /// The supervisor's own (/proc/self/exe): the same code, even if the file was replaced.
    Own,
    /// The file now at this path (SIGUSR2).
    At(PathBuf),
}

/// What rolling restarts (`roll.rs`) did, for /metrics and /healthz.
#[derive(Default)]
pub struct Counters {
    pub in_progress: AtomicBool,
    pub completed: AtomicU64,
    pub aborted: AtomicU64,
    pub refused: AtomicU64,
    /// Processes replaced by a roll (not counted in ws_supervisor_restarts_total).
    pub replaced: AtomicU64,
}

impl Counters {
    /// The roll families, in the exposition format.
    pub fn render(&self, out: &mut String) {
        let g = |v: bool| u8::from(v).to_string();
        let rows = [
            (
                "ws_supervisor_rolling_restart_in_progress",
                "1 while a rolling restart (SIGHUP/SIGUSR2) replaces the processes.",
                "gauge",
                vec![(String::new(), g(self.in_progress.load(Relaxed)))],
            ),
            (
                "ws_supervisor_rolling_restarts_total",
                "Rolling restarts by result: completed, aborted (a replacement did not come up; the old process kept serving) or refused (one was already running).",
                "counter",
                vec![
                    ("{result=\"completed\"}".into(), self.completed.load(Relaxed).to_string()),
                    ("{result=\"aborted\"}".into(), self.aborted.load(Relaxed).to_string()),
                    ("{result=\"refused\"}".into(), self.refused.load(Relaxed).to_string()),
                ],
            ),
            (
                "ws_supervisor_processes_replaced_total",
                "Processes replaced by a rolling restart.",
                "counter",
                vec![(String::new(), self.replaced.load(Relaxed).to_string())],
            ),
        ];
        for (name, help, kind, values) in rows {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, v) in values {
                out.push_str(&format!("{name}{labels} {v}\n"));
            }
        }
    }
}

/// The admin addresses of the processes that are up, by index.
pub(super) fn up_admins(st: &State) -> Vec<(usize, SocketAddr)> {
    st.slots
        .lock()
        .unwrap()
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.up_admin().map(|a| (i, a)))
        .collect()
}

/// The supervisor's side of the channels API (see `run::serve_admin`).
mod api_glue {
    use super::{up_admins, State};
    use crate::serve::supervisor::api::Process;

    impl Process for State {
        fn api_key(&self) -> Option<&str> {
            self.plan
                .config
                .secrets
                .api_key
                .as_ref()
                .map(|k| k.expose())
        }
        fn up_admins(&self) -> Vec<(usize, std::net::SocketAddr)> {
            up_admins(self)
        }
        fn stopping(&self) -> bool {
            self.stopping.load(std::sync::atomic::Ordering::Relaxed)
        }
    }
}
