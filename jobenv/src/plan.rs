//! Stage 2 of a job: the merge. From the checked inputs (node layer, payload, jobenv's own
//! environment) to the exact argv and environment of the deployment program. A pure function of
//! its inputs, so the priority rules are unit-tested without a process, and `env` shows exactly
//! what `run` would do.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::error::Problem;
use crate::events::Target;
use crate::input::{self, Checked, Inputs, admit};
use safe_io::secret::{Hidden, Secret, Text};

/// Secrets shorter than this would shred the log if redacted; they draw a warning instead.
pub const MIN_SECRET_LEN: usize = 4;
/// Lines of a multi-line secret are redacted on their own from this length up.
pub const MIN_SECRET_LINE_LEN: usize = 8;

/// Where a variable of the final environment came from.
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
    fn plain(value: String, source: Source) -> Self {
        Var {
            value: Text::Plain(value),
            source,
        }
    }
}

/// What `run` executes, and what `env` prints. Its Debug output holds no secret value: secret
/// variables are [`Text::Secret`]s and the redaction needles are [`Hidden`].
#[derive(Debug, Clone)]
pub struct Plan {
    pub verb: String,
    pub attribute: String,
    pub namespace: String,
    pub system: String,
    pub executable: String,
    /// Where progress events go, and in which format (the node's `EVENTS_*`, and for DD-0012
    /// the payload's row).
    pub events: Option<Target>,
    /// The run step: `nix-shell <drv> ...`, its derivation (argument 1) that of the evaluation
    /// ([`DRV`] until then).
    pub argv: Vec<String>,
    pub env: BTreeMap<String, Var>,
    /// The evaluation of the shell, before the run, in an environment of the node's alone.
    pub evaluation: crate::evaluation::Evaluation,
    /// The byte strings the redactor replaces.
    pub secrets: Hidden<Vec<Vec<u8>>>,
    /// Payload keys dropped because the node owns them (the node won).
    pub ignored: Vec<String>,
    /// The declared keys only the node may set, sorted.
    pub node_only: Vec<String>,
    /// One line each, naming keys only.
    pub warnings: Vec<String>,
}

/// Checks `inputs` and merges them: the whole of stages 1 (validation) and 2, with the check
/// that the kernel can pass what the merge made.
pub fn plan(inputs: &Inputs) -> Result<Plan, Vec<Problem>> {
    let plan = input::check(inputs).map(|checked| merge(inputs, checked))?;
    let problems = exec_problems(&plan, inputs.exec_budget);
    if problems.is_empty() { Ok(plan) } else { Err(problems) }
}

pub use crate::input::MAX_ARG_STRLEN;

/// What exec could not pass: one string over [`MAX_ARG_STRLEN`], or more than `budget` bytes
/// in all (each string with its NUL, and a pointer to each).
fn exec_problems(plan: &Plan, budget: usize) -> Vec<Problem> {
    const POINTER: usize = std::mem::size_of::<usize>();
    let mut problems = Vec::new();
    for (index, arg) in plan.argv.iter().enumerate() {
        if arg.len() + 1 > MAX_ARG_STRLEN {
            problems.push(Problem::ArgumentTooLong {
                index,
                bytes: arg.len(),
                limit: MAX_ARG_STRLEN - 1,
            });
        }
    }
    let mut sizes: Vec<(usize, &str)> = Vec::new();
    for (key, var) in &plan.env {
        let bytes = key.len() + 1 + var.value.expose().len();
        if bytes + 1 > MAX_ARG_STRLEN {
            problems.push(Problem::ValueTooLong {
                key: key.clone(),
                from: var.source.to_string(),
                bytes,
                limit: MAX_ARG_STRLEN - 1,
            });
        }
        sizes.push((bytes + 1 + POINTER, key));
    }
    // The NULL that ends each list takes a pointer too.
    let total = plan.argv.iter().map(|arg| arg.len() + 1 + POINTER).sum::<usize>()
        + sizes.iter().map(|(size, _)| size).sum::<usize>()
        + 2 * POINTER;
    if total > budget {
        sizes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let mut largest: Vec<&str> = sizes.iter().take(3).map(|(_, key)| *key).collect();
        largest.sort_unstable();
        problems.push(Problem::ExecTooLarge {
            total,
            budget,
            largest: largest.join(", "),
        });
    }
    problems
}

