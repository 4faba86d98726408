//! wstune.exe itself, run under Wine: the live Windows backend (registry reads and writes
//! through the Win32 API, the journal in %ProgramData%\wstune, the apply lock) against Wine's
//! real registry, which no other test reaches.
//!
//! Needs `wine` (Debian: wine64 + wine), x86_64-w64-mingw32-gcc, and wstune.exe built first:
//! `cargo build --target x86_64-pc-windows-gnu --features failpoints` (what .ci/run does). Each
//! test gets a fresh WINEPREFIX of its own (a copy of one pristine prefix made once by
//! `wineboot`, which takes ~10 s; the copy takes well under one), and stops that prefix's
//! wineserver when it ends: nothing is shared between tests and nothing touches ~/.wine.
//!
//! What Wine cannot show: a non-administrator (Wine runs every program elevated; the access
//! denied path is a unit test in src/host/windows_errors.rs), vendor NIC drivers' RSS keywords
//! (Wine has no adapter class keys; the fixtures in tests/fixtures/windows-* cover them), and
//! real Windows TCP performance.

use crate::common;

use common::{finding, run_bounded as bounded};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const TCPIP: &str = r"HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters";

/// What every test shares: the .exe (with the ProcessPrng shim beside it) and the pristine
/// prefix each test copies.
struct Setup {
    exe: PathBuf,
    template: PathBuf,
}

static SETUP: OnceLock<Result<Setup, String>> = OnceLock::new();

/// The shared setup, or None after recording why the group is skipped (a failure under CI).
fn setup() -> Option<&'static Setup> {
    match SETUP.get_or_init(prepare) {
        Ok(s) => Some(s),
        Err(why) => {
            common::skip("wine", why);
            None
        }
    }
}

fn target_dir() -> PathBuf {
    // CARGO_BIN_EXE_wstune is TARGET/debug/wstune (or TARGET/release/wstune).
    Path::new(common::bin())
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in a target directory")
        .to_path_buf()
}

fn prepare() -> Result<Setup, String> {
    let version = Command::new("wine")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .ok_or("wine is not installed (apt-get install wine64 wine)")?;
    let exe = match std::env::var_os("WSTUNE_EXE") {
        Some(p) => PathBuf::from(p),
        None => target_dir().join("x86_64-pc-windows-gnu/debug/wstune.exe"),
    };
    if !exe.is_file() {
        return Err(format!(
            "{} is not built: run `cargo build --target x86_64-pc-windows-gnu --features failpoints` first (or set WSTUNE_EXE)",
            exe.display()
        ));
    }
    build_shim(exe.parent().unwrap())?;
    let template = template_prefix(&version)?;
    Ok(Setup { exe, template })
}

