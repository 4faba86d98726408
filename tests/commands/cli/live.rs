//! `check` on the live host: the fd limit, the table off a terminal, colour, and somaxconn and
//! `--watch` accept-queue overflows inside private network namespaces.

use crate::common;

use super::wstune120;
use common::{bin, code, finding, fixture, json_of, stderr, stdout};
use std::process::Command;

#[test]
fn live_check_fails_the_100k_profile_when_the_fd_limit_is_low() {
    let o = Command::new("bash")
        .args([
            "-c",
            &format!(
                "ulimit -n 10000 && exec {} check --profile 100k -f json",
                bin()
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let r = json_of(&o);
    let hard = finding(&r, "linux.process.nofile.hard");
    assert_eq!(hard["status"], "fail");
    assert_eq!(hard["current"], 10000);
    assert_eq!(hard["target"], 200000);
    assert_eq!(r["host"]["source"], "live");
    assert_eq!(r["profile"]["name"], "100k");
}

#[test]
fn live_table_is_plain_off_a_terminal_and_ends_with_a_summary() {
    let o = wstune120(&["check", "--profile", "10k", "--show", "all"]);
    let out = stdout(&o);
    assert!(
        !out.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
    assert!(
        out.contains("linux.net.core.somaxconn") && out.contains("[per netns]"),
        "{out}"
    );
    let last = out.lines().last().unwrap();
    assert!(
        last.contains(" checks: ") && last.contains(" pass, ") && last.contains(" fail, "),
        "{last}"
    );
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    if Command::new("script").arg("--version").output().is_err() {
        common::skip(
            "terminal",
            "no `script` (util-linux) to give wstune a terminal",
        );
        return;
    }
    let root = fixture("default");
    let cmd = format!("{} check --root {}", bin(), root.display());
    let tty = |no_color: Option<&str>| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    assert!(tty(None).contains("\x1b["), "colour on a terminal");
    assert!(!tty(Some("1")).contains("\x1b["), "NO_COLOR turns it off");
}

#[test]
fn somaxconn_in_a_private_network_namespace_fails_at_4096_and_passes_at_65535() {
    let script = r#"
        echo 4096 > /proc/sys/net/core/somaxconn && "$WSTUNE" check --profile 100k -f json > low.json
        echo "low=$?"
        echo 65535 > /proc/sys/net/core/somaxconn && "$WSTUNE" check --profile 100k -f json > high.json
        echo "high=$?"
        cat low.json; echo '====='; cat high.json
    "#;
    let dir = tempfile::tempdir().unwrap();
    let script = format!("cd {} && {script}", dir.path().display());
    let host_before = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap();
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let out = stdout(&o);
    assert!(out.contains("low=2"), "{out}\n{}", stderr(&o));
    let json_part = &out[out.find('{').unwrap()..];
    let (low, high) = json_part.split_once("=====").unwrap();
    let low: serde_json::Value = serde_json::from_str(low.trim()).unwrap();
    let high: serde_json::Value = serde_json::from_str(high.trim()).unwrap();
    let s = finding(&low, "linux.net.core.somaxconn");
    assert_eq!(
        (
            s["status"].as_str(),
            s["current"].as_i64(),
            s["scope"].as_str()
        ),
        (Some("fail"), Some(4096), Some("netns"))
    );
    assert_eq!(finding(&high, "linux.net.core.somaxconn")["status"], "pass");
    assert_eq!(finding(&high, "linux.net.core.somaxconn")["current"], 65535);
    // The host's own value is untouched: the namespace had its own.
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap(),
        host_before
    );
    // Links come from netlink, so the namespace sees no NIC even though /sys shows the host's.
    let nic = finding(&low, "linux.nic.rx_queues");
    assert_eq!(nic["status"], "skip");
    assert!(
        nic["note"].as_str().unwrap().contains("no physical NIC"),
        "{nic}"
    );
}

#[test]
fn watch_fails_on_accept_queue_overflows_that_happen_during_it() {
    // A listener with backlog 1 that never accepts, and clients that keep connecting while
    // `check --watch 2` waits: ListenOverflows grows in this namespace only.
    let script = r#"
        ip link set lo up || exit 90
        python3 - <<'PY' &
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 47001)); s.listen(1)
clients = []
deadline = time.time() + 4
while time.time() < deadline:
    c = socket.socket(); c.setblocking(False)
    try: c.connect(("127.0.0.1", 47001))
    except BlockingIOError: pass
    clients.append(c); time.sleep(0.02)  # a steady trickle through the whole watch
PY
        # The watch starts once the listener is there (bounded: exit 91 if it never comes).
        timeout 10 bash -c 'until ss -Hltn "sport = :47001" | grep -q .; do sleep 0.05; done' || exit 91
        "$WSTUNE" check --profile 10k --watch 2 -f json
        rc=$?
        wait
        exit $rc
    "#;
    let Some(o) = common::in_netns(script) else {
        return;
    };
    let r = json_of(&o);
    let f = finding(&r, "linux.counter.listen_overflows");
    assert_eq!(f["status"], "fail", "{f}");
    assert!(
        f["note"].as_str().unwrap().starts_with('+')
            && f["note"].as_str().unwrap().ends_with(" in 2 s"),
        "{f}"
    );
    // Counters that did not move pass instead of staying informational.
    assert_eq!(
        finding(&r, "linux.counter.tcp_abort_on_memory")["status"],
        "pass"
    );
    assert_eq!(code(&o), 2);
}
