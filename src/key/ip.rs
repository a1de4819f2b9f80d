//! Keys from IP addresses: the TCP peer ([`peer_ip`]), the client behind trusted
//! proxies ([`client_ip`]), and the [`TrustedProxies`] that decide which forwarding
//! headers are believed.

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::forwarded::{self, ProxyHeader};
use super::{Extractor, Key};
use crate::ConfigError;

/// IPv6 clients are keyed by this prefix unless told otherwise: a /64 is what one
/// subscriber is usually given, so keying by single addresses would let one client
/// rotate through 2^64 keys.
const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The proxies whose forwarding headers [`client_ip`] believes, and how client
/// addresses become keys.
///
/// A request whose TCP peer is in this list came through one of your proxies, so the
/// headers it added (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`, or the one
/// [`header`](TrustedProxies::header) picks, such as a CDN's `CF-Connecting-IP`) say
/// who its client was. A request from any other peer is keyed by the peer itself: its
/// headers are whatever the caller chose to send.
///
/// Entries are IP addresses (`"192.168.1.7"`, `"::1"`) or CIDR networks
/// (`"10.0.0.0/8"`, `"2001:db8::/32"`). IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`)
/// are treated as the IPv4 addresses they carry, in this list and in requests.
///
/// IPv6 clients are keyed by their /64 prefix by default (see
/// [`ipv6_prefix`](TrustedProxies::ipv6_prefix)); IPv4 clients by their address.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::key::TrustedProxies;
///
/// let proxies = TrustedProxies::new(["10.0.0.0/8", "192.168.1.7", "::1/128"])?;
/// assert!(proxies.contains("10.20.30.40".parse::<IpAddr>()?));
/// assert!(proxies.contains("::ffff:10.0.0.1".parse::<IpAddr>()?));
/// assert!(!proxies.contains("192.168.1.8".parse::<IpAddr>()?));
///
/// let err = TrustedProxies::new(["10.0.0.0/33"]).unwrap_err();
/// assert!(err.to_string().contains("\"10.0.0.0/33\""));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
    ipv6_prefix: u8,
    header: Option<ProxyHeader>,
}

impl TrustedProxies {
    /// No proxy is trusted: every request is keyed by its TCP peer, and forwarding
    /// headers are ignored. Right for servers reached directly.
    ///
    /// ```
    /// let none = tollgate::key::TrustedProxies::none();
    /// assert!(!none.contains("127.0.0.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn none() -> Self {
        Self {
            networks: Vec::new(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            header: None,
        }
    }

