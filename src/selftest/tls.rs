//! The load generator's TLS client: which servers it trusts (`--ca`, or `--insecure`), whether
//! its simulated clients resume sessions (`--tls-resume`), and what each handshake was. The
//! stream itself is the embedded server's readiness-driven `TlsStream`, so an idle wss://
//! connection costs the generator no read buffer either.

use serde::{Deserialize, Serialize};

/// How the generator's connections do TLS (a `wss://` target), as the orchestrator hands it
/// to every generator process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsClient {
    /// PEM certificates to trust (`--ca`): the CA that signed the server's certificate.
    pub ca_pem: Option<String>,
    /// `--insecure`: accept any certificate chain, still checking the handshake's signatures.
    pub insecure: bool,
    /// `--tls-resume`: each simulated client keeps its last session and resumes it on its next
    /// connection. Off, every handshake is a full one: the cost a reconnect storm pays.
    pub resume: bool,
}

/// What one handshake was: the figures a scenario's `tls` block counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    pub version: String,
    pub cipher: String,
    /// The scheme the server signed with (None on a resumed handshake: nothing is signed).
    pub signature_scheme: Option<String>,
    pub resumed: bool,
}

#[cfg(feature = "tls")]
pub use with_tls::{describe, generate, Client, Generated, Session};

#[cfg(not(feature = "tls"))]
pub use without_tls::{Client, Session};

