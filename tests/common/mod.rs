//! What the integration test binaries share, and the only place a test helper is defined
//! (docs/internals/testing.md). Here: the binary and its output, a server started on free
//! ports, processes reaped when a test ends (even when it fails), check reports, network
//! namespaces, and skips (a failure under `CI`). Beside it, a file per idea: wait.rs (bounded
//! waits on an event, never a fixed sleep), http.rs (plain HTTP), admin.rs (a server's admin
//! endpoint and its metrics: `Admin`), tree.rs (fixture trees and their scratch copies:
//! `Tree::from_fixture`), script.rs (wrapper scripts: `Script`), ws.rs (a raw WebSocket
//! client), tungstenite.rs (async clients through tokio-tungstenite).
#![allow(dead_code)] // each test binary uses its own part

pub mod admin;
pub mod http;
pub mod script;
pub mod tree;
pub mod tungstenite;
pub mod wait;
pub mod ws;

// At the top, as they were before they had files of their own; a binary that uses none of them
// must not warn.
pub use http::*;
pub use wait::*;
#[allow(unused_imports)]
pub use {
    admin::Admin,
    script::Script,
    tree::{assert_same_tree, copy_dir, fixture, Tree},
};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    wait_port(port, Duration::from_secs(10), "redis-server");
    Some(k)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `wstune serve`, killed on drop.
pub struct Served {
    pub proc: Kill,
    pub port: u16,
    /// The admin port, unless started with `--admin off`.
    pub admin: u16,
    /// Every stderr line up to "listening" (the settings table).
    pub head: Vec<String>,
    /// Every stderr line so far (the head included): a thread keeps reading it, so the server
    /// never blocks on a full pipe.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    pub fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/", self.port)
    }

    /// The whole response to `GET path` on the admin port.
    pub fn get(&self, path: &str) -> String {
        get(self.admin, path)
    }

    /// The admin endpoint's client (unless started with `--admin off`).
    pub fn admin_api(&self) -> Admin {
        Admin::on(self.admin)
    }

    /// One series of the admin endpoint's /metrics (see [`Admin::metric`]).
    pub fn metric(&self, name: &str) -> f64 {
        self.admin_api().metric(name)
    }

    /// Asserts that the series `name` satisfies `ok` now (see [`Admin::assert_metric`]).
    pub fn assert_metric(&self, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
        self.admin_api().assert_metric(name, ok)
    }

    /// Asserts each `(series, value)` in one scrape (see [`Admin::assert_metrics`]).
    pub fn assert_metrics(&self, expected: &[(&str, f64)]) {
        self.admin_api().assert_metrics(expected)
    }

    /// Wait until the metric `name` satisfies `ok` (see [`Admin::wait_metric`]).
    pub fn wait_metric(&self, name: &str, timeout: Duration, ok: impl Fn(f64) -> bool) -> f64 {
        self.admin_api().wait_metric(name, timeout, ok)
    }

    /// The server's resident memory (VmRSS) in KiB.
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Every stderr line so far, one per line.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Wait (bounded) until the stderr lines so far satisfy `ok`: their text.
    pub fn wait_log(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&[String]) -> bool,
    ) -> String {
        poll(timeout, || {
            let log = self.log.lock().unwrap();
            ok(&log).then(|| log.join("\n"))
        })
        .unwrap_or_else(|| {
            panic!(
                "timed out after {timeout:?} waiting for {what} in the server's log:\n{}",
                self.log_text()
            )
        })
    }

    /// Wait (bounded) for the server to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        wait_exit(&mut self.proc.0, timeout, "wstune serve")
    }
}

/// Start `wstune serve ARGS` and wait (at most 60 s) until it listens. Without
/// `--port`/`--admin` in ARGS it takes free ports (`--port 0 --admin 127.0.0.1:0`).
pub fn serve(args: &[&str]) -> Served {
    serve_env(args, &[])
}

/// [`serve`] with environment variables set (`Some`) or removed (`None`), e.g. `RUST_LOG`.
pub fn serve_env(args: &[&str], env: &[(&str, Option<&str>)]) -> Served {
    serve_command(Command::new(bin()), args, env)
}

/// [`serve`] under an open-file limit of `nofile` (soft and hard), to reach the server's
/// descriptor limit with a few hundred connections.
#[cfg(unix)]
pub fn serve_nofile(nofile: u64, args: &[&str]) -> Served {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: nofile as libc::rlim_t,
                rlim_max: nofile as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    serve_command(cmd, args, &[])
}