    /// Trusts the listed addresses and networks.
    ///
    /// Fails with a [`ConfigError`] quoting the first entry that is neither an IP
    /// address nor a CIDR network.
    ///
    /// ```
    /// use tollgate::key::TrustedProxies;
    /// let proxies = TrustedProxies::new(["10.0.0.0/8", "2001:db8::/32"])?;
    /// assert!(proxies.contains("2001:db8:1::7".parse()?));
    /// assert!(TrustedProxies::new(["ten.0.0.1"]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<I>(entries: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut proxies = Self::none();
        for entry in entries {
            proxies.networks.push(parse_network(entry.as_ref())?);
        }
        Ok(proxies)
    }

    /// Trusts the loopback networks (`127.0.0.0/8`, `::1`): a proxy on the same host.
    ///
    /// ```
    /// let local = tollgate::key::TrustedProxies::loopback();
    /// assert!(local.contains("127.0.0.1".parse()?));
    /// assert!(local.contains("::1".parse()?));
    /// assert!(!local.contains("10.0.0.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn loopback() -> Self {
        Self::from_static(&["127.0.0.0/8", "::1/128"])
    }

    /// Trusts loopback and private networks (`10.0.0.0/8`, `172.16.0.0/12`,
    /// `192.168.0.0/16`, `fc00::/7`): a proxy inside your own network.
    ///
    /// Only right when no untrusted client can connect from a private address.
    ///
    /// ```
    /// let private = tollgate::key::TrustedProxies::private();
    /// assert!(private.contains("172.20.0.3".parse()?));
    /// assert!(private.contains("fd00::1".parse()?));
    /// assert!(!private.contains("203.0.113.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn private() -> Self {
        Self::from_static(&[
            "127.0.0.0/8",
            "::1/128",
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "fc00::/7",
        ])
    }

    fn from_static(entries: &[&str]) -> Self {
        let mut proxies = Self::none();
        // Literals above; a typo would make the preset empty rather than panic.
        proxies.networks = entries
            .iter()
            .filter_map(|entry| parse_network(entry).ok())
            .collect();
        proxies
    }

    /// Keys IPv6 clients by their first `bits` bits (default 64; 128 keys each
    /// address on its own). Fails unless `1 <= bits <= 128`.
    ///
    /// ```
    /// use tollgate::key::TrustedProxies;
    /// let per_site = TrustedProxies::none().ipv6_prefix(56)?;
    /// assert_eq!(per_site.ipv6_prefix_len(), 56);
    /// assert!(TrustedProxies::none().ipv6_prefix(0).is_err());
    /// assert!(TrustedProxies::none().ipv6_prefix(129).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self, ConfigError> {
        self.ipv6_prefix = check_ipv6_prefix(bits)?;
        Ok(self)
    }

    /// The IPv6 prefix length clients are keyed by.
    ///
    /// ```
    /// assert_eq!(tollgate::key::TrustedProxies::none().ipv6_prefix_len(), 64);
    /// ```
    pub fn ipv6_prefix_len(&self) -> u8 {
        self.ipv6_prefix
    }

    /// Believes only `header`, ignoring the other forwarding headers.
    ///
    /// Recommended whenever you know which header your proxies write: by default
    /// `Forwarded`, `X-Forwarded-For` and `X-Real-IP` are read and must agree (see
    /// [`client_ip`]). The headers of one CDN or mesh (`CF-Connecting-IP`,
    /// `True-Client-IP`, `Fly-Client-IP`, `CloudFront-Viewer-Address`,
    /// `X-Envoy-External-Address`) are read only when chosen here; see
    /// [`ProxyHeader`] for when a one-address header can be trusted.
    ///
    /// ```
    /// use tollgate::key::ProxyHeader;
    /// use tollgate::key::TrustedProxies;
    /// let nginx = TrustedProxies::loopback().header(ProxyHeader::XForwardedFor);
    /// assert_eq!(nginx.only_header(), Some(ProxyHeader::XForwardedFor));
    /// assert_eq!(TrustedProxies::loopback().only_header(), None);
    ///
    /// // Behind Cloudflare, which connects from its published ranges.
    /// let cloudflare = TrustedProxies::new(["173.245.48.0/20", "2400:cb00::/32"])?
    ///     .header(ProxyHeader::CfConnectingIp);
    /// assert_eq!(cloudflare.only_header(), Some(ProxyHeader::CfConnectingIp));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn header(mut self, header: ProxyHeader) -> Self {
        self.header = Some(header);
        self
    }

    /// The one header believed, if [`header`](TrustedProxies::header) chose one.
    pub fn only_header(&self) -> Option<ProxyHeader> {
        self.header
    }

    /// Whether `ip` is a trusted proxy.
    ///
    /// ```
    /// let proxies = tollgate::key::TrustedProxies::new(["192.168.1.7"])?;
    /// assert!(proxies.contains("192.168.1.7".parse()?));
    /// assert!(!proxies.contains("192.168.1.70".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.networks.iter().any(|net| net.contains(&ip))
    }
}

impl Default for TrustedProxies {
    fn default() -> Self {
        Self::none()
    }
}

fn parse_network(entry: &str) -> Result<IpNet, ConfigError> {
    let trimmed = entry.trim();
    let network = trimmed
        .parse::<IpNet>()
        .or_else(|_| trimmed.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            ConfigError::new(format!(
                "invalid trusted proxy \"{}\": expected an IP address or a CIDR network \
                 such as \"10.0.0.0/8\" or \"2001:db8::/32\"",
                entry.escape_debug()
            ))
        })?;
    Ok(canonical_network(network))
}

/// `::ffff:10.0.0.0/104` is `10.0.0.0/8`: requests from IPv4-mapped peers are
/// canonicalised to IPv4, so the list must be too.
fn canonical_network(network: IpNet) -> IpNet {
    if let IpNet::V6(v6) = network
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.network().to_ipv4_mapped()
        && let Ok(net) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(net.trunc());
    }
    network.trunc()
}

fn check_ipv6_prefix(bits: u8) -> Result<u8, ConfigError> {
    if (1..=128).contains(&bits) {
        Ok(bits)
    } else {
        Err(ConfigError::new(format!(
            "invalid IPv6 prefix length \"{bits}\": expected 1 to 128 (64 groups one subscriber)"
        )))
    }
}

/// IPv4-mapped IPv6 addresses (dual-stack sockets report IPv4 peers this way) are the
/// IPv4 hosts they carry.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The key of a client address: IPv4 as is, IPv6 truncated to its first `v6_prefix`
/// bits.
fn ip_key(ip: IpAddr, v6_prefix: u8) -> Key {
    match canonical(ip) {
        IpAddr::V4(v4) => Key::from(v4),
        IpAddr::V6(v6) => {
            // `v6_prefix` is 1..=128 (checked at construction); the fallback keeps a
            // bad value from panicking and keys by the whole address instead.
            let network = Ipv6Net::new(v6, v6_prefix).map_or(v6, |net| net.network());
            Key::from(network)
        }
    }
}

