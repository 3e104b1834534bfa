//! The evaluation of a job's shell, apart from its run, and the cache of instantiated shells:
//! step 9 of a job (the spine: [`crate::job`]), before the program; described by step 6
//! ([`describe`]), looked at by `env`, pruned by `prune`.
//!
//! nix-shell given a tree evaluates it (nixpkgs included) before anything runs: seconds and
//! hundreds of MiB for the seeds' deployments, every job; and it evaluates in the job's
//! environment, so the payload's variables reach the deployment's Nix code
//! (`builtins.getEnv`). Here a job's shell is instantiated first, by `nix-instantiate` with the
//! argv nix-shell would evaluate with (`--arg inNixShell true`, `IN_NIX_SHELL=impure`) in an
//! environment of the node's alone ([`Evaluation::env`]: never a payload value); then
//! `nix-shell <the .drv> --run ...` runs the program with the job's whole environment, and
//! evaluates nothing (given a store derivation it parses no expression; with the node's
//! `NIX_BUILD_SHELL` it does not evaluate nixpkgs' bash either).
//!
//! When the tree and the nixpkgs pin are store paths (immutable), the derivation is cached in
//! the state directory ([`cache`]), keyed by everything its evaluation depends on ([`key`]),
//! and kept alive by garbage-collector roots: the next job of the same key runs it without
//! evaluating. Otherwise every job evaluates, as before, and `env` says why. Where each piece
//! runs:
//!
//! - [`describe`] (from the plan, a pure function): the evaluation's argv and environment;
//! - [`look`] (`env`): whether the job would hit, miss or not be cached, and why;
//! - [`run::prepare`] (`run`, with the namespace lock held): the decision, with the key's locks
//!   (a hit holds its entry for the whole run; a miss evaluates while jobs of the same key wait
//!   for it);
//! - [`run::Prepared`] (the steps of the run before the program, see [`crate::run::Before`]): the
//!   evaluation in the program tree, its roots, the entry;
//! - [`prune`] (`prune`): entries of trees no longer deployed.

mod cache;
mod drv;
mod key;
mod run;
mod store;

// Step 9's entry: the evaluation decided and its steps prepared for the program tree.
pub(crate) use run::prepare;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::input::{Source, Var};
use safe_io::secret::Text;

/// The home evaluation runs with: a directory that does not exist (and no one but root can
/// make), so that neither Nix (its user configuration and caches) nor nixpkgs
/// (`~/.config/nixpkgs/config.nix`, its overlays) reads a file there that a job could write.
/// Nix's own convention for builds.
pub const EVALUATION_HOME: &str = "/homeless-shelter";

/// Variables of the node that Nix itself reads, passed to evaluation when the node or jobenv's
/// own environment sets them (a payload never can: they are reserved).
const NIX_OWN: [&str; 6] = [
    "PATH",
    "TMPDIR",
    "NIX_REMOTE",
    "NIX_CONFIG",
    "NIX_SSL_CERT_FILE",
    "SSL_CERT_FILE",
];

/// How a job's shell is evaluated: what [`crate::plan`] decides, before any file is looked at.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// `nix-instantiate` and `nix-store`, beside the node's nix-shell.
    pub nix_instantiate: PathBuf,
    pub nix_store: PathBuf,
    /// `DEPLOYMENT_ROOT` and the nixpkgs pin, as the node sets them.
    pub root: String,
    pub nixpkgs: String,
    /// `devShells.<SYSTEM>.<ATTRIBUTE>`.
    pub attr_path: String,
    /// Only what evaluation needs from the node: Nix's own variables, the pin in `NIX_PATH`, the
    /// node's values of the keys it declares node-only (its structural pins); never a payload
    /// value, never a secret but Nix's own configuration.
    pub env: BTreeMap<String, Var>,
    /// The node's own `NIX_PATH`, after the pin.
    nix_path_rest: Option<String>,
}

