//! Does an io_uring I/O path beat epoll for the server's connections?
//! One WebSocket server (src/ws.rs), two I/O backends on one thread each (src/epoll.rs,
//! src/uring.rs), and the fan-out floor with both (src/floor.rs).
//! bench/results/2026-12-01-io-uring.md has the figures and the decision (the server keeps epoll:
//! io_uring won 4-8 %, under the 10 % bar); this prototype stays only as the benchmark that
//! shows it. Rerun the whole comparison with `bench/uring.sh 5` (about 40 minutes).
//!
//!   uring-bench serve --io epoll|uring [--fixed] --port PORT [--broadcast] [--bind IPV4]
//!                     [--busy-poll USECS]  (epoll only: EPIOCSPARAMS busy polling)
//!   uring-bench floor [CONNS] [ROUNDS] [BYTES] [READER_CPU] [GAP_MS] [READER=epoll|uring]

mod epoll;
mod floor;
mod uring;
mod ws;

use std::io;
use std::process::ExitCode;

const USAGE: &str = "usage: uring-bench serve --io epoll|uring [--fixed] --port PORT [--broadcast] [--bind IPV4] [--busy-poll USECS]\n       uring-bench floor [CONNS] [ROUNDS] [BYTES] [READER_CPU] [GAP_MS] [READER=epoll|uring]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("floor") => floor::main(&args[1..]),
        Some("floor-reader") => floor::reader_main(&args[1..]),
        _ => Err(usage("no command")),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            eprintln!("uring-bench: {e}\n{USAGE}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("uring-bench: {e}");
            ExitCode::from(1)
        }
    }
}

pub fn usage(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn serve(args: &[String]) -> io::Result<()> {
    let (mut io, mut port, mut broadcast, mut fixed) = (None, None, false, false);
    let mut busy_poll = 0u32;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--io" => io = it.next().cloned(),
            "--port" => port = it.next().and_then(|p| p.parse::<u16>().ok()),
            "--bind" => {
                let ip = it.next().and_then(|v| v.parse::<std::net::Ipv4Addr>().ok());
                let ip = ip.ok_or_else(|| usage("--bind takes an IPv4 address"))?;
                let _ = BIND.set(ip);
            }
            "--busy-poll" => {
                busy_poll = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| usage("--busy-poll takes microseconds"))?
            }
            "--broadcast" => broadcast = true,
            "--fixed" => fixed = true,
            other => return Err(usage(&format!("unknown argument {other:?}"))),
        }
    }
    let port = port.ok_or_else(|| usage("--port PORT (1-65535) is required"))?;
    match io.as_deref() {
        Some("epoll") if fixed => Err(usage("--fixed (registered files) is for --io uring")),
        Some("epoll") => epoll::serve(port, broadcast, busy_poll),
        Some(_) if busy_poll > 0 => Err(usage("--busy-poll is for --io epoll")),
        Some("uring") => uring::serve(port, broadcast, fixed),
        _ => Err(usage("--io must be epoll or uring")),
    }
}

pub fn check(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The address `serve` listens on (`--bind`; 127.0.0.1 when not given).
static BIND: std::sync::OnceLock<std::net::Ipv4Addr> = std::sync::OnceLock::new();

/// A non-blocking listening socket on the bind address (127.0.0.1 by default), port.
pub fn listener(port: u16) -> io::Result<i32> {
    unsafe {
        let fd = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const i32).cast(),
            4,
        );
        let a = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*BIND.get_or_init(|| std::net::Ipv4Addr::LOCALHOST)).to_be(),
            },
            sin_zero: [0; 8],
        };
        check(libc::bind(
            fd,
            (&a as *const libc::sockaddr_in).cast(),
            std::mem::size_of_val(&a) as u32,
        ))?;
        check(libc::listen(fd, 4096))?;
        Ok(fd)
    }
}

/// Nagle off, as wstune's connections (a reply must not wait for an ACK).
pub fn nodelay(fd: i32) {
    let one: libc::c_int = 1;
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const i32).cast(),
            4,
        )
    };
}

/// This process's CPU (user + system) in seconds.
pub fn cpu_secs() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}
