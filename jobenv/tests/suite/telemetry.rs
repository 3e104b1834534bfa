//! OpenTelemetry: with the `OTEL_*` variables naming an endpoint, a job is one trace (the job's
//! span, a span per stage, joined to a front-end's `TRACEPARENT`) and its log is log records
//! equal to the job log line for line, redacted; a collector that is dead, slow, a black hole or
//! erroring costs at most one line and the flush bound; without the variables nothing runs.
//!
//! The collector is the test kit's receiver (`otlp_receiver`), which decodes what jobenv sends
//! with the protocol's own messages; one test passes it through a real collector (PyPI's rotel)
//! when the test venv has it.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, run_with_payload};
use fediversity_testkit::otlp_receiver::{self, Receiver, Record, Span};
use serde_json::{Value, json};

const API_TOKEN: &str = "tok-SECRET-0123456789";
const COLLECTOR_KEY: &str = "collector-key-5f4e3d2c1b0a";
const FRONT_END_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const FRONT_END_SPAN: &str = "00f067aa0ba902b7";

/// A node whose program `web-<verb>` is `body`, with a secret.
fn node(verb: &str, body: &str) -> Fixture {
    let mut f = Fixture::new();
    f.program("web", verb, body).secret("TF_VAR_api_token", API_TOKEN);
    f
}

fn payload() -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BUILD_ID": "build-42"})
}

/// jobenv exporting to `endpoint`, as job `job-7`.
fn command(f: &Fixture, endpoint: &str, extra: &[&str]) -> Command {
    command_of("job-7", f, endpoint, extra)
}

fn command_of(job_id: &str, f: &Fixture, endpoint: &str, extra: &[&str]) -> Command {
    let mut args = vec!["run", "--verb", "apply", "--job-id", job_id];
    args.extend(extra);
    let mut command = f.command(jobenv_bin!(), &args);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=fediversity");
    command
}

