//! The manual (`docs/` and `README.md`), held to what it describes, so that no example in it can
//! go stale. Every page is read as Markdown (fenced blocks, headings, links, tables) and:
//!
//! - every ```` ```console ```` block runs: each `$ ` line is a command, run by bash in a shell on
//!   the example node (`. examples/node.sh`, in a directory that holds the checkout's `examples/`)
//!   with the workspace's real binaries first on `PATH` and the real nix-shell; what it prints,
//!   stdout and stderr together, must be what the block shows (`[..]` stands for any text within
//!   a line, `...` on a line of its own for any lines), and it must exit 0 (a command that does
//!   not says so: `; echo "exit $?"`). The commands of one block share one node, so `run` and
//!   then `status` show the same journal (`SNAPSHOTS=overwrite` writes what they printed into
//!   the blocks that differ, for `[..]` to be put back by hand where it varies). What `status`,
//!   `recover` and `drain` print, and a `result.json` shown with `cat`, must also fit their
//!   published schema. A
//!   ```` ```console bootstrap ```` block runs the same way with `bootstrap.json`, the
//!   configuration of a bootstrap node of the test kit (the Windmill fake, a throwaway
//!   PostgreSQL, a real OpenBao), in the working directory;
//! - every ```` ```sh ```` block (commands to copy, not run here) is valid bash (`bash -n`);
//! - every ```` ```nix ```` block is a node's configuration: evaluated through the module
//!   harness (`tests/nix/module-harness.nix`) with the module and the stand-in deployment
//!   repository as its inputs, it has no type error and no unknown option, and passes every
//!   assertion of the module;
//! - every ```` ```json ```` block names what it is after `json`: a schema of `schemas/`
//!   (`payload`, `result`, `event-jobenv`, `event-dd-0012`, `journal-entry`), which each value in
//!   it fits, or a node file, which must be JSON;
//! - every relative link (and its `#anchor`, by GitHub's rule for heading ids) resolves, and
//!   every repository path a page names in backticks exists;
//! - the module's option reference (`docs/operators/module-options.md`) is every option the
//!   module declares, with its type, default and description as declared;
//!   `SNAPSHOTS=overwrite` rewrites it;
//! - the troubleshooting page documents every variant of jobenv's and the bootstrap's error
//!   enums (and of safe-io's), each with a message that fits the variant's own template, every
//!   `jobenv: error:` line jobenv writes outside them, and every exit code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fediversity_testkit::nix_fixture::TEST_PATH;
use fediversity_testkit::schemas::Contract;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

// ---- reading the pages ----------------------------------------------------------------------

/// One page of the manual: its path from the repository's root, and its text.
struct Page {
    path: PathBuf,
    text: String,
}

/// README.md and every page under docs/.
fn pages() -> Vec<Page> {
    let mut paths = vec![PathBuf::from("README.md")];
    for entry in walkdir::WalkDir::new(repo().join("docs")).sort_by_file_name() {
        let entry = entry.expect("docs/ is readable");
        if entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "md") {
            paths.push(entry.path().strip_prefix(repo()).unwrap().to_path_buf());
        }
    }
    paths
        .into_iter()
        .map(|path| Page {
            text: std::fs::read_to_string(repo().join(&path)).unwrap(),
            path,
        })
        .collect()
}

fn page(path: &str) -> Page {
    Page {
        path: path.into(),
        text: std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}")),
    }
}

/// A fenced block: where it starts, its info string, the heading it is under, its text.
struct Block {
    place: String,
    /// The line number of its opening fence.
    line: usize,
    info: String,
    heading: String,
    text: String,
}

impl Block {
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    fn tag(&self) -> Option<&str> {
        self.info.split_whitespace().nth(1)
    }
}

impl Page {
    fn blocks(&self) -> Vec<Block> {
        let (mut blocks, mut heading, mut open) = (Vec::new(), String::new(), None::<Block>);
        // A block in a list item is indented: its lines, without the fence's indentation.
        let mut indent = 0;
        for (number, line) in self.text.lines().enumerate() {
            match &mut open {
                Some(_) if line.trim_start() == "```" => blocks.push(open.take().unwrap()),
                Some(block) => {
                    block.text.push_str(
                        line.get(indent..)
                            .filter(|_| line[..indent.min(line.len())].trim().is_empty())
                            .unwrap_or(line.trim_start()),
                    );
                    block.text.push('\n');
                }
                None if line.trim_start().starts_with("```") => {
                    indent = line.len() - line.trim_start().len();
                    let info = line.trim_start().trim_start_matches('`').trim().to_owned();
                    let place = format!("{}:{}", self.path.display(), number + 1);
                    open = Some(Block {
                        place,
                        line: number + 1,
                        info,
                        heading: heading.clone(),
                        text: String::new(),
                    });
                }
                None if line.starts_with('#') => heading = line.trim_start_matches('#').trim().to_owned(),
                None => {}
            }
        }
        assert!(open.is_none(), "{}: a fenced block is not closed", self.path.display());
        blocks
    }

