//! Shared by the examples: serve an axum app on 127.0.0.1 and fire requests at it.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;

/// An app served on an ephemeral port, with a client to call it.
pub struct Demo {
    pub addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    server: tokio::task::JoinHandle<()>,
}

impl Demo {
    pub async fn start(app: Router) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let service = app.into_make_service_with_connect_info::<SocketAddr>();
            let _ = axum::serve(listener, service).await;
        });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(Self {
            addr,
            client,
            server,
        })
    }

    /// Sends `request` (a path-only URI) and prints one line: what was sent, the status
    /// and the given headers.
    pub async fn show(
        &self,
        request: Request<Full<Bytes>>,
        headers: &[&str],
    ) -> Result<u16, Box<dyn std::error::Error>> {
        let label = format!("{} {}", request.method(), request.uri());
        let reply = self.send(request).await?;
        let shown: Vec<String> = headers
            .iter()
            .map(|name| format!("{name}: {}", reply.header(name)))
            .collect();
        let status = reply.status.as_u16();
        println!("{label:<28} {status}  {}", shown.join("  "));
        Ok(status)
    }

    /// Sends `request` (a path-only URI) and reads the whole response.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Reply, Box<dyn std::error::Error>> {
        let (mut parts, body) = request.into_parts();
        parts.uri = format!("http://{}{}", self.addr, parts.uri).parse()?;
        let response = self
            .client
            .request(Request::from_parts(parts, body))
            .await?;
        let (parts, body) = response.into_parts();
        // Read to the end, so that the connection goes back to the client's pool.
        let _ = body.collect().await?;
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
        })
    }

    /// Sends `request` (a path-only URI) and returns the response's header `name`
    /// (empty when absent).
    pub async fn header(
        &self,
        request: Request<Full<Bytes>>,
        name: &str,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let reply = self.send(request).await?;
        Ok(reply
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned())
    }
}

/// A response's status and headers (its body was read and dropped).
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

impl Reply {
    /// A header's value as text, "-" when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.server.abort();
    }
}
