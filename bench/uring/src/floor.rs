//! The fan-out floor with io_uring beside send(): bench/write-floor.c's measurement (one
//! BYTES-byte message to each of CONNS connected loopback sockets, a reader process draining
//! them on another core), with rounds alternating between a send() loop and io_uring Send
//! SQEs (4096 per submit, the SQ's size) in the same run, on the same sockets.
//! READER=uring drains with multishot receives and a provided buffer ring instead of epoll +
//! read(): the receive side's floor, the generator's share of fan-out.

use crate::{check, cpu_secs, nodelay, usage};
use io_uring::{cqueue, opcode, types, IoUring};
use std::io::{self, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

fn arg<T: std::str::FromStr>(a: &[String], i: usize, default: T) -> io::Result<T> {
    match a.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| usage(&format!("argument {} ({s:?}) is not a number", i + 1))),
    }
}

pub fn main(a: &[String]) -> io::Result<()> {
    let conns: usize = arg(a, 0, 10_000)?;
    let rounds: usize = arg(a, 1, 20)?;
    let bytes: usize = arg(a, 2, 100)?;
    let reader_cpu: i32 = arg(a, 3, 1)?;
    let gap_ms: u64 = arg(a, 4, 100)?;
    let reader = a.get(5).map_or("epoll", String::as_str);
    if conns == 0
        || rounds == 0
        || !(1..=4096).contains(&bytes)
        || !matches!(reader, "epoll" | "uring")
    {
        return Err(usage(
            "floor: CONNS >= 1, ROUNDS >= 1, BYTES 1..4096, READER epoll or uring",
        ));
    }
    let lfd = crate::listener(0)?;
    let port = unsafe {
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        let mut l = std::mem::size_of_val(&sa) as u32;
        check(libc::getsockname(
            lfd,
            (&mut sa as *mut libc::sockaddr_in).cast(),
            &mut l,
        ))?;
        u16::from_be(sa.sin_port)
    };
    // Nonblocking listener: accept with a bounded wait so a dead reader cannot hang us.
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "floor-reader",
            &port.to_string(),
            &conns.to_string(),
            &bytes.to_string(),
        ])
        .args([&(2 * rounds).to_string(), &reader_cpu.to_string(), reader])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut acks = child.stdout.take().unwrap();
    let mut fds = Vec::with_capacity(conns);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fds.len() < conns {
        let fd = unsafe {
            libc::accept4(
                lfd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK,
            )
        };
        if fd >= 0 {
            nodelay(fd);
            fds.push(fd);
        } else if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return Err(io::Error::other(format!(
                "floor: only {} of {conns} connections in 30 s",
                fds.len()
            )));
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let msg = vec![b'x'; bytes];
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .setup_cqsize(16384)
        .build(4096)?;
    let (mut cpu, mut short, mut enters) = ([0f64; 2], [0u64; 2], 0u64);
    for r in 0..2 * rounds {
        std::thread::sleep(Duration::from_millis(gap_ms));
        let mode = r % 2; // 0: send() loop, 1: io_uring
        let c0 = cpu_secs();
        if mode == 0 {
            for &fd in &fds {
                let n = unsafe {
                    libc::send(
                        fd,
                        msg.as_ptr().cast(),
                        bytes,
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
                short[0] += (n != bytes as isize) as u64;
            }
        } else {
            let mut done = 0;
            let mut queued = 0;
            for &fd in &fds {
                let e = opcode::Send::new(types::Fd(fd), msg.as_ptr(), bytes as u32)
                    .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                    .build();
                while unsafe { ring.submission().push(&e) }.is_err() {
                    ring.submit()?;
                    enters += 1;
                    done += reap(&mut ring, bytes, &mut short[1]);
                }
                queued += 1;
            }
            while done < queued {
                ring.submit_and_wait(1)?;
                enters += 1;
                done += reap(&mut ring, bytes, &mut short[1]);
            }
        }
        cpu[mode] += cpu_secs() - c0;
        let mut x = [0u8];
        acks.read_exact(&mut x)
            .map_err(|e| io::Error::other(format!("floor: the reader died: {e}")))?;
    }
    // The reader prints its own line when it has the last round: wait for it first, so the two
    // lines do not interleave.
    drop(acks);
    child.wait()?;
    let sends = (conns * rounds) as f64;
    println!(
        "uring-floor: {conns} sockets x {rounds} rounds each x {bytes} B, {gap_ms} ms apart, reader {reader}: \
         writer CPU per send: send() {:.2} us, io_uring {:.2} us ({:.1} sends per submit); short writes {} / {}",
        cpu[0] / sends * 1e6,
        cpu[1] / sends * 1e6,
        sends / enters.max(1) as f64,
        short[0],
        short[1]
    );
    io::stdout().flush()?;
    Ok(())
}

fn reap(ring: &mut IoUring, bytes: usize, short: &mut u64) -> usize {
    let mut n = 0;
    for c in ring.completion() {
        *short += (c.result() != bytes as i32) as u64;
        n += 1;
    }
    n
}

/// The reader process: connect CONNS sockets, drain them, one byte on stdout per round.
pub fn reader_main(a: &[String]) -> io::Result<()> {
    let port: u16 = arg(a, 0, 0)?;
    let conns: usize = arg(a, 1, 0)?;
    let bytes: usize = arg(a, 2, 0)?;
    let rounds: usize = arg(a, 3, 0)?;
    let cpu: i32 = arg(a, 4, -1)?;
    if cpu >= 0 {
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
    }
    let mut fds = Vec::with_capacity(conns);
    for _ in 0..conns {
        let fd = check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) })?;
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        check(unsafe {
            libc::connect(
                fd,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of_val(&sa) as u32,
            )
        })?;
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
        fds.push(fd);
    }
    let want = (conns * bytes) as u64;
    let c0 = cpu_secs();
    let mut out = io::stdout();
    let mut ack = || out.write_all(b"x").and_then(|_| out.flush());
    match a.get(5).map(String::as_str) {
        Some("uring") => read_uring(&fds, want, rounds, &mut ack)?,
        _ => read_epoll(&fds, want, rounds, &mut ack)?,
    }
    eprintln!(
        "uring-floor: reader ({}) CPU {:.2} us per receive",
        a.get(5).map_or("epoll", String::as_str),
        (cpu_secs() - c0) / (conns * rounds) as f64 * 1e6
    );
    Ok(())
}