/// The TCP peer's address, from whichever server put it in the request extensions.
///
/// Looked up in this order: axum's `ConnectInfo<SocketAddr>` (feature `axum`),
/// tonic's `TcpConnectInfo` (feature `tonic`), a bare `SocketAddr`.
pub(crate) fn peer_addr(parts: &Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(canonical(addr.ip()));
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = parts
        .extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
    {
        return Some(canonical(addr.ip()));
    }
    parts
        .extensions
        .get::<SocketAddr>()
        .map(|addr| canonical(addr.ip()))
}

/// The TCP peer's IP address; IPv6 peers keyed by their /64.
///
/// The address comes from the request extensions, where the server puts it:
///
/// - axum: `axum::extract::ConnectInfo<SocketAddr>` (feature `axum`), present when the
///   app is served with `into_make_service_with_connect_info::<SocketAddr>()`;
/// - tonic: `tonic::transport::server::TcpConnectInfo` (feature `tonic`), present on
///   plain TCP connections (tonic's TLS connections wrap it in a type this crate does
///   not read: insert a `SocketAddr` yourself there);
/// - any stack: a bare `std::net::SocketAddr` extension.
///
/// They are looked up in that order. A request with none of them has no key, and its
/// policy's [`MissingKey`](crate::layer::MissingKey) applies: check that your server provides
/// the address, or every request will skip the policy.
///
/// Behind a reverse proxy every request comes from the proxy: use [`client_ip`].
/// For another IPv6 prefix, see [`peer_ip_with_ipv6_prefix`].
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::{Key, key};
///
/// let mut request = http::Request::get("/").body(())?;
/// request.extensions_mut().insert("203.0.113.9:51234".parse::<SocketAddr>()?);
/// let (parts, _) = request.into_parts();
/// assert_eq!(key::peer_ip().extract(&parts), Some(Key::from("203.0.113.9".parse::<std::net::IpAddr>()?)));
///
/// let (no_peer, _) = http::Request::get("/").body(())?.into_parts();
/// assert_eq!(key::peer_ip().extract(&no_peer), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_ip() -> Extractor {
    peer_ip_by(DEFAULT_IPV6_PREFIX)
}

/// Like [`peer_ip`], keying IPv6 peers by their first `bits` bits instead of 64.
/// Fails unless `1 <= bits <= 128`.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::key;
///
/// let by_56 = key::peer_ip_with_ipv6_prefix(56)?;
/// let parts_from = |addr: &str| -> Result<http::request::Parts, Box<dyn std::error::Error>> {
///     let mut request = http::Request::get("/").body(())?;
///     request.extensions_mut().insert(addr.parse::<SocketAddr>()?);
///     Ok(request.into_parts().0)
/// };
/// let a = parts_from("[2001:db8:0:1::1]:443")?;
/// let b = parts_from("[2001:db8:0:2::1]:443")?;
/// assert_eq!(by_56.extract(&a), by_56.extract(&b)); // same /56
/// assert_ne!(key::peer_ip().extract(&a), key::peer_ip().extract(&b)); // different /64
/// assert!(key::peer_ip_with_ipv6_prefix(0).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_ip_with_ipv6_prefix(bits: u8) -> Result<Extractor, ConfigError> {
    Ok(peer_ip_by(check_ipv6_prefix(bits)?))
}

fn peer_ip_by(v6_prefix: u8) -> Extractor {
    Extractor::named("peer_ip", move |parts| {
        peer_addr(parts).map(|ip| ip_key(ip, v6_prefix))
    })
}

