//! Step 5 of a job (the spine: [`crate::job`]): everything it is made of, read and checked before
//! anything runs ([`gather`], then [`check`]). `env` and `keys` read the same.
//!
//! - [`payload`]: the job's JSON object, and how a JSON value becomes a variable's text;
//! - [`node`]: the node layer (deploy-env.json, secrets directories, [`env_file`]s);
//! - [`keys`]: the declared keys and the published attribute names;
//! - [`json`]: strict JSON, shared by all of the above;
//! - [`names`]: the naming policy (verbs, reserved and control names, the grammars);
//! - [`admit`]: which key may come from which layer;
//! - [`controls`]: the control keys jobenv needs itself, each against its rule.
//!
//! [`gather`] reads every input and reports all problems together; [`check`] runs the
//! validators over what was read. What comes out goes to [`crate::plan`], the merge.

pub mod admit;
pub mod controls;
pub mod env_file;
pub mod json;
pub mod keys;
pub mod names;
pub mod node;
pub mod payload;
pub mod readiness;
pub mod state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Problem;
use crate::error::{SHOWN_CHARS, cut};
use crate::events::Target;
use crate::settings::JobSettings;
use controls::Controls;
use names::DeclaredKey;
use node::NodeValue;
use safe_io::secret::{Hidden, Text};

// What the spine reads through the inputs' face besides gathering and checking them: the
// payload (step 2 reads it once, for the decision) and a namespace's name.
pub(crate) use json::Members;
pub(crate) use names::is_valid_namespace;
pub(crate) use payload::read_until as read_payload_until;

/// Every value the node sets, by key.
pub type NodeValues = BTreeMap<String, NodeValue>;

/// Everything a job is made of, read from disk: the input of [`check`] and of the merge. Its
/// Debug output holds no secret: node secrets are [`safe_io::secret::Text::Secret`]s, and the
/// payload (which may hold the state password) and jobenv's environment are [`Hidden`].
#[derive(Debug, Clone)]
pub struct Inputs {
    pub verb: String,
    pub node: NodeValues,
    pub declared: BTreeMap<String, DeclaredKey>,
    pub attributes: Vec<String>,
    pub payload: Hidden<json::Members>,
    /// jobenv's own environment (only admitted names are kept).
    pub environ: Hidden<Vec<(String, String)>>,
    /// The nix-shell to run, already resolved to a path.
    pub nix_shell: PathBuf,
    pub running_system: String,
    /// Bytes of argv and environment the program may have ([`exec_budget`]).
    pub exec_budget: usize,
}

/// Which layer a variable of the program's environment came from: the node's (a plain value or
/// a secret), the payload, jobenv's own environment, a declared key's default, or derived by
/// jobenv from them. The merge ([`crate::plan`]) makes [`Var`]s; the evaluation and `env` read
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Node,
    Secret,
    Payload,
    Environ,
    Default,
    Derived,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Source::Node => "node",
            Source::Secret => "secret",
            Source::Payload => "payload",
            Source::Environ => "environ",
            Source::Default => "default",
            Source::Derived => "derived",
        };
        f.write_str(text)
    }
}

/// One variable of the program's environment. A secret value (from a secrets source, or the
/// payload's `TF_HTTP_PASSWORD`) is a [`Text::Secret`]: redacted everywhere jobenv shows output,
/// never in a `Debug` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    pub value: Text,
    pub source: Source,
}

impl Var {
    pub(crate) fn plain(value: String, source: Source) -> Self {
        Var {
            value: Text::Plain(value),
            source,
        }
    }
}

/// What a job says it is about, known as soon as its payload is read (for the job result,
/// also when the job is rejected).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub attribute: Option<String>,
    pub namespace: Option<String>,
    /// `BUILD_ID` from the payload, when it is valid.
    pub build_id: Option<String>,
}

/// A longer ATTRIBUTE is not recorded as the job's identity (it is still checked, and refused
/// if it is not published).
const MAX_IDENTITY_ATTRIBUTE: usize = 128;

/// What [`gather`] found.
pub struct Gathered {
    pub identity: Identity,
    pub inputs: Result<Inputs, Vec<Problem>>,
    /// Where progress events go, when the node's event settings (and the payload's row) are
    /// good: also for a job that is rejected, so front-ends see why.
    pub events: Option<Target>,
}

/// The outcome of the validators: every control key resolved, the admitted payload values,
/// and the warnings (naming keys only).
#[derive(Debug)]
pub struct Checked {
    pub controls: Controls,
    pub payload: Vec<(String, String)>,
    /// Payload keys dropped because the node owns them.
    pub ignored: Vec<String>,
    pub warnings: Vec<String>,
}

