//! TLS to PostgreSQL (SPEC W5): `sslmode` and `sslrootcert` from the connection string, with
//! rustls and its ring provider (the one ureq already brings).
//!
//! The `postgres` crate knows only `disable`, `prefer` and `require` and no `sslrootcert`, so
//! this module takes both out of the connection string (URL query or key=value form) and
//! builds the connector itself, with libpq's meanings: `prefer` and `require` encrypt without
//! verifying (unless `sslrootcert` is given, then the chain is verified as with `verify-ca`),
//! `verify-ca` verifies the chain against `sslrootcert`, `verify-full` also the host name.
//! It never logs certificates or keys and has no switch that skips a requested verification.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector every database connection of this process uses.
pub type Connector = MakeRustlsConnect;

/// libpq's `sslmode` values this worker supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                "sslmode must be disable, prefer, require, verify-ca or verify-full, got {other:?}"
            ))
            }
        })
    }

    /// What the `postgres` crate negotiates: verification is the connector's business.
    pub fn wire(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        }
    }

    /// Whether the connection may end up unencrypted.
    pub fn allows_plaintext(self) -> bool {
        matches!(self, SslMode::Disable | SslMode::Prefer)
    }
}

/// The TLS part of a connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// `prefer` when the string names none (libpq's default).
    pub mode: SslMode,
    pub root_cert: Option<PathBuf>,
}

/// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL or key=value pairs);
/// returns the rest, for `postgres::Config`, and the settings.
pub fn split(url: &str) -> Result<(String, TlsSettings), String> {
    let mut settings = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    let mut take = |key: &str, value: &str| -> Result<bool, String> {
        match key {
            "sslmode" => settings.mode = SslMode::parse(value)?,
            "sslrootcert" => settings.root_cert = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, &percent_decode(value)?)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for token in url.split_whitespace() {
            let (key, value) = token.split_once('=').unwrap_or((token, ""));
            if !take(key.trim(), value.trim_matches('\''))? {
                kept.push(token);
            }
        }
        kept.join(" ")
    };
    Ok((rest, settings))
}

fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "invalid percent-encoding in the connection string".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "connection string parameter is not UTF-8".to_string())
}

/// The rustls connector for `settings`; `verify-ca` and `verify-full` need `sslrootcert`.
pub fn connector(settings: &TlsSettings) -> Result<Connector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = match &settings.root_cert {
        Some(path) => Some(load_roots(path)?),
        None => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (settings.mode, roots) {
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(format!(
                "sslmode={} needs sslrootcert (the CA certificate file)",
                if settings.mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            ))
        }
        (SslMode::VerifyFull, Some(roots)) => webpki(roots, &provider)?,
        // libpq: with a root certificate, `prefer` and `require` verify the chain too.
        (_, Some(roots)) => Arc::new(AnyName(webpki(roots, &provider)?)),
        (_, None) => Arc::new(Unverified(provider.clone())),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn load_roots(path: &PathBuf) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "sslrootcert {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(roots)
}

fn webpki(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("sslrootcert: {e}"))
}

/// `verify-ca`: the chain must lead to the root certificate; the name is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer`/`require` without a root certificate (libpq): encrypted, the peer not verified.
/// Handshake signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_leave_the_url_and_the_rest_stays() {
        let (rest, s) = split(
            "postgres://u@db.example:5432/occ?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@db.example:5432/occ?application_name=x");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        let (rest, s) = split("host=db port=5432 sslmode=require user=u").unwrap();
        assert_eq!(rest, "host=db port=5432 user=u");
        assert_eq!(s.mode, SslMode::Require);
        let (_, s) = split("postgres://u@db/occ").unwrap();
        assert_eq!(s.mode, SslMode::Prefer);
        assert!(split("postgres://u@db/occ?sslmode=allow").is_err());
    }

    #[test]
    fn verification_needs_a_root_certificate() {
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let e = connector(&TlsSettings {
                mode,
                root_cert: None,
            })
            .err()
            .expect("refused");
            assert!(e.contains("needs sslrootcert"), "{e}");
        }
    }
}