/// tests/wine/processprng.c as bcryptprimitives.dll beside the .exe (see that file for why).
fn build_shim(dir: &Path) -> Result<(), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wine/processprng.c");
    let dll = dir.join("bcryptprimitives.dll");
    // A unique name, then a rename: a concurrent test run never loads half a DLL.
    let tmp = dir.join(format!("bcryptprimitives.{}.tmp", std::process::id()));
    let o = Command::new("x86_64-w64-mingw32-gcc")
        .args(["-shared", "-O2", "-s", "-o"])
        .arg(&tmp)
        .arg(&src)
        .arg("-ladvapi32")
        .output()
        .map_err(|e| {
            format!("x86_64-w64-mingw32-gcc: {e} (apt-get install gcc-mingw-w64-x86-64)")
        })?;
    if !o.status.success() {
        return Err(format!(
            "cannot build the ProcessPrng shim: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    std::fs::rename(&tmp, &dll).map_err(|e| format!("{}: {e}", dll.display()))
}

/// One pristine prefix per Wine version, made once and kept in the target directory.
fn template_prefix(version: &str) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wine");
    let name: String = version
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let template = root.join(format!("template-{name}"));
    if template.join("system.reg").is_file() {
        return Ok(template);
    }
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    let building = root.join(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let started = Instant::now();
    let o = bounded(
        wine_env(Command::new("wine").args(["wineboot", "--init"]), &building),
        Duration::from_secs(180),
    );
    // wineboot returns before wineserver has saved the registry: wait for that.
    let _ = wine_env(Command::new("wineserver").arg("-w"), &building).status();
    if !o.status.success() || !building.join("system.reg").is_file() {
        return Err(format!(
            "wineboot --init failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    eprintln!(
        "made the pristine Wine prefix {} in {:.1} s",
        template.display(),
        started.elapsed().as_secs_f64()
    );
    // Another test binary may have made it meanwhile: either copy is as good.
    if std::fs::rename(&building, &template).is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    Ok(template)
}

/// The environment every Wine process of a test gets: its own prefix, no debug chatter, no
/// Mono/Gecko installer dialogs, our ProcessPrng DLL preferred to Wine's, and no display.
fn wine_env<'a>(cmd: &'a mut Command, prefix: &Path) -> &'a mut Command {
    cmd.env("WINEPREFIX", prefix)
        .env("WINEDEBUG", "-all")
        .env("WINEDLLOVERRIDES", "mscoree,mshtml=;bcryptprimitives=n,b")
        .env("NO_COLOR", "1")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .stdin(Stdio::null())
}

/// A fresh Windows for one test: a copy of the template prefix, its wineserver stopped on drop.
struct Wine {
    dir: tempfile::TempDir,
    exe: PathBuf,
}

impl Wine {
    fn new() -> Option<Wine> {
        let s = setup()?;
        let dir = tempfile::Builder::new()
            .prefix("wineprefix-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let prefix = dir.path().join("pfx");
        // Hard links for the ~700 MB of DLLs Wine never writes; real copies of the registry
        // hives, which it rewrites (so the template is never changed through a link).
        let o = Command::new("cp")
            .arg("-al")
            .arg(&s.template)
            .arg(&prefix)
            .output()
            .unwrap();
        assert!(o.status.success(), "cp -al: {}", common::stderr(&o));
        for hive in ["system.reg", "user.reg", "userdef.reg"] {
            let p = prefix.join(hive);
            let bytes = std::fs::read(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            std::fs::write(&p, bytes).unwrap();
        }
        Some(Wine {
            dir,
            exe: s.exe.clone(),
        })
    }

    fn prefix(&self) -> PathBuf {
        self.dir.path().join("pfx")
    }

    /// `wine PROGRAM ARGS`, run in the prefix's C:\ (so relative paths land there). Never in a
    /// host directory: the current drive would be Z:, which is the host's `/`, and a rooted
    /// path such as `\var\lib\wstune` would reach the host's own /var/lib/wstune.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("wine");
        wine_env(&mut c, &self.prefix())
            .arg(program)
            .current_dir(self.prefix().join("drive_c"));
        c
    }

    fn wstune(&self, args: &[&str]) -> Output {
        self.wstune_env(args, &[])
    }

    fn wstune_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd(self.exe.to_str().unwrap());
        c.args(args).envs(env.iter().copied());
        bounded(&mut c, Duration::from_secs(120))
    }

    /// `wine reg query KEY /v VALUE`: `Some((type, data))`, or None when the value is absent.
    fn reg_query(&self, key: &str, value: &str) -> Option<(String, String)> {
        let o = bounded(
            self.cmd("reg").args(["query", key, "/v", value]),
            Duration::from_secs(60),
        );
        if !o.status.success() {
            return None;
        }
        let out = common::stdout(&o);
        out.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == value).then(|| {
                let kind = w.next().unwrap_or_default().to_string();
                (kind, w.collect::<Vec<_>>().join(" "))
            })
        })
    }

    fn reg_add_dword(&self, key: &str, value: &str, data: u32) {
        let o = bounded(
            self.cmd("reg").args([
                "add",
                key,
                "/v",
                value,
                "/t",
                "REG_DWORD",
                "/d",
                &data.to_string(),
                "/f",
            ]),
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "reg add: {}", common::stderr(&o));
    }

    fn reg_add_sz(&self, key: &str, value: &str, data: &str) {
        let o = bounded(
            self.cmd("reg")
                .args(["add", key, "/v", value, "/t", "REG_SZ", "/d", data, "/f"]),
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "reg add: {}", common::stderr(&o));
    }

    /// `wine reg export KEY`: the key's whole subtree, as regedit would save it.
    fn reg_export(&self, key: &str, name: &str) -> Vec<u8> {
        let o = bounded(
            self.cmd("reg").args(["export", key, name, "/y"]),
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "reg export: {}", common::stderr(&o));
        std::fs::read(self.prefix().join("drive_c").join(name)).unwrap()
    }

    /// C:\ProgramData\wstune\journal as seen from Linux.
    fn journal_dir(&self) -> PathBuf {
        self.prefix().join("drive_c/ProgramData/wstune/journal")
    }

    fn check_json(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let mut all = vec!["check", "-f", "json"];
        all.extend_from_slice(args);
        let o = self.wstune(&all);
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "wstune.exe check: not JSON ({e}): {}\n{}",
                common::stdout(&o),
                common::stderr(&o)
            )
        });
        (common::code(&o), v)
    }
}

