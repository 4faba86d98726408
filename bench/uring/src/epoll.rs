//! The epoll backend: one thread, level-triggered epoll, one read per readable event, replies
//! written at once with send(). This is the fewest syscalls epoll allows per echo: a share of
//! one epoll_wait, one read, one send (no EAGAIN read: level-triggered epoll reports the socket
//! again if bytes are left; no EPOLL_CTL_MOD unless a send is short).

use crate::ws::{Flow, Ws};
use crate::{check, listener};
use std::io;

const LISTENER: u64 = u64::MAX;

struct Conn {
    ws: Ws,
    /// Bytes a short send left behind (EPOLLOUT is armed while this is non-empty).
    backlog: Vec<u8>,
    /// Index in `live` (for broadcast's walk over every connection).
    slot: usize,
    close_after_flush: bool,
}

/// `struct epoll_params` (include/uapi/linux/eventpoll.h, Linux 6.9+).
#[repr(C)]
struct EpollParams {
    busy_poll_usecs: u32,
    busy_poll_budget: u16,
    prefer_busy_poll: u8,
    pad: u8,
}

/// `EPIOCSPARAMS`: `_IOW(0x8A, 0x01, struct epoll_params)`.
const EPIOCSPARAMS: libc::c_ulong = (1 << 30) | (8 << 16) | (0x8A << 8) | 0x01;

pub fn serve(port: u16, broadcast: bool, busy_poll_usecs: u32) -> io::Result<()> {
    let lfd = listener(port)?;
    let ep = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    if busy_poll_usecs > 0 {
        // The kernel busy-polls the NAPI instance the ready sockets' packets came from (none on
        // loopback) for up to this long before epoll_wait sleeps.
        let p = EpollParams {
            busy_poll_usecs,
            busy_poll_budget: 8,
            prefer_busy_poll: 0,
            pad: 0,
        };
        check(unsafe { libc::ioctl(ep, EPIOCSPARAMS as _, &p as *const EpollParams) })?;
    }
    add(ep, lfd, libc::EPOLLIN as u32, LISTENER)?;
    // Connections indexed by fd: the kernel hands out the lowest free fd, so this stays dense.
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut live: Vec<i32> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut buf = vec![0u8; 64 << 10];
    let (mut out, mut fanout) = (Vec::with_capacity(64 << 10), Vec::new());
    loop {
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in &events[..n as usize] {
            let (flags, key) = (ev.events, ev.u64);
            if key == LISTENER {
                accept_all(lfd, ep, &mut conns, &mut live)?;
                continue;
            }
            let fd = key as i32;
            let Some(c) = conns.get_mut(fd as usize).and_then(|c| c.as_mut()) else {
                continue;
            };
            if flags & libc::EPOLLOUT as u32 != 0 && !c.backlog.is_empty() {
                match flush(fd, c, ep) {
                    Ok(()) if c.backlog.is_empty() && c.close_after_flush => {
                        drop_conn(fd, &mut conns, &mut live);
                        continue;
                    }
                    Ok(()) => {}
                    Err(_) => {
                        drop_conn(fd, &mut conns, &mut live);
                        continue;
                    }
                }
            }
            if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 == 0
                || c.close_after_flush
            {
                continue;
            }
            let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if r <= 0 {
                if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
                    continue;
                }
                drop_conn(fd, &mut conns, &mut live); // EOF or error: mid-frame bytes are dropped
                continue;
            }
            out.clear();
            let flow =
                c.ws.feed(&buf[..r as usize], broadcast, &mut out, &mut fanout);
            let done = !matches!(flow, Ok(Flow::Open));
            if !out.is_empty() && write(fd, c, &out, ep).is_err() {
                drop_conn(fd, &mut conns, &mut live);
                continue;
            }
            if done {
                if c.backlog.is_empty() {
                    drop_conn(fd, &mut conns, &mut live);
                } else {
                    c.close_after_flush = true;
                }
                continue;
            }
            // Fan-out: one send() per recipient, straight from this thread.
            for frame in fanout.drain(..) {
                let mut failed = Vec::new();
                for &to in &live {
                    if to == fd {
                        continue;
                    }
                    let c = conns[to as usize].as_mut().expect("live connection");
                    if !c.close_after_flush && write(to, c, &frame, ep).is_err() {
                        failed.push(to);
                    }
                }
                for to in failed {
                    drop_conn(to, &mut conns, &mut live);
                }
            }
        }
    }
}

fn accept_all(
    lfd: i32,
    ep: i32,
    conns: &mut Vec<Option<Conn>>,
    live: &mut Vec<i32>,
) -> io::Result<()> {
    loop {
        let fd = unsafe {
            libc::accept4(
                lfd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ECONNABORTED) | Some(libc::EINTR) => Ok(()),
                // Out of fds: leave the rest in the backlog, as a server under a storm would.
                Some(libc::EMFILE) | Some(libc::ENFILE) => Ok(()),
                _ => Err(e),
            };
        }
        crate::nodelay(fd);
        add(ep, fd, (libc::EPOLLIN | libc::EPOLLRDHUP) as u32, fd as u64)?;
        if conns.len() <= fd as usize {
            conns.resize_with(fd as usize + 1, || None);
        }
        conns[fd as usize] = Some(Conn {
            ws: Ws::default(),
            backlog: Vec::new(),
            slot: live.len(),
            close_after_flush: false,
        });
        live.push(fd);
    }
}

/// Send `data` now if nothing is queued before it; queue what the socket does not take.
fn write(fd: i32, c: &mut Conn, data: &[u8], ep: i32) -> io::Result<()> {
    if !c.backlog.is_empty() {
        c.backlog.extend_from_slice(data);
        return Ok(());
    }
    let n = send(fd, data)?;
    if n < data.len() {
        c.backlog.extend_from_slice(&data[n..]);
        modify(
            ep,
            fd,
            (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLOUT) as u32,
        )?;
    }
    Ok(())
}

fn flush(fd: i32, c: &mut Conn, ep: i32) -> io::Result<()> {
    let n = send(fd, &c.backlog)?;
    c.backlog.drain(..n);
    if c.backlog.is_empty() {
        modify(ep, fd, (libc::EPOLLIN | libc::EPOLLRDHUP) as u32)?;
    }
    Ok(())
}

fn send(fd: i32, data: &[u8]) -> io::Result<usize> {
    let n = unsafe {
        libc::send(
            fd,
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(0)
    } else {
        Err(e)
    }
}

fn drop_conn(fd: i32, conns: &mut [Option<Conn>], live: &mut Vec<i32>) {
    if let Some(c) = conns[fd as usize].take() {
        live.swap_remove(c.slot);
        if let Some(&moved) = live.get(c.slot) {
            conns[moved as usize]
                .as_mut()
                .expect("live connection")
                .slot = c.slot;
        }
        unsafe { libc::close(fd) }; // close also removes it from the epoll set
    }
}

fn add(ep: i32, fd: i32, events: u32, key: u64) -> io::Result<()> {
    let mut e = libc::epoll_event { events, u64: key };
    check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut e) }).map(drop)
}

fn modify(ep: i32, fd: i32, events: u32) -> io::Result<()> {
    let mut e = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut e) }).map(drop)
}
