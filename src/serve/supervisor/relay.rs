//! The local relay: `broadcast` and `channels` across the processes of one supervisor, without
//! Redis.
//!
//! Each process has one Unix socket (a `socketpair`, the child's end inherited as
//! `WSTUNE_RELAY_FD`) to the supervisor. A process delivers its own message locally at once,
//! then writes it once, in the backplane's wire format (`backplane::wire`, the process's pid as
//! node id) behind a u32 length; the supervisor hands that frame to every *other* live process,
//! which delivers it locally (encoded once per process). Every queue is bounded: a process that
//! cannot keep up loses relayed messages (counted), it never blocks the others.

use super::history::Sequencer;
use crate::serve::backplane::deliver::{deliver, supervisor_names_publishers, wait_for_snapshot};
use crate::serve::backplane::wire::{decode, encode, Incoming, SUPERVISOR};
use embedded_server::channels::HistorySettings;
use embedded_server::Hub;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Frames waiting for one process's socket (each side); past this they are dropped.
const QUEUE: usize = 8192;
/// Larger frames are a broken peer, not a message (messages are capped far below this).
const MAX_FRAME: usize = 1 << 30;

/// A frame as written: u32 LE length, then the `wire::encode` bytes.
type Frame = Arc<Vec<u8>>;

fn framed(body: Vec<u8>) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + body.len());
    v.extend_from_slice(&(body.len() as u32).to_le_bytes());
    v.extend_from_slice(&body);
    v
}

/// One connected pair: (the supervisor's end, the child's end), both close-on-exec; the
/// child's end is made inheritable in the child only, just before exec.
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints for socketpair to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn stream(fd: OwnedFd) -> io::Result<tokio::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(s)
}

async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> io::Result<Vec<u8>> {
    let n = r.read_u32_le().await? as usize;
    if n > MAX_FRAME {
        return Err(io::Error::other(format!("relay frame of {n} bytes")));
    }
    let mut v = vec![0; 4 + n];
    v[..4].copy_from_slice(&(n as u32).to_le_bytes());
    r.read_exact(&mut v[4..]).await?;
    Ok(v)
}

/// In a supervised process: relay this hub's broadcasts and channel messages through the
/// supervisor on `fd`, and deliver what the other processes relay. The backplane metrics
/// (`ws_backplane_*`) count the relay as they count Redis. With channel history on, the
/// supervisor positions every publish (`history.rs`) and this returns once its history is
/// here (bounded), so that no client recovers against an empty one.
pub async fn start_child(hub: Arc<Hub>, node: u64, fd: RawFd) -> io::Result<()> {
    let history = hub.history().enabled();
    if history {
        hub.history().sequence_elsewhere();
    }
    // SAFETY: the supervisor passed this fd to us (and only us) for the relay.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (mut rd, mut wr) = stream(fd)?.into_split();
    let metrics = hub.metrics.clone();
    metrics.backplane_up.store(1, Relaxed);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    {
        let metrics = metrics.clone();
        hub.relay().set(Box::new(move |r| {
            if metrics.backplane_up.load(Relaxed) != 1
                || tx
                    .try_send(framed(encode(node, &r, supervisor_names_publishers())))
                    .is_err()
            {
                metrics.backplane_dropped.fetch_add(1, Relaxed);
            }
        }));
    }
    let m = metrics.clone();
    tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            if wr.write_all(&f).await.is_err() {
                m.backplane_up.store(0, Relaxed);
                return;
            }
            m.backplane_published.fetch_add(1, Relaxed);
        }
    });
    tokio::spawn(async move {
        while let Ok(f) = read_frame(&mut rd).await {
            deliver(&hub, node, &f[4..]);
        }
        // The supervisor is gone (its parent-death signal drains this process).
        metrics.backplane_up.store(0, Relaxed);
        tracing::warn!("relay to the supervisor closed: serving local clients only");
    });
    if history && !wait_for_snapshot(SNAPSHOT_WAIT).await {
        tracing::warn!(
            "channel history: the supervisor's did not come within {} s; recoveries answer \
             recovered:false until it fills again",
            SNAPSHOT_WAIT.as_secs()
        );
    }
    Ok(())
}