/// `wstune.exe serve` running under Wine, with the ports it printed; killed on drop (and its
/// prefix's wineserver with the test's [`Wine`]).
struct WineServer {
    _proc: common::Kill,
    port: u16,
    /// Every stderr line up to the admin line: the settings table.
    head: Vec<String>,
}

impl Wine {
    fn serve(&self, args: &[&str]) -> WineServer {
        let mut c = self.cmd(self.exe.to_str().unwrap());
        c.args(["serve", "--port", "0", "--admin", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = common::Kill(c.spawn().unwrap());
        let err = child.0.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut head = Vec::new();
            let mut lines = BufReader::new(err).lines().map_while(Result::ok);
            for line in lines.by_ref() {
                let admin = line.contains("admin on http://");
                head.push(line);
                if admin {
                    let _ = tx.send(Ok(head));
                    // Keep draining so the server never blocks on a full pipe.
                    for _ in lines {}
                    return;
                }
            }
            let _ = tx.send(Err(head));
        });
        let head = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(head)) => head,
            Ok(Err(head)) => panic!("wstune.exe serve stopped before listening: {head:#?}"),
            Err(_) => panic!("wstune.exe serve did not listen within 120 s"),
        };
        let port = head
            .iter()
            .find_map(|l| l.split("listening on ws://127.0.0.1:").nth(1))
            .and_then(|r| r.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| panic!("no listening line: {head:#?}"));
        WineServer {
            _proc: child,
            port,
            head,
        }
    }

    /// The Windows process id of the (only) process named `image`, from `wmic` (Wine has no
    /// working tasklist; wmic prints UTF-16).
    fn windows_pid(&self, image: &str) -> u32 {
        let o = bounded(
            self.cmd("wmic").args(["process", "get", "Name,ProcessId"]),
            Duration::from_secs(60),
        );
        let units: Vec<u16> = o
            .stdout
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let text = String::from_utf16_lossy(&units);
        text.lines()
            .find_map(|l| {
                let mut w = l.trim_start_matches('\u{feff}').split_whitespace();
                (w.next()? == image)
                    .then(|| w.next()?.parse().ok())
                    .flatten()
            })
            .unwrap_or_else(|| panic!("no {image} in wmic's list: {text}"))
    }
}

impl Drop for Wine {
    fn drop(&mut self) {
        // Stop this prefix's wineserver (and anything still running in it) before its
        // directory goes away.
        let _ = wine_env(Command::new("wineserver").arg("-k"), &self.prefix()).status();
    }
}

fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        common::stdout(o),
        common::stderr(o)
    );
    common::stdout(o)
}