/// [`serve`] through `cmd` (another path to the binary, a wrapper that execs it): `serve`
/// and `args` are appended.
pub fn serve_command(mut cmd: Command, args: &[&str], env: &[(&str, Option<&str>)]) -> Served {
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
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
    let stderr = child.stderr.take().unwrap();
    let proc = Kill(child);
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = log.clone();
    // Keeps reading to the end, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            l2.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
    let (mut port, mut admin, mut head) = (0, 0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while port == 0 || (admin == 0 && !admin_off) {
        let l = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|e| {
                panic!("wstune serve {args:?} did not start listening ({e}): {head:#?}")
            });
        if let Some(r) = l
            .split("listening on ws://127.0.0.1:")
            .nth(1)
            .or_else(|| l.split("listening on wss://127.0.0.1:").nth(1))
        {
            port = r.trim_end_matches('/').parse().unwrap();
        }
        if let Some(r) = l.split("admin on http://127.0.0.1:").nth(1) {
            admin = r.split('/').next().unwrap().parse().unwrap();
        }
        head.push(l);
    }
    Served {
        proc,
        port,
        admin,
        head,
        log,
    }
}

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `wstune serve ARGS` over TLS, with a fresh self-signed certificate for localhost: the
/// server, the certificate (for clients to trust) and the directory holding both (keep it
/// while the server runs). None (a recorded skip) when openssl is missing.
pub fn serve_tls(args: &[&str]) -> Option<(Served, std::path::PathBuf, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_cert(dir.path())?;
    let tls = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let srv = serve(&[&tls[..], args].concat());
    Some((srv, cert, dir))
}

/// A self-signed certificate and key for localhost under `dir` (openssl), as (cert, key).
/// None (a recorded skip) when openssl is missing; CI installs it, so there it is an error.
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
    skip(
        "openssl",
        "no openssl to make a test certificate (apt-get install openssl)",
    );
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

/// The finding `id` in a check report's `results`; panics naming it when missing.
pub fn finding<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    element(&report["results"], "id", id)
}

/// `wstune check --root ROOT -f json EXTRA...`: (exit code, the report).
pub fn check_json(root: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["check", "--root", root.to_str().unwrap(), "-f", "json"];
    args.extend_from_slice(extra);
    let o = wstune(&args);
    (code(&o), json_of(&o))
}

/// The bash that runs tests/scripts/NAME inside a namespace (see [`in_netns`]) after
/// journal_lib.sh (the scratch --prefix, shielded globals, `state`), with `env` (`K=V ...`,
/// may be empty) set for it.
pub fn lib_script(name: &str, env: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts");
    format!(
        "source {} && {env} source {}",
        dir.join("journal_lib.sh").display(),
        dir.join(name).display()
    )
}

/// The lines of a run's stdout that start with `tag` (a namespace script's STEP, ERR, ...).
pub fn tagged(o: &Output, tag: &str) -> Vec<String> {
    stdout(o)
        .lines()
        .filter(|l| l.starts_with(tag))
        .map(str::to_string)
        .collect()
}

/// The first line tagged `tag`; panics with both outputs when there is none.
pub fn tagged_line(o: &Output, tag: &str) -> String {
    tagged(o, tag)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no line {tag} in:\n{}\nstderr:\n{}", stdout(o), stderr(o)))
}

/// The rest of the first line tagged `tag`, base64-decoded (a script's way to hand back a
/// whole file on one line).
pub fn tagged_base64(o: &Output, tag: &str) -> String {
    use base64::Engine as _;
    let line = tagged_line(o, tag);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line.trim_start_matches(tag).trim())
        .unwrap_or_else(|e| panic!("{tag} is not base64 ({e}): {line}"));
    String::from_utf8(bytes).unwrap()
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

/// The area (a tests/*.rs module) a test belongs to, held for the test's length: tests of one
/// area run side by side, as libtest runs them, but never beside another area's. The binaries
/// whose tests load the machine or measure it (tests/measured/main.rs, tests/heavy/main.rs) group
/// several areas, and a probe's p99 or a soak's RSS must not carry another area's load; each of
/// their tests starts with `let _area = common::area("NAME");`.
pub fn area(name: &'static str) -> AreaGuard {
    let (lock, turn) = &AREAS;
    let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
    while state.0.is_some_and(|holder| holder != name) {
        state = turn.wait(state).unwrap_or_else(|e| e.into_inner());
    }
    state.0 = Some(name);
    state.1 += 1;
    AreaGuard
}

