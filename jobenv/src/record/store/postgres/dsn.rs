//! The connection string of the shared journal: a secret (it holds the role's password). It is
//! read from its file when a run needs it, never logged, and every message that could quote it
//! (a driver's error) goes through [`Dsn::hide`].
//!
//! With `sslmode=require` the connection is TLS (rustls), and the server's certificate is
//! verified, chain and host name, as a browser does: against the node's CA file
//! (`--cluster-ca-file`, the CAs it holds and no other) or else the system's trust store. That is
//! stricter than libpq's `require`, which encrypts without verifying: a database that any machine
//! on the path could impersonate would defeat the leases. Without `sslmode=require` the
//! connection is plain, for a local socket or a network the node trusts.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres::config::SslMode;

use crate::error::{Error, Problem, Refusal};

/// More is no connection string.
const MAX_LEN: u64 = 64 * 1024;
/// More is no bundle of CA certificates (the system's whole trust store is about 200 KiB).
const MAX_CA_LEN: u64 = 1024 * 1024;

/// The content of the regular file `path`, `None` when it holds more than `max` bytes. Opened
/// without blocking (a FIFO would hang jobenv before its program starts) and read no further
/// than `max` (a device could feed it forever).
fn read_bounded(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

pub(super) struct Dsn {
    pub config: tokio_postgres::Config,
    /// TLS, when the DSN asks for it.
    pub tls: Option<Arc<ClientConfig>>,
    /// What a message must never show: the whole text and the password.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dsn(..)")
    }
}

/// Reads and parses the DSN file, and with `sslmode=require` the CA file (`ca_file`). Either not
/// there (yet): the node is not ready; anything else wrong with them is the node's
/// configuration, and the message never quotes the DSN.
pub(super) fn read(path: &Path, ca_file: Option<&Path>) -> Result<Dsn, Error> {
    let bad = |why: &'static str| -> Error {
        Problem::ClusterDsn {
            path: path.to_owned(),
            why,
        }
        .into()
    };
    let bytes = match read_bounded(path, MAX_LEN) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(bad("is too large for a connection string")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                Refusal::NotReady(format!("the cluster DSN file {} does not exist yet", path.display())).into(),
            );
        }
        Err(source) => {
            return Err(Problem::UnreadableFile {
                what: "cluster DSN file",
                path: path.to_owned(),
                source,
            }
            .into());
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| bad("is not text"))?;
    let text = text.trim_end_matches(['\n', '\r']).to_owned();
    if text.trim().is_empty() {
        return Err(bad("is empty"));
    }
    // libpq's ways of asking for a verified connection, which the driver does not parse: said
    // plainly rather than as a text that is no connection string.
    if ["sslmode=verify-", "sslrootcert=", "sslcert=", "sslkey="]
        .iter()
        .any(|key| text.contains(key))
    {
        return Err(bad(
            "uses libpq's sslmode=verify-ca/verify-full, sslrootcert, sslcert or sslkey, which jobenv does not read: write sslmode=require (jobenv then always verifies the certificate and the host name) and give the CA with --cluster-ca-file",
        ));
    }
    // The driver's message could quote a part of the text: none is given.
    let mut config: tokio_postgres::Config = text
        .parse()
        .map_err(|_| bad("does not hold a PostgreSQL connection string (key=value pairs or a postgresql:// URL)"))?;
    let tls = match (config.get_ssl_mode(), ca_file) {
        (SslMode::Require, _)
            if config.get_hosts().is_empty()
                || config
                    .get_hosts()
                    .iter()
                    .any(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_))) =>
        {
            return Err(bad(
                "asks for TLS (sslmode=require) without a host name to verify the certificate against (a local socket, or hostaddr alone): name the database's host with host=",
            ));
        }
        (SslMode::Require, ca_file) => Some(Arc::new(tls(ca_file)?)),
        (_, Some(_)) => {
            return Err(bad(
                "does not ask for TLS (sslmode=require), yet a CA file is given (--cluster-ca-file): the connection would not use it",
            ));
        }
        // libpq's default, `prefer`, would fall back to a plain connection anyway: no TLS.
        (_, None) => {
            config.ssl_mode(SslMode::Disable);
            None
        }
    };
    if config.get_application_name().is_none() {
        // So that an operator tells jobenv's connections apart (pg_stat_activity).
        config.application_name("fediversity-jobenv");
    }
    let mut secrets = vec![text];
    if let Some(password) = config
        .get_password()
        .and_then(|p| std::str::from_utf8(p).ok())
        .filter(|p| p.len() >= 4)
    {
        secrets.push(password.to_owned());
    }
    Ok(Dsn { config, tls, secrets })
}

