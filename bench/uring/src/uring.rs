//! The io_uring backend: one thread, one ring, the same `Ws` code as the epoll backend.
//!
//! Choices, each to take a syscall or a copy out of the per-message path:
//! - Multishot accept: one SQE accepts every connection (re-armed only if the kernel ends it).
//! - Multishot receive with a provided buffer ring: one SQE per connection for its whole life;
//!   the kernel picks a buffer from the ring for each completion, so no read() per message and
//!   no buffer held per idle connection. Buffers go back to the ring by a tail store (no syscall).
//! - Sends as SQEs, one in flight per connection (order on a stream socket); the bytes stay in
//!   the connection's queue until the completion.
//! - One `submit_and_wait(1)` per loop turn: submits every SQE the last turn queued (echo replies,
//!   re-arms, a whole broadcast: up to the SQ size per submit) and waits for the next
//!   completion; then the completions are drained as a batch.
//! - SINGLE_ISSUER + DEFER_TASKRUN: completion work runs only when this thread enters the
//!   kernel to wait, batched, with no interrupts of the running loop (the kernel's advice for a
//!   one-thread-per-ring server).
//! - Registered files with `--fixed`: multishot accept installs each connection straight into
//!   the ring's file table (no fd in the process table), and every recv, send, setsockopt,
//!   shutdown and close names it by index, so no fget/fput per operation. Measured both ways.
//! - No SQPOLL: it spends a second core polling, which the one-core-per-server comparison
//!   must not hide.

use crate::listener;
use crate::ws::{Flow, Ws};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU16, Ordering};

const SQ_ENTRIES: u32 = 4096;
const CQ_ENTRIES: u32 = 65536;
/// Provided buffers: a multishot receive consumes one per completion, and they return to the
/// ring within the same loop turn, so the ring needs the completions of one turn, not one per
/// connection. 4096 x 4 KiB = 16 MiB for the whole thread, whatever the connection count.
const BUFS: u16 = 4096;
const BUF_SIZE: usize = 4096;
const BGID: u16 = 0;

// user_data: op in the low 8 bits, the connection's slot in the next 32, its generation above
// (a slot reused by a new connection never takes an old connection's late completion).
const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
/// Fire-and-forget operations (setsockopt, shutdown, close of a registered file): submitted with
/// CQE_SKIP_SUCCESS, so only a failure posts a completion, which is ignored.
const OP_QUIET: u64 = 4;

/// Build an SQE on a connection's socket: by fd, or by its index in the registered file table.
macro_rules! on_fd {
    ($fixed:expr, $fd:expr, |$f:ident| $e:expr) => {
        if $fixed {
            let $f = types::Fixed($fd as u32);
            $e
        } else {
            let $f = types::Fd($fd);
            $e
        }
    };
}
static ONE: libc::c_int = 1;

fn ud(op: u64, slot: usize, gen: u32) -> u64 {
    op | (slot as u64) << 8 | (gen as u64) << 40
}

/// Bytes queued for one connection: its own replies, or a broadcast frame shared by every
/// recipient (encoded once; one Rc per recipient, no copy).
enum Chunk {
    Own(Vec<u8>),
    Shared(Rc<[u8]>),
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Own(v) => v,
            Chunk::Shared(s) => s,
        }
    }
}

struct Conn {
    fd: i32,
    gen: u32,
    ws: Ws,
    queue: VecDeque<Chunk>,
    /// Bytes of the queue's head already sent.
    sent: usize,
    sending: bool,
    recv_armed: bool,
    /// Close once the queue is sent (close handshake done, or a protocol error).
    closing: bool,
    /// The queue was dropped: nothing more is sent; waiting for the last completions.
    shut: bool,
    /// shutdown() was issued, to end the armed receive.
    shut_sent: bool,
    slot_in_live: usize,
}

