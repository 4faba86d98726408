//! Rolling restarts of `serve --processes N` (SIGHUP, SIGUSR2) under a steady stream of new
//! connections, and systemd socket activation (LISTEN_FDS): the listening sockets outlive the
//! processes that accept on them, so no connection is refused or reset.
#![cfg(target_os = "linux")]

use crate::common;

use common::Served;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn healthz(admin: u16) -> serde_json::Value {
    serde_json::from_str(common::body(&common::get(admin, "/healthz"))).unwrap()
}

fn pids(admin: u16) -> Vec<u64> {
    healthz(admin)["process"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap_or(0))
        .collect()
}

/// Wait (bounded) until every process is up with a pid none of `old` had, and no roll runs.
fn wait_replaced(admin: u16, old: &[u64]) -> Vec<u64> {
    let mut last = serde_json::Value::Null;
    common::poll(Duration::from_secs(60), || {
        last = healthz(admin);
        let procs = last["process"].as_array()?;
        let done = last["rolling_restart"] == false
            && procs.iter().all(|p| {
                p["state"] == "up" && p["pid"].as_u64().is_some_and(|pid| !old.contains(&pid))
            });
        done.then(|| procs.iter().map(|p| p["pid"].as_u64().unwrap()).collect())
    })
    .unwrap_or_else(|| panic!("the processes {old:?} were never all replaced: {last:#}"))
}

fn rolls(admin: u16, result: &str) -> f64 {
    common::Admin::on(admin).metric(&format!(
        "ws_supervisor_rolling_restarts_total{{result=\"{result}\"}}"
    ))
}

