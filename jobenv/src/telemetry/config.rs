//! Whether a job exports, and where to: the OpenTelemetry environment variables, read as the
//! specification defines them, and jobenv's own two options (the flush bound, the headers file).
//!
//! The OTLP exporter of the OpenTelemetry Rust SDK reads most of the exporter variables itself
//! (the endpoint of each signal and the path it appends, `…_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION`);
//! what it does not do is decided here, before anything of it is built:
//! - export only when an endpoint is named (the SDK would send to `localhost:4318` otherwise), per
//!   signal (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `…_LOGS_ENDPOINT`, else
//!   `OTEL_EXPORTER_OTLP_ENDPOINT`);
//! - `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`, `OTEL_LOGS_EXPORTER=none`, which the
//!   Rust SDK does not implement;
//! - the protocol: only `http/protobuf` (the default); `grpc` and `http/json` are refused with one
//!   line rather than sent to a collector that expects something else;
//! - `OTEL_SERVICE_NAME` with jobenv's default, and `OTEL_RESOURCE_ATTRIBUTES` percent-decoded as
//!   the specification says (the SDK's detector does not decode, and keeps a list with a bad
//!   entry);
//! - the headers: a collector's API key, a secret. Their values become redaction needles, and
//!   the headers file (`--otlp-headers-file`) is read here.
//!
//! Everything is a function of a variable lookup, so the rules are unit-tested without touching
//! the process environment.

use std::path::Path;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use reqwest::Url;
use safe_io::secret::Hidden;

/// jobenv's service name unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) says otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "fediversity-jobenv";

/// The only protocol jobenv speaks.
pub const PROTOCOL: &str = "http/protobuf";

/// The longest headers file jobenv reads: a few API keys, not a document.
const MAX_HEADERS_FILE: u64 = 64 << 10;

/// jobenv's options for export (`run`'s `--otlp-flush-timeout` and `--otlp-headers-file`).
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the end of a job may wait for what is not yet delivered.
    pub flush: Duration,
    /// A file holding the headers of every export request, in `OTEL_EXPORTER_OTLP_HEADERS`' form
    /// (`key=value,key2=value2`, values percent-encoded): the collector's API key, kept out of
    /// every environment.
    pub headers_file: Option<std::path::PathBuf>,
}

/// `--otlp-flush-timeout`'s default, in seconds.
pub const DEFAULT_FLUSH: &str = "2";

impl Default for Options {
    fn default() -> Self {
        Options {
            flush: Duration::from_secs(2),
            headers_file: None,
        }
    }
}

/// The two signals jobenv exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Logs,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Logs => "LOGS",
        }
    }

    fn exporter_var(self) -> &'static str {
        match self {
            Signal::Traces => "OTEL_TRACES_EXPORTER",
            Signal::Logs => "OTEL_LOGS_EXPORTER",
        }
    }
}

/// What to export, when anything.
#[derive(Debug)]
pub struct Config {
    pub traces: bool,
    pub logs: bool,
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`, decoded, without `service.name`.
    pub resource: Vec<(String, String)>,
    /// The headers file's headers (the variables' are read by the exporter itself).
    pub file_headers: Hidden<Vec<(String, String)>>,
    /// Every header value of the file and of the variables, and each of their words of
    /// [`crate::run::redact::MIN_SECRET_LINE_LEN`] bytes or more: redacted wherever jobenv shows output.
    pub secrets: Hidden<Vec<String>>,
    /// The exporter's request timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`, per signal), the longer of
    /// the two signals'.
    pub timeout: Duration,
    pub flush: Duration,
}

/// The decision, and the lines that say why a configured export does not run (one each).
#[derive(Debug)]
pub struct Decision {
    pub config: Option<Config>,
    pub warnings: Vec<String>,
}

