//! The node layer: `deploy-env.json` plus the secrets (directories with one file per variable,
//! and `KEY=VALUE` env files). The node owns these; nothing from a job overrides them.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::env_file::{is_variable_name, parse_env_file};
use super::json::{read_object, text};
use super::names::is_valid_key;
use crate::error::Problem;
use crate::settings::NodeFiles;
use safe_io::secret::{Secret, Text};

/// A value set by the node, with where it came from (a path, never the value, in messages): a
/// secret (from a secrets directory or env file) or a plain value (deploy-env.json).
#[derive(Debug, Clone)]
pub struct NodeValue {
    pub value: Text,
    pub origin: String,
    /// The key itself may be secret text: an env-file line `KEY=` or `KEY==` whose value is
    /// nothing but `=` is what the last line of a wrapped base64 value looks like when it is all
    /// letters and digits. Errors about such a key name its origin (file and line) only.
    pub hidden_key: bool,
}

/// The values one secrets env file of this text sets, as [`load`] reads it from `path`, and its
/// problems (for the fuzzers, which check that no problem quotes the file's text).
#[cfg(any(test, feature = "fuzzing"))]
pub fn env_file_values(path: &Path, text: &str) -> (BTreeMap<String, NodeValue>, Vec<Problem>) {
    let mut layer = Layer::default();
    layer.env_file_text(path, text);
    (layer.values, layer.problems)
}

/// Loads every node source; all problems of all sources are reported together.
pub fn load(files: &NodeFiles) -> Result<BTreeMap<String, NodeValue>, Vec<Problem>> {
    let mut layer = Layer::default();
    layer.deploy_env(&files.deploy_env);
    for dir in &files.secrets_dirs {
        layer.secrets_dir(dir);
    }
    for file in &files.secrets_env_files {
        layer.env_file(file);
    }
    // Each secret becomes redaction needles in every form it may be printed in: the total is
    // bounded, not only each value (24 values of 127 KiB would be gigabytes of automaton).
    let total: usize = layer
        .values
        .values()
        .filter(|v| v.value.is_secret())
        .map(|v| v.value.expose().len())
        .sum();
    if total > SECRETS_LIMIT {
        layer.problems.push(Problem::SecretsTooLarge {
            total,
            limit: SECRETS_LIMIT,
        });
    }
    if layer.problems.is_empty() {
        Ok(layer.values)
    } else {
        Err(layer.problems)
    }
}

/// A secrets env file of this size or more is refused (like a payload).
const ENV_FILE_LIMIT: usize = 1 << 20;
/// The most bytes all of a node's secrets may hold together.
const SECRETS_LIMIT: usize = 1 << 20;
const NOT_REGULAR: &str = "is not a regular file";

#[derive(Default)]
struct Layer {
    values: BTreeMap<String, NodeValue>,
    problems: Vec<Problem>,
}

impl Layer {
    fn insert(&mut self, key: String, value: Text, origin: String) {
        self.insert_value(
            key,
            NodeValue {
                value,
                origin,
                hidden_key: false,
            },
        );
    }

    fn insert_value(&mut self, key: String, node_value: NodeValue) {
        let NodeValue { value, origin, .. } = &node_value;
        let origin = origin.clone();
        if !is_valid_key(&key) {
            self.problems.push(Problem::InvalidKey {
                key: super::cut(&key, super::SHOWN_CHARS),
                origin,
            });
            return;
        }
        if value.expose().contains('\0') {
            self.problems.push(Problem::NulInValue { key, origin });
            return;
        }
        if let Some(existing) = self.values.get(&key) {
            self.problems.push(if existing.hidden_key || node_value.hidden_key {
                Problem::HiddenNodeKey {
                    origin: format!("{} and {origin}", existing.origin),
                    what: "set the same key",
                }
            } else {
                Problem::DuplicateNodeKey {
                    key,
                    first: existing.origin.clone(),
                    second: origin,
                }
            });
            return;
        }
        self.values.insert(key, node_value);
    }

    fn deploy_env(&mut self, path: &Path) {
        const WHAT: &str = "deploy-env file";
        let origin = path.display().to_string();
        match read_object(WHAT, path, "a JSON object") {
            Ok(entries) => {
                for (key, value) in entries {
                    if let Some(text) = text(&value) {
                        self.insert(key, Text::Plain(text), origin.clone());
                    }
                }
            }
            Err(problem) => self.problems.push(problem),
        }
    }