/// The provided-buffer ring: entries shared with the kernel, and the memory they point into.
struct BufRing {
    entries: *mut types::BufRingEntry,
    mem: Vec<u8>,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring) -> io::Result<BufRing> {
        let bytes = BUFS as usize * std::mem::size_of::<types::BufRingEntry>();
        // Page-aligned memory the kernel maps: mmap gives that.
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
        let mut r = BufRing {
            entries: p.cast(),
            mem: vec![0; BUFS as usize * BUF_SIZE],
            tail: 0,
        };
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(p as u64, BUFS, BGID, 0)?
        };
        for bid in 0..BUFS {
            r.put(bid);
        }
        r.publish();
        Ok(r)
    }

    fn buf(&self, bid: u16, len: usize) -> &[u8] {
        &self.mem[bid as usize * BUF_SIZE..][..len]
    }

    /// Give a buffer back (visible to the kernel at the next `publish`).
    fn put(&mut self, bid: u16) {
        let e = unsafe { &mut *self.entries.add((self.tail & (BUFS - 1)) as usize) };
        e.set_addr(self.mem.as_ptr() as u64 + bid as u64 * BUF_SIZE as u64);
        e.set_len(BUF_SIZE as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// One release store of the tail per loop turn returns every buffer of the turn.
    fn publish(&self) {
        let tail = unsafe { &*(types::BufRingEntry::tail(self.entries) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}

struct Server {
    ring: IoUring,
    bufs: BufRing,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    live: Vec<usize>,
    next_gen: u32,
    broadcast: bool,
    /// Connections live in the ring's registered file table (`--fixed`).
    fixed: bool,
    /// Spare reply buffers, so an echo does not allocate.
    spare: Vec<Vec<u8>>,
}

pub fn serve(port: u16, broadcast: bool, fixed: bool) -> io::Result<()> {
    let ring = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .build(SQ_ENTRIES)?;
    let bufs = BufRing::new(&ring)?;
    let lfd = listener(port)?;
    if fixed {
        // The table's size is bounded by RLIMIT_NOFILE (the kernel's rule for registered files).
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
        ring.submitter()
            .register_files_sparse(l.rlim_cur.min(1 << 20) as u32)?;
    }
    let mut s = Server {
        ring,
        bufs,
        conns: Vec::new(),
        free: Vec::new(),
        live: Vec::new(),
        next_gen: 0,
        broadcast,
        fixed,
        spare: Vec::new(),
    };
    s.push(
        opcode::AcceptMulti::new(types::Fd(lfd))
            .allocate_file_index(fixed)
            .flags(accept_flags(fixed))
            .build()
            .user_data(OP_ACCEPT),
    )?;
    let mut cqes: Vec<cqueue::Entry> = Vec::with_capacity(CQ_ENTRIES as usize);
    let mut fanout = Vec::new();
    loop {
        match s.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EINTR)
                    || e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        cqes.extend(s.ring.completion());
        for cqe in cqes.drain(..) {
            s.complete(cqe, lfd, &mut fanout)?;
        }
        s.bufs.publish();
    }
}

impl Server {
    /// Queue an SQE; when the SQ is full (a broadcast to more connections than SQ_ENTRIES),
    /// submit what is there first.
    fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn complete(
        &mut self,
        cqe: cqueue::Entry,
        lfd: i32,
        fanout: &mut Vec<Vec<u8>>,
    ) -> io::Result<()> {
        let (u, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
        let (op, slot, gen) = (
            u & 0xFF,
            ((u >> 8) & 0xFFFF_FFFF) as usize,
            (u >> 40) as u32,
        );
        match op {
            OP_ACCEPT => {
                if res < 0
                    && ![
                        libc::EMFILE,
                        libc::ENFILE,
                        libc::ECONNABORTED,
                        libc::EINTR,
                        libc::ENOMEM,
                        libc::ENOBUFS,
                    ]
                    .contains(&-res)
                {
                    // Not a passing shortage: re-arming would spin on the same error.
                    return Err(io::Error::from_raw_os_error(-res));
                }
                if res >= 0 {
                    self.open(res)?;
                }
                if !cqueue::more(flags) {
                    // The kernel ended the multishot accept (e.g. EMFILE): arm it again.
                    let e = opcode::AcceptMulti::new(types::Fd(lfd))
                        .allocate_file_index(self.fixed)
                        .flags(accept_flags(self.fixed));
                    self.push(e.build().user_data(OP_ACCEPT))?;
                }
            }
            OP_RECV => {
                let bid = cqueue::buffer_select(flags);
                if self.conn(slot, gen).is_none() {
                    if let Some(b) = bid {
                        self.bufs.put(b);
                    }
                    return Ok(());
                }
                let more = cqueue::more(flags);
                if res > 0 {
                    let b = bid.expect("a multishot receive completion carries its buffer");
                    let mut out = self.spare.pop().unwrap_or_default();
                    let c = self.conns[slot].as_mut().unwrap();
                    let flow = if c.closing {
                        Ok(Flow::Close) // a close is under way: what follows is ignored
                    } else {
                        c.ws.feed(
                            self.bufs.buf(b, res as usize),
                            self.broadcast,
                            &mut out,
                            fanout,
                        )
                    };
                    self.bufs.put(b);
                    if !out.is_empty() {
                        self.enqueue(slot, Chunk::Own(out))?;
                    } else {
                        self.spare.push(out);
                    }
                    if !matches!(flow, Ok(Flow::Open)) {
                        self.conns[slot].as_mut().unwrap().closing = true;
                    }
                    for frame in fanout.drain(..) {
                        self.fan_out(slot, frame)?;
                    }
                } else if res == -libc::ENOBUFS {
                    // Every provided buffer was in use this turn: re-armed below.
                } else {
                    // EOF, reset, or the shutdown() of our own close: mid-frame bytes are dropped.
                    // The queue is not cleared here: a send in flight points into its head;
                    // maybe_close drops it once that send has completed.
                    self.conns[slot].as_mut().unwrap().closing = true;
                }
                let c = self.conns[slot].as_mut().unwrap();
                c.recv_armed = more;
                if !more && !c.closing && res != 0 {
                    self.arm_recv(slot)?;
                }
                self.maybe_close(slot);
            }
            OP_SEND => {
                let Some(c) = self.conn(slot, gen) else {
                    return Ok(());
                };
                c.sending = false;
                if res < 0 {
                    c.queue.clear();
                    c.closing = true;
                } else {
                    c.sent += res as usize;
                    if c.sent >= c.queue.front().map_or(0, |h| h.bytes().len()) {
                        c.sent = 0;
                        if let Some(Chunk::Own(mut v)) = c.queue.pop_front() {
                            v.clear();
                            self.spare.push(v);
                        }
                    }
                }
                self.send_head(slot)?;
                self.maybe_close(slot);
            }
            OP_QUIET => {}
            _ => unreachable!("unknown user_data {u:#x}"),
        }
        Ok(())
    }

    fn conn(&mut self, slot: usize, gen: u32) -> Option<&mut Conn> {
        self.conns.get_mut(slot)?.as_mut().filter(|c| c.gen == gen)
    }

    fn open(&mut self, fd: i32) -> io::Result<()> {
        if self.fixed {
            // Nagle off through the ring: a registered file has no fd for setsockopt().
            let e = opcode::SetSockOpt::new(
                types::Fixed(fd as u32),
                libc::IPPROTO_TCP as u32,
                libc::TCP_NODELAY as u32,
                (&ONE as *const i32).cast(),
                4,
            );
            self.push(
                e.build()
                    .flags(squeue::Flags::SKIP_SUCCESS)
                    .user_data(OP_QUIET),
            )?;
        } else {
            crate::nodelay(fd);
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.next_gen = (self.next_gen + 1) & 0xFF_FFFF;
        self.conns[slot] = Some(Conn {
            fd,
            gen: self.next_gen,
            ws: Ws::default(),
            queue: VecDeque::new(),
            sent: 0,
            sending: false,
            recv_armed: false,
            closing: false,
            shut: false,
            shut_sent: false,
            slot_in_live: self.live.len(),
        });
        self.live.push(slot);
        self.arm_recv(slot)
    }

    fn arm_recv(&mut self, slot: usize) -> io::Result<()> {
        let c = self.conns[slot].as_mut().unwrap();
        c.recv_armed = true;
        let e = on_fd!(self.fixed, c.fd, |f| opcode::RecvMulti::new(f, BGID)
            .build())
        .user_data(ud(OP_RECV, slot, c.gen));
        self.push(e)
    }

    fn enqueue(&mut self, slot: usize, chunk: Chunk) -> io::Result<()> {
        let c = self.conns[slot].as_mut().unwrap();
        if c.shut {
            return Ok(());
        }
        // Coalesce replies into the tail buffer if that is not the one being sent (a send in
        // flight points into it: growing it could move it).
        let tail_free = !(c.sending && c.queue.len() == 1);
        if let (Chunk::Own(new), Some(Chunk::Own(tail)), true) =
            (&chunk, c.queue.back_mut(), tail_free)
        {
            {
                tail.extend_from_slice(new);
                if let Chunk::Own(mut v) = chunk {
                    v.clear();
                    self.spare.push(v);
                }
                return Ok(());
            }
        }
        c.queue.push_back(chunk);
        self.send_head(slot)
    }

    /// Start the send of the queue's head if none is in flight (one per connection: two sends
    /// in flight on one stream socket could complete partially out of order).
    fn send_head(&mut self, slot: usize) -> io::Result<()> {
        let c = self.conns[slot].as_mut().unwrap();
        if c.sending || c.shut {
            return Ok(());
        }
        let Some(head) = c.queue.front() else {
            return Ok(());
        };
        let b = &head.bytes()[c.sent..];
        let e = on_fd!(self.fixed, c.fd, |f| opcode::Send::new(
            f,
            b.as_ptr(),
            b.len() as u32
        )
        .flags(libc::MSG_NOSIGNAL)
        .build())
        .user_data(ud(OP_SEND, slot, c.gen));
        c.sending = true;
        self.push(e)
    }

    fn fan_out(&mut self, from: usize, frame: Vec<u8>) -> io::Result<()> {
        let frame: Rc<[u8]> = frame.into();
        for i in 0..self.live.len() {
            let to = self.live[i];
            if to != from && !self.conns[to].as_ref().unwrap().closing {
                self.enqueue(to, Chunk::Shared(frame.clone()))?;
            }
        }
        Ok(())
    }

    /// The close sequence: once a closing connection's queue is sent, shut the socket down
    /// (which ends its multishot receive); once no operation is in flight, close the fd and
    /// free the slot. Closing the fd earlier would not cancel the armed receive.
    fn maybe_close(&mut self, slot: usize) {
        let c = self.conns[slot].as_mut().unwrap();
        // A peer that is gone (recv ended) will not take the rest of the queue.
        if !c.closing || c.sending || (!c.queue.is_empty() && !c.shut && c.recv_armed) {
            return;
        }
        let (fd, recv_armed) = (c.fd, c.recv_armed);
        if !c.shut {
            c.shut = true;
            c.queue.clear();
        }
        // Only a receive still armed needs the shutdown: one that has ended must not get it,
        // least of all with --fixed, where the kernel runs a shutdown on a worker thread and the
        // close below could free the index for the next accept before the shutdown runs.
        if recv_armed && !c.shut_sent {
            c.shut_sent = true;
            if self.fixed {
                let e = opcode::Shutdown::new(types::Fixed(fd as u32), libc::SHUT_RDWR).build();
                // A full SQ only submits first; an error here would surface in the next enter.
                let _ = self.push(e.flags(squeue::Flags::SKIP_SUCCESS).user_data(OP_QUIET));
            } else {
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
        }
        if recv_armed {
            return;
        }
        let c = self.conns[slot].take().unwrap();
        if self.fixed {
            let e = opcode::Close::new(types::Fixed(c.fd as u32)).build();
            let _ = self.push(e.flags(squeue::Flags::SKIP_SUCCESS).user_data(OP_QUIET));
        } else {
            unsafe { libc::close(c.fd) };
        }
        self.live.swap_remove(c.slot_in_live);
        if let Some(&moved) = self.live.get(c.slot_in_live) {
            self.conns[moved].as_mut().unwrap().slot_in_live = c.slot_in_live;
        }
        self.free.push(slot);
    }
}

/// A socket accepted into the registered file table has no fd, so no close-on-exec flag (the
/// kernel refuses SOCK_CLOEXEC there with EINVAL).
fn accept_flags(fixed: bool) -> i32 {
    if fixed {
        libc::SOCK_NONBLOCK
    } else {
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    }
}
