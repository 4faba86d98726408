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
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod prefix;

use prefix::{ok, Wine};

const TCPIP: &str = r"HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters";

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
