//! Reading forwarding headers (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`, and the
//! one-address headers of CDNs and meshes) as chains of hops, and walking them from the
//! right.
//!
//! Everything here reads attacker-controlled bytes: no allocation that grows with the
//! input, no panic, and an unreadable hop stops the walk rather than guessing.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};

use super::ip::canonical;

/// A forwarding header [`client_ip`](super::client_ip) can believe.
///
/// The first three are the general ones, read together (and required to agree)
/// unless [`TrustedProxies::header`](super::TrustedProxies::header) picks one. The
/// other five are written by one CDN, proxy or mesh each and hold one address, the
/// client as that edge saw it; they are read only when picked with
/// [`TrustedProxies::header`](super::TrustedProxies::header), and, like the others,
/// only from a TCP peer in the trusted list.
///
/// A one-address header says nothing of the hops before the edge that wrote it: trust
/// it only from peers that receive nothing but that edge's traffic, or that remove
/// the header from anything else. Trusting the CDN's published egress ranges, when
/// it connects to you directly, is that; trusting a proxy of yours that also takes
/// traffic around the CDN is not, since a client that goes around can then write any
/// address into the header.
///
/// ```
/// use tollgate::key::ProxyHeader;
/// assert_eq!(ProxyHeader::XForwardedFor.name(), "x-forwarded-for");
/// assert_eq!(ProxyHeader::Forwarded.name(), "forwarded");
/// assert_eq!(ProxyHeader::XRealIp.name(), "x-real-ip");
/// assert_eq!(ProxyHeader::CfConnectingIp.name(), "cf-connecting-ip");
/// assert_eq!(ProxyHeader::from_name("CloudFront-Viewer-Address"), Some(ProxyHeader::CloudFrontViewerAddress));
/// assert_eq!(ProxyHeader::from_name("x-client-ip"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `Forwarded` (RFC 7239): the `for=` parameter of each element.
    Forwarded,
    /// `X-Forwarded-For`: a comma-separated list of addresses.
    XForwardedFor,
    /// `X-Real-IP`: a single address.
    XRealIp,
    /// `CF-Connecting-IP`: the client's address, written by Cloudflare.
    CfConnectingIp,
    /// `True-Client-IP`: the client's address, written by Cloudflare (Enterprise) and
    /// Akamai.
    TrueClientIp,
    /// `Fly-Client-IP`: the client's address, written by Fly.io's proxy.
    FlyClientIp,
    /// `CloudFront-Viewer-Address`: the client's address and source port, written by
    /// AWS's CDN (when an origin request policy adds it): `198.51.100.10:46532`,
    /// and IPv6 without brackets, `2001:db8::8a2e:370:7334:46532` (the last group is
    /// the port; `[2001:db8::1]:46532` is read too). A value without a port cannot be
    /// read.
    CloudFrontViewerAddress,
    /// `X-Envoy-External-Address`: the client's address, written by Envoy (Istio and
    /// other meshes) when it trusts the hops before it.
    XEnvoyExternalAddress,
}

impl ProxyHeader {
    /// The headers read by default, which must agree.
    pub(crate) const ALL: [ProxyHeader; 3] = [
        ProxyHeader::Forwarded,
        ProxyHeader::XForwardedFor,
        ProxyHeader::XRealIp,
    ];

    /// Every header there is, for [`from_name`](ProxyHeader::from_name) and its
    /// callers' error messages.
    pub(crate) const KNOWN: [ProxyHeader; 8] = [
        ProxyHeader::Forwarded,
        ProxyHeader::XForwardedFor,
        ProxyHeader::XRealIp,
        ProxyHeader::CfConnectingIp,
        ProxyHeader::TrueClientIp,
        ProxyHeader::FlyClientIp,
        ProxyHeader::CloudFrontViewerAddress,
        ProxyHeader::XEnvoyExternalAddress,
    ];

    /// The header's name, lowercase.
    pub fn name(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::XForwardedFor => "x-forwarded-for",
            Self::XRealIp => "x-real-ip",
            Self::CfConnectingIp => "cf-connecting-ip",
            Self::TrueClientIp => "true-client-ip",
            Self::FlyClientIp => "fly-client-ip",
            Self::CloudFrontViewerAddress => "cloudfront-viewer-address",
            Self::XEnvoyExternalAddress => "x-envoy-external-address",
        }
    }

    /// The header named `name`, in any case (header names are case-insensitive);
    /// `None` for a header `client_ip` cannot read.
    ///
    /// ```
    /// use tollgate::key::ProxyHeader;
    /// assert_eq!(ProxyHeader::from_name("Fly-Client-IP"), Some(ProxyHeader::FlyClientIp));
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        Self::KNOWN
            .into_iter()
            .find(|header| header.name().eq_ignore_ascii_case(name.trim()))
    }

    fn header_name(self) -> HeaderName {
        match self {
            Self::Forwarded => FORWARDED,
            other => HeaderName::from_static(other.name()),
        }
    }
}