/// The kernel's limit for one string of argv or the environment, its NUL included
/// (`MAX_ARG_STRLEN`, 32 pages). No node secret may be this long: no program could be given it,
/// and a stray large file must not become a needle of megabytes in every form.
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// A value from a job as an error quotes it: at most `max` characters, and `...` after the
/// quote when it was cut. Errors go to the log, `result.json` and progress events: a megabyte
/// of payload is not repeated there.
pub fn shown(value: &str, max: usize) -> String {
    let cut: String = value.chars().take(max).collect();
    if cut.len() < value.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// How many bytes of argv and environment jobenv lets a program have under the stack limit
/// `stack` (the soft `RLIMIT_STACK`). exec refuses more than a quarter of the stack limit, at
/// most 6 MiB and at least 128 KiB (Linux's `bprm_stack_limits`). jobenv takes half of that:
/// nix-shell execs the dev shell's bash, which execs the program, and each adds the dev
/// shell's variables to what jobenv passed. With the usual 8 MiB stack that is 1 MiB, the
/// payload's own limit.
pub fn exec_budget(stack: u64) -> usize {
    let kernel = (stack / 4).clamp(128 << 10, 6 << 20);
    usize::try_from(kernel / 2).expect("at most 3 MiB")
}

/// Reads every input of a job; all problems found are reported together.
pub fn gather(job: &JobSettings) -> Gathered {
    gather_with(job, payload::read(&job.payload))
}

/// [`gather`] with the payload already read (it can be read only once: it may be stdin).
pub fn gather_with(job: &JobSettings, payload: Result<json::Members, Problem>) -> Gathered {
    let mut problems: Vec<Problem> = Vec::new();
    let mut identity = Identity::default();

    let payload = payload.map_err(|p| problems.push(p)).ok();
    if let Some(payload) = &payload {
        identity = identity_of(payload);
    }
    let required = job
        .node
        .required_secrets
        .as_deref()
        .map(readiness::read)
        .transpose()
        .map_err(|p| problems.push(p))
        .ok()
        .flatten();
    let node = node::load(&job.node)
        .map_err(|p| {
            problems.extend(p.into_iter().map(|p| {
                if required.is_some() {
                    readiness::reclassify(p)
                } else {
                    p
                }
            }))
        })
        .ok();
    if let (Some(required), Some(node)) = (&required, &node) {
        problems.extend(readiness::missing(required, node));
    }
    let declared = keys::read_keys(&job.node.keys).map_err(|p| problems.extend(p)).ok();
    let attributes = keys::read_attributes(&job.node.attributes)
        .map_err(|p| problems.push(p))
        .ok();
    let nix_shell = resolve_program(&job.node.nix_shell).map_err(|p| problems.push(p)).ok();
    // The evaluation runs Nix's other programs of the same installation.
    for tool in ["nix-instantiate", "nix-store"] {
        let path = nix_shell.as_deref().map(|shell| beside(shell, tool));
        if let Some(path) = path.filter(|path| !is_executable(path)) {
            problems.push(Problem::NixToolNotFound { tool, path });
        }
    }
    let events = node
        .as_ref()
        .zip(payload.as_ref())
        .and_then(|(node, payload)| controls::target_of_rejected(node, payload, &job.verb));

    let inputs = match (payload, node, declared, attributes, nix_shell) {
        (Some(payload), Some(node), Some(declared), Some(attributes), Some(nix_shell)) if problems.is_empty() => {
            // Only names that may pass: the rest of jobenv's environment (a job runner's
            // token) is never kept, not even in memory.
            let environ = std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .filter(|(k, _)| admit::environ_admits(&declared, k))
                .collect();
            Ok(Inputs {
                verb: job.verb.clone(),
                node,
                declared,
                attributes,
                payload: Hidden(payload),
                environ: Hidden(environ),
                nix_shell,
                running_system: names::running_system(),
                exec_budget: exec_budget(stack_limit()),
            })
        }
        _ => Err(problems),
    };
    Gathered {
        identity,
        inputs,
        events,
    }
}

/// What a payload says the job is about, before any check. Each only when it fits its grammar:
/// the identity goes into `result.json` and events also for a job that is refused, whatever its
/// payload held.
pub fn identity_of(payload: &json::Members) -> Identity {
    let text = |key| payload.get(key).and_then(|raw| json::text(raw));
    Identity {
        attribute: text("ATTRIBUTE").filter(|a| a.len() <= MAX_IDENTITY_ATTRIBUTE && names::is_valid_attribute(a)),
        namespace: state::namespace_of(text("NAMESPACE").as_deref(), text("TF_HTTP_ADDRESS").as_deref()),
        build_id: text("BUILD_ID").filter(|id| names::is_valid_build_id(id)),
    }
}

/// Runs every validator over `inputs`; all problems are reported together.
pub fn check(inputs: &Inputs) -> Result<Checked, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    if !names::VERBS.contains(&inputs.verb.as_str()) {
        problems.push(Problem::UnknownVerb {
            verb: inputs.verb.clone(),
            expected: names::VERBS.join(", "),
        });
    }
    admit::check_node(&inputs.node, &inputs.declared, &mut problems);
    admit::check_declared(&inputs.declared, &mut problems);
    let payload = admit::payload(inputs, &mut problems, &mut warnings);
    let controls = controls::resolve(inputs, &payload, &mut problems);
    match controls {
        Some(mut controls) if problems.is_empty() => Ok(Checked {
            controls: {
                controls.trace = controls::trace_context(&payload.controls, &mut warnings);
                controls
            },
            payload: payload.values,
            ignored: payload.ignored,
            warnings,
        }),
        _ => Err(problems),
    }
}