fn read_epoll(
    fds: &[i32],
    want: u64,
    rounds: usize,
    ack: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<()> {
    let ep = check(unsafe { libc::epoll_create1(0) })?;
    for &fd in fds {
        let mut e = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut e) })?;
    }
    let mut ev = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut buf = vec![0u8; 65536];
    let (mut got, mut r) = (0u64, 0);
    while r < rounds {
        let n = unsafe { libc::epoll_wait(ep, ev.as_mut_ptr(), 1024, 10_000) };
        if n <= 0 {
            return Err(io::Error::other("reader: epoll_wait timed out"));
        }
        for e in &ev[..n as usize] {
            // One read per event, as the server's loop (level-triggered: the rest comes again).
            let k = unsafe { libc::read(e.u64 as i32, buf.as_mut_ptr().cast(), buf.len()) };
            got += k.max(0) as u64;
        }
        while got >= want && r < rounds {
            got -= want;
            r += 1;
            ack()?;
        }
    }
    Ok(())
}

fn read_uring(
    fds: &[i32],
    want: u64,
    rounds: usize,
    ack: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<()> {
    const N: u16 = 4096;
    const SIZE: usize = 4096;
    let mut ring = IoUring::builder()
        .setup_cqsize(65536)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(4096)?;
    let bytes = N as usize * std::mem::size_of::<types::BufRingEntry>();
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let entries: *mut types::BufRingEntry = p.cast();
    let mem = vec![0u8; N as usize * SIZE];
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(p as u64, N, 0, 0)?
    };
    let mut tail: u16 = 0;
    let put = |bid: u16, tail: &mut u16| {
        let e = unsafe { &mut *entries.add((*tail & (N - 1)) as usize) };
        e.set_addr(mem.as_ptr() as u64 + bid as u64 * SIZE as u64);
        e.set_len(SIZE as u32);
        e.set_bid(bid);
        *tail = tail.wrapping_add(1);
    };
    let publish = |tail: u16| unsafe {
        (*(types::BufRingEntry::tail(entries) as *const AtomicU16)).store(tail, Ordering::Release)
    };
    for b in 0..N {
        put(b, &mut tail);
    }
    publish(tail);
    let arm = |ring: &mut IoUring, i: usize| -> io::Result<()> {
        let e = opcode::RecvMulti::new(types::Fd(fds[i]), 0)
            .build()
            .user_data(i as u64);
        while unsafe { ring.submission().push(&e) }.is_err() {
            ring.submit()?;
        }
        Ok(())
    };
    for i in 0..fds.len() {
        arm(&mut ring, i)?;
    }
    let (mut got, mut r) = (0u64, 0);
    let mut cqes = Vec::new();
    while r < rounds {
        ring.submit_and_wait(1)?;
        cqes.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for (i, res, flags) in cqes.drain(..) {
            if let Some(b) = cqueue::buffer_select(flags) {
                put(b, &mut tail);
            }
            if res > 0 {
                got += res as u64;
            } else if res != -libc::ENOBUFS {
                return Err(io::Error::other(format!("reader: receive failed ({res})")));
            }
            if !cqueue::more(flags) {
                arm(&mut ring, i as usize)?;
            }
        }
        publish(tail);
        while got >= want && r < rounds {
            got -= want;
            r += 1;
            ack()?;
        }
    }
    Ok(())
}
