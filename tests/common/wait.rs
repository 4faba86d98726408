//! Waiting for an event, never for a fixed time: each wait is bounded, and a wait that runs out
//! panics naming what never came (a port, a file, a process's exit, a caller's condition).

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Poll `f` until it gives a value; None after `timeout` (for a caller that reports the
/// timeout itself, with what it saw last). The first retries come after 10 ms, later ones up
/// to 250 ms apart: quick when the event is near, light on a 2-core machine when it is not.
pub fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Poll `f` (see [`poll`]) until it gives a value; panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll(timeout, f).unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Poll `ok` (see [`poll`]) until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    wait_for(what, timeout, || ok().then_some(()))
}

/// Wait until 127.0.0.1:`port` accepts a connection (`what` listens there).
pub fn wait_port(port: u16, timeout: Duration, what: &str) {
    wait_until(&format!("{what} to accept on port {port}"), timeout, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
}

/// Wait until `child` exits by itself: its status; panics naming `what` after `timeout`.
pub fn wait_exit(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    wait_for(&format!("{what} to exit"), timeout, || {
        child.try_wait().unwrap()
    })
}

/// Send `sig` (`-TERM`, `-KILL`, ...) to `pid` with kill(1); panics when kill fails (the
/// process is already gone).
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} {pid}: {st}");
}

/// Run `cmd` to completion within `limit` (stdout and stderr captured), or kill it and fail
/// the test with what it wrote: a command that blocks or never ends must not hang the suite.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    // Drain both pipes while waiting, so a chatty child cannot block on a full one.
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = poll(limit, || child.try_wait().unwrap());
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let o = Output {
        status: status.unwrap_or_else(|| child.wait().unwrap()),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "{cmd:?} ran past {limit:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Wait until `path` exists and is not empty.
pub fn wait_file(path: &Path, timeout: Duration) {
    wait_until(
        &format!("{} to be written", path.display()),
        timeout,
        || std::fs::metadata(path).is_ok_and(|m| m.len() > 0),
    )
}
