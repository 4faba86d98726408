//! The supervisor process: start, watch, restart and drain the server processes; the admin
//! endpoint over all of them.

use super::keep::keep;
use super::listen;
use super::metrics;
use super::relay::Hubs;
use super::roll;
use super::state::{say, Binary, Slot, State, Supervision};
use crate::outcome::Outcome;
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Run the supervisor until SIGTERM/SIGINT; the exit code.
pub fn supervise(mut plan: Supervision) -> Result<Outcome> {
    let n = plan.sizing.processes;
    let (sockets, slot_fds) = sockets(&mut plan)?;
    let port = listen::local_addr(&sockets[0])?.port();
    let admin = match plan.admin {
        Some(a) => {
            Some(std::net::TcpListener::bind(a).map_err(|e| super::admin_listen_error(a, &e))?)
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (changed, _) = tokio::sync::watch::channel(0);
    let slots = slot_fds
        .into_iter()
        .map(|fds| Slot {
            pid: None,
            admin: None,
            up: false,
            restarts: 0,
            last_exit: None,
            binary: Binary::Own,
            fds,
        })
        .collect();
    let final_dir = crate::host::temp::private_dir()
        .context("cannot create the supervisor's private directory (final metrics, ticket keys)")?;
    let ticket_keys = ticket_keys(&plan, final_dir.path())?;
    let st = Arc::new(State {
        plan,
        port,
        slots: Mutex::new(slots),
        hubs: Hubs::new(),
        started: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        changed,
        start_failure: Mutex::new(None),
        others: Mutex::new(Vec::new()),
        roll: Default::default(),
        tally: Default::default(),
        final_dir,
        spawned: Default::default(),
        ticket_keys,
        _sockets: sockets,
    });
    st.hubs.keep_history(
        &st.plan.config.builtin.channels.history,
        st.plan.config.server.memory_budget() / n.max(1),
    );
    debug_assert_eq!(st.slots.lock().unwrap().len(), n);
    // Everything runs on this thread: the parent-death signal of a child fires when the
    // thread that forked it ends, so no child may be forked from a thread that can end first.
    rt.block_on(run(st.clone(), admin))
}

/// The session-ticket keys' file the processes share, written with its first key, when they
/// serve TLS with ticket resumption.
fn ticket_keys(plan: &Supervision, dir: &std::path::Path) -> Result<Option<std::path::PathBuf>> {
    #[cfg(feature = "tls")]
    if plan
        .config
        .tls
        .as_ref()
        .is_some_and(|t| t.resumption == crate::serve::config::TlsResumption::Tickets)
    {
        let path = dir.join("tickets");
        embedded_server::shared_tickets::rotate(&path).map_err(|e| anyhow::anyhow!(e))?;
        return Ok(Some(path));
    }
    let _ = (plan, dir);
    Ok(None)
}

/// The listening sockets (all of them, and each slot's fds): systemd's, shared by every
/// process, else one SO_REUSEPORT socket per accept loop of each process, so the kernel keeps
/// spreading connections evenly over the processes and a process's queue outlives it. The
/// first socket resolves `--port 0`; a process holding the port without SO_REUSEPORT is found
/// now, before any child starts.
fn sockets(plan: &mut Supervision) -> Result<(Vec<OwnedFd>, Vec<Vec<RawFd>>)> {
    let n = plan.sizing.processes;
    if let Some(fds) = plan.inherited.take() {
        // The address named in the log is the socket's, not --bind's.
        plan.addr = listen::local_addr(fds.first().context("no inherited socket")?)?;
        let raw = listen::raw(&fds);
        return Ok((fds, vec![raw; n]));
    }
    let per = match plan.acceptors {
        0 => plan.workers.max(1),
        a => a,
    };
    let mut addr = plan.addr;
    let mut all: Vec<OwnedFd> = Vec::with_capacity(n * per);
    for _ in 0..n * per {
        let l = listen::reuseport_listener(addr).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrNotAvailable => super::listen_error(addr, "--bind", &e),
            _ => anyhow::anyhow!(
                "cannot use {addr} for {n} processes: {e}; another process holds the port without \
                 SO_REUSEPORT (or as another user): stop it or pick another --port"
            ),
        })?;
        if addr.port() == 0 {
            addr = listen::local_addr(&l)?;
        }
        all.push(l);
    }
    let raw = listen::raw(&all);
    let slots = raw.chunks(per).map(<[RawFd]>::to_vec).collect();
    Ok((all, slots))
}