/// Reads the configuration through `var` (the process environment in jobenv, a map in tests).
/// No endpoint named: `None` and nothing else is looked at (the headers file is not even read).
pub fn decide(var: &dyn Fn(&str) -> Option<String>, options: &Options) -> Decision {
    let var = |name: &str| var(name).filter(|value| !value.is_empty());
    let mut warnings = Vec::new();
    let named = |signal: Signal| {
        var(&format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.name())).or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
    };
    if named(Signal::Traces).is_none() && named(Signal::Logs).is_none() {
        return Decision { config: None, warnings };
    }
    if var("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
        return Decision { config: None, warnings };
    }
    let mut on = |signal: Signal| -> bool {
        let Some(endpoint) = named(signal) else { return false };
        if !exporter_is_otlp(var(signal.exporter_var()).as_deref(), signal, &mut warnings) {
            return false;
        }
        let protocol_var = format!("OTEL_EXPORTER_OTLP_{}_PROTOCOL", signal.name());
        let protocol = var(&protocol_var)
            .map(|p| (protocol_var, p))
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(), p)));
        if let Some((name, protocol)) = protocol.filter(|(_, p)| p.trim() != PROTOCOL) {
            warnings.push(format!(
                "telemetry: {name} is {:?}: jobenv exports {PROTOCOL} only; no {} are exported",
                crate::error::cut(&protocol, crate::error::SHOWN_CHARS),
                signal.name().to_lowercase()
            ));
            return false;
        }
        // Never shown: an endpoint may carry credentials.
        if !Url::parse(&endpoint).is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.has_host()) {
            let which = match var(&format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.name())) {
                Some(_) => format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.name()),
                None => "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            };
            warnings.push(format!(
                "telemetry: {which} (value not shown) is not an http:// or https:// URL; no {} are exported",
                signal.name().to_lowercase()
            ));
            return false;
        }
        true
    };
    let (traces, logs) = (on(Signal::Traces), on(Signal::Logs));
    if !traces && !logs {
        return Decision { config: None, warnings };
    }
    let file_headers = match &options.headers_file {
        None => Vec::new(),
        Some(path) => match read_headers_file(path) {
            Ok(headers) => headers,
            Err(why) => {
                warnings.push(format!("telemetry: {why}; nothing is exported"));
                return Decision { config: None, warnings };
            }
        },
    };
    let mut secrets: Vec<String> = Vec::new();
    let mut short = false;
    let mut add_secret = |value: &str| {
        // As for the node's secrets: a value this short is in too much else (`ops` in `stops`)
        // to be cut out of every exported line, and too short to be worth it.
        if value.len() < crate::run::redact::MIN_SECRET_LEN {
            short |= !value.is_empty();
            return;
        }
        secrets.push(value.to_owned());
        secrets.extend(
            value
                .split_whitespace()
                .filter(|word| word.len() >= crate::run::redact::MIN_SECRET_LINE_LEN && *word != value)
                .map(str::to_owned),
        );
    };
    for (_, value) in &file_headers {
        add_secret(value);
    }
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
    ] {
        if let Some(raw) = var(name) {
            // The whole list too: a program may print the variable as it is.
            add_secret(&raw);
            for (_, value) in parse_list(&raw).into_iter().flatten() {
                add_secret(&value);
            }
        }
    }
    if short {
        warnings.push(format!(
            "telemetry: a header value is shorter than {} bytes: it is not redacted from the program's output or the exported lines",
            crate::run::redact::MIN_SECRET_LEN
        ));
    }
    let (mut service_name, resource) = match var("OTEL_RESOURCE_ATTRIBUTES").map(|raw| parse_list(&raw)) {
        None => (None, Vec::new()),
        Some(Some(attributes)) => {
            let name = attributes
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone());
            (
                name,
                attributes.into_iter().filter(|(k, _)| k != "service.name").collect(),
            )
        }
        Some(None) => {
            warnings
                .push("telemetry: OTEL_RESOURCE_ATTRIBUTES is not a list of key=value pairs: it is ignored".to_owned());
            (None, Vec::new())
        }
    };
    if let Some(name) = var("OTEL_SERVICE_NAME") {
        service_name = Some(name);
    }
    let timeout = [Signal::Traces, Signal::Logs]
        .into_iter()
        .map(|signal| {
            var(&format!("OTEL_EXPORTER_OTLP_{}_TIMEOUT", signal.name()))
                .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
                .and_then(|ms| ms.trim().parse::<u64>().ok())
                .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
        })
        .max()
        .unwrap_or(DEFAULT_TIMEOUT);
    Decision {
        config: Some(Config {
            traces,
            logs,
            service_name: service_name.unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned()),
            resource,
            file_headers: Hidden(file_headers),
            secrets: Hidden(secrets),
            timeout,
            flush: options.flush,
        }),
        warnings,
    }
}