/// The TLS of the connection: the server's certificate verified against the CAs of `ca_file`,
/// or without one the system's trust store.
fn tls(ca_file: Option<&Path>) -> Result<ClientConfig, Error> {
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Problem::ClusterTls(e.to_string()))?;
    let Some(path) = ca_file else {
        use rustls_platform_verifier::BuilderVerifierExt;
        let builder = builder
            .with_platform_verifier()
            .map_err(|e| Problem::ClusterTls(format!("the system's trust store cannot be used: {e}")))?;
        return Ok(builder.with_no_client_auth());
    };
    let bad = |why: String| -> Error {
        Problem::ClusterCa {
            path: path.to_owned(),
            why,
        }
        .into()
    };
    let bytes = match read_bounded(path, MAX_CA_LEN) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(bad(format!("is larger than {} KiB", MAX_CA_LEN / 1024))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Refusal::NotReady(format!("the cluster CA file {} does not exist yet", path.display())).into());
        }
        Err(e) => return Err(bad(format!("cannot be read: {e}"))),
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        let certificate = certificate.map_err(|e| bad(format!("is not a PEM file of certificates: {e}")))?;
        roots
            .add(certificate)
            .map_err(|e| bad(format!("holds a certificate that is no CA's: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

impl Dsn {
    /// `text` with every part of the DSN that is a secret replaced by `[REDACTED]`.
    pub fn hide(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "[REDACTED]");
        }
        text
    }

    /// The values the program's output is redacted of too: the program runs as the user that
    /// can read the DSN file.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.secrets.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dsn_is_never_quoted_and_its_password_is_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dsn");
        std::fs::write(&path, "host=db user=jobenv password=s3cret-pw dbname=x\n").unwrap();
        let dsn = read(&path, None).unwrap();
        assert!(dsn.tls.is_none(), "plain, as it does not ask for TLS");
        assert_eq!(dsn.hide("auth failed for s3cret-pw"), "auth failed for [REDACTED]");
        assert_eq!(dsn.config.get_application_name(), Some("fediversity-jobenv"));
        std::fs::write(&path, "host=db password=s3cret-pw bogus").unwrap();
        let error = read(&path, None).unwrap_err().to_string();
        assert!(
            !error.contains("s3cret") && error.contains("does not hold a PostgreSQL connection string"),
            "{error}"
        );
        let missing = read(&dir.path().join("none"), None).unwrap_err();
        assert!(matches!(missing, Error::Refused(Refusal::NotReady(_))), "{missing}");
    }

    #[test]
    fn tls_is_asked_for_by_sslmode_require_and_verified_against_the_ca_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (dsn_path, ca) = (dir.path().join("dsn"), dir.path().join("ca.pem"));
        std::fs::write(&dsn_path, "postgresql://u:s3cret-pw@db/x?sslmode=require").unwrap();
        // The system's trust store, without a CA file.
        assert!(read(&dsn_path, None).unwrap().tls.is_some());
        // A CA file not there yet: not ready, as a DSN file not there yet.
        assert!(matches!(
            read(&dsn_path, Some(&ca)).unwrap_err(),
            Error::Refused(Refusal::NotReady(_))
        ));
        for (text, why) in [
            ("", "holds no certificate"),
            (
                "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
                "is not a PEM file of certificates",
            ),
        ] {
            std::fs::write(&ca, text).unwrap();
            let error = read(&dsn_path, Some(&ca)).unwrap_err().to_string();
            assert!(error.contains(why) && !error.contains("s3cret"), "{error}");
        }
        // Not a file to read whole: a FIFO (read without blocking), a device (read no further
        // than a bundle can be).
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let error = read(&dsn_path, Some(&fifo)).unwrap_err().to_string();
        assert!(error.contains("it is not a regular file"), "{error}");
        let error = read(&dsn_path, Some(Path::new("/dev/zero"))).unwrap_err().to_string();
        assert!(error.contains("it is not a regular file"), "{error}");
        std::fs::write(&ca, vec![b'x'; 2 << 20]).unwrap();
        let error = read(&dsn_path, Some(&ca)).unwrap_err().to_string();
        assert!(error.contains("is larger than 1024 KiB"), "{error}");
        // TLS needs a host name to verify: not to a local socket, nor to hostaddr alone.
        for dsn in [
            "host=/run/postgresql user=u password=s3cret-pw sslmode=require",
            "hostaddr=127.0.0.1 user=u password=s3cret-pw sslmode=require",
        ] {
            std::fs::write(&dsn_path, dsn).unwrap();
            let error = read(&dsn_path, None).unwrap_err().to_string();
            assert!(
                error.contains("without a host name to verify the certificate against") && !error.contains("s3cret"),
                "{error}"
            );
        }
        // libpq's own ways of asking for verification are named, not taken for gibberish.
        for dsn in [
            "host=db password=s3cret-pw sslmode=verify-full",
            "postgresql://u:s3cret-pw@db/x?sslrootcert=/ca.pem&sslmode=require",
        ] {
            std::fs::write(&dsn_path, dsn).unwrap();
            let error = read(&dsn_path, None).unwrap_err().to_string();
            assert!(
                error.contains("write sslmode=require") && !error.contains("s3cret"),
                "{error}"
            );
        }
        // A CA file beside a DSN that does not ask for TLS: the CA would not be used.
        std::fs::write(&dsn_path, "host=db user=u password=s3cret-pw dbname=x").unwrap();
        let error = read(&dsn_path, Some(&ca)).unwrap_err().to_string();
        assert!(
            error.contains("does not ask for TLS (sslmode=require), yet a CA file is given")
                && !error.contains("s3cret"),
            "{error}"
        );
    }
}
