//! A real tonic server on an ephemeral 127.0.0.1 port and a real tonic client, with a
//! hand-written service (what `tonic-build` would generate, without protoc): a unary
//! `Echo` and a client-streaming `Upload`, both counting what they handled.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::uri::PathAndQuery;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate::RateLimitLayer;
use tollgate::layer::Decisions;
use tonic::body::Body;
use tonic::client::Grpc as GrpcClient;
use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::{ClientStreamingService, Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

/// The request message.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Ping {
    #[prost(string, tag = "1")]
    pub(crate) text: String,
}

/// The response message.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Pong {
    #[prost(string, tag = "1")]
    pub(crate) text: String,
    /// How many request messages the handler read.
    #[prost(uint32, tag = "2")]
    pub(crate) messages: u32,
    /// What the handler found in the request's `Decisions` extension: the first
    /// policy's remaining quota.
    #[prost(uint64, optional, tag = "3")]
    pub(crate) remaining: Option<u64>,
}

const SERVICE: &str = "tollgate.test.Limited";
const ECHO: &str = "/tollgate.test.Limited/Echo";
const UPLOAD: &str = "/tollgate.test.Limited/Upload";

/// What the handlers did: calls that reached a handler, messages they read.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    calls: AtomicUsize,
    messages: AtomicUsize,
}

impl Counts {
    /// Calls that reached a handler.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Request messages read by the handlers.
    pub(crate) fn messages(&self) -> usize {
        self.messages.load(Ordering::SeqCst)
    }
}

/// The server side of the service, as tonic-build would generate it.
#[derive(Debug, Clone, Default)]
struct Limited {
    counts: Arc<Counts>,
}

impl NamedService for Limited {
    const NAME: &'static str = SERVICE;
}

impl Service<http::Request<Body>> for Limited {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let counts = self.counts.clone();
        match request.uri().path() {
            ECHO => Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::<Pong, Ping>::default());
                Ok(grpc.unary(Echo(counts), request).await)
            }),
            UPLOAD => Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::<Pong, Ping>::default());
                Ok(grpc.client_streaming(Upload(counts), request).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

/// Unary: answers with the request's text and the caller's address; the text "wrong"
/// is answered with `UNAUTHENTICATED` (a failed login).
struct Echo(Arc<Counts>);

impl UnaryService<Ping> for Echo {
    type Response = Pong;
    type Future = BoxFuture<Response<Pong>, Status>;

    fn call(&mut self, request: Request<Ping>) -> Self::Future {
        let counts = self.0.clone();
        Box::pin(async move {
            counts.calls.fetch_add(1, Ordering::SeqCst);
            counts.messages.fetch_add(1, Ordering::SeqCst);
            if request.get_ref().text == "wrong" {
                return Err(Status::unauthenticated("wrong password"));
            }
            let peer = request
                .remote_addr()
                .map(|addr| addr.ip().to_string())
                .unwrap_or_default();
            let remaining = request
                .extensions()
                .get::<Decisions>()
                .and_then(|decisions| decisions.first())
                .map(|decision| decision.remaining);
            Ok(Response::new(Pong {
                text: format!("{} from {peer}", request.into_inner().text),
                messages: 1,
                remaining,
            }))
        })
    }
}

/// Client streaming: reads every message, answers with how many there were.
struct Upload(Arc<Counts>);

impl ClientStreamingService<Ping> for Upload {
    type Response = Pong;
    type Future = BoxFuture<Response<Pong>, Status>;

    fn call(&mut self, request: Request<Streaming<Ping>>) -> Self::Future {
        let counts = self.0.clone();
        Box::pin(async move {
            counts.calls.fetch_add(1, Ordering::SeqCst);
            let mut stream = request.into_inner();
            let mut read = 0;
            while let Some(ping) = stream.message().await? {
                counts.messages.fetch_add(1, Ordering::SeqCst);
                read += 1;
                drop(ping);
            }
            Ok(Response::new(Pong {
                text: "uploaded".to_string(),
                messages: read,
                remaining: None,
            }))
        })
    }
}

/// A running tonic server with `layer` in front of the service; aborted on drop.
pub(crate) struct GrpcServer {
    pub(crate) addr: SocketAddr,
    pub(crate) counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl GrpcServer {
    pub(crate) async fn start(layer: RateLimitLayer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let service = Limited::default();
        let counts = service.counts.clone();
        let task = tokio::spawn(async move {
            Server::builder()
                .layer(layer)
                .add_service(service)
                .serve_with_incoming(TcpIncoming::from(listener))
                .await
                .expect("serve");
        });
        Self { addr, counts, task }
    }

    /// A client connected from 127.0.0.1.
    pub(crate) async fn client(&self) -> GrpcTestClient {
        self.client_from(None).await
    }

    /// A client whose connections leave from `local` (any 127.0.0.0/8 address works
    /// on Linux), so the server sees a different peer.
    pub(crate) async fn client_from(&self, local: Option<IpAddr>) -> GrpcTestClient {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .local_address(local)
            .connect()
            .await
            .expect("connect");
        GrpcTestClient {
            grpc: GrpcClient::new(channel),
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The client side of the service, as tonic-build would generate it.
#[derive(Debug, Clone)]
pub(crate) struct GrpcTestClient {
    grpc: GrpcClient<Channel>,
}

impl GrpcTestClient {
    /// A unary `Echo` call.
    pub(crate) async fn echo(&mut self, request: Request<Ping>) -> Result<Response<Pong>, Status> {
        self.grpc
            .ready()
            .await
            .map_err(|error| Status::unavailable(error.to_string()))?;
        self.grpc
            .unary(
                request,
                PathAndQuery::from_static(ECHO),
                ProstCodec::<Ping, Pong>::default(),
            )
            .await
    }

    /// A client-streaming `Upload` call sending `messages`.
    pub(crate) async fn upload<S>(&mut self, messages: S) -> Result<Response<Pong>, Status>
    where
        S: Stream<Item = Ping> + Send + 'static,
    {
        self.grpc
            .ready()
            .await
            .map_err(|error| Status::unavailable(error.to_string()))?;
        self.grpc
            .client_streaming(
                Request::new(messages),
                PathAndQuery::from_static(UPLOAD),
                ProstCodec::<Ping, Pong>::default(),
            )
            .await
    }
}

/// A `Ping` request with `text`.
pub(crate) fn ping(text: &str) -> Request<Ping> {
    Request::new(Ping {
        text: text.to_string(),
    })
}