/// The merge of checked inputs. Lowest layer first; each layer overwrites what the one below set.
pub fn merge(inputs: &Inputs, checked: Checked) -> Plan {
    let Checked {
        controls,
        payload,
        ignored,
        mut warnings,
    } = checked;
    let mut env: BTreeMap<String, Var> = BTreeMap::new();
    for (key, value) in inputs.environ.iter() {
        if admit::environ_admits(&inputs.declared, key) {
            env.insert(key.clone(), Var::plain(value.clone(), Source::Environ));
        }
    }
    // Keys the node owns never got here (see `admit::payload`).
    for (key, value) in payload {
        // The state backend's password a front-end sends is redacted like a node secret.
        let value = if key == "TF_HTTP_PASSWORD" {
            Text::Secret(Secret::new(value))
        } else {
            Text::Plain(value)
        };
        env.insert(
            key,
            Var {
                value,
                source: Source::Payload,
            },
        );
    }
    for (key, node_value) in &inputs.node {
        if input::names::class(key, &inputs.declared).is_consumed() {
            continue;
        }
        let source = if node_value.value.is_secret() {
            Source::Secret
        } else {
            Source::Node
        };
        env.insert(
            key.clone(),
            Var {
                value: node_value.value.clone(),
                source,
            },
        );
    }
    for (key, declared) in &inputs.declared {
        if let (false, Some(default)) = (env.contains_key(key), &declared.default) {
            if !input::names::class(key, &inputs.declared).is_control() {
                env.insert(key.clone(), Var::plain(default.clone(), Source::Default));
            }
        }
    }
    let derived = |value: String| Var::plain(value, Source::Derived);
    env.insert("DEPLOYMENT_NAMESPACE".into(), derived(controls.namespace.clone()));
    if let Some(state) = &controls.state {
        let keys = ["TF_HTTP_ADDRESS", "TF_HTTP_LOCK_ADDRESS", "TF_HTTP_UNLOCK_ADDRESS"];
        for ((key, value), from_payload) in keys
            .into_iter()
            .zip([&state.address, &state.lock, &state.unlock])
            .zip(state.from_payload)
        {
            let source = if from_payload { Source::Payload } else { Source::Derived };
            env.insert(key.into(), Var::plain(value.clone(), source));
        }
    }
    // <nixpkgs> inside the program is the node's pin, the same nix-shell gets with -I; a
    // NIX_PATH the node sets comes after it (Nix takes the first match).
    let nix_path = match inputs.node.get("NIX_PATH").map(|v| v.value.expose()) {
        Some(rest) if !rest.is_empty() => format!("nixpkgs={}:{rest}", controls.nixpkgs),
        _ => format!("nixpkgs={}", controls.nixpkgs),
    };
    env.insert("NIX_PATH".into(), derived(nix_path));
    // A front-end's valid trace context, passed on as it came (jobenv's own span's replaces it
    // when jobenv exports traces: [`Plan::set_trace_context`]).
    if let Some(trace) = &controls.trace {
        env.insert(
            "TRACEPARENT".into(),
            Var::plain(trace.traceparent.clone(), Source::Payload),
        );
        if let Some(state) = &trace.tracestate {
            env.insert("TRACESTATE".into(), Var::plain(state.clone(), Source::Payload));
        }
    }

    // The shell is evaluated apart (its derivation goes in at DRV), so the run step evaluates
    // nothing; `-I` is for the node without NIX_BUILD_SHELL, where nix-shell evaluates nixpkgs'
    // bash.
    let argv = vec![
        inputs.nix_shell.display().to_string(),
        DRV.into(),
        "-I".into(),
        format!("nixpkgs={}", controls.nixpkgs),
        "--run".into(),
        run_string(&controls.executable, controls.events.is_some()),
    ];
    if !env.contains_key("NIX_BUILD_SHELL") {
        warnings.push(
            "NIX_BUILD_SHELL is not set: nix-shell evaluates bashInteractive of the nixpkgs pin for every job, in its environment (set it to a bash, as the NixOS module does)".into(),
        );
    }
    let node_only: Vec<String> = inputs
        .declared
        .iter()
        .filter(|(_, d)| d.node_only)
        .map(|(key, _)| key.clone())
        .collect();
    let evaluation = crate::evaluation::describe(
        &inputs.nix_shell,
        &controls.root,
        &controls.nixpkgs,
        format!("devShells.{}.{}", controls.system, controls.attribute),
        &env,
        &node_only,
        inputs.node.get("NIX_PATH").map(|v| v.value.expose()),
    );

    // Every secret of the node (also those the program does not get: `EVENTS_SECRET`), and the
    // payload's (its `TF_HTTP_PASSWORD`, and a DD-0012 row's `EVENTS_SECRET`, which the program
    // never gets either).
    let payload_secrets = env
        .iter()
        .filter(|(_, var)| var.source == Source::Payload && var.value.is_secret());
    let node_secrets = inputs
        .node
        .iter()
        .filter(|(_, v)| v.value.is_secret())
        .map(|(k, v)| (k, &v.value));
    let secrets = node_secrets
        .chain(payload_secrets.map(|(k, v)| (k, &v.value)))
        .map(|(k, v)| (k.as_str(), v.expose()));
    let row_secret = controls
        .row_secret
        .as_ref()
        .map(|secret| ("EVENTS_SECRET", secret.expose()));
    let secrets = Hidden(redaction_needles(secrets.chain(row_secret), &mut warnings));

    Plan {
        verb: inputs.verb.clone(),
        attribute: controls.attribute,
        namespace: controls.namespace,
        system: controls.system,
        executable: controls.executable,
        events: controls.events,
        argv,
        env,
        evaluation,
        secrets,
        ignored,
        node_only,
        warnings,
    }
}

