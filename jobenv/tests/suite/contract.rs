//! The front-end contract as JSON Schemas (`schemas/`): the manual's payload example is the
//! shipped one (that every JSON example of the manual fits its schema is the test kit's
//! `tests/tests/suite/docs.rs`), and `schema payload` prints what one node accepts. (That what jobenv writes fits them is
//! checked by the test kit wherever it reads a `result.json`, a journal entry or an event; that
//! the files are what jobenv generates, by `generated.rs`.)

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::schemas::Contract;
use serde_json::{Value, json};

/// The payload example of the manual's "What a front-end sends" (docs/front-ends/contract.md):
/// the first ```json block of that section.
fn manual_payload_example() -> Value {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/front-ends/contract.md")).unwrap();
    let section = &page[page.find("\n## What a front-end sends\n").expect("the section")..];
    let start = section
        .find("```json payload\n")
        .expect("a payload example in the section")
        + "```json payload\n".len();
    let end = start + section[start..].find("\n```").unwrap();
    serde_json::from_str(&section[start..end]).unwrap()
}

#[test]
fn the_examples_payload_is_the_manuals_and_fits_the_schema() {
    let example: Value = serde_json::from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/front-end-payload.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(manual_payload_example(), example);
    Contract::Payload.check(&example);
    // Positive control: the schema refuses what jobenv refuses for its grammar.
    let mut bad = example;
    bad["NAMESPACE"] = json!("Bad NS");
    assert!(!Contract::Payload.errors(&bad).is_empty());
}

/// `schema payload`: the node's attributes as an enum, its declared keys with their
/// descriptions, nothing it drops; a payload that fits is one jobenv runs.
#[test]
fn schema_payload_prints_what_this_node_accepts() {
    let mut f = Fixture::new();
    f.program("web", "apply", "echo ran").attribute("db");
    f.declare("DOMAIN", Some("example.net"))
        .declare("REPLICAS", None)
        .declare_node_only("HOSTING_CONFIG", None)
        .declare("FROM_NODE", None);
    f.node("FROM_NODE", "node's")
        .secret("API_TOKEN", "tok-SECRET-0123456789")
        .declare("API_TOKEN", None);
    let done = f
        .jobenv(jobenv_bin!())
        .args(["schema", "payload"])
        .expect_success()
        .expect_stderr("")
        .expect_nowhere("a secret", "tok-SECRET")
        .run();
    let schema: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["ATTRIBUTE"]["enum"], json!(["web", "db"]));
    assert_eq!(schema["properties"]["DOMAIN"]["description"], "test key DOMAIN");
    assert_eq!(schema["properties"]["DOMAIN"]["default"], "example.net");
    let properties = schema["properties"].as_object().unwrap();
    for gone in [
        "HOSTING_CONFIG",
        "FROM_NODE",
        "API_TOKEN",
        "DEPLOYMENT_ROOT",
        "NIXPKGS",
        "EVENTS_URL",
        "EVENTS_ROW_ID",
        "EVENTS_SECRET",
    ] {
        assert!(!properties.contains_key(gone), "{gone} is in the node's schema");
    }
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let good = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DOMAIN": "site.example", "REPLICAS": 2});
    assert!(validator.is_valid(&good));
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&good)
        .expect_success()
        .expect_stdout("ran\n")
        .run();
    for refused in [
        json!({"ATTRIBUTE": "other", "NAMESPACE": "ns"}),
        json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "UNDECLARED": 1}),
        json!({"ATTRIBUTE": "web"}),
    ] {
        assert!(!validator.is_valid(&refused), "{refused}");
    }
    // The others are jobenv's own, the same as the files.
    for (what, contract) in [
        ("result", "result"),
        ("event-jobenv", "event-jobenv"),
        ("event-dd-0012", "event-dd-0012"),
        ("journal-entry", "journal-entry"),
    ] {
        let done = f.jobenv(jobenv_bin!()).args(["schema", what]).expect_success().run();
        let file = std::fs::read_to_string(format!(
            "{}/../schemas/{contract}.schema.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert_eq!(done.stdout, file, "{what}");
    }
    // A node whose files are broken: refused like `keys`, naming the file.
    let missing = f.path().join("missing-keys.json");
    f.jobenv(jobenv_bin!())
        .args(["schema", "payload"])
        .env("JOBENV_KEYS", &missing)
        .expect_code(2)
        .expect_stdout("")
        .expect_stderr(format!(
            "jobenv: error: keys file {} does not exist\n",
            missing.display()
        ))
        .run();
}
