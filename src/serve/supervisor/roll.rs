//! Rolling restarts: on SIGHUP (this binary again) or SIGUSR2 (the binary now at the path the
//! supervisor was started from, after an upgrade: nginx's binary upgrade), replace the server
//! processes one slot at a time. The replacement starts on the same inherited listening
//! sockets (`listen.rs`), so the kernel's accept queue of the slot is never closed; once its
//! /healthz answers, the old process gets SIGUSR1 and drains (alone, at the whole node's
//! reconnect rate, with no load-balancer delay: the other processes stay ready), and the roll
//! waits for it to exit
//! before it moves to the next slot, so at most one extra process (and one slot's drain) runs
//! at a time. A replacement that does not come up aborts the roll and the old process keeps
//! serving; a second signal while a roll runs is refused, never interleaved.

use super::process::{spawn, Running};
use super::state::{say, Binary, State};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// How long a replacement may take to answer /healthz (it starts as at boot, so as long).
const UP_BUDGET: Duration = Duration::from_secs(60);

/// A request to keeper `i`: replace your process with one running `binary`, then answer.
pub struct Replace {
    pub binary: Binary,
    pub done: oneshot::Sender<Result<(), String>>,
}

/// The path the supervisor was started from, for SIGUSR2: argv[0] when it names a path (made
/// absolute against the starting directory), else the one PATH finds, else this executable's.
pub fn started_from() -> PathBuf {
    let exe = || std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let Some(a0) = std::env::args_os().next().map(PathBuf::from) else {
        return exe();
    };
    if a0.components().count() > 1 {
        return std::env::current_dir().map_or(a0.clone(), |d| d.join(&a0));
    }
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&a0))
                .find(|c| c.is_absolute() && c.is_file())
        })
        .unwrap_or_else(exe)
}

/// Start a roll with `binary`, unless one runs (then it is refused, logged and counted).
pub fn start(
    st: &Arc<State>,
    keepers: &Arc<Vec<mpsc::Sender<Replace>>>,
    binary: Binary,
    why: &str,
) {
    let c = &st.roll;
    if !st.started.load(Relaxed) || st.stopping.load(Relaxed) {
        say!("wstune serve: {why} ignored: the processes are starting or stopping");
        c.refused.fetch_add(1, Relaxed);
        return;
    }
    if c.in_progress.swap(true, Relaxed) {
        say!("wstune serve: {why} refused: a rolling restart is already running (one at a time)");
        c.refused.fetch_add(1, Relaxed);
        return;
    }
    let what = match &binary {
        Binary::Own => "this binary".to_string(),
        Binary::At(p) => p.display().to_string(),
    };
    say!(
        "wstune serve: {why}: rolling restart of {} processes, one at a time, with {what}",
        keepers.len()
    );
    let (st, keepers) = (st.clone(), keepers.clone());
    tokio::spawn(async move {
        let started = Instant::now();
        for (i, k) in keepers.iter().enumerate() {
            let (done, answer) = oneshot::channel();
            let sent = k
                .send(Replace {
                    binary: binary.clone(),
                    done,
                })
                .await;
            let result = match sent {
                Ok(()) => answer
                    .await
                    .unwrap_or_else(|_| Err("the supervisor is stopping".into())),
                Err(_) => Err("the supervisor is stopping".into()),
            };
            if let Err(why) = result {
                say!(
                    "wstune serve: rolling restart aborted at process {i}: {why}; it and the \
                     processes after it keep running their current binary"
                );
                st.roll.aborted.fetch_add(1, Relaxed);
                st.roll.in_progress.store(false, Relaxed);
                st.bump();
                return;
            }
        }
        say!(
            "wstune serve: rolling restart done: {} processes replaced in {:.1} s",
            keepers.len(),
            started.elapsed().as_secs_f64()
        );
        st.roll.completed.fetch_add(1, Relaxed);
        st.roll.in_progress.store(false, Relaxed);
        st.bump();
    });
}

