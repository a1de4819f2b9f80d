//! The client-address headers of CDNs, proxies and meshes (`CF-Connecting-IP`,
//! `True-Client-IP`, `Fly-Client-IP`, `CloudFront-Viewer-Address`,
//! `X-Envoy-External-Address`): believed only from a trusted peer and only when
//! picked with `TrustedProxies::header`, read strictly, fuzzed with proptest, set from
//! the TOML file, and over real HTTP, where each caller's key is read back from the
//! draft-11 `pk` the layer sends.

use std::net::{IpAddr, SocketAddr};

use axum::Router;
use axum::routing::get;
use http::header::HeaderValue;
use http::request::Parts;
use http::{Request, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use sfv::{List, ListEntry, Parser};
use support::http::{Reply, Server};
use tollgate::key::{self, ProxyHeader, TrustedProxies};
use tollgate::{Key, Policy, Quota, RateLimitLayer};

/// The five one-address headers, each with a value naming `203.0.113.7` as it writes it.
const SOURCES: [(ProxyHeader, &str); 5] = [
    (ProxyHeader::CfConnectingIp, "203.0.113.7"),
    (ProxyHeader::TrueClientIp, "203.0.113.7"),
    (ProxyHeader::FlyClientIp, "203.0.113.7"),
    (ProxyHeader::CloudFrontViewerAddress, "203.0.113.7:46532"),
    (ProxyHeader::XEnvoyExternalAddress, "203.0.113.7"),
];

const PROXY: &str = "10.0.0.2:40000";
const STRANGER: &str = "198.51.100.99:40000";

/// A request head from `peer` with `headers`, each pair one header line.
fn request(peer: &str, headers: &[(&str, &[u8])]) -> Parts {
    let mut builder = http::Request::get("/");
    for (name, value) in headers {
        builder = builder.header(
            *name,
            HeaderValue::from_bytes(value).expect("valid header value"),
        );
    }
    let mut request = builder.body(()).expect("request");
    request
        .extensions_mut()
        .insert(peer.parse::<SocketAddr>().expect("socket address"));
    request.into_parts().0
}

fn ip_key(s: &str) -> Key {
    Key::from(s.parse::<IpAddr>().expect("ip"))
}

fn peer_key(peer: &str) -> Key {
    Key::from(peer.parse::<SocketAddr>().expect("socket address").ip())
}

/// `client_ip` trusting 10.0.0.0/8 and believing `header` only.
fn behind(header: ProxyHeader) -> key::Extractor {
    key::client_ip(
        TrustedProxies::new(["10.0.0.0/8"])
            .expect("proxies")
            .header(header),
    )
}

#[test]
fn every_source_is_believed_from_a_trusted_peer_and_ignored_from_any_other() {
    for (header, value) in SOURCES {
        let line = [(header.name(), value.as_bytes())];
        let client_ip = behind(header);
        assert_eq!(
            client_ip.extract(&request(PROXY, &line)),
            Some(ip_key("203.0.113.7")),
            "{header:?} from a trusted proxy"
        );
        assert_eq!(
            client_ip.extract(&request(STRANGER, &line)),
            Some(peer_key(STRANGER)),
            "{header:?} from an untrusted peer"
        );
        // Absent: the trusted peer is the client.
        assert_eq!(
            client_ip.extract(&request(PROXY, &[])),
            Some(peer_key(PROXY))
        );
    }
}

#[test]
fn the_sources_are_read_only_when_picked() {
    let default = key::client_ip(TrustedProxies::new(["10.0.0.0/8"]).expect("proxies"));
    for (header, value) in SOURCES {
        let line = [(header.name(), value.as_bytes())];
        assert_eq!(
            default.extract(&request(PROXY, &line)),
            Some(peer_key(PROXY)),
            "{header:?} read without being picked"
        );
        // Nor does a picked one read the others.
        let other = behind(if header == ProxyHeader::CfConnectingIp {
            ProxyHeader::FlyClientIp
        } else {
            ProxyHeader::CfConnectingIp
        });
        assert_eq!(other.extract(&request(PROXY, &line)), Some(peer_key(PROXY)));
    }
}

#[test]
fn unreadable_values_key_the_trusted_proxy() {
    for (header, _) in SOURCES {
        let client_ip = behind(header);
        for bad in [
            &b"unknown"[..],
            b"203.0.113.7, 203.0.113.8",
            b"",
            b"_hidden",
            b"\xff\xfe",
        ] {
            assert_eq!(
                client_ip.extract(&request(PROXY, &[(header.name(), bad)])),
                Some(peer_key(PROXY)),
                "{header:?}: {bad:?}"
            );
        }
        // Two lines of a one-address header: not something an edge writes.
        let two = request(
            PROXY,
            &[
                (header.name(), b"203.0.113.7:1"),
                (header.name(), b"203.0.113.8:1"),
            ],
        );
        assert_eq!(client_ip.extract(&two), Some(peer_key(PROXY)), "{header:?}");
    }
}

#[test]
fn cloudfront_viewer_addresses_are_address_and_port_ipv6_unbracketed() {
    let client_ip = behind(ProxyHeader::CloudFrontViewerAddress);
    // IPv6 clients are keyed by their /64, as everywhere.
    let v6 = ip_key("2001:db8::");
    for (value, expected) in [
        (&b"198.51.100.10:46532"[..], ip_key("198.51.100.10")),
        (b"2001:db8::8a2e:370:7334:46532", v6),
        (b"[2001:db8::8a2e:370:7334]:46532", v6),
        // No port: CloudFront always sends one, so this is not CloudFront's.
        (b"198.51.100.10", peer_key(PROXY)),
        (b"198.51.100.10:65536", peer_key(PROXY)),
    ] {
        assert_eq!(
            client_ip.extract(&request(PROXY, &[("cloudfront-viewer-address", value)])),
            Some(expected),
            "{value:?}"
        );
    }
    let same_64 = request(
        PROXY,
        &[("cloudfront-viewer-address", b"2001:db8::ffff:1234:443")],
    );
    assert_eq!(client_ip.extract(&same_64), Some(v6));
}

#[test]
fn header_names_read_in_any_case() {
    for header in [
        "Forwarded",
        "X-Forwarded-For",
        "X-Real-IP",
        "CF-Connecting-IP",
        "True-Client-IP",
        "Fly-Client-IP",
        "CloudFront-Viewer-Address",
        "X-Envoy-External-Address",
    ] {
        let parsed = ProxyHeader::from_name(header).expect("a known header");
        assert_eq!(parsed.name(), header.to_ascii_lowercase());
    }
    assert_eq!(ProxyHeader::from_name("X-Client-IP"), None);
}

// --- over real HTTP: the key, read back from `pk` -----------------------------------

/// 1 request a minute per client behind `proxies`, partition keys on.
fn one_a_minute(proxies: TrustedProxies) -> Router {
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(1))
                .expect("policy")
                .key(key::client_ip(proxies)),
        )
        .partition_keys(true)
        .build()
        .expect("layer");
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