/// The evaluation of a job's shell, from the merged environment of its program: `env` holds
/// every variable with where it came from, `node_only` the keys only the node may set.
pub fn describe(
    nix_shell: &Path,
    root: &str,
    nixpkgs: &str,
    attr_path: String,
    env: &BTreeMap<String, Var>,
    node_only: &[String],
    node_nix_path: Option<&str>,
) -> Evaluation {
    let from_node = |var: &&Var| var.source != Source::Payload;
    let mut eval: BTreeMap<String, Var> = BTreeMap::new();
    for key in node_only {
        if let Some(var) = env
            .get(key)
            .filter(|v| matches!(v.source, Source::Node | Source::Default))
        {
            eval.insert(key.clone(), var.clone());
        }
    }
    for name in NIX_OWN {
        if let Some(var) = env.get(name).filter(from_node) {
            eval.insert(name.to_owned(), var.clone());
        }
    }
    let derived = |value: &str| Var {
        value: Text::Plain(value.to_owned()),
        source: Source::Derived,
    };
    // Fetchers keep their cache where the node's programs do (the worker's home), as when
    // nix-shell evaluated: a cache does not change what a hashed fetch gives.
    if let Some(home) = env.get("HOME").filter(from_node) {
        eval.insert(
            "XDG_CACHE_HOME".into(),
            derived(&format!("{}/.cache", home.value.expose().trim_end_matches('/'))),
        );
    }
    eval.insert("HOME".into(), derived(EVALUATION_HOME));
    // No user configuration at all: the worker's `~/.config/nix/nix.conf` is writable by every
    // job's program, and `system` or `nix-path` there would steer what later jobs evaluate.
    eval.insert("NIX_USER_CONF_FILES".into(), derived(""));
    // What nix-shell sets before it evaluates (nixpkgs' `lib.inNixShell` reads it).
    eval.insert("IN_NIX_SHELL".into(), derived("impure"));
    let nix_path_rest = node_nix_path.filter(|rest| !rest.is_empty()).map(str::to_owned);
    eval.insert("NIX_PATH".into(), derived(&nix_path(nixpkgs, nix_path_rest.as_deref())));
    Evaluation {
        nix_instantiate: crate::input::beside(nix_shell, "nix-instantiate"),
        nix_store: crate::input::beside(nix_shell, "nix-store"),
        root: root.to_owned(),
        nixpkgs: nixpkgs.to_owned(),
        attr_path,
        env: eval,
        nix_path_rest,
    }
}

/// `NIX_PATH` with the pin first (Nix takes the first match).
fn nix_path(nixpkgs: &str, rest: Option<&str>) -> String {
    match rest {
        Some(rest) => format!("nixpkgs={nixpkgs}:{rest}"),
        None => format!("nixpkgs={nixpkgs}"),
    }
}

/// Where a job stands with the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached {
    /// The entry's derivation: no evaluation.
    Hit { drv: String },
    /// Evaluated now, and cached.
    Miss,
    /// Evaluated by every job: why.
    Off(String),
}

/// The tree and the pin as a cached evaluation reads them, and its key.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub store_dir: String,
    pub root: String,
    pub nixpkgs: String,
    /// The store paths they lie in (which the entry roots).
    pub root_path: String,
    pub nixpkgs_path: String,
    pub key: String,
}

impl Evaluation {
    /// The evaluation's argv: of the tree and pin given, with its root at `root` (none: it
    /// prints the derivation's path instead).
    pub(crate) fn argv(&self, tree: &str, pin: &str, root: Option<&Path>) -> Vec<String> {
        let mut argv = vec![
            self.nix_instantiate.display().to_string(),
            tree.to_owned(),
            "-I".into(),
            format!("nixpkgs={pin}"),
            "-A".into(),
            self.attr_path.clone(),
            "--arg".into(),
            "inNixShell".into(),
            "true".into(),
        ];
        if let Some(root) = root {
            argv.extend(["--add-root".into(), root.display().to_string()]);
        }
        argv
    }

    /// The environment, with `NIX_PATH`'s pin at `pin`.
    pub(crate) fn env_with_pin(&self, pin: &str) -> BTreeMap<String, Var> {
        let mut env = self.env.clone();
        env.insert(
            "NIX_PATH".into(),
            Var {
                value: Text::Plain(nix_path(pin, self.nix_path_rest.as_deref())),
                source: Source::Derived,
            },
        );
        env
    }