/// Forgets every job the node ran: the same job id runs again.
fn fresh_journal(f: &Fixture) {
    std::fs::remove_dir_all(f.state_dir()).unwrap();
    std::fs::create_dir(f.state_dir()).unwrap();
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The spans of one trace by name (each name once).
fn by_name(spans: &[Span]) -> BTreeMap<String, Span> {
    let mut named = BTreeMap::new();
    for span in spans {
        assert!(
            named.insert(span.name.clone(), span.clone()).is_none(),
            "two spans named {}: {spans:#?}",
            span.name
        );
    }
    named
}

#[test]
fn a_job_is_one_trace_with_a_span_per_stage_joined_to_the_front_ends() {
    let receiver = Receiver::start();
    let f = node("apply", "echo \"traceparent=$TRACEPARENT\"; echo 'to stderr' >&2");
    let mut payload = payload();
    payload["TRACEPARENT"] = json!(format!("00-{FRONT_END_TRACE}-{FRONT_END_SPAN}-01"));
    payload["TRACESTATE"] = json!("fe=build-42");
    let out = run_with_payload(command(&f, &receiver.endpoint(), &[]), &payload);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Exported at the end: everything is there when jobenv exits.
    let recorded = receiver.recorded();
    assert!(
        recorded.requests.iter().all(|(_, ct)| ct == "application/x-protobuf"),
        "{:?}",
        recorded.requests
    );
    assert!(
        recorded.encodings.iter().all(String::is_empty),
        "not compressed unless asked"
    );
    let spans = by_name(&recorded.spans);
    assert_eq!(
        spans.keys().map(String::as_str).collect::<Vec<_>>(),
        ["admission", "deploy web apply", "evaluation", "namespace", "program"],
        "{spans:#?}"
    );
    let job = &spans["deploy web apply"];
    assert_eq!(
        (job.trace_id.as_str(), job.parent_span_id.as_str()),
        (FRONT_END_TRACE, FRONT_END_SPAN)
    );
    assert_eq!(job.kind, 5, "a consumer span: the front-end's request was queued");
    for stage in ["admission", "namespace", "program"] {
        let span = &spans[stage];
        assert_eq!(span.trace_id, FRONT_END_TRACE, "{stage}");
        assert_eq!(span.parent_span_id, job.span_id, "{stage}");
        assert_eq!(span.status.0, 0, "{stage}: {:?}", span.status);
        assert!(
            job.start_ns <= span.start_ns && span.end_ns <= job.end_ns,
            "{stage} outside the job"
        );
    }
    assert!(spans["admission"].end_ns <= spans["namespace"].start_ns);
    assert!(spans["namespace"].end_ns <= spans["program"].start_ns);
    // The shell's evaluation is the first thing of the program's stage.
    let (evaluation, program) = (&spans["evaluation"], &spans["program"]);
    assert_eq!(evaluation.parent_span_id, program.span_id);
    assert_eq!(evaluation.status.0, 0, "{evaluation:#?}");
    assert!(program.start_ns <= evaluation.start_ns && evaluation.end_ns <= program.end_ns);
    for (key, value) in [
        ("jobenv.job.id", "job-7"),
        ("jobenv.job.attempt", "1"),
        ("jobenv.job.verb", "apply"),
        ("jobenv.job.attribute", "web"),
        ("jobenv.job.namespace", "ns"),
        ("jobenv.job.build_id", "build-42"),
        ("jobenv.job.status", "succeeded"),
        ("process.exit.code", "0"),
        ("jobenv.job.replayed", "false"),
    ] {
        assert_eq!(
            job.attributes.get(key).map(String::as_str),
            Some(value),
            "{key}: {job:#?}"
        );
    }
    assert!(job.attributes["jobenv.job.system"].ends_with("-linux"), "{job:#?}");
    assert_eq!(job.status.0, 0, "{:?}", job.status);
    assert_eq!(job.resource["service.name"], "fediversity-jobenv");
    assert_eq!(job.resource["service.namespace"], "fediversity");
    assert!(!job.resource["host.name"].is_empty());
    // The program continues the trace from its own span.
    let program = &spans["program"];
    assert_eq!(
        text(&out.stdout).lines().next().unwrap(),
        format!("traceparent=00-{FRONT_END_TRACE}-{}-01", program.span_id)
    );
    // What jobenv said in a stage is an event of it.
    assert!(
        program
            .events
            .iter()
            .any(|(name, message)| name == "info" && message.starts_with("jobenv: running web-apply in namespace ns")),
        "{:#?}",
        program.events
    );
}

/// The records of one stream, in the order they were made (jobenv's lines and the program's
/// stderr are both `stderr`: the job log has them on one stream).
fn bodies(records: &[Record], stream: &str, source: Option<&str>) -> Vec<String> {
    let mut chosen: Vec<&Record> = records
        .iter()
        .filter(|r| r.attributes["log.iostream"] == stream)
        .filter(|r| source.is_none_or(|s| r.attributes["jobenv.log.source"] == s))
        .collect();
    chosen.sort_by_key(|r| r.time_ns);
    chosen.iter().map(|r| r.body.clone()).collect()
}

#[test]
fn the_job_log_arrives_line_for_line_redacted_with_the_span_of_its_stage() {
    let receiver = Receiver::start();
    let f = node(
        "apply",
        &format!(
            "echo 'line one'; echo 'token {API_TOKEN} in a line' >&2; printf 'a\\tb\\n\\nafter an empty line\\n'; \
             echo 'err two' >&2; printf 'no newline at the end'"
        ),
    );
    let out = run_with_payload(command(&f, &receiver.endpoint(), &[]), &payload());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stdout.contains(API_TOKEN) && !stderr.contains(API_TOKEN));
    let recorded = receiver.recorded();
    let records = &recorded.records;

    // stdout: the program's, line for line.
    assert_eq!(bodies(records, "stdout", None), stdout.split('\n').collect::<Vec<_>>());
    // stderr: the program's lines and jobenv's, each in its order, and together all of them.
    let jobenv_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("jobenv: ")).collect();
    let program_lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("jobenv: ")).collect();
    assert_eq!(bodies(records, "stderr", Some("jobenv")), jobenv_lines);
    assert_eq!(bodies(records, "stderr", Some("program")), program_lines);
    assert!(program_lines.contains(&"token [REDACTED] in a line"), "{stderr}");
    assert_eq!(jobenv_lines.len() + program_lines.len(), stderr.lines().count());

    // Each with the span of the stage that produced it.
    let spans = by_name(&recorded.spans);
    let span_of = |body: &str| {
        let record = records
            .iter()
            .find(|r| r.body == body)
            .unwrap_or_else(|| panic!("no record {body:?}"));
        assert_eq!(record.trace_id, spans["program"].trace_id);
        spans
            .values()
            .find(|s| s.span_id == record.span_id)
            .map(|s| s.name.clone())
    };
    assert_eq!(span_of("line one").as_deref(), Some("program"));
    assert_eq!(span_of("token [REDACTED] in a line").as_deref(), Some("program"));
    let running = jobenv_lines.iter().find(|l| l.contains("running web-apply")).unwrap();
    assert_eq!(span_of(running).as_deref(), Some("program"));
    for record in records {
        assert_eq!(record.attributes["jobenv.job.id"], "job-7");
        let expected = match (
            record.attributes["log.iostream"].as_str(),
            record.attributes["jobenv.log.source"].as_str(),
        ) {
            ("stdout", "program") => (9, "INFO"),
            ("stderr", "program") => (13, "WARN"),
            ("stderr", "jobenv") if record.body.starts_with("jobenv: warning: ") => (13, "WARN"),
            ("stderr", "jobenv") => (9, "INFO"),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (record.severity_number, record.severity_text.as_str()),
            expected,
            "{record:?}"
        );
    }
}

/// A file of each printed form of `secret`, one a line; and how many.
fn forms_file(f: &Fixture, name: &str, secret: &str) -> (std::path::PathBuf, usize) {
    let forms = safe_io::secret::forms(secret);
    let path = f.path().join(name);
    std::fs::write(&path, forms.join("\n") + "\n").unwrap();
    (path, forms.len())
}

