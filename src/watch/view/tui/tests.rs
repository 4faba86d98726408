use super::*;
use crate::watch::advice::Advice;
use crate::watch::frame::{CounterRow, CpuRow, GaugeRow, ListenerRow, SCHEMA};
use crate::watch::sample::States;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Color;

fn head() -> Head {
    Head {
        host: "web-1".into(),
        scope: "every listener".into(),
        interval_s: 1.0,
    }
}

/// A frame of a listener whose queue is full while ListenOverflows moves: what the
/// kernel shows when a server accepts more slowly than connections arrive.
fn overflowing() -> Frame {
    let st = |e| States {
        established: e,
        syn_recv: 0,
        time_wait: 3,
        close_wait: 0,
        orphans: Some(0),
    };
    Frame {
        schema: SCHEMA.into(),
        time: "2026-12-07T03:04:05.000Z".into(),
        elapsed_s: 12.0,
        interval_s: 1.0,
        listeners: vec![
            ListenerRow {
                local: "127.0.0.1:9001".into(),
                queue: 3,
                backlog: 2,
                fill: 1.5,
                full: true,
                states: Some(st(5)),
                queue_unavailable: None,
            },
            ListenerRow {
                local: "0.0.0.0:22".into(),
                queue: 0,
                backlog: 128,
                fill: 0.0,
                full: false,
                states: Some(st(1)),
                queue_unavailable: None,
            },
        ],
        somaxconn: Some(4096),
        totals: Some(st(6)),
        connections_age_s: Some(0.0),
        counters: vec![
            CounterRow {
                name: "TcpExt.ListenOverflows".into(),
                total: 90_210,
                delta: 4_210,
                per_s: 4_210.0,
                check: Some("linux.counter.listen_overflows".into()),
                turned: true,
            },
            CounterRow {
                name: "TcpExt.ListenDrops".into(),
                total: 7,
                delta: 0,
                per_s: 0.0,
                check: Some("linux.counter.listen_drops".into()),
                turned: false,
            },
        ],
        gauges: vec![GaugeRow {
            name: "orphans".into(),
            value: 12,
            mark: 16_384,
            mark_is: "tcp_max_orphans / 4".into(),
            limit: Some(65_536),
            check: "linux.sockstat.orphans".into(),
            turned: false,
        }],
        cpus: (0..4)
            .map(|i| CpuRow {
                cpu: format!("cpu{i}"),
                softirq_pct: if i == 2 { 61.0 } else { 1.0 },
                system_pct: 2.0,
                softnet_dropped: 0,
                time_squeeze: 0,
            })
            .collect(),
        ports: None,
        process: None,
        server: None,
        advice: vec![Advice {
            id: "linux.net.core.somaxconn".into(),
            title: "Accept queue cap".into(),
            what: "accept queue of 127.0.0.1:9001 full (3 of 2)".into(),
            why: "The kernel drops handshakes for a listener whose accept queue is full.".into(),
            fix: vec![
                "sysctl -w net.core.somaxconn=65535".into(),
                "echo 'net.core.somaxconn = 65535' > /etc/sysctl.d/90-wstune.conf".into(),
            ],
            current: Some("4096".into()),
            target: Some("65535".into()),
        }],
        unavailable: [(
            "conntrack".to_string(),
            "nf_conntrack is not loaded".to_string(),
        )]
        .into(),
        notes: vec![],
    }
}

/// The screen as text, one row per line, drawn through ratatui's own test terminal.
fn screen(f: Option<&Frame>, log: &Log, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|fr| {
        let area = fr.area();
        render(area, fr.buffer_mut(), f, &head(), log, 0);
    })
    .unwrap();
    let buf = term.backend().buffer();
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn row_of<'a>(s: &'a str, needle: &str) -> &'a str {
    s.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no row with {needle:?}:\n{s}"))
}

#[test]
fn a_full_listener_and_a_moving_counter_show_full_the_rate_and_the_fix() {
    let f = overflowing();
    let mut log = Log::default();
    log.add(&f);
    for (w, h) in [(200, 60), (100, 40)] {
        let s = screen(Some(&f), &log, w, h);
        let l = row_of(&s, "127.0.0.1:9001");
        assert!(l.contains("FULL") && l.contains("3/2"), "{w}x{h}: {l}\n{s}");
        assert!(!row_of(&s, "0.0.0.0:22").contains("FULL"), "{s}");
        let c = row_of(&s, "TcpExt.ListenOverflows");
        assert!(
            c.contains("4,210") && c.contains("90,210"),
            "{w}x{h}: {c}\n{s}"
        );
        assert!(
            s.contains("fix: sysctl -w net.core.somaxconn=65535"),
            "{w}x{h}:\n{s}"
        );
        assert!(s.contains("● linux.net.core.somaxconn"), "{s}");
        assert!(s.contains("web-1") && s.contains("03:04:05"), "{s}");
        assert!(s.contains("conntrack (nf_conntrack is not loaded)"), "{s}");
    }
}

