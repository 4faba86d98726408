//! `wstune serve` driven from outside: clients we did not write (tokio-tungstenite, Python
//! `websockets`, headless Chromium), raw TCP for hostile input, the admin endpoints. Every
//! server is the real binary on 127.0.0.1 with a free port. One submodule per idea: `clients`,
//! `hostile`, `backpressure`, `lifecycle`, `deflate`; the helpers they share are here.

use crate::common;

use common::Served;
use std::process::Command;

mod backpressure;
mod clients;
mod deflate;
mod hostile;
mod lifecycle;

/// `wstune serve --profile 10k ARGS` on free ports (see [`common::serve`]).
fn serve_10k(args: &[&str]) -> Served {
    common::serve(&[&["--profile", "10k"], args].concat())
}

/// Run a Python script that uses the `websockets` package; (stdout, stderr), or None (with a
/// note) where the package is missing outside CI. CI installs it (tests/requirements.txt).
fn python_websockets(script: &str, args: &[&str]) -> Option<(String, String)> {
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    if err.contains("No module named 'websockets'") {
        common::skip(
            "python-websockets",
            "pip install -r tests/requirements.txt for the websockets interop tests",
        );
        return None;
    }
    Some((out, err))
}