/// A secret with what JSON, URLs, markup and shells escape: it has many printed forms.
const SPECIAL_TOKEN: &str = "tok/SECRET+01\"23&<45>'67 89";

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn no_secret_reaches_the_collector_in_any_printed_form() {
    let receiver = Receiver::expecting("authorization", &format!("Bearer {COLLECTOR_KEY}"));
    let mut f = node("apply", "");
    f.secret("TF_VAR_api_token", SPECIAL_TOKEN);
    let (token_forms, token_count) = forms_file(&f, "token-forms", SPECIAL_TOKEN);
    let (key_forms, key_count) = forms_file(&f, "key-forms", COLLECTOR_KEY);
    assert!(token_count > 20, "{token_count}");
    // A program that prints both secrets in every form, on both streams, and fails with them.
    f.program(
        "web",
        "apply",
        &format!(
            "cat {t}; cat {k} >&2; cat {k}; cat {t} >&2; exit 3",
            t = token_forms.display(),
            k = key_forms.display()
        ),
    );
    let headers = f.path().join("otlp-headers");
    std::fs::write(&headers, format!("authorization=Bearer%20{COLLECTOR_KEY}\n")).unwrap();
    let mut cmd = command(&f, &receiver.endpoint(), &[]);
    cmd.env("JOBENV_OTLP_HEADERS_FILE", &headers);
    let out = run_with_payload(cmd, &payload());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let recorded = receiver.recorded();
    assert_eq!(
        recorded.unauthorized, 0,
        "the headers file's key went with every request"
    );
    assert!(!recorded.records.is_empty() && !recorded.spans.is_empty());
    let all: Vec<u8> = recorded.bodies.concat();
    for form in safe_io::secret::forms(SPECIAL_TOKEN)
        .iter()
        .chain(&safe_io::secret::forms(COLLECTOR_KEY))
    {
        assert!(!contains(&all, form), "{form:?} reached the collector");
        assert!(
            !contains(&out.stdout, form) && !contains(&out.stderr, form),
            "{form:?} in the job log"
        );
    }
    let redacted = recorded.records.iter().filter(|r| r.body == "[REDACTED]").count();
    assert_eq!(
        redacted,
        2 * (token_count + key_count),
        "each line of forms arrived redacted"
    );
    let job = &by_name(&recorded.spans)["deploy web apply"];
    assert_eq!(job.status.0, 2, "a failed job is an error: {:?}", job.status);
    assert_eq!(job.attributes["process.exit.code"], "3");

    // Positive control: the same output where neither value is a secret arrives as printed, so
    // the scan above would have found them.
    let receiver = Receiver::start();
    std::fs::remove_file(f.secrets_dir().join("TF_VAR_api_token")).unwrap();
    fresh_journal(&f);
    let out = run_with_payload(command(&f, &receiver.endpoint(), &[]), &payload());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let all: Vec<u8> = receiver.recorded().bodies.concat();
    let shown = safe_io::secret::forms(SPECIAL_TOKEN)
        .iter()
        .chain(&safe_io::secret::forms(COLLECTOR_KEY))
        .filter(|form| contains(&all, form))
        .count();
    assert_eq!(
        shown,
        token_count + key_count,
        "every form the scan looks for is found when not a secret"
    );
}

#[test]
fn the_variables_headers_are_secrets_too() {
    let receiver = Receiver::expecting("x-api-key", COLLECTOR_KEY);
    let f = node("apply", &format!("echo 'key: {COLLECTOR_KEY}'"));
    let mut cmd = command(&f, &receiver.endpoint(), &[]);
    // Compressed, as the variable asks: the secret is not there either way.
    cmd.env("OTEL_EXPORTER_OTLP_HEADERS", format!("x-api-key={COLLECTOR_KEY}"))
        .env("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip");
    let out = run_with_payload(cmd, &payload());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "key: [REDACTED]\n");
    let recorded = receiver.recorded();
    assert_eq!(recorded.unauthorized, 0);
    assert!(
        recorded.encodings.iter().all(|e| e == "gzip"),
        "{:?}",
        recorded.encodings
    );
    assert!(recorded.records.iter().any(|r| r.body == "key: [REDACTED]"));
    assert!(!contains(&recorded.bodies.concat(), COLLECTOR_KEY));
}

/// The lines jobenv wrote about export.
fn telemetry_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("telemetry:")).collect()
}

/// Runs the job and how long it took, from the start of jobenv to its exit.
fn timed(cmd: Command) -> (Output, Duration) {
    let start = Instant::now();
    let out = run_with_payload(cmd, &payload());
    (out, start.elapsed())
}

