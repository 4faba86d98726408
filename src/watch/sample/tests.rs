use super::*;

fn l(addr: &str) -> Listener {
    Listener {
        local: addr.parse().unwrap(),
        queue: 0,
        backlog: 128,
        inode: 1,
        detailed: true,
        pid: None,
    }
}

#[test]
fn a_connection_belongs_to_its_address_before_a_wildcard_listener_on_its_port() {
    let ls = [l("0.0.0.0:80"), l("127.0.0.2:80"), l("[::]:443")];
    assert_eq!(owner(&ls, "127.0.0.2:80".parse().unwrap()), Some(1));
    assert_eq!(owner(&ls, "10.0.0.1:80".parse().unwrap()), Some(0));
    assert_eq!(
        owner(&ls, "[::ffff:10.0.0.1]:443".parse().unwrap()),
        Some(2)
    );
    assert_eq!(owner(&ls, "10.0.0.1:8080".parse().unwrap()), None);
}

/// A Windows host as the collector meets it: a TCP table without queues or inodes (a
/// listener of pid 700, one outbound connection from the dynamic range, one TIME_WAIT),
/// the MIB-II counters without Linux's TcpExt ones, a handle count, and no /proc.
struct Windows {
    handles: Result<i64, ReadError>,
    range: (u16, u16),
}

fn win_sock(state: TcpState, local: &str, remote: &str, pid: Option<u32>) -> Sock {
    Sock {
        state,
        local: local.parse().unwrap(),
        remote: remote.parse().unwrap(),
        recv_queue: 0,
        send_queue: 0,
        inode: 0,
        uid: 0,
        pid,
        detailed: false,
    }
}

impl Backend for Windows {
    fn platform(&self) -> Platform {
        Platform::Windows
    }
    fn describe(&self) -> crate::host::HostInfo {
        crate::host::HostInfo::default()
    }
    fn read(&self, path: &str) -> Result<String, ReadError> {
        Err(ReadError::Unsupported(format!(
            "{path}: no /proc on Windows"
        )))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        self.read(dir).map(|_| Vec::new())
    }
    fn links(&self) -> Result<Vec<crate::host::Link>, ReadError> {
        Ok(Vec::new())
    }
    fn systemd_property(&self, unit: &str, _: &str) -> Result<String, ReadError> {
        self.read(unit)
    }
    fn registry(&self, key: &str, _: &str, _: crate::host::RegType) -> Result<String, ReadError> {
        Err(ReadError::NotFound(key.into()))
    }
    fn page_size(&self) -> u64 {
        4096
    }
    fn write_runtime(&self, path: &str, _: &str) -> Result<(), crate::host::WriteError> {
        Err(crate::host::WriteError::Other(path.into()))
    }
    fn set_nofile(&self, _: u32, _: u64, _: u64) -> Result<(), crate::host::WriteError> {
        Err(crate::host::WriteError::Other("no".into()))
    }
    fn set_registry(
        &self,
        key: &str,
        _: &str,
        _: crate::host::RegType,
        _: Option<&str>,
    ) -> Result<(), crate::host::WriteError> {
        Err(crate::host::WriteError::Other(key.into()))
    }
    fn privileged(&self) -> bool {
        false
    }
    fn process_exists(&self, pid: u32) -> bool {
        pid == 700 || pid == 701
    }
    fn host_fact(&self, fact: Fact, _: Option<u32>) -> Option<Result<i64, ReadError>> {
        (fact == Fact::ProcessHandles).then(|| self.handles.clone())
    }
    fn tcp_sockets(&self, which: Which, visit: &mut dyn FnMut(&Sock)) -> Result<(), ReadError> {
        match which {
            Which::Listeners => {
                visit(&win_sock(
                    TcpState::Listen,
                    "0.0.0.0:9001",
                    "0.0.0.0:0",
                    Some(700),
                ));
                visit(&win_sock(
                    TcpState::Listen,
                    "0.0.0.0:445",
                    "0.0.0.0:0",
                    Some(4),
                ));
            }
            Which::Connections => {
                visit(&win_sock(
                    TcpState::Established,
                    "10.0.0.1:9001",
                    "10.0.0.9:50000",
                    Some(700),
                ));
                visit(&win_sock(
                    TcpState::Established,
                    "10.0.0.1:50001",
                    "10.0.0.7:443",
                    Some(700),
                ));
                visit(&win_sock(
                    TcpState::TimeWait,
                    "10.0.0.1:50002",
                    "10.0.0.7:443",
                    None,
                ));
                visit(&win_sock(
                    TcpState::FinWait2,
                    "10.0.0.1:9001",
                    "10.0.0.9:50003",
                    None,
                ));
            }
        }
        Ok(())
    }
    fn tcp_counters(&self, names: &[&str]) -> crate::host::sockets::TcpCounters {
        let mut c = crate::host::sockets::TcpCounters::default();
        for n in names.iter().filter(|n| n.starts_with("Tcp.")) {
            c.values.insert(n.to_string(), 10);
        }
        c.unavailable.insert(
            "TcpExt counters".into(),
            ReadError::Unsupported("not on Windows: Linux's".into()),
        );
        c
    }
    fn ephemeral_ports(&self) -> Result<(u16, u16), ReadError> {
        Ok(self.range)
    }
}

