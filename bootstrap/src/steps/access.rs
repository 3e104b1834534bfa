//! Steps 1 and 2: wait for Windmill, then log in as the superadmin (writing the password hash
//! only when the node password does not log in).

use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use safe_io::secret::Secret;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::http;
use crate::password;
use crate::report::{Noted, Outcome, noted};
use crate::windmill::{Login, Windmill};

/// Step 1; its value: the server's version, as `GET /api/version` answered it (one line, cut
/// short), to name a server whose answers tell it apart.
pub(super) async fn ready(client: &Windmill, config: &Config) -> Result<Noted<String>> {
    let started = Instant::now();
    let timeout = config.retry.ready_timeout;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100).min(timeout))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(timeout));
    // The last failure, for the message when the time is up.
    let last = std::cell::RefCell::new(None::<String>);
    let waiting = (|| client.version_once()).retry(backoff).notify(|e: &String, delay| {
        tracing::debug!("GET /api/version: {e}; again in {:.2} s", delay.as_secs_f64());
        *last.borrow_mut() = Some(e.clone());
    });
    // `with_total_delay` bounds only the sleeps between tries: a Windmill that accepts
    // connections and never answers would hold every try for the whole request timeout. The
    // timeout bounds the whole wait.
    let not_ready = |last: String| Error::NotReady {
        seconds: timeout.as_secs_f64(),
        last,
    };
    let version = match tokio::time::timeout(timeout, waiting).await {
        Ok(result) => result.map_err(not_ready)?,
        Err(_) => {
            let last = last.borrow_mut().take();
            return Err(not_ready(
                last.unwrap_or_else(|| "the request got no answer".to_owned()),
            ));
        }
    };
    let what = format!(
        "{} answered GET /api/version ({}) after {:.1} s",
        config.windmill.url,
        http::short(&version),
        started.elapsed().as_secs_f64()
    );
    Ok(noted(what, Outcome::Unchanged, http::short(&version)))
}

/// Step 2; its value: the login session (with `--check`, none when no password logs in).
pub(super) async fn login(client: &Windmill, config: &Config, check: bool) -> Result<Noted<Option<Secret>>> {
    let w = &config.windmill;
    let email = &w.admin_email;
    if let Login::Token(session) = client.login(email, &w.admin_password).await? {
        return Ok(noted(
            format!("{email} logs in with the node password"),
            Outcome::Unchanged,
            Some(session),
        ));
    }
    if check {
        // Only --check tries the default password: to report whether the node is still fresh
        // and, if so, to compare the rest with that session (logged out at the end). A run
        // needs no such login: it rewrites the hash either way.
        let default = match client.login(email, &w.default_password).await? {
            Login::Token(session) => Some(session),
            Login::Invalid => None,
        };
        let was = if default.is_some() {
            "the default password"
        } else {
            "another password"
        };
        return Ok(noted(
            format!("{email} does not log in with the node password (it has {was}); its hash would be rewritten"),
            Outcome::Updated,
            default,
        ));
    }
    let hash = password::hash(&w.admin_password)?;
    password::write_hash(&config.database, email, &hash).await?;
    let attempts = config.retry.login_attempts;
    for attempt in 1..=attempts {
        if let Login::Token(session) = client.login(email, &w.admin_password).await? {
            let what = format!(
                "{email} did not log in with the node password; its hash was written to the password table and it logs in now"
            );
            return Ok(noted(what, Outcome::Updated, Some(session)));
        }
        if attempt < attempts {
            tokio::time::sleep(config.retry.delay).await;
        }
    }
    Err(Error::LoginStillRejected {
        email: email.clone(),
        attempts,
    })
}