/// The whole cycle on Wine's registry: check, apply (one value created, one changed), check
/// again, a second apply that plans nothing, rollback, and the key byte for byte as it was.
#[test]
fn apply_and_rollback_restore_wines_registry_exactly() {
    let _area = common::area("windows_wine");
    let Some(w) = Wine::new() else { return };
    // An operator had set SYN-ACK retries to 5; TcpTimedWaitDelay is absent (120 s built in).
    w.reg_add_dword(TCPIP, "TcpMaxConnectResponseRetransmissions", 5);
    assert_eq!(w.reg_query(TCPIP, "TcpTimedWaitDelay"), None);
    let before = w.reg_export(TCPIP, "before.reg");

    let (_, r) = w.check_json(&["--profile", "100k"]);
    assert_eq!(r["host"]["platform"], "windows", "{}", r["host"]);
    let tw = finding(&r, "windows.tcpip.tcp_timed_wait_delay");
    assert_eq!(tw["status"], "warn", "{tw:#}");
    assert_eq!(tw["current"], 120, "the built-in default: {tw:#}");
    let syn = finding(&r, "windows.tcpip.tcp_max_connect_response_retransmissions");
    assert_eq!(syn["current"], 5, "{syn:#}");
    assert_eq!(syn["status"], "warn", "{syn:#}");

    let out = ok(&w.wstune(&["apply", "--profile", "100k", "--yes"]));
    assert!(out.contains("TcpTimedWaitDelay"), "{out}");
    // What Windows itself now reports, as REG_DWORDs at the documented path.
    assert_eq!(
        w.reg_query(TCPIP, "TcpTimedWaitDelay"),
        Some(("REG_DWORD".into(), "0x1e".into()))
    );
    assert_eq!(
        w.reg_query(TCPIP, "TcpMaxConnectResponseRetransmissions"),
        Some(("REG_DWORD".into(), "0x2".into()))
    );
    // The journal is where Windows keeps service state, not in a /var tree under C:.
    let entries: Vec<_> = std::fs::read_dir(w.journal_dir())
        .unwrap_or_else(|e| panic!("{}: {e}", w.journal_dir().display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .collect();
    assert_eq!(entries.len(), 1, "one journal entry");
    assert!(!w.prefix().join("drive_c/var").exists());

    let (_, r) = w.check_json(&["--profile", "100k"]);
    for id in [
        "windows.tcpip.tcp_timed_wait_delay",
        "windows.tcpip.tcp_max_connect_response_retransmissions",
    ] {
        assert_eq!(finding(&r, id)["status"], "pass", "{:#}", finding(&r, id));
    }
    let again = ok(&w.wstune(&["apply", "--profile", "100k", "--yes"]));
    assert!(again.contains("Nothing to change"), "{again}");

    ok(&w.wstune(&["rollback", "--yes"]));
    // Deleted, not set to 0 or 120; and the old 5 is back.
    assert_eq!(w.reg_query(TCPIP, "TcpTimedWaitDelay"), None);
    assert_eq!(
        w.reg_query(TCPIP, "TcpMaxConnectResponseRetransmissions"),
        Some(("REG_DWORD".into(), "0x5".into()))
    );
    let after = w.reg_export(TCPIP, "after.reg");
    assert!(
        before == after,
        "the exported key differs after rollback:\n{}\n---\n{}",
        String::from_utf8_lossy(&before),
        String::from_utf8_lossy(&after)
    );
}

/// A network adapter's RSS keywords under its class key, as a driver's INF writes them: apply
/// --nic sets *RSS, *RSSProfile and *NumRssQueues through the Win32 registry API, says the
/// adapter restarts (Wine has no adapter to restart, and says so), and rollback leaves the key
/// byte for byte as it was.
#[test]
fn apply_sets_an_adapters_rss_keywords_and_rollback_restores_the_class_key_exactly() {
    let _area = common::area("windows_wine");
    let Some(w) = Wine::new() else { return };
    let key =
        r"HKLM\SYSTEM\CurrentControlSet\Control\Class\{4d36e972-e325-11ce-bfc1-08002be10318}\0007";
    let nic = "wstune Test Adapter";
    w.reg_add_sz(key, "DriverDesc", nic);
    w.reg_add_sz(key, "*RSS", "0");
    // NUMAScaling, set by an older tuning script: the built-in profiles want NUMAScalingStatic.
    w.reg_add_sz(key, "*RSSProfile", "3");
    w.reg_add_sz(key, "*NumRssQueues", "1");
    let before = w.reg_export(key, "nic-before.reg");

    let (_, r) = w.check_json(&["--profile", "100k"]);
    let rss = finding(&r, &format!("windows.nic.rss_enabled[{nic}]"));
    assert_eq!(rss["current"], 0, "{rss:#}");
    let out = ok(&w.wstune(&["apply", "--profile", "100k", "--nic", nic, "--yes"]));
    assert!(
        out.contains("the adapter restarts after its keywords are written"),
        "{out}"
    );
    assert!(
        out.contains(&format!("adapter {nic} could not be restarted here")),
        "{out}"
    );
    assert_eq!(
        w.reg_query(key, "*RSS"),
        Some(("REG_SZ".into(), "1".into()))
    );
    // NUMAScalingStatic, the profile's (and the drivers' default), as its number.
    assert_eq!(
        w.reg_query(key, "*RSSProfile"),
        Some(("REG_SZ".into(), "4".into()))
    );
    let cpus = finding(&r, "windows.host.cpus")["current"]
        .as_i64()
        .unwrap();
    let queues = cpus.clamp(1, 8).max(1);
    assert_eq!(
        w.reg_query(key, "*NumRssQueues"),
        Some(("REG_SZ".into(), queues.to_string())),
        "one queue per processor, at most 8"
    );
    let (_, after_apply) = w.check_json(&["--profile", "100k"]);
    for id in ["rss_enabled", "rss_profile", "rss_queues"] {
        let f = finding(&after_apply, &format!("windows.nic.{id}[{nic}]"));
        assert_eq!(f["status"], "pass", "{f:#}");
    }
    ok(&w.wstune(&["rollback", "--yes"]));
    let after = w.reg_export(key, "nic-after.reg");
    assert!(
        before == after,
        "the adapter's key differs after rollback:\n{}\n---\n{}",
        String::from_utf8_lossy(&before),
        String::from_utf8_lossy(&after)
    );
}

/// An apply killed between its two registry writes leaves a pending entry; check fails on it
/// and one rollback returns to the state before the apply, as on Linux (tests/commands/journal/interrupted.rs).
#[test]
fn an_apply_killed_midway_is_recovered_by_rollback() {
    let _area = common::area("windows_wine");
    let Some(w) = Wine::new() else { return };
    w.reg_add_dword(TCPIP, "TcpMaxConnectResponseRetransmissions", 5);
    let before = w.reg_export(TCPIP, "before.reg");

    let mut c = w.cmd(w.exe.to_str().unwrap());
    c.args(["apply", "--profile", "100k", "--yes"])
        .env("WSTUNE_FAILPOINT", "apply-pause-after=1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = common::Kill(c.spawn().unwrap());
    wait_for_line(&mut child.0, "failpoint: paused after action 1");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // One of the two values was written when it died.
    let changed = [
        w.reg_query(TCPIP, "TcpTimedWaitDelay").is_some(),
        w.reg_query(TCPIP, "TcpMaxConnectResponseRetransmissions")
            == Some(("REG_DWORD".into(), "0x2".into())),
    ];
    assert_eq!(changed.iter().filter(|c| **c).count(), 1, "{changed:?}");

    let (code, r) = w.check_json(&["--profile", "100k"]);
    assert_eq!(code, 2, "a pending entry fails check");
    let p = finding(&r, "wstune.journal.pending");
    assert_eq!(p["status"], "fail", "{p:#}");

    ok(&w.wstune(&["rollback", "--yes"]));
    assert_eq!(w.reg_export(TCPIP, "after.reg"), before);
}

fn wait_for_line(child: &mut Child, needle: &str) {
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_string();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains(&needle) {
                let _ = tx.send(Ok(()));
                return;
            }
            seen.push(line);
        }
        let _ = tx.send(Err(seen.join("\n")));
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Ok(())) => {}
        Ok(Err(seen)) => panic!("wstune.exe ended before the failpoint: {seen}"),
        Err(_) => panic!("no failpoint within 120 s"),
    }
}