/// The area running now and how many of its tests hold it; the condition wakes the others.
static AREAS: (
    std::sync::Mutex<(Option<&'static str>, usize)>,
    std::sync::Condvar,
) = (std::sync::Mutex::new((None, 0)), std::sync::Condvar::new());

/// Held while a test of an area runs (see [`area`]); a failed test's guard is dropped while
/// it unwinds, so the next area still runs.
pub struct AreaGuard;

impl Drop for AreaGuard {
    fn drop(&mut self) {
        let (lock, turn) = &AREAS;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        state.1 -= 1;
        if state.1 == 0 {
            state.0 = None;
            turn.notify_all();
        }
    }
}

/// A group of tests that cannot run on this machine (a tool not installed, not root). In CI a
/// skip is an error: `.ci/run` installs everything, so a skip there would hide a missing install
/// step. Elsewhere the test returns early, and the group is named again when its test binary
/// exits (see [`record_skip`]), with the command that would run it.
pub fn skip(group: &str, why: &str) {
    assert!(
        std::env::var("CI").is_err(),
        "CI must be able to run the {group} tests: {why} (see .ci/run)"
    );
    record_skip(group, why);
}

/// The groups this test binary skipped, with why.
static SKIPPED: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Like [`skip`], but never an error in CI: only for what CI neither installs nor has (today the
/// docker CLI). A kernel feature CI's kernel has (schedstat, namespaces) uses [`skip`], so CI can
/// never go green by skipping a test it could have run.
///
/// libtest hides a passing test's output, so the skipped groups are also printed once when the
/// test binary exits (an `atexit` hook): each binary names its own, whatever order the binaries
/// or their tests run in (cargo test, nextest, one test by name).
pub fn record_skip(group: &str, why: &str) {
    eprintln!("skipped: {why}");
    static HOOK: std::sync::Once = std::sync::Once::new();
    // SAFETY: atexit takes a plain function that runs once, after main, in this process.
    HOOK.call_once(|| unsafe {
        libc::atexit(print_skipped);
    });
    SKIPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(group.to_string(), why.to_string());
}

extern "C" fn print_skipped() {
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    let groups: Vec<String> = skipped
        .iter()
        .map(|(g, why)| format!("{g}: {why}"))
        .collect();
    // stderr is unbuffered; a closed one loses the line, never the exit status.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped test groups in this binary ({}): {}. Run `bash .ci/run` as root to install what they need and run every test.",
        groups.len(),
        groups.join("; ")
    );
}

/// `n` bytes that no compressor can shrink and that parse as nothing in particular
/// (xorshift64 from `seed`; no dependency needed).
pub fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// The headless browser on this machine (CI installs `chromium`), None where there is none.
pub fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Headless `browser` on `page` in a window of `size` ("1280,900"), with a profile of its
/// own: `mode` is `--dump-dom` or `--screenshot=FILE`.
pub fn chromium_on(browser: &str, page: &Path, size: &str, mode: &str) -> Output {
    let (mut cmd, _profile) = chromium_command(browser, page, size, mode, &[]);
    cmd.output().expect("run chromium")
}

/// The headless Chromium command of [`chromium_on`], with `extra` flags, and the profile
/// directory it uses (keep it until the browser has run).
pub fn chromium_command(
    browser: &str,
    page: &Path,
    size: &str,
    mode: &str,
    extra: &[&str],
) -> (Command, tempfile::TempDir) {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .args(extra)
    .args([
        &format!("--window-size={size}"),
        mode,
        &format!("--user-data-dir={}", profile.path().display()),
        &format!("file://{}", page.display()),
    ]);
    (cmd, profile)
}

/// What a probe page wrote in its title (`K=V` words, numbers), read from headless
/// Chromium's `--dump-dom`: the title and a lookup that fails the test naming a missing key.
pub fn chromium_title(browser: &str, probe: &Path, size: &str) -> (String, impl Fn(&str) -> u32) {
    let o = chromium_on(browser, probe, size, "--dump-dom");
    let dom = String::from_utf8_lossy(&o.stdout);
    let title = dom
        .split("<title>")
        .nth(1)
        .and_then(|t| t.split("</title>").next())
        .unwrap_or_else(|| panic!("no title in the DOM: {dom}"))
        .to_string();
    let t = title.clone();
    let field = move |k: &str| -> u32 {
        t.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {t:?}"))
    };
    (title, field)
}
