//! The layer in front of a real tonic server over real TCP, with a real tonic client:
//! `RESOURCE_EXHAUSTED` with a retry pushback, rate-limit metadata, a client-streaming
//! call rejected without its body being read, fail-closed `UNAVAILABLE`, keys from
//! metadata and from the TCP peer (tonic's `TcpConnectInfo`), and the exact wire shape
//! of a rejection (trailers-only HTTP 200).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prost::Message as _;
use tollgate::clock::ManualClock;
use tollgate::layer::FailMode;
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key};
use tonic::codegen::tokio_stream::{self, StreamExt as _};
use tonic::{Code, Status};

use crate::broken_store::broken_layer;
use crate::grpc_server::{GrpcServer, Ping, ping};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang (a rejected call waiting on its unread body) into
/// a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

fn layer(policy: Policy, clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
}

fn per_minute(name: &str, n: u64) -> Policy {
    Policy::new(name, Quota::per_minute(n))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
}

/// A metadata value of a status or response as text ("" when absent).
fn meta<'a>(metadata: &'a tonic::metadata::MetadataMap, name: &str) -> &'a str {
    metadata
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn unary_calls_are_admitted_up_to_the_limit_then_resource_exhausted() {
    let clock = ManualClock::new(BASE);
    let server = GrpcServer::start(layer(per_minute("api", 2), &clock)).await;
    let mut client = server.client().await;

    let first = client.echo(ping("hello")).await.expect("admitted");
    assert_eq!(first.get_ref().text, "hello from 127.0.0.1");
    assert_eq!(
        first.get_ref().remaining,
        Some(1),
        "the handler sees the decision"
    );
    assert_eq!(
        meta(first.metadata(), "ratelimit-policy"),
        r#""api";q=2;w=60"#
    );
    assert_eq!(meta(first.metadata(), "ratelimit"), r#""api";r=1;t=60"#);

    clock.advance(Duration::from_millis(30_500));
    let second = client.echo(ping("again")).await.expect("admitted");
    assert_eq!(meta(second.metadata(), "ratelimit"), r#""api";r=0;t=30"#);

    let status = client
        .echo(ping("one too many"))
        .await
        .expect_err("rejected");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.message(),
        "rate limit exceeded, retry after 29500 ms"
    );
    assert_eq!(meta(status.metadata(), "grpc-retry-pushback-ms"), "29500");
    assert_eq!(meta(status.metadata(), "ratelimit"), r#""api";r=0;t=30"#);
    assert_eq!(
        meta(status.metadata(), "ratelimit-policy"),
        r#""api";q=2;w=60"#
    );
    assert_eq!(
        server.counts.calls(),
        2,
        "the rejected call never reached the handler"
    );

    // The next window admits again, on the same connection.
    clock.advance(Duration::from_secs(30));
    let later = client
        .echo(ping("later"))
        .await
        .expect("admitted in the next window");
    assert_eq!(meta(later.metadata(), "ratelimit"), r#""api";r=1;t=60"#);
}

#[tokio::test]
async fn a_rejected_client_stream_is_answered_without_its_body_being_read() {
    let clock = ManualClock::new(BASE);
    let server = GrpcServer::start(layer(per_minute("uploads", 1), &clock)).await;
    let mut client = server.client().await;
    let pings = |n: usize| {
        (0..n)
            .map(|i| Ping {
                text: format!("part {i}"),
            })
            .collect::<Vec<_>>()
    };

    let admitted = client
        .upload(tokio_stream::iter(pings(3)))
        .await
        .expect("admitted");
    assert_eq!(admitted.get_ref().messages, 3);
    assert_eq!(
        meta(admitted.metadata(), "ratelimit"),
        r#""uploads";r=0;t=60"#
    );
    assert_eq!((server.counts.calls(), server.counts.messages()), (1, 3));

    // This upload never ends: two messages, then the client stream stays open. Only a
    // layer that answers without reading the body can answer it.
    let endless = tokio_stream::iter(pings(2)).chain(tokio_stream::pending());
    let status = tokio::time::timeout(HANG, client.upload(endless))
        .await
        .expect("the rejection does not wait for the request body")
        .expect_err("rejected");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.message(),
        "rate limit exceeded, retry after 60000 ms"
    );
    assert_eq!(meta(status.metadata(), "grpc-retry-pushback-ms"), "60000");
    assert_eq!(
        meta(status.metadata(), "ratelimit"),
        r#""uploads";r=0;t=60"#
    );
    assert_eq!(
        (server.counts.calls(), server.counts.messages()),
        (1, 3),
        "the handler neither ran nor read a message of the rejected stream"
    );

    // The connection is still good for the next call.
    let status = client
        .echo(ping("still here"))
        .await
        .expect_err("still limited");
    assert_eq!(status.code(), Code::ResourceExhausted);
}

#[tokio::test]
async fn a_rejection_is_a_trailers_only_http_200_on_the_wire() {
    let clock = ManualClock::new(BASE);
    let server = GrpcServer::start(layer(per_minute("api", 1), &clock)).await;
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let call = || {
        // One length-prefixed, uncompressed message.
        let message = Ping {
            text: "raw".to_string(),
        }
        .encode_to_vec();
        let mut frame = BytesMut::with_capacity(5 + message.len());
        frame.put_u8(0);
        frame.put_u32(u32::try_from(message.len()).expect("small message"));
        frame.put_slice(&message);
        http::Request::post(format!("http://{}/tollgate.test.Limited/Echo", server.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(frame.freeze()))
            .expect("request")
    };

    let admitted = client.request(call()).await.expect("response");
    assert_eq!(admitted.status(), http::StatusCode::OK);
    assert!(
        admitted.headers().get("grpc-status").is_none(),
        "a real answer has its status in the trailers"
    );
    let trailers = admitted
        .into_body()
        .collect()
        .await
        .expect("body")
        .trailers()
        .cloned();
    assert_eq!(
        trailers
            .expect("trailers")
            .get("grpc-status")
            .expect("status"),
        "0"
    );

    let rejected = client.request(call()).await.expect("response");
    let (parts, body) = rejected.into_parts();
    assert_eq!(
        parts.status,
        http::StatusCode::OK,
        "gRPC rejections are never a bare 429"
    );
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|v| v.to_str().expect("ascii").to_string())
    };
    assert_eq!(header("content-type").as_deref(), Some("application/grpc"));
    assert_eq!(header("grpc-status").as_deref(), Some("8"));
    assert_eq!(
        header("grpc-message").as_deref(),
        Some("rate limit exceeded, retry after 60000 ms")
    );
    assert_eq!(header("grpc-retry-pushback-ms").as_deref(), Some("60000"));
    assert_eq!(header("ratelimit").as_deref(), Some(r#""api";r=0;t=60"#));
    assert_eq!(
        header("ratelimit-policy").as_deref(),
        Some(r#""api";q=1;w=60"#)
    );
    let collected = body.collect().await.expect("body");
    assert!(
        collected.trailers().is_none(),
        "trailers-only: everything is in the headers"
    );
    assert_eq!(collected.to_bytes(), Bytes::new());
    assert_eq!(server.counts.calls(), 1);
}

#[tokio::test]
async fn a_failing_store_fails_closed_as_unavailable_or_open_as_admitted() {
    let store_calls = Arc::new(AtomicUsize::new(0));
    let broken = || broken_layer(per_minute("api", 1), &store_calls);

    let closed = GrpcServer::start(broken().on_store_error(FailMode::Closed)).await;
    let mut client = closed.client().await;
    let status = client.echo(ping("hello")).await.expect_err("fails closed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "rate limiter unavailable, retry after 1000 ms"
    );
    assert_eq!(meta(status.metadata(), "grpc-retry-pushback-ms"), "1000");
    assert_eq!(closed.counts.calls(), 0);

    let open = GrpcServer::start(broken()).await;
    let mut client = open.client().await;
    for _ in 0..3 {
        let reply = client.echo(ping("hello")).await.expect("fails open");
        assert!(
            reply.metadata().get("ratelimit").is_none(),
            "no decision, no headers"
        );
        assert_eq!(reply.get_ref().remaining, None);
    }
    assert_eq!(open.counts.calls(), 3);
    assert_eq!(store_calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn metadata_keys_separate_callers_and_deny_answers_permission_denied() {
    let clock = ManualClock::new(BASE);
    let policy = per_minute("tenant", 1).key(key::header("x-api-key").expect("header name"));
    let layer = layer(policy, &clock)
        .deny(|parts: &http::request::Parts| parts.headers.contains_key("x-banned"));
    let server = GrpcServer::start(layer).await;
    let mut client = server.client().await;
    let as_tenant = |tenant: &'static str| {
        let mut request = ping(tenant);
        request
            .metadata_mut()
            .insert("x-api-key", tenant.parse().expect("ascii"));
        request
    };

    client
        .echo(as_tenant("alpha"))
        .await
        .expect("alpha's first call");
    let status = client
        .echo(as_tenant("alpha"))
        .await
        .expect_err("alpha is limited");
    assert_eq!(status.code(), Code::ResourceExhausted);
    client
        .echo(as_tenant("beta"))
        .await
        .expect("beta has its own quota");
    client
        .echo(ping("anonymous"))
        .await
        .expect("no key: the policy is skipped");

    let mut banned = as_tenant("gamma");
    banned
        .metadata_mut()
        .insert("x-banned", "1".parse().expect("ascii"));
    let status: Status = client.echo(banned).await.expect_err("denied");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(status.message(), "request denied");
    assert_eq!(server.counts.calls(), 3);
}

/// `key::peer_ip()` reads tonic's `TcpConnectInfo` (feature `tonic`); tonic inserts no
/// bare `SocketAddr`, so without it every call would go unlimited.
#[cfg(feature = "tonic")]
#[tokio::test]
async fn peer_ip_keys_by_the_tcp_peer_through_tonic_connect_info() {
    use std::net::{IpAddr, Ipv4Addr};

    let clock = ManualClock::new(BASE);
    let policy = per_minute("peer", 1).key(key::peer_ip());
    let server = GrpcServer::start(layer(policy, &clock)).await;
    let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    let mut first = server.client().await;
    assert_eq!(
        first
            .echo(ping("a"))
            .await
            .expect("admitted")
            .get_ref()
            .text,
        "a from 127.0.0.1"
    );
    let status = first.echo(ping("a")).await.expect_err("limited");
    assert_eq!(status.code(), Code::ResourceExhausted);

    let mut second = server.client_from(Some(other)).await;
    assert_eq!(
        second
            .echo(ping("b"))
            .await
            .expect("admitted")
            .get_ref()
            .text,
        "b from 127.0.0.2"
    );
    assert_eq!(
        second.echo(ping("b")).await.expect_err("limited").code(),
        Code::ResourceExhausted
    );

    // The key is the address, not the connection: a new connection from 127.0.0.1
    // gets no fresh quota.
    let mut reconnected = server.client().await;
    assert_eq!(
        reconnected
            .echo(ping("c"))
            .await
            .expect_err("limited")
            .code(),
        Code::ResourceExhausted
    );
    assert_eq!(server.counts.calls(), 2);
}

#[tokio::test]
async fn count_when_reads_the_grpc_status_from_headers_and_trailers() {
    let clock = ManualClock::new(BASE);
    // Only failed logins count: gRPC's UNAUTHENTICATED maps to HTTP 401.
    let logins =
        per_minute("logins", 2).count_when(|status| status == http::StatusCode::UNAUTHORIZED);
    let server = GrpcServer::start(layer(logins, &clock)).await;
    let mut client = server.client().await;
    // Successes end with `grpc-status: 0` in the trailers: refunded.
    for _ in 0..5 {
        client
            .echo(ping("right"))
            .await
            .expect("a success does not count");
    }
    // Failures are trailers-only responses (status in the headers): they count.
    for _ in 0..2 {
        let status = client
            .echo(ping("wrong"))
            .await
            .expect_err("unauthenticated");
        assert_eq!(status.code(), Code::Unauthenticated);
    }
    let status = client.echo(ping("right")).await.expect_err("limited");
    assert_eq!(status.code(), Code::ResourceExhausted);
}