impl Plan {
    /// The program's W3C trace context: the span it runs in (`TRACEPARENT`), and the trace's
    /// vendor state (`TRACESTATE`, none when `tracestate` is `None`).
    pub fn set_trace_context(&mut self, traceparent: String, tracestate: Option<String>) {
        self.env
            .insert("TRACEPARENT".into(), Var::plain(traceparent, Source::Derived));
        match tracestate {
            Some(state) => {
                self.env.insert("TRACESTATE".into(), Var::plain(state, Source::Derived));
            }
            None => {
                self.env.remove("TRACESTATE");
            }
        }
    }
}

/// Where the run step's argv names the derivation, until the evaluation made it.
pub const DRV: &str = "<the derivation the evaluation makes>";

/// The only text given to the shell. EXECUTABLE was checked to equal <ATTRIBUTE>-<VERB>, both of
/// a safe alphabet, and no job can put anything else in it. With progress events, the shell
/// first writes one byte to fd 3 (the ready pipe, see [`crate::events`]) and closes it for the
/// program.
pub fn run_string(executable: &str, events: bool) -> String {
    if events {
        format!("printf x 2>/dev/null >&3; exec {executable} 3>&-")
    } else {
        format!("exec {executable}")
    }
}

/// Every secret value and each line of at least [`MIN_SECRET_LINE_LEN`] bytes of a multi-line
/// secret, each in every form a program may print it ([`safe_io::secret::forms`]): as it is,
/// inside JSON strings, URLs, markup and shell quoting, and in base64 at any byte offset. Longest
/// first is not needed: the redactor merges overlapping matches.
pub(crate) fn redaction_needles<'a>(
    secrets: impl Iterator<Item = (&'a str, &'a str)>,
    warnings: &mut Vec<String>,
) -> Vec<Vec<u8>> {
    let mut needles: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (key, text) in secrets {
        if text.len() < MIN_SECRET_LEN {
            warnings.push(format!(
                "secret {key} is shorter than {MIN_SECRET_LEN} bytes and will not be redacted"
            ));
            continue;
        }
        let lines = text
            .split('\n')
            .map(|line| line.strip_suffix('\r').unwrap_or(line))
            .filter(|line| line.len() >= MIN_SECRET_LINE_LEN);
        let lines = if text.contains('\n') {
            lines.collect()
        } else {
            Vec::new()
        };
        for part in std::iter::once(text).chain(lines) {
            needles.extend(safe_io::secret::forms(part).into_iter().map(String::into_bytes));
        }
    }
    needles.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::test_support::{inputs, node};
    use serde_json::json;

    #[test]
    fn argv_is_fixed_shape() {
        let plan = plan(&inputs()).unwrap();
        assert_eq!(
            plan.argv,
            [
                "/bin/nix-shell",
                DRV,
                "-I",
                "nixpkgs=/nixpkgs",
                "--run",
                "exec web-apply"
            ]
        );
        assert_eq!(
            plan.evaluation
                .argv(&plan.evaluation.root, &plan.evaluation.nixpkgs, None),
            [
                "/bin/nix-instantiate",
                "/",
                "-I",
                "nixpkgs=/nixpkgs",
                "-A",
                "devShells.x86_64-linux.web",
                "--arg",
                "inNixShell",
                "true"
            ]
        );
    }

    #[test]
    fn a_node_without_nix_build_shell_is_warned_of() {
        let mut i = inputs();
        i.node.remove("NIX_BUILD_SHELL");
        let plan = plan(&i).unwrap();
        assert_eq!(plan.warnings.len(), 1);
        assert!(
            plan.warnings[0].starts_with("NIX_BUILD_SHELL is not set"),
            "{:?}",
            plan.warnings
        );
        // Positive control: from jobenv's own environment, it counts.
        i.environ.0 = vec![("NIX_BUILD_SHELL".into(), "/bin/bash".into())];
        assert!(super::plan(&i).unwrap().warnings.is_empty());
    }

    #[test]
    fn node_beats_payload_beats_environ_and_defaults_fill_the_rest() {
        let mut i = inputs();
        i.node.extend(node(&[("A", "node", false)]));
        i.set_payload("A", json!("payload"));
        i.set_payload("C", json!("payload"));
        i.environ.0 = vec![("A".into(), "environ".into()), ("C".into(), "environ".into())];
        let plan = plan(&i).unwrap();
        assert_eq!(plan.env["A"], Var::plain("node".into(), Source::Node));
        assert_eq!(plan.env["C"], Var::plain("payload".into(), Source::Payload));
        assert_eq!(plan.env["B"], Var::plain("b-default".into(), Source::Default));
        assert!(!plan.env.contains_key("HOSTING_CONFIG"));
        assert_eq!(plan.warnings, ["payload value for A ignored: the node sets it"]);
    }

    #[test]
    fn environ_admits_only_passthrough_and_declared() {
        let mut i = inputs();
        i.environ.0 = [
            ("PATH", "/bin"),
            ("WM_TOKEN", "x"),
            ("PYTHONPATH", "/p"),
            ("C", "c"),
            ("RANDOM_VAR", "r"),
        ]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
        let plan = plan(&i).unwrap();
        assert_eq!(plan.env["PATH"].source, Source::Environ);
        assert_eq!(plan.env["C"].value.expose(), "c");
        for k in ["WM_TOKEN", "PYTHONPATH", "RANDOM_VAR"] {
            assert!(!plan.env.contains_key(k), "{k} leaked");
        }
    }

    #[test]
    fn state_address_is_scoped_to_the_namespace() {
        let mut i = inputs();
        i.node
            .extend(node(&[("STATE_BASE_ADDRESS", "https://state.example/tf/", false)]));
        let plan = plan(&i).unwrap();
        assert_eq!(
            plan.env["TF_HTTP_ADDRESS"].value.expose(),
            "https://state.example/tf/ns1"
        );
        assert_eq!(
            plan.env["TF_HTTP_LOCK_ADDRESS"].value.expose(),
            "https://state.example/tf/ns1/lock"
        );
        assert_eq!(
            plan.env["TF_HTTP_UNLOCK_ADDRESS"].value.expose(),
            "https://state.example/tf/ns1/lock"
        );
        assert_eq!(plan.env["DEPLOYMENT_NAMESPACE"].value.expose(), "ns1");
        assert_eq!(plan.env["NIX_PATH"].value.expose(), "nixpkgs=/nixpkgs");
    }

    #[test]
    fn event_keys_are_the_nodes_and_never_reach_the_program() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("EVENTS_URL", "http://events.example/hook", false),
            ("EVENTS_SECRET", "events-secret-0123456789", true),
        ]));
        i.set_payload("BUILD_ID", json!("build-7"));
        let plan = plan(&i).unwrap();
        assert!(plan.events.is_some());
        for key in ["EVENTS_URL", "EVENTS_SECRET", "BUILD_ID"] {
            assert!(!plan.env.contains_key(key), "{key} reached the program");
        }
        assert!(
            plan.secrets.contains(&b"events-secret-0123456789".to_vec()),
            "the event secret is redacted like any secret"
        );
    }

    #[test]
    fn a_payload_system_the_node_overrides_draws_a_warning() {
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "aarch64-linux", false)]));
        i.set_payload("SYSTEM", json!("x86_64-linux"));
        let plan = plan(&i).unwrap();
        assert_eq!(plan.system, "aarch64-linux");
        assert_eq!(plan.warnings, ["payload value for SYSTEM ignored: the node sets it"]);
    }

    #[test]
    fn the_nixpkgs_pin_comes_first_in_nix_path() {
        let mut i = inputs();
        i.node
            .extend(node(&[("NIX_PATH", "nixpkgs=/elsewhere:other=/o", false)]));
        let plan = plan(&i).unwrap();
        assert_eq!(
            plan.env["NIX_PATH"],
            Var::plain("nixpkgs=/nixpkgs:nixpkgs=/elsewhere:other=/o".into(), Source::Derived)
        );
    }

    #[test]
    fn debug_output_holds_no_secret_value() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("TF_VAR_token", "debug-secret-value", true),
            ("A", "plain-node-value", false),
        ]));
        i.set_payload("TF_HTTP_ADDRESS", json!("https://state.example/tf/ns1"));
        i.set_payload("TF_HTTP_PASSWORD", json!("payload-password-value"));
        i.set_payload("DEPLOYMENT_ROOT", json!("/elsewhere"));
        let plan = plan(&i).unwrap();
        let shown = format!("{plan:?}");
        let inputs_shown = format!("{i:?}");
        for secret in ["debug-secret-value", "payload-password-value"] {
            assert!(
                !shown.contains(secret) && !inputs_shown.contains(secret),
                "{secret}: {shown}\n{inputs_shown}"
            );
        }
        // What it does show, field by field.
        let var = |value: &str, source: &str| format!("Var {{ value: {value}, source: {source} }}");
        for part in [
            r#"Plan { verb: "apply", attribute: "web", namespace: "ns1", system: "x86_64-linux", executable: "web-apply", events: None, "#,
            r#"argv: ["/bin/nix-shell", "<the derivation the evaluation makes>", "-I", "nixpkgs=/nixpkgs", "--run", "exec web-apply"], "#,
            &format!(r#""A": {}"#, var(r#"Plain("plain-node-value")"#, "Node")),
            &format!(r#""TF_VAR_token": {}"#, var("Secret(Secret([REDACTED]))", "Secret")),
            &format!(
                r#""TF_HTTP_PASSWORD": {}"#,
                var("Secret(Secret([REDACTED]))", "Payload")
            ),
            r#"secrets: (not shown), ignored: ["DEPLOYMENT_ROOT"], node_only: [], warnings: ["payload value for DEPLOYMENT_ROOT ignored: the node sets it"] }"#,
        ] {
            assert!(shown.contains(part), "{part}\nnot in\n{shown}");
        }
        assert!(plan.secrets.len() >= 2, "both secrets are needles");
        // The inputs show neither the payload nor jobenv's environment, but the node's plain
        // values.
        assert!(
            inputs_shown.contains("payload: (not shown), environ: (not shown)")
                && inputs_shown.contains("plain-node-value"),
            "{inputs_shown}"
        );
        // Positive control: the secrets are in the plan.
        assert_eq!(plan.env["TF_VAR_token"].value.expose(), "debug-secret-value");
        assert_eq!(plan.env["TF_HTTP_PASSWORD"].value.expose(), "payload-password-value");
    }

    #[test]
    fn secrets_become_needles_and_short_ones_warn() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("TF_VAR_long", "first-line-xx\nshort\nthird-line-yy", true),
            ("TF_VAR_tiny", "abc", true),
            ("A", "not-a-secret", false),
        ]));
        let plan = plan(&i).unwrap();
        let needles: Vec<String> = plan
            .secrets
            .iter()
            .map(|n| String::from_utf8(n.clone()).unwrap())
            .collect();
        assert!(needles.contains(&"first-line-xx\nshort\nthird-line-yy".to_owned()));
        assert!(needles.contains(&"first-line-xx".to_owned()));
        assert!(needles.contains(&"third-line-yy".to_owned()));
        assert!(needles.contains(&r"first-line-xx\nshort\nthird-line-yy".to_owned()));
        assert!(!needles.contains(&"short".to_owned()));
        assert!(!needles.iter().any(|n| n.contains("not-a-secret") || n == "abc"));
        assert_eq!(
            plan.warnings,
            ["secret TF_VAR_tiny is shorter than 4 bytes and will not be redacted"]
        );
    }

    #[test]
    fn the_exec_budget_is_half_of_what_the_kernel_allows_under_the_stack_limit() {
        assert_eq!(crate::input::exec_budget(8 << 20), 1 << 20);
        assert_eq!(crate::input::exec_budget(1 << 20), 128 << 10);
        assert_eq!(
            crate::input::exec_budget(u64::MAX),
            3 << 20,
            "an unlimited stack: the kernel's 6 MiB"
        );
        assert_eq!(crate::input::exec_budget(0), 64 << 10, "the kernel's floor of 128 KiB");
    }

    #[test]
    fn what_exec_could_not_pass_is_a_problem_naming_the_key_never_the_value() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("TF_VAR_big", &"s".repeat(MAX_ARG_STRLEN), true),
            ("A", &"a".repeat(200_000), false),
        ]));
        i.exec_budget = 300_000;
        let problems: Vec<String> = plan(&i).unwrap_err().iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(
            problems[0],
            "A (node) cannot be passed to a program: A=<value> is 200002 bytes, the kernel takes at most 131071"
        );
        assert_eq!(
            problems[1],
            "TF_VAR_big (secret) cannot be passed to a program: TF_VAR_big=<value> is 131083 bytes, the kernel takes at most 131071"
        );
        assert!(
            problems[2].starts_with("the program's arguments and environment take 331"),
            "{}",
            problems[2]
        );
        assert!(
            problems[2].ends_with(
                "more than the 300000 that jobenv leaves them under this stack limit (largest: A, NIX_BUILD_SHELL, TF_VAR_big)"
            ),
            "{}",
            problems[2]
        );
        // Positive control: the same node with values that fit.
        let mut i = inputs();
        i.node.extend(node(&[(
            "TF_VAR_big",
            &"s".repeat(MAX_ARG_STRLEN - "TF_VAR_big=".len() - 1),
            true,
        )]));
        assert!(plan(&i).is_ok());
    }
}