#[test]
fn a_dead_slow_black_hole_or_erroring_collector_costs_one_line_and_the_flush_bound() {
    // A program that runs past the first export (the log processor exports every second).
    let f = node("apply", "echo first; sleep 1.5; echo last");
    let flush = Duration::from_secs(1);
    let (baseline, base_took) = timed(f.command(jobenv_bin!(), &["run", "--verb", "apply"]));
    assert_eq!(baseline.status.code(), Some(0), "{}", text(&baseline.stderr));
    let slow = Receiver::answering(200, Duration::from_secs(30));
    let erroring = Receiver::answering(503, Duration::ZERO);
    let refusing = Receiver::expecting("authorization", "Bearer a-key-jobenv-does-not-have");
    let hole = otlp_receiver::black_hole();
    for (what, endpoint, says) in [
        ("dead", otlp_receiver::dead_endpoint(), "network error"),
        ("slow", slow.endpoint(), "no answer within the flush bound of 1s"),
        ("black hole", hole.endpoint(), "no answer within the flush bound of 1s"),
        ("erroring", erroring.endpoint(), "status code: 503"),
        ("refusing", refusing.endpoint(), "status code: 401"),
    ] {
        let mut cmd = f.command(jobenv_bin!(), &["run", "--verb", "apply", "--otlp-flush-timeout", "1"]);
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        let (out, took) = timed(cmd);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
        assert_eq!(text(&out.stdout), "first\nlast\n", "{what}");
        let lines = telemetry_lines(&stderr);
        assert_eq!(lines.len(), 1, "{what}: one line: {stderr}");
        assert!(
            lines[0].starts_with("jobenv: warning: telemetry: not everything reached the collector (")
                && lines[0].contains(says),
            "{what}: {}",
            lines[0]
        );
        assert!(
            !lines[0].contains(&endpoint),
            "{what}: the endpoint is not shown: {}",
            lines[0]
        );
        // At most the flush bound on top of the same job without export (a generous margin for
        // a busy machine: the bound is what is measured in BENCHMARKS.md).
        eprintln!("{what}: {took:?} (without export: {base_took:?})");
        assert!(
            took <= base_took + flush + Duration::from_secs(3),
            "{what}: {took:?}, without export {base_took:?}"
        );
    }
    assert!(hole.connections() > 0, "the black hole was tried");
    assert!(!slow.recorded().bodies.is_empty(), "the slow collector was tried");
}

#[test]
fn a_collector_that_answers_in_time_costs_no_line() {
    let slow = Receiver::answering(200, Duration::from_millis(300));
    let f = node("apply", "echo one; echo two");
    let mut cmd = command(&f, &slow.endpoint(), &["--otlp-flush-timeout", "5"]);
    cmd.env("OTEL_EXPORTER_OTLP_TIMEOUT", "3000");
    let out = run_with_payload(cmd, &payload());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(telemetry_lines(&text(&out.stderr)), Vec::<&str>::new());
    let recorded = slow.recorded();
    assert_eq!(recorded.spans.len(), 5, "{:#?}", recorded.spans);
    assert_eq!(bodies(&recorded.records, "stdout", None), ["one", "two"]);
}

/// `cmd` spawned with its stderr piped and the payload written to its stdin.
fn spawned_with_payload(cmd: &mut Command) -> std::process::Child {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload().to_string().as_bytes())
        .unwrap();
    child
}

/// jobenv's threads (their names), read from /proc while its program runs: the program writes a
/// file once it started, and waits for the test to remove it.
fn threads_while_running(mut cmd: Command, f: &Fixture) -> Vec<String> {
    let started = f.path().join("started");
    let child = spawned_with_payload(cmd.stdout(std::process::Stdio::null()));
    assert!(
        fediversity_testkit::process::wait_until(Duration::from_secs(30), || started.exists()),
        "the program did not start"
    );
    let pid = child.id();
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect();
    names.sort();
    std::fs::remove_file(&started).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    names
}