/// The most hops a walk looks at. Real chains have a handful; a longer header is
/// read in full but only its rightmost hops are kept, so memory stays fixed. A walk
/// that runs past them stops at the last verified address, as for any unreadable hop.
const MAX_HOPS: usize = 32;

/// The rightmost [`MAX_HOPS`] raw hops of a header, in a fixed-size ring.
struct Hops<'a> {
    slots: [&'a [u8]; MAX_HOPS],
    pushed: usize,
}

impl<'a> Hops<'a> {
    fn new() -> Self {
        Self {
            slots: [&[]; MAX_HOPS],
            pushed: 0,
        }
    }

    fn push(&mut self, hop: &'a [u8]) {
        let hop = hop.trim_ascii();
        // Empty list elements ("a,,b") name no hop (RFC 9110 §5.6.1).
        if !hop.is_empty() {
            self.slots[self.pushed % MAX_HOPS] = hop;
            self.pushed += 1;
        }
    }

    /// Newest (rightmost) first.
    fn newest_first(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        let kept = self.pushed.min(MAX_HOPS);
        (1..=kept).map(move |back| self.slots[(self.pushed - back) % MAX_HOPS])
    }
}

/// The client named by `header`, walked from `peer` (a trusted proxy); `None` when the
/// header is absent or lists no hop.
pub(crate) fn client(
    headers: &HeaderMap,
    header: ProxyHeader,
    peer: IpAddr,
    trusted: &dyn Fn(IpAddr) -> bool,
) -> Option<IpAddr> {
    let mut hops = Hops::new();
    let mut lines = headers.get_all(header.header_name()).iter().peekable();
    lines.peek()?;
    let parse: fn(&[u8]) -> Option<IpAddr> = match header {
        ProxyHeader::Forwarded => {
            for line in lines {
                split_outside_quotes(line.as_bytes(), b',', |element| hops.push(element));
            }
            forwarded_for
        }
        ProxyHeader::XForwardedFor => {
            for line in lines {
                line.as_bytes()
                    .split(|&b| b == b',')
                    .for_each(|hop| hops.push(hop));
            }
            address
        }
        ProxyHeader::XRealIp
        | ProxyHeader::CfConnectingIp
        | ProxyHeader::TrueClientIp
        | ProxyHeader::FlyClientIp
        | ProxyHeader::XEnvoyExternalAddress
        | ProxyHeader::CloudFrontViewerAddress => {
            let first = lines.next()?;
            if lines.next().is_some() {
                // Two "single" addresses: not something a proxy writes. Unreadable.
                return Some(peer);
            }
            hops.push(first.as_bytes());
            if header == ProxyHeader::CloudFrontViewerAddress {
                viewer_address
            } else {
                address
            }
        }
    };
    if hops.pushed == 0 {
        return None;
    }
    Some(walk(hops.newest_first().map(parse), peer, trusted))
}

/// Right to left: step over trusted hops, stop at the first untrusted one; an
/// unreadable hop (or the end of the kept hops) leaves the last verified address.
fn walk(
    hops: impl Iterator<Item = Option<IpAddr>>,
    peer: IpAddr,
    trusted: &dyn Fn(IpAddr) -> bool,
) -> IpAddr {
    let mut verified = peer;
    for hop in hops {
        match hop.map(canonical) {
            Some(ip) if trusted(ip) => verified = ip,
            Some(ip) => return ip,
            None => return verified,
        }
    }
    verified
}

/// Calls `each` with the parts of `input` between `separator`s that are outside
/// quoted strings (with `\` escapes inside them, RFC 9110 §5.6.4).
fn split_outside_quotes<'a>(input: &'a [u8], separator: u8, mut each: impl FnMut(&'a [u8])) {
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, &b) in input.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted {
            match b {
                b'\\' => escaped = true,
                b'"' => quoted = false,
                _ => {}
            }
        } else if b == b'"' {
            quoted = true;
        } else if b == separator {
            each(&input[start..i]);
            start = i + 1;
        }
    }
    each(&input[start..]);
}

/// The address in the `for=` parameter of one `Forwarded` element, if readable.
///
/// `None` for elements without exactly one `for=`, for `unknown` and obfuscated
/// identifiers (`_hidden`), and for anything malformed.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    let mut value = None;
    let mut count = 0_u32;
    split_outside_quotes(element, b';', |pair| {
        let pair = pair.trim_ascii();
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            return;
        };
        if pair[..eq].trim_ascii().eq_ignore_ascii_case(b"for") {
            count += 1;
            value = Some(pair[eq + 1..].trim_ascii());
        }
    });
    if count != 1 {
        return None;
    }
    node(unquote(value?)?)
}