fn windows_frame(b: &Windows, pid: Option<u32>) -> crate::watch::frame::Frame {
    let mut c = Collector::new(Scope {
        ports: Vec::new(),
        pid,
        no_connection_walk: false,
    });
    let first = c.sample(b);
    let second = c.sample(b);
    let mut f = crate::watch::frame::Frame::between(Some(&first), &second, first.at, None);
    f.advice = crate::watch::advice::for_frame(&f, &Default::default());
    f
}

#[test]
fn a_windows_listener_shows_its_queue_as_unavailable_never_as_zero() {
    let b = Windows {
        handles: Ok(321),
        range: (49152, 65535),
    };
    let f = windows_frame(&b, None);
    let l = f
        .listeners
        .iter()
        .find(|l| l.local == "0.0.0.0:9001")
        .unwrap();
    assert!(!l.full);
    assert!(l
        .queue_unavailable
        .as_deref()
        .unwrap()
        .contains("not on Windows"));
    let json = serde_json::to_value(&f).unwrap();
    let row = &json["listeners"][1];
    assert_eq!(row["local"], "0.0.0.0:9001");
    for k in ["queue", "backlog", "fill"] {
        assert!(row[k].is_null(), "{k} must be null, not 0: {row}");
    }
    // The JSON form reads back as the same frame.
    let back: crate::watch::frame::Frame = serde_json::from_value(json).unwrap();
    assert_eq!(back, f);
    let line = crate::watch::view::plain::line(&f);
    assert!(line.contains("0.0.0.0:9001 queue unavailable"), "{line}");
    assert!(!line.contains("queue 0/0"), "{line}");
    assert!(!line.contains("orphan 0"), "{line}");
    // The connections behind it come from the same table.
    assert_eq!(l.states.unwrap().established, 1);
    assert_eq!(f.totals.unwrap().time_wait, 1);
}

#[test]
fn a_linux_listener_row_keeps_its_json_form_and_old_rows_read_back() {
    let row = crate::watch::frame::ListenerRow {
        local: "0.0.0.0:80".into(),
        queue: 3,
        backlog: 128,
        fill: 3.0 / 128.0,
        full: false,
        states: None,
        queue_unavailable: None,
    };
    let json = serde_json::to_value(&row).unwrap();
    assert_eq!(json["queue"], 3);
    assert_eq!(json["backlog"], 128);
    assert!(json.get("queue_unavailable").is_none(), "{json}");
    let back: crate::watch::frame::ListenerRow = serde_json::from_value(json).unwrap();
    assert_eq!(back, row);
    // A row whose queue is null without a reason still reads as unavailable, not 0.
    let odd: crate::watch::frame::ListenerRow = serde_json::from_str(
        r#"{"local":"[::]:80","queue":null,"backlog":null,"fill":null,"full":false,"states":null}"#,
    )
    .unwrap();
    assert!(odd.queue_unavailable.is_some());
}