#[cfg(feature = "tls")]
mod with_tls {
    use super::{Handshake, TlsClient};
    use embedded_server::tls::rustls;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::{ClientSessionStore, Resumption, Tls12ClientSessionValue};
    use rustls::client::{Tls13ClientSessionValue, WebPkiServerVerifier};
    use rustls::crypto::WebPkiSupportedAlgorithms;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, NamedGroup, SignatureScheme};
    use std::sync::{Arc, Mutex};

    /// A generator process's TLS client: the configuration every connection starts from.
    #[derive(Clone)]
    pub struct Client {
        base: Arc<rustls::ClientConfig>,
        resume: bool,
        /// The scheme the last full handshake was signed with (one server: one answer).
        scheme: Arc<Mutex<Option<SignatureScheme>>>,
    }

    /// One simulated client's TLS state across its connections: its own one-slot session
    /// store when it resumes (rustls' shared in-memory cache is keyed by server name only,
    /// so clients would take each other's single-use tickets).
    #[derive(Clone)]
    pub struct Session(pub(in crate::selftest) Arc<rustls::ClientConfig>);

    impl Client {
        pub fn new(t: &TlsClient) -> Result<Client, String> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let scheme = Arc::new(Mutex::new(None));
            let inner: Arc<dyn ServerCertVerifier> = match (&t.ca_pem, t.insecure) {
                (Some(pem), _) => {
                    let mut roots = rustls::RootCertStore::empty();
                    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                        let c = c.map_err(|e| format!("--ca: not a PEM certificate file: {e}"))?;
                        roots
                            .add(c)
                            .map_err(|e| format!("--ca: a certificate cannot be trusted: {e}"))?;
                    }
                    if roots.is_empty() {
                        return Err("--ca: no certificate in the file (expected PEM \
                                    \"BEGIN CERTIFICATE\")"
                            .into());
                    }
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("--ca: {e}"))?
                }
                (None, true) => Arc::new(AnyChain(provider.signature_verification_algorithms)),
                (None, false) => return Err(NO_TRUST.into()),
            };
            let verifier = Arc::new(Recording {
                inner,
                scheme: scheme.clone(),
            });
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            // A proxy's TLS listener may offer ALPN (HAProxy's `alpn http/1.1`).
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            cfg.resumption = Resumption::disabled();
            Ok(Client {
                base: Arc::new(cfg),
                resume: t.resume,
                scheme,
            })
        }

        /// A new simulated client's session state.
        pub fn session(&self) -> Session {
            if !self.resume {
                return Session(self.base.clone());
            }
            let mut cfg = (*self.base).clone();
            cfg.resumption = Resumption::store(Arc::new(OneSlot::default()));
            Session(Arc::new(cfg))
        }

        /// The scheme the server signed its last full handshake with.
        pub fn signature_scheme(&self) -> Option<String> {
            self.scheme.lock().unwrap().map(|s| format!("{s:?}"))
        }
    }

    /// What the handshake on `s` was.
    pub fn describe(s: &embedded_server::tls::TlsStream) -> Handshake {
        s.session(|c| Handshake {
            version: c
                .protocol_version()
                .map_or("unknown".into(), |v| format!("{v:?}")),
            cipher: c
                .negotiated_cipher_suite()
                .map_or("unknown".into(), |s| format!("{:?}", s.suite())),
            signature_scheme: None,
            resumed: c.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        })
    }

    /// A CA made for one run and a server certificate it signed, in PEM.
    pub struct Generated {
        pub ca_pem: String,
        pub cert_pem: String,
        pub key_pem: String,
    }

    /// A CA and a server certificate for `names` (DNS names or addresses), ECDSA P-256 (ring
    /// cannot make RSA keys; a site's RSA-2048 key costs the server several times more per
    /// full handshake, which the report's signature scheme shows). webpki refuses a CA
    /// certificate as the server's own, hence two.
    pub fn generate(names: &[&str]) -> Result<Generated, String> {
        let e = |e: rcgen::Error| format!("cannot make a test certificate: {e}");
        let ca_key = rcgen::KeyPair::generate().map_err(e)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wstune self-test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(e)?;
        let key = rcgen::KeyPair::generate().map_err(e)?;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .map_err(e)?
            .signed_by(&key, &ca)
            .map_err(e)?;
        Ok(Generated {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    const NO_TRUST: &str = "wss:// needs --ca FILE (the PEM certificate of the CA that signed \
                            the server's certificate) or --insecure (accept any certificate)";

    /// One session per simulated client: its last TLS 1.2 session, its last TLS 1.3 ticket.
    #[derive(Debug, Default)]
    struct OneSlot {
        kx: Mutex<Option<NamedGroup>>,
        tls12: Mutex<Option<Tls12ClientSessionValue>>,
        tls13: Mutex<Option<Tls13ClientSessionValue>>,
    }

    impl ClientSessionStore for OneSlot {
        fn set_kx_hint(&self, _: ServerName<'static>, group: NamedGroup) {
            *self.kx.lock().unwrap() = Some(group);
        }
        fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
            *self.kx.lock().unwrap()
        }
        fn set_tls12_session(&self, _: ServerName<'static>, v: Tls12ClientSessionValue) {
            *self.tls12.lock().unwrap() = Some(v);
        }
        fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
            self.tls12.lock().unwrap().clone()
        }
        fn remove_tls12_session(&self, _: &ServerName<'static>) {
            *self.tls12.lock().unwrap() = None;
        }
        fn insert_tls13_ticket(&self, _: ServerName<'static>, v: Tls13ClientSessionValue) {
            *self.tls13.lock().unwrap() = Some(v);
        }
        fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
            self.tls13.lock().unwrap().take()
        }
    }

    /// `--insecure`: any chain, for any name, is accepted, but the handshake must still be
    /// signed by the key of the certificate the server sent (a man in the middle without it
    /// fails), as rustls checks it for a trusted chain.
    #[derive(Debug)]
    struct AnyChain(WebPkiSupportedAlgorithms);

    impl ServerCertVerifier for AnyChain {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_schemes()
        }
    }

    /// A verifier that notes the scheme the server signed with (the report shows it beside
    /// handshakes per core: an RSA-2048 key costs the server several times a P-256 one).
    #[derive(Debug)]
    struct Recording {
        inner: Arc<dyn ServerCertVerifier>,
        scheme: Arc<Mutex<Option<SignatureScheme>>>,
    }

    impl ServerCertVerifier for Recording {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            self.inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            *self.scheme.lock().unwrap() = Some(dss.scheme);
            self.inner.verify_tls12_signature(message, cert, dss)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            *self.scheme.lock().unwrap() = Some(dss.scheme);
            self.inner.verify_tls13_signature(message, cert, dss)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    }
}

#[cfg(not(feature = "tls"))]
mod without_tls {
    use super::TlsClient;

    /// Never made: this build has no TLS.
    #[derive(Clone)]
    pub enum Client {}

    #[derive(Clone)]
    pub enum Session {}

    impl Client {
        pub fn new(_: &TlsClient) -> Result<Client, String> {
            Err(
                "wss://: this wstune was built without the `tls` feature; rebuild it with \
                 default features to measure a TLS server"
                    .into(),
            )
        }
        pub fn session(&self) -> Session {
            match *self {}
        }
        pub fn signature_scheme(&self) -> Option<String> {
            match *self {}
        }
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;
    use embedded_server::tls::rustls;
    use embedded_server::tls::{Resumption, TlsStream};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::sync::Arc;
    use tokio::net::{TcpListener, TcpStream};

