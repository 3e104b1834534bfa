//! Step 6 of a job (the spine: [`crate::job`]): the merge. From the checked inputs (node layer, payload, jobenv's own
//! environment) to the exact argv and environment of the deployment program. A pure function of
//! its inputs, so the priority rules are unit-tested without a process, and `env` shows exactly
//! what `run` would do.

use std::collections::BTreeMap;

use crate::error::Problem;
use crate::events::Target;
use crate::input::{self, Checked, Inputs, MAX_ARG_STRLEN, admit};
use crate::input::{Source, Var};
use crate::run::redact::redaction_needles;
use safe_io::secret::{Hidden, Secret, Text};

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

/// Merges `inputs`, which [`input::check`] found valid (`checked`, its product: the caller runs
/// the check first), and checks that the kernel can pass what the merge made: argv and
/// environment within [`MAX_ARG_STRLEN`] and the exec budget.
pub fn plan(inputs: &Inputs, checked: Checked) -> Result<Plan, Vec<Problem>> {
    let plan = merge(inputs, checked);
    let problems = exec_problems(&plan, inputs.exec_budget);
    if problems.is_empty() { Ok(plan) } else { Err(problems) }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::exec_budget;

    /// Step 5 as a run takes it: the check of the inputs, then the plan.
    pub(super) fn planned(inputs: &Inputs) -> Result<Plan, Vec<Problem>> {
        crate::input::check(inputs).and_then(|checked| plan(inputs, checked))
    }
    use crate::input::test_support::{inputs, node};
    use serde_json::json;

    #[test]
    fn argv_is_fixed_shape() {
        let plan = planned(&inputs()).unwrap();
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
        let plan = planned(&i).unwrap();
        assert_eq!(plan.warnings.len(), 1);
        assert!(
            plan.warnings[0].starts_with("NIX_BUILD_SHELL is not set"),
            "{:?}",
            plan.warnings
        );
        // Positive control: from jobenv's own environment, it counts.
        i.environ.0 = vec![("NIX_BUILD_SHELL".into(), "/bin/bash".into())];
        assert!(planned(&i).unwrap().warnings.is_empty());
    }

    #[test]
    fn node_beats_payload_beats_environ_and_defaults_fill_the_rest() {
        let mut i = inputs();
        i.node.extend(node(&[("A", "node", false)]));
        i.set_payload("A", json!("payload"));
        i.set_payload("C", json!("payload"));
        i.environ.0 = vec![("A".into(), "environ".into()), ("C".into(), "environ".into())];
        let plan = planned(&i).unwrap();
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
        let plan = planned(&i).unwrap();
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
        let plan = planned(&i).unwrap();
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
        let plan = planned(&i).unwrap();
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
        let plan = planned(&i).unwrap();
        assert_eq!(plan.system, "aarch64-linux");
        assert_eq!(plan.warnings, ["payload value for SYSTEM ignored: the node sets it"]);
    }

    #[test]
    fn the_nixpkgs_pin_comes_first_in_nix_path() {
        let mut i = inputs();
        i.node
            .extend(node(&[("NIX_PATH", "nixpkgs=/elsewhere:other=/o", false)]));
        let plan = planned(&i).unwrap();
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
        let plan = planned(&i).unwrap();
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
        let plan = planned(&i).unwrap();
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
        assert_eq!(exec_budget(8 << 20), 1 << 20);
        assert_eq!(exec_budget(1 << 20), 128 << 10);
        assert_eq!(exec_budget(u64::MAX), 3 << 20, "an unlimited stack: the kernel's 6 MiB");
        assert_eq!(exec_budget(0), 64 << 10, "the kernel's floor of 128 KiB");
    }

    #[test]
    fn what_exec_could_not_pass_is_a_problem_naming_the_key_never_the_value() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("TF_VAR_big", &"s".repeat(MAX_ARG_STRLEN), true),
            ("A", &"a".repeat(200_000), false),
        ]));
        i.exec_budget = 300_000;
        let problems: Vec<String> = planned(&i).unwrap_err().iter().map(ToString::to_string).collect();
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
        assert!(planned(&i).is_ok());
    }

    /// The control keys' rules, as the merged plan shows them (here, not in `input::controls`,
    /// so that the input's own tests need nothing of the merge that comes after it).
    mod controls {
        use crate::events::Wire;
        use crate::events::dd0012::RowKind;
        use crate::input::controls::*;
        use crate::input::test_support::{inputs, node, problems};
        use serde_json::json;

        const SECRET: &str = "events-secret-0123456789";

        #[test]
        fn executable_must_be_attribute_dash_verb() {
            let mut i = inputs();
            i.set_payload("EXECUTABLE", json!("web-apply; rm -rf /"));
            assert_eq!(
                problems(&i),
                [
                    r#"EXECUTABLE "web-apply; rm -rf /" is not allowed: it must be "web-apply" (<ATTRIBUTE>-<VERB>, or <ATTRIBUTE> for apply)"#
                ]
            );
            i.set_payload("EXECUTABLE", json!("web-apply"));
            assert!(crate::input::check(&i).is_ok());
            // A program without verb siblings deploys when run; any other verb needs its own.
            i.set_payload("EXECUTABLE", json!("web"));
            assert_eq!(super::planned(&i).unwrap().argv[5], "exec web");
            i.verb = "destroy".into();
            assert_eq!(
                problems(&i),
                [r#"EXECUTABLE "web" is not allowed: it must be "web-destroy" (<ATTRIBUTE>-<VERB>)"#]
            );
        }

        #[test]
        fn event_keys_are_the_nodes_and_a_payload_cannot_set_them() {
            let mut i = inputs();
            i.set_payload("EVENTS_URL", json!("http://evil/"));
            i.set_payload("EVENTS_SECRET", json!("x"));
            let plan = super::planned(&i).unwrap();
            assert!(plan.events.is_none(), "the payload's event settings took effect");
            assert_eq!(plan.ignored, ["EVENTS_SECRET", "EVENTS_URL"]);
            assert_eq!(
                plan.warnings,
                [
                    "payload value for EVENTS_SECRET ignored: only the node may set it",
                    "payload value for EVENTS_URL ignored: only the node may set it"
                ]
            );
            i.set_payload("BUILD_ID", json!("../x"));
            assert_eq!(
                problems(&i),
                [r#"BUILD_ID "../x" is invalid: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"#]
            );
            let mut i = inputs();
            i.node
                .extend(node(&[("EVENTS_URL", "http://events.example/hook", false)]));
            assert_eq!(
                problems(&i),
                ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]
            );
        }

        const ROW_SECRET: &str = "row-secret-abcdef0123456";

        /// A node whose events are DD-0012's, at `https://web.example/api`, with `pairs` added.
        fn dd0012_inputs(pairs: &[(&str, &str, bool)]) -> crate::input::Inputs {
            let mut i = inputs();
            i.node.extend(node(&[
                ("EVENTS_URL", "https://web.example/api", false),
                ("EVENTS_FORMAT", "dd-0012", false),
            ]));
            i.node.extend(node(pairs));
            i
        }

        #[test]
        fn a_dd0012_row_is_addressed_from_its_parts_with_the_rows_secret() {
            let mut i = dd0012_inputs(&[]);
            i.set_payload("EVENTS_KIND", json!("deployments"));
            i.set_payload("EVENTS_ROW_ID", json!(42));
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            let plan = super::planned(&i).unwrap();
            let target = plan.events.as_ref().unwrap();
            assert_eq!(
                target.url.as_str(),
                "https://web.example/api/deployments/42/notifications"
            );
            assert_eq!(
                (target.secret.expose(), target.wire),
                (ROW_SECRET, Wire::Dd0012(RowKind::Deployments))
            );
            assert!(
                plan.warnings.is_empty() && plan.ignored.is_empty(),
                "{:?}",
                plan.warnings
            );
            // Redacted like any secret, and never given to the program.
            assert!(plan.secrets.contains(&ROW_SECRET.as_bytes().to_vec()));
            assert!(plan.env.values().all(|var| !var.value.expose().contains(ROW_SECRET)));
            for key in [
                "EVENTS_KIND",
                "EVENTS_ROW_ID",
                "EVENTS_SECRET",
                "EVENTS_URL",
                "EVENTS_FORMAT",
            ] {
                assert!(!plan.env.contains_key(key), "{key} reached the program");
            }
            // A row id given as a string is the same row.
            i.set_payload("EVENTS_ROW_ID", json!("42"));
            assert_eq!(
                super::planned(&i).unwrap().events.unwrap().url.as_str(),
                "https://web.example/api/deployments/42/notifications"
            );
        }

        /// With one secret for every row, the payload alone would choose which row it writes to: a
        /// dd-0012 node with a secret of its own is refused, whatever the job, with what to do.
        #[test]
        fn a_node_wide_secret_is_refused_on_a_dd0012_node() {
            let refused = "test:EVENTS_SECRET sets EVENTS_SECRET, but EVENTS_FORMAT is dd-0012, whose rows have secrets of their own: one secret for every row would let any job post to any row. Remove EVENTS_SECRET from the node; the front-end sends each row's secret in the payload's EVENTS_SECRET";
            let mut i = dd0012_inputs(&[("EVENTS_SECRET", SECRET, true)]);
            assert_eq!(problems(&i), [refused], "a job that names no row");
            i.set_payload("EVENTS_KIND", json!("jobs"));
            i.set_payload("EVENTS_ROW_ID", json!(7));
            assert_eq!(problems(&i), [refused], "a job that names a row");
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            assert_eq!(problems(&i), [refused], "a job that brings the row's secret too");
            // Without a secret anywhere, the row cannot be written to.
            let mut i = dd0012_inputs(&[]);
            i.set_payload("EVENTS_KIND", json!("jobs"));
            i.set_payload("EVENTS_ROW_ID", json!(7));
            assert_eq!(
                problems(&i),
                [
                    "EVENTS_SECRET is required but not set (a payload that names a DD-0012 row brings the row's own secret)"
                ]
            );
            // Positive controls: the same node without its secret takes the row's from the payload,
            // and a job that names no row gets no events.
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            let plan = super::planned(&i).unwrap();
            assert_eq!(plan.events.unwrap().secret.expose(), ROW_SECRET);
            let plan = super::planned(&dd0012_inputs(&[])).unwrap();
            assert!(plan.events.is_none());
        }

        #[test]
        fn a_payloads_events_secret_is_taken_only_in_the_dd0012_format() {
            let mut i = inputs();
            i.node.extend(node(&[
                ("EVENTS_URL", "http://events.example/hook", false),
                ("EVENTS_SECRET", SECRET, true),
                ("EVENTS_FORMAT", "jobenv", false),
            ]));
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            i.set_payload("EVENTS_KIND", json!("jobs"));
            i.set_payload("EVENTS_ROW_ID", json!(7));
            let plan = super::planned(&i).unwrap();
            let target = plan.events.unwrap();
            assert_eq!(
                (target.url.as_str(), target.secret.expose(), target.wire),
                ("http://events.example/hook", SECRET, Wire::Jobenv)
            );
            assert_eq!(
                plan.warnings,
                ["payload value for EVENTS_SECRET ignored: the node sets it"]
            );
            // On a node without events it is the node's key alone, as before.
            let mut i = inputs();
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            assert_eq!(
                super::planned(&i).unwrap().warnings,
                ["payload value for EVENTS_SECRET ignored: only the node may set it"]
            );
        }

        #[test]
        fn a_payload_cannot_send_a_request_anywhere_but_its_row_under_the_nodes_base() {
            for (kind, row) in [
                (json!("jobs"), json!("7/../../../evil.example/x")),
                (json!("jobs"), json!("7%2F..%2F..%2Fx")),
                (json!("jobs"), json!("7/")),
                (json!("jobs"), json!("007")),
                (json!("jobs"), json!("+7")),
                (json!("jobs"), json!(-7)),
                (json!("jobs"), json!(0)),
                (json!("jobs"), json!(7.0)),
                (json!("jobs"), json!(1e3)),
                (json!("jobs"), json!("12345678901234567890123456789")),
                (json!("jobs"), json!(12345678901234567890u64)),
                (json!("jobs"), json!("7?x=1")),
                (json!("jobs"), json!("7#x")),
                (json!("jobs"), json!("@evil.example")),
                (json!("../jobs"), json!(7)),
                (json!("jobs/../../x"), json!(7)),
                (json!("JOBS"), json!(7)),
                (json!("https://evil.example/"), json!(7)),
                (json!(["jobs"]), json!(7)),
            ] {
                let mut i = dd0012_inputs(&[]);
                i.set_payload("EVENTS_KIND", kind.clone());
                i.set_payload("EVENTS_ROW_ID", row.clone());
                i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
                i.set_payload("EVENTS_URL", json!("https://evil.example/"));
                let p = problems(&i);
                assert!(
                    !p.is_empty()
                        && p.iter()
                            .all(|l| l.starts_with("EVENTS_KIND ") || l.starts_with("EVENTS_ROW_ID ")),
                    "{kind} {row}: {p:?}"
                );
                let payload = i.payload.0.clone();
                assert!(
                    target_of_rejected(&i.node, &payload, "apply").is_none(),
                    "{kind} {row}: a rejected job's events went somewhere"
                );
            }
            // Positive control: the same payload with a good row reaches the node's host only, even
            // with the payload's own EVENTS_URL (dropped: the node sets it).
            let mut i = dd0012_inputs(&[]);
            i.set_payload("EVENTS_KIND", json!("jobs"));
            i.set_payload("EVENTS_ROW_ID", json!(7));
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            i.set_payload("EVENTS_URL", json!("https://evil.example/"));
            let plan = super::planned(&i).unwrap();
            assert_eq!(
                plan.events.unwrap().url.as_str(),
                "https://web.example/api/jobs/7/notifications"
            );
            assert_eq!(
                plan.warnings,
                ["payload value for EVENTS_URL ignored: the node sets it"]
            );
            let payload = i.payload.0.clone();
            assert_eq!(
                target_of_rejected(&i.node, &payload, "apply").unwrap().url.as_str(),
                "https://web.example/api/jobs/7/notifications"
            );
        }

        #[test]
        fn dd0012_settings_are_checked() {
            let row = |i: &mut crate::input::Inputs| {
                i.set_payload("EVENTS_KIND", json!("deployments"));
                i.set_payload("EVENTS_ROW_ID", json!(3));
                i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            };
            let mut i = dd0012_inputs(&[]);
            row(&mut i);
            i.verb = "plan".into();
            assert_eq!(
                problems(&i),
                ["EVENTS_KIND deployments is for apply and destroy: a plan job reports on a jobs row"]
            );
            i.verb = "destroy".into();
            assert!(super::planned(&i).is_ok());
            let mut i = dd0012_inputs(&[]);
            i.set_payload("EVENTS_ROW_ID", json!(3));
            assert_eq!(
                problems(&i),
                ["EVENTS_ROW_ID is set but EVENTS_KIND is not: progress events need both"]
            );
            let mut i = dd0012_inputs(&[]);
            row(&mut i);
            i.set_payload("EVENTS_SECRET", json!("short"));
            assert_eq!(
                problems(&i),
                [
                    "EVENTS_SECRET (value not shown) is invalid: must be 16 to 1024 printable ASCII characters without spaces"
                ]
            );
            let mut i = dd0012_inputs(&[]);
            i.node
                .extend(node(&[("EVENTS_URL", "https://web.example/api?token=x", false)]));
            assert_eq!(
                problems(&i),
                [
                    "EVENTS_URL (value not shown) is invalid: must be an http:// or https:// URL without a query or a fragment: the base of <kind>/<row>/notifications"
                ]
            );
            let mut i = inputs();
            i.node.extend(node(&[("EVENTS_FORMAT", "dd-0012", false)]));
            assert_eq!(
                problems(&i),
                ["EVENTS_FORMAT is set but EVENTS_URL is not: progress events need both"]
            );
            let mut i = dd0012_inputs(&[("EVENTS_FORMAT", "webhook", false)]);
            assert_eq!(
                problems(&i),
                [r#"EVENTS_FORMAT "webhook" is invalid: must be jobenv or dd-0012"#]
            );
            i.node.extend(node(&[("EVENTS_FORMAT", "DD-0012", true)]));
            assert_eq!(
                problems(&i),
                ["EVENTS_FORMAT (value not shown: it comes from a secret) is invalid: must be jobenv or dd-0012"]
            );
            // The row keys are payload keys, checked on every node.
            let mut i = inputs();
            i.node.extend(node(&[("EVENTS_KIND", "jobs", false)]));
            i.set_payload("EVENTS_KIND", json!("rows"));
            i.set_payload("EVENTS_ROW_ID", json!(1));
            assert_eq!(
                problems(&i),
                [
                    "test:EVENTS_KIND sets EVENTS_KIND, which only a job payload may set",
                    r#"EVENTS_KIND "rows" is invalid: must be jobs or deployments"#
                ]
            );
        }

        #[test]
        fn a_bad_trace_context_is_dropped_with_a_warning_never_refused() {
            const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let planned = |pairs: &[(&str, &str)]| {
                let mut i = inputs();
                for (key, value) in pairs {
                    i.set_payload(key, json!(value));
                }
                super::planned(&i).expect("never refused")
            };
            let plan = planned(&[("TRACEPARENT", GOOD), ("TRACESTATE", "fe=1")]);
            assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
            assert_eq!(plan.env["TRACEPARENT"].value.expose(), GOOD);
            assert_eq!(plan.env["TRACESTATE"].value.expose(), "fe=1");
            assert_eq!(plan.env["TRACEPARENT"].source, crate::input::Source::Payload);
            let plan = planned(&[("TRACEPARENT", "00-ab-cd-01"), ("TRACESTATE", "fe=1")]);
            assert_eq!(
                plan.warnings,
                [format!(
                    "payload TRACEPARENT \"00-ab-cd-01\" dropped (and TRACESTATE with it): {}",
                    crate::telemetry::context::TRACEPARENT_RULE
                )]
            );
            assert!(!plan.env.contains_key("TRACEPARENT") && !plan.env.contains_key("TRACESTATE"));
            let plan = planned(&[("TRACEPARENT", GOOD), ("TRACESTATE", "BAD=1")]);
            assert_eq!(
                plan.warnings,
                [format!(
                    "payload TRACESTATE \"BAD=1\" dropped: {}",
                    crate::telemetry::context::TRACESTATE_RULE
                )]
            );
            assert!(plan.env.contains_key("TRACEPARENT") && !plan.env.contains_key("TRACESTATE"));
            let plan = planned(&[("TRACESTATE", "fe=1")]);
            assert_eq!(
                plan.warnings,
                ["payload TRACESTATE dropped: it goes with a TRACEPARENT, and there is none"]
            );
            // A NUL, which no environment can hold, is one more way to be bad: dropped, never
            // the job's refusal (as it is for any other key: the positive control).
            let with_nul = format!("{GOOD}\0");
            let plan = planned(&[("TRACEPARENT", with_nul.as_str()), ("TRACESTATE", "fe=1")]);
            assert_eq!(
                plan.warnings,
                [format!(
                    "payload TRACEPARENT \"{GOOD}\\0\" dropped (and TRACESTATE with it): {}",
                    crate::telemetry::context::TRACEPARENT_RULE
                )]
            );
            assert!(!plan.env.contains_key("TRACEPARENT"));
            let plan = planned(&[("TRACEPARENT", GOOD), ("TRACESTATE", "fe=1\0")]);
            assert_eq!(
                plan.warnings,
                [format!(
                    "payload TRACESTATE \"fe=1\\0\" dropped: {}",
                    crate::telemetry::context::TRACESTATE_RULE
                )]
            );
            let mut i = inputs();
            i.set_payload("ATTRIBUTE", json!("web\0"));
            assert!(super::planned(&i).is_err(), "a NUL in another key is a problem");
            // A node cannot set them: they are a job's.
            let mut i = inputs();
            i.node.extend(node(&[("TRACEPARENT", GOOD, false)]));
            assert_eq!(
                problems(&i),
                ["test:TRACEPARENT sets TRACEPARENT, which only a job payload may set"]
            );
        }
    }

    /// Which layer wins, as the merged plan's warnings say it (here, not in `input::admit`, for
    /// the same reason).
    mod admit {
        use crate::input::test_support::{inputs, node};
        use serde_json::json;

        #[test]
        fn a_payload_equal_to_a_node_secret_still_draws_its_warning() {
            let mut i = inputs();
            i.node.extend(node(&[
                ("EVENTS_URL", "http://events.example/e", false),
                ("EVENTS_SECRET", "events-secret-0123456789", true),
            ]));
            i.node.extend(node(&[("A", "plain", false)]));
            i.set_payload("EVENTS_SECRET", json!("events-secret-0123456789"));
            i.set_payload("EVENTS_URL", json!("http://events.example/e"));
            i.set_payload("A", json!("plain"));
            let plan = super::planned(&i).unwrap();
            assert_eq!(
                plan.warnings,
                ["payload value for EVENTS_SECRET ignored: the node sets it"]
            );
            assert_eq!(plan.ignored, ["A", "EVENTS_SECRET", "EVENTS_URL"]);
        }

        #[test]
        fn the_warning_says_why_the_node_won() {
            let mut i = inputs();
            // The node's pin under its other name, and one of the two state credentials.
            i.node.remove("NIXPKGS");
            i.node.extend(node(&[
                ("DEPLOYMENT_NIXPKGS", "/nixpkgs", false),
                ("TF_HTTP_USERNAME", "node-user", false),
                ("STATE_BASE_ADDRESS", "https://state.example/node", false),
            ]));
            i.set_payload("NIXPKGS", json!("/elsewhere"));
            i.set_payload("TF_HTTP_PASSWORD", json!("payload-password"));
            i.set_payload("STATE_BASE_ADDRESS", json!("https://state.example/tf"));
            let plan = super::planned(&i).unwrap();
            assert_eq!(
                plan.warnings,
                [
                    "payload value for NIXPKGS ignored: the node sets it",
                    "payload value for STATE_BASE_ADDRESS ignored: the node sets it",
                    "payload value for TF_HTTP_PASSWORD ignored: the node sets the state backend's credentials",
                ]
            );
            assert!(
                !plan.env.contains_key("TF_HTTP_PASSWORD"),
                "the payload's password passed beside the node's user"
            );
        }
    }
}
