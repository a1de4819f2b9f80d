//! A tonic gRPC server behind `RateLimitLayer`, called until it answers `RESOURCE_EXHAUSTED`.
//!
//! Run with: `cargo run --example tonic --features tonic`
//!
//! The server limits each caller's IP address (read from tonic's `TcpConnectInfo`,
//! hence the `tonic` feature) to 3 calls a minute. The client makes 5 calls and prints
//! what came back: the rate-limit metadata of admitted calls, then the status code,
//! message and `grpc-retry-pushback-ms` of rejected ones. Server and client run in
//! this one process; it exits by itself.
//!
//! The service is hand-written (what `tonic-build` generates from a `.proto`), so the
//! example needs no `protoc`.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use tokio::net::TcpListener;
use tollgate::{Policy, Quota, RateLimitLayer, key};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service};
use tonic::metadata::MetadataMap;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// `message HelloRequest { string name = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct HelloRequest {
    #[prost(string, tag = "1")]
    name: String,
}

/// `message HelloReply { string message = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct HelloReply {
    #[prost(string, tag = "1")]
    message: String,
}

const SAY_HELLO: &str = "/example.Greeter/SayHello";

/// `service Greeter { rpc SayHello(HelloRequest) returns (HelloReply); }`, server side.
#[derive(Clone)]
struct Greeter;

impl NamedService for Greeter {
    const NAME: &'static str = "example.Greeter";
}

impl Service<http::Request<Body>> for Greeter {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() == SAY_HELLO {
            Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::<HelloReply, HelloRequest>::default());
                Ok(grpc.unary(SayHello, request).await)
            })
        } else {
            Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) })
        }
    }
}

/// The `SayHello` handler.
struct SayHello;

impl UnaryService<HelloRequest> for SayHello {
    type Response = HelloReply;
    type Future = BoxFuture<Response<HelloReply>, Status>;

    fn call(&mut self, request: Request<HelloRequest>) -> Self::Future {
        let name = request.into_inner().name;
        Box::pin(async move {
            Ok(Response::new(HelloReply {
                message: format!("Hello, {name}!"),
            }))
        })
    }
}

fn text<'a>(metadata: &'a MetadataMap, name: &str) -> &'a str {
    metadata
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("per-caller", Quota::per_minute(3))?.key(key::peer_ip()))
        .build()?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(Greeter)
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                let _ = stopped.await;
            }),
    );
    println!("gRPC server on {addr}: 3 calls a minute per caller IP\n");

    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = tonic::client::Grpc::new(channel);
    for call in 1..=5 {
        client.ready().await?;
        let request = Request::new(HelloRequest {
            name: format!("caller #{call}"),
        });
        let path = PathAndQuery::from_static(SAY_HELLO);
        let codec = ProstCodec::<HelloRequest, HelloReply>::default();
        match client.unary(request, path, codec).await {
            Ok(reply) => println!(
                "call {call}: OK {:?}\n        ratelimit: {}",
                reply.get_ref().message,
                text(reply.metadata(), "ratelimit"),
            ),
            Err(status) => {
                let pushback = text(status.metadata(), "grpc-retry-pushback-ms")
                    .parse::<u64>()
                    .map(Duration::from_millis);
                println!(
                    "call {call}: {:?} {:?}\n        grpc-retry-pushback-ms: {}, ratelimit: {}",
                    status.code(),
                    status.message(),
                    text(status.metadata(), "grpc-retry-pushback-ms"),
                    text(status.metadata(), "ratelimit"),
                );
                if let Ok(wait) = pushback {
                    println!("        a well-behaved client waits {wait:.1?} before calling again");
                }
            }
        }
    }

    drop(client);
    let _ = stop.send(());
    server.await??;
    Ok(())
}