async fn run(st: Arc<State>, admin: Option<std::net::TcpListener>) -> Result<Outcome> {
    // Before any process starts: a SIGTERM from then on must drain them, not kill us alone.
    let signal =
        embedded_server::shutdown_signal().context("cannot install the SIGTERM/SIGINT handlers")?;
    tokio::pin!(signal);
    // A second SIGINT/SIGTERM while the processes drain stops them at once.
    let second = crate::host::signals::second_signal()
        .context("cannot install the SIGTERM/SIGINT handlers")?;
    tokio::pin!(second);
    // Before any process starts too: SIGHUP's default action would end the supervisor.
    use tokio::signal::unix::{signal as unix_signal, SignalKind};
    let mut hup = unix_signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
    let mut usr2 =
        unix_signal(SignalKind::user_defined2()).context("cannot install the SIGUSR2 handler")?;
    let upgrade = roll::started_from();
    #[cfg(feature = "tls")]
    if let Some(path) = st.ticket_keys.clone() {
        // A new key every ROTATE, the one before still opening the tickets it made.
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(embedded_server::shared_tickets::ROTATE).await;
                if let Err(e) = embedded_server::shared_tickets::rotate(&path) {
                    say!("wstune serve: {e}; the processes keep the keys they have");
                }
            }
        });
    }
    let n = st.plan.sizing.processes;
    let mut keepers = Vec::new();
    let mut replacers = Vec::new();
    for i in 0..n {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        replacers.push(tx);
        keepers.push(tokio::spawn(keep(st.clone(), i, rx)));
    }
    let replacers = Arc::new(replacers);
    // Wait until every process listens, or one fails to start.
    let mut rx = st.changed.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let failure = st.start_failure.lock().unwrap().clone();
        if let Some(why) = failure {
            stop(&st, keepers).await;
            bail!("{why}");
        }
        if st.slots.lock().unwrap().iter().all(|s| s.up) {
            break;
        }
        tokio::select! {
            _ = rx.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {
                stop(&st, keepers).await;
                bail!("the {n} server processes did not all start listening within 60 s");
            }
            _ = &mut signal => {
                return Ok(tokio::select! {
                    _ = stop(&st, keepers) => Outcome::Ok,
                    sig = &mut second => stop_now(&st, sig),
                });
            }
        }
    }
    st.started.store(true, Relaxed);
    let pids: Vec<String> = st
        .slots
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.pid.unwrap_or(0).to_string())
        .collect();
    let p = &st.plan;
    say!(
        "wstune serve: {n} processes on one port (SO_REUSEPORT), pids {}; up to {} connections \
         and {} io workers each; broadcast/channels relay: {}; supervisor pid {}",
        pids.join(", "),
        p.sizing.per_process,
        p.workers,
        if p.relay {
            "local (through the supervisor)"
        } else {
            "Redis (--cluster)"
        },
        std::process::id()
    );
    say!(
        "wstune serve: listening on {}://{}/",
        p.scheme,
        SocketAddr::new(p.addr.ip(), st.port)
    );
    let (admin_stop, admin_rx) = tokio::sync::watch::channel(false);
    if let Some(l) = admin {
        l.set_nonblocking(true)?;
        let l = tokio::net::TcpListener::from_std(l)?;
        let a = l.local_addr()?;
        say!("wstune serve: admin on http://{a}/healthz and http://{a}/metrics");
        tokio::spawn(serve_admin(l, st.clone(), admin_rx));
    }
    loop {
        tokio::select! {
            _ = &mut signal => break,
            _ = hup.recv() => roll::start(&st, &replacers, Binary::Own, "SIGHUP"),
            _ = usr2.recv() => {
                roll::start(&st, &replacers, Binary::At(upgrade.clone()), "SIGUSR2")
            }
        }
    }
    say!(
        "wstune serve: stopping: every process drains (1012 to its clients, up to {} s)",
        st.plan.grace.as_secs()
    );
    let clean = tokio::select! {
        clean = stop(&st, keepers) => clean,
        sig = &mut second => return Ok(stop_now(&st, sig)),
    };
    let _ = admin_stop.send(true);
    // A process that had to be killed lost its clients without a close: done, with a warning.
    Ok(if clean {
        Outcome::Ok
    } else {
        Outcome::Warnings
    })
}

/// Send `sig` to every server process (a replaced one still draining included); their pids.
fn signal_all(st: &State, sig: i32) -> Vec<u32> {
    let others = st.others.lock().unwrap().clone();
    let pids: Vec<u32> = st
        .slots
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| s.pid)
        .chain(others)
        .collect();
    for &pid in &pids {
        // SAFETY: kill has no memory preconditions; pid is our own child's.
        unsafe { libc::kill(pid as i32, sig) };
    }
    pids
}