/// What Wine answers through the Windows API behind the host facts is this machine's own
/// processors and memory; what it does not implement (netsh's dynamic port range, adapter class
/// keys with RSS keywords, GetProcessHandleCount, a stub answering 0) is a skip with the reason,
/// never a pass: those checks are judged on the fixtures (tests/commands/windows.rs).
#[test]
fn check_reads_host_facts_through_the_windows_api() {
    let _area = common::area("windows_wine");
    let Some(w) = Wine::new() else { return };
    let (_, r) = w.check_json(&["--profile", "100k"]);
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(finding(&r, "windows.host.cpus")["current"], cpus as u64);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let mem = finding(&r, "windows.host.memory")["current"]
        .as_u64()
        .unwrap();
    assert!(
        mem.abs_diff(kib * 1024) < kib * 1024 / 50,
        "GlobalMemoryStatusEx {mem} vs MemTotal {} KiB",
        kib
    );
    for id in [
        "windows.tcpip.dynamic_port_range",
        "windows.tcpip.dynamic_port_count",
    ] {
        let f = finding(&r, id);
        assert_eq!(
            f["status"], "skip",
            "Wine's netsh has no dynamicport: {f:#}"
        );
        assert!(f["note"]
            .as_str()
            .unwrap()
            .contains("netsh int ipv4 show dynamicport tcp"));
    }
    assert_eq!(finding(&r, "windows.nic.rss_enabled")["status"], "skip");

    // --pid names a Windows process: a running server is found, its handle count (0 from Wine's
    // stub) is not judged; a PID that does not exist is refused in Windows terms.
    let _srv = w.serve(&[]);
    let pid = w.windows_pid("wstune.exe").to_string();
    let (_, r) = w.check_json(&["--profile", "100k", "--pid", &pid]);
    let h = finding(&r, "windows.process.handles");
    assert_eq!(h["status"], "skip", "{h:#}");
    assert!(h["note"].as_str().unwrap().contains("answered 0"), "{h:#}");
    let o = w.wstune(&["check", "--pid", "99999"]);
    assert_eq!(common::code(&o), 3);
    assert!(
        common::stderr(&o).contains("--pid 99999: no such process on this host")
            && common::stderr(&o).contains("Get-Process"),
        "{}",
        common::stderr(&o)
    );
}