    /// The lines outside fenced blocks, with their numbers.
    fn prose(&self) -> Vec<(usize, &str)> {
        let mut fenced = false;
        let mut lines = Vec::new();
        for (number, line) in self.text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if !fenced {
                lines.push((number + 1, line));
            }
        }
        lines
    }

    /// The ids GitHub gives the headings (and any `<a id="...">` of the page).
    fn anchors(&self) -> BTreeSet<String> {
        let mut seen = BTreeMap::<String, usize>::new();
        let mut anchors = BTreeSet::new();
        for (_, line) in self.prose() {
            if line.starts_with('#') {
                let slug = slug(line.trim_start_matches('#').trim());
                let n = seen.entry(slug.clone()).or_insert(0);
                anchors.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
                *n += 1;
            }
            for part in line.split("<a id=\"").skip(1) {
                anchors.insert(part.split('"').next().unwrap().to_owned());
            }
        }
        anchors
    }

    /// The code spans of the prose, with their line numbers.
    fn code_spans(&self) -> Vec<(usize, String)> {
        let mut spans = Vec::new();
        for (number, line) in self.prose() {
            let mut parts = line.split('`');
            parts.next();
            while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
                spans.push((number, span.to_owned()));
            }
        }
        spans
    }

    /// The targets of the page's links (`[text](target)`), outside code.
    fn links(&self) -> Vec<(usize, String)> {
        let mut links = Vec::new();
        for (number, line) in self.prose() {
            // Without its code spans: `[x](y)` there is text.
            let text: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            for part in text.split("](").skip(1) {
                if let Some(end) = part.find(')') {
                    links.push((number, part[..end].to_owned()));
                }
            }
        }
        links
    }

    /// The rows of the first table after the heading `heading`, each as its cells.
    fn table_after(&self, heading: &str) -> Vec<Vec<String>> {
        let lines: Vec<&str> = self.text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with('#') && l.trim_start_matches('#').trim() == heading)
            .unwrap_or_else(|| panic!("{}: no heading {heading:?}", self.path.display()));
        let rows: Vec<Vec<String>> = lines[start + 1..]
            .iter()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .map(|l| split_row(l))
            .collect();
        assert!(rows.len() > 2, "{}: no table under {heading:?}", self.path.display());
        // Without the header and its rule.
        rows[2..].to_vec()
    }
}

/// The cells of a table row; a `|` inside a code span is part of the cell.
fn split_row(line: &str) -> Vec<String> {
    let (mut cells, mut cell, mut code) = (Vec::new(), String::new(), false);
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' => {
                code = !code;
                cell.push(c);
            }
            // `\|` is a `|` of the cell, in code too (as GitHub reads a table).
            '\\' if chars.peek() == Some(&'|') => cell.push(chars.next().unwrap()),
            '|' if !code => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    cells
}