/// A steady stream of new connections: `loops` clients each connecting, completing the
/// WebSocket upgrade and closing, again and again, until stopped. Every failure is kept, with
/// what failed.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl Load {
    fn start(port: u16, loops: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let url = format!("ws://127.0.0.1:{port}/");
        let tasks = (0..loops)
            .map(|_| {
                let (stop, ok, failures, url) =
                    (stop.clone(), ok.clone(), failures.clone(), url.clone());
                tokio::spawn(async move {
                    while !stop.load(Relaxed) {
                        let c = tokio_tungstenite::connect_async(url.as_str());
                        match tokio::time::timeout(Duration::from_secs(10), c).await {
                            Ok(Ok((mut ws, _))) => {
                                ok.fetch_add(1, Relaxed);
                                let _ = ws.close(None).await;
                            }
                            Ok(Err(e)) => failures.lock().unwrap().push(format!("{e}")),
                            Err(_) => failures
                                .lock()
                                .unwrap()
                                .push("no upgrade within 10 s".into()),
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failures,
            tasks,
            started: Instant::now(),
        }
    }

    /// Stop; (upgrades completed, per second, failures).
    async fn finish(self) -> (u64, f64, Vec<String>) {
        self.stop.store(true, Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let ok = self.ok.load(Relaxed);
        let rate = ok as f64 / self.started.elapsed().as_secs_f64();
        (ok, rate, self.failures.lock().unwrap().clone())
    }
}

/// SIGHUP (three times) replaces both processes one at a time while hundreds of connections a second
/// arrive: each replacement accepts on the socket its predecessor accepted on (the
/// supervisor's, inherited), so the accept queue is never closed and not one connection is
/// refused, reset or left without its upgrade. With each process binding its own SO_REUSEPORT
/// socket, closing the old one resets the handshakes queued on it, and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_replaces_every_process_without_refusing_or_resetting_a_connection() {
    let s = common::serve(&["--profile", "10k", "--app", "echo", "--processes", "2"]);
    let before = pids(s.admin);
    // Clients held across the roll: each hears its process's close frame.
    let held: Vec<_> = common::tungstenite::clients(s.port, HELD)
        .await
        .into_iter()
        .map(|mut ws| tokio::spawn(async move { close_code(&mut ws).await }))
        .collect();
    let load = Load::start(s.port, 16);
    // The summed counters, scraped all through the rolls: a replaced process's counts stay
    // in them (a counter that fell back would read as a reset to Prometheus).
    let watch = Counters::watch(s.admin);
    // The stream is steady before the signal.
    assert!(
        common::poll(Duration::from_secs(20), || (load.ok.load(Relaxed) >= 200)
            .then_some(()))
        .is_some(),
        "the connect loop never reached 200 upgrades: {:?}",
        load.failures.lock().unwrap()
    );
    let at_signal = load.ok.load(Relaxed);
    // Three rolls, one after the other: six processes replaced under the stream.
    let mut after = before.clone();
    for _ in 0..3 {
        common::signal(s.pid(), "-HUP");
        after = wait_replaced(s.admin, &after);
    }
    // And a while after the last replacement.
    let settled = load.ok.load(Relaxed);
    common::poll(Duration::from_secs(20), || {
        (load.ok.load(Relaxed) >= settled + 200).then_some(())
    });
    let (ok, rate, failures) = load.finish().await;
    let mut closes = Vec::new();
    for h in held {
        closes.push(h.await.unwrap());
    }
    assert!(
        closes.iter().all(|c| matches!(c, Some(1001 | 1012))),
        "every held client is closed with 1001/1012 by its draining process: {closes:?}"
    );
    // Every close the draining processes sent is in the supervisor's sum, after they are gone.
    let told = closes.iter().filter(|c| **c == Some(1012)).count() as f64;
    let (samples, falls) = watch.finish();
    assert!(
        samples >= 20,
        "the scrapes ran through the rolls: {samples}"
    );
    assert!(
        falls.is_empty(),
        "summed counters fell back during the rolls: {falls:?}"
    );
    let sent = s.metric("ws_closes_sent_total{code=\"1012\"}");
    assert!(
        sent >= told && told >= 1.0,
        "the summed 1012 closes ({sent}) count every one the held clients got ({told})"
    );
    assert!(
        failures.is_empty(),
        "{} of {} connections failed across the restart ({before:?} -> {after:?}): {:?}",
        failures.len(),
        ok + failures.len() as u64,
        &failures[..failures.len().min(20)]
    );
    assert!(
        ok > at_signal + 200,
        "connections went on during the roll: {ok}"
    );
    assert!(rate >= 100.0, "a steady load: {rate:.0} upgrades/s");
    assert_eq!(rolls(s.admin, "completed"), 3.0);
    assert_eq!(s.metric("ws_supervisor_processes_replaced_total"), 6.0);
    // A roll is not a crash: the restart counters stay at 0.
    assert_eq!(healthz(s.admin)["restarts"], 0);
    let log = s.log.lock().unwrap().join("\n");
    assert!(
        log.contains("rolling restart done: 2 processes replaced"),
        "{log}"
    );
}

/// SIGUSR2 runs the binary now at the path the supervisor was started from: a broken one
/// aborts the roll and the old processes keep serving; a working one replaces them. A second
/// restart signal during a roll is refused, not interleaved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr2_upgrades_to_the_binary_at_the_started_path_and_a_broken_one_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("wstune");
    std::os::unix::fs::symlink(common::bin(), &link).unwrap();
    let s = serve_from(&link, &["--shutdown-grace", "3"]);
    let before = pids(s.admin);

    // The "upgrade" is a binary that cannot serve.
    let broken = common::Script::sh()
        .line("echo 'cannot start' >&2")
        .line("exit 1")
        .write(dir.path(), "broken");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&broken, &link).unwrap();
    common::signal(s.pid(), "-USR2");
    common::poll(Duration::from_secs(30), || {
        (rolls(s.admin, "aborted") == 1.0).then_some(())
    })
    .expect("the roll to a broken binary was never aborted");
    assert_eq!(pids(s.admin), before, "the old processes keep serving");
    assert_eq!(healthz(s.admin)["up"], 2);
    let log = s.log.lock().unwrap().join("\n");
    assert!(
        log.contains("rolling restart aborted at process 0"),
        "{log}"
    );
    assert!(
        log.contains("cannot start"),
        "the replacement's last words: {log}"
    );

    // A working binary at the path: the roll goes through. A client that never answers the
    // close keeps the first replaced process draining (its grace, 3 s), and a SIGHUP meanwhile
    // is refused.
    let mut slow = raw_upgrade(s.port).await;
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(common::bin(), &link).unwrap();
    common::signal(s.pid(), "-USR2");
    common::poll(Duration::from_secs(10), || {
        (healthz(s.admin)["rolling_restart"] == true).then_some(())
    })
    .expect("the roll never started");
    common::signal(s.pid(), "-HUP");
    common::poll(Duration::from_secs(10), || {
        (rolls(s.admin, "refused") == 1.0).then_some(())
    })
    .expect("a SIGHUP during a roll was not refused");
    wait_replaced(s.admin, &before);
    assert_eq!(rolls(s.admin, "completed"), 1.0);
    let log = s.log.lock().unwrap().join("\n");
    assert!(
        log.contains("SIGHUP refused: a rolling restart is already running"),
        "{log}"
    );
    use tokio::io::AsyncReadExt;
    let _ = slow.read(&mut [0; 64]).await;
}

/// Summed counters scraped from the supervisor every 50 ms until stopped, with every time one
/// fell below an earlier scrape.
struct Counters {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

impl Counters {
    const NAMES: [&'static str; 3] = [
        "ws_closes_sent_total{code=\"1012\"}",
        "ws_handshakes_accepted_total",
        "ws_messages_out_total",
    ];

    fn watch(admin: u16) -> Counters {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut samples, mut falls, mut high) = (0, Vec::new(), [0.0f64; 3]);
            while !halt.load(Relaxed) {
                let text = common::body(&common::get(admin, "/metrics")).to_string();
                for (i, name) in Self::NAMES.iter().enumerate() {
                    let v = text
                        .lines()
                        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                        .unwrap_or(0.0);
                    if v < high[i] {
                        falls.push(format!("{name} {} -> {v}", high[i]));
                    }
                    high[i] = high[i].max(v);
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            (samples, falls)
        });
        Counters { stop, thread }
    }

    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Relaxed);
        self.thread.join().unwrap()
    }
}

