//! What the integration test binaries share: the binary, a server started on free ports, and
//! processes that are reaped when a test ends (even when it fails).
#![allow(dead_code)] // each test binary uses its own part

pub mod ws;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_wstune")
}

/// Run wstune to completion.
pub fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run wstune")
}

/// Run wstune to completion, its output laid out for a `COLUMNS`-wide terminal.
pub fn wstune_cols(columns: u16, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env("COLUMNS", columns.to_string())
        .output()
        .expect("run wstune")
}

/// Run wstune to completion, 160 columns wide.
pub fn wstune(args: &[&str]) -> Output {
    wstune_cols(160, args)
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A tree under tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copy a fixture tree (files and directories; no links in fixtures) to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Asserts that two trees hold the same files with the same contents (`diff -r`).
pub fn assert_same_tree(a: &Path, b: &Path) {
    let o = Command::new("diff")
        .args(["-r", a.to_str().unwrap(), b.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "trees differ:\n{}", stdout(&o));
}

/// A child process killed and reaped on drop.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A redis-server on 127.0.0.1:`port` (no persistence), once it accepts connections; None (a
/// recorded skip) where redis-server is not installed.
pub fn redis(port: u16) -> Option<Kill> {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        skip("redis", "redis-server is not installed");
        return None;
    };
    let k = Kill(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "redis-server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(k)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `wstune serve`.
pub struct Served {
    pub proc: Kill,
    pub port: u16,
    /// The admin port, unless started with `--admin off`.
    pub admin: u16,
    /// Every stderr line up to "listening" (the settings table).
    pub head: Vec<String>,
}

/// Start `wstune serve ARGS` and wait until it listens. Without `--port`/`--admin` in ARGS it
/// takes free ports (`--port 0 --admin 127.0.0.1:0`).
pub fn serve(args: &[&str]) -> Served {
    let mut cmd = Command::new(bin());
    cmd.arg("serve");
    if !args.contains(&"--port") {
        cmd.args(["--port", "0"]);
    }
    if !args.contains(&"--admin") {
        cmd.args(["--admin", "127.0.0.1:0"]);
    }
    let admin_off = args.windows(2).any(|w| w == ["--admin", "off"]);
    let mut child = cmd
        .args(args)
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start wstune serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut port, mut admin, mut head) = (0, 0, Vec::new());
    while port == 0 || (admin == 0 && !admin_off) {
        let l = match lines.next() {
            Some(Ok(l)) => l,
            _ => panic!("wstune serve {args:?} stopped before listening: {head:#?}"),
        };
        if let Some(r) = l.split("listening on ws://127.0.0.1:").nth(1) {
            port = r.trim_end_matches('/').parse().unwrap();
        }
        if let Some(r) = l.split("admin on http://127.0.0.1:").nth(1) {
            admin = r.split('/').next().unwrap().parse().unwrap();
        }
        head.push(l);
    }
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served {
        proc: Kill(child),
        port,
        admin,
        head,
    }
}

/// A self-signed certificate and key for localhost under `dir` (openssl), as (cert, key).
/// None, with a message, when openssl is missing; CI installs it, so there it is an error.
pub fn self_signed_cert(dir: &std::path::Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output();
    if made.as_ref().is_ok_and(|o| o.status.success()) {
        return Some((cert, key));
    }
    assert!(
        std::env::var("CI").is_err(),
        "CI must have openssl to make a test certificate"
    );
    eprintln!("skipped: no openssl");
    None
}

/// A run's stdout as JSON; panics with both outputs when it is not.
pub fn json_of(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The element of the JSON array `list` whose `key` is `value` (a finding by id, a scenario by
/// name); panics naming what is missing.
pub fn element<'a>(list: &'a serde_json::Value, key: &str, value: &str) -> &'a serde_json::Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .find(|e| e[key] == value)
        .unwrap_or_else(|| panic!("no {key} {value} in {list:#}"))
}

/// Runs `script` (bash) inside fresh network and mount namespaces, with `$WSTUNE` naming the
/// binary: sysctls written there are the namespace's own, never the host's. None (a recorded
/// skip) when this machine cannot make namespaces (not root); in CI that is a failure.
pub fn in_netns(script: &str) -> Option<Output> {
    let o = Command::new("unshare")
        .args(["--net", "--mount", "bash", "-c", script])
        .env("WSTUNE", bin())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "160")
        .output();
    match o {
        Ok(o)
            if o.status.success()
                || !String::from_utf8_lossy(&o.stderr).contains("unshare failed") =>
        {
            Some(o)
        }
        _ => {
            skip(
                "namespaces",
                "cannot create a network namespace here (run as root)",
            );
            None
        }
    }
}

/// A group of tests that cannot run on this machine (a tool not installed, not root). In CI a
/// skip is an error: `.ci/run` installs everything, so a skip there would hide a missing install
/// step. Elsewhere the test returns early, and the group is recorded so that the last test
/// binary of the run (`tests/zz_skip_summary.rs`) names it, with the command that would run it.
pub fn skip(group: &str, why: &str) {
    assert!(
        std::env::var("CI").is_err(),
        "CI must be able to run the {group} tests: {why} (see .ci/run)"
    );
    record_skip(group, why);
}

/// Like [`skip`], for what no install step can provide (a kernel feature): never an error in CI.
pub fn record_skip(group: &str, why: &str) {
    eprintln!("skipped: {why}");
    let dir = skip_dir(std::os::unix::process::parent_id());
    let name: String = group
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // Best effort: a summary that misses a group must never fail the test that skipped.
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(name), format!("{group}: {why}"));
}

/// Where the skips of one `cargo test` run are recorded: every test binary of a run is a child
/// of the same cargo process, so its pid tells this run from an earlier one.
pub fn skip_dir(cargo_pid: u32) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("skipped")
        .join(cargo_pid.to_string())
}
