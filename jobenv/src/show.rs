//! What `env` and `keys` print. Every value `env` shows is redacted first, before it is
//! escaped or encoded (an escaped secret, `pa\'ss` for `pa'ss`, is no longer the redactor's
//! needle), so a derived value that embeds a secret is masked too.

use std::collections::BTreeMap;

use serde_json::json;

use crate::cli::Format;
use crate::evaluation::{Cached, Look};
use crate::input::Var;
use crate::input::names::DeclaredKey;
use crate::plan::Plan;
use crate::run::redact::Redactor;

/// What `run` would do: the evaluation (where the job stands with the cache, the argv and
/// environment a job would evaluate with now, `look`), then the run step.
pub fn env(plan: &Plan, look: &Look, format: Format) -> Vec<u8> {
    let redactor = Redactor::new(&plan.secrets);
    let redacted = |text: &str| {
        let mut redactor = redactor.clone();
        let mut out = Vec::with_capacity(text.len());
        redactor.push(text.as_bytes(), &mut out);
        redactor.finish(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let shown = |var: &Var| {
        if var.value.is_secret() {
            "[REDACTED]".to_owned()
        } else {
            redacted(var.value.expose())
        }
    };
    let mut argv: Vec<String> = plan.argv.iter().map(|arg| redacted(arg)).collect();
    if let Cached::Hit { drv } = &look.cached {
        argv[1] = drv.clone();
    }
    let eval_argv: Vec<String> = look.argv.iter().map(|arg| redacted(arg)).collect();
    let (cache, detail) = match &look.cached {
        Cached::Hit { drv } => ("hit", format!("the evaluation does not run: {drv}")),
        Cached::Miss => ("miss", "evaluated now, then cached".to_owned()),
        Cached::Off(why) => ("off", format!("evaluated by every job: {}", redacted(why))),
    };
    let text = match format {
        Format::Json => {
            let vars = |env: &BTreeMap<String, Var>| -> serde_json::Map<String, serde_json::Value> {
                env.iter()
                    .map(|(key, var)| (key.clone(), json!({"value": shown(var), "source": var.source})))
                    .collect()
            };
            let mut evaluation = json!({"cache": cache, "argv": eval_argv, "env": vars(&look.env)});
            match &look.cached {
                Cached::Hit { drv } => evaluation["drv"] = json!(drv),
                Cached::Off(why) => evaluation["why"] = json!(redacted(why)),
                Cached::Miss => {}
            }
            // For each payload key that was dropped: who won.
            let ignored: serde_json::Map<_, _> = plan.ignored.iter().map(|key| (key.clone(), json!("node"))).collect();
            let document = json!({
                "evaluation": evaluation,
                "argv": argv,
                "env": vars(&plan.env),
                "ignored": ignored,
                "node_only": plan.node_only,
            });
            let mut text = serde_json::to_string_pretty(&document).expect("serializes");
            text.push('\n');
            text
        }
        Format::Text => {
            let mut text = format!("# cache: {cache}, {}\n", detail.escape_debug());
            text.push_str("# evaluation argv, one argument per line\n");
            for arg in &eval_argv {
                text.push_str(&format!("{}\n", arg.escape_debug()));
            }
            text.push_str("# evaluation environment: KEY=VALUE  # source\n");
            for (key, var) in &look.env {
                text.push_str(&format!("{key}={}  # {}\n", shown(var).escape_debug(), var.source));
            }
            text.push_str("# argv, one argument per line\n");
            for arg in &argv {
                text.push_str(&format!("{}\n", arg.escape_debug()));
            }
            text.push_str("# environment: KEY=VALUE  # source\n");
            for (key, var) in &plan.env {
                text.push_str(&format!("{key}={}  # {}\n", shown(var).escape_debug(), var.source));
            }
            if !plan.ignored.is_empty() {
                let keys: Vec<String> = plan.ignored.iter().map(|key| key.escape_debug().to_string()).collect();
                text.push_str(&format!("# payload keys ignored, the node wins: {}\n", keys.join(", ")));
            }
            if !plan.node_only.is_empty() {
                text.push_str(&format!(
                    "# node-only keys, never taken from a payload: {}\n",
                    plan.node_only.join(", ")
                ));
            }
            text
        }
    };
    text.into_bytes()
}

pub fn keys(declared: &BTreeMap<String, DeclaredKey>, format: Format) -> String {
    match format {
        Format::Json => {
            let mut text = serde_json::to_string_pretty(declared).expect("serializes");
            text.push('\n');
            text
        }
        Format::Text => {
            let mut text = String::new();
            for (key, entry) in declared {
                text.push_str(key);
                text.push('\n');
                if !entry.description.is_empty() {
                    for line in entry.description.lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                }
                if let Some(default) = &entry.default {
                    text.push_str(&format!("    default: {}\n", default.escape_debug()));
                }
                if entry.node_only {
                    text.push_str("    node-only: set by the node; a payload value is ignored\n");
                }
            }
            text
        }
    }
}

/// jobenv's names and defaults as its NixOS module reads them (`nixos-module/jobenv-names.json`,
/// checked in and compared with this by a test): the module refuses at evaluation what jobenv
/// would refuse at run time, and renders files where jobenv looks for them, from one source.
pub fn module_names() -> String {
    use crate::input::names;
    let document = json!({
        "nodeControl": names::NODE_CONTROL_KEYS,
        "payloadControl": names::PAYLOAD_CONTROL_KEYS,
        "sharedControl": names::SHARED_CONTROL_KEYS,
        "derived": names::DERIVED_KEYS,
        "stateKeys": names::STATE_KEYS,
        "nodeTools": names::NODE_TOOL_KEYS,
        "nodeToolPrefixes": names::NODE_TOOL_PREFIXES,
        "reserved": names::RESERVED,
        "reservedPrefixes": names::RESERVED_PREFIXES,
        "reservedSuffixes": names::STDENV_CODE_SUFFIXES,
        "environPassthrough": names::ENVIRON_PASSTHROUGH,
        "verbs": names::VERBS,
        "defaults": {
            "deployEnv": crate::cli::DEFAULT_DEPLOY_ENV,
            "deployKeys": crate::cli::DEFAULT_KEYS,
            "deploymentAttributes": crate::cli::DEFAULT_ATTRIBUTES,
            "secretsDir": crate::cli::DEFAULT_SECRETS_DIR,
            "stateDir": crate::cli::DEFAULT_STATE_DIR,
            "graceSeconds": crate::cli::DEFAULT_GRACE.parse::<u64>().expect("a whole number of seconds"),
            // The longest --grace cluster mode accepts with its default lease times: the module
            // refuses a longer jobs.grace beside cluster.dsnFile at evaluation.
            "clusterMaxGraceSeconds": crate::settings::Cluster::default_max_grace().as_secs(),
        },
    });
    let mut text = serde_json::to_string_pretty(&document).expect("serializes");
    text.push('\n');
    text
}