/// A second SIGINT/SIGTERM during the stop: every process is killed now (their clients lose
/// their connections without a close frame), and the supervisor exits.
fn stop_now(st: &State, signal: i32) -> Outcome {
    st.stopping.store(true, Relaxed);
    let pids = signal_all(st, libc::SIGKILL);
    say!(
        "wstune serve: {} again while stopping: killed the server process(es) {} without the rest of their drain (their open connections are cut without a close frame); exiting now (exit code {})",
        crate::host::signals::signal_name(signal),
        pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
        128 + signal
    );
    Outcome::Interrupted { signal }
}

/// Ask every process to drain (SIGTERM), wait for them within the grace period (plus a few
/// seconds for the process to exit), then SIGKILL whatever is left. True when none had to be
/// killed.
async fn stop(st: &Arc<State>, keepers: Vec<tokio::task::JoinHandle<()>>) -> bool {
    st.stopping.store(true, Relaxed);
    st.bump();
    let signal_all = |sig| {
        signal_all(st, sig);
    };
    signal_all(libc::SIGTERM);
    let all = async {
        futures_util::future::join_all(keepers).await;
        // A process a rolling restart replaced drains on its own task: wait for it too.
        while !st.others.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::pin!(all);
    let wait = st.plan.grace + Duration::from_secs(5);
    if tokio::time::timeout(wait, &mut all).await.is_ok() {
        return true;
    }
    let left: Vec<String> = st
        .slots
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| s.pid.map(|p| p.to_string()))
        .collect();
    say!(
        "wstune serve: process(es) {} still running {} s after SIGTERM: killed",
        left.join(", "),
        wait.as_secs()
    );
    signal_all(libc::SIGKILL);
    let _ = tokio::time::timeout(Duration::from_secs(5), all).await;
    false
}

/// Every process's `path`, in process order (None for one that is down or did not answer
/// within 2 s): the supervisor's own polling, marked internal so the processes do not count it.
async fn fetch_all(st: &State, path: &str) -> Vec<Option<String>> {
    let addrs: Vec<Option<SocketAddr>> = st
        .slots
        .lock()
        .unwrap()
        .iter()
        .map(Slot::up_admin)
        .collect();
    futures_util::future::join_all(addrs.into_iter().map(|a| async move {
        let a = a?;
        let r = super::api::request(a, "GET", path, None, b"", Duration::from_secs(2)).await;
        r.ok().map(|(_, body)| body)
    }))
    .await
}

fn connections_in(metrics_text: &str) -> Option<u64> {
    metrics_text
        .lines()
        .find_map(|l| l.strip_prefix("ws_connections "))
        .and_then(|v| v.trim().parse().ok())
}

async fn metrics_body(st: &State) -> String {
    // Held until the sum is made: no process leaves the slots or the draining list meanwhile.
    let mut tally = st.tally.lock().await;
    let in_slots: Vec<Option<(u32, SocketAddr)>> = st
        .slots
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.pid.zip(s.up_admin()))
        .collect();
    let fetch = |target: Option<(u32, SocketAddr)>| async move {
        let (pid, a) = target?;
        let r = super::api::request(a, "GET", "/metrics", None, b"", Duration::from_secs(2)).await;
        Some((pid, r.ok().map(|(_, body)| body)))
    };
    let draining: Vec<Option<(u32, SocketAddr)>> =
        tally.draining().iter().copied().map(Some).collect();
    let (texts, drained) = tokio::join!(
        futures_util::future::join_all(in_slots.into_iter().map(fetch)),
        futures_util::future::join_all(draining.into_iter().map(fetch)),
    );
    let mut got: Vec<String> = Vec::new();
    for (pid, text) in texts.iter().chain(&drained).flatten() {
        match text {
            Some(t) => {
                tally.seen(*pid, t.clone());
                got.push(t.clone());
            }
            // A process that did not answer (busy, or a draining one whose admin listener
            // closed before it exited) still counted what it last showed.
            None => got.push(tally.last_counters(*pid)),
        }
    }
    got.push(tally.retired().to_string());
    drop(tally);
    let texts: Vec<Option<String>> = texts
        .into_iter()
        .map(|t| t.and_then(|(_, body)| body))
        .collect();
    let mut out = metrics::sum(&got);
    if texts.iter().any(|t| t.is_none()) {
        // The relay of a process that is down or did not answer is not up, whatever the others say.
        out = out.replace("\nws_backplane_up 1\n", "\nws_backplane_up 0\n");
    }
    let slots = st.slots.lock().unwrap().clone();
    let mut fam = |name: &str, help: &str, kind: &str, rows: Vec<(String, String)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in rows {
            out.push_str(&format!("{name}{labels} {v}\n"));
        }
    };
    let per = |f: &dyn Fn(usize, &Slot) -> String| -> Vec<(String, String)> {
        slots
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{{process=\"{i}\"}}"), f(i, s)))
            .collect()
    };
    fam(
        "ws_supervisor_processes",
        "Server processes the supervisor keeps running.",
        "gauge",
        vec![(String::new(), slots.len().to_string())],
    );
    fam(
        "ws_supervisor_processes_up",
        "Server processes listening now.",
        "gauge",
        vec![(
            String::new(),
            slots.iter().filter(|s| s.up).count().to_string(),
        )],
    );
    fam(
        "ws_supervisor_process_up",
        "1 while the process listens, 0 while it is down or restarting.",
        "gauge",
        per(&|_, s| u8::from(s.up).to_string()),
    );
    fam(
        "ws_supervisor_restarts_total",
        "Restarts of a process after it died.",
        "counter",
        per(&|_, s| s.restarts.to_string()),
    );
    fam(
        "ws_supervisor_process_connections",
        "Open connections per process (ws_connections is their sum): how evenly the kernel spreads them.",
        "gauge",
        per(&|i, _| {
            texts[i]
                .as_deref()
                .and_then(connections_in)
                .unwrap_or(0)
                .to_string()
        }),
    );
    fam(
        "ws_supervisor_relay_frames_total",
        "Broadcast/channel messages the supervisor relayed to a process.",
        "counter",
        vec![(String::new(), st.hubs.frames.load(Relaxed).to_string())],
    );
    fam(
        "ws_supervisor_relay_dropped_total",
        "Relayed messages dropped because a process's relay queue was full.",
        "counter",
        vec![(String::new(), st.hubs.dropped.load(Relaxed).to_string())],
    );
    st.roll.render(&mut out);
    out
}

