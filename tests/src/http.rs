//! A blocking HTTP call for test code (OpenBao reads, checking a token against the fake), on
//! a runtime of its own so it works from any test thread.

use std::time::Duration;

pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub fn request(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("client");
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = client.request(method, url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_owned());
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = response.status().as_u16();
        let body = response.text().await.expect("body");
        Reply { status, body }
    })
}
