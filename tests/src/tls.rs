//! Certificates for TLS tests: a CA of the test's own and the certificates it issues (ECDSA
//! P-256, made with rcgen in a few milliseconds). PostgreSQL's server certificate in
//! [`crate::postgres`] comes from here.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, in PEM.
pub struct Issued {
    pub certificate: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    /// The CA's certificate, what a client that trusts it is given.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (host names, or IP addresses, each becoming a subject
    /// alternative name of its kind).
    pub fn issue(&self, names: &[&str]) -> Issued {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("server parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("server"));
        let key = KeyPair::generate().expect("server key");
        let certificate = params.signed_by(&key, &self.issuer).expect("server certificate");
        Issued {
            certificate: certificate.pem(),
            key: key.serialize_pem(),
        }
    }
}
