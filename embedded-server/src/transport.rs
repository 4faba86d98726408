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
    /// Whether a read that returns less than the buffer holds means the socket is empty (plain
    /// TCP, whose short read also clears the readiness, see `try_read` below); a transport that
    /// answers false is read again after yielding the thread.
    fn short_read_drains(&self) -> bool {
        false
    }
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
    /// Whether a handshake of the transport's own (TLS) is still under way: a connection that
    /// fails now failed in that handshake, not in the upgrade request (the aborted-handshake
    /// metric tells them apart).
    fn handshaking(&self) -> bool {
        false
    }
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
    fn short_read_drains(&self) -> bool {
        true
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

#[cfg(test)]
mod tests {
    use super::Transport;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::time::timeout;

    #[tokio::test]
    async fn a_short_read_waits_for_the_next_event_instead_of_reading_again() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 64];
        c.write_all(b"hello").await.unwrap();
        s.readable().await.unwrap();
        assert_eq!(Transport::try_read(&s, &mut buf).unwrap(), 5);
        // Drained by a short read: readable() waits (tokio's own try_read leaves the socket
        // marked readable, and the next turn's recv() returns EAGAIN).
        assert!(
            timeout(Duration::from_millis(50), s.readable())
                .await
                .is_err(),
            "readable() answered at once after a short read"
        );
        // New data still wakes it ...
        c.write_all(b"more").await.unwrap();
        timeout(Duration::from_secs(10), s.readable())
            .await
            .expect("new data wakes the reader")
            .unwrap();
        assert_eq!(Transport::try_read(&s, &mut buf).unwrap(), 4);
        // ... and so does the peer's FIN, read as the end of the stream.
        drop(c);
        timeout(Duration::from_secs(10), s.readable())
            .await
            .expect("the FIN wakes the reader")
            .unwrap();
        assert_eq!(Transport::try_read(&s, &mut buf).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_full_read_leaves_the_socket_readable_for_the_rest() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        c.write_all(&[7u8; 100]).await.unwrap();
        let mut got = 0;
        let mut buf = [0u8; 30];
        while got < 100 {
            timeout(Duration::from_secs(10), s.readable())
                .await
                .expect("the rest is readable")
                .unwrap();
            match Transport::try_read(&s, &mut buf) {
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, 100);
    }
}
