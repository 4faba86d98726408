//! `wstune watch` against a real kernel: inside a private network namespace a listener with a
//! backlog of 2 that never accepts overflows under a bounded connect loop, and the three views
//! show it: the full-screen view in a real terminal (tmux, read back with capture-pane), the
//! ticker lines (`--plain`) and the JSON frames (`--format json`, validated against
//! docs/watch-frame.schema.json). Then bad input: a PID that is not there, a port nobody
//! listens on, an admin address that answers HTML, a process whose descriptors the watching
//! user may not read: each a clear note while frames keep coming; and a bad --interval.

use crate::common;

use common::{code, have, run, skip, stderr};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Runs `script` (bash) in fresh network and mount namespaces, bounded in time, with
/// `$WSTUNE` naming the binary and `$OUT` a directory for what the script leaves behind.
/// None (a recorded skip) when a tool it needs is missing or namespaces cannot be made here.
fn netns(script: &str, out: &Path, limit: Duration, tools: &[&str]) -> Option<Output> {
    for tool in tools {
        if !have(tool) {
            skip(tool, &format!("{tool} is not installed"));
            return None;
        }
    }
    let o = common::run_bounded(
        Command::new("unshare")
            .args(["--net", "--mount", "bash", "-c", script])
            .env("WSTUNE", common::bin())
            .env("OUT", out)
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env_remove("TMUX"),
        limit,
    );
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unshare failed") {
        skip(
            "namespaces",
            "cannot create a network namespace here (run as root)",
        );
        return None;
    }
    Some(o)
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// The listener on 127.0.0.1:9001 (backlog 2, never accepts) and a connect loop of about 100
/// handshakes a second for 15 s: once two connections wait, every new SYN is dropped and
/// counted in ListenOverflows. Both end with the script (the trap) or by themselves.
const OVERFLOW: &str = r#"
set -u
ip link set lo up
cleanup() {
  tmux -S "$OUT/tmux.sock" kill-server 2>/dev/null
  kill $(jobs -p) 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT
python3 -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9001))
s.listen(2)
open(sys.argv[1], "w").close()
time.sleep(40)
' "$OUT/listening" >/dev/null 2>&1 &
for _ in $(seq 100); do [ -e "$OUT/listening" ] && break; sleep 0.05; done
[ -e "$OUT/listening" ] || { echo "the listener did not start" >&2; exit 1; }
python3 -c '
import socket, time
end = time.time() + 15
socks = []
while time.time() < end:
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", 9001))
    except BlockingIOError:
        pass
    socks.append(s)
    if len(socks) > 300:
        socks.pop(0).close()
    time.sleep(0.01)
' >/dev/null 2>&1 &
"$WSTUNE" watch --plain --count 5 >"$OUT/plain.txt" 2>"$OUT/plain.err" &
PLAIN=$!
"$WSTUNE" watch --format json --count 5 >"$OUT/json.txt" 2>"$OUT/json.err" &
JSON=$!
# The full-screen view every 3 s: a quit must not wait for the next frame.
tmux -u -S "$OUT/tmux.sock" new-session -d -s watch -x 200 -y 60 \
  "\"$WSTUNE\" watch --interval 3 2>\"$OUT/tui.err\"; echo \"watch exited \$?\"; sleep 20"
for _ in $(seq 60); do
  tmux -S "$OUT/tmux.sock" capture-pane -p -t watch >"$OUT/pane.txt"
  if grep -q FULL "$OUT/pane.txt" && grep -Eq 'TcpExt\.ListenOverflows +[1-9]' "$OUT/pane.txt" \
     && grep -q 'fix: .*net\.core\.somaxconn' "$OUT/pane.txt"; then
    break
  fi
  sleep 0.25
done
# A narrower terminal is laid out again at once (one column: the marks below the counters),
# not at the next frame.
before=$(date +%s%N)
tmux -S "$OUT/tmux.sock" resize-window -t watch -x 100 -y 40
for _ in $(seq 60); do
  tmux -S "$OUT/tmux.sock" capture-pane -p -t watch >"$OUT/resized.txt"
  grep -q '^ Against their marks' "$OUT/resized.txt" && break
  sleep 0.05
done
echo $(( ($(date +%s%N) - before) / 1000000 )) >"$OUT/resize_ms"
before=$(date +%s%N)
tmux -S "$OUT/tmux.sock" send-keys -t watch q
for _ in $(seq 100); do
  tmux -S "$OUT/tmux.sock" capture-pane -p -t watch >"$OUT/after.txt"
  grep -q 'watch exited' "$OUT/after.txt" && break
  sleep 0.05