/// The content of a token or a quoted string. Node values never need escapes, so a
/// quoted string with one is rejected rather than unescaped.
fn unquote(value: &[u8]) -> Option<&[u8]> {
    match value {
        [b'"', inner @ .., b'"'] if !inner.iter().any(|&b| b == b'"' || b == b'\\') => Some(inner),
        [b'"', ..] | [.., b'"'] => None,
        token => Some(token),
    }
}

/// An RFC 7239 node: `IPv4[:port]` or `[IPv6][:port]`. `unknown` and obfuscated
/// identifiers are not addresses.
fn node(node: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(node).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip = v6.parse::<Ipv6Addr>().ok()?;
        return match after.strip_prefix(':') {
            None if after.is_empty() => Some(IpAddr::V6(ip)),
            Some(port) if valid_port(port) => Some(IpAddr::V6(ip)),
            _ => None,
        };
    }
    // Tolerated: an unbracketed IPv6 address (some proxies write them so).
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (v4, port) = text.split_once(':')?;
    if !valid_port(port) {
        return None;
    }
    v4.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A port or an obfuscated port (`_abc`), RFC 7239 §6.
fn valid_port(port: &str) -> bool {
    match port.strip_prefix('_') {
        Some(obfuscated) => {
            !obfuscated.is_empty()
                && obfuscated
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        }
        None => port.parse::<u16>().is_ok(),
    }
}

/// One `X-Forwarded-For` / `X-Real-IP` entry: an address, tolerating a port
/// (`192.0.2.1:8080`, `[2001:db8::1]:8080`) or brackets (`[2001:db8::1]`).
fn address(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    text.strip_prefix('[')?
        .strip_suffix(']')?
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// A `CloudFront-Viewer-Address` value: `IPv4:port`, unbracketed `IPv6:port` (the
/// last group is the port, which AWS always sends), or `[IPv6]:port`.
fn viewer_address(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?;
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    let (ip, port) = text.rsplit_once(':')?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    port.parse::<u16>().ok()?;
    ip.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cloudfront_viewer_addresses() {
        assert_eq!(
            viewer_address(b"198.51.100.10:46532"),
            Some(ip("198.51.100.10"))
        );
        assert_eq!(
            viewer_address(b"2001:db8::8a2e:370:7334:46532"),
            Some(ip("2001:db8::8a2e:370:7334"))
        );
        assert_eq!(
            viewer_address(b"[2001:db8::1]:443"),
            Some(ip("2001:db8::1"))
        );
        // No port, a port out of range, a sign, garbage: unreadable.
        assert_eq!(viewer_address(b"198.51.100.10"), None);
        assert_eq!(viewer_address(b"2001:db8::1:99999"), None);
        assert_eq!(viewer_address(b"2001:db8::1:+80"), None);
        assert_eq!(viewer_address(b"2001:db8::1:"), None);
        assert_eq!(viewer_address(b"unknown:80"), None);
        assert_eq!(viewer_address(b"\xff:80"), None);
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("valid literal")
    }

    #[test]
    fn reads_forwarded_nodes() {
        assert_eq!(
            forwarded_for(b"for=192.0.2.60;proto=http;by=203.0.113.43"),
            Some(ip("192.0.2.60"))
        );
        assert_eq!(
            forwarded_for(b"For=\"[2001:db8:cafe::17]:4711\""),
            Some(ip("2001:db8:cafe::17"))
        );
        assert_eq!(
            forwarded_for(b"for=\"192.0.2.43:47011\""),
            Some(ip("192.0.2.43"))
        );
        assert_eq!(
            forwarded_for(b"for=\"[2001:db8::1]:_port\""),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(forwarded_for(b"for=unknown"), None);
        assert_eq!(forwarded_for(b"for=_hidden"), None);
        assert_eq!(forwarded_for(b"proto=https"), None);
        assert_eq!(forwarded_for(b"for=1.2.3.4;for=5.6.7.8"), None);
        assert_eq!(forwarded_for(b"for=\"[2001:db8::1\""), None);
        assert_eq!(forwarded_for(b"for=\"1.2.3.4"), None);
        assert_eq!(forwarded_for(b"for=\"1.2\\\".3.4\""), None);
        assert_eq!(forwarded_for(b"for=1.2.3.4:99999"), None);
    }

    #[test]
    fn splits_only_outside_quotes() {
        let mut parts = Vec::new();
        split_outside_quotes(b"a=\"x,y\", b=\"\\\",\", c", b',', |p| {
            parts.push(p.trim_ascii());
        });
        assert_eq!(parts, [&b"a=\"x,y\""[..], b"b=\"\\\",\"", b"c"]);
    }

    #[test]
    fn keeps_only_the_rightmost_hops() {
        let mut hops = Hops::new();
        let many: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        for hop in &many {
            hops.push(hop.as_bytes());
        }
        let newest: Vec<&[u8]> = hops.newest_first().collect();
        assert_eq!(newest.len(), MAX_HOPS);
        assert_eq!(newest[0], b"99");
        assert_eq!(newest[MAX_HOPS - 1], b"68");
    }
}