async fn healthz_body(st: &State) -> (&'static str, String) {
    let texts = fetch_all(st, "/healthz").await;
    let slots = st.slots.lock().unwrap().clone();
    let mut total = 0;
    let procs: Vec<serde_json::Value> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let h: Option<serde_json::Value> = texts[i]
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok());
            let conns = h.as_ref().and_then(|h| h["connections"].as_u64());
            total += conns.unwrap_or(0);
            let mut v = serde_json::json!({
                "process": i,
                "pid": s.pid,
                "state": if s.up { "up" } else if s.pid.is_some() { "starting" } else { "down" },
                "connections": conns,
                "restarts": s.restarts,
                "admin": s.admin.map(|a| a.to_string()),
                "last_exit": s.last_exit,
            });
            if let Some(b) = h.as_ref().and_then(|h| h.get("backplane")) {
                v["backplane"] = b.clone();
            }
            v
        })
        .collect();
    let up = slots.iter().filter(|s| s.up).count();
    let (code, status) = match up {
        0 => ("503 Service Unavailable", "down"),
        n if n == slots.len() => ("200 OK", "ok"),
        _ => ("200 OK", "degraded"),
    };
    let body = serde_json::json!({
        "status": status,
        "processes": slots.len(),
        "up": up,
        "connections": total,
        "restarts": slots.iter().map(|s| s.restarts).sum::<u64>(),
        "rolling_restart": st.roll.in_progress.load(Relaxed),
        "process": procs,
    });
    (code, format!("{body}\n"))
}

/// The supervisor's admin endpoint: /healthz (per process), /metrics (summed) and the
/// channels API: a publish is handed to one process that is up (which delivers it to its
/// subscribers and relays it to the others, as a WebSocket publish), presence is summed over
/// the processes.
async fn serve_admin(
    l: tokio::net::TcpListener,
    st: Arc<State>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use embedded_server::admin::{serve_routes, Gate, Route};
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    let c = &st.plan.config;
    let gate = Arc::new(Gate::new(
        c.secrets.api_key.clone(),
        c.server.max_message_bytes,
    ));
    let counts = gate.clone();
    serve_routes(l, shutdown, gate, move |route| {
        let (st, counts) = (st.clone(), counts.clone());
        async move {
            match route {
                Route::Healthz => {
                    let (status, body) = healthz_body(&st).await;
                    (if status.starts_with("200") { 200 } else { 503 }, body)
                }
                Route::Metrics => {
                    let mut m = metrics_body(&st).await;
                    counts.render_counts(&mut m, "ws_supervisor_api_requests_total");
                    (200, m)
                }
                Route::Api(call) => super::api::answer(&*st, call).await,
                Route::Readyz => super::api::readyz(&*st).await,
                Route::Drain(over) => super::api::drain(&*st, over).await,
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_process_connections_come_from_the_metrics_text() {
        let t = "# TYPE ws_connections gauge\nws_connections 12\nws_connections_x 3\n";
        assert_eq!(connections_in(t), Some(12));
        assert_eq!(connections_in("nothing"), None);
    }
}