#[test]
fn without_an_endpoint_nothing_runs_no_thread_no_export() {
    let receiver = Receiver::start();
    let started = "started";
    let mut f = node("apply", "");
    let marker = f.path().join(started);
    f.program(
        "web",
        "apply",
        &format!("touch {m}; while [ -e {m} ]; do sleep 0.05; done", m = marker.display()),
    );
    // Every other variable of export, but no endpoint: nothing.
    let mut off = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    off.env("OTEL_SERVICE_NAME", "x")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-key=k")
        .env("JOBENV_OTLP_HEADERS_FILE", f.path().join("no-such-file"));
    let without = threads_while_running(off, &f);
    // Positive control: the same job exporting starts the exporter's threads.
    let on = command(&f, &receiver.endpoint(), &[]);
    let with = threads_while_running(on, &f);
    let exporting = |names: &[String]| {
        names
            .iter()
            .filter(|n| n.starts_with("OpenTelemetry") || n.starts_with("reqwest"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(exporting(&without), Vec::<String>::new(), "{without:?}");
    assert_eq!(
        exporting(&with).len(),
        3,
        "two batch processors and the HTTP client's: {with:?}"
    );
    assert_eq!(with.len(), without.len() + 3, "{without:?} {with:?}");
    // Only the second run sent anything.
    let spans = by_name(&receiver.recorded().spans);
    assert_eq!(spans.len(), 5, "{spans:#?}");
    assert_eq!(spans["deploy web apply"].attributes["jobenv.job.id"], "job-7");
}

#[test]
fn a_bad_traceparent_is_dropped_with_a_warning_and_the_trace_starts_at_jobenv() {
    let receiver = Receiver::start();
    let f = node(
        "apply",
        "echo \"traceparent=$TRACEPARENT tracestate=${TRACESTATE-unset}\"",
    );
    let mut payload = payload();
    payload["TRACEPARENT"] = json!(format!("00-{}-{FRONT_END_SPAN}-01", FRONT_END_TRACE.to_uppercase()));
    payload["TRACESTATE"] = json!("fe=1");
    let out = run_with_payload(command(&f, &receiver.endpoint(), &[]), &payload);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a bad TRACEPARENT is never an error: {stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "jobenv: warning: payload TRACEPARENT \"00-{}-{FRONT_END_SPAN}-01\" dropped (and TRACESTATE with it): must be a W3C traceparent",
            FRONT_END_TRACE.to_uppercase()
        )),
        "{stderr}"
    );
    let spans = by_name(&receiver.recorded().spans);
    let job = &spans["deploy web apply"];
    assert_eq!(job.parent_span_id, "", "a root span");
    assert_ne!(job.trace_id, FRONT_END_TRACE.to_lowercase());
    assert_eq!(
        text(&out.stdout),
        format!(
            "traceparent=00-{}-{}-01 tracestate=unset\n",
            job.trace_id, spans["program"].span_id
        )
    );
    // The warning is an event of the admission stage.
    assert!(
        spans["admission"]
            .events
            .iter()
            .any(|(name, m)| name == "warning" && m.contains("payload TRACEPARENT")),
        "{:#?}",
        spans["admission"].events
    );
}

#[test]
fn without_export_the_program_gets_the_front_ends_context_unchanged() {
    let f = node("apply", "echo \"$TRACEPARENT $TRACESTATE\"");
    let mut payload = payload();
    let traceparent = format!("00-{FRONT_END_TRACE}-{FRONT_END_SPAN}-01");
    payload["TRACEPARENT"] = json!(traceparent);
    payload["TRACESTATE"] = json!("fe=build-42,other=x");
    let out = run_with_payload(f.command(jobenv_bin!(), &["run", "--verb", "apply"]), &payload);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{traceparent} fe=build-42,other=x\n"));
    // `env` shows them as the payload's.
    let out = run_with_payload(f.command(jobenv_bin!(), &["env", "--verb", "apply"]), &payload);
    let shown = text(&out.stdout);
    assert!(shown.contains(&format!("TRACEPARENT={traceparent}")), "{shown}");
}

#[test]
fn a_rejection_and_a_replay_are_traces_too() {
    let receiver = Receiver::start();
    let f = node("apply", "echo ran");
    let mut bad = payload();
    bad["LD_PRELOAD"] = json!("/tmp/x.so");
    let out = run_with_payload(command(&f, &receiver.endpoint(), &[]), &bad);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let spans = by_name(&receiver.recorded().spans);
    assert_eq!(
        spans.keys().collect::<Vec<_>>(),
        ["admission", "deploy web apply"],
        "{spans:#?}"
    );
    let job = &spans["deploy web apply"];
    assert_eq!(job.attributes["jobenv.job.status"], "rejected");
    assert_eq!(job.attributes["process.exit.code"], "2");
    assert_eq!(
        job.status,
        (2, "payload rejected: reserved keys: LD_PRELOAD".to_owned())
    );
    let admission = &spans["admission"];
    assert_eq!(
        admission.status,
        (
            2,
            "jobenv: error: payload rejected: reserved keys: LD_PRELOAD".to_owned()
        )
    );
    assert!(admission.events.contains(&(
        "error".to_owned(),
        "jobenv: error: payload rejected: reserved keys: LD_PRELOAD".to_owned()
    )));

    // A job that ran, then its replay: a trace of its own, replayed, not an error.
    let receiver = Receiver::start();
    let cmd = command_of("job-8", &f, &receiver.endpoint(), &[]);
    assert_eq!(run_with_payload(cmd, &payload()).status.code(), Some(0));
    let receiver = Receiver::start();
    let cmd = command_of("job-8", &f, &receiver.endpoint(), &[]);
    let out = run_with_payload(cmd, &payload());
    assert_eq!((out.status.code(), text(&out.stdout).as_str()), (Some(0), ""));
    let spans = by_name(&receiver.recorded().spans);
    assert_eq!(
        spans.keys().collect::<Vec<_>>(),
        ["admission", "deploy web apply"],
        "{spans:#?}"
    );
    let job = &spans["deploy web apply"];
    assert_eq!(job.attributes["jobenv.job.replayed"], "true");
    assert_eq!(job.attributes["jobenv.job.status"], "succeeded");
    assert_eq!((job.status.0, spans["admission"].status.0), (0, 0));
}

#[test]
fn a_refusal_for_a_busy_namespace_is_a_trace_with_its_namespace_stage_failed() {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    f.program(
        "web",
        "apply",
        &format!("echo $$ > {dir}/pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"),
    );
    // The first job holds the namespace (without export: only the second one is looked at).
    let mut first = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "first-job"])
        .payload(&payload())
        .spawn();
    fediversity_testkit::process::read_pids(&f.path().join("pid"), 1, Duration::from_secs(20));
    let receiver = Receiver::start();
    let out = run_with_payload(command_of("second-job", &f, &receiver.endpoint(), &[]), &payload());
    std::fs::write(f.path().join("go"), "").unwrap();
    assert!(first.wait().unwrap().success());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let refused = "jobenv: error: namespace ns is locked by another deploy: job first-job";
    assert!(stderr.contains(refused), "{stderr}");
    let spans = by_name(&receiver.recorded().spans);
    assert_eq!(
        spans.keys().collect::<Vec<_>>(),
        ["admission", "deploy web apply", "namespace"],
        "{spans:#?}"
    );
    let (job, namespace) = (&spans["deploy web apply"], &spans["namespace"]);
    assert_eq!(namespace.parent_span_id, job.span_id);
    // The job went past admission and stopped at the namespace: that stage says why.
    assert_eq!(spans["admission"].status.0, 0, "{spans:#?}");
    assert_eq!(namespace.status.0, 2, "{namespace:#?}");
    assert!(namespace.status.1.starts_with(refused), "{namespace:#?}");
    assert!(
        namespace
            .events
            .iter()
            .any(|(name, m)| name == "error" && m.starts_with(refused)),
        "{namespace:#?}"
    );
    assert_eq!(job.status.0, 2, "{job:#?}");
    assert_eq!(job.attributes["jobenv.job.id"], "second-job");
    assert_eq!(job.attributes["process.exit.code"], "2");
}

