//! `Forwarded` / `X-Forwarded-For` / `X-Real-IP` parsing, the one-address headers of
//! CDNs and meshes (`CF-Connecting-IP`, `True-Client-IP`, `Fly-Client-IP`,
//! `CloudFront-Viewer-Address`, `X-Envoy-External-Address`), and client-IP selection.
//!
//! Input, one item per line:
//!
//! ```text
//! 10.0.0.2                      the TCP peer (an IP address; anything else: 192.0.2.1)
//! 10.0.0.0/8,::1 header=xff v6=56   trusted proxies: "none", "loopback", "private"
//!                               or a comma-separated list; optional header= (xff,
//!                               forwarded, real-ip, or any header's name) and v6=
//! x-forwarded-for: 6.6.6.6, 1.2.3.4    then header lines, raw bytes after ": "
//! ```
//!
//! Properties: no panic; a request always has a key; an untrusted peer is its own key
//! whatever the headers say; the key is the peer's or that of an address written
//! literally in a forwarding header, never one made up.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use http::request::Parts;
use http::{HeaderName, HeaderValue, Request};
use tollgate::Key;
use tollgate::key::TrustedProxies;
use tollgate::key::{self, ProxyHeader};

const FORWARDING: [&str; 8] = [
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
    "cf-connecting-ip",
    "true-client-ip",
    "fly-client-ip",
    "cloudfront-viewer-address",
    "x-envoy-external-address",
];

pub fn check(data: &[u8]) {
    let mut lines = data.split(|&b| b == b'\n');
    let peer = lines
        .next()
        .and_then(|line| std::str::from_utf8(line).ok())
        .and_then(|text| {
            let text = text.trim();
            text.parse::<IpAddr>().ok().or_else(|| {
                text.strip_prefix('[')?
                    .strip_suffix(']')?
                    .parse::<IpAddr>()
                    .ok()
            })
        })
        .unwrap_or(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    let proxies = lines
        .next()
        .map(|line| proxies(&String::from_utf8_lossy(line)))
        .unwrap_or_default();

    let mut request = Request::get("/").body(()).expect("static request");
    request
        .extensions_mut()
        .insert(SocketAddr::new(peer, 40_000));
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii_start());
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim_ascii()),
            HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        request.headers_mut().append(name, value);
    }
    let (parts, ()) = request.into_parts();

    let v6 = proxies.ipv6_prefix_len();
    let key = key::client_ip(proxies.clone()).extract(&parts);
    let key = key.expect("a request with a peer always has a client_ip key");
    let peer_key = key_of(peer, v6);
    let none = TrustedProxies::none()
        .ipv6_prefix(v6)
        .expect("valid prefix");
    assert_eq!(key::client_ip(none).extract(&parts), Some(peer_key));
    if !proxies.contains(peer) {
        assert_eq!(key, peer_key, "an untrusted peer's headers changed its key");
        return;
    }
    if key != peer_key {
        let written = addresses_in(&parts, proxies.only_header());
        assert!(
            written.iter().any(|&ip| key_of(ip, v6) == key),
            "the key is neither the peer's nor any address in the headers"
        );
    }
}

/// The trusted-proxy configuration a line describes; unreadable parts are skipped.
fn proxies(line: &str) -> TrustedProxies {
    let mut words = line.split_whitespace();
    let mut proxies = match words.next().unwrap_or("none") {
        "none" => TrustedProxies::none(),
        "loopback" => TrustedProxies::loopback(),
        "private" => TrustedProxies::private(),
        list => TrustedProxies::new(list.split(',')).unwrap_or_default(),
    };
    for word in words {
        if let Some(header) = word.strip_prefix("header=") {
            let header = match header {
                "forwarded" => ProxyHeader::Forwarded,
                "xff" => ProxyHeader::XForwardedFor,
                name => ProxyHeader::from_name(name).unwrap_or(ProxyHeader::XRealIp),
            };
            proxies = proxies.header(header);
        } else if let Some(bits) = word.strip_prefix("v6=").and_then(|b| b.parse().ok()) {
            proxies = proxies.clone().ipv6_prefix(bits).unwrap_or(proxies);
        }
    }
    proxies
}

/// The key `client_ip` gives a client at `ip`, found independently: as the peer of a
/// request that has no forwarding header.
fn key_of(ip: IpAddr, v6_prefix: u8) -> Key {
    let mut request = Request::get("/").body(()).expect("static request");
    request.extensions_mut().insert(SocketAddr::new(ip, 1));
    let (parts, ()) = request.into_parts();
    let none = TrustedProxies::none()
        .ipv6_prefix(v6_prefix)
        .expect("valid prefix");
    key::client_ip(none)
        .extract(&parts)
        .expect("a request with a peer has a key")
}

/// Every address written in the forwarding headers (a superset of what a walk may
/// pick): the values split at every separator any of the headers uses.
fn addresses_in(parts: &Parts, only: Option<ProxyHeader>) -> Vec<IpAddr> {
    let mut found = Vec::new();
    for name in FORWARDING {
        if only.is_some_and(|header| header.name() != name) {
            continue;
        }
        for value in parts.headers.get_all(name) {
            // An unbracketed IPv6 address with a port: the token above parses whole.
            if let Some((host, _)) = std::str::from_utf8(value.as_bytes())
                .ok()
                .and_then(|text| text.trim().rsplit_once(':'))
                && let Ok(ip) = host.parse::<IpAddr>()
            {
                found.push(ip);
            }
            for token in value
                .as_bytes()
                .split(|b| b",;=\"[] \t".contains(b))
                .filter_map(|token| std::str::from_utf8(token).ok())
            {
                if let Some(ip) = address(token) {
                    found.push(ip);
                }
            }
        }
    }
    found
}

fn address(token: &str) -> Option<IpAddr> {
    if let Ok(ip) = token.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = token.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    // `192.0.2.1:_obfuscated` (RFC 7239 ports may be obfuscated), and
    // CloudFront-Viewer-Address's unbracketed `2001:db8::1:443` (the last group is the
    // port, so the whole token parses as another IPv6 address: tried first above).
    let (host, _) = token.rsplit_once(':')?;
    host.parse::<IpAddr>().ok()
}