done
echo $(( ($(date +%s%N) - before) / 1000000 )) >"$OUT/quit_ms"
# A termination signal (kill, a service manager, a closed SSH session) gives the terminal
# back too. `exec` keeps the PID the inner shell wrote.
tmux -u -S "$OUT/tmux.sock" new-session -d -s term -x 120 -y 40 \
  "bash -c 'echo \$\$ >\"$OUT/term.pid\"; exec \"$WSTUNE\" watch --interval 3 2>>\"$OUT/tui.err\"'; echo \"watch exited \$?\"; sleep 20"
for _ in $(seq 100); do
  tmux -S "$OUT/tmux.sock" capture-pane -p -t term >"$OUT/term_before.txt"
  grep -q 'wstune watch' "$OUT/term_before.txt" && [ -s "$OUT/term.pid" ] && break
  sleep 0.05
done
before=$(date +%s%N)
kill -TERM "$(cat "$OUT/term.pid")"
for _ in $(seq 100); do
  tmux -S "$OUT/tmux.sock" capture-pane -p -t term >"$OUT/term_after.txt"
  grep -q 'watch exited' "$OUT/term_after.txt" && break
  sleep 0.05
done
echo $(( ($(date +%s%N) - before) / 1000000 )) >"$OUT/term_ms"
wait $PLAIN $JSON
"#;

#[test]
fn an_overflowing_listener_shows_full_its_overflow_rate_and_the_somaxconn_fix_in_every_view() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let Some(o) = netns(OVERFLOW, out, Duration::from_secs(60), &["tmux", "python3"]) else {
        return;
    };
    let diag = format!(
        "script: {}{}\nstderr of the views: {}{}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o),
        read(out, "plain.err"),
        read(out, "json.err"),
        read(out, "tui.err")
    );
    assert!(o.status.success(), "{diag}");

    // The full-screen view, as the terminal shows it.
    let pane = read(out, "pane.txt");
    let row = |needle: &str| -> String {
        pane.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no row with {needle:?} in the pane:\n{pane}\n{diag}"))
            .to_string()
    };
    let listener = row("127.0.0.1:9001");
    assert!(listener.contains("FULL"), "{listener}\n{pane}");
    let counter = row("TcpExt.ListenOverflows");
    let cols: Vec<&str> = counter.split_whitespace().collect();
    // counter, per second, delta, total, check
    assert!(
        cols.len() >= 4 && cols[1] != "0" && cols[2].starts_with('+'),
        "ListenOverflows has no rate: {counter}\n{pane}"
    );
    assert!(
        pane.contains("● linux.net.core.somaxconn"),
        "the somaxconn check is not named:\n{pane}"
    );
    assert!(
        pane.lines()
            .any(|l| l.contains("fix:") && l.contains("net.core.somaxconn")),
        "no somaxconn fix in the pane:\n{pane}"
    );
    // A resize is drawn at once, in the narrow layout (frames come every 3 s).
    let resized = read(out, "resized.txt");
    assert!(
        resized
            .lines()
            .any(|l| l.starts_with(" Against their marks"))
            && resized.lines().all(|l| l.chars().count() <= 100)
            && resized.contains("FULL"),
        "not laid out again for 100 columns:\n{resized}"
    );
    let resize_ms: u64 = read(out, "resize_ms").trim().parse().unwrap_or(u64::MAX);
    assert!(
        resize_ms < 1500,
        "the resize took {resize_ms} ms to be drawn"
    );
    // q gives the terminal back at once, not at the next frame (3 s away), and what fired
    // is said on the main screen.
    let after = read(out, "after.txt");
    assert!(
        after.contains("watch exited 0"),
        "after q:\n{after}\n{diag}"
    );
    assert!(
        !after.contains("Kernel counters"),
        "the full-screen view is still on the screen after q:\n{after}"
    );
    assert!(
        after.contains("advice while watching:") && after.contains("linux.net.core.somaxconn"),
        "{after}"
    );
    let quit_ms: u64 = read(out, "quit_ms").trim().parse().unwrap_or(u64::MAX);
    assert!(quit_ms < 1500, "q took {quit_ms} ms to end the view");
    let before = read(out, "term_before.txt");
    assert!(
        before.contains("wstune watch"),
        "the second view never drew:\n{before}\n{diag}"
    );
    let term = read(out, "term_after.txt");
    assert!(
        term.contains("watch exited 0"),
        "after SIGTERM:\n{term}\n{diag}"
    );
    assert!(
        !term.contains("wstune watch "),
        "the full-screen view is still on the screen after SIGTERM:\n{term}"
    );
    let term_ms: u64 = read(out, "term_ms").trim().parse().unwrap_or(u64::MAX);
    assert!(term_ms < 1500, "SIGTERM took {term_ms} ms to end the view");

    // The ticker lines and the advice block below the first line that turned.
    let plain = read(out, "plain.txt");
    assert_eq!(
        plain.lines().filter(|l| !l.starts_with(' ')).count(),
        5,
        "{plain}\n{diag}"
    );
    assert!(
        plain
            .lines()
            .any(|l| l.contains("127.0.0.1:9001 queue") && l.contains("FULL")),
        "{plain}"
    );
    assert!(
        plain
            .lines()
            .any(|l| l.contains("TcpExt.ListenOverflows +") && l.contains("/s)")),
        "{plain}"
    );
    assert!(
        plain.contains("  ! linux.net.core.somaxconn ("),
        "no advice block:\n{plain}"
    );
    assert!(
        plain
            .lines()
            .any(|l| l.starts_with("    fix: ") && l.contains("net.core.somaxconn")),
        "{plain}"
    );

    // The JSON frames: each one parses and validates; one shows the overflow.
    let json = read(out, "json.txt");
    let frames: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(frames.len(), 5, "{json}\n{diag}");
    validate(&frames);
    let overflowing = frames.iter().find(|f| {
        let full = f["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["local"] == "127.0.0.1:9001" && l["full"] == true && l["backlog"] == 2);
        let rate = f["counters"].as_array().unwrap().iter().any(|c| {
            c["name"] == "TcpExt.ListenOverflows"
                && c["per_s"].as_f64().unwrap() > 0.0
                && c["turned"] == true
        });
        full && rate
    });
    let f = overflowing.unwrap_or_else(|| panic!("no frame shows the overflow:\n{json}"));
    let a = f["advice"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "linux.net.core.somaxconn")
        .unwrap_or_else(|| panic!("no somaxconn advice: {f}"));
    assert!(
        a["fix"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x.as_str().unwrap().contains("net.core.somaxconn")),
        "{a}"
    );
    assert!(
        a["what"]
            .as_str()
            .unwrap()
            .contains("accept queue of 127.0.0.1:9001 full"),
        "{a}"
    );
}