async fn from(server: &Server, header: ProxyHeader, value: &str) -> Reply {
    server
        .send(
            Request::get("/")
                .header(header.name(), value)
                .body(Full::default())
                .expect("request"),
        )
        .await
}

/// The `pk` of the `RateLimit` member: the fingerprint of the key the request was
/// counted under.
fn counted_under(reply: &Reply) -> Vec<u8> {
    let list: List = Parser::new(reply.header("ratelimit").as_bytes())
        .parse()
        .expect("an SF List");
    let Some(ListEntry::Item(item)) = list.first() else {
        panic!("no member in {reply:?}");
    };
    item.params
        .get("pk")
        .and_then(|pk| pk.as_byte_sequence())
        .expect("a pk")
        .to_vec()
}

#[tokio::test]
async fn behind_a_trusted_edge_each_client_has_its_own_quota() {
    for (header, value) in SOURCES {
        // The test's client connects from 127.0.0.1: the edge, trusted.
        let server = Server::start(one_a_minute(TrustedProxies::loopback().header(header))).await;
        let first = from(&server, header, value).await;
        assert_eq!(first.status, StatusCode::OK, "{header:?}");
        assert_eq!(
            counted_under(&first),
            ip_key("203.0.113.7").fingerprint(),
            "{header:?}"
        );
        assert_eq!(
            from(&server, header, value).await.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{header:?}"
        );
        // Another client behind the same edge: its own quota.
        let other = value.replace("203.0.113.7", "203.0.113.8");
        let second_client = from(&server, header, &other).await;
        assert_eq!(second_client.status, StatusCode::OK, "{header:?}");
        assert_eq!(
            counted_under(&second_client),
            ip_key("203.0.113.8").fingerprint()
        );
    }
}

#[tokio::test]
async fn from_an_untrusted_peer_the_header_changes_nothing() {
    for (header, value) in SOURCES {
        // 127.0.0.1 is not in the list: the header is whatever the caller wrote.
        let proxies = TrustedProxies::new(["10.0.0.0/8"])
            .expect("proxies")
            .header(header);
        let server = Server::start(one_a_minute(proxies)).await;
        let first = from(&server, header, value).await;
        assert_eq!(first.status, StatusCode::OK);
        assert_eq!(counted_under(&first), ip_key("127.0.0.1").fingerprint());
        // A spoofed second address shares the peer's quota.
        let spoofed = value.replace("203.0.113.7", "203.0.113.8");
        let second = from(&server, header, &spoofed).await;
        assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS, "{header:?}");
        assert_eq!(counted_under(&second), ip_key("127.0.0.1").fingerprint());
    }
}

