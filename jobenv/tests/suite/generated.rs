//! Files generated from jobenv's own definitions and checked in beside what reads them (the NixOS
//! module's names, the JSON Schemas under schemas/): each is
//! compared with what jobenv generates now, so a change to jobenv that is not carried over fails
//! here. `JOBENV_UPDATE_GENERATED=1 cargo test -p fediversity-jobenv --test suite generated`
//! writes them anew.

use std::path::Path;

pub(crate) fn check(path: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    if std::env::var_os("JOBENV_UPDATE_GENERATED").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: run JOBENV_UPDATE_GENERATED=1 cargo test -p fediversity-jobenv --test suite generated\n--- checked in\n{checked_in}\n--- generated\n{generated}",
        path.display()
    );
}

/// The NixOS module's copy of jobenv's names and defaults (see `jobenv::module_names`).
#[test]
fn the_module_reads_jobenvs_names_and_defaults_as_they_are() {
    let generated = jobenv::module_names();
    // Not vacuous: the lists are there, with what the module relies on.
    let document: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert!(
        document["nodeControl"]
            .as_array()
            .unwrap()
            .iter()
            .any(|name| name == "DEPLOYMENT_ROOT"),
        "{generated}"
    );
    assert!(
        document["nodeTools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|name| name == "TF_INPUT"),
        "{generated}"
    );
    assert_eq!(document["defaults"]["graceSeconds"], 3);
    check("nixos-module/jobenv-names.json", &generated);
}

/// The front-end contract (see `jobenv::schema`): each file under schemas/ is what jobenv
/// generates from its types now.
#[test]
fn the_schemas_are_generated_from_jobenvs_types() {
    for (path, generate) in jobenv::schema::FILES {
        let schema = generate();
        // Not vacuous: each describes an object with properties of its own.
        assert!(
            schema["properties"].is_object() || schema["anyOf"].is_array() || schema["oneOf"].is_array(),
            "{path}: {schema}"
        );
        check(path, &jobenv::schema::text(&schema));
    }
}
