//! The checks of single values: names that go into an API path, URLs, the KV path, secret files,
//! the owner and group of the include. Each adds its problem, naming the field, to
//! [`Problems`]; none quotes a value that may hold a secret.

use std::path::Path;

use safe_io::secret::Secret;

use super::Problems;
use crate::scope;

/// Windmill's check constraint on `workspace.id`: `^\w+(-\w+)*$` (ASCII here; the constraint
/// `proper_id` of Windmill's `workspace` table). Also keeps the id safe in a URL path.
pub fn is_workspace_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .split('-')
            .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// Windmill's folder names: letters, digits and underscores (the folder name check of
/// `backend/windmill-api-groups/src/folders.rs`).
pub fn is_folder_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Windmill's usernames (`VALID_USERNAME`): a letter, then letters, digits and underscores. A
/// username goes into API paths (`users/update/<name>`) and ACL owners (`u/<name>`).
pub fn is_username(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 50
}

/// An email Windmill can hold for a user: one `@` with text on both sides, no whitespace or
/// control character, at most 254 characters. It only ever travels in JSON bodies.
pub fn email(field: &str, email: &str, problems: &mut Problems) {
    let shaped = email
        .split_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty() && !domain.contains('@'));
    if !shaped || email.len() > 254 || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        problems.add(format!("{field} {email:?} is not an email address"));
    }
}

/// A global setting's name, which goes into `/api/settings/global/<name>` sent with the
/// superadmin's token: `^[a-z][a-z0-9_]*$`, the shape of every setting Windmill has
/// (`instance_python_version`, `retention_period_secs`). Nothing that could leave the path.
pub fn is_setting_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Labels Windmill gives tokens of its own: `session` to every login, `ephemeral-script` to the
/// token of every job. Revoking "the older tokens" of one of them would log out every session
/// of the admin or break every running job.
const RESERVED_LABELS: [&str; 2] = ["session", "ephemeral-script"];

/// The label of the short-lived impersonation tokens: names the bootstrap in Windmill's audit
/// log, and marks a token left behind by a run that died as one the next run revokes. Here,
/// beside the labels Windmill keeps, because `token.label` may not be it either.
pub const IMPERSONATION_LABEL: &str = "fediversity-windmill-bootstrap";

/// Whether `label` is one Windmill uses itself, in any case and with any surrounding whitespace
/// (a label that only differs so is refused too: it is a mistake, not a label of its own).
pub fn is_reserved_label(label: &str) -> bool {
    RESERVED_LABELS.contains(&label.trim().to_lowercase().as_str())
}

/// A token's label: Windmill's labels are free text, but this one is logged, compared and
/// revoked by.
pub fn token_label(field: &str, label: &str, problems: &mut Problems) {
    if label.is_empty() {
        problems.add(format!("{field} is empty"));
    } else if is_reserved_label(label) {
        problems.add(format!(
            "{field} must not be {label:?}: Windmill labels its login sessions \"session\" and the tokens of jobs \"ephemeral-script\""
        ));
    } else if label.chars().count() > 255 || label.chars().any(char::is_control) {
        problems.add(format!(
            "{field} must be at most 255 characters without control characters"
        ));
    }
}

/// The front-end token's scopes: each one Windmill would parse and knows the words of (see
/// [`crate::scope`]), none that lets the token run code of its holder's choosing, not too many,
/// and at least one harmless read left that they must refuse (the proof of step 7).
pub fn scopes(field: &str, scopes: &[String], problems: &mut Problems) {
    if scopes.len() > scope::MAX_SCOPES {
        problems.add(format!(
            "{field} has {} scopes, more than {}",
            scopes.len(),
            scope::MAX_SCOPES
        ));
        return;
    }
    for (i, s) in scopes.iter().enumerate() {
        // The scope is shown escaped, unless it is too long to be one.
        let shown = if s.chars().count() > scope::MAX_LEN {
            String::new()
        } else {
            format!(" {s:?}")
        };
        if let Some(why) = scope::danger(s) {
            problems.add(format!("{field}[{i}]{shown} is refused: {why}"));
        } else if let Some(why) = scope::problem(s) {
            problems.add(format!("{field}[{i}]{shown} is not a Windmill scope: it {why}"));
        }
    }
    if !scopes.is_empty() && scope::probe(scopes).is_none() {
        problems.add(format!(
            "{field} name every domain the run proves the token's limit with ({}): list fewer, or [] for an unscoped token",
            scope::probe_domains().join(", ")
        ));
    }
}

/// The `bao kv put` path, without leading or trailing slashes, which goes into OpenBao API paths:
/// segments of letters, digits, `_`, `-` and `.`, none of them `.` or `..`.
pub fn kv_path(field: &str, path: &str, problems: &mut Problems) -> Option<String> {
    let trimmed = path.trim_matches('/');
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    if !trimmed.is_empty() && trimmed.split('/').all(segment_ok) {
        Some(trimmed.to_owned())
    } else {
        problems.add(format!(
            "{field} {path:?} is invalid: a KV path like <mount>/<secret>, of letters, digits, _, - and ."
        ));
        None
    }
}