fn schema_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/watch-frame.schema.json")
}

/// Every frame against docs/watch-frame.schema.json (JSON Schema 2020-12, checked by the
/// jsonschema crate, not by the code that writes the frames); two frames broken on purpose
/// are refused, so the validation is known to bite.
fn validate(frames: &[serde_json::Value]) {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path()).unwrap()).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let v = jsonschema::draft202012::new(&schema).unwrap();
    for f in frames {
        let errors: Vec<String> = v
            .iter_errors(f)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}\n{f}");
    }
    let mut text_queue = frames[0].clone();
    text_queue["listeners"][0]["queue"] = "3".into();
    assert!(!v.is_valid(&text_queue), "a queue given as text validates");
    let mut no_counters = frames[0].clone();
    no_counters.as_object_mut().unwrap().remove("counters");
    assert!(
        !v.is_valid(&no_counters),
        "a frame without counters validates"
    );
}

/// Each bad input is a note in every frame (or the server's error), and frames keep coming.
const BAD_INPUT: &str = r#"
set -u
ip link set lo up
cleanup() { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
mkdir -p "$OUT/www" && echo '<!DOCTYPE html><title>not metrics</title>' >"$OUT/www/index.html"
python3 -m http.server 8000 --bind 127.0.0.1 --directory "$OUT/www" >/dev/null 2>&1 &
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.05; done
# A process of root's whose descriptors the user nobody may not read, and the binary where
# nobody can run it (a copy, when the build tree is private).
sleep 30 &
ROOTS=$!
AS_NOBODY="setpriv --reuid 65534 --regid 65534 --clear-groups --"
NOBODYS="$WSTUNE"
if ! $AS_NOBODY test -x "$WSTUNE"; then
  chmod 755 "$OUT"
  install -m 755 "$WSTUNE" "$OUT/wstune"
  NOBODYS="$OUT/wstune"
fi
{ "$WSTUNE" watch --plain --count 3 --interval 0.5 --pid 999999 >"$OUT/pid.txt" 2>&1; echo $? >"$OUT/pid.rc"; } &
A=$!
{ "$WSTUNE" watch --plain --count 3 --interval 0.5 --port 9 >"$OUT/port.txt" 2>&1; echo $? >"$OUT/port.rc"; } &
B=$!
{ "$WSTUNE" watch --format json --count 3 --interval 0.5 --admin http://127.0.0.1:8000/ >"$OUT/admin.txt" 2>"$OUT/admin.err"; echo $? >"$OUT/admin.rc"; } &
C=$!
$AS_NOBODY "$NOBODYS" watch --plain --count 3 --interval 0.5 --pid $ROOTS >"$OUT/perm.txt" 2>&1
echo $? >"$OUT/perm.rc"
wait $A $B $C
"#;

#[test]
fn bad_input_is_a_clear_note_while_frames_keep_coming() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let Some(o) = netns(
        BAD_INPUT,
        out,
        Duration::from_secs(60),
        &["python3", "setpriv"],
    ) else {
        return;
    };
    let diag = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let lines = |name: &str| -> Vec<String> {
        assert_eq!(
            read(out, &format!("{name}.rc")).trim(),
            "0",
            "{name}: {}\n{diag}",
            read(out, &format!("{name}.txt"))
        );
        read(out, &format!("{name}.txt"))
            .lines()
            .map(str::to_string)
            .collect()
    };

    let pid = lines("pid");
    assert_eq!(pid.len(), 3, "{pid:?}");
    for l in &pid {
        assert!(
            l.contains("note: process 999999: no such process (it may have exited)"),
            "{l}"
        );
        assert!(
            !l.contains("Run as root"),
            "a missing process is not a permission problem: {l}"
        );
    }

    let port = lines("port");
    assert_eq!(port.len(), 3, "{port:?}");
    for l in &port {
        assert!(
            l.contains("note: nothing listens on TCP port 9 in this network namespace"),
            "{l}"
        );
    }

    let admin = lines("admin");
    assert_eq!(admin.len(), 3, "{admin:?}\n{}", read(out, "admin.err"));
    for l in &admin {
        let f: serde_json::Value = serde_json::from_str(l).unwrap();
        let e = f["server"]["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("http://127.0.0.1:8000/") && e.contains("not the Prometheus text format"),
            "{e}: {f}"
        );
        // The kernel's figures are there all the same.
        assert!(!f["counters"].as_array().unwrap().is_empty(), "{f}");
    }

    let perm = lines("perm");
    assert_eq!(perm.len(), 3, "{perm:?}");
    for l in &perm {
        assert!(
            l.contains("its descriptors cannot be read (permission denied"),
            "{l}"
        );
        assert!(l.contains("CAP_SYS_PTRACE"), "{l}");
    }
}

#[test]
fn an_interval_that_is_zero_or_not_a_number_is_refused_by_name() {
    for (bad, says) in [
        ("0", "0 s is out of range: give 0.2 to 60 seconds"),
        ("abc", "\"abc\" is not a number of seconds"),
    ] {
        let o = run(&["watch", "--plain", "--count", "1", "--interval", bad]);
        assert_eq!(code(&o), 3, "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("--interval") && e.contains(says), "{e}");
        assert!(o.stdout.is_empty(), "a refused watch printed frames");
    }
}

/// Closes the terminal under the full-screen view (its tmux server killed, as a dropped SSH
/// session does) six times, and reports how long each view took to end: "ms" or "stuck".
const HANGUP: &str = r#"
set -u
for round in 1 2 3 4 5 6; do
  rm -f "$OUT/pid"
  tmux -u -S "$OUT/tmux.sock" new-session -d -s hup -x 120 -y 40 \
    "bash -c 'echo \$\$ >\"$OUT/pid\"; exec \"$WSTUNE\" watch --color always'"
  for _ in $(seq 100); do
    tmux -S "$OUT/tmux.sock" capture-pane -p -t hup >"$OUT/pane.txt" 2>/dev/null
    grep -q 'wstune watch' "$OUT/pane.txt" && [ -s "$OUT/pid" ] && break
    sleep 0.05
  done
  pid=$(cat "$OUT/pid")
  sleep 0.$((RANDOM % 10))
  before=$(date +%s%N)
  tmux -S "$OUT/tmux.sock" kill-server
  for _ in $(seq 100); do
    [ -d "/proc/$pid" ] || break
    sleep 0.05
  done
  if [ -d "/proc/$pid" ]; then
    echo stuck
    kill -9 "$pid"
  else
    echo $(( ($(date +%s%N) - before) / 1000000 ))
  fi
done
"#;

/// A full-screen view whose terminal hangs up (a dropped SSH session, a killed tmux) ends by
/// itself: the terminal library read end-of-file in a loop at full CPU, deaf to SIGTERM, until
/// the view looked for the hang-up before every read.
#[test]
fn a_view_whose_terminal_hangs_up_ends_by_itself() {
    if !have("tmux") {
        return skip("tmux", "tmux is not installed");
    }
    let dir = tempfile::tempdir().unwrap();
    let o = common::run_bounded(
        Command::new("bash")
            .args(["-c", HANGUP])
            .env("WSTUNE", common::bin())
            .env("OUT", dir.path())
            .env("LANG", "C.UTF-8")
            .env_remove("TMUX"),
        Duration::from_secs(120),
    );
    let rounds = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(rounds.lines().count(), 6, "{rounds}\n{}", stderr(&o));
    for r in rounds.lines() {
        let ms: u64 = r
            .parse()
            .unwrap_or_else(|_| panic!("a view outlived its terminal:\n{rounds}"));
        // The hang-up is seen within a tenth of a second; the backstop acts after two.
        assert!(ms < 3000, "{ms} ms to end after the hang-up:\n{rounds}");
    }
}