/// Connections held open across the rolls in the SIGHUP test.
const HELD: usize = 300;

/// The code of the close frame `ws` receives next (messages skipped; reading answers the
/// close, so its process's drain ends), None when the connection ends without one.
async fn close_code(ws: &mut common::tungstenite::Ws) -> Option<u16> {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next()).await {
            Ok(Some(Ok(Message::Close(c)))) => return c.map(|c| c.code.into()),
            Ok(Some(Ok(_))) => continue,
            _ => return None,
        }
    }
}

/// `wstune serve --processes 2` started through `path` (argv[0]).
fn serve_from(path: &std::path::Path, extra: &[&str]) -> Served {
    let mut args = vec!["--profile", "10k", "--app", "echo", "--processes", "2"];
    args.extend_from_slice(extra);
    common::serve_command(Command::new(path), &args, &[])
}

/// A client that completes the upgrade and then never reads again (so never answers a close).
async fn raw_upgrade(port: u16) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    c.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut b = [0; 256];
        let n = c.read(&mut b).await.unwrap();
        assert!(n > 0, "closed before the upgrade");
        got.extend_from_slice(&b[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    c
}

/// systemd socket activation: the test creates and listens on the socket, passes it as fd 3
/// with LISTEN_FDS=1 and LISTEN_PID (set in the child, as systemd does), and `serve` (one
/// process, and a supervisor whose processes share it) accepts on it without binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_activation_serves_on_the_inherited_socket() {
    for processes in ["1", "2"] {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        // LISTEN_PID is the pid of the process that reads it: sh's own ($$), kept by exec.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "LISTEN_PID=$$ exec \"$@\"", "sh"])
            .arg(common::bin())
            .env("LISTEN_FDS", "1")
            .env("LISTEN_FDNAMES", "wstune");
        // SAFETY: dup2 and fcntl only (async-signal-safe), between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // fd 3, inheritable (a dup2 onto itself would keep close-on-exec).
                let r = if fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, 3)
                };
                if r < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let s = common::serve_command(
            cmd,
            &[
                "--profile",
                "10k",
                "--app",
                "echo",
                "--admin",
                "off",
                // Not the socket's port: the inherited socket wins over --port.
                "--port",
                "1",
                "--processes",
                processes,
            ],
            &[],
        );
        drop(l);
        assert_eq!(s.port, port, "it listens on the inherited socket");
        let mut ws = common::tungstenite::clients(port, 1).await.remove(0);
        use futures_util::SinkExt;
        ws.send(tokio_tungstenite::tungstenite::Message::text("hi"))
            .await
            .unwrap();
        assert_eq!(
            common::tungstenite::next_text(&mut ws).await.as_deref(),
            Some("hi")
        );
        let log = s.log.lock().unwrap().join("\n");
        assert!(!log.contains("error"), "{log}");
    }
}