    /// Whether this job's evaluation can be cached, and if so its resolved inputs and key.
    /// Looks at files (links, nix-instantiate, nix.conf), never runs a process.
    pub(crate) fn resolve(&self) -> Result<Resolved, String> {
        let nix_remote = self.env.get("NIX_REMOTE").map(|v| v.value.expose());
        let store_dir = store::store_dir(nix_remote)?;
        let root = store::resolve("DEPLOYMENT_ROOT", &self.root)?;
        let nixpkgs = store::resolve("NIXPKGS", &self.nixpkgs)?;
        let outside = |key: &str, given: &str| format!("{key} {given} is not in the Nix store ({store_dir})");
        let root_path =
            store::store_path_of(&root, &store_dir).ok_or_else(|| outside("DEPLOYMENT_ROOT", &self.root))?;
        let nixpkgs_path =
            store::store_path_of(&nixpkgs, &store_dir).ok_or_else(|| outside("NIXPKGS", &self.nixpkgs))?;
        let env = self.env_with_pin(&nixpkgs);
        let key = key::key(&key::Inputs {
            store_dir: &store_dir,
            root: &root,
            nixpkgs: &nixpkgs,
            attr_path: &self.attr_path,
            nix_instantiate: &self.nix_instantiate,
            env: env.iter().map(|(k, v)| (k.as_str(), v.value.expose())).collect(),
        })?;
        Ok(Resolved {
            store_dir,
            root,
            nixpkgs,
            root_path,
            nixpkgs_path,
            key,
        })
    }
}

/// What `env` shows of the evaluation: where the job stands with the cache (looked up, nothing
/// changed), the argv a job would run now, and its environment.
pub struct Look {
    pub cached: Cached,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, Var>,
}

/// [`Look`], for `env`: reads the cache, takes no lock, writes nothing.
pub fn look(evaluation: &Evaluation, state_dir: &Path) -> Look {
    let uncached = |why: String| {
        let root = Some(
            Path::new(&std::path::absolute(state_dir).unwrap_or_default())
                .join(cache::SHELLS)
                .join("job-<pid>-<start>")
                .join(cache::SHELL_ROOT),
        );
        Look {
            cached: Cached::Off(why),
            argv: evaluation.argv(&evaluation.root, &evaluation.nixpkgs, root.as_deref()),
            env: evaluation.env.clone(),
        }
    };
    let resolved = match evaluation.resolve() {
        Ok(resolved) => resolved,
        Err(why) => return uncached(why),
    };
    let cache = match cache::Cache::open(state_dir, false) {
        Ok(cache) => cache,
        Err(error) => return uncached(format!("the cache cannot be used: {error}")),
    };
    let expected = resolved.expected(&evaluation.attr_path);
    let cached = match cache.as_ref().map(|cache| cache.usable(&expected)) {
        Some(Ok(Some(entry))) => Cached::Hit { drv: entry.drv },
        _ => Cached::Miss,
    };
    let root = std::path::absolute(state_dir)
        .unwrap_or_default()
        .join(cache::SHELLS)
        .join(&resolved.key)
        .join(cache::SHELL_ROOT);
    Look {
        cached,
        argv: evaluation.argv(&resolved.root, &resolved.nixpkgs, Some(&root)),
        env: evaluation.env_with_pin(&resolved.nixpkgs),
    }
}

impl Resolved {
    pub(crate) fn expected<'a>(&'a self, attr_path: &'a str) -> cache::Expected<'a> {
        cache::Expected {
            key: &self.key,
            store_dir: &self.store_dir,
            root: &self.root,
            nixpkgs: &self.nixpkgs,
            attr_path,
        }
    }
}

/// `prune`: drops the cached shells of trees no longer deployed (the `DEPLOYMENT_ROOT` and pin
/// of `deploy_env`, links resolved; if it cannot be read, none is dropped for that), those whose
/// derivation is gone, what evaluations that failed or were killed left, and the roots of jobs
/// whose jobenv is gone. An entry a job runs or evaluates is left. Returns how many entries were
/// dropped.
pub fn prune(state_dir: &Path, deploy_env: &Path) -> std::io::Result<usize> {
    let Some(cache) = cache::Cache::open(state_dir, false)? else {
        return Ok(0);
    };
    let deployed = match deployed(deploy_env) {
        Ok(deployed) => Some(deployed),
        Err(why) => {
            tracing::warn!("{why}: no cached shell is dropped for its tree");
            None
        }
    };
    cache.prune(deployed.as_ref().map(|(root, pin)| (root.as_str(), pin.as_str())))
}