/// The embedded server as wstune.exe, on Wine's IOCP (mio), driven from Linux by three
/// independent clients: tokio-tungstenite, Python `websockets` (plain and permessage-deflate),
/// and the Linux `wstune selftest` at a size Wine carries in seconds.
#[test]
fn serve_under_wine_answers_linux_clients() {
    let _area = common::area("windows_wine");
    let Some(w) = Wine::new() else { return };
    let srv = w.serve(&["--profile", "10k"]);
    let table = srv.head.join("\n");
    assert!(
        table.contains("IOCP threads (= io workers)") && table.contains("TCP_NODELAY"),
        "the Windows settings are in the table: {table}"
    );
    let url = format!("ws://127.0.0.1:{}/", srv.port);

    // tokio-tungstenite: 100 pipelined text messages come back in order, and a binary message
    // larger than --fragment (65536) comes back whole.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let (mut ws, _) = tokio::time::timeout(
            Duration::from_secs(30),
            tokio_tungstenite::connect_async(&url),
        )
        .await
        .expect("connect within 30 s")
        .unwrap();
        for i in 0..100 {
            ws.send(Message::text(format!("message {i}")))
                .await
                .unwrap();
        }
        let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        ws.send(Message::binary(big.clone())).await.unwrap();
        let mut texts = Vec::new();
        let mut binary = None;
        while binary.is_none() {
            match tokio::time::timeout(Duration::from_secs(30), ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => texts.push(t.to_string()),
                Ok(Some(Ok(Message::Binary(b)))) => binary = Some(b.to_vec()),
                Ok(Some(Ok(_))) => {}
                other => panic!("no echo: {other:?}"),
            }
        }
        let want: Vec<String> = (0..100).map(|i| format!("message {i}")).collect();
        assert_eq!(texts, want);
        assert!(
            binary == Some(big),
            "the 70,000-byte message came back whole"
        );
        ws.close(None).await.unwrap();
    });

    // Python websockets, without and with permessage-deflate.
    let script = r#"
import asyncio, json, sys, websockets
async def main(url):
    for compression in (None, "deflate"):
        async with websockets.connect(url, compression=compression, max_size=2**24) as ws:
            ext = ws.response.headers.get("Sec-WebSocket-Extensions", "")
            msgs = [json.dumps({"seq": i, "data": "x" * 4000}) for i in range(50)]
            for m in msgs:
                await ws.send(m)
            got = [await asyncio.wait_for(ws.recv(), 30) for _ in msgs]
            print(compression, "ext=" + ext, "ok" if got == msgs else "MISMATCH")
