//! `wstune watch --serve ADDR`: the headless watch. A real Prometheus scrapes it inside a private
//! network namespace while a listener there with a backlog of one overflows under a bounded
//! connect loop; the event log keeps one line per check however long a counter keeps moving;
//! a bad address is refused clearly; a hostile client (an endless head, a trickling one, more
//! connections than the cap) is cut off while the endpoint keeps answering.

use crate::common;

use common::{bin, code, have, stderr, stdout, Kill};
use serde_json::Value as Json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A network namespace held open by a sleeping process: commands enter it with nsenter.
struct Netns {
    holder: Kill,
}

impl Netns {
    /// None (a recorded skip) where namespaces cannot be made (not root).
    fn new(dir: &std::path::Path) -> Option<Netns> {
        let ready = dir.join("netns-ready");
        let child = Command::new("unshare")
            .args(["--net", "sh", "-c"])
            .arg(format!(
                "ip link set lo up && touch {} && exec sleep 600",
                ready.display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let mut holder = Kill(child);
        let up = common::poll(Duration::from_secs(10), || {
            if ready.exists() {
                return Some(true);
            }
            holder.0.try_wait().unwrap().map(|_| false)
        });
        if up != Some(true) {
            let mut err = String::new();
            if let Some(e) = holder.0.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            common::skip(
                "namespaces",
                &format!("cannot create a network namespace here (run as root): {err}"),
            );
            return None;
        }
        Some(Netns { holder })
    }

    /// `args` run inside the namespace.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.holder.0.id().to_string(), "-n", "--"])
            .args(args)
            .env("NO_COLOR", "1");
        c
    }

    /// The status and body of `GET url` from inside the namespace; None while nothing answers.
    fn get(&self, url: &str) -> Option<(u16, String)> {
        let o = self
            .command(&["curl", "-s", "--max-time", "5", "-w", "\n%{http_code}", url])
            .output()
            .ok()?;
        if !o.status.success() {
            return None;
        }
        let out = stdout(&o);
        let (body, status) = out.rsplit_once('\n')?;
        Some((status.trim().parse().ok()?, body.to_string()))
    }

    /// An instant query to the Prometheus at 127.0.0.1:9090 in the namespace: its result.
    fn query(&self, q: &str) -> Option<Vec<Json>> {
        let (status, body) = self.get(&format!(
            "http://127.0.0.1:9090/api/v1/query?query={}",
            urlencode(q)
        ))?;
        if status != 200 {
            return None;
        }
        let v: Json = serde_json::from_str(&body).ok()?;
        assert_eq!(v["status"], "success", "query {q}: {v}");
        v["data"]["result"].as_array().cloned()
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A started watch: its process and the first line it printed (where it serves).
fn first_line(child: &mut Child) -> String {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("watch --serve prints where it serves")
}

/// The value of an instant query's first sample.
fn value(r: &[Json]) -> Option<f64> {
    r.first()?["value"][1].as_str()?.parse().ok()
}

/// The acceptance run: Prometheus scrapes the watch while the listener on :9001 (backlog 1,
/// never accepting) overflows; its HTTP API has the cumulative ListenOverflows counter, a
/// positive rate() of it, the listener's full gauge and the advice firing; /events holds one
/// line for the overflow check however many intervals it fired in; /healthz answers 200; and
/// SIGTERM ends the watch with exit 0.
#[test]
fn prometheus_scrapes_a_served_watch_while_a_listener_overflows() {
    for tool in ["prometheus", "curl", "nsenter", "python3"] {
        if !have(tool) {
            return common::skip(
                "prometheus",
                &format!(
                    "{tool} is not installed (apt-get install prometheus curl util-linux python3)"
                ),
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(ns) = Netns::new(dir.path()) else {
        return;
    };

    // A listener that never accepts, with a backlog of one: its queue fills at the second
    // connection and every later handshake overflows it.
    let _listener = Kill(
        ns.command(&[
            "python3",
            "-c",
            "import socket, time\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('127.0.0.1', 9001)); s.listen(1)\n\
             time.sleep(300)\n",
        ])
        .spawn()
        .unwrap(),
    );

    let mut watch = Kill(
        ns.command(&[
            bin(),
            "watch",
            "--serve",
            "127.0.0.1:9977",
            "--interval",
            "0.5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    let line = first_line(&mut watch.0);
    assert!(
        line.contains("serving http://127.0.0.1:9977/metrics")
            && line.contains("/events")
            && line.contains("/healthz"),
        "{line}"
    );

    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        "global:\n  scrape_interval: 1s\n\
         scrape_configs:\n\
         \x20 - job_name: watch\n    static_configs:\n      - targets: ['127.0.0.1:9977']\n",
    )
    .unwrap();
    let _prometheus = Kill(
        ns.command(&[
            "prometheus",
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            "--web.listen-address=127.0.0.1:9090",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );

    // The connect loop, bounded in time: non-blocking connects, closed in batches so the
    // descriptors stay few, for at most 60 s.
    let _load = Kill(
        ns.command(&[
            "python3",
            "-c",
            "import socket, time\n\
             end = time.time() + 60; held = []\n\
             while time.time() < end:\n\
             \x20   c = socket.socket(); c.setblocking(False); c.connect_ex(('127.0.0.1', 9001)); held.append(c)\n\
             \x20   if len(held) >= 100:\n\
             \x20       [h.close() for h in held]; held = []\n\
             \x20   time.sleep(0.005)\n",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap(),
    );

    // Prometheus parsed every scrape (a malformed exposition fails the scrape: up is 0).
    common::wait_until(
        "Prometheus to scrape the watch",
        Duration::from_secs(90),
        || {
            ns.query("up{job=\"watch\"} == 1")
                .is_some_and(|r| !r.is_empty())
        },
    );
    let total = common::wait_for(
        "ListenOverflows as a counter in Prometheus",
        Duration::from_secs(60),
        || {
            let r = ns.query(
                "wstune_watch_kernel_stat_total{job=\"watch\",name=\"TcpExt.ListenOverflows\"}",
            )?;
            value(&r).filter(|v| *v > 0.0)
        },
    );
    assert!(total > 0.0);
    let rate = common::wait_for(
        "a positive rate() of ListenOverflows",
        Duration::from_secs(60),
        || {
            let r = ns.query(
                "rate(wstune_watch_kernel_stat_total{job=\"watch\",name=\"TcpExt.ListenOverflows\"}[10s])",
            )?;
            value(&r).filter(|v| *v > 0.0)
        },
    );
    assert!(rate > 0.0, "{rate}");
    common::wait_until(
        "the listener's full gauge in Prometheus",
        Duration::from_secs(60),
        || {
            ns.query("wstune_watch_listener_full{listener=\"127.0.0.1:9001\"} == 1")
                .is_some_and(|r| !r.is_empty())
                && ns
                    .query("wstune_watch_listener_backlog{listener=\"127.0.0.1:9001\"} == 1")
                    .is_some_and(|r| !r.is_empty())
        },
    );
    common::wait_until(
        "the overflow advice firing in Prometheus",
        Duration::from_secs(60),
        || {
            ns.query(
                "wstune_watch_advice_active{id=\"linux.counter.listen_overflows\"} == 1 \
                 and on() wstune_watch_advice_intervals_total{id=\"linux.counter.listen_overflows\"} >= 2",
            )
            .is_some_and(|r| !r.is_empty())
        },
    );

    // The event log: the counter keeps moving, the line stays one, its count grows.
    let events = |ns: &Netns| -> Vec<Json> {
        let (status, body) = ns.get("http://127.0.0.1:9977/events").unwrap();
        assert_eq!(status, 200, "{body}");
        body.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let overflow = |ev: &[Json]| -> Vec<Json> {
        ev.iter()
            .filter(|e| e["id"] == "linux.counter.listen_overflows")
            .cloned()
            .collect()
    };
    let first = common::wait_for(
        "the overflow event to count two intervals",
        Duration::from_secs(30),
        || {
            let o = overflow(&events(&ns));
            assert!(o.len() <= 1, "one line per check: {o:?}");
            o.into_iter()
                .next()
                .filter(|e| e["count"].as_u64() >= Some(2))
        },
    );
    let later = common::wait_for(
        "the same event line to count more",
        Duration::from_secs(30),
        || {
            let ev = events(&ns);
            let o = overflow(&ev);
            assert_eq!(o.len(), 1, "one line per check: {ev:?}");
            let e = o.into_iter().next().unwrap();
            (e["count"].as_u64() > first["count"].as_u64()).then_some((e, ev))
        },
    );
    let (e, all) = later;
    assert_eq!(e["first_seen"], first["first_seen"], "{e}");
    assert_ne!(e["last_seen"], first["last_seen"], "{e}");
    assert_eq!(e["title"], "Accept queue overflows", "{e}");
    assert!(
        e["what"]
            .as_str()
            .unwrap()
            .contains("TcpExt.ListenOverflows +"),
        "{e}"
    );
    assert!(!e["fix"].as_array().unwrap().is_empty(), "{e}");
    let mut ids: Vec<&str> = all.iter().map(|e| e["id"].as_str().unwrap()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "one line per check id: {all:?}");
    // The full queue's own check, with the server's backlog named.
    assert!(ids.contains(&"linux.net.core.somaxconn"), "{all:?}");

    let (status, body) = ns.get("http://127.0.0.1:9977/healthz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    common::signal(watch.0.id(), "-TERM");
    let st = common::wait_exit(&mut watch.0, Duration::from_secs(10), "watch after SIGTERM");
    assert!(st.success(), "{st}");
    let mut err = String::new();
    watch
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("stopped by a signal"), "{err}");
}

/// A watch on this host's loopback, on a port the kernel picks; its port and process.
fn watch_on_loopback(extra: &[&str]) -> (u16, Kill) {
    let mut child = Kill(
        Command::new(bin())
            .args(["watch", "--serve", "127.0.0.1:0", "--interval", "0.5"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = first_line(&mut child.0);
    let port = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (port, child)
}

/// A request's status line (the first line of the response).
fn status_of(port: u16, req: &str) -> String {
    common::http(port, req)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The endpoint is bounded against clients that would hold it: a head that never ends is
/// answered 431 and cut off after a few KiB (the client cannot push 64 MiB into it), a head
/// that trickles in is cut off after the head timeout, and connections over the cap are
/// closed at once; meanwhile and afterwards /healthz answers. The exposition passes promtool,
/// unknown paths are 404 and other methods 405.
#[test]
fn a_hostile_client_is_cut_off_and_the_endpoint_keeps_answering() {
    let (port, _watch) = watch_on_loopback(&[]);

    // An endless header line.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let reader = {
        let mut r = s.try_clone().unwrap();
        r.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let _ = r.read_to_end(&mut got);
            String::from_utf8_lossy(&got).into_owned()
        })
    };
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Endless: ")
        .unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let started = Instant::now();
    let mut sent = 0usize;
    let cut = loop {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break true,
        }
        if sent >= 64 << 20 || started.elapsed() > Duration::from_secs(20) {
            break false;
        }
    };
    assert!(
        cut,
        "the server took {sent} bytes of one header line in {:?} without closing",
        started.elapsed()
    );
    let answer = reader.join().unwrap();
    // The 431 may be lost to the reset that closing over unread bytes sends; when it arrives
    // it says why.
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431 "),
        "{answer}"
    );

    // A head that trickles in, one byte at a time, is cut off by the head timeout.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    let closed = loop {
        if slow.write_all(b"X").is_err() {
            break true;
        }
        slow.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 256];
        match slow.read(&mut b) {
            Ok(0) => break true,
            Ok(n) => {
                let r = String::from_utf8_lossy(&b[..n]).into_owned();
                assert!(r.starts_with("HTTP/1.1 408 "), "{r}");
                break true;
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break true,
        }
        if started.elapsed() > Duration::from_secs(20) {
            break false;
        }
    };
    assert!(closed, "a trickling head held a connection for 20 s");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "cut off after {:?}",
        started.elapsed()
    );

    // More idle connections than the cap: the ones over it are closed at once.
    let idle: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let closed_now = idle
        .iter()
        .filter(|c| {
            c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut b = [0u8; 16];
            // A timeout is an open connection; an end or a reset is a closed one.
            match (&**c).read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            }
        })
        .count();
    assert!(
        closed_now >= 64 - 32,
        "{closed_now} of 64 idle connections closed at once"
    );
    drop(idle);

    common::wait_until("/healthz to answer 200", Duration::from_secs(15), || {
        common::try_get_ok(port, "/healthz").is_some_and(|b| b == "ok\n")
    });
    assert!(status_of(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 404 "),);
    assert!(status_of(
        port,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    )
    .starts_with("HTTP/1.1 405 "),);

    // What Prometheus' own linter makes of the exposition.
    if have("promtool") {
        let metrics = common::wait_for("a frame on /metrics", Duration::from_secs(15), || {
            common::try_get_ok(port, "/metrics").filter(|m| {
                m.contains("wstune_watch_frames_total")
                    && !m.contains("wstune_watch_frames_total 0\n")
            })
        });
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin
            .take()
            .unwrap()
            .write_all(metrics.as_bytes())
            .unwrap();
        let o = p.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "{}{}\n{metrics}",
            stdout(&o),
            stderr(&o)
        );
    } else {
        common::skip(
            "prometheus",
            "promtool is not installed (apt-get install prometheus)",
        );
    }
}

/// A bad --serve address is refused before anything starts, naming the address and the fix.
#[test]
fn a_bad_serve_address_is_a_clear_error() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = format!("127.0.0.1:{}", held.local_addr().unwrap().port());
    for (addr, want) in [
        (
            "nonsense",
            "--serve nonsense: not an address; give host:port, e.g. 127.0.0.1:9977",
        ),
        ("127.0.0.1", "--serve 127.0.0.1: not an address"),
        (busy.as_str(), "pick a free port"),
        // TEST-NET-1: no interface of this host has it.
        (
            "192.0.2.1:9977",
            "no interface of this host has that address",
        ),
    ] {
        let o = common::run_bounded(
            Command::new(bin()).args(["watch", "--serve", addr, "--count", "1"]),
            Duration::from_secs(60),
        );
        assert_eq!(code(&o), 3, "{addr}: {}{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains(want), "{addr}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("--serve {addr}")),
            "{}",
            stderr(&o)
        );
        assert!(!stdout(&o).contains("serving"), "{}", stdout(&o));
    }
    drop(held);
}

/// `export --to watch-systemd`: the unit passes `systemd-analyze verify`, its sandbox rates
/// "OK" (exposure at most 1.6 of 10) in `systemd-analyze security`, and its ExecStart, run
/// as it runs there (an unprivileged user, no capabilities, no new privileges), sees a root
/// process's listener and the kernel's counters in a private namespace.
#[test]
fn the_exported_unit_verifies_and_its_command_works_unprivileged() {
    if !have("systemd-analyze") {
        return common::skip(
            "systemd",
            "systemd-analyze is not installed (apt-get install systemd)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("wstune-watch.service");
    let o = common::run(&[
        "export",
        "--to",
        "watch-systemd",
        "-o",
        unit.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = std::fs::read_to_string(&unit).unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.path().display()))
        .output()
        .unwrap();
    assert!(
        o.status.success() && stderr(&o).trim().is_empty(),
        "systemd-analyze verify: {}{}\n{text}",
        stdout(&o),
        stderr(&o)
    );
    let o = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=16"])
        .arg(&unit)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    for want in [
        "DynamicUser=yes\n",
        "NoNewPrivileges=yes\n",
        "CapabilityBoundingSet=\n",
        "ProtectSystem=strict\n",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK\n",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    // It watches the host's own network: a private one would show nothing.
    assert!(!text.contains("PrivateNetwork="), "{text}");
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    assert_eq!(
        exec,
        format!("{} watch --serve 127.0.0.1:9977 --profile 100k", bin())
    );

    if !have("setpriv") || !have("nsenter") || !have("curl") {
        return common::skip(
            "namespaces",
            "setpriv, nsenter or curl is not installed (apt-get install util-linux curl)",
        );
    }
    let Some(ns) = Netns::new(dir.path()) else {
        return;
    };
    let _listener = Kill(
        ns.command(&[
            "python3",
            "-c",
            "import socket, time\n\
             s = socket.socket(); s.bind(('127.0.0.1', 9001)); s.listen(5)\n\
             time.sleep(120)\n",
        ])
        .spawn()
        .unwrap(),
    );
    let mut argv = vec![
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ];
    argv.extend(exec.split(' '));
    let mut watch = Kill(
        ns.command(&argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = first_line(&mut watch.0);
    assert!(
        line.contains("serving http://127.0.0.1:9977/metrics"),
        "{line}"
    );
    let metrics = common::wait_for(
        "the unprivileged watch to show the root listener",
        Duration::from_secs(30),
        || {
            let (status, m) = ns.get("http://127.0.0.1:9977/metrics")?;
            (status == 200
                && m.contains("wstune_watch_listener_backlog{listener=\"127.0.0.1:9001\"} 5\n"))
            .then_some(m)
        },
    );
    assert!(
        metrics.contains("wstune_watch_kernel_stat_total{name=\"TcpExt.ListenOverflows\"} "),
        "{metrics}"
    );
    assert!(
        !metrics.contains("wstune_watch_unavailable{reading=\"listeners\"}"),
        "{metrics}"
    );
}

/// `export --to watch-daemonset`: the manifest passes kubernetes-validate (strict, current
/// Kubernetes) and runs the watch in the node's network namespace, without the node's
/// processes, as nobody on a read-only root, with limits, a port named metrics that the
/// scrape annotations and the /healthz liveness probe name, serving on the node's address.
#[test]
fn the_exported_daemonset_validates_and_is_locked_down() {
    if !have("kubernetes-validate") {
        return common::skip(
            "kubernetes-validate",
            "kubernetes-validate is not installed (pip install kubernetes-validate)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watch.yaml");
    let o = common::run(&[
        "export",
        "--to",
        "watch-daemonset",
        "--image",
        "registry.example/wstune:1.2",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.37.0"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("daemonset/wstune-watch"),
        "{}",
        stdout(&o)
    );

    let ds: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let tmpl = &ds["spec"]["template"];
    let pod = &tmpl["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert!(pod.get("hostPID").is_none(), "{pod:?}");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "registry.example/wstune:1.2");
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        ["watch", "--serve", "$(NODE_IP):9977", "--profile", "100k"]
    );
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "status.hostIP"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    assert!(c["resources"]["limits"]["memory"].is_string());
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert_eq!(c["ports"][0]["name"], "metrics");
    assert_eq!(c["ports"][0]["containerPort"], 9977);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    let ann = &tmpl["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], "9977");
    assert_eq!(ann["prometheus.io/path"], "/metrics");
}
