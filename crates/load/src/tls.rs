//! HTTPS targets: the rustls client configuration `modus load` (and the
//! test clients) use.
//!
//! A certificate is checked against the roots of `--cacert FILE`, or the
//! system's bundle (`/etc/ssl/certs/ca-certificates.crt`) by default;
//! `--insecure` accepts any (a self-signed test server). Every connection
//! makes a full handshake unless `--tls-resume` keeps session tickets, so
//! `--close` measures what a server's handshakes cost.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The system's CA bundle (Debian's, and most distributions').
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Whose certificates a client accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Those that chain to the CA certificates in this PEM file.
    Roots(std::path::PathBuf),
    /// The system's CA bundle.
    System,
    /// Any certificate (`--insecure`): self-signed test servers.
    Anything,
}

/// A client configuration: TLS 1.2 and 1.3, ALPN `http/1.1`, resumption
/// only if `resume`.
pub fn client_config(verify: &Verify, resume: bool) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let mut config = match verify {
        Verify::Anything => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(TrustAnything(provider)))
            .with_no_client_auth(),
        Verify::Roots(path) => builder.with_root_certificates(roots(path)?).with_no_client_auth(),
        Verify::System => {
            builder.with_root_certificates(roots(Path::new(SYSTEM_ROOTS))?).with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        config.resumption = Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// The name a client asks for (SNI) and checks the certificate against.
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string()).with_context(|| format!("{host:?} is not a host name for TLS"))
}

fn roots(path: &Path) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading CA certificates from {}", path.display()))?;
    for cert in certs {
        let cert = cert.with_context(|| format!("{}: not PEM", path.display()))?;
        store
            .add(cert)
            .with_context(|| format!("{}: a certificate that cannot be a root", path.display()))?;
    }
    if store.is_empty() {
        bail!("{}: no CERTIFICATE in it", path.display());
    }
    Ok(store)
}

/// Accepts any certificate, still checking the handshake's signatures.
#[derive(Debug)]
struct TrustAnything(Arc<CryptoProvider>);

impl ServerCertVerifier for TrustAnything {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