/// Every child of `pid` now (its threads' `children` lists: the supervisor forks from one).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let p = t.unwrap().path().join("children");
        let text = std::fs::read_to_string(p).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    out
}

fn running(pid: u32) -> bool {
    // Gone, or a zombie: either way it no longer runs.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Per-process connection counts from the supervisor's /healthz.
fn connections(admin: u16) -> Vec<u64> {
    healthz(admin)["process"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["connections"].as_u64().unwrap_or(0))
        .collect()
}

/// A client that never answers a close, held by process 0 (the kernel picks the process by
/// the connection's hash: one that lands elsewhere is dropped and another made).
async fn slow_client_on_process_0(admin: u16, port: u16) -> tokio::net::TcpStream {
    for _ in 0..64 {
        let c = raw_upgrade(port).await;
        let per = common::poll(Duration::from_secs(10), || {
            let per = connections(admin);
            (per.iter().sum::<u64>() == 1).then_some(per)
        })
        .expect("the connection never showed in /healthz");
        if per[0] == 1 {
            return c;
        }
        drop(c);
        common::poll(Duration::from_secs(10), || {
            (connections(admin).iter().sum::<u64>() == 0).then_some(())
        })
        .expect("a dropped connection stayed counted");
    }
    panic!("64 connections in a row landed on process 1");
}

/// SIGTERM while a roll runs, with the replaced process 0 still draining (a client that never
/// answers its close holds it for its grace): the supervisor waits for that process too, not
/// only for the slots' own, and exits with none left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_roll_waits_for_the_draining_process_too() {
    let mut s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "echo",
        "--processes",
        "2",
        "--shutdown-grace",
        "3",
    ]);
    let before = pids(s.admin);
    let _slow = slow_client_on_process_0(s.admin, s.port).await;
    common::signal(s.pid(), "-HUP");
    // Slot 0 has its replacement; its old process drains.
    common::poll(Duration::from_secs(30), || {
        let p = pids(s.admin);
        (p[0] != before[0] && p[0] != 0).then_some(())
    })
    .expect("slot 0 was never replaced");
    assert!(running(before[0] as u32), "the old process 0 drains");
    let all = children(s.pid());
    common::signal(s.pid(), "-TERM");
    let status = common::poll(Duration::from_secs(30), || s.proc.0.try_wait().unwrap())
        .expect("the supervisor did not exit");
    assert!(status.success(), "{status}");
    // Checked at once: the supervisor reaps every process before it exits.
    let left: Vec<u32> = all.into_iter().filter(|p| running(*p)).collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(!running(before[0] as u32));
}