#[test]
fn a_timeout_is_a_stop_stage_and_ends_as_fast_as_without_export() {
    let f = node("apply", "echo started; exec sleep 60");
    let args = ["run", "--verb", "apply", "--timeout", "1", "--grace", "1"];
    let (out, without) = timed(f.command(jobenv_bin!(), &args));
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let receiver = Receiver::start();
    let mut cmd = f.command(jobenv_bin!(), &args);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let (out, with) = timed(cmd);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    eprintln!("timeout: {with:?} with export, {without:?} without");
    assert!(with <= without + Duration::from_secs(2), "{with:?} vs {without:?}");
    let spans = by_name(&receiver.recorded().spans);
    let stop = &spans["stop"];
    assert_eq!(
        stop.parent_span_id, spans["program"].span_id,
        "the stop is inside the program's stage"
    );
    assert_eq!(stop.attributes["jobenv.stop.reason"], "timeout");
    assert!(
        stop.events
            .iter()
            .any(|(_, m)| m.starts_with("jobenv: warning: timeout of 1s reached")),
        "{stop:#?}"
    );
    assert_eq!(spans["deploy web apply"].attributes["jobenv.job.status"], "timed_out");
    assert_eq!(spans["program"].status.0, 2);
    // A black hole changes that by the flush bound at most.
    let hole = otlp_receiver::black_hole();
    let mut cmd = f.command(jobenv_bin!(), &args);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", hole.endpoint())
        .env("JOBENV_OTLP_FLUSH_TIMEOUT", "0.5");
    let (out, black_hole) = timed(cmd);
    assert_eq!(out.status.code(), Some(124));
    eprintln!("timeout with a black hole: {black_hole:?}");
    assert!(
        black_hole <= without + Duration::from_millis(500) + Duration::from_secs(2),
        "{black_hole:?}"
    );
}

#[test]
fn output_beyond_the_bound_is_not_exported_and_said_once_memory_stays_bounded() {
    let receiver = Receiver::start();
    let lines = jobenv::telemetry_bounds::JOB_RECORDS + 50_000;
    // Lines of 40 bytes, then 200 MiB in long lines on stderr: more than the bound holds.
    let f = node(
        "apply",
        &format!("seq -f 'line %035g' {lines}; head -c 200000000 /dev/zero | tr '\\0' x | fold -w 100000 >&2"),
    );
    let mut child = command(&f, &receiver.endpoint(), &[])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload().to_string().as_bytes())
        .unwrap();
    // jobenv's own lines; the 200 MB of the program's are read and dropped.
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        stderr
            .split(b'\n')
            .map_while(Result::ok)
            .filter(|line| line.starts_with(b"jobenv: "))
            .map(|line| text(&line))
            .collect::<Vec<String>>()
    });
    // jobenv's peak memory, read while it runs.
    let pid = child.id();
    let mut peak_kib = 0u64;
    while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        if let Some(hwm) = status.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
            peak_kib = hwm.trim().trim_end_matches(" kB").parse().unwrap();
        }
        if status.contains("State:\tZ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    let jobenv_lines = reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{jobenv_lines:?}");
    let said: Vec<&str> = jobenv_lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains("passed the export bound"))
        .collect();
    assert_eq!(
        said,
        [
            "jobenv: warning: telemetry: the program's output passed the export bound of 100000 lines or 64 MiB: the rest is not exported (the job log has all of it)"
        ]
    );
    let recorded = receiver.recorded();
    let program = recorded
        .records
        .iter()
        .filter(|r| r.attributes["jobenv.log.source"] == "program")
        .count() as u64;
    assert!(program <= jobenv::telemetry_bounds::JOB_RECORDS, "{program}");
    eprintln!("exported {program} program lines; jobenv's peak RSS {peak_kib} KiB");
    assert!(peak_kib < 256 << 10, "jobenv's memory grew to {peak_kib} KiB");
    // The note itself is exported.
    assert!(recorded.records.iter().any(|r| r.body == said[0]));
}

