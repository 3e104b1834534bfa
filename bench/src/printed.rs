//! Which forms of a secret the redaction benchmark's program prints: every distinct form the
//! test kit knows (`tests/src/json_forms.rs`, written apart from the code under test): as it
//! is, as Rust's `Debug` writes it, JSON-escaped as serde_json, Python's `json.dumps`, PHP's
//! `json_encode`, Go's `encoding/json` and .NET write it, hex digits in either case; quoted as
//! bash and `shlex.quote` quote it; percent-encoded and XML- and HTML-escaped as URL and markup
//! libraries write it; and in base64 at each byte offset, in both alphabets, with and without
//! padding, and wrapped.
//!
//! Shared by the benchmark and `bench-generate` (included by path), so what the one expects
//! is what the other prints.

use fediversity_testkit::json_forms::{every_form, printed_forms as tool_forms};

/// Without newlines (`one_line`), the forms that hold a raw newline (a multi-line key as it is,
/// wrapped base64) are left out: that output must stay one line.
pub fn printed_forms(secret: &str, one_line: bool) -> Vec<String> {
    let mut forms = every_form(secret);
    forms.extend(tool_forms(secret));
    forms.sort();
    forms.dedup();
    forms
        .into_iter()
        .filter(|form| !(one_line && form.contains('\n')))
        .collect()
}
