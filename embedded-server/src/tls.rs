//! TLS in process (rustls), as a `Transport`: the same readiness-driven connection code runs
//! over it. The guide's advice stands: for high-churn clients terminate TLS at a proxy in front
//! (handshakes are the cost); for long-lived connections in-process TLS is fine.
//!
//! The stream is also the client side the `wstune` load generator connects with: the same
//! readiness contract keeps its idle connections free of read buffers (tokio-rustls' `AsyncRead`
//! model would not, and its defaults pull in a second crypto provider).

/// The rustls this crate is built with, so a user of both names one version.
pub use rustls;

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

/// How a server lets clients resume a TLS session instead of a full handshake (the cost a
/// reconnect storm pays per client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resumption {
    /// Stateless tickets (TLS 1.2 and 1.3), keys rotated every 6 hours. rustls' own default
    /// has no ticketer, so a TLS 1.3 client (which resumes only by ticket) never resumed.
    /// Several processes serving one port share keys with the `shared_tickets` module.
    #[default]
    Tickets,
    /// A server-side cache of this many sessions (TLS 1.2 session ids, TLS 1.3 stateful
    /// tickets): bounded memory, lost on restart, not shared between processes.
    Cache(usize),
    /// Every handshake is a full one.
    Off,
}

/// Load a PEM certificate chain and private key into a rustls server config, with ticket
/// resumption (see [`load_with`]).
pub fn load(cert: &Path, key: &Path) -> Result<Config, String> {
    load_with(cert, key, Resumption::default())
}

/// Load a PEM certificate chain and private key into a rustls server config.
pub fn load_with(cert: &Path, key: &Path, resumption: Resumption) -> Result<Config, String> {
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
    server_config(certs, key, resumption)
}

/// A rustls server config for a chain and key already in memory (a generated self-test
/// certificate).
pub fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    resumption: Resumption,
) -> Result<Config, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not match: {e}"))?;
    match resumption {
        Resumption::Tickets => {
            cfg.ticketer = rustls::crypto::ring::Ticketer::new()
                .map_err(|e| format!("cannot make a session ticket key: {e}"))?;
        }
        Resumption::Cache(n) => {
            cfg.session_storage = rustls::server::ServerSessionMemoryCache::new(n.max(1));
        }
        Resumption::Off => {
            cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            cfg.send_tls13_tickets = 0;
        }
    }
    Ok(Arc::new(cfg))
}

/// A TLS session over a TCP stream, as a `Transport`, either side (internal: not part of the
/// stable API).
#[doc(hidden)]
pub struct TlsStream {
    tcp: TcpStream,
    tls: Mutex<rustls::Connection>,
    /// Decrypted bytes wait in rustls: a read can progress without the socket being readable.
    plaintext: AtomicBool,
}

impl TlsStream {
    /// Start the server side of a TLS session on `tcp`.
    pub fn new(tcp: TcpStream, cfg: Arc<rustls::ServerConfig>) -> io::Result<TlsStream> {
        let tls = rustls::ServerConnection::new(cfg).map_err(io::Error::other)?;
        Ok(TlsStream::over(tcp, tls.into()))
    }