/// The tree and the pin the node deploys now, as a cached evaluation names them.
fn deployed(deploy_env: &Path) -> Result<(String, String), String> {
    let shown = deploy_env.display();
    let bytes = std::fs::read(deploy_env).map_err(|e| format!("{shown} cannot be read: {e}"))?;
    let node: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| format!("{shown} is not a JSON object: {e}"))?;
    let text = |key: &str| node.get(key).and_then(|v| v.as_str());
    let root = text("DEPLOYMENT_ROOT").ok_or_else(|| format!("{shown} sets no DEPLOYMENT_ROOT"))?;
    let pin = text("NIXPKGS")
        .or_else(|| text("DEPLOYMENT_NIXPKGS"))
        .ok_or_else(|| format!("{shown} sets no NIXPKGS"))?;
    Ok((
        store::resolve("DEPLOYMENT_ROOT", root)?,
        store::resolve("NIXPKGS", pin)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(value: &str, source: Source) -> Var {
        Var {
            value: Text::Plain(value.into()),
            source,
        }
    }

    #[test]
    fn the_evaluation_environment_holds_the_nodes_values_and_never_the_payloads() {
        let env: BTreeMap<String, Var> = [
            ("PATH", var("/bin", Source::Environ)),
            ("HOME", var("/var/lib/worker/", Source::Environ)),
            ("NIX_REMOTE", var("daemon", Source::Node)),
            ("HOSTING_CONFIG", var("/pin", Source::Node)),
            ("SELF_PIN", var("/default", Source::Default)),
            ("FROM_PAYLOAD", var("payload-value", Source::Payload)),
            ("NODE_ONLY_SECRET", var("s3cret", Source::Secret)),
            ("DOMAIN", var("example.org", Source::Node)),
            ("DEPLOYMENT_NAMESPACE", var("ns", Source::Derived)),
            ("TF_HTTP_PASSWORD", var("pw", Source::Payload)),
            ("NIX_PATH", var("nixpkgs=/p:x=/y", Source::Derived)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let node_only = ["HOSTING_CONFIG", "SELF_PIN", "NODE_ONLY_SECRET", "FROM_PAYLOAD"].map(String::from);
        let eval = describe(
            Path::new("/nix/bin/nix-shell"),
            "/r",
            "/p",
            "devShells.x86_64-linux.web".into(),
            &env,
            &node_only,
            Some("x=/y"),
        );
        let shown: BTreeMap<&str, &str> = eval.env.iter().map(|(k, v)| (k.as_str(), v.value.expose())).collect();
        assert_eq!(
            shown,
            BTreeMap::from([
                ("HOME", EVALUATION_HOME),
                ("HOSTING_CONFIG", "/pin"),
                ("IN_NIX_SHELL", "impure"),
                ("NIX_PATH", "nixpkgs=/p:x=/y"),
                ("NIX_REMOTE", "daemon"),
                ("NIX_USER_CONF_FILES", ""),
                ("PATH", "/bin"),
                ("SELF_PIN", "/default"),
                ("XDG_CACHE_HOME", "/var/lib/worker/.cache"),
            ])
        );
        assert_eq!(eval.nix_instantiate, Path::new("/nix/bin/nix-instantiate"));
        assert_eq!(eval.nix_store, Path::new("/nix/bin/nix-store"));
        assert_eq!(
            eval.argv("/r", "/p", None),
            [
                "/nix/bin/nix-instantiate",
                "/r",
                "-I",
                "nixpkgs=/p",
                "-A",
                "devShells.x86_64-linux.web",
                "--arg",
                "inNixShell",
                "true"
            ]
        );
        assert_eq!(
            eval.env_with_pin("/real")["NIX_PATH"].value.expose(),
            "nixpkgs=/real:x=/y"
        );
    }
}
