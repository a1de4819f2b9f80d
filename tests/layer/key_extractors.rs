//! Key extractors over hand-built request heads: peer and client IPs behind trusted
//! proxies, forwarding-header parsing and spoofing, IPv6 grouping, header, extension
//! and matched-path keys, and their combinations.

use std::net::{IpAddr, SocketAddr};

use http::header::HeaderValue;
use http::request::Parts;
use proptest::prelude::*;
use tollgate::Key;
use tollgate::key::TrustedProxies;
use tollgate::key::{self, ProxyHeader};

/// A request head from `peer` (a bare `SocketAddr` extension) with `headers`, each
/// name/value pair one header line, in order.
fn request(peer: Option<&str>, headers: &[(&str, &[u8])]) -> Parts {
    let mut builder = http::Request::get("/");
    for (name, value) in headers {
        builder = builder.header(
            *name,
            HeaderValue::from_bytes(value).expect("valid header value"),
        );
    }
    let mut request = builder.body(()).expect("request");
    if let Some(peer) = peer {
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().expect("socket address"));
    }
    request.into_parts().0
}

/// The key of address `s`, as `extract` returns it.
#[expect(
    clippy::unnecessary_wraps,
    reason = "compared with `Extractor::extract`'s Option"
)]
fn ip(s: &str) -> Option<Key> {
    Some(Key::from(s.parse::<IpAddr>().expect("ip")))
}

fn behind(proxies: &[&str]) -> key::Extractor {
    key::client_ip(TrustedProxies::new(proxies).expect("proxies"))
}

const PROXY: &str = "10.0.0.2:40000";

/// Header lines sent by the proxy [`PROXY`], and the client they must key.
type Scenario<'a> = (&'a [(&'a str, &'a [u8])], &'a str);

