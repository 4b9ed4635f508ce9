//! The fake API server's per-run PKI (test-only): a server CA whose certificate for
//! `127.0.0.1`/`localhost` the server presents, a separate client CA whose client certificates
//! authenticate a caller, and the rustls server configuration that asks for a client certificate
//! without requiring one (as a real API server does).
//!
//! It never reads or writes a file; the PEM strings are handed to the tests.

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Certificates of one fake and the TLS configuration built from them.
pub struct Pki {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    pub server_config: Arc<ServerConfig>,
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A self-signed certificate authority.
pub fn new_ca(common_name: &str) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().expect("generate CA key");
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).expect("self-sign CA");
    (cert, key)
}

/// A leaf certificate signed by `ca` for the given names and purpose.
pub fn leaf(
    ca: &(Certificate, KeyPair),
    common_name: &str,
    sans: Vec<SanType>,
    purpose: ExtendedKeyUsagePurpose,
) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().expect("generate leaf key");
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(common_name);
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![purpose];
    let cert = params.signed_by(&key, &ca.0, &ca.1).expect("sign leaf");
    (cert, key)
}

impl Pki {
    pub fn generate() -> Pki {
        let server_ca = new_ca("kube-fake-ca");
        let (server_cert, server_key) = leaf(
            &server_ca,
            "kube-apiserver",
            vec![
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::DnsName("localhost".try_into().expect("dns name")),
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let client_ca = new_ca("kube-fake-client-ca");
        let (client_cert, client_key) = leaf(
            &client_ca,
            "kube-fake-admin",
            vec![],
            ExtendedKeyUsagePurpose::ClientAuth,
        );

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(client_ca.0.der().clone())
            .expect("trust the client CA");
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .expect("client verifier");
        let chain: Vec<CertificateDer<'static>> = vec![server_cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .expect("server certificate");
        Pki {
            ca_pem: server_ca.0.pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            server_config: Arc::new(config),
        }
    }
}
