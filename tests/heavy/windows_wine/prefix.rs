//! The Wine side of the tests: the .exe built once with its ProcessPrng shim, a pristine
//! prefix made once by `wineboot`, and per test a copy of it that the test's [`Wine`] runs
//! wstune.exe, `reg` and the server in, and stops when it is dropped.

use crate::common;

use common::run_bounded as bounded;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What every test shares: the .exe (with the ProcessPrng shim beside it) and the pristine
/// prefix each test copies.
pub(super) struct Setup {
    exe: PathBuf,
    template: PathBuf,
}

static SETUP: OnceLock<Result<Setup, String>> = OnceLock::new();

/// The shared setup, or None after recording why the group is skipped (a failure under CI).
pub(super) fn setup() -> Option<&'static Setup> {
    match SETUP.get_or_init(prepare) {
        Ok(s) => Some(s),
        Err(why) => {
            common::skip("wine", why);
            None
        }
    }
}

pub(super) fn target_dir() -> PathBuf {
    // CARGO_BIN_EXE_wstune is TARGET/debug/wstune (or TARGET/release/wstune).
    Path::new(common::bin())
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in a target directory")
        .to_path_buf()
}

pub(super) fn prepare() -> Result<Setup, String> {
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
pub(super) fn build_shim(dir: &Path) -> Result<(), String> {
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
pub(super) fn template_prefix(version: &str) -> Result<PathBuf, String> {
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
pub(super) fn wine_env<'a>(cmd: &'a mut Command, prefix: &Path) -> &'a mut Command {
    cmd.env("WINEPREFIX", prefix)
        .env("WINEDEBUG", "-all")
        .env("WINEDLLOVERRIDES", "mscoree,mshtml=;bcryptprimitives=n,b")
        .env("NO_COLOR", "1")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .stdin(Stdio::null())
}

/// A fresh Windows for one test: a copy of the template prefix, its wineserver stopped on drop.
pub(super) struct Wine {
    dir: tempfile::TempDir,
    pub(super) exe: PathBuf,
}

impl Wine {
    pub(super) fn new() -> Option<Wine> {
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

    pub(super) fn prefix(&self) -> PathBuf {
        self.dir.path().join("pfx")
    }

    /// `wine PROGRAM ARGS`, run in the prefix's C:\ (so relative paths land there). Never in a
    /// host directory: the current drive would be Z:, which is the host's `/`, and a rooted
    /// path such as `\var\lib\wstune` would reach the host's own /var/lib/wstune.
    pub(super) fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("wine");
        wine_env(&mut c, &self.prefix())
            .arg(program)
            .current_dir(self.prefix().join("drive_c"));
        c
    }

    pub(super) fn wstune(&self, args: &[&str]) -> Output {
        self.wstune_env(args, &[])
    }

    pub(super) fn wstune_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd(self.exe.to_str().unwrap());
        c.args(args).envs(env.iter().copied());
        bounded(&mut c, Duration::from_secs(120))
    }

    /// `wine reg query KEY /v VALUE`: `Some((type, data))`, or None when the value is absent.
    pub(super) fn reg_query(&self, key: &str, value: &str) -> Option<(String, String)> {
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

    pub(super) fn reg_add_dword(&self, key: &str, value: &str, data: u32) {
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

    pub(super) fn reg_add_sz(&self, key: &str, value: &str, data: &str) {
        let o = bounded(
            self.cmd("reg")
                .args(["add", key, "/v", value, "/t", "REG_SZ", "/d", data, "/f"]),
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "reg add: {}", common::stderr(&o));
    }

    /// `wine reg export KEY`: the key's whole subtree, as regedit would save it.
    pub(super) fn reg_export(&self, key: &str, name: &str) -> Vec<u8> {
        let o = bounded(
            self.cmd("reg").args(["export", key, name, "/y"]),
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "reg export: {}", common::stderr(&o));
        std::fs::read(self.prefix().join("drive_c").join(name)).unwrap()
    }

    /// C:\ProgramData\wstune\journal as seen from Linux.
    pub(super) fn journal_dir(&self) -> PathBuf {
        self.prefix().join("drive_c/ProgramData/wstune/journal")
    }

    pub(super) fn check_json(&self, args: &[&str]) -> (i32, serde_json::Value) {
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
pub(super) struct WineServer {
    _proc: common::Kill,
    pub(super) port: u16,
    /// Every stderr line up to the admin line: the settings table.
    pub(super) head: Vec<String>,
}

impl Wine {
    pub(super) fn serve(&self, args: &[&str]) -> WineServer {
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
    pub(super) fn windows_pid(&self, image: &str) -> u32 {
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

pub(super) fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        common::stdout(o),
        common::stderr(o)
    );
    common::stdout(o)
}