/// The client's IP address, believing forwarding headers only from `proxies`.
///
/// Steps, for each request:
///
/// 1. The TCP peer is found as in [`peer_ip`]; without one, the request has no key.
/// 2. If the peer is not in `proxies`, it is the client: the headers are ignored,
///    whatever they say.
/// 3. Otherwise the hops of a forwarding header are walked from the right (the
///    entry the nearest proxy wrote) to the left. Each hop that is a trusted proxy is
///    stepped over; the first hop that is not is the client. So a client that
///    prepends spoofed entries changes nothing: its own address, appended by your
///    proxy, is met first.
/// 4. A hop that cannot be read (garbage, `unknown`, an obfuscated identifier, a
///    missing `for=`) stops the walk: the client is the last address verified so far,
///    the trusted proxy that reported the unreadable hop. If every hop is trusted, the
///    leftmost is the client.
///
/// Several lines of one header are one list, in order. The headers read:
///
/// - `Forwarded` (RFC 7239): the `for=` parameter of each element, IPv4 with an
///   optional port, quoted `"[IPv6]"` with an optional port;
/// - `X-Forwarded-For`: a comma-separated list of addresses (ports and brackets
///   tolerated);
/// - `X-Real-IP`: one address (several lines of it cannot be read);
/// - chosen with [`TrustedProxies::header`] only, one address each, written by one
///   CDN, proxy or mesh (see [`ProxyHeader`]): `CF-Connecting-IP` (Cloudflare),
///   `True-Client-IP` (Cloudflare Enterprise, Akamai), `Fly-Client-IP` (Fly.io),
///   `CloudFront-Viewer-Address` (AWS: `address:port`),
///   `X-Envoy-External-Address` (Envoy, Istio).
///
/// **Which header wins.** With [`TrustedProxies::header`] only that header is read.
/// Otherwise none wins by rank: each header present gives a client by the walk
/// above, and if they all name the same client, that is the key; if they disagree,
/// the request is keyed by its TCP peer. Ranking headers would let a client smuggle in
/// whichever higher-ranked header your proxy does not rewrite; requiring agreement
/// cannot be steered to an address of the client's choosing. The cost: a client can
/// always choose to be counted as the proxy (by sending a header that disagrees), and
/// setups where the headers legitimately disagree (e.g. `X-Real-IP` set to an upstream
/// proxy) key everyone by the proxy — pick the header your proxies write with
/// [`TrustedProxies::header`] and neither happens.
///
/// IPv6 clients are keyed by their /64 unless [`TrustedProxies::ipv6_prefix`] says
/// otherwise; `client_ip(TrustedProxies::none())` is [`peer_ip`].
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::{Key, key};
/// use tollgate::key::TrustedProxies;
///
/// let client_ip = key::client_ip(TrustedProxies::new(["10.0.0.0/8"])?);
/// let request = |peer: &str, xff: &str| -> Result<http::request::Parts, Box<dyn std::error::Error>> {
///     let mut request = http::Request::get("/").header("x-forwarded-for", xff).body(())?;
///     request.extensions_mut().insert(peer.parse::<SocketAddr>()?);
///     Ok(request.into_parts().0)
/// };
/// let ip = |s: &str| Key::from(s.parse::<IpAddr>().expect("valid literal"));
///
/// // Through the proxy: the rightmost untrusted hop, whatever the client prepended.
/// let proxied = request("10.0.0.2:4000", "6.6.6.6, 198.51.100.7, 10.0.0.9")?;
/// assert_eq!(client_ip.extract(&proxied), Some(ip("198.51.100.7")));
/// // Straight from the internet: the header is ignored.
/// let direct = request("203.0.113.5:4000", "6.6.6.6")?;
/// assert_eq!(client_ip.extract(&direct), Some(ip("203.0.113.5")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_ip(proxies: TrustedProxies) -> Extractor {
    Extractor::named("client_ip", move |parts| {
        let peer = peer_addr(parts)?;
        let client = if proxies.contains(peer) {
            client_behind(parts, peer, &proxies)
        } else {
            peer
        };
        Some(ip_key(client, proxies.ipv6_prefix))
    })
}

/// The client of a request whose peer is a trusted proxy.
fn client_behind(parts: &Parts, peer: IpAddr, proxies: &TrustedProxies) -> IpAddr {
    let trusted = |ip: IpAddr| proxies.contains(ip);
    if let Some(header) = proxies.header {
        return forwarded::client(&parts.headers, header, peer, &trusted).unwrap_or(peer);
    }
    let mut agreed: Option<IpAddr> = None;
    for header in ProxyHeader::ALL {
        if let Some(client) = forwarded::client(&parts.headers, header, peer, &trusted) {
            match agreed {
                Some(earlier) if earlier != client => return peer,
                _ => agreed = Some(client),
            }
        }
    }
    agreed.unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_keys_keep_the_prefix_only() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("valid literal");
        let full = ip("2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff");
        assert_eq!(ip_key(full, 64), Key::from(ip("2001:db8:aaaa:bbbb::")));
        assert_eq!(ip_key(full, 128), Key::from(full));
        assert_eq!(ip_key(full, 1), Key::from(ip("::")));
        // Mapped IPv4 is IPv4: never grouped by an IPv6 prefix.
        assert_eq!(
            ip_key(ip("::ffff:192.0.2.1"), 64),
            Key::from(ip("192.0.2.1"))
        );
        assert_ne!(
            ip_key(ip("::ffff:192.0.2.1"), 64),
            ip_key(ip("::ffff:192.0.2.2"), 64)
        );
    }

    #[test]
    fn mapped_networks_become_ipv4() {
        let net = parse_network("::ffff:10.0.0.0/104").expect("valid literal");
        assert_eq!(net, "10.0.0.0/8".parse::<IpNet>().expect("valid literal"));
        assert_eq!(
            parse_network(" 10.1.2.3/8 ").expect("valid literal"),
            "10.0.0.0/8".parse::<IpNet>().expect("valid literal")
        );
    }
}
