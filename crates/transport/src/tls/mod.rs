//! TLS: the server's certificates and settings ([`ServerTls`]) and the
//! encrypted stream a connection is driven over ([`TlsStream`]).
//!
//! rustls in user space, with the `ring` provider: TLS 1.2 and 1.3 only, the
//! library's default (safe) cipher suites, ALPN `http/1.1`, resumption by
//! stateless tickets with a rotating key (TLS 1.2 and 1.3) and rustls's
//! session cache. Certificates are chosen by the name the client asks for
//! (SNI), the first one when it asks for none or for a name none covers (as
//! nginx's default server), and reloaded from disk on request
//! ([`ServerTls::reload`]) without touching the connections already open: a
//! bad new file leaves the old set in force.
//!
//! Kernel TLS would plug in behind [`TlsStream`]: after the handshake,
//! hand the session's keys to the socket (`TCP_ULP` "tls", then
//! `TLS_TX`/`TLS_RX`) and drive it as a plain socket, `sendfile` included.
//! This machine's kernel has no `tls` module (`TCP_ULP` fails with ENOENT),
//! so the user-space path is the one built and measured.

mod stream;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

pub use stream::{Carrier, TlsStream};

/// Where one certificate chain and its key come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// The chain, PEM: the server's certificate first, then intermediates.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: PathBuf,
    /// An OCSP response for the certificate, DER (`openssl ocsp -respout`),
    /// stapled to every handshake that asks (nginx's `ssl_stapling_file`);
    /// read again with the certificate on a reload, so a cron job that
    /// fetches a fresh one and sends `SIGHUP` keeps it current.
    pub ocsp: Option<PathBuf>,
}

/// What certificates a server presents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// Files on disk, chosen by SNI in this order (the first is the default).
    Files(Vec<CertFiles>),
    /// A throw-away certificate made at start, for `names` (the demo).
    SelfSigned(Vec<String>),
}

impl CertSource {
    /// The certificates the `--tls-*` flags name, as `modus serve` and
    /// `modus direct` read them: `None` without `--tls-listen` (`listening`);
    /// an error says which flag is missing, unpaired or out of place.
    pub fn from_flags(
        listening: bool,
        certs: Vec<PathBuf>,
        keys: Vec<PathBuf>,
        self_signed: bool,
    ) -> Result<Option<CertSource>, String> {
        if !listening {
            if !certs.is_empty() || !keys.is_empty() || self_signed {
                return Err("--tls-cert, --tls-key and --tls-self-signed need --tls-listen ADDR \
                    (where HTTPS is served)"
                    .into());
            }
            return Ok(None);
        }
        if self_signed {
            if !certs.is_empty() || !keys.is_empty() {
                return Err("--tls-self-signed makes its own certificate: drop --tls-cert/--tls-key, \
                    or drop --tls-self-signed to use them"
                    .into());
            }
            return Ok(Some(CertSource::SelfSigned(vec![
                "localhost".into(),
                "127.0.0.1".into(),
                "::1".into(),
            ])));
        }
        if certs.is_empty() || certs.len() != keys.len() {
            return Err(format!(
                "--tls-listen needs a certificate and its key: {} --tls-cert and {} --tls-key given; \
                 give them in pairs (or --tls-self-signed to try HTTPS)",
                certs.len(),
                keys.len()
            ));
        }
        Ok(Some(CertSource::Files(
            certs.into_iter().zip(keys).map(|(cert, key)| CertFiles { cert, key, ocsp: None }).collect(),
        )))
    }
}

impl CertSource {
    /// `--tls-ocsp`'s files, the i-th for the i-th certificate; fewer than
    /// the certificates leave the rest without one.
    pub fn with_ocsp(self, responses: Vec<PathBuf>) -> Result<CertSource, String> {
        if responses.is_empty() {
            return Ok(self);
        }
        match self {
            CertSource::Files(mut files) => {
                if responses.len() > files.len() {
                    return Err(format!(
                        "{} --tls-ocsp for {} --tls-cert: one OCSP response per certificate, in their order",
                        responses.len(),
                        files.len()
                    ));
                }
                for (file, ocsp) in files.iter_mut().zip(responses) {
                    file.ocsp = Some(ocsp);
                }
                Ok(CertSource::Files(files))
            }
            CertSource::SelfSigned(_) => {
                Err("--tls-ocsp staples a CA's answer about a --tls-cert: not for --tls-self-signed".into())
            }
        }
    }
}

