//! What the bootstrap remembers between runs, in `state_file`: a small JSON file, mode 0600,
//! replaced atomically (a `--check` that reads it meanwhile sees the old file or the new one).
//!
//! - `labels`: every token label it minted under and has not revoked every older token of. A
//!   label changed in the configuration would otherwise leave the tokens of the old one behind,
//!   live and forgotten: step 9 revokes the tokens of each label listed, `--check` reports those
//!   still live. A label is written before the first token of it is minted (step 3), so a run
//!   that dies in between still knows it.
//! - `operators`: the email of every workspace operator (`token.user_email`) it minted the
//!   front-end's token as and has not revoked every token of. An operator changed in the
//!   configuration would otherwise keep its tokens, a leaked one included, live and able to run
//!   the deploy script: step 9 revokes every token of each one listed but the current, `--check`
//!   reports those still live. Written, like the labels, before the first token is minted.
//! - `scripts`: per workspace and script path, the hash of the last version the bootstrap created.
//!   Windmill fills a python3 script's `lock` itself (its dependency job) on the versions the
//!   bootstrap creates; on anyone else's version a lock may be one they wrote (pinned packages of
//!   their choosing), so only a lock on a version listed here is taken as the server's own.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use safe_io::atomic::{self, Options};
use serde::{Deserialize, Serialize};

use crate::config::is_reserved_label;
use crate::error::{Error, Result};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    #[serde(default)]
    labels: BTreeSet<String>,
    #[serde(default)]
    operators: BTreeSet<String>,
    #[serde(default)]
    scripts: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Debug)]
pub struct State {
    path: PathBuf,
    stored: Stored,
    /// The file's text as last read or written: a save that would write the same is skipped.
    on_disk: Option<String>,
}

impl State {
    /// The state at `path`; none yet (a first run) is an empty one. A file that cannot be read or
    /// is not one this program wrote is an error: guessing would lose the labels to revoke.
    pub fn load(path: &Path) -> Result<State> {
        let fail = |detail: String| Error::StateFile {
            path: path.to_owned(),
            detail,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(State {
                    path: path.to_owned(),
                    stored: Stored::default(),
                    on_disk: None,
                });
            }
            Err(e) => return Err(fail(format!("cannot be read: {e}"))),
        };
        let stored: Stored = serde_json::from_str(&text)
            .map_err(|e| fail(format!("is not the bootstrap's state ({e}); remove it to start afresh")))?;
        // Step 9 revokes by these labels: one of Windmill's own would log out every session.
        if let Some(label) = stored.labels.iter().find(|l| l.is_empty() || is_reserved_label(l)) {
            return Err(fail(format!(
                "lists the label {label:?}, which the bootstrap never mints under; remove it from the file"
            )));
        }
        Ok(State {
            path: path.to_owned(),
            stored,
            on_disk: Some(text),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The labels the bootstrap minted under and may still have tokens of.
    pub fn labels(&self) -> &BTreeSet<String> {
        &self.stored.labels
    }

    pub fn add_labels<'a>(&mut self, labels: impl IntoIterator<Item = &'a str>) {
        self.stored.labels.extend(labels.into_iter().map(str::to_owned));
    }

    /// After every older token of the other labels was revoked: only `labels` remain.
    pub fn keep_labels<'a>(&mut self, labels: impl IntoIterator<Item = &'a str>) {
        let keep: BTreeSet<&str> = labels.into_iter().collect();
        self.stored.labels.retain(|l| keep.contains(l.as_str()));
    }

    /// The operators the bootstrap minted a front-end token as and may still have tokens of.
    pub fn operators(&self) -> &BTreeSet<String> {
        &self.stored.operators
    }

    pub fn add_operator(&mut self, email: &str) {
        self.stored.operators.insert(email.to_owned());
    }

    /// After every token of the others was revoked: only `email` remains.
    pub fn keep_operator(&mut self, email: &str) {
        self.stored.operators.retain(|o| o == email);
    }

    /// The hash of the last version of `path` the bootstrap created in `workspace`.
    pub fn created(&self, workspace: &str, path: &str) -> Option<&str> {
        self.stored
            .scripts
            .get(workspace)
            .and_then(|paths| paths.get(path))
            .map(String::as_str)
    }

    pub fn record_created(&mut self, workspace: &str, path: &str, hash: &str) {
        self.stored
            .scripts
            .entry(workspace.to_owned())
            .or_default()
            .insert(path.to_owned(), hash.to_owned());
    }

    /// Writes the file if it would change; `true` when written. Its directory (and any missing
    /// parent) is created 0700.
    pub fn save(&mut self) -> Result<bool> {
        let text = serde_json::to_string_pretty(&self.stored).expect("the state serializes") + "\n";
        if self.on_disk.as_deref() == Some(text.as_str()) {
            return Ok(false);
        }
        let fail = |doing: &str, e: std::io::Error| Error::StateFile {
            path: self.path.clone(),
            detail: format!("{doing}: {e}"),
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| fail("cannot create its directory", e))?;
        }
        atomic::write(
            &self.path,
            text.as_bytes(),
            Options {
                mode: Some(0o600),
                uid: None,
                gid: None,
            },
        )?;
        self.on_disk = Some(text);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_missing_file_is_empty_and_a_saved_one_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.json");
        let mut state = State::load(&path).unwrap();
        assert!(state.labels().is_empty() && state.created("w", "f/a/b").is_none());
        state.add_labels(["front", "ui", "old"]);
        state.add_operator("old@example.invalid");
        state.add_operator("front@example.invalid");
        state.record_created("w", "f/a/b", "0123456789abcdef");
        assert!(state.save().unwrap());
        assert!(!state.save().unwrap(), "unchanged: not written again");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o7777,
            0o700
        );
        let mut again = State::load(&path).unwrap();
        assert_eq!(
            again.labels().iter().map(String::as_str).collect::<Vec<_>>(),
            ["front", "old", "ui"]
        );
        assert_eq!(again.created("w", "f/a/b"), Some("0123456789abcdef"));
        assert_eq!(again.operators().len(), 2);
        again.keep_labels(["front", "ui"]);
        again.keep_operator("front@example.invalid");
        assert!(again.save().unwrap());
        assert_eq!(State::load(&path).unwrap().labels().len(), 2);
        assert_eq!(
            State::load(&path).unwrap().operators().iter().collect::<Vec<_>>(),
            ["front@example.invalid"]
        );
    }

    #[test]
    fn a_file_that_is_not_the_state_or_lists_a_windmill_label_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        for (text, why) in [
            ("not json", "is not the bootstrap's state"),
            (r#"{"labels": ["a"], "other": 1}"#, "unknown field `other`"),
            (r#"{"labels": [" Session"]}"#, "lists the label \" Session\""),
            (r#"{"labels": ["ephemeral-script"]}"#, "never mints under"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = State::load(&path).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("state file {}", path.display())) && err.contains(why),
                "{text}: {err}"
            );
        }
    }
}