fn assert_scenarios(client_ip: &key::Extractor, scenarios: &[Scenario<'_>]) {
    for (headers, client) in scenarios {
        let parts = request(Some(PROXY), headers);
        assert_eq!(client_ip.extract(&parts), ip(client), "{headers:?}");
    }
}

/// A scenario table for one header: each value must key the listed client.
fn assert_clients(client_ip: &key::Extractor, header: &str, cases: &[(&[u8], &str)]) {
    for (value, client) in cases {
        assert_scenarios(client_ip, &[(&[(header, value)], client)]);
    }
}

// --- peer_ip -------------------------------------------------------------------

#[test]
fn peer_ip_keys_by_the_tcp_peer_and_ignores_headers() {
    let parts = request(Some("203.0.113.9:5000"), &[("x-forwarded-for", b"6.6.6.6")]);
    assert_eq!(key::peer_ip().extract(&parts), ip("203.0.113.9"));
}

#[test]
fn no_peer_address_means_no_key() {
    let parts = request(None, &[("x-forwarded-for", b"198.51.100.1")]);
    assert_eq!(key::peer_ip().extract(&parts), None);
    assert_eq!(behind(&["0.0.0.0/0"]).extract(&parts), None);
}

#[test]
fn ipv4_mapped_peers_are_ipv4() {
    let mapped = request(Some("[::ffff:203.0.113.9]:5000"), &[]);
    assert_eq!(key::peer_ip().extract(&mapped), ip("203.0.113.9"));
    // Two mapped IPv4 peers are two keys, not one /64.
    let other = request(Some("[::ffff:203.0.113.10]:5000"), &[]);
    assert_ne!(
        key::peer_ip().extract(&mapped),
        key::peer_ip().extract(&other)
    );
    // And a mapped proxy address is trusted by its IPv4 network.
    let via_mapped_proxy = request(
        Some("[::ffff:10.0.0.2]:1"),
        &[("x-forwarded-for", b"198.51.100.7")],
    );
    assert_eq!(
        behind(&["10.0.0.0/8"]).extract(&via_mapped_proxy),
        ip("198.51.100.7")
    );
}

#[test]
fn ipv6_peers_are_grouped_by_64_by_default() {
    let a = request(Some("[2001:db8:1:2::a]:1"), &[]);
    let b = request(Some("[2001:db8:1:2:ffff::b]:1"), &[]);
    let other_64 = request(Some("[2001:db8:1:3::a]:1"), &[]);
    let peer = key::peer_ip();
    assert_eq!(peer.extract(&a), peer.extract(&b));
    assert_ne!(peer.extract(&a), peer.extract(&other_64));
    assert_eq!(peer.extract(&a), ip("2001:db8:1:2::"));
}

#[test]
fn ipv6_prefix_is_configurable() {
    let a = request(Some("[2001:db8:1:2::a]:1"), &[]);
    let same_56 = request(Some("[2001:db8:1:ff::a]:1"), &[]);
    let same_64 = request(Some("[2001:db8:1:2::b]:1"), &[]);

    let by_56 = key::peer_ip_with_ipv6_prefix(56).expect("56");
    assert_eq!(by_56.extract(&a), by_56.extract(&same_56));
    let by_128 = key::peer_ip_with_ipv6_prefix(128).expect("128");
    assert_ne!(by_128.extract(&a), by_128.extract(&same_64));

    let client_by_56 = key::client_ip(TrustedProxies::none().ipv6_prefix(56).expect("56"));
    assert_eq!(client_by_56.extract(&a), client_by_56.extract(&same_56));

    for bad in [0, 129, 255] {
        assert!(key::peer_ip_with_ipv6_prefix(bad).is_err());
        let err = TrustedProxies::none()
            .ipv6_prefix(bad)
            .expect_err("out of range");
        assert!(err.to_string().contains(&format!("\"{bad}\"")), "{err}");
    }
}

#[cfg(feature = "axum")]
#[test]
fn peer_ip_reads_axum_connect_info_first() {
    let mut request = http::Request::get("/").body(()).expect("request");
    request.extensions_mut().insert(axum::extract::ConnectInfo(
        "198.51.100.1:80".parse::<SocketAddr>().expect("addr"),
    ));
    request
        .extensions_mut()
        .insert("192.0.2.1:80".parse::<SocketAddr>().expect("addr"));
    let (parts, ()) = request.into_parts();
    assert_eq!(key::peer_ip().extract(&parts), ip("198.51.100.1"));
}

#[cfg(feature = "tonic")]
#[test]
fn peer_ip_reads_tonic_tcp_connect_info() {
    let mut request = http::Request::get("/").body(()).expect("request");
    request
        .extensions_mut()
        .insert(tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: Some("198.51.100.2:80".parse().expect("addr")),
        });
    let (parts, ()) = request.into_parts();
    assert_eq!(key::peer_ip().extract(&parts), ip("198.51.100.2"));
}

// --- client_ip: who is believed ------------------------------------------------

#[test]
fn spoofed_forwarding_headers_from_an_untrusted_peer_change_nothing() {
    let client_ip = behind(&["10.0.0.0/8"]);
    let plain = request(Some("203.0.113.5:1"), &[]);
    for (name, value) in [
        ("x-forwarded-for", &b"6.6.6.6"[..]),
        ("x-forwarded-for", b"10.0.0.1"),
        ("forwarded", b"for=6.6.6.6"),
        ("x-real-ip", b"6.6.6.6"),
    ] {
        let spoofed = request(Some("203.0.113.5:1"), &[(name, value)]);
        assert_eq!(
            client_ip.extract(&spoofed),
            client_ip.extract(&plain),
            "{name}"
        );
        assert_eq!(client_ip.extract(&spoofed), ip("203.0.113.5"));
    }
}

#[test]
fn rightmost_untrusted_hop_is_the_client() {
    let client_ip = behind(&["10.0.0.0/8", "192.168.1.7"]);
    let cases: &[(&[u8], &str)] = &[
        // One proxy appended the client.
        (b"198.51.100.7", "198.51.100.7"),
        // A chain of trusted proxies is stepped over.
        (b"198.51.100.7, 192.168.1.7, 10.1.1.1", "198.51.100.7"),
        // Whatever the client prepended, its own address comes first from the right.
        (b"6.6.6.6, 7.7.7.7, 198.51.100.7, 10.1.1.1", "198.51.100.7"),
        // Every hop trusted: the leftmost is the client (an internal caller).
        (b"10.9.9.9, 10.1.1.1", "10.9.9.9"),
        // Ports and brackets are tolerated.
        (b"198.51.100.7:4711", "198.51.100.7"),
        (b"[2001:db8::7]:4711", "2001:db8::"),
        (b"[2001:db8::7]", "2001:db8::"),
        // Empty list elements name no hop.
        (b"198.51.100.7,, ,", "198.51.100.7"),
    ];
    assert_clients(&client_ip, "x-forwarded-for", cases);
}