/// jobenv's soft stack limit, which the program inherits (the usual 8 MiB if it cannot be read).
fn stack_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_STACK).map_or(8 << 20, |(soft, _)| soft)
}

/// A file anyone may execute (links followed).
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A program of Nix's installed beside `nix_shell` (they are one binary's names).
pub fn beside(nix_shell: &Path, name: &str) -> PathBuf {
    nix_shell.with_file_name(name)
}

/// A program named by path must be an executable file; a bare name is looked up in jobenv's
/// own PATH (the node's), never in the program's.
fn resolve_program(name: &str) -> Result<PathBuf, Problem> {
    let executable = |p: &Path| is_executable(p);
    let not_found = || Problem::NixShellNotFound(name.to_owned());
    if name.contains('/') {
        let path = PathBuf::from(name);
        return if executable(&path) { Ok(path) } else { Err(not_found()) };
    }
    let search = std::env::var_os("PATH").ok_or_else(not_found)?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
        .ok_or_else(not_found)
}

/// Inputs for the unit tests of the validators and the merge.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use serde_json::json;

    pub fn node(pairs: &[(&str, &str, bool)]) -> NodeValues {
        pairs
            .iter()
            .map(|(k, v, secret)| {
                (
                    (*k).into(),
                    NodeValue {
                        value: if *secret {
                            safe_io::secret::Text::Secret(safe_io::secret::Secret::new(*v))
                        } else {
                            safe_io::secret::Text::Plain((*v).into())
                        },
                        origin: format!("test:{k}"),
                        hidden_key: false,
                    },
                )
            })
            .collect()
    }

    /// A node with the required control keys, keys A, B (default `b-default`), C and
    /// HOSTING_CONFIG declared, attribute `web`, and a payload for `web` in namespace `ns1`.
    pub fn inputs() -> Inputs {
        let declared = [
            ("A", None),
            ("B", Some("b-default")),
            ("C", None),
            ("HOSTING_CONFIG", None),
        ]
        .into_iter()
        .map(|(k, d): (&str, Option<&str>)| {
            (
                k.to_owned(),
                DeclaredKey {
                    description: format!("{k} key"),
                    default: d.map(Into::into),
                    node_only: false,
                },
            )
        })
        .collect();
        Inputs {
            verb: "apply".into(),
            node: node(&[
                ("DEPLOYMENT_ROOT", "/", false),
                ("NIXPKGS", "/nixpkgs", false),
                ("NIX_BUILD_SHELL", "/bin/bash", false),
            ]),
            declared,
            attributes: vec!["web".into()],
            payload: Hidden(json::members(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns1"}))),
            environ: Hidden(vec![]),
            nix_shell: "/bin/nix-shell".into(),
            running_system: "x86_64-linux".into(),
            exec_budget: exec_budget(8 << 20),
        }
    }

    impl Inputs {
        /// Sets a payload key to `value`, written as serde_json writes it.
        pub fn set_payload(&mut self, key: &str, value: serde_json::Value) {
            self.payload.0.insert(key.to_owned(), json::raw(&value));
        }
    }

    /// The problems the validators report for `inputs`, as the lines jobenv prints.
    pub fn problems(inputs: &Inputs) -> Vec<String> {
        check(inputs).unwrap_err().iter().map(ToString::to_string).collect()
    }
}