/// In keeper `i`: replace `cur` as `req` asks and answer it. Some(exit) when `cur` itself
/// exited meanwhile (the replacement is then abandoned and the keeper restarts the slot as
/// after any exit).
pub async fn replace(
    st: &Arc<State>,
    i: usize,
    cur: &mut Running,
    req: Replace,
) -> Option<std::io::Result<std::process::ExitStatus>> {
    // A stop that began while the roll waited for the previous slot's drain: its SIGTERM went
    // out before this replacement existed, so starting one now would leave it running.
    if st.stopping.load(Relaxed) {
        let _ = req.done.send(Err("the supervisor is stopping".into()));
        return None;
    }
    let (up_tx, up_rx) = oneshot::channel();
    let mut new = match spawn(st, i, &req.binary, Some(up_tx), false) {
        Ok(r) => r,
        Err(e) => {
            let _ = req
                .done
                .send(Err(format!("cannot start its replacement: {e:#}")));
            return None;
        }
    };
    let up = tokio::select! {
        r = wait_up(st, &mut new, up_rx) => r,
        s = cur.child.wait() => {
            let _ = req.done.send(Err(format!("process {i} (pid {}) exited during its replacement", cur.pid)));
            end(st, new, Duration::from_secs(5)).await;
            return Some(s);
        }
    };
    let up = match up {
        Ok(_) if st.stopping.load(Relaxed) => {
            Err("was not needed: the supervisor is stopping".into())
        }
        up => up,
    };
    let admin = match up {
        Ok(a) => a,
        Err(why) => {
            let pid = new.pid;
            let head = end(st, new, Duration::from_secs(5)).await;
            let mut why = format!("its replacement (pid {pid}) {why}");
            for l in head.iter().rev().take(20).rev() {
                why.push_str("\n  ");
                why.push_str(l);
            }
            let _ = req.done.send(Err(why));
            return None;
        }
    };
    // From here the slot is the new process's: /healthz, /metrics and a crash restart follow it.
    // The old one is scraped as a draining process until it is gone, from the same moment.
    let mut tally = st.tally.lock().await;
    let old_admin = {
        let mut slots = st.slots.lock().unwrap();
        let s = &mut slots[i];
        s.pid = Some(new.pid);
        s.up = true;
        s.binary = req.binary.clone();
        s.admin.replace(admin)
    };
    tally.drains(cur.pid, old_admin);
    drop(tally);
    {
        let mut others = st.others.lock().unwrap();
        others.retain(|p| *p != new.pid);
        others.push(cur.pid);
    }
    st.bump();
    let old = std::mem::replace(cur, new);
    let (old_pid, new_pid) = (old.pid, cur.pid);
    // SAFETY: kill has no memory preconditions; the old process is our child, not yet reaped.
    unsafe { libc::kill(old_pid as i32, libc::SIGUSR1) };
    // The old one drains on its own task, so the keeper watches (and restarts) the new one
    // meanwhile; the roll moves on only once the old one has exited.
    let st = st.clone();
    tokio::spawn(async move {
        let t = Instant::now();
        let wait = st.plan.old_exit_wait;
        end_after_term(&st, old, wait).await;
        st.roll.replaced.fetch_add(1, Relaxed);
        say!(
            "wstune serve: process {i} replaced: pid {old_pid} drained and exited in {:.1} s, \
             pid {new_pid} serves",
            t.elapsed().as_secs_f64()
        );
        let _ = req.done.send(Ok(()));
    });
    None
}

/// Wait until `new` prints its admin address and its /healthz answers 200, within UP_BUDGET;
/// Err says why not.
async fn wait_up(
    st: &Arc<State>,
    new: &mut Running,
    up: oneshot::Receiver<Option<std::net::SocketAddr>>,
) -> Result<std::net::SocketAddr, String> {
    let deadline = tokio::time::Instant::now() + UP_BUDGET;
    let mut changed = st.changed.subscribe();
    let check = async {
        let Some(admin) = up.await.ok().flatten() else {
            return Err("closed its log before it listened".to_string());
        };
        loop {
            let r =
                super::api::request(admin, "GET", "/healthz", None, b"", Duration::from_secs(2));
            if matches!(r.await, Ok((200, _))) {
                return Ok(admin);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::pin!(check);
    loop {
        tokio::select! {
            r = &mut check => return r,
            s = new.child.wait() => {
                let how = s.map_or_else(|e| format!("lost ({e})"), |s| s.to_string());
                return Err(format!("exited ({how}) before its /healthz answered"));
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(format!("did not answer /healthz within {} s", UP_BUDGET.as_secs()));
            }
            _ = changed.changed() => {
                if st.stopping.load(Relaxed) {
                    return Err("was not needed: the supervisor is stopping".into());
                }
            }
        }
    }
}

/// Stop `r` (SIGTERM, then SIGKILL after `wait`), reap it and forget it; its log's head.
async fn end(st: &Arc<State>, r: Running, wait: Duration) -> Vec<String> {
    // SAFETY: kill has no memory preconditions; r is our child, not yet reaped.
    unsafe { libc::kill(r.pid as i32, libc::SIGTERM) };
    end_after_term(st, r, wait).await
}

/// Wait up to `wait` for `r` (already sent SIGTERM) to exit, then SIGKILL it; reap it, detach
/// its relay and drop it from the supervisor's list of processes to signal. Its log's head.
async fn end_after_term(st: &Arc<State>, mut r: Running, wait: Duration) -> Vec<String> {
    if tokio::time::timeout(wait, r.child.wait()).await.is_err() {
        say!(
            "wstune serve: process pid {} still running {} s after it was told to drain: killed",
            r.pid,
            wait.as_secs()
        );
        let _ = r.child.kill().await;
    }
    let _ = r.child.wait().await;
    st.tally.lock().await.retire(r.pid, &r.final_metrics);
    st.hubs.detach(r.pid);
    st.others.lock().unwrap().retain(|p| *p != r.pid);
    match r.lines {
        Some(h) => tokio::time::timeout(Duration::from_secs(2), h)
            .await
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or_default(),
        None => Vec::new(),
    }
}
