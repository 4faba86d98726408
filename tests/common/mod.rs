//! What the integration test binaries share: the binary, a server started on free ports, and
//! processes that are reaped when a test ends (even when it fails).
#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader};
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

/// A child process killed and reaped on drop.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