#[test]
fn the_full_listener_row_is_red_and_the_turned_counter_too() {
    let f = overflowing();
    let mut term = Terminal::new(TestBackend::new(200, 60)).unwrap();
    term.draw(|fr| {
        let area = fr.area();
        render(area, fr.buffer_mut(), Some(&f), &head(), &Log::default(), 0);
    })
    .unwrap();
    let buf = term.backend().buffer().clone();
    let find = |needle: &str| {
        (0..60u16)
            .find_map(|y| {
                let row: String = (0..200u16).map(|x| buf[(x, y)].symbol()).collect();
                row.find(needle)
                    .map(|i| (row[..i].chars().count() as u16, y))
            })
            .unwrap()
    };
    let (x, y) = find("TcpExt.ListenOverflows");
    assert_eq!(buf[(x, y)].fg, Color::Red);
    let (x, y) = find("TcpExt.ListenDrops");
    assert_ne!(buf[(x, y)].fg, Color::Red);
    let (x, y) = find("FULL");
    assert_eq!(buf[(x, y)].fg, Color::Red);
}

#[test]
fn q_esc_and_ctrl_c_quit_and_a_plain_c_does_not() {
    let none = KeyModifiers::NONE;
    let ctrl = KeyModifiers::CONTROL;
    for (code, mods) in [
        (KeyCode::Char('q'), none),
        (KeyCode::Char('Q'), none),
        (KeyCode::Esc, none),
        (KeyCode::Char('c'), ctrl),
        (KeyCode::Char('d'), ctrl),
    ] {
        assert_eq!(action(code, mods), Action::Quit, "{code:?} {mods:?}");
    }
    assert_eq!(action(KeyCode::Char('c'), none), Action::Ignore);
    assert_eq!(action(KeyCode::Down, none), Action::Scroll(1));
    assert_eq!(action(KeyCode::Up, none), Action::Scroll(-1));
    assert_eq!(action(KeyCode::Home, none), Action::Top);
}

#[test]
fn long_advice_wraps_under_its_label_and_scrolls() {
    let mut f = overflowing();
    f.advice[0].why = "word ".repeat(60).trim_end().to_string();
    let s = screen(Some(&f), &Log::default(), 80, 60);
    let why = s
        .lines()
        .position(|l| l.starts_with("  why: word"))
        .expect(&s);
    let next = s.lines().nth(why + 1).unwrap();
    assert!(next.starts_with("       word"), "{next:?}\n{s}");
    assert!(s.lines().all(|l| l.chars().count() <= 80));
    // A short screen cannot hold it all: render says how far it scrolls, and scrolled that
    // far the last line is in view.
    let area = Rect::new(0, 0, 80, 24);
    let mut buf = Buffer::empty(area);
    let max = render(area, &mut buf, Some(&f), &head(), &Log::default(), 0);
    assert!(max > 0);
    let mut buf = Buffer::empty(area);
    render(area, &mut buf, Some(&f), &head(), &Log::default(), max);
    let text: String = (0..24)
        .map(|y| (0..80).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
        .collect();
    assert!(text.contains("  fix: echo"), "{text}");
}

#[test]
fn cpus_are_busiest_first_and_cut_to_what_fits() {
    let mut f = overflowing();
    f.cpus = (0..64)
        .map(|i| CpuRow {
            cpu: format!("cpu{i}"),
            softirq_pct: i as f64,
            system_pct: 0.0,
            softnet_dropped: 0,
            time_squeeze: 0,
        })
        .collect();
    let s = screen(Some(&f), &Log::default(), 200, 40);
    let first = s.lines().position(|l| l.contains("cpu63")).expect(&s);
    let next = s.lines().position(|l| l.contains("cpu62")).expect(&s);
    assert!(first < next, "{s}");
    assert!(!s.contains("cpu0 "), "{s}");
    assert!(s.contains("CPUs, busiest"), "{s}");
}

#[test]
fn a_quiet_frame_says_so_and_names_what_fired_earlier() {
    let mut log = Log::default();
    log.add(&overflowing());
    let mut f = overflowing();
    f.advice.clear();
    f.listeners[0].queue = 0;
    f.listeners[0].fill = 0.0;
    f.listeners[0].full = false;
    f.counters[0].delta = 0;
    f.counters[0].per_s = 0.0;
    f.counters[0].turned = false;
    let s = screen(Some(&f), &log, 160, 50);
    assert!(!s.contains("FULL"), "{s}");
    assert!(s.contains("nothing turned this interval"), "{s}");
    assert!(s.contains("Earlier, quiet now:"), "{s}");
    assert!(row_of(&s, "Earlier").len() < 200);
    assert!(
        s.contains("linux.net.core.somaxconn (Accept queue cap): 1 interval(s)"),
        "{s}"
    );
}

#[test]
fn before_the_first_frame_and_on_a_tiny_terminal_it_says_what_it_waits_for() {
    let s = screen(None, &Log::default(), 120, 30);
    assert!(
        s.contains("first frame comes after one interval (1 s)"),
        "{s}"
    );
    let s = screen(Some(&overflowing()), &Log::default(), 30, 8);
    assert!(s.contains("needs at least 40x10"), "{s}");
}

#[test]
fn a_server_that_cannot_be_read_says_why() {
    let mut f = overflowing();
    f.server = Some(crate::watch::server::ServerFigures {
        url: "http://127.0.0.1:8000/metrics".into(),
        error: Some("not Prometheus text: the answer is HTML".into()),
        ..Default::default()
    });
    let s = screen(Some(&f), &Log::default(), 200, 60);
    assert!(s.contains("http://127.0.0.1:8000/metrics"), "{s}");
    assert!(s.contains("cannot read it: not Prometheus text"), "{s}");
}