#[test]
fn unreadable_hops_stop_at_the_last_verified_address() {
    let client_ip = behind(&["10.0.0.0/8"]);
    let cases: &[(&[u8], &str)] = &[
        // The proxy we talk to reported garbage: it is the last verified address.
        (b"6.6.6.6, not-an-ip", "10.0.0.2"),
        // Garbage behind a trusted hop: that hop is the last verified address.
        (b"6.6.6.6, garbage, 10.3.3.3", "10.3.3.3"),
        (b"\xff\xfe, 10.3.3.3", "10.3.3.3"),
        (b"1.2.3.4.5", "10.0.0.2"),
        // An empty header has no hops: the peer.
        (b"", "10.0.0.2"),
    ];
    assert_clients(&client_ip, "x-forwarded-for", cases);
}

#[test]
fn forwarded_elements_are_parsed_per_rfc_7239() {
    let client_ip = behind(&["10.0.0.0/8"]);
    let cases: &[(&[u8], &str)] = &[
        (b"for=198.51.100.7", "198.51.100.7"),
        (b"for=198.51.100.7;proto=https;by=10.0.0.2", "198.51.100.7"),
        (b"FOR=198.51.100.7", "198.51.100.7"),
        (b"for=\"198.51.100.7:47011\"", "198.51.100.7"),
        (b"for=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::"),
        (b"for=\"[2001:db8:cafe::17]\"", "2001:db8:cafe::"),
        (b"for=\"[2001:db8:cafe::17]:_obfport\"", "2001:db8:cafe::"),
        // Rightmost untrusted, stepping over a trusted element.
        (
            b"for=6.6.6.6, for=198.51.100.7, for=10.4.4.4;proto=http",
            "198.51.100.7",
        ),
        // A comma inside a quoted value does not split elements.
        (b"for=198.51.100.7;ext=\"a,b\"", "198.51.100.7"),
        // Unknown, obfuscated, missing `for`, repeated `for`, malformed: stop.
        (b"for=6.6.6.6, for=unknown", "10.0.0.2"),
        (b"for=6.6.6.6, for=_hidden, for=10.4.4.4", "10.4.4.4"),
        (b"for=6.6.6.6, proto=https", "10.0.0.2"),
        (b"for=6.6.6.6;for=7.7.7.7", "10.0.0.2"),
        (b"for=\"[2001:db8::1\"", "10.0.0.2"),
        (b"for=\"198.51.100.7", "10.0.0.2"),
        (b"for=198.51.100.7:99999", "10.0.0.2"),
        (b"=====;;;,,,\"", "10.0.0.2"),
    ];
    assert_clients(&client_ip, "forwarded", cases);
}

#[test]
fn several_header_lines_are_one_list_in_order() {
    let scenarios: &[Scenario<'_>] = &[
        (
            &[
                ("x-forwarded-for", b"6.6.6.6, 198.51.100.7"),
                ("x-forwarded-for", b"10.5.5.5"),
            ],
            "198.51.100.7",
        ),
        (
            &[
                ("forwarded", b"for=6.6.6.6"),
                ("forwarded", b"for=198.51.100.8"),
                ("forwarded", b"for=10.5.5.5"),
            ],
            "198.51.100.8",
        ),
    ];
    assert_scenarios(&behind(&["10.0.0.0/8"]), scenarios);
}

#[test]
fn x_real_ip_is_one_address() {
    let scenarios: &[Scenario<'_>] = &[
        (&[("x-real-ip", b"198.51.100.9")], "198.51.100.9"),
        // Two lines, or a list, are not what a proxy writes: unreadable.
        (
            &[("x-real-ip", b"6.6.6.6"), ("x-real-ip", b"198.51.100.9")],
            "10.0.0.2",
        ),
        (&[("x-real-ip", b"6.6.6.6, 198.51.100.9")], "10.0.0.2"),
    ];
    assert_scenarios(&behind(&["10.0.0.0/8"]), scenarios);
}