asyncio.run(main(sys.argv[1]))
"#;
    let o = bounded(
        Command::new("python3").args(["-c", script, &url]),
        Duration::from_secs(120),
    );
    let out = common::stdout(&o);
    if common::stderr(&o).contains("No module named 'websockets'") {
        common::skip(
            "python-websockets",
            "pip install -r tests/requirements.txt for the websockets interop tests",
        );
        return;
    }
    assert!(o.status.success(), "{out}{}", common::stderr(&o));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("None ext= ok"), "{out}");
    assert!(
        lines[1].starts_with("deflate ext=permessage-deflate") && lines[1].ends_with(" ok"),
        "{out}"
    );

    // The Linux self-test against the Windows server: open-loop echo and a connect storm.
    let o = bounded(
        Command::new(common::bin()).args([
            "selftest",
            "--url",
            &url,
            "--profile",
            "10k",
            "--conns",
            "50",
            "--rate",
            "5",
            "--secs",
            "2",
            "--scenario",
            "echo-rate",
            "--scenario",
            "storm",
            "--format",
            "json",
        ]),
        Duration::from_secs(180),
    );
    let r = common::json_of(&o);
    for s in r["scenarios"].as_array().unwrap() {
        let name = s["scenario"].as_str().unwrap();
        assert_eq!(s["conns_connected"], 50, "{name}: {s:#}");
        assert_eq!(s["errors"], 0, "{name}: {s:#}");
        assert_eq!(s["disconnects"], 0, "{name}: {s:#}");
    }
    let echo = common::element(&r["scenarios"], "scenario", "echo-rate");
    assert_eq!(echo["offered_rate"], 250.0);
    assert!(
        echo["latency_ms"]["count"].as_u64().unwrap() >= 400,
        "{echo:#}"
    );
}

/// The `watch` JSON frames `wstune.exe` printed, each checked against the frame's schema.
fn watch_frames(o: &Output) -> Vec<serde_json::Value> {
    let out = ok(o);
    let frames: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // Against docs/watch-frame.schema.json, which the Linux frames are checked against too.
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/watch-frame.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    for f in &frames {
        assert_eq!(f["schema"], "wstune.watch/1", "{f:#}");
        let errors: Vec<String> = v
            .iter_errors(f)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}\n{f}");
    }
    frames
}

