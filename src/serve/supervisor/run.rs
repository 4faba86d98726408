//! The supervisor process: start, watch, restart and drain the server processes; the admin
//! endpoint over all of them.

use super::relay::Hubs;
use super::{metrics, ENV_PROCESS, ENV_RELAY_FD};
use crate::outcome::Outcome;
use crate::profile::ProcessSizing;
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A line on stderr that never panics: `eprintln!` panics when stderr is a closed pipe (`| head`,
/// a parent that died), and a panic here would stop a process from ever being restarted.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

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
}

#[derive(Default, Clone)]
struct Slot {
    pid: Option<u32>,
    admin: Option<SocketAddr>,
    up: bool,
    restarts: u64,
    /// The last exit, as the log said it.
    last_exit: Option<String>,
}

impl Slot {
    /// Its admin listener, while the process is up.
    fn up_admin(&self) -> Option<SocketAddr> {
        self.admin.filter(|_| self.up)
    }
}

struct State {
    plan: Supervision,
    port: u16,
    slots: Mutex<Vec<Slot>>,
    hubs: Arc<Hubs>,
    /// Set once every process first came up; a death before that fails the start.
    started: AtomicBool,
    stopping: AtomicBool,
    /// Bumped on every change of a slot (startup and shutdown wait on it).
    changed: tokio::sync::watch::Sender<u64>,
    start_failure: Mutex<Option<String>>,
}

impl State {
    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }
}

/// Backoff before restart `attempt` (0-based): 100 ms doubling to 5 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5000))
}

/// A process that lived this long before dying starts its backoff from the beginning.
const STABLE: Duration = Duration::from_secs(30);