#[test]
fn headers_that_agree_are_believed_and_disagreeing_ones_key_the_peer() {
    let scenarios: &[Scenario<'_>] = &[
        (
            &[
                ("x-forwarded-for", b"6.6.6.6, 198.51.100.7"),
                ("x-real-ip", b"198.51.100.7"),
                ("forwarded", b"for=198.51.100.7"),
            ],
            "198.51.100.7",
        ),
        // The proxy appends X-Forwarded-For; the client smuggles in a Forwarded
        // header the proxy passes through untouched. No header wins by rank, so the
        // client cannot choose its key: it is counted as the proxy.
        (
            &[
                ("forwarded", b"for=6.6.6.6"),
                ("x-forwarded-for", b"198.51.100.7"),
            ],
            "10.0.0.2",
        ),
        // Likewise for a proxy that sets only X-Real-IP.
        (
            &[
                ("x-forwarded-for", b"6.6.6.6"),
                ("x-real-ip", b"198.51.100.7"),
            ],
            "10.0.0.2",
        ),
    ];
    assert_scenarios(&behind(&["10.0.0.0/8"]), scenarios);
}

#[test]
fn a_chosen_header_is_the_only_one_read() {
    let proxies = TrustedProxies::new(["10.0.0.0/8"]).expect("proxies");
    let smuggled = request(
        Some(PROXY),
        &[
            ("forwarded", b"for=6.6.6.6"),
            ("x-forwarded-for", b"198.51.100.7"),
        ],
    );
    let xff_only = key::client_ip(proxies.clone().header(ProxyHeader::XForwardedFor));
    assert_eq!(xff_only.extract(&smuggled), ip("198.51.100.7"));
    let forwarded_only = key::client_ip(proxies.clone().header(ProxyHeader::Forwarded));
    assert_eq!(forwarded_only.extract(&smuggled), ip("6.6.6.6"));
    // The chosen header missing: the peer.
    let real_ip_only = key::client_ip(proxies.header(ProxyHeader::XRealIp));
    assert_eq!(real_ip_only.extract(&smuggled), ip("10.0.0.2"));
}

#[test]
fn trusted_proxies_config_errors_quote_the_entry() {
    for bad in ["10.0.0.0/33", "ten.0.0.1", "", "10.0.0.0/8/8", "::1/129"] {
        let err = TrustedProxies::new(["10.0.0.0/8", bad]).expect_err(bad);
        assert!(err.to_string().contains(&format!("\"{bad}\"")), "{err}");
    }
    let proxies = TrustedProxies::new(["10.0.0.0/8", " 192.168.1.7 ", "::1/128"]).expect("ok");
    assert!(proxies.contains("192.168.1.7".parse().expect("ip")));
    assert!(proxies.contains("::1".parse().expect("ip")));
    assert!(!proxies.contains("::2".parse().expect("ip")));
    assert_eq!(TrustedProxies::default(), TrustedProxies::none());
}

// --- header ---------------------------------------------------------------------

#[test]
fn header_keys_are_hashed_and_never_printed() {
    let secret = "sk_live_4242424242424242";
    let api_key = key::header("x-api-key").expect("name");
    let parts = request(None, &[("X-Api-Key", secret.as_bytes())]);
    let key = api_key.extract(&parts).expect("key");
    assert_eq!(key, Key::from(secret));
    assert!(!format!("{key:?}").contains("4242"));
    assert!(!format!("{api_key:?}").contains(secret));
}

#[test]
fn header_names_are_checked_at_construction() {
    let err = key::header("bad header\n").expect_err("invalid");
    assert!(err.to_string().contains("bad header\\n"), "{err}");
    assert!(key::header("").is_err());
    assert!(key::header(http::HeaderName::from_static("x-tenant")).is_ok());
    assert!(key::header(String::from("X-Tenant")).is_ok());
}

#[test]
fn missing_or_empty_headers_have_no_key() {
    let api_key = key::header("x-api-key").expect("name");
    assert_eq!(api_key.extract(&request(None, &[])), None);
    assert_eq!(api_key.extract(&request(None, &[("x-api-key", b"")])), None);
    assert_eq!(
        api_key.extract(&request(None, &[("x-api-key", b""), ("x-api-key", b"")])),
        None
    );
}