#[test]
fn what_windows_lacks_says_not_on_windows_and_never_names_proc() {
    let b = Windows {
        handles: Ok(321),
        range: (49152, 65535),
    };
    let f = windows_frame(&b, None);
    for key in [
        "TcpExt counters",
        "sockstat",
        "orphans",
        "conntrack",
        "file handles",
        "cpu",
    ] {
        let why = f
            .unavailable
            .get(key)
            .unwrap_or_else(|| panic!("{key}: {:?}", f.unavailable));
        assert!(why.starts_with("not on Windows"), "{key}: {why}");
    }
    for (key, why) in &f.unavailable {
        assert!(!why.contains("/proc"), "{key}: {why}");
    }
    let names: Vec<&str> = f.counters.iter().map(|c| c.name.as_str()).collect();
    assert!(names.contains(&"Tcp.ActiveOpens"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("TcpExt.")), "{names:?}");
    assert!(f.cpus.is_empty());
    // Ports from the dynamic range, per destination, explained by the Windows check.
    let p = f.ports.as_ref().unwrap();
    assert_eq!(p.range, (49152, 65535));
    assert_eq!(p.check, "windows.tcpip.dynamic_port_range");
    assert_eq!(p.destinations[0].destination, "10.0.0.7:443");
    assert_eq!(p.destinations[0].in_use, 2);
}

#[test]
fn windows_dynamic_ports_run_out_in_total_and_time_wait_names_its_delay() {
    let gauge = |f: &crate::watch::frame::Frame, name: &str| {
        f.gauges.iter().find(|g| g.name == name).cloned().unwrap()
    };
    // 2 of 16,384 ports: quiet.
    let b = Windows {
        handles: Ok(1),
        range: (49152, 65535),
    };
    let f = windows_frame(&b, None);
    let used = gauge(&f, "dynamic ports in use");
    assert_eq!((used.value, used.limit), (2, Some(16384)));
    assert_eq!(used.check, "windows.tcpip.dynamic_port_range");
    assert!(!used.turned);
    let tw = gauge(&f, "dynamic ports in TIME_WAIT");
    assert_eq!(tw.value, 1);
    assert_eq!(tw.check, "windows.tcpip.tcp_timed_wait_delay");
    assert!(f.advice.is_empty());
    // A range of one port, held by TIME_WAIT: both rows turn, with both checks.
    let b = Windows {
        handles: Ok(1),
        range: (50002, 50002),
    };
    let f = windows_frame(&b, None);
    assert!(gauge(&f, "dynamic ports in use").turned);
    assert!(gauge(&f, "dynamic ports in TIME_WAIT").turned);
    let ids: Vec<&str> = f.advice.iter().map(|a| a.id.as_str()).collect();
    assert!(ids.contains(&"windows.tcpip.dynamic_port_range"), "{ids:?}");
    assert!(
        ids.contains(&"windows.tcpip.tcp_timed_wait_delay"),
        "{ids:?}"
    );
    assert!(!ids.iter().any(|i| i.starts_with("linux.")), "{ids:?}");
}

#[test]
fn a_windows_pid_ties_listeners_by_owner_and_shows_its_handles() {
    let b = Windows {
        handles: Ok(321),
        range: (49152, 65535),
    };
    let f = windows_frame(&b, Some(700));
    let ls: Vec<&str> = f.listeners.iter().map(|l| l.local.as_str()).collect();
    assert_eq!(ls, ["0.0.0.0:9001"]);
    assert_eq!(f.process.as_ref().unwrap().handles, Some(321));
    let g = f
        .gauges
        .iter()
        .find(|g| g.name == "pid 700 handles")
        .unwrap();
    assert_eq!(g.check, "windows.process.handles");
    assert!(!g.turned);
    // A process the table names as owning no listener: said, not every listener shown.
    let f = windows_frame(&b, Some(701));
    assert!(f.listeners.is_empty());
    assert!(
        f.notes
            .iter()
            .any(|n| n == "process 701 holds no listening TCP socket"),
        "{:?}",
        f.notes
    );
    // A handle count the system cannot give is unavailable, not 0.
    let b = Windows {
        handles: Err(ReadError::Unsupported("answered 0 (Wine)".into())),
        range: (49152, 65535),
    };
    let f = windows_frame(&b, Some(700));
    assert_eq!(f.process.as_ref().unwrap().handles, None);
    assert!(f.unavailable["process handles"].contains("answered 0"));
    assert!(!f.gauges.iter().any(|g| g.name.contains("handles")));
    // A process that is gone is a note, as on Linux.
    let f = windows_frame(&b, Some(999));
    assert!(
        f.notes.iter().any(|n| n.contains("no such process")),
        "{:?}",
        f.notes
    );
}

#[test]
fn a_costly_walk_waits_in_proportion_to_its_cost() {
    let t = Instant::now();
    let mut p = Pacer::new(0.01);
    assert!(p.due(t));
    p.spent(t, Duration::from_millis(20));
    assert!(!p.due(t + Duration::from_millis(1999)));
    assert!(p.due(t + Duration::from_millis(2000)));
}