/// `watch` on Windows: the listeners and connections from IP Helper's TCP table (IPv4 and
/// IPv6), the MIB-II counters from GetTcpStatisticsEx, and what Windows has not (Linux's
/// TcpExt counters, accept queues, softirq time, conntrack) as unavailable, never as 0.
///
/// Wine's GetExtendedTcpTable answers from the host's own /proc/net/tcp and tcp6, so Linux
/// listeners opened here appear in it. What Wine cannot provide, and the test asserts shown as
/// unavailable: the dynamic port range (its netsh has no `show dynamicport`, so the ports per
/// destination cannot be judged), a process's handle count (GetProcessHandleCount answers 0)
/// and the owning process of a socket (every row says pid 0, so `--pid` cannot tie
/// listeners); GetTcpStatisticsEx2 is missing too (GetTcpStatisticsEx stands in).
#[test]
fn watch_under_wine_reads_the_tcp_table_and_shows_what_windows_lacks_as_unavailable() {
    let _area = common::area("windows_wine");
    let Some(w) = Wine::new() else { return };
    let l4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p4 = l4.local_addr().unwrap().port();
    // One connection, established and not yet accepted: the listener's own count shows it.
    let _c4 = std::net::TcpStream::connect(("127.0.0.1", p4)).unwrap();
    let l6 = std::net::TcpListener::bind("[::1]:0").ok();
    if l6.is_none() {
        eprintln!("note: no IPv6 loopback here: the IPv6 table is read but holds no listener");
    }
    let p6 = l6.as_ref().map(|l| l.local_addr().unwrap().port());
    let mut scope = vec!["--port".to_string(), p4.to_string()];
    if let Some(p) = p6 {
        scope.extend(["--port".to_string(), p.to_string()]);
    }
    let scope: Vec<&str> = scope.iter().map(String::as_str).collect();

    // The ticker: two lines, each listener's queue unavailable (never 0/0), the Linux rows
    // said once in full and then named.
    let mut args = vec!["watch", "--plain", "--count", "2", "--interval", "1"];
    args.extend(&scope);
    let out = ok(&w.wstune(&args));
    let ticks: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(ticks.len(), 2, "{out}");
    for t in &ticks {
        assert!(
            t.contains(&format!("127.0.0.1:{p4} queue unavailable est 1")),
            "{t}"
        );
        if let Some(p) = p6 {
            assert!(t.contains(&format!("[::1]:{p} queue unavailable")), "{t}");
        }
        assert!(!t.contains("queue 0/"), "{t}");
        assert!(!t.contains("orphan 0"), "{t}");
        assert!(
            t.contains("not on Windows: ") && t.contains("TcpExt counters"),
            "{t}"
        );
        assert!(t.contains("ports unavailable (netsh"), "Wine's netsh: {t}");
        assert!(!t.contains("/proc"), "{t}");
    }
    assert_eq!(
        out.matches("  - TcpExt counters unavailable: not on Windows")
            .count(),
        1,
        "{out}"
    );

    // JSON: the same, as the documented frame.
    let mut args = vec![
        "watch",
        "--format",
        "json",
        "--count",
        "2",
        "--interval",
        "1",
    ];
    args.extend(&scope);
    let frames = watch_frames(&w.wstune(&args));
    assert_eq!(frames.len(), 2);
    for f in &frames {
        let listeners = f["listeners"].as_array().unwrap();
        let mut want = vec![format!("127.0.0.1:{p4}")];
        want.extend(p6.map(|p| format!("[::1]:{p}")));
        let mut got: Vec<&str> = listeners
            .iter()
            .map(|l| l["local"].as_str().unwrap())
            .collect();
        // By port, then address: either listener may come first.
        got.sort();
        want.sort();
        assert_eq!(got, want, "{f:#}");
        for l in listeners {
            for k in ["queue", "backlog", "fill"] {
                assert!(l[k].is_null(), "{k} is unavailable, not 0: {l:#}");
            }
            assert_eq!(l["full"], false);
            assert!(l["queue_unavailable"]
                .as_str()
                .unwrap()
                .starts_with("not on Windows"));
        }
        let ours = listeners
            .iter()
            .find(|l| l["local"] == format!("127.0.0.1:{p4}"))
            .unwrap();
        assert_eq!(ours["states"]["established"], 1, "{f:#}");
        // GetTcpStatisticsEx works under Wine: the host's counters, and this test connected.
        let counters = f["counters"].as_array().unwrap();
        let active = counters
            .iter()
            .find(|c| c["name"] == "Tcp.ActiveOpens")
            .unwrap_or_else(|| panic!("{f:#}"));
        assert!(active["total"].as_u64().unwrap() >= 1, "{active}");
        assert!(
            !counters
                .iter()
                .any(|c| c["name"].as_str().unwrap().starts_with("TcpExt.")),
            "Linux's counters are not shown as 0: {counters:#?}"
        );
        assert!(f["cpus"].as_array().unwrap().is_empty());
        assert!(f["ports"].is_null(), "no range, no judgement: {f:#}");
        let u = &f["unavailable"];
        for key in [
            "TcpExt counters",
            "sockstat",
            "orphans",
            "conntrack",
            "file handles",
            "cpu",
        ] {
            assert!(
                u[key]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("not on Windows"),
                "{key}: {u:#}"
            );
        }
        // What Wine cannot provide: the dynamic port range.
        assert!(
            u["ports"]
                .as_str()
                .unwrap()
                .contains("netsh int ipv4 show dynamicport tcp"),
            "{u:#}"
        );
    }

    // --pid: a Windows process's handle count, which Wine cannot give (its
    // GetProcessHandleCount answers 0): unavailable, and no gauge of 0 handles; its
    // listeners cannot be tied to it (Wine names no owners), which the frame says.
    let srv = w.serve(&[]);
    let pid = w.windows_pid("wstune.exe").to_string();
    let port = srv.port.to_string();
    let frames = watch_frames(&w.wstune(&[
        "watch", "--format", "json", "--count", "1", "--pid", &pid, "--port", &port,
    ]));
    let f = &frames[0];
    assert_eq!(f["listeners"][0]["local"], format!("127.0.0.1:{port}"));
    assert!(f["listeners"][0]["queue"].is_null());
    assert_eq!(f["process"]["pid"].to_string(), pid);
    assert!(f["process"].get("handles").is_none(), "{f:#}");
    assert!(
        f["unavailable"]["process handles"]
            .as_str()
            .unwrap()
            .contains("answered 0"),
        "{f:#}"
    );
    assert!(
        !f["gauges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"].as_str().unwrap().contains("handles")),
        "{f:#}"
    );
    assert!(
        f["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("names no owning process")),
        "{f:#}"
    );
}