/// GitHub's id of a heading: lower case, spaces as `-`, no punctuation but `-` and `_`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The code spans of a cell (`a` and `b` of "`a` or `b`").
fn spans_of(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

// ---- links ----------------------------------------------------------------------------------

#[test]
fn every_relative_link_and_anchor_resolves_and_every_named_path_exists() {
    let pages = pages();
    let anchors: BTreeMap<PathBuf, BTreeSet<String>> = pages.iter().map(|p| (p.path.clone(), p.anchors())).collect();
    let (mut broken, mut checked) = (Vec::new(), 0);
    for page in &pages {
        let dir = page.path.parent().unwrap();
        for (line, target) in page.links() {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target
                .split_once('#')
                .map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
            let file = if path.is_empty() {
                page.path.clone()
            } else {
                normalize(&dir.join(path))
            };
            let place = format!("{}:{line}: {target}", page.path.display());
            if !repo().join(&file).exists() {
                broken.push(format!("{place}: {} does not exist", file.display()));
            } else if let Some(anchor) = anchor {
                match anchors.get(&file) {
                    Some(ids) if ids.contains(anchor) => {}
                    Some(_) => broken.push(format!(
                        "{place}: {} has no heading with the id {anchor:?}",
                        file.display()
                    )),
                    None => broken.push(format!(
                        "{place}: an anchor into {}, which is not a page",
                        file.display()
                    )),
                }
            }
        }
        // Every repository path a page names, as `jobenv/src/job/mod.rs` or `tests/tests/suite/`.
        let tops = [
            "jobenv/",
            "bootstrap/",
            "safe-io/",
            "tests/",
            "scripts/",
            "nixos-module/",
            "schemas/",
            "examples/",
            "bench/",
            "nix/",
            "docs/",
            ".ci/",
        ];
        for (line, span) in page.code_spans() {
            let plain = !span.contains(|c: char| c.is_whitespace() || "<>*…{}$".contains(c));
            if plain && tops.iter().any(|top| span.starts_with(top)) {
                checked += 1;
                let path = span.split(':').next().unwrap();
                if !repo().join(path).exists() {
                    broken.push(format!(
                        "{}:{line}: `{span}` names {path}, which does not exist",
                        page.path.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    assert!(checked > 100, "only {checked} links and paths: the pages were not read");
}

/// `a/b/../c` as `a/c`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn a_link_to_a_missing_anchor_is_found() {
    // The control of the test above: its rules find what is broken.
    let page = Page {
        path: "docs/x.md".into(),
        text: "# A `b` c\n\n## A b c\n\nsee [here](#a-b-c-1) and [x](y.md)\n```sh\n[not](a link)\n```\n".into(),
    };
    assert_eq!(
        page.anchors(),
        BTreeSet::from(["a-b-c".to_owned(), "a-b-c-1".to_owned()])
    );
    assert_eq!(page.links(), vec![(5, "#a-b-c-1".to_owned()), (5, "y.md".to_owned())]);
    assert_eq!(
        slug("What a front-end sends (the payload)"),
        "what-a-front-end-sends-the-payload"
    );
    assert_eq!(split_row("| `a|b` | c \\| d |"), vec!["`a|b`", "c | d"]);
}

// ---- fenced blocks --------------------------------------------------------------------------

#[test]
fn every_fenced_block_says_what_it_is() {
    let mut wrong = Vec::new();
    for page in pages() {
        for block in page.blocks() {
            if !["console", "sh", "nix", "json", "text"].contains(&block.lang()) {
                wrong.push(format!(
                    "{}: ```{}: say console (run by the tests), sh, nix, json or text",
                    block.place, block.info
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_sh_block_is_valid_bash() {
    let mut checked = 0;
    for page in pages() {
        for block in page.blocks().into_iter().filter(|b| b.lang() == "sh") {
            let out = Command::new("bash")
                .args(["-n", "-c", &block.text])
                .output()
                .expect("bash");
            assert!(
                out.status.success(),
                "{}: not valid bash: {}\n{}",
                block.place,
                String::from_utf8_lossy(&out.stderr),
                block.text
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "{checked}");
}

#[test]
fn every_json_block_fits_its_schema() {
    let mut checked = Vec::new();
    let mut otlp = Vec::new();
    for page in pages() {
        for block in page.blocks().into_iter().filter(|b| b.lang() == "json") {
            let values = serde_json::Deserializer::from_str(&block.text)
                .into_iter::<Value>()
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}\n{}", block.place, block.text));
            if let Some(signal @ ("otlp-traces" | "otlp-logs")) = block.tag() {
                for value in &values {
                    check_otlp(signal, value, &block.place);
                    otlp.push(signal.to_owned());
                }
                continue;
            }
            let contract = match block.tag() {
                Some("payload") => Some(Contract::Payload),
                Some("result") => Some(Contract::Result),
                Some("event-jobenv") => Some(Contract::EventJobenv),
                Some("event-dd-0012") => Some(Contract::EventDd0012),
                Some("journal-entry") => Some(Contract::JournalEntry),
                // Files of a node, which no schema of schemas/ describes.
                Some("deploy-env" | "deploy-keys" | "bootstrap-config") => None,
                other => panic!(
                    "{}: ```json {other:?}: name its schema (payload, result, event-jobenv, event-dd-0012, journal-entry) or the node file",
                    block.place
                ),
            };
            for value in &values {
                if let Some(contract) = contract {
                    let errors = contract.errors(value);
                    assert!(
                        errors.is_empty(),
                        "{}: the example does not fit {}:\n{}",
                        block.place,
                        contract.file(),
                        errors.join("\n")
                    );
                    checked.push(contract);
                }
            }
        }
    }
    assert!(
        otlp.iter().any(|s| s == "otlp-traces") && otlp.iter().any(|s| s == "otlp-logs"),
        "no example of what the collector receives: {otlp:?}"
    );
    // Not vacuous: every schema has an example.
    for contract in [
        Contract::Payload,
        Contract::Result,
        Contract::EventJobenv,
        Contract::EventDd0012,
        Contract::JournalEntry,
    ] {
        assert!(checked.contains(&contract), "no example of {}", contract.file());
    }
}

/// An example of what a collector receives from jobenv, in OTLP's JSON form: it is an export
/// request of that signal exactly as the protocol's own messages write it (nothing unknown,
/// nothing misspelt), and every attribute it names is one jobenv sets (or the SDK's resource).
fn check_otlp(signal: &str, value: &Value, place: &str) {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let written = match signal {
        "otlp-traces" => serde_json::from_value::<ExportTraceServiceRequest>(value.clone())
            .map(|request| serde_json::to_value(request).unwrap()),
        _ => serde_json::from_value::<ExportLogsServiceRequest>(value.clone())
            .map(|request| serde_json::to_value(request).unwrap()),
    }
    .unwrap_or_else(|e| panic!("{place}: not an OTLP {signal} request: {e}"));
    // The messages write every field; an example leaves out those at their default.
    assert_eq!(
        without_defaults(&written),
        without_defaults(value),
        "{place}: not as OTLP's JSON form writes it"
    );
    let telemetry = ["trace.rs", "export.rs", "mod.rs"]
        .map(|file| std::fs::read_to_string(repo().join("jobenv/src/telemetry").join(file)).unwrap())
        .concat();
    let mut keys = Vec::new();
    collect_keys(value, &mut keys);
    assert!(keys.len() > 5, "{place}: {keys:?}");
    for key in keys {
        let sdk = key.starts_with("telemetry.sdk.") || ["service.name", "service.namespace"].contains(&key.as_str());
        assert!(
            sdk || telemetry.contains(&format!("\"{key}\"")),
            "{place}: jobenv never sets the attribute {key}"
        );
    }
}

/// `value` without the fields at their default (0, "", [ ], { }).
fn without_defaults(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), without_defaults(v)))
                .filter(|(_, v)| !matches!(v, Value::Number(n) if n.as_u64() == Some(0)))
                .filter(|(_, v)| !matches!(v, Value::String(s) if s.is_empty()))
                .filter(|(_, v)| !matches!(v, Value::Array(a) if a.is_empty()))
                .filter(|(_, v)| !matches!(v, Value::Object(o) if o.is_empty()))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_defaults).collect()),
        other => other.clone(),
    }
}

/// Every `{"key": …}` of an OTLP attribute list in `value`.
fn collect_keys(value: &Value, keys: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let (Some(Value::String(key)), Some(_)) = (map.get("key"), map.get("value")) {
                keys.push(key.clone());
            }
            map.values().for_each(|v| collect_keys(v, keys));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_keys(v, keys)),
        _ => {}
    }
}

#[test]
fn every_nix_block_is_a_configuration_the_module_accepts() {
    let mut checked = 0;
    for page in pages() {
        for block in page.blocks().into_iter().filter(|b| b.lang() == "nix") {
            let result = evaluate_node(&block.text, true);
            assert!(result.is_ok(), "{}: {}", block.place, result.unwrap_err());
            let result = result.unwrap();
            for field in ["assertions", "typeErrors", "unknownSettings"] {
                assert_eq!(
                    result[field],
                    serde_json::json!([]),
                    "{}: {field} of the example",
                    block.place
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 1, "no Nix example");
}

/// A node's configuration module (`text`) evaluated through the module harness: its inputs are
/// this repository's module (`inputs.fediversity-windmill`) and the stand-in deployment
/// repository (`inputs.deployments`); with `authelia`, the node has the Authelia instance `main`.
pub(crate) fn evaluate_node(text: &str, authelia: bool) -> Result<Value, String> {
    use crate::nix_module::{NIXPKGS_NIX, NIXPKGS_WINDMILL, fixture_repository, nix_instantiate, nix_string};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("configuration.nix");
    std::fs::write(&file, text).unwrap();
    let authelia = if authelia {
        "nodeConfig.services.authelia.instances.main.enable = true;"
    } else {
        ""
    };
    let expr = format!(
        r#"let
             h = import {harness} {{
               userModule = import {file};
               moduleArgs.inputs = {{
                 fediversity-windmill.nixosModules.default = {module};
                 deployments = ((import {fixture}) {{ }}) // {{ outPath = "/nix/store/55555555555555555555555555555555-source"; }};
               }};
               alsoDefined = [ {NIXPKGS_WINDMILL} {NIXPKGS_NIX} ];
               {authelia}
             }};
           in {{
             inherit (h) typeErrors unknownSettings userImports;
             assertions = map (a: a.message) h.config.assertions;
             warnings = h.config.warnings;
             env = builtins.fromJSON h.config.environment.etc."fediversity-windmill/deploy-env.json".source.text;
             attributes = builtins.fromJSON h.config.environment.etc."fediversity-windmill/deployment-attributes.json".source.text;
             bootstrap = builtins.fromJSON h.config.environment.etc."fediversity-windmill/bootstrap.json".source.text;
             rules = h.config.services.authelia.instances.main.settings.access_control.rules or [ ];
             backup = h.config.systemd.services.fediversity-windmill-backup.serviceConfig.ExecStart or null;
             acme = h.config.security.acme.acceptTerms or false;
           }}"#,
        harness = nix_string(repo().join("tests/nix/module-harness.nix")),
        file = nix_string(file.clone()),
        module = nix_string(repo().join("nixos-module")),
        fixture = fixture_repository(),
    );
    let out = nix_instantiate(&expr);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

// ---- console examples -----------------------------------------------------------------------

/// One command of a console block and what it must print.
struct Step {
    command: String,
    expected: String,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in block.text.lines() {
        if continued {
            let step = steps.last_mut().unwrap();
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_owned(),
                expected: String::new(),
            });
            continued = line.ends_with('\\');
        } else {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("{}: output before the first `$ ` command", block.place));
            step.expected.push_str(line);
            step.expected.push('\n');
        }
    }
    assert!(!steps.is_empty(), "{}: a console block without a command", block.place);
    steps
}

/// Where the commands of one block run: a working directory holding `examples/` (the
/// checkout's), a `bin/` with the workspace's binaries, and the example node.
struct Shell {
    dir: tempfile::TempDir,
    /// The bootstrap node of a `console bootstrap` block (alive while its commands run).
    node: Option<fediversity_testkit::node::Node>,
}

impl Shell {
    fn new(kind: Option<&str>) -> Shell {
        let dir = tempfile::Builder::new().prefix("docs-example-").tempdir().unwrap();
        std::os::unix::fs::symlink(repo().join("examples"), dir.path().join("examples")).unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        for name in ["fediversity-jobenv", "fediversity-windmill-bootstrap"] {
            std::os::unix::fs::symlink(
                fediversity_testkit::binaries::workspace_binary(name),
                dir.path().join("bin").join(name),
            )
            .unwrap();
        }
        let node = match kind {
            None => None,
            Some("bootstrap") => {
                // Its OpenBao token may read the secret back, as `--check` needs.
                let bao = fediversity_testkit::openbao::shared();
                let path = format!(
                    "secret/{}/apiToken",
                    fediversity_testkit::openbao::OpenBao::unique("docs")
                );
                let node = fediversity_testkit::node::Node::with_openbao(&bao.addr, &path, bao.root_token());
                std::fs::write(
                    dir.path().join("bootstrap.json"),
                    serde_json::to_string_pretty(&node.config).unwrap(),
                )
                .unwrap();
                Some(node)
            }
            Some(other) => panic!("```console {other}: unknown kind of example (none, or bootstrap)"),
        };
        Shell { dir, node }
    }

    /// Runs `command` as a reader's shell would after `. examples/node.sh`; its stdout and stderr
    /// as one text, and its exit code. In a `console bootstrap` block, `WINDMILL` is the node's
    /// Windmill, `BAO_ADDR`, `BAO_TOKEN` and `TOKEN_PATH` where the bootstrap stores the
    /// front-end's token, and `bao` (the test venv's) is on the `PATH`.
    fn run(&self, command: &str) -> (String, i32) {
        let script = format!("EXAMPLE_NODE=\"$PWD/.node\" . examples/node.sh\nexec 2>&1\n{command}\n");
        let mut path = format!("{}:{TEST_PATH}", self.dir.path().join("bin").display());
        let mut bash = Command::new("bash");
        bash.env_clear();
        if let Some(node) = &self.node {
            let venv = fediversity_testkit::venv::bao();
            path = format!("{path}:{}", venv.parent().unwrap().display());
            bash.env("WINDMILL", &node.windmill.url)
                .env("BAO_ADDR", &node.bao_addr)
                .env("BAO_TOKEN", &node.bao_token)
                .env("TOKEN_PATH", &node.bao_path);
        }
        let out = bash
            .args(["-c", &script])
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("HOME", self.dir.path())
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("bash");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code().unwrap_or(-1),
        )
    }
}

#[test]
fn every_console_example_prints_what_it_shows() {
    let overwrite = std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite");
    let mut failures = Vec::new();
    let mut ran = 0;
    for page in pages() {
        // With SNAPSHOTS=overwrite, the blocks whose output differs, rewritten with what ran.
        let mut rewritten = Vec::new();
        for block in page.blocks().into_iter().filter(|b| b.lang() == "console") {
            let shell = Shell::new(block.tag());
            let mut steps = steps(&block);
            let mut differs = false;
            for step in &mut steps {
                let (output, code) = shell.run(&step.command);
                ran += 1;
                if let Some(node) = &shell.node {
                    // Whatever a bootstrap example prints holds none of the node's secrets.
                    node.assert_no_secrets(&output);
                }
                let place = format!("{} ({}): $ {}", block.place, block.heading, step.command);
                if code != 0 {
                    failures.push(format!(
                        "{place}\nexited {code} (say so with `; echo \"exit $?\"`), printing:\n{output}"
                    ));
                    continue;
                }
                let compared = snapbox::Assert::new().normalize_paths(false).try_eq(
                    Some(&"the command"),
                    snapbox::Data::text(output.clone()),
                    snapbox::Data::text(step.expected.clone()),
                );
                if let Err(error) = compared {
                    failures.push(format!("{place}\n{error}"));
                    step.expected = output;
                    differs = true;
                    continue;
                }
                if let Some(problems) = schema_problems(&step.command, &output) {
                    failures.push(format!("{place}\nprinted what does not fit its schema:\n{problems}"));
                }
            }
            if differs {
                let text: String = steps
                    .iter()
                    .map(|s| format!("$ {}\n{}", s.command, s.expected))
                    .collect();
                rewritten.push((block.line, block.text.lines().count(), text));
            }
        }
        if overwrite && !rewritten.is_empty() {
            let mut lines: Vec<String> = page.text.lines().map(str::to_owned).collect();
            for (line, count, text) in rewritten.into_iter().rev() {
                let indent: String = lines[line - 1].chars().take_while(|c| *c == ' ').collect();
                lines.splice(line..line + count, text.lines().map(|l| format!("{indent}{l}")));
            }
            std::fs::write(repo().join(&page.path), lines.join("\n") + "\n").unwrap();
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} commands of the manual do not print what it shows:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran >= 10, "only {ran} commands ran");
}

/// What `status`, `recover` and `drain` print (journal entries) and a `result.json` shown with
/// `cat` must fit their schema; `None` when it does (or the command prints neither).
fn schema_problems(command: &str, output: &str) -> Option<String> {
    let words: Vec<&str> = command.split_whitespace().skip_while(|w| w.contains('=')).collect();
    let contract = match words.as_slice() {
        ["fediversity-jobenv", "status" | "recover" | "drain", ..] => Contract::JournalEntry,
        ["cat", file] if file.ends_with("result.json") => Contract::Result,
        _ => return None,
    };
    // Without jobenv's own lines (stderr, shown with the output).
    let printed: String = output
        .lines()
        .filter(|l| !l.starts_with("jobenv: "))
        .map(|l| format!("{l}\n"))
        .collect();
    let value: Value = match serde_json::from_str(&printed) {
        Ok(value) => value,
        Err(e) => return Some(format!("not JSON: {e}")),
    };
    let values = value.as_array().cloned().unwrap_or_else(|| vec![value]);
    let errors: Vec<String> = values.iter().flat_map(|v| contract.errors(v)).collect();
    (!errors.is_empty()).then(|| errors.join("\n"))
}

#[test]
fn a_console_block_is_commands_and_their_output() {
    let block = Block {
        place: "x.md:1".into(),
        line: 1,
        info: "console".into(),
        heading: "h".into(),
        text: "$ a \\\n  b\nout 1\n[..]\n$ c\n".into(),
    };
    let steps = steps(&block);
    assert_eq!(steps.len(), 2);
    assert_eq!(
        (steps[0].command.as_str(), steps[0].expected.as_str()),
        ("a \\\n  b", "out 1\n[..]\n")
    );
    assert_eq!((steps[1].command.as_str(), steps[1].expected.as_str()), ("c", ""));
    assert!(schema_problems("cat windmill-job/result.json", r#"{"status": "done"}"#).is_some());
    assert!(schema_problems("WM_JOB_ID=x fediversity-jobenv status", "[]").is_none());
    assert!(schema_problems("fediversity-jobenv drain", "jobenv: drained: 0 job(s) stopped\n[]\n").is_none());
    assert!(schema_problems("fediversity-jobenv recover", "[{}]").is_some());
}

// ---- the module's options -------------------------------------------------------------------

const OPTIONS_PAGE: &str = "docs/operators/module-options.md";
const GENERATED_START: &str = "<!-- generated from the module's option declarations: begin -->";
const GENERATED_END: &str = "<!-- generated from the module's option declarations: end -->";

/// The option reference as the module declares it: one row per option of
/// `services.fediversity-windmill`.
fn option_table() -> String {
    use crate::nix_module::{NODE, nix_instantiate, nix_string};
    let expr = format!(
        "(import {} {{ settings = {NODE}; }}).optionReference",
        nix_string(repo().join("tests/nix/module-harness.nix"))
    );
    let out = nix_instantiate(&expr);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let options: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(options.len() > 60, "{}", options.len());
    let mut table = String::from("| option | type | default | description |\n|---|---|---|---|\n");
    for option in &options {
        let default = match (option.get("defaultText"), option.get("default")) {
            (Some(text), _) => format!("`{}`", text.as_str().unwrap().trim()),
            (None, Some(value)) => format!("`{}`", nix_text(value)),
            (None, None) => "required".to_owned(),
        };
        let read_only = if option["readOnly"] == true { " (read-only)" } else { "" };
        table.push_str(&format!(
            "| `{}`{read_only} | {} | {} | {} |\n",
            option["name"].as_str().unwrap(),
            option["type"].as_str().unwrap().replace('|', "\\|"),
            default.replace('|', "\\|"),
            first_sentence(option["description"].as_str().unwrap()).replace('|', "\\|"),
        ));
    }
    table
}

/// A JSON value as Nix writes it.
fn nix_text(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(s) => Value::from(s.as_str()).to_string(),
        Value::Array(items) if items.is_empty() => "[ ]".into(),
        Value::Array(items) => format!("[ {} ]", items.iter().map(nix_text).collect::<Vec<_>>().join(" ")),
        Value::Object(map) if map.is_empty() => "{ }".into(),
        Value::Object(map) => format!(
            "{{ {} }}",
            map.iter()
                .map(|(k, v)| format!("{k} = {};", nix_text(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => other.to_string(),
    }
}

/// The first sentence of a description, on one line, `{option}`x`` as `x`: up to the first `. `
/// outside code and parentheses (not that of `e.g.` or `i.e.`).
fn first_sentence(description: &str) -> String {
    let text = description
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("{option}", "");
    let (mut code, mut depth) = (false, 0i32);
    for (i, c) in text.char_indices() {
        match c {
            '`' => code = !code,
            '(' if !code => depth += 1,
            ')' if !code => depth -= 1,
            '.' if !code
                && depth == 0
                && text[i + 1..].starts_with(' ')
                && !text[..i].ends_with("e.g")
                && !text[..i].ends_with("i.e") =>
            {
                return text[..=i].to_owned();
            }
            _ => {}
        }
    }
    text
}

#[test]
fn the_option_reference_is_every_option_the_module_declares() {
    let path = repo().join(OPTIONS_PAGE);
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(GENERATED_START).expect("the generated region's start") + GENERATED_START.len();
    let end = text.find(GENERATED_END).expect("the generated region's end");
    let table = format!("\n{}", option_table());
    if text[start..end] != table {
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            std::fs::write(&path, format!("{}{table}{}", &text[..start], &text[end..])).unwrap();
        } else {
            snapbox::Assert::new().eq(&text[start..end], table.as_str());
        }
    }
}

#[test]
fn descriptions_are_cut_at_their_first_sentence() {
    assert_eq!(
        first_sentence("The API name: nginx answers 404.\n  More."),
        "The API name: nginx answers 404."
    );
    assert_eq!(
        first_sentence("Keys (`a. b`, e.g. c. d) of {option}`x`. More"),
        "Keys (`a. b`, e.g. c. d) of `x`."
    );
    assert_eq!(
        nix_text(&serde_json::json!({"a": [1, "b"], "c": {}})),
        r#"{ a = [ 1 "b" ]; c = { }; }"#
    );
}

// ---- errors and exit codes ------------------------------------------------------------------

const TROUBLESHOOTING: &str = "docs/operators/troubleshooting.md";

/// A variant of an error enum and its message template (`#[error("...")]`, `{...}` a
/// placeholder; `transparent`: its source's message).
#[derive(Debug)]
struct Variant {
    name: String,
    template: String,
}

/// The variants of `enum <name>` in the Rust file `path`, with their `#[error]` templates.
fn variants(path: &str, name: &str) -> Vec<Variant> {
    let source = std::fs::read_to_string(repo().join(path)).unwrap();
    let body = &source[source
        .find(&format!("pub enum {name} {{"))
        .unwrap_or_else(|| panic!("{path}: no enum {name}"))..];
    let body = &body[..body.find("\n}\n").unwrap()];
    let (mut variants, mut attribute, mut template) = (Vec::new(), None::<String>, None::<String>);
    for line in body.lines().skip(1) {
        let trimmed = line.trim();
        if let Some(open) = &mut attribute {
            open.push_str(line);
            open.push('\n');
            if trimmed == ")]" || trimmed.ends_with(")]") {
                template = Some(string_literal(open));
                attribute = None;
            }
        } else if trimmed.starts_with("#[error(") {
            if trimmed.ends_with(")]") {
                template = Some(string_literal(trimmed));
            } else {
                attribute = Some(format!("{trimmed}\n"));
            }
        } else if trimmed.starts_with("//") || trimmed.starts_with("#[") || trimmed.is_empty() {
        } else if line.starts_with("    ") && !line.starts_with("     ") && !trimmed.starts_with('}') {
            // A variant's name at the enum's indentation (the `}` closing a struct variant is not one).
            let variant: String = trimmed
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let template = template
                .take()
                .unwrap_or_else(|| panic!("{path}: {name}::{variant} has no #[error]"));
            variants.push(Variant {
                name: variant,
                template,
            });
        }
    }
    assert!(variants.len() >= 3, "{path}: {variants:?}");
    variants
}

/// The first string literal of `text` (escapes and line continuations resolved), or
/// `{transparent}` for `#[error(transparent)]`.
fn string_literal(text: &str) -> String {
    let Some(start) = text.find('"') else {
        return "{transparent}".into();
    };
    let (mut out, mut chars) = (String::new(), text[start + 1..].chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                Some('\n') => {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                }
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => {}
            },
            c => out.push(c),
        }
    }
    out
}

/// A regex of the messages a format string makes: its text, with any text for each `{...}`.
fn template_regex(template: &str) -> regex::Regex {
    let mut pattern = String::from("^");
    let mut rest = template;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("{{") {
            pattern.push_str(r"\{");
            rest = after;
        } else if let Some(after) = rest.strip_prefix("}}") {
            pattern.push_str(r"\}");
            rest = after;
        } else if rest.starts_with('{') {
            let end = rest.find('}').expect("a closed placeholder");
            pattern.push_str("(?s:.+)");
            rest = &rest[end + 1..];
        } else {
            let c = rest.chars().next().unwrap();
            pattern.push_str(&regex::escape(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    pattern.push('$');
    regex::Regex::new(&pattern).unwrap()
}

/// The messages of a table's rows, by what the row says it documents (its second cell's code
/// spans), without the line's prefix.
fn documented(rows: &[Vec<String>], prefixes: &[&str]) -> BTreeMap<String, Vec<String>> {
    let mut by_source = BTreeMap::<String, Vec<String>>::new();
    for row in rows {
        let messages: Vec<String> = spans_of(&row[0])
            .into_iter()
            .map(|m| {
                prefixes
                    .iter()
                    .fold(m.to_owned(), |m, p| m.strip_prefix(p).map(str::to_owned).unwrap_or(m))
            })
            .collect();
        assert!(!messages.is_empty(), "a row without a message in code: {row:?}");
        for source in spans_of(row.get(1).map(String::as_str).unwrap_or("")) {
            by_source
                .entry(source.to_owned())
                .or_default()
                .extend(messages.iter().cloned());
        }
    }
    by_source
}

/// Every variant has a row, every row a variant, and each row's message fits its variant's
/// template. Returns the problems.
fn check_enum(rows: &[Vec<String>], prefixes: &[&str], enums: &[(&str, &str, Vec<Variant>)]) -> Vec<String> {
    let documented = documented(rows, prefixes);
    let mut problems = Vec::new();
    let mut known = BTreeSet::new();
    for (label, path, variants) in enums {
        for variant in variants {
            let key = format!("{label}::{}", variant.name);
            known.insert(key.clone());
            let regex = template_regex(&variant.template);
            match documented.get(&key) {
                None => problems.push(format!("{key} ({path}, {:?}) is not documented", variant.template)),
                Some(messages) => {
                    for message in messages.iter().filter(|m| !regex.is_match(m)) {
                        problems.push(format!(
                            "{key}: `{message}` is not what its template {:?} writes",
                            variant.template
                        ));
                    }
                }
            }
        }
    }
    let labels: Vec<String> = enums.iter().map(|(label, _, _)| format!("{label}::")).collect();
    for key in documented
        .keys()
        .filter(|k| labels.iter().any(|l| k.starts_with(l.as_str())) && !known.contains(*k))
    {
        problems.push(format!("{key} is documented but is no variant"));
    }
    problems
}

#[test]
fn every_error_of_jobenv_is_documented_with_its_message() {
    let page = page(TROUBLESHOOTING);
    let rows = page.table_after("Every jobenv: error: line");
    let enums = [
        (
            "Problem",
            "jobenv/src/error.rs",
            variants("jobenv/src/error.rs", "Problem"),
        ),
        ("Error", "jobenv/src/error.rs", variants("jobenv/src/error.rs", "Error")),
        (
            "Refusal",
            "jobenv/src/error.rs",
            variants("jobenv/src/error.rs", "Refusal"),
        ),
        (
            "ReadError",
            "jobenv/src/error.rs",
            variants("jobenv/src/error.rs", "ReadError"),
        ),
    ];
    let mut problems = check_enum(&rows, &["jobenv: error: "], &enums);
    // The lines jobenv writes at error level outside the enum, each from its file.
    let documented = documented(&rows, &["jobenv: error: "]);
    for (file, template) in error_lines() {
        let regex = template_regex(&template);
        if !documented
            .get(&file)
            .is_some_and(|messages| messages.iter().any(|m| regex.is_match(m)))
        {
            problems.push(format!(
                "{file}: the error line {template:?} is not documented (a row whose second cell is `{file}`)"
            ));
        }
    }
    assert!(problems.is_empty(), "{TROUBLESHOOTING}:\n{}", problems.join("\n"));
}

/// The `tracing::error!` and `eprintln!("jobenv: error: ...")` lines of jobenv's code with a
/// text of their own (not a message passed on), by file.
fn error_lines() -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for entry in walkdir::WalkDir::new(repo().join("jobenv/src")).sort_by_file_name() {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let file = entry.path().strip_prefix(repo()).unwrap().display().to_string();
        let source = std::fs::read_to_string(entry.path()).unwrap();
        // Production code only: the unit tests come after `#[cfg(test)]`.
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        for (at, _) in source
            .match_indices("tracing::error!(")
            .chain(source.match_indices("eprintln!(\"jobenv: error: "))
        {
            let call = &source[at..];
            let call = &call[..call.find(");").unwrap()];
            let template = string_literal(call);
            let template = template.strip_prefix("jobenv: error: ").unwrap_or(&template).to_owned();
            if !["{line}", "{error}"].contains(&template.as_str()) {
                lines.push((file.clone(), template));
            }
        }
    }
    assert!(lines.len() >= 8, "{lines:?}");
    lines
}

#[test]
fn every_error_of_the_bootstrap_is_documented_with_its_message() {
    let page = page(TROUBLESHOOTING);
    let rows = page.table_after("Every bootstrap error");
    let enums = [
        (
            "Error",
            "bootstrap/src/error.rs",
            variants("bootstrap/src/error.rs", "Error"),
        ),
        (
            "safe_io::Error",
            "safe-io/src/lib.rs",
            variants("safe-io/src/lib.rs", "Error"),
        ),
    ];
    let problems = check_enum(&rows, &["fediversity-windmill-bootstrap: error: "], &enums);
    assert!(problems.is_empty(), "{TROUBLESHOOTING}:\n{}", problems.join("\n"));
}

#[test]
fn every_exit_code_is_documented() {
    let page = page(TROUBLESHOOTING);
    for (heading, path, prefix) in [
        ("jobenv's exit codes", "jobenv/src/error.rs", "pub const EXIT_"),
        (
            "The bootstrap's exit codes",
            "bootstrap/src/error.rs",
            "pub const EXIT_",
        ),
    ] {
        let codes: BTreeSet<String> = page
            .table_after(heading)
            .iter()
            .map(|row| row[0].trim_matches('`').to_owned())
            .collect();
        let source = std::fs::read_to_string(repo().join(path)).unwrap();
        for line in source.lines().filter(|l| l.starts_with(prefix)) {
            let value = line.rsplit('=').next().unwrap().trim().trim_end_matches(';');
            assert!(
                codes.contains(value),
                "{TROUBLESHOOTING}, {heading:?}: exit code {value} ({line}) is not in the table"
            );
        }
    }
}

#[test]
fn the_error_checks_catch_a_wrong_message() {
    let variants = variants("jobenv/src/error.rs", "Problem");
    let missing = variants.iter().find(|v| v.name == "MissingFile").unwrap();
    assert_eq!(missing.template, "{what} {} does not exist");
    let regex = template_regex(&missing.template);
    assert!(regex.is_match("keys file <path> does not exist"));
    assert!(!regex.is_match("keys file <path> is missing"));
    let bootstrap = variants_of_bootstrap();
    let scopes = bootstrap.iter().find(|v| v.name == "Granted").unwrap();
    assert!(
        scopes.template.starts_with("Windmill {version} granted")
            && scopes.template.ends_with("the token was not stored"),
        "{scopes:?}"
    );
    assert!(!scopes.template.contains('\n'));
    let rows = vec![vec![
        "`keys file <path> is missing`".to_owned(),
        "`Problem::MissingFile`".to_owned(),
    ]];
    let problems = check_enum(&rows, &[], &[("Problem", "jobenv/src/error.rs", variants)]);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("Problem::MissingFile: `keys file <path> is missing`")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("Problem::NotJson") && p.ends_with("is not documented")),
        "{problems:?}"
    );
}

fn variants_of_bootstrap() -> Vec<Variant> {
    variants("bootstrap/src/error.rs", "Error")
}
