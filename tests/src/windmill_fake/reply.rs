//! Requests and answers in Windmill's forms (the OpenAPI's error table and the general rules
//! observed on CE 1.743.0): errors are `text/plain` `<Kind>: <message>`, JSON bodies need their
//! content type, a token comes as a bearer or the `token` cookie.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::Value;

pub(super) type Reply = Response<Full<Bytes>>;

/// A plain-text answer: errors are `text/plain` `<Kind>: <message>` (OpenAPI error table,
/// observed general rules); so are tokens, hashes and job ids on success.
pub(super) fn text(status: u16, body: impl Into<String>) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.into())))
        .expect("response")
}

pub(super) fn json_reply(value: &Value) -> Reply {
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())))
        .expect("response")
}

/// 404 with an empty body: what Windmill answers a route it does not have (server code:
/// `static_assets::serve_path` for every unmatched `api/` path).
pub(super) fn absent() -> Reply {
    Response::builder()
        .status(404)
        .body(Full::new(Bytes::new()))
        .expect("response")
}

/// 200 with an empty body and no content type (settings POST, observed).
pub(super) fn empty() -> Reply {
    Response::builder()
        .status(200)
        .body(Full::new(Bytes::new()))
        .expect("response")
}

/// The request's token. Order of `extract_token` (OpenAPI): `Authorization: Bearer`, then the
/// `token` cookie.
pub(super) fn bearer(request: &Request<Incoming>) -> Option<String> {
    let headers = request.headers();
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        if let Some(token) = auth.strip_prefix("Bearer ") {
            return Some(token.trim().to_owned());
        }
    }
    headers.get("cookie").and_then(|v| v.to_str().ok()).and_then(|cookies| {
        cookies
            .split(';')
            .map(str::trim)
            .find_map(|c| c.strip_prefix("token="))
            .map(str::to_owned)
    })
}

/// One request, read in full, as the handlers see it.
pub(super) struct Call<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The query string, without the `?`.
    pub query: &'a str,
    pub token: Option<&'a str>,
    pub is_json: bool,
    pub body: &'a str,
}

impl Call<'_> {
    /// The value of the query parameter `name`, if given.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    }

    /// JSON body rules (observed): no JSON content type → 415; not JSON → 400; the wrong
    /// shape → 422.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Reply> {
        if !self.is_json {
            return Err(text(415, "Expected request with `Content-Type: application/json`"));
        }
        let value: Value = serde_json::from_str(self.body)
            .map_err(|e| text(400, format!("Failed to parse the request body as JSON: {e}")))?;
        serde_json::from_value(value).map_err(|e| {
            text(
                422,
                format!("Failed to deserialize the JSON body into the target type: {e}"),
            )
        })
    }
}

/// 32 alphanumerics, like `rd_string(32)` (server code).
pub(super) fn random_token() -> String {
    crate::servers::random_string(32)
}