#[test]
fn a_long_line_is_cut_and_says_so() {
    let receiver = Receiver::start();
    let f = node("apply", "head -c 100000 /dev/zero | tr '\\0' y; echo; echo after");
    let out = run_with_payload(command(&f, &receiver.endpoint(), &[]), &payload());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        out.stdout.len(),
        100_000 + "\nafter\n".len(),
        "the job log has all of it"
    );
    let records = receiver.recorded().records;
    let stdout: Vec<&Record> = records
        .iter()
        .filter(|r| r.attributes["log.iostream"] == "stdout")
        .collect();
    assert_eq!(stdout.len(), 2, "{stdout:#?}");
    assert_eq!(stdout[0].body, "y".repeat(jobenv::telemetry_bounds::LINE_BYTES));
    assert_eq!(stdout[0].attributes["jobenv.log.truncated"], "true");
    assert_eq!(stdout[1].body, "after");
    assert!(!stdout[1].attributes.contains_key("jobenv.log.truncated"));
}

/// `args` of jobenv on node `f` with the payload, exporting to `endpoint` (a flush bound of
/// 0.5 s) if there is one, once its program printed `started`.
fn started(f: &Fixture, args: &[&str], endpoint: Option<&str>) -> std::process::Child {
    let mut cmd = f.command(jobenv_bin!(), args);
    if let Some(endpoint) = endpoint {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("JOBENV_OTLP_FLUSH_TIMEOUT", "0.5");
    }
    let mut child = spawned_with_payload(cmd.stdout(std::process::Stdio::piped()));
    let mut stdout = fediversity_testkit::process::StreamWatch::new(child.stdout.take().unwrap());
    assert!(stdout.wait_for(b"started", Duration::from_secs(30)));
    child
}

#[test]
fn a_cancel_is_a_stop_stage_and_a_black_hole_adds_at_most_the_flush_bound() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let f = node("apply", "echo started; exec sleep 60");
    let cancelled = |endpoint: Option<&str>| -> (Output, Duration) {
        let child = started(&f, &["run", "--verb", "apply", "--grace", "1"], endpoint);
        let start = Instant::now();
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let out = child.wait_with_output().unwrap();
        (out, start.elapsed())
    };
    let (out, without) = cancelled(None);
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    let receiver = Receiver::start();
    let (out, with) = cancelled(Some(&receiver.endpoint()));
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    let spans = by_name(&receiver.recorded().spans);
    assert_eq!(spans["stop"].attributes["jobenv.stop.reason"], "cancel");
    assert_eq!(spans["stop"].parent_span_id, spans["program"].span_id);
    assert_eq!(spans["deploy web apply"].attributes["jobenv.job.status"], "canceled");
    let hole = otlp_receiver::black_hole();
    let (out, black_hole) = cancelled(Some(&hole.endpoint()));
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert_eq!(telemetry_lines(&text(&out.stderr)).len(), 1, "{}", text(&out.stderr));
    eprintln!("cancel: {without:?} without export, {with:?} with, {black_hole:?} with a black hole");
    assert!(with <= without + Duration::from_secs(2), "{with:?} vs {without:?}");
    assert!(
        black_hole <= without + Duration::from_millis(500) + Duration::from_secs(2),
        "{black_hole:?}"
    );
}

