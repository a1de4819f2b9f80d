//! A real axum server on an ephemeral 127.0.0.1 port and a real HTTP/1 client.

use std::net::SocketAddr;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running server; aborted on drop.
#[derive(Debug)]
pub struct Server {
    /// Where it listens, on 127.0.0.1.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// What came back.
#[derive(Debug)]
pub struct Reply {
    /// The response's status.
    pub status: StatusCode,
    /// The response's headers.
    pub headers: HeaderMap,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
}

impl Reply {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

impl Server {
    /// Serves `app` with `ConnectInfo<SocketAddr>` so peer-IP keys work.
    pub async fn start(app: Router) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .expect("serve");
        });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self { addr, task, client }
    }

    /// Sends `request` (its URI is a path; the server address is filled in).
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        let response = self.open(request).await.expect("request");
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// Sends `request` and returns the response as soon as its head arrives, its body
    /// unread; an error when the server closed the connection instead of answering.
    pub async fn open(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        parts.uri = format!("http://{}{path}", self.addr).parse().expect("uri");
        self.client.request(Request::from_parts(parts, body)).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(Request::get(path).body(Full::default()).expect("request"))
            .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}
