//! The connection string of the shared journal: a secret (it holds the role's password). It is
//! read from its file when a run needs it, never logged, and every message that could quote it
//! (a driver's error) goes through [`Dsn::hide`].

use std::io::Read;
use std::path::Path;

use tokio_postgres::config::SslMode;

use crate::error::Problem;

/// More is no connection string.
const MAX_LEN: u64 = 64 * 1024;

pub(super) struct Dsn {
    pub config: tokio_postgres::Config,
    /// What a message must never show: the whole text and the password.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dsn(..)")
    }
}

/// Reads and parses the DSN file. Not there (yet): the node is not ready; anything else wrong
/// with it is the node's configuration, and the message never quotes it.
pub(super) fn read(path: &Path) -> Result<Dsn, Problem> {
    let bad = |why: &'static str| Problem::ClusterDsn { path: path.to_owned(), why };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Problem::NodeNotReady(format!("the cluster DSN file {} does not exist yet", path.display())));
        }
        Err(source) => return Err(Problem::UnreadableFile { what: "cluster DSN file", path: path.to_owned(), source }),
    };
    let mut text = String::new();
    file.take(MAX_LEN + 1).read_to_string(&mut text).map_err(|_| bad("is not text"))?;
    if text.len() as u64 > MAX_LEN {
        return Err(bad("is too large for a connection string"));
    }
    let text = text.trim_end_matches(['\n', '\r']).to_owned();
    if text.trim().is_empty() {
        return Err(bad("is empty"));
    }
    // The driver's message could quote a part of the text: none is given.
    let mut config: tokio_postgres::Config = text.parse().map_err(|_| bad("does not hold a PostgreSQL connection string (key=value pairs or a postgresql:// URL)"))?;
    if config.get_ssl_mode() == SslMode::Require {
        return Err(bad("asks for TLS (sslmode=require), which jobenv's cluster journal does not speak: reach the database over a local socket or a network you trust"));
    }
    if config.get_application_name().is_none() {
        // So that an operator tells jobenv's connections apart (pg_stat_activity).
        config.application_name("fediversity-jobenv");
    }
    let mut secrets = vec![text];
    if let Some(password) = config.get_password().and_then(|p| std::str::from_utf8(p).ok()).filter(|p| p.len() >= 4) {
        secrets.push(password.to_owned());
    }
    Ok(Dsn { config, secrets })
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
        let dsn = read(&path).unwrap();
        assert_eq!(dsn.hide("auth failed for s3cret-pw"), "auth failed for [REDACTED]");
        assert_eq!(dsn.config.get_application_name(), Some("fediversity-jobenv"));
        std::fs::write(&path, "host=db password=s3cret-pw bogus").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(!error.contains("s3cret") && error.contains("does not hold a PostgreSQL connection string"), "{error}");
        std::fs::write(&path, "postgresql://u:s3cret-pw@db/x?sslmode=require").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(!error.contains("s3cret") && error.contains("sslmode=require"), "{error}");
        let missing = read(&dir.path().join("none")).unwrap_err();
        assert!(matches!(missing, Problem::NodeNotReady(_)), "{missing}");
    }
}
