//! HTTP for test code: a blocking call (OpenBao reads, checking a token against the fake), on a
//! runtime of its own so it works from any test thread, and [`serve`], which runs a receiver.

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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client");
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

/// An axum app served on a loopback port by a thread of its own, until dropped.
pub struct Served {
    pub addr: std::net::SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

pub fn serve(name: &str, app: axum::Router) -> Served {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.set_nonblocking(true).expect("non-blocking listener");
    let addr = listener.local_addr().expect("the listener's address");
    let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                tokio::select! {
                    _ = axum::serve(listener, app).into_future() => {}
                    _ = stop => {}
                }
            });
        })
        .expect("start the server thread");
    Served {
        addr,
        shutdown: Some(shutdown),
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