#[test]
fn huge_and_non_utf8_header_values_give_bounded_keys() {
    let api_key = key::header("x-api-key").expect("name");
    let huge = vec![b'a'; 64 * 1024];
    let non_utf8: &[u8] = b"\xff\xfe\x80key";
    let a = api_key
        .extract(&request(None, &[("x-api-key", &huge)]))
        .expect("key");
    let b = api_key
        .extract(&request(None, &[("x-api-key", non_utf8)]))
        .expect("key");
    assert_eq!(a.fingerprint().len(), 16);
    assert_ne!(a, b);
    assert_eq!(b, Key::from(non_utf8));

    // 64 KiB forwarding headers: no panic, and a key of a verified address.
    let mut many_hops = Vec::new();
    for i in 0..8000_u32 {
        many_hops.extend_from_slice(format!("10.0.{}.{},", i / 256 % 256, i % 256).as_bytes());
    }
    let client_ip = behind(&["10.0.0.0/8"]);
    let parts = request(
        Some(PROXY),
        &[("x-forwarded-for", &many_hops), ("x-api-key", &huge)],
    );
    let key = client_ip.extract(&parts).expect("key");
    // All 8000 hops trusted, more than a walk keeps: it stops at the leftmost hop it
    // kept (the 32nd from the right), a verified address.
    assert_eq!(Some(key), ip("10.0.31.32"));
    let commas = vec![b','; 64 * 1024];
    let parts = request(
        Some(PROXY),
        &[("forwarded", &commas), ("x-forwarded-for", &commas)],
    );
    assert_eq!(client_ip.extract(&parts), ip("10.0.0.2"));
}

#[test]
fn several_lines_of_a_header_key_together() {
    let api_key = key::header("x-api-key").expect("name");
    let one = api_key.extract(&request(None, &[("x-api-key", b"a")]));
    let two = api_key.extract(&request(None, &[("x-api-key", b"a"), ("x-api-key", b"b")]));
    assert_ne!(one, two);
}

// --- extension, matched_path -----------------------------------------------------

#[derive(Clone)]
struct UserId(u64);

impl From<UserId> for Key {
    fn from(id: UserId) -> Key {
        Key::from(id.0)
    }
}

#[test]
fn extension_keys_by_what_an_auth_layer_inserted() {
    let mut request = http::Request::get("/").body(()).expect("request");
    request.extensions_mut().insert(UserId(7));
    request.extensions_mut().insert(String::from("tenant-a"));
    let (parts, ()) = request.into_parts();
    assert_eq!(
        key::extension::<UserId>().extract(&parts),
        Some(Key::from(7_u64))
    );
    assert_eq!(
        key::extension::<String>().extract(&parts),
        Some(Key::from("tenant-a"))
    );
    assert_eq!(key::extension::<Key>().extract(&parts), None);
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn matched_path_keys_by_route_template() {
    use axum::routing::get;
    use tower::ServiceExt as _;

    // MatchedPath has no public constructor: let a real router insert it.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new()
        .route("/users/{id}", get(|| async {}))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let record = record.clone();
                async move {
                    let (parts, body) = request.into_parts();
                    record
                        .lock()
                        .expect("lock")
                        .push(key::matched_path().extract(&parts));
                    next.run(axum::extract::Request::from_parts(parts, body))
                        .await
                }
            },
        ));
    for path in ["/users/1", "/users/2"] {
        let request = http::Request::get(path)
            .body(axum::body::Body::empty())
            .expect("request");
        app.clone().oneshot(request).await.expect("response");
    }
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], Some(Key::from("/users/{id}")));
    assert_eq!(seen[0], seen[1]);
}

#[test]
fn matched_path_without_a_router_is_no_key_not_the_raw_path() {
    let parts = http::Request::get("/users/42")
        .body(())
        .expect("request")
        .into_parts()
        .0;
    assert_eq!(key::matched_path().extract(&parts), None);
}

// --- combinators with real extractors --------------------------------------------

