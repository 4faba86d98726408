//! TLS in process (rustls), as a [`Transport`]: the same readiness-driven connection code runs
//! over it. The guide's advice stands: for high-churn clients terminate TLS at a proxy in front
//! (handshakes are the cost); for long-lived connections in-process TLS is fine.

use crate::transport::Transport;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::future::Future;
use std::io::{self, IoSlice, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;

/// A rustls server configuration, shared by every connection.
pub type Config = Arc<rustls::ServerConfig>;

/// Load a PEM certificate chain and private key into a rustls server config.
pub fn load(cert: &Path, key: &Path) -> Result<Config, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no certificate in the file (expected PEM \"BEGIN CERTIFICATE\")",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("{}: no usable private key: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not match: {e}"))?;
    Ok(Arc::new(cfg))
}

/// A TLS session over a TCP stream, as a `Transport` (internal: not part of the stable API).
#[doc(hidden)]
pub struct TlsStream {
    tcp: TcpStream,
    tls: Mutex<rustls::ServerConnection>,
    /// Decrypted bytes wait in rustls: a read can progress without the socket being readable.
    plaintext: AtomicBool,
}

impl TlsStream {
    /// Start the server side of a TLS session on `tcp`.
    pub fn new(tcp: TcpStream, cfg: Arc<rustls::ServerConfig>) -> io::Result<TlsStream> {
        let tls = rustls::ServerConnection::new(cfg).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            tls: Mutex::new(tls),
            plaintext: AtomicBool::new(false),
        })
    }
}

/// `Read`/`Write` over the socket's non-blocking calls, for rustls' read_tls/write_tls.
struct Sock<'a>(&'a TcpStream);

impl Read for Sock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn flush_tls(tls: &mut rustls::ServerConnection, tcp: &TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        tls.write_tls(&mut Sock(tcp))?;
    }
    Ok(())
}

impl Transport for TlsStream {
    async fn readable(&self) -> io::Result<()> {
        if self.plaintext.load(Relaxed) {
            return Ok(());
        }
        self.tcp.readable().await
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
        self.tcp.writable()
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut tls = self.tls.lock().unwrap();
        loop {
            match tls.reader().read(buf) {
                Ok(n) => {
                    let more = tls
                        .process_new_packets()
                        .map(|s| s.plaintext_bytes_to_read() > 0)
                        .unwrap_or(false);
                    self.plaintext.store(more, Relaxed);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            self.plaintext.store(false, Relaxed);
            match tls.read_tls(&mut Sock(&self.tcp)) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    let state = tls.process_new_packets().map_err(|e| {
                        // Tell the peer why before failing (best effort).
                        let _ = flush_tls(&mut tls, &self.tcp);
                        io::Error::new(io::ErrorKind::InvalidData, e)
                    })?;
                    // Handshake messages and alerts go out as soon as they exist.
                    match flush_tls(&mut tls, &self.tcp) {
                        Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                        _ => {}
                    }
                    if state.peer_has_closed() && state.plaintext_bytes_to_read() == 0 {
                        return Ok(0);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut tls = self.tls.lock().unwrap();
        // rustls buffers at most its limit (64 KiB by default) of records: that is the socket
        // "taking" data; beyond it we report WouldBlock and the caller keeps its queue.
        match flush_tls(&mut tls, &self.tcp) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        let n = tls.writer().write_vectored(bufs)?;
        match flush_tls(&mut tls, &self.tcp) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn wants_flush(&self) -> bool {
        self.tls.lock().unwrap().wants_write()
    }

    fn try_flush(&self) -> io::Result<()> {
        flush_tls(&mut self.tls.lock().unwrap(), &self.tcp)
    }

    fn handshaking(&self) -> bool {
        self.tls.lock().unwrap().is_handshaking()
    }

    fn shutdown_write(&self) {
        let mut tls = self.tls.lock().unwrap();
        tls.send_close_notify();
        let _ = flush_tls(&mut tls, &self.tcp);
        drop(tls);
        self.tcp.shutdown_write();
    }
}