// --- from the TOML file -------------------------------------------------------------

#[cfg(feature = "config")]
mod config {
    use tollgate::config::Limits;

    use super::{PROXY, STRANGER, ip_key, peer_key, request};

    #[test]
    fn proxy_header_picks_the_source() -> Result<(), tollgate::ConfigError> {
        let limits = Limits::from_toml(
            "[[limit]]\nname = \"api\"\nquota = \"100/min\"\nkey = \"client_ip\"\n\
             trusted_proxies = [\"10.0.0.0/8\"]\nproxy_header = \"CF-Connecting-IP\"\n",
        )?;
        let api = &limits.policies()[0];
        let line = [("cf-connecting-ip", &b"203.0.113.7"[..])];
        assert_eq!(
            api.key_of(&request(PROXY, &line)),
            Some(ip_key("203.0.113.7"))
        );
        assert_eq!(
            api.key_of(&request(STRANGER, &line)),
            Some(peer_key(STRANGER))
        );
        // Picked: X-Forwarded-For is no longer read.
        let xff = [("x-forwarded-for", &b"203.0.113.9"[..])];
        assert_eq!(api.key_of(&request(PROXY, &xff)), Some(peer_key(PROXY)));
        Ok(())
    }

    #[test]
    fn every_source_has_its_name_in_the_file() -> Result<(), tollgate::ConfigError> {
        for (header, value) in super::SOURCES {
            let limits = Limits::from_toml(&format!(
                "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"client_ip\"\n\
                 trusted_proxies = [\"10.0.0.0/8\"]\nproxy_header = \"{}\"\n",
                header.name()
            ))?;
            let line = [(header.name(), value.as_bytes())];
            assert_eq!(
                limits.policies()[0].key_of(&request(PROXY, &line)),
                Some(ip_key("203.0.113.7")),
                "{header:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn mistakes_are_placed_and_quoted() {
        let unknown = Limits::from_toml(
            "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"client_ip\"\n\
             proxy_header = \"x-client-ip\"\n",
        )
        .expect_err("no such header");
        assert_eq!((unknown.line(), unknown.column()), (Some(5), Some(16)));
        let message = unknown.to_string();
        assert!(
            message.contains("unknown proxy_header \"x-client-ip\""),
            "{message}"
        );
        assert!(
            message.contains("\"cloudfront-viewer-address\""),
            "{message}"
        );

        let wrong_key = Limits::from_toml(
            "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"peer_ip\"\n\
             proxy_header = \"cf-connecting-ip\"\n",
        )
        .expect_err("only for client_ip");
        assert_eq!((wrong_key.line(), wrong_key.column()), (Some(5), Some(16)));
        assert!(
            wrong_key
                .to_string()
                .contains("proxy_header applies only to key \"client_ip\""),
            "{wrong_key}"
        );
    }
}

// --- fuzzing ------------------------------------------------------------------------

fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Visible ASCII, space, tab and obs-text, biased towards what the parsers read.
    let interesting = prop::sample::select(b" \t,;:[]_.0123456789abcdefABCDEF\x80\xff".to_vec());
    let any_valid = (0x20_u8..=0xff).prop_filter("not DEL", |b| *b != 0x7f);
    prop::collection::vec(prop_oneof![3 => interesting, 1 => any_valid], 0..80)
}

proptest! {
    #[test]
    fn random_source_values_never_panic_and_never_move_an_untrusted_peer(
        value in header_bytes(),
        which in 0..SOURCES.len(),
    ) {
        let (header, _) = SOURCES[which];
        let line = [(header.name(), value.as_slice())];
        let client_ip = behind(header);
        // From a trusted proxy: always a key, the proxy's or one the value names.
        prop_assert!(client_ip.extract(&request(PROXY, &line)).is_some());
        // From anyone else: the peer, whatever the value.
        prop_assert_eq!(
            client_ip.extract(&request(STRANGER, &line)),
            Some(peer_key(STRANGER))
        );
    }

    #[test]
    fn a_trusted_edges_address_is_the_key(client in any::<[u8; 4]>(), port in any::<u16>()) {
        let client = IpAddr::from(client);
        prop_assume!(!TrustedProxies::new(["10.0.0.0/8"]).expect("proxies").contains(client));
        for (header, _) in SOURCES {
            let value = if header == ProxyHeader::CloudFrontViewerAddress {
                format!("{client}:{port}")
            } else {
                client.to_string()
            };
            let parts = request(PROXY, &[(header.name(), value.as_bytes())]);
            prop_assert_eq!(behind(header).extract(&parts), Some(Key::from(client)));
        }
    }
}