#[test]
fn or_falls_back_from_api_key_to_client_ip() {
    let caller = key::header("x-api-key")
        .expect("name")
        .or(behind(&["10.0.0.0/8"]));
    let with_key = request(
        Some(PROXY),
        &[("x-api-key", b"k1"), ("x-forwarded-for", b"198.51.100.7")],
    );
    let anonymous = request(Some(PROXY), &[("x-forwarded-for", b"198.51.100.7")]);
    assert_eq!(caller.extract(&with_key), Some(Key::from("k1")));
    assert_eq!(caller.extract(&anonymous), ip("198.51.100.7"));
    assert_eq!(caller.extract(&request(None, &[])), None);
}

#[test]
fn and_keys_by_both_and_needs_both() {
    let per_user_per_ip = key::extension::<UserId>().and(key::peer_ip());
    let mut request_a = http::Request::get("/").body(()).expect("request");
    request_a.extensions_mut().insert(UserId(1));
    request_a
        .extensions_mut()
        .insert("192.0.2.1:1".parse::<SocketAddr>().expect("addr"));
    let (a, ()) = request_a.into_parts();
    let mut request_b = http::Request::get("/").body(()).expect("request");
    request_b.extensions_mut().insert(UserId(1));
    request_b
        .extensions_mut()
        .insert("192.0.2.2:1".parse::<SocketAddr>().expect("addr"));
    let (b, ()) = request_b.into_parts();

    let ka = per_user_per_ip.extract(&a).expect("both");
    assert_eq!(
        ka,
        Key::from(1_u64).and(&Key::from("192.0.2.1".parse::<IpAddr>().expect("ip")))
    );
    assert_ne!(Some(ka), per_user_per_ip.extract(&b));
    // No user: no composite key.
    assert_eq!(
        per_user_per_ip.extract(&request(Some("192.0.2.1:1"), &[])),
        None
    );
}

// --- fuzzing -----------------------------------------------------------------------

fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Bytes a header value may hold (visible ASCII, space, tab, obs-text), biased
    // towards the characters the parsers care about.
    let interesting =
        prop::sample::select(b" \t,;=\"\\[]:_.0123456789abcdefABCDEFforunknown\x80\xff".to_vec());
    let any_valid = (0x20_u8..=0xff).prop_filter("not DEL", |b| *b != 0x7f);
    prop::collection::vec(prop_oneof![3 => interesting, 1 => any_valid], 0..200)
}

proptest! {
    #[test]
    fn random_forwarding_headers_never_panic(
        forwarded in header_bytes(),
        xff in header_bytes(),
        real_ip in header_bytes(),
    ) {
        let parts = request(
            Some(PROXY),
            &[("forwarded", &forwarded), ("x-forwarded-for", &xff), ("x-real-ip", &real_ip)],
        );
        for proxies in [
            TrustedProxies::new(["10.0.0.0/8", "2001:db8::/32"]).expect("proxies"),
            TrustedProxies::new(["0.0.0.0/0", "::/0"]).expect("proxies"),
        ] {
            for header in [None, Some(ProxyHeader::Forwarded), Some(ProxyHeader::XForwardedFor), Some(ProxyHeader::XRealIp)] {
                let proxies = match header {
                    Some(header) => proxies.clone().header(header),
                    None => proxies.clone(),
                };
                prop_assert!(key::client_ip(proxies).extract(&parts).is_some());
            }
        }
        let api_key = key::header("forwarded").expect("name");
        prop_assert_eq!(api_key.extract(&parts).is_some(), !forwarded.is_empty());
    }

    #[test]
    fn prepended_hops_never_change_the_key(spoofed in header_bytes(), client in any::<[u8; 4]>()) {
        let client = IpAddr::from(client);
        prop_assume!(!client.is_unspecified());
        let proxies = TrustedProxies::new(["10.0.0.0/8"]).expect("proxies");
        prop_assume!(!proxies.contains(client));
        // The client sent `spoofed`; the trusted proxy appended the address it saw.
        let mut xff = spoofed.clone();
        xff.extend_from_slice(format!(", {client}").as_bytes());
        let parts = request(Some(PROXY), &[("x-forwarded-for", &xff)]);
        let xff_only = key::client_ip(proxies.header(ProxyHeader::XForwardedFor));
        prop_assert_eq!(xff_only.extract(&parts), Some(Key::from(client)));
    }
}