/// The specification's default export timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `OTEL_{TRACES,LOGS}_EXPORTER`: unset or a list naming `otlp` exports; `none` does not; any
/// other exporter is not one jobenv has (one line says so).
fn exporter_is_otlp(value: Option<&str>, signal: Signal, warnings: &mut Vec<String>) -> bool {
    let Some(value) = value else { return true };
    let names: Vec<&str> = value.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    if names.contains(&"otlp") {
        return true;
    }
    if !names.iter().all(|name| *name == "none") {
        warnings.push(format!(
            "telemetry: {} is {:?}: jobenv has only the otlp exporter; no {} are exported",
            signal.exporter_var(),
            crate::error::cut(value, crate::error::SHOWN_CHARS),
            signal.name().to_lowercase()
        ));
    }
    false
}

/// A list of `key=value` pairs separated by commas, values percent-decoded (the form of
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`); blanks around keys and values
/// are dropped. `None` when an entry is not such a pair.
pub fn parse_list(raw: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    for entry in raw.split(',') {
        if entry.trim().is_empty() {
            continue;
        }
        let (key, value) = entry.split_once('=')?;
        let key = key.trim();
        if key.is_empty() {
            return None;
        }
        let value = percent_decode_str(value.trim()).decode_utf8().ok()?;
        pairs.push((key.to_owned(), value.into_owned()));
    }
    Some(pairs)
}

/// The headers file: one list in `OTEL_EXPORTER_OTLP_HEADERS`' form (lines are joined with
/// commas, so one header per line works too). Every problem is said without the contents.
fn read_headers_file(path: &Path) -> Result<Vec<(String, String)>, String> {
    use std::io::Read;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the headers file {shown}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_HEADERS_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the headers file {shown}: {e}"))?;
    if text.len() as u64 > MAX_HEADERS_FILE {
        return Err(format!(
            "the headers file {shown} is larger than {MAX_HEADERS_FILE} bytes"
        ));
    }
    let joined = text.lines().collect::<Vec<_>>().join(",");
    let headers = parse_list(&joined)
        .ok_or_else(|| format!("the headers file {shown} is not a list of key=value pairs (contents not shown)"))?;
    let valid = |(key, value): &(String, String)| {
        reqwest::header::HeaderName::from_bytes(key.as_bytes()).is_ok()
            && reqwest::header::HeaderValue::from_str(value).is_ok()
    };
    if !headers.iter().all(valid) {
        return Err(format!(
            "the headers file {shown} names a header that HTTP cannot carry (contents not shown)"
        ));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn decided(vars: &[(&str, &str)], options: &Options) -> Decision {
        let map: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        decide(&|name| map.get(name).cloned(), options)
    }

    fn on(vars: &[(&str, &str)]) -> (bool, bool, Vec<String>) {
        let d = decided(vars, &Options::default());
        let (traces, logs) = d.config.as_ref().map_or((false, false), |c| (c.traces, c.logs));
        (traces, logs, d.warnings)
    }

    const ENDPOINT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");

    #[test]
    fn nothing_without_an_endpoint_and_each_signal_by_its_own() {
        assert_eq!(on(&[]), (false, false, vec![]));
        assert_eq!(on(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]), (false, false, vec![]));
        // The rest of the variables alone turn nothing on.
        assert_eq!(
            on(&[("OTEL_SERVICE_NAME", "x"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            (false, false, vec![])
        );
        assert_eq!(on(&[ENDPOINT]), (true, true, vec![]));
        assert_eq!(
            on(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c/v1/traces")]),
            (true, false, vec![])
        );
        assert_eq!(
            on(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "https://c/v1/logs")]),
            (false, true, vec![])
        );
    }

    #[test]
    fn disabled_and_none_exporters_turn_it_off() {
        assert_eq!(on(&[ENDPOINT, ("OTEL_SDK_DISABLED", "true")]), (false, false, vec![]));
        assert_eq!(on(&[ENDPOINT, ("OTEL_SDK_DISABLED", "TRUE")]), (false, false, vec![]));
        assert_eq!(on(&[ENDPOINT, ("OTEL_SDK_DISABLED", "false")]), (true, true, vec![]));
        assert_eq!(on(&[ENDPOINT, ("OTEL_TRACES_EXPORTER", "none")]), (false, true, vec![]));
        assert_eq!(on(&[ENDPOINT, ("OTEL_LOGS_EXPORTER", "none")]), (true, false, vec![]));
        assert_eq!(
            on(&[ENDPOINT, ("OTEL_LOGS_EXPORTER", "console,otlp")]),
            (true, true, vec![])
        );
        let (traces, logs, warnings) = on(&[ENDPOINT, ("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert_eq!((traces, logs), (false, true));
        assert_eq!(
            warnings,
            [
                "telemetry: OTEL_TRACES_EXPORTER is \"zipkin\": jobenv has only the otlp exporter; no traces are exported"
            ]
        );
    }

    #[test]
    fn only_http_protobuf_and_a_bad_endpoint_is_never_shown() {
        assert_eq!(
            on(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]),
            (true, true, vec![])
        );
        let (traces, logs, warnings) = on(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!((traces, logs), (false, false));
        assert_eq!(
            warnings,
            [
                "telemetry: OTEL_EXPORTER_OTLP_PROTOCOL is \"grpc\": jobenv exports http/protobuf only; no traces are exported",
                "telemetry: OTEL_EXPORTER_OTLP_PROTOCOL is \"grpc\": jobenv exports http/protobuf only; no logs are exported"
            ]
        );
        let (traces, logs, _) = on(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json")]);
        assert_eq!((traces, logs), (true, false));
        let (traces, logs, warnings) = on(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://user:pw@c/")]);
        assert_eq!((traces, logs), (false, false));
        assert!(!warnings.concat().contains("pw@"), "{warnings:?}");
        assert_eq!(
            warnings[0],
            "telemetry: OTEL_EXPORTER_OTLP_ENDPOINT (value not shown) is not an http:// or https:// URL; no traces are exported"
        );
    }

    #[test]
    fn the_service_name_and_the_resource_attributes() {
        let config = |vars: &[(&str, &str)]| decided(vars, &Options::default()).config.unwrap();
        let c = config(&[ENDPOINT]);
        assert_eq!((c.service_name.as_str(), c.resource.len()), ("fediversity-jobenv", 0));
        let c = config(&[
            ENDPOINT,
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.namespace=fediversity, service.name=from-attributes,deployment.environment.name=prod%20eu",
            ),
        ]);
        assert_eq!(c.service_name, "from-attributes");
        assert_eq!(
            c.resource,
            [
                ("service.namespace".to_owned(), "fediversity".to_owned()),
                ("deployment.environment.name".to_owned(), "prod eu".to_owned())
            ]
        );
        let c = config(&[
            ENDPOINT,
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes"),
            ("OTEL_SERVICE_NAME", "windmill-worker"),
        ]);
        assert_eq!(c.service_name, "windmill-worker");
        // As the NixOS module renders the operator's attributes (its test has the same list).
        let c = config(&[
            ENDPOINT,
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=prod%2C%20eu%3D1%20100%25,service.namespace=fediversity",
            ),
        ]);
        assert_eq!(
            c.resource[0],
            ("deployment.environment.name".to_owned(), "prod, eu=1 100%".to_owned())
        );
        let d = decided(
            &[ENDPOINT, ("OTEL_RESOURCE_ATTRIBUTES", "a=1,oops")],
            &Options::default(),
        );
        assert!(d.config.unwrap().resource.is_empty());
        assert_eq!(
            d.warnings,
            ["telemetry: OTEL_RESOURCE_ATTRIBUTES is not a list of key=value pairs: it is ignored"]
        );
    }

    #[test]
    fn header_values_and_their_long_words_are_secrets() {
        let c = decided(
            &[
                ENDPOINT,
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "Authorization=Bearer%20tok-0123456789,x-team=ops",
                ),
            ],
            &Options::default(),
        )
        .config
        .unwrap();
        let secrets = &c.secrets.0;
        for needle in [
            "Authorization=Bearer%20tok-0123456789,x-team=ops",
            "Bearer tok-0123456789",
            "tok-0123456789",
        ] {
            assert!(secrets.iter().any(|s| s == needle), "{needle}: {secrets:?}");
        }
        assert!(!secrets.iter().any(|s| s == "Bearer"), "{secrets:?}");
        // A value under 4 bytes is no needle (it would cut `ops` out of `stops` in every exported
        // line), and a warning says so without quoting it.
        assert!(!secrets.iter().any(|s| s == "ops"), "{secrets:?}");
        let d = decided(
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ops")],
            &Options::default(),
        );
        assert_eq!(
            d.warnings,
            [
                "telemetry: a header value is shorter than 4 bytes: it is not redacted from the program's output or the exported lines"
            ]
        );
        assert!(d.config.unwrap().secrets.0.iter().all(|s| s != "ops"));
        assert!(!format!("{c:?}").contains("tok-0123456789"), "{c:?}");
    }

    #[test]
    fn the_headers_file_is_read_only_when_something_is_exported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("headers");
        std::fs::write(
            &path,
            "authorization=Bearer%20file-key-0123456789\nx-scope-orgid = tenant-1\n",
        )
        .unwrap();
        let options = Options {
            headers_file: Some(path.clone()),
            ..Options::default()
        };
        let c = decided(&[ENDPOINT], &options).config.unwrap();
        assert_eq!(
            c.file_headers.0,
            [
                ("authorization".to_owned(), "Bearer file-key-0123456789".to_owned()),
                ("x-scope-orgid".to_owned(), "tenant-1".to_owned())
            ]
        );
        assert!(c.secrets.0.iter().any(|s| s == "file-key-0123456789"));
        // Without an endpoint the file is not looked at: a missing one says nothing.
        let missing = Options {
            headers_file: Some(dir.path().join("missing")),
            ..Options::default()
        };
        let d = decided(&[], &missing);
        assert!(d.config.is_none() && d.warnings.is_empty());
        // With one, a file that cannot be used turns export off, and its contents are never shown.
        let d = decided(&[ENDPOINT], &missing);
        assert!(d.config.is_none());
        assert!(
            d.warnings[0].starts_with("telemetry: cannot read the headers file "),
            "{:?}",
            d.warnings
        );
        std::fs::write(&path, "no-equals-sign-secret-value").unwrap();
        let d = decided(&[ENDPOINT], &options);
        assert!(d.config.is_none());
        assert!(!d.warnings.concat().contains("secret-value"), "{:?}", d.warnings);
        std::fs::write(&path, "bad header=x").unwrap();
        let d = decided(&[ENDPOINT], &options);
        assert!(
            d.warnings[0].ends_with("names a header that HTTP cannot carry (contents not shown); nothing is exported")
        );
    }

    #[test]
    fn the_timeout_is_the_variables_or_ten_seconds() {
        let c = |vars: &[(&str, &str)]| decided(vars, &Options::default()).config.unwrap().timeout;
        assert_eq!(c(&[ENDPOINT]), Duration::from_secs(10));
        assert_eq!(
            c(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_TIMEOUT", "500")]),
            Duration::from_millis(500)
        );
        assert_eq!(
            c(&[
                ENDPOINT,
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
                ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "800")
            ]),
            Duration::from_millis(800)
        );
    }
}
