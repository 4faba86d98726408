//! The byte stream under a connection: readiness plus non-blocking reads and vectored writes.
//! Plain TCP is `tokio::net::TcpStream` itself; TLS wraps a rustls session around one (tls.rs).
//! Working on readiness (not `AsyncRead`) is what lets every connection on a worker share one
//! receive buffer instead of owning one: an idle connection holds no read buffer at all.

use std::future::Future;
use std::io::{self, IoSlice};
use tokio::net::TcpStream;

/// A non-blocking byte stream a connection is served over (plain TCP, or TLS).
pub trait Transport: Send + Sync + 'static {
    /// Wait until a read may make progress.
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Wait until a write may make progress.
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Read what is there; `WouldBlock` when nothing is; `Ok(0)` at end of stream.
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Write what the socket takes now; `WouldBlock` when it takes nothing.
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    /// Whether bytes the transport itself buffered (TLS records) still wait to go out.
    fn wants_flush(&self) -> bool {
        false
    }
    /// Push those bytes; `WouldBlock` when the socket is full.
    fn try_flush(&self) -> io::Result<()> {
        Ok(())
    }
    /// Half-close: no more writes (sends FIN after what is queued).
    fn shutdown_write(&self);
    /// The socket itself, when bytes written to it go to the peer as they are (plain TCP, not
    /// TLS): other threads may then write a frame straight to the kernel instead of queueing it
    /// and waking the connection's task (see `Shared::push`).
    fn direct_fd(&self) -> Option<i32> {
        None
    }
}

impl Transport for TcpStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        TcpStream::readable(self)
    }
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
        TcpStream::writable(self)
    }
    /// A read that fills less than `buf` drained the socket, so it also tells tokio the socket
    /// is no longer readable: the connection's next `readable()` then waits for the kernel's next
    /// event instead of answering at once and costing a second `recv` that returns EAGAIN (one
    /// of the three syscalls per echo measured before; tokio's own `AsyncRead` does the same).
    /// No event is lost: tokio clears the readiness only if no new event arrived since it was
    /// read, and never clears a closed state (a FIN still wakes the connection).
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut short = 0;
        let r = self.try_io(tokio::io::Interest::READABLE, || {
            use std::io::Read;
            let n = (&*socket2::SockRef::from(self)).read(buf)?;
            if n > 0 && n < buf.len() {
                short = n;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && short > 0 => Ok(short),
            r => r,
        }
    }
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        TcpStream::try_write_vectored(self, bufs)
    }
    fn shutdown_write(&self) {
        let sock = socket2::SockRef::from(self);
        let _ = sock.shutdown(std::net::Shutdown::Write);
    }
    #[cfg(unix)]
    fn direct_fd(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        Some(self.as_raw_fd())
    }
}