#[test]
fn a_drain_is_a_stop_stage_and_ends_as_fast_as_without_export() {
    // A node of its own per run: a drained node takes no new job.
    let drained = |endpoint: Option<&str>| -> (Output, Duration) {
        let f = node("apply", "echo started; exec sleep 60");
        let child = started(
            &f,
            &["run", "--verb", "apply", "--job-id", "drained-1", "--grace", "1"],
            endpoint,
        );
        let start = Instant::now();
        let drain = f.jobenv(jobenv_bin!()).args(["drain", "--wait", "0"]).run();
        assert_eq!(drain.code, Some(0), "{drain:?}");
        let out = child.wait_with_output().unwrap();
        (out, start.elapsed())
    };
    let (out, without) = drained(None);
    let code = out.status.code();
    assert!(
        text(&out.stderr).contains("(the node is stopping)"),
        "{}",
        text(&out.stderr)
    );
    let receiver = Receiver::start();
    let (out, with) = drained(Some(&receiver.endpoint()));
    assert_eq!(out.status.code(), code, "{}", text(&out.stderr));
    let spans = by_name(&receiver.recorded().spans);
    assert_eq!(spans["stop"].attributes["jobenv.stop.reason"], "drain", "{spans:#?}");
    assert_eq!(spans["stop"].parent_span_id, spans["program"].span_id);
    assert_eq!(
        spans["deploy web apply"].attributes["jobenv.job.interrupted_by"],
        "node_stopped"
    );
    let hole = otlp_receiver::black_hole();
    let (out, black_hole) = drained(Some(&hole.endpoint()));
    assert_eq!(out.status.code(), code, "{}", text(&out.stderr));
    assert_eq!(telemetry_lines(&text(&out.stderr)).len(), 1, "{}", text(&out.stderr));
    eprintln!("drain: {without:?} without export, {with:?} with, {black_hole:?} with a black hole");
    assert!(with <= without + Duration::from_secs(2), "{with:?} vs {without:?}");
    assert!(
        black_hole <= without + Duration::from_millis(500) + Duration::from_secs(2),
        "{black_hole:?}"
    );
}

#[test]
fn through_a_real_collector() {
    let receiver = Receiver::start();
    let Some(rotel) = otlp_receiver::Rotel::start(&receiver) else {
        // Said, not skipped silently: CI's venv has rotel (.ci/run).
        eprintln!("rotel is not in target/test-venv: the real collector's leg is not run");
        return;
    };
    let f = node("apply", &format!("echo 'deploying with {API_TOKEN}'"));
    let mut payload = payload();
    payload["TRACEPARENT"] = json!(format!("00-{FRONT_END_TRACE}-{FRONT_END_SPAN}-01"));
    let out = run_with_payload(command(&f, &rotel.endpoint, &[]), &payload);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        receiver.wait_for(Duration::from_secs(20), |r| r.spans.len() >= 5
            && r.records.iter().any(|l| l.body.starts_with("deploying"))),
        "the collector passed nothing on: {:?}",
        receiver.recorded()
    );
    let recorded = receiver.recorded();
    let spans = by_name(&recorded.spans);
    let job = &spans["deploy web apply"];
    assert_eq!(
        (job.trace_id.as_str(), job.parent_span_id.as_str()),
        (FRONT_END_TRACE, FRONT_END_SPAN)
    );
    assert_eq!(job.resource["service.name"], "fediversity-jobenv");
    let line = recorded
        .records
        .iter()
        .find(|r| r.body.starts_with("deploying"))
        .unwrap();
    assert_eq!(line.body, "deploying with [REDACTED]");
    assert_eq!(
        (line.trace_id.as_str(), line.span_id.as_str()),
        (FRONT_END_TRACE, spans["program"].span_id.as_str())
    );
    assert!(!contains(&recorded.bodies.concat(), API_TOKEN));
}

#[test]
fn the_operator_page_states_the_bounds_jobenv_has() {
    use jobenv::telemetry_bounds::{JOB_BYTES, JOB_RECORDS, LINE_BYTES, QUEUE_BYTES, QUEUE_RECORDS};
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operators/telemetry.md");
    let page = std::fs::read_to_string(page).unwrap();
    // The page wraps its lines: compare with single spaces.
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    for stated in [
        format!(
            "at most {QUEUE_RECORDS} log records and {} MiB of their bodies are in flight",
            QUEUE_BYTES >> 20
        ),
        format!(
            "A job exports at most {JOB_RECORDS} of its program's lines and {} MiB",
            JOB_BYTES >> 20
        ),
        format!("a line of more than {} KiB is cut there", LINE_BYTES >> 10),
        format!(
            "(`--otlp-flush-timeout`, {} s by default)",
            jobenv::telemetry_bounds::DEFAULT_FLUSH
        ),
    ] {
        assert!(page.contains(&stated), "the page does not say: {stated}");
    }
}

/// An endpoint the exporter refuses (a space the URL parser trims, the HTTP client does not) is
/// said in one line that never quotes it: it may carry credentials. The job runs as without
/// export. The positive control: the same line comes, so the refusal did happen.
#[test]
fn an_endpoint_the_exporter_refuses_is_never_quoted() {
    let f = node("apply", "echo ran");
    for endpoint in [
        " http://user:S3cretPW@127.0.0.1:9",
        "http://user:S3cretPW@127.0.0.1:9/a b",
    ] {
        f.jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&payload())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .expect_success()
            .expect_stderr_contains("telemetry: cannot set up export (the exporter refused its configuration")
            .expect_nowhere("the endpoint's password", "S3cretPW")
            .run();
    }
}