/// A server's TLS: its rustls configuration and the certificates it
/// presents, which [`reload`](Self::reload) replaces.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    certs: Arc<Certs>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls").field("source", &self.certs.source).finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the certificates and builds the configuration; an error names
    /// the file and what is wrong with it.
    pub fn new(source: CertSource) -> Result<ServerTls, String> {
        let loaded = load(&source)?;
        let certs = Arc::new(Certs { source, current: RwLock::new(Arc::new(loaded)) });
        let provider = Arc::new(provider::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.ticketer = provider::Ticketer::new().map_err(|e| format!("TLS session tickets: {e}"))?;
        Ok(ServerTls { config: Arc::new(config), certs })
    }

    /// Starts the server side of a TLS session on an accepted socket.
    pub fn accept(&self, sock: std::net::TcpStream) -> io::Result<TlsStream> {
        TlsStream::new(sock, &self.config)
    }

    /// Starts the server side of a TLS session over another [`Carrier`]
    /// (the completion-driven socket of the `uring` model).
    pub fn accept_over<C: Carrier>(&self, carrier: C) -> io::Result<TlsStream<C>> {
        TlsStream::new(carrier, &self.config)
    }

    /// Reads the certificate files again: the new set serves the next
    /// handshakes; open connections keep theirs. On an error the set in
    /// force stays and the error says which file is wrong. Returns how many
    /// certificates are now presented.
    pub fn reload(&self) -> Result<usize, String> {
        let loaded = load(&self.certs.source)?;
        let count = loaded.keys.len();
        *self.certs.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
        Ok(count)
    }

    /// Whether [`reload`](Self::reload) can change anything (files, not a
    /// certificate made in memory).
    pub fn reloadable(&self) -> bool {
        matches!(self.certs.source, CertSource::Files(_))
    }
}

/// The certificates presented now, behind a lock only a reload writes.
#[derive(Debug)]
struct Certs {
    source: CertSource,
    current: RwLock<Arc<Loaded>>,
}

impl Certs {
    fn current(&self) -> Arc<Loaded> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[derive(Debug)]
struct Loaded {
    keys: Vec<Named>,
}

#[derive(Debug)]
struct Named {
    key: Arc<CertifiedKey>,
}

impl Named {
    /// Whether the certificate is valid for `name` (its subject
    /// alternative names, wildcards included, as a client would check).
    fn covers(&self, name: &ServerName<'_>) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(&self.key.cert[0]) else { return false };
        cert.verify_is_valid_for_subject_name(name).is_ok()
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current();
        let first = current.keys.first()?;
        if current.keys.len() > 1 {
            if let Some(name) = hello.server_name().and_then(|n| ServerName::try_from(n).ok()) {
                if let Some(named) = current.keys.iter().find(|k| k.covers(&name)) {
                    return Some(named.key.clone());
                }
            }
        }
        Some(first.key.clone())
    }
}

fn load(source: &CertSource) -> Result<Loaded, String> {
    let provider = provider::default_provider();
    let keys = match source {
        CertSource::Files(files) => {
            let mut keys = Vec::with_capacity(files.len());
            for f in files {
                let chain = read_chain(&f.cert)?;
                let key = read_key(&f.key)?;
                let signing = provider
                    .key_provider
                    .load_private_key(key)
                    .map_err(|e| format!("{}: not a usable private key: {e}", f.key.display()))?;
                let mut key = CertifiedKey::new(chain, signing);
                key.keys_match().map_err(|_| {
                    format!("{} does not hold the private key of {}", f.key.display(), f.cert.display())
                })?;
                if let Some(ocsp) = &f.ocsp {
                    let response = read_file(ocsp)?;
                    if response.first() != Some(&0x30) {
                        return Err(format!("{}: not a DER OCSP response", ocsp.display()));
                    }
                    key.ocsp = Some(response);
                }
                keys.push(Named { key: Arc::new(key) });
            }
            keys
        }
        CertSource::SelfSigned(names) => {
            let made = rcgen::generate_simple_self_signed(names.clone())
                .map_err(|e| format!("making a self-signed certificate: {e}"))?;
            let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
            let signing = provider.key_provider.load_private_key(key).map_err(|e| format!("TLS: {e}"))?;
            let chain = vec![made.cert.der().clone()];
            vec![Named { key: Arc::new(CertifiedKey::new(chain, signing)) }]
        }
    };
    if keys.is_empty() {
        return Err("TLS needs a certificate: --tls-cert FILE --tls-key FILE, or --tls-self-signed".into());
    }
    Ok(Loaded { keys })
}

/// A certificate or key file's bytes: by the keeper when the server gave
/// up root and it keeps that file (`keeper.rs`), else read here.
fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    crate::keeper::read(path)
        .unwrap_or_else(|| std::fs::read(path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_file(path)?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if chain.is_empty() {
        return Err(format!("{}: no CERTIFICATE in it (a PEM file is expected)", path.display()));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(&read_file(path)?).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("{}: no PRIVATE KEY in it (PEM: PKCS#8, RSA or EC)", path.display())
        }
        e => pem_error(path, e),
    })
}

fn pem_error(path: &Path, e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(e) => format!("{}: {e}", path.display()),
        e => format!("{}: not PEM: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests;
