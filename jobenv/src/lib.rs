//! fediversity-jobenv: the one runner of deployment programs on a node.
//!
//! Reading order: [`plan`] (the merge of the three layers and every rule of what may reach a
//! program), [`policy`] (the name lists behind it), [`supervise`] (running and cancelling),
//! [`redact`] (the streaming secret filter), [`events`] (progress events to front-ends).

pub mod cli;
pub mod error;
pub mod events;
pub mod files;
#[doc(hidden)]
pub mod fuzzing;
pub mod job;
pub mod journal;
pub mod lock;
pub mod logging;
pub mod node;
pub mod payload;
pub mod plan;
pub mod policy;
pub mod proctree;
pub mod pump;
pub mod reaper;
pub mod redact;
pub mod report;
pub mod result;
pub mod signals;
pub mod spawn;
pub mod status;
pub mod supervise;
pub mod value;

use std::path::{Path, PathBuf};

use cli::JobArgs;
use error::{Error, Problem};
use plan::{Inputs, Plan};

/// What a job says it is about, known as soon as its payload is read (for the job result,
/// also when the job is rejected).
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub attribute: Option<String>,
    pub namespace: Option<String>,
    /// `BUILD_ID` from the payload, when it is valid.
    pub build_id: Option<String>,
}

pub struct Prepared {
    pub identity: Identity,
    pub plan: Result<Plan, Error>,
    /// Where progress events go: the node's valid event settings, also for a rejected job.
    pub events: Option<events::Target>,
}

/// Reads every input of a job and plans it; all problems found are reported together.
pub fn prepare(job: &JobArgs) -> Prepared {
    let mut problems: Vec<Problem> = Vec::new();
    let mut identity = Identity::default();

    let payload = payload::read(&job.payload).map_err(|p| problems.push(p)).ok();
    if let Some(payload) = &payload {
        let text = |key| payload.get(key).and_then(value::env_text);
        identity = Identity {
            attribute: text("ATTRIBUTE"),
            namespace: text("NAMESPACE"),
            build_id: text("BUILD_ID").filter(|id| policy::is_valid_build_id(id)),
        };
    }
    let node_files = node::NodeFiles {
        deploy_env: job.node.deploy_env.clone(),
        secrets_dirs: job.node.secrets_dirs(),
        secrets_env_files: job.node.secrets_env_files(),
    };
    let node = node::load(&node_files).map_err(|p| problems.extend(p)).ok();
    let declared = files::read_keys(&job.node.keys).map_err(|p| problems.extend(p)).ok();
    let attributes = files::read_attributes(&job.node.attributes).map_err(|p| problems.push(p)).ok();
    let nix_shell = resolve_program(&job.node.nix_shell).map_err(|p| problems.push(p)).ok();

    let (payload, node, declared, attributes, nix_shell) = match (payload, node, declared, attributes, nix_shell) {
        (Some(payload), Some(node), Some(declared), Some(attributes), Some(nix_shell)) if problems.is_empty() => {
            (payload, node, declared, attributes, nix_shell)
        }
        (_, node, ..) => return rejected(identity, problems, node.as_ref()),
    };
    // Only names that may pass: the rest of jobenv's environment (a job runner's token) is
    // never kept, not even in memory.
    let environ = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| plan::environ_admits(&declared, k))
        .collect();
    let inputs = Inputs {
        verb: job.verb.clone(),
        node,
        declared,
        attributes,
        payload,
        environ,
        nix_shell,
        running_system: policy::running_system(),
    };
    let plan = plan::plan(&inputs);
    let events = match &plan {
        Ok(plan) => plan.events.clone(),
        Err(_) => events::config::from_node(&inputs.node).ok().flatten(),
    };
    Prepared { identity, plan: plan.map_err(Error::Rejected), events }
}

/// A job refused before it was planned; reported to front-ends too when the node's event
/// settings are good.
fn rejected(identity: Identity, problems: Vec<Problem>, node: Option<&std::collections::BTreeMap<String, node::NodeValue>>) -> Prepared {
    let events = node.and_then(|node| events::config::from_node(node).ok().flatten());
    Prepared { identity, plan: Err(Error::Rejected(problems)), events }
}

/// A program named by path must be an executable file; a bare name is looked up in jobenv's
/// own PATH (the node's), never in the program's.
fn resolve_program(name: &str) -> Result<PathBuf, Problem> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let not_found = || Problem::NixShellNotFound(name.to_owned());
    if name.contains('/') {
        let path = PathBuf::from(name);
        return if executable(&path) { Ok(path) } else { Err(not_found()) };
    }
    let search = std::env::var_os("PATH").ok_or_else(not_found)?;
    std::env::split_paths(&search).map(|dir| dir.join(name)).find(|p| executable(p)).ok_or_else(not_found)
}