    /// One file per variable: file name = key, content = value with one trailing newline
    /// stripped. Only names that look like variables are read, so the temporary and backup
    /// files an OpenBao agent leaves while rendering (digits-only names, `*.bak`) are skipped.
    fn secrets_dir(&mut self, dir: &Path) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.problems.push(Problem::MissingSecretsDir(dir.to_owned()));
                return;
            }
            Err(source) => {
                self.problems.push(Problem::UnreadableFile {
                    what: "secrets directory",
                    path: dir.to_owned(),
                    source,
                });
                return;
            }
        };
        let canonical_dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
        let mut names: Vec<(String, PathBuf, bool)> = Vec::new();
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(source) => {
                    self.problems.push(Problem::UnreadableFile {
                        what: "secrets directory",
                        path: dir.to_owned(),
                        source,
                    });
                    return;
                }
            };
            match entry.file_name().into_string() {
                // The file type comes with the directory listing: a link is followed only after
                // a check of where it points (an unknown type is checked as a link would be),
                // and a device, FIFO or socket is refused without being opened (opening one can
                // have effects of its own).
                Ok(name) if is_variable_name(&name) => match entry.file_type() {
                    Ok(kind) if kind.is_dir() => {}
                    Ok(kind) if !kind.is_file() && !kind.is_symlink() => {
                        self.problems.push(Problem::BadSecretFile {
                            path: entry.path(),
                            reason: NOT_REGULAR,
                        });
                    }
                    kind => names.push((name, entry.path(), !kind.is_ok_and(|kind| kind.is_file()))),
                },
                _ => tracing::debug!("skipping {} in the secrets directory", entry.path().display()),
            }
        }
        // read_dir order is arbitrary; a sorted walk keeps duplicate reports stable.
        names.sort();
        for (name, path, link) in names {
            if let Some(value) = self.read_secret_file(&path, link.then_some(canonical_dir.as_path())) {
                self.insert(name, Text::Secret(Secret::new(value)), path.display().to_string());
            }
        }
    }

    /// One secret file. `link_dir`: the file is a link, which must point into this (canonical)
    /// directory. What is opened is never followed: a file that is not a link is opened as it
    /// is, a link's checked target as that target, so a link made or changed meanwhile is
    /// refused rather than followed somewhere else.
    fn read_secret_file(&mut self, path: &Path, link_dir: Option<&Path>) -> Option<String> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let bad = |reason| Problem::BadSecretFile {
            path: path.to_owned(),
            reason,
        };
        let unreadable = |source| Problem::UnreadableFile {
            what: "secret file",
            path: path.to_owned(),
            source,
        };
        let mut open = path.to_owned();
        if let Some(dir) = link_dir {
            match path.canonicalize() {
                Ok(target) if target.parent() == Some(dir) => open = target,
                Ok(_) => {
                    self.problems.push(bad("is a link that points outside its directory"));
                    return None;
                }
                Err(source) => {
                    self.problems.push(unreadable(source));
                    return None;
                }
            }
            match std::fs::symlink_metadata(&open) {
                Ok(meta) if meta.is_dir() => return None,
                Ok(meta) if !meta.is_file() => {
                    self.problems.push(bad(NOT_REGULAR));
                    return None;
                }
                Ok(_) => {}
                Err(source) => {
                    self.problems.push(unreadable(source));
                    return None;
                }
            }
        }
        // Non-blocking: a FIFO put there meanwhile must be refused as not a regular file, not hang.
        let flags = nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW;
        let mut file = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(&open) {
            Ok(file) => file,
            Err(source) => {
                self.problems.push(unreadable(source));
                return None;
            }
        };
        let size = match file.metadata() {
            Ok(meta) if meta.is_file() => meta.len(),
            Ok(meta) if meta.is_dir() => return None,
            Ok(_) => {
                self.problems.push(bad(NOT_REGULAR));
                return None;
            }
            Err(source) => {
                self.problems.push(unreadable(source));
                return None;
            }
        };
        // No program can be given a longer value, and a stray large file (a backup, a log) must
        // not become a needle of megabytes in every form: refused, by its size only.
        let limit = super::MAX_ARG_STRLEN;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(limit).min(limit) + 1);
        if let Err(source) = (&mut file).take(limit as u64).read_to_end(&mut bytes) {
            self.problems.push(unreadable(source));
            return None;
        }
        if bytes.len() >= limit {
            self.problems
                .push(bad("is 128 KiB or larger, more than a program can be given"));
            return None;
        }
        let mut text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                self.problems.push(bad("is not UTF-8"));
                return None;
            }
        };
        if text.ends_with('\n') {
            text.pop();
        }
        Some(text)
    }

    /// `KEY=VALUE` lines; blank lines and `#` comments are ignored; an `export ` prefix is
    /// accepted. The value is everything after the first `=`, verbatim (no quote removal).
    fn env_file(&mut self, path: &Path) {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking and a regular file only, like a secret file (a FIFO must not hang the
        // job); bounded, like the payload: a file this large is no list of secrets.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path);
        let read = file.and_then(|file| {
            let regular = file.metadata()?.is_file();
            let mut bytes = Vec::new();
            if regular {
                file.take(ENV_FILE_LIMIT as u64).read_to_end(&mut bytes)?;
            }
            Ok((regular, bytes))
        });
        let text = match read {
            Ok((false, _)) => {
                self.problems.push(Problem::BadEnvFile {
                    path: path.to_owned(),
                    reason: NOT_REGULAR,
                });
                return;
            }
            Ok((true, bytes)) if bytes.len() >= ENV_FILE_LIMIT => {
                self.problems.push(Problem::BadEnvFile {
                    path: path.to_owned(),
                    reason: "is 1 MiB or larger",
                });
                return;
            }
            Ok((true, bytes)) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    self.problems.push(Problem::BadEnvFile {
                        path: path.to_owned(),
                        reason: "is not UTF-8",
                    });
                    return;
                }
            },
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.problems.push(Problem::MissingFile {
                    what: "secrets env file",
                    path: path.to_owned(),
                });
                return;
            }
            Err(source) => {
                self.problems.push(Problem::UnreadableFile {
                    what: "secrets env file",
                    path: path.to_owned(),
                    source,
                });
                return;
            }
        };
        self.env_file_text(path, &text);
    }

    fn env_file_text(&mut self, path: &Path, text: &str) {
        for item in parse_env_file(text) {
            match item {
                Ok((key, value, line)) => {
                    let origin = format!("{}:{line}", path.display());
                    let hidden_key = value.bytes().all(|b| b == b'=');
                    self.insert_value(
                        key.to_owned(),
                        NodeValue {
                            value: Text::Secret(Secret::new(value)),
                            origin,
                            hidden_key,
                        },
                    )
                }
                Err((line, reason)) => self.problems.push(Problem::BadEnvFileLine {
                    path: path.to_owned(),
                    line,
                    reason,
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_env_file(text: &str) -> (PathBuf, Result<BTreeMap<String, NodeValue>, Vec<Problem>>) {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        std::fs::write(dir.join("deploy-env.json"), "{}").unwrap();
        std::fs::write(dir.join("secrets.env"), text).unwrap();
        let files = NodeFiles {
            deploy_env: dir.join("deploy-env.json"),
            secrets_dirs: vec![],
            secrets_env_files: vec![dir.join("secrets.env")],
            keys: dir.join("unused"),
            attributes: dir.join("unused"),
            nix_shell: "nix-shell".into(),
            required_secrets: None,
        };
        let loaded = load(&files);
        (dir.join("secrets.env"), loaded)
    }

    #[test]
    fn a_key_that_may_be_secret_text_is_never_named() {
        let (path, loaded) = load_env_file("QUJDREVGR0hJSktM==\nQUJDREVGR0hJSktM=\n");
        let problems: Vec<String> = loaded.unwrap_err().iter().map(ToString::to_string).collect();
        let path = path.display();
        assert_eq!(
            problems,
            [format!(
                "{path}:1 and {path}:2 set the same key (the key is not shown: its line may be part of a wrapped secret)"
            )]
        );
        // Positive control: an ordinary repeated key is named.
        let (path, loaded) = load_env_file("TF_VAR_a=1\nTF_VAR_a=2\n");
        let problems: Vec<String> = loaded.unwrap_err().iter().map(ToString::to_string).collect();
        let path = path.display();
        assert_eq!(
            problems,
            [format!("TF_VAR_a is set by two node sources: {path}:1 and {path}:2")]
        );
        let (_, loaded) = load_env_file("TF_VAR_a=\nTF_VAR_b==\nTF_VAR_c=x=\n");
        let hidden: Vec<bool> = loaded.unwrap().values().map(|v| v.hidden_key).collect();
        assert_eq!(hidden, [true, true, false]);
    }
}