/// How long a starting process waits for the supervisor's channel history.
const SNAPSHOT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The supervisor's side: one queue per live process (by pid: during a rolling restart a slot
/// has two, the draining one and its replacement, and both get what the others relay), and
/// what was relayed or dropped.
pub struct Hubs {
    queues: Mutex<Vec<(u32, mpsc::Sender<Frame>)>>,
    pub frames: AtomicU64,
    pub dropped: AtomicU64,
    /// Channel history, when on: the supervisor positions every publish.
    history: std::sync::OnceLock<Sequencer>,
}

impl Hubs {
    pub fn new() -> Arc<Hubs> {
        Arc::new(Hubs {
            queues: Mutex::new(Vec::new()),
            frames: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            history: std::sync::OnceLock::new(),
        })
    }

    /// Position channel publications and keep their history (`history.rs`) when `settings`
    /// enable it; each process has `per_process_budget` bytes of memory budget.
    pub fn keep_history(&self, settings: &HistorySettings, per_process_budget: usize) {
        if settings.enabled() {
            let _ = self
                .history
                .set(Sequencer::new(settings, per_process_budget));
        }
    }

    /// Queue `f` for every live process but `except`, counting what was dropped.
    fn send_all(&self, queues: &[(u32, mpsc::Sender<Frame>)], f: &Frame, except: Option<u32>) {
        for (_, q) in queues.iter().filter(|(p, _)| Some(*p) != except) {
            match q.try_send(f.clone()) {
                Ok(()) => self.frames.fetch_add(1, Relaxed),
                Err(_) => self.dropped.fetch_add(1, Relaxed),
            };
        }
    }

    /// Relay for process `pid` over `fd` (the supervisor's end of its pair) until it closes.
    pub fn attach(self: &Arc<Self>, pid: u32, fd: OwnedFd) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        let (mut rd, mut wr) = stream(fd)?.into_split();
        let (tx, mut rx) = mpsc::channel::<Frame>(QUEUE);
        match self.history.get() {
            // The history first, then every positioned publication after it: the queue is
            // added under the history's lock, so nothing falls between the two.
            Some(seq) => seq.snapshot(|graves, body| {
                let _ = tx.try_send(Arc::new(framed(graves)));
                let _ = tx.try_send(Arc::new(framed(body)));
                self.queues.lock().unwrap().push((pid, tx));
            }),
            None => self.queues.lock().unwrap().push((pid, tx)),
        }
        tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                if wr.write_all(&f).await.is_err() {
                    return;
                }
            }
        });
        let hubs = self.clone();
        tokio::spawn(async move {
            while let Ok(f) = read_frame(&mut rd).await {
                // A publish to position: every process gets it back positioned, its
                // publisher too, in the order the positions were given.
                if let (Some(seq), Some(Incoming::Sequence(channel, data, publisher))) =
                    (hubs.history.get(), decode(SUPERVISOR, &f[4..]))
                {
                    // A connection's key across processes: its process and its id there.
                    let key = match publisher {
                        0 => 0,
                        p => (u64::from(pid) << 40) ^ p,
                    };
                    seq.position(channel, data, key, |bodies| {
                        let queues = hubs.queues.lock().unwrap();
                        for body in bodies {
                            hubs.send_all(&queues, &Arc::new(framed(body)), None);
                        }
                    });
                    continue;
                }
                let queues = hubs.queues.lock().unwrap();
                hubs.send_all(&queues, &Arc::new(f), Some(pid));
            }
            tracing::debug!("relay of process {pid} (fd {raw}) closed");
        });
        Ok(())
    }

    /// Process `pid` is gone: stop queueing for it (its writer ends with the queue).
    pub fn detach(&self, pid: u32) {
        self.queues.lock().unwrap().retain(|(p, _)| *p != pid);
    }
}