/// Run the supervisor until SIGTERM/SIGINT; the exit code.
pub fn supervise(plan: Supervision) -> Result<Outcome> {
    // Reserve the port: bound with SO_REUSEPORT but never listening, so it receives nothing,
    // yet `--port 0` becomes a real port and a process holding the port without SO_REUSEPORT
    // is found now, before any child starts.
    let reserve = socket2::Socket::new(
        socket2::Domain::for_address(plan.addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    reserve.set_reuse_address(true)?;
    reserve.set_reuse_port(true)?;
    if let Err(e) = reserve.bind(&plan.addr.into()) {
        if e.kind() == std::io::ErrorKind::AddrNotAvailable {
            return Err(super::listen_error(plan.addr, "--bind", &e));
        }
        bail!(
            "cannot use {} for {} processes: {e}; another process holds the port without \
             SO_REUSEPORT (or as another user): stop it or pick another --port",
            plan.addr,
            plan.sizing.processes
        );
    }
    let port = reserve
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .context("the reserved port has no address")?;
    let admin = match plan.admin {
        Some(a) => Some(
            std::net::TcpListener::bind(a)
                .with_context(|| format!("cannot listen on --admin {a}"))?,
        ),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let n = plan.sizing.processes;
    let (changed, _) = tokio::sync::watch::channel(0);
    let st = Arc::new(State {
        plan,
        port,
        slots: Mutex::new(vec![Slot::default(); n]),
        hubs: Hubs::new(n),
        started: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        changed,
        start_failure: Mutex::new(None),
    });
    // Everything runs on this thread: the parent-death signal of a child fires when the
    // thread that forked it ends, so no child may be forked from a thread that can end first.
    let code = rt.block_on(run(st.clone(), admin))?;
    drop(reserve);
    Ok(code)
}

async fn run(st: Arc<State>, admin: Option<std::net::TcpListener>) -> Result<Outcome> {
    // Before any process starts: a SIGTERM from then on must drain them, not kill us alone.
    let signal =
        embedded_server::shutdown_signal().context("cannot install the SIGTERM/SIGINT handlers")?;
    tokio::pin!(signal);
    let n = st.plan.sizing.processes;
    let mut keepers = Vec::new();
    for i in 0..n {
        keepers.push(tokio::spawn(keep(st.clone(), i)));
    }
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
                stop(&st, keepers).await;
                return Ok(Outcome::Ok);
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
    signal.await;
    say!(
        "wstune serve: stopping: every process drains (1012 to its clients, up to {} s)",
        st.plan.grace.as_secs()
    );
    let clean = stop(&st, keepers).await;
    let _ = admin_stop.send(true);
    // A process that had to be killed lost its clients without a close: done, with a warning.
    Ok(if clean {
        Outcome::Ok
    } else {
        Outcome::Warnings
    })
}

/// Ask every process to drain (SIGTERM), wait for them within the grace period (plus a few
/// seconds for the process to exit), then SIGKILL whatever is left. True when none had to be
/// killed.
async fn stop(st: &Arc<State>, keepers: Vec<tokio::task::JoinHandle<()>>) -> bool {
    st.stopping.store(true, Relaxed);
    st.bump();
    let signal_all = |sig| {
        for s in st.slots.lock().unwrap().iter() {
            if let Some(pid) = s.pid {
                // SAFETY: kill has no memory preconditions; pid is our own child's.
                unsafe { libc::kill(pid as i32, sig) };
            }
        }
    };
    signal_all(libc::SIGTERM);
    let all = futures_util::future::join_all(keepers);
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

/// Keep process `i` running: start it, wait for it to exit, restart it with backoff.
async fn keep(st: Arc<State>, i: usize) {
    let mut attempt = 0;
    let mut first = true;
    loop {
        if st.stopping.load(Relaxed) {
            return;
        }
        let born = Instant::now();
        let (mut child, pid) = match spawn(&st, i) {
            Ok(c) => c,
            Err(e) => {
                let why = format!("cannot start server process {i}: {e:#}");
                if !st.started.load(Relaxed) {
                    *st.start_failure.lock().unwrap() = Some(why);
                    st.bump();
                    return;
                }
                say!("wstune serve: {why}");
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
        };
        let lines = child
            .stderr
            .take()
            .map(|e| tokio::spawn(watch_stderr(st.clone(), i, pid, e, first)));
        first = false;
        let status = child.wait().await;
        // Reaped: its pid may be reused from now on, so nothing may signal it any more.
        let was_up = {
            let mut slots = st.slots.lock().unwrap();
            let s = &mut slots[i];
            s.pid = None;
            std::mem::replace(&mut s.up, false)
        };
        // The stderr reader ends at EOF, right after the exit; what it buffered says why a
        // process died before it listened.
        let head = match lines {
            Some(h) => tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        st.hubs.detach(i);
        let how = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("lost ({e})"),
        };
        {
            let mut slots = st.slots.lock().unwrap();
            let s = &mut slots[i];
            s.admin = None;
            s.last_exit = Some(how.clone());
        }
        st.bump();
        if st.stopping.load(Relaxed) {
            return;
        }
        if !st.started.load(Relaxed) {
            let mut why =
                format!("server process {i} (pid {pid}) stopped before it listened: {how}");
            for l in head.iter().rev().take(20).rev() {
                why.push_str("\n  ");
                why.push_str(l);
            }
            *st.start_failure.lock().unwrap() = Some(why);
            st.bump();
            return;
        }
        if born.elapsed() >= STABLE {
            attempt = 0;
        }
        let delay = backoff(attempt);
        attempt += 1;
        let restarts = {
            let mut slots = st.slots.lock().unwrap();
            slots[i].restarts += 1;
            slots[i].restarts
        };
        say!(
            "wstune serve: process {i} (pid {pid}) exited ({how}) after {:.1} s; its clients are \
             disconnected, the port stays open; restarting in {} ms (restart {restarts})",
            born.elapsed().as_secs_f64(),
            delay.as_millis()
        );
        if !was_up {
            // It died before it listened again: without its last words a restart loop says
            // nothing about why.
            for l in head.iter().rev().take(20).rev() {
                say!("  [process {i}] {l}");
            }
        }
        let mut rx = st.changed.subscribe();
        let _ = tokio::time::timeout(delay, async {
            while !st.stopping.load(Relaxed) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

/// Start server process `i`: the same `wstune serve` with the supervisor's flags, its relay
/// socket inherited, and a parent-death signal so that no process outlives the supervisor.
fn spawn(st: &Arc<State>, i: usize) -> Result<(tokio::process::Child, u32)> {
    let p = &st.plan;
    let exe = std::env::current_exe().context("cannot find the wstune executable")?;
    // The memory budget is the server's: each process gets its share.
    let budget = p.config.server.memory_budget() / p.sizing.processes.max(1);
    let config = p
        .config
        .for_supervised_process(st.port, p.sizing.per_process, p.workers, budget);
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("serve")
        .envs(config.child_env())
        .env(ENV_PROCESS, i.to_string())
        .env_remove(ENV_RELAY_FD)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let pair = if p.relay {
        Some(super::relay::pair().context("cannot create the relay socket")?)
    } else {
        None
    };
    let child_fd = pair.as_ref().map(|(_, c)| c.as_raw_fd());
    if let Some(fd) = child_fd {
        cmd.env(ENV_RELAY_FD, fd.to_string());
    }
    let parent = std::process::id() as i32;
    // SAFETY: only async-signal-safe calls (prctl, getppid, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // A supervisor killed with -9 still leaves its processes to drain (1001) and exit.
            crate::host::process::term_with_parent(parent)?;
            if let Some(fd) = child_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = crate::host::process::spawn_lasting(cmd).context("cannot start wstune serve")?;
    let pid = child.id().unwrap_or(0);
    if let Some((mine, theirs)) = pair {
        drop(theirs);
        st.hubs.attach(i, mine)?;
    }
    st.slots.lock().unwrap()[i].pid = Some(pid);
    st.bump();
    Ok((child, pid))
}

/// A child's log line as the supervisor forwards it: text lines prefixed `[process i]`; a JSON
/// line (`--log-format json`) stays one JSON object, with `"process":i` added as its first
/// field, so a log shipper still parses every line.
fn tag_line(i: usize, l: &str) -> String {
    match l.strip_prefix('{') {
        Some(rest) if l.ends_with('}') => {
            let sep = if rest.trim_start().starts_with('}') {
                ""
            } else {
                ","
            };
            format!("{{\"process\":{i}{sep}{rest}")
        }
        _ => format!("[process {i}] {l}"),
    }
}

/// Follow process `i`'s log: it is up once it prints its admin address (after "listening");
/// what it printed before is kept (returned) and shown only for process 0's first start (its
/// settings table) or when it dies before listening. Later lines are forwarded, prefixed.
async fn watch_stderr(
    st: Arc<State>,
    i: usize,
    pid: u32,
    stderr: tokio::process::ChildStderr,
    first: bool,
) -> Vec<String> {
    let mut lines = BufReader::new(stderr).lines();
    let mut head = Vec::new();
    let mut up = false;
    while let Ok(Some(l)) = lines.next_line().await {
        if up {
            say!("{}", tag_line(i, &l));
            continue;
        }
        if let Some(rest) = l.split("admin on http://").nth(1) {
            let addr = rest.split('/').next().and_then(|a| a.parse().ok());
            {
                let mut slots = st.slots.lock().unwrap();
                // Not if it was reaped meanwhile (the line was still in the pipe).
                if slots[i].pid == Some(pid) {
                    slots[i].admin = addr;
                    slots[i].up = true;
                }
            }
            up = true;
            st.bump();
            if st.started.load(Relaxed) {
                say!("wstune serve: process {i} is up again (pid {pid})");
            }
            continue;
        }
        if l.contains("listening on ") {
            continue;
        }
        if i == 0 && first {
            say!("{l}");
        }
        head.push(l);
    }
    head
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
    let texts = fetch_all(st, "/metrics").await;
    let got: Vec<String> = texts.iter().flatten().cloned().collect();
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

/// The admin addresses of the processes that are up, by index.
fn up_admins(st: &State) -> Vec<(usize, SocketAddr)> {
    st.slots
        .lock()
        .unwrap()
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.up_admin().map(|a| (i, a)))
        .collect()
}

/// The supervisor's side of the channels API (see `serve_admin`).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_log_lines_stay_json_with_the_process_added() {
        assert_eq!(
            tag_line(3, r#"{"level":"INFO","msg":"x"}"#),
            r#"{"process":3,"level":"INFO","msg":"x"}"#
        );
        assert_eq!(tag_line(0, "{}"), r#"{"process":0}"#);
        assert_eq!(tag_line(2, "plain text"), "[process 2] plain text");
        let v: serde_json::Value = serde_json::from_str(&tag_line(5, r#"{"a":1}"#)).unwrap();
        assert_eq!(v["process"], 5);
    }

    #[test]
    fn restart_backoff_doubles_from_100_ms_to_5_s() {
        let ms: Vec<u128> = (0..8).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(backoff(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn per_process_connections_come_from_the_metrics_text() {
        let t = "# TYPE ws_connections gauge\nws_connections 12\nws_connections_x 3\n";
        assert_eq!(connections_in(t), Some(12));
        assert_eq!(connections_in("nothing"), None);
    }
}