/// An http(s) base URL without a trailing slash. Its text is never shown in a problem: a URL
/// that does not parse may be anything, and userinfo, a query or a fragment may hold a
/// credential (`?token=…`), so such a URL is refused by field name alone.
pub fn http_url(field: &str, value: &str, problems: &mut Problems) -> Option<String> {
    const NOT_SHOWN: &str = "(its text is not shown: it may hold a credential; secrets go in the *_file fields)";
    match reqwest::Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            if !url.username().is_empty()
                || url.password().is_some()
                || url.query().is_some()
                || url.fragment().is_some()
            {
                problems.add(format!(
                    "{field} must not have userinfo, a query or a fragment {NOT_SHOWN}"
                ));
                return None;
            }
            Some(url.as_str().trim_end_matches('/').to_owned())
        }
        _ => {
            problems.add(format!("{field} is not an http:// or https:// URL {NOT_SHOWN}"));
            None
        }
    }
}

/// Reads a secret file: one trailing newline (`\n` or `\r\n`) is dropped, as editors and
/// `echo` add one; the rest is the value.
pub fn secret_file(field: &str, path: &Path, problems: &mut Problems) -> Option<Secret> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            problems.add(format!("{field} {} cannot be read: {e}", path.display()));
            return None;
        }
    };
    let Ok(mut text) = String::from_utf8(bytes) else {
        problems.add(format!("{field} {} is not UTF-8 text", path.display()));
        return None;
    };
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        problems.add(format!("{field} {} is empty", path.display()));
        return None;
    }
    Some(Secret::new(text))
}

/// The include's mode: an octal string of at most four digits that gives nothing to others
/// (the file holds a superadmin token).
pub fn file_mode(field: &str, mode: &str, problems: &mut Problems) -> Option<u32> {
    match u32::from_str_radix(mode, 8) {
        Ok(bits) if bits <= 0o777 && mode.len() <= 4 => {
            if bits & 0o007 != 0 {
                problems.add(format!("{field} {mode} gives access to others; the file holds a token"));
            }
            Some(bits)
        }
        _ => {
            problems.add(format!("{field} {mode:?} is not an octal file mode like \"0440\""));
            None
        }
    }
}

pub fn user_id(field: &str, name: &str, problems: &mut Problems) -> Option<u32> {
    lookup_id(
        field,
        "user",
        name,
        |n| nix::unistd::User::from_name(n).map(|u| u.map(|u| u.uid.as_raw())),
        problems,
    )
}

pub fn group_id(field: &str, name: &str, problems: &mut Problems) -> Option<u32> {
    lookup_id(
        field,
        "group",
        name,
        |n| nix::unistd::Group::from_name(n).map(|g| g.map(|g| g.gid.as_raw())),
        problems,
    )
}

/// A numeric id as is, else the id of the user or group of that name.
fn lookup_id(
    field: &str,
    kind: &str,
    name: &str,
    find: impl FnOnce(&str) -> nix::Result<Option<u32>>,
    problems: &mut Problems,
) -> Option<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Some(id);
    }
    match find(name) {
        Ok(Some(id)) => Some(id),
        Ok(None) => {
            problems.add(format!("{field}: no {kind} named {name:?}"));
            None
        }
        Err(e) => {
            problems.add(format!("{field}: cannot look up {kind} {name:?}: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_names() {
        for good in ["instance_python_version", "retention_period_secs", "a", "a1_"] {
            assert!(is_setting_name(good), "{good}");
        }
        for bad in [
            "", "_a", "1a", "A", "a-b", "a/b", "a.b", "../x", "a?x=", "a b", "\u{e4}", "a%2f",
        ] {
            assert!(!is_setting_name(bad), "{bad}");
        }
    }

    #[test]
    fn workspace_ids_and_folders() {
        assert!(
            is_workspace_id("fediversity")
                && is_workspace_id("a-b_c")
                && !is_workspace_id("a--b")
                && !is_workspace_id("a/b")
        );
        assert!(is_folder_name("fedi_versity") && !is_folder_name("a-b") && !is_folder_name(""));
    }

    #[test]
    fn kv_paths() {
        let mut problems = Problems::default();
        assert_eq!(
            kv_path("p", "/secret/windmill/apiToken/", &mut problems).as_deref(),
            Some("secret/windmill/apiToken")
        );
        assert_eq!(
            kv_path("p", "prefix.d/secret/x-y_z", &mut problems).as_deref(),
            Some("prefix.d/secret/x-y_z")
        );
        assert!(problems.0.is_empty());
        for bad in [
            "",
            "/",
            "a//b",
            "a/../b",
            "a/./b",
            "a/b?x=1",
            "a/b#f",
            "a/%2e%2e/b",
            "a b/c",
            "a/\u{e4}",
        ] {
            assert_eq!(kv_path("openbao.path", bad, &mut problems), None, "{bad}");
        }
        assert!(problems.0.iter().all(|p| p.starts_with("openbao.path ")));
    }

    #[test]
    fn urls_are_refused_without_their_text() {
        let mut problems = Problems::default();
        assert_eq!(
            http_url("u", "http://127.0.0.1:8001/", &mut problems).as_deref(),
            Some("http://127.0.0.1:8001")
        );
        assert_eq!(
            http_url("u", "https://w.example/base/", &mut problems).as_deref(),
            Some("https://w.example/base")
        );
        assert!(problems.0.is_empty());
        for bad in [
            "http://h/?t=s3cr3t",
            "http://h/#s3cr3t",
            "http://u:s3cr3t@h",
            "http://s3cr3t@h",
            "ftp://s3cr3t",
            "http//s3cr3t",
            "http://[s3cr3t",
            "",
        ] {
            assert_eq!(http_url("windmill.url", bad, &mut problems), None, "{bad}");
        }
        assert_eq!(problems.0.len(), 8);
        assert!(
            problems
                .0
                .iter()
                .all(|p| p.starts_with("windmill.url ") && !p.contains("s3cr3t")),
            "{:?}",
            problems.0
        );
    }
}