    /// A server answering handshakes with `cfg` on a loopback port, for `n` connections.
    async fn server(cfg: embedded_server::tls::Config, n: usize) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..n {
                let (tcp, _) = l.accept().await.unwrap();
                let s = TlsStream::new(tcp, cfg.clone()).unwrap();
                tokio::spawn(async move {
                    use embedded_server::transport::Transport;
                    let mut buf = [0u8; 64];
                    loop {
                        if s.readable().await.is_err() {
                            return;
                        }
                        match s.try_read(&mut buf) {
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            _ => return,
                        }
                    }
                });
            }
        });
        addr
    }

    async fn handshake(addr: std::net::SocketAddr, s: &Session) -> std::io::Result<Handshake> {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost").unwrap();
        let c = TlsStream::client(tcp, s.0.clone(), name)?;
        c.handshake().await?;
        // A TLS 1.3 ticket arrives after the handshake: read until it is in.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(200), async {
            use embedded_server::transport::Transport;
            loop {
                c.readable().await.unwrap();
                let _ = c.try_read(&mut [0u8; 16]);
            }
        })
        .await;
        let h = describe(&c);
        embedded_server::transport::Transport::shutdown_write(&c);
        Ok(h)
    }

    fn chain_and_key(g: &Generated) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let certs = CertificateDer::pem_slice_iter(g.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        (
            certs,
            PrivateKeyDer::from_pem_slice(g.key_pem.as_bytes()).unwrap(),
        )
    }

    #[tokio::test]
    async fn each_simulated_client_resumes_its_own_session_with_tls_resume() {
        let g = generate(&["localhost"]).unwrap();
        let (chain, key) = chain_and_key(&g);
        let cfg = embedded_server::tls::server_config(chain, key, Resumption::Tickets).unwrap();
        let addr = server(cfg, 6).await;
        let trust = |resume| TlsClient {
            ca_pem: Some(g.ca_pem.clone()),
            insecure: false,
            resume,
        };
        // Two clients, each twice: each second connection resumes its own session.
        let c = Client::new(&trust(true)).unwrap();
        let (a, b) = (c.session(), c.session());
        let kinds = [
            handshake(addr, &a).await.unwrap().resumed,
            handshake(addr, &b).await.unwrap().resumed,
            handshake(addr, &a).await.unwrap().resumed,
            handshake(addr, &b).await.unwrap().resumed,
        ];
        assert_eq!(kinds, [false, false, true, true]);
        assert_eq!(
            c.signature_scheme().as_deref(),
            Some("ECDSA_NISTP256_SHA256")
        );
        // Without --tls-resume every handshake is a full one.
        let c = Client::new(&trust(false)).unwrap();
        let s = c.session();
        assert!(!handshake(addr, &s).await.unwrap().resumed);
        assert!(!handshake(addr, &s).await.unwrap().resumed);
    }

    /// A server certificate with another key than the one that signs the handshake: what a
    /// man in the middle holding only the certificate would send.
    #[derive(Debug)]
    struct Mismatched(Arc<rustls::sign::CertifiedKey>);

    impl rustls::server::ResolvesServerCert for Mismatched {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.clone())
        }
    }

    #[tokio::test]
    async fn insecure_accepts_any_chain_but_not_a_handshake_signed_with_another_key() {
        let (g, other) = (
            generate(&["localhost"]).unwrap(),
            generate(&["localhost"]).unwrap(),
        );
        let insecure = Client::new(&TlsClient {
            ca_pem: None,
            insecure: true,
            resume: false,
        })
        .unwrap();
        // Any chain: a CA it was never given.
        let (chain, key) = chain_and_key(&g);
        let good = embedded_server::tls::server_config(chain.clone(), key, Resumption::Off);
        let addr = server(good.unwrap(), 1).await;
        assert!(handshake(addr, &insecure.session()).await.is_ok());
        // But the handshake must be signed by the certificate's key.
        let provider = rustls::crypto::ring::default_provider();
        let (_, wrong_key) = chain_and_key(&other);
        let signer = provider.key_provider.load_private_key(wrong_key).unwrap();
        let ck = Arc::new(rustls::sign::CertifiedKey::new(chain, signer));
        let bad = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Mismatched(ck)));
        let addr = server(Arc::new(bad), 1).await;
        let e = handshake(addr, &insecure.session()).await.unwrap_err();
        assert!(e.to_string().contains("BadSignature"), "{e}");
    }

    #[test]
    fn trust_must_be_given_and_a_ca_file_must_hold_a_certificate() {
        let none = Client::new(&TlsClient::default()).err().unwrap();
        assert!(
            none.contains("--ca FILE") && none.contains("--insecure"),
            "{none}"
        );
        let empty = Client::new(&TlsClient {
            ca_pem: Some("not a certificate\n".into()),
            ..TlsClient::default()
        })
        .err()
        .unwrap();
        assert!(empty.contains("no certificate"), "{empty}");
    }
}
