//! The superadmin's password, set the only way a source-built Windmill CE allows: its
//! `setpassword` endpoints are 500 stubs (Windmill's `backend/windmill-api-users/src/users_oss.rs`:
//! "Not implemented in Windmill's Open Source repository"), so the argon2 hash goes straight
//! into Windmill's `password` table.
//!
//! The hash is a PHC string from the argon2 crate's defaults (argon2id, v=19, m=19456, t=2,
//! p=1, 16-byte salt, 32-byte output: 97 characters), the format Windmill's login parses with
//! `PasswordHash::new` and verifies with `Argon2::default()` (`users.rs`, `login`). The column is
//! VARCHAR(100).

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHasher, SaltString};
use tokio_postgres::NoTls;

use crate::config::Database;
use crate::error::{Error, Result};
use safe_io::secret::Secret;

/// `password.password_hash` is VARCHAR(100) (observed on Windmill CE 1.743.0).
pub const MAX_HASH_LEN: usize = 100;

pub fn hash(password: &Secret) -> Result<Secret> {
    let salt = SaltString::generate(&mut OsRng);
    let phc = Argon2::default()
        .hash_password(password.expose().as_bytes(), &salt)
        .map_err(|e| Error::Hash(e.to_string()))?
        .to_string();
    if phc.len() > MAX_HASH_LEN {
        return Err(Error::HashTooLong { len: phc.len() });
    }
    Ok(Secret::new(phc))
}

/// In one transaction: `SET LOCAL ROLE <role>` (the NixOS module grants `windmill_admin` to
/// Windmill's database user; the role bypasses RLS), then update the user's hash. Zero rows
/// updated rolls back and is an error: the user does not exist or does not log in with a
/// password.
pub async fn write_hash(database: &Database, email: &str, hash: &Secret) -> Result<()> {
    let mut config = database.config.clone();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    let (mut client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| db_error("cannot connect", &e, database))?;
    let driver = tokio::spawn(async move {
        // Errors surface through the client calls; this only drives the socket.
        let _ = connection.await;
    });
    let result = async {
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error("cannot begin a transaction", &e, database))?;
        tx.batch_execute(&format!("SET LOCAL ROLE {}", quote_ident(&database.role)))
            .await
            .map_err(|e| db_error(&format!("SET ROLE {}", database.role), &e, database))?;
        let rows = tx
            .execute(
                "UPDATE password SET password_hash = $1 WHERE email = $2 AND login_type = 'password'",
                &[&hash.expose(), &email],
            )
            .await
            .map_err(|e| db_error("UPDATE password", &e, database))?;
        if rows != 1 {
            // Dropping the transaction rolls it back.
            return Err(Error::NoPasswordRow {
                email: email.to_owned(),
            });
        }
        tx.commit().await.map_err(|e| db_error("COMMIT", &e, database))
    }
    .await;
    drop(client);
    let _ = driver.await;
    result
}

/// A PostgreSQL identifier in double quotes, so any role name is taken literally.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// tokio-postgres' message with its causes: the server's error (code and text) or the OS
/// error. It never formats the connection string; the DSN and its password are scrubbed anyway
/// in case a server echoes one back.
fn db_error(what: &str, error: &tokio_postgres::Error, database: &Database) -> Error {
    let text = match error.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => crate::error::with_causes(error.to_string(), std::error::Error::source(error)),
    };
    Error::Database(safe_io::secret::scrub(&format!("{what}: {text}"), &database.secrets()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::{PasswordHash, PasswordVerifier};

    #[test]
    fn the_hash_is_a_default_argon2id_phc_string_that_fits_the_column() {
        let pw = Secret::new("correct horse battery staple");
        let phc = hash(&pw).unwrap();
        assert!(
            phc.expose().starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{}",
            phc.expose()
        );
        assert!(phc.expose().len() <= MAX_HASH_LEN);
        let parsed = PasswordHash::new(phc.expose()).unwrap();
        assert!(
            Argon2::default()
                .verify_password(pw.expose().as_bytes(), &parsed)
                .is_ok()
        );
        assert!(Argon2::default().verify_password(b"wrong", &parsed).is_err());
        // A fresh salt every time.
        assert_ne!(hash(&pw).unwrap().expose(), phc.expose());
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("windmill_admin"), "\"windmill_admin\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