    /// Start the client side of a TLS session on `tcp`, to `name` (SNI, and the name the
    /// server's certificate must carry). [`TlsStream::handshake`] then completes it.
    pub fn client(
        tcp: TcpStream,
        cfg: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> io::Result<TlsStream> {
        let tls = rustls::ClientConnection::new(cfg, name).map_err(io::Error::other)?;
        Ok(TlsStream::over(tcp, tls.into()))
    }

    fn over(tcp: TcpStream, tls: rustls::Connection) -> TlsStream {
        TlsStream {
            tcp,
            tls: Mutex::new(tls),
            plaintext: AtomicBool::new(false),
        }
    }

    /// Drive the handshake to its end on readiness: flights out when the socket is writable,
    /// the peer's in when it is readable. A server's stream needs no call (its first read
    /// drives it); a client calls this before it writes, so the time it takes is the
    /// handshake's alone.
    pub async fn handshake(&self) -> io::Result<()> {
        loop {
            let (handshaking, wants_write) = {
                let tls = self.tls.lock().unwrap();
                (tls.is_handshaking(), tls.wants_write())
            };
            if wants_write {
                self.tcp.writable().await?;
                match self.try_flush() {
                    Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                    _ => continue,
                }
            }
            if !handshaking {
                return Ok(());
            }
            self.tcp.readable().await?;
            let mut tls = self.tls.lock().unwrap();
            match tls.read_tls(&mut Sock(&self.tcp)) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the connection during the TLS handshake",
                    ))
                }
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // Tell the peer why before failing (best effort).
                        let _ = flush_tls(&mut tls, &self.tcp);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Look at the session (its protocol version, cipher suite, whether it was resumed).
    pub fn session<R>(&self, f: impl FnOnce(&rustls::Connection) -> R) -> R {
        f(&self.tls.lock().unwrap())
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

fn flush_tls(tls: &mut rustls::Connection, tcp: &TcpStream) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use tokio::net::TcpListener;

    /// A CA and a server certificate it signed for localhost and 127.0.0.1 (webpki refuses a
    /// CA certificate as the server's own, so a self-signed one would not do): (CA, chain, key).
    fn ca_and_leaf() -> (
        CertificateDer<'static>,
        Vec<CertificateDer<'static>>,
        PrivateKeyDer<'static>,
    ) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&leaf_key, &ca)
            .unwrap();
        let key = PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
        (ca.der().clone(), vec![leaf.der().clone()], key)
    }

    fn client_config(ca: CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.resumption = rustls::client::Resumption::in_memory_sessions(4);
        Arc::new(cfg)
    }

    async fn read_some(s: &TlsStream, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < want {
            s.readable().await.unwrap();
            match s.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        got
    }

    async fn write_all(s: &TlsStream, bytes: &[u8]) {
        let mut done = 0;
        while done < bytes.len() {
            match s.try_write_vectored(&[IoSlice::new(&bytes[done..])]) {
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.writable().await.unwrap(),
                Err(e) => panic!("{e}"),
            }
        }
        while s.wants_flush() {
            s.writable().await.unwrap();
            let _ = s.try_flush();
        }
    }

    #[tokio::test]
    async fn a_client_and_a_server_stream_talk_and_the_second_connection_resumes() {
        let (ca, chain, key) = ca_and_leaf();
        let server = server_config(chain, key, Resumption::Tickets).unwrap();
        let client = client_config(ca);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let server = server.clone();
            let accept = async {
                let (tcp, _) = l.accept().await.unwrap();
                let s = TlsStream::new(tcp, server).unwrap();
                assert_eq!(read_some(&s, 4).await, b"ping");
                write_all(&s, b"pong").await;
                // The client's close_notify ends the stream.
                assert!(read_some(&s, 1).await.is_empty());
            };
            let connect = async {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let name = ServerName::try_from("localhost").unwrap();
                let c = TlsStream::client(tcp, client.clone(), name).unwrap();
                c.handshake().await.unwrap();
                assert!(!c.handshaking());
                write_all(&c, b"ping").await;
                assert_eq!(read_some(&c, 4).await, b"pong");
                let kind = c.session(|s| s.handshake_kind());
                c.shutdown_write();
                kind
            };
            let ((), kind) = tokio::join!(accept, connect);
            kinds.push(kind);
        }
        assert_eq!(
            kinds,
            [
                Some(rustls::HandshakeKind::Full),
                Some(rustls::HandshakeKind::Resumed)
            ]
        );
    }

    #[tokio::test]
    async fn a_server_without_resumption_makes_every_handshake_a_full_one() {
        let (ca, chain, key) = ca_and_leaf();
        let server = server_config(chain, key, Resumption::Off).unwrap();
        let client = client_config(ca);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        for _ in 0..2 {
            let server = server.clone();
            let accept = async {
                let (tcp, _) = l.accept().await.unwrap();
                let s = TlsStream::new(tcp, server).unwrap();
                assert_eq!(read_some(&s, 4).await, b"ping");
                write_all(&s, b"pong").await;
            };
            let connect = async {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let name = ServerName::try_from("127.0.0.1").unwrap();
                let c = TlsStream::client(tcp, client.clone(), name).unwrap();
                c.handshake().await.unwrap();
                write_all(&c, b"ping").await;
                assert_eq!(read_some(&c, 4).await, b"pong");
                c.session(|s| s.handshake_kind())
            };
            let ((), kind) = tokio::join!(accept, connect);
            assert_eq!(kind, Some(rustls::HandshakeKind::Full));
        }
    }

    #[tokio::test]
    async fn a_client_refuses_a_certificate_its_ca_did_not_sign() {
        let (_, chain, key) = ca_and_leaf();
        let (other_ca, _, _) = ca_and_leaf();
        let server = server_config(chain, key, Resumption::Tickets).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accept = async {
            let (tcp, _) = l.accept().await.unwrap();
            let s = TlsStream::new(tcp, server).unwrap();
            // The client's alert ends the server's handshake with an error.
            loop {
                s.readable().await.unwrap();
                match s.try_read(&mut [0u8; 64]) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    r => break r.map(|_| ()),
                }
            }
        };
        let connect = async {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from("localhost").unwrap();
            let c = TlsStream::client(tcp, client_config(other_ca), name).unwrap();
            c.handshake().await.unwrap_err()
        };
        let (served, e) = tokio::join!(
            tokio::time::timeout(std::time::Duration::from_secs(10), accept),
            connect
        );
        // Both CAs carry the same (empty) name: webpki finds the other one and its signature fails.
        assert!(e.to_string().contains("invalid peer certificate"), "{e}");
        assert!(
            served.unwrap().is_err(),
            "the server saw the client's alert"
        );
    }
}
