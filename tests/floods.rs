//! Floods and hostile input: millions of distinct keys against the memory store,
//! spoofed forwarding headers, and header values built to hurt (braces, NULs, 64 KiB,
//! invalid UTF-8), the HTTP ones over a real axum server and a real client.
//!
//! The tests here run one at a time (they share the process's resident memory, which
//! one of them measures). The ten-million-key flood runs in release builds only:
//!
//! ```text
//! cargo test --release --test floods -- --nocapture
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use support::immediate::immediate;
use support::rng::Rng;
use tollgate::clock::ManualClock;
use tollgate::key::TrustedProxies;
use tollgate::key::{self, ProxyHeader};
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Policy, Quota, RateLimitLayer};

const BASE: Duration = Duration::from_secs(1_700_000_000);

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the tests of this file one at a time.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Picks in slices and ranges of `usize`.
trait Pick {
    fn below_usize(&mut self, n: usize) -> usize;
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str;
}

impl Pick for Rng {
    fn below_usize(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below_usize(items.len())]
    }
}

// ---------------------------------------------------------------------------------
// Distinct keys against the memory store

/// This process's resident set, in bytes: `/proc/self/statm` pages times the page
/// size the kernel handed the process (`AT_PAGESZ` in `/proc/self/auxv`).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("resident pages");
    pages * page_size()
}

fn page_size() -> u64 {
    const AT_PAGESZ: u64 = 6;
    let auxv = std::fs::read("/proc/self/auxv").expect("/proc/self/auxv");
    auxv.chunks_exact(16)
        .map(|pair| {
            let word =
                |at: usize| u64::from_ne_bytes(pair[at..at + 8].try_into().expect("8 bytes"));
            (word(0), word(8))
        })
        .find(|&(kind, _)| kind == AT_PAGESZ)
        .map_or(4096, |(_, size)| size)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Sends `total` distinct keys, each once, through a limiter on a store bounded to
/// `max_keys` (`None`: the default); the clock stands still, so every key stays
/// active. Checks the bound at every tenth of the flood, and that resident memory
/// stops growing once the store is full.
fn flood(total: u64, max_keys: Option<usize>) {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock);
    let store = match max_keys {
        Some(max) => store.max_keys(max).expect("max keys"),
        None => store,
    };
    let max_keys = store.get_max_keys();
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(10)).expect("limit"))
        .store(store.clone())
        .build()
        .expect("limiter");
    let runtime = runtime();
    let before = resident_bytes();
    let mut full_at = None;
    let mut at_half = 0;
    runtime.block_on(async {
        for i in 0..total {
            let decision = limiter.check("api", &Key::from(i), 1).await.expect("check");
            assert!(decision.allowed, "a new key is always admitted");
            if (i + 1) % (total / 10) == 0 {
                let len = store.len();
                assert!(len <= max_keys, "{len} keys stored, bound {max_keys}");
                if full_at.is_none() && i + 1 >= max_keys as u64 {
                    full_at = Some(resident_bytes());
                }
                if i + 1 == total / 2 {
                    at_half = resident_bytes();
                }
            }
        }
    });
    let after = resident_bytes();
    let full_at = full_at.expect("the flood fills the store");
    let len = store.len();
    eprintln!(
        "flood: {total} distinct keys, max_keys {max_keys}, {len} stored at the end; \
         RSS {:.1} MiB before, {:.1} MiB when full, {:.1} MiB at half, {:.1} MiB after \
         (+{:.1} MiB, {:.1} bytes per stored key)",
        before as f64 / MIB,
        full_at as f64 / MIB,
        at_half as f64 / MIB,
        after as f64 / MIB,
        after.saturating_sub(before) as f64 / MIB,
        after.saturating_sub(before) as f64 / max_keys as f64,
    );
    assert!(len <= max_keys);
    // GCRA state is 24 bytes a key; hash tables at worst half full double that.
    // 128 bytes a key leaves room for allocator slack, and is a fifth of what
    // storing every key would take.
    let budget = 128 * max_keys as u64 + (8 << 20);
    assert!(
        after.saturating_sub(before) <= budget,
        "RSS grew {} bytes for {max_keys} keys",
        after - before
    );
    // The second half of the flood, all on a full store, allocates nothing that
    // lasts. (Tables may rehash once as evictions churn them; that is over well
    // before half-way.)
    assert!(
        after.saturating_sub(at_half) <= 2 << 20,
        "RSS kept growing once the store was full: +{} bytes in the second half",
        after - at_half
    );
}

#[test]
fn a_flood_of_distinct_keys_stays_under_max_keys() {
    let _serial = serial();
    flood(400_000, Some(40_000));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 75 s in a debug build: run with --release (scripts/soak does)"
)]
fn ten_million_distinct_keys_stay_under_the_default_max_keys() {
    let _serial = serial();
    flood(10_000_000, None);
}

/// Sends `total` requests through one policy of `algorithm` on a store bounded to
/// `max_bytes`, key `i % keys` for request `i`, one microsecond apart (so logs take an
/// entry per request). Checks the store's count against the bound at every tenth of
/// the flood, and resident memory against it at the end.
fn flood_bytes(
    (max_keys, max_bytes): (usize, usize),
    quota: Quota,
    algorithm: Algorithm,
    total: u64,
    keys: u64,
) {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(max_keys)
        .and_then(|store| store.max_bytes(max_bytes))
        .expect("bounds");
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", quota)
                .expect("limit")
                .algorithm(algorithm),
        )
        .store(store.clone())
        .build()
        .expect("limiter");
    let before = resident_bytes();
    let mut peak = 0;
    for i in 0..total {
        clock.advance(Duration::from_micros(1));
        let decision = immediate(limiter.check("api", &Key::from(i % keys), 1)).expect("check");
        assert!(
            decision.allowed,
            "request {i} denied: the quota is far above the flood"
        );
        if (i + 1) % (total / 10) == 0 {
            let bytes = store.bytes();
            peak = peak.max(bytes);
            assert!(
                bytes <= max_bytes,
                "{bytes} bytes stored, bound {max_bytes}"
            );
        }
    }
    let grown = resident_bytes().saturating_sub(before);
    eprintln!(
        "{algorithm}: {total} requests over {keys} keys, max_bytes {:.0} MiB: {} keys and \
         {:.1} MiB stored at the end (peak {:.1} MiB counted), RSS +{:.1} MiB",
        max_bytes as f64 / MIB,
        store.len(),
        store.bytes() as f64 / MIB,
        peak as f64 / MIB,
        grown as f64 / MIB,
    );
    // Counted bytes exclude the tables' spare buckets and the allocator's slack.
    let budget = max_bytes as u64 * 3 / 2 + (16 << 20);
    assert!(
        grown <= budget,
        "RSS grew {grown} bytes for a bound of {max_bytes}"
    );
}

#[test]
fn a_flood_on_a_thousand_sub_windows_stays_under_max_bytes() {
    let _serial = serial();
    // 8 KiB of counts a key: a million keys would be 8 GB; the bound keeps 64 MiB.
    let keys = if cfg!(debug_assertions) {
        40_000
    } else {
        10_000_000
    };
    flood_bytes(
        (tollgate::MemoryStore::DEFAULT_MAX_KEYS, 64 << 20),
        Quota::per_hour(1_000_000),
        Algorithm::SlidingWindowCounters { buckets: 1000 },
        keys,
        keys,
    );
}

#[test]
fn a_flood_on_a_log_with_a_large_limit_stays_under_max_bytes() {
    let _serial = serial();
    // Keys each logging ten thousand requests at instants of their own: 16 bytes an
    // entry, 160 KB a key, twice the bound over the debug flood and twenty times over
    // the release one. (16 shards of 512 KiB: a key of this limit can hold 256 KiB.)
    let total = if cfg!(debug_assertions) {
        1_000_000
    } else {
        10_000_000
    };
    flood_bytes(
        (4096, 8 << 20),
        Quota::per_hour(16_000),
        Algorithm::SlidingWindowLog,
        total,
        total / 10_000,
    );
}

// ---------------------------------------------------------------------------------
// Spoofed forwarding headers

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// A layer with one policy on a memory store whose clock stands still.
fn layer_of(policy: Policy) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer")
}

fn fixed_window(name: &str, limit: u64) -> Policy {
    Policy::new(name, Quota::per_minute(limit))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
}

/// One hop of a forwarding header, as a client inventing them might write it.
fn spoofed_hop(rng: &mut Rng) -> String {
    match rng.below_usize(9) {
        0 => format!("203.0.113.{}", rng.below_usize(256)),
        1 => format!(
            "10.{}.{}.{}",
            rng.below_usize(256),
            rng.below_usize(256),
            rng.below_usize(256)
        ),
        2 => format!(
            "[2001:db8::{:x}]:{}",
            rng.below_usize(65_536),
            rng.below_usize(65_536)
        ),
        3 => format!("2001:db8:{:x}::1", rng.below_usize(65_536)),
        4 => rng
            .pick(&[
                "127.0.0.1",
                "::1",
                "::ffff:127.0.0.1",
                "192.168.0.1",
                "0.0.0.0",
            ])
            .to_owned(),
        5 => rng
            .pick(&["unknown", "_hidden", "", " ", "for=", "\"", "[", "]:80"])
            .to_owned(),
        6 => format!(
            "198.51.100.{}:{}",
            rng.below_usize(256),
            rng.below_usize(70_000)
        ),
        7 => "9".repeat(rng.below_usize(300)),
        _ => format!("{{{}}}", rng.below_usize(1000)),
    }
}

fn spoofed_forwarded(rng: &mut Rng) -> String {
    let hops: Vec<String> = (0..=rng.below_usize(6))
        .map(|_| {
            let hop = spoofed_hop(rng);
            match rng.below_usize(4) {
                0 => format!("for={hop}"),
                1 => format!("for=\"{hop}\";proto=https"),
                2 => format!("by=10.0.0.1;for={hop};host=x"),
                _ => hop,
            }
        })
        .collect();
    hops.join(rng.pick(&[", ", ",", " , "]))
}

/// A request with a random set of forwarding headers: several lines, long lists,
/// invalid UTF-8, addresses of trusted networks, garbage.
fn spoofed_request(rng: &mut Rng) -> Request<Full<Bytes>> {
    let mut request = Request::get("/").body(Full::default()).expect("request");
    let headers = request.headers_mut();
    for _ in 0..rng.below_usize(6) {
        let (name, value) = match rng.below_usize(4) {
            0 => ("forwarded", spoofed_forwarded(rng)),
            1 => ("x-real-ip", spoofed_hop(rng)),
            _ => {
                let hops: Vec<String> = (0..=rng.below_usize(40))
                    .map(|_| spoofed_hop(rng))
                    .collect();
                ("x-forwarded-for", hops.join(", "))
            }
        };
        let mut bytes = value.into_bytes();
        if rng.below_usize(8) == 0 {
            bytes.extend_from_slice(b"\xff\xfe\x80");
        }
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            headers.append(name, value);
        }
    }
    request
}

/// `r` of the single-policy `RateLimit` header.
fn remaining(reply: &Reply) -> u64 {
    let state = reply.header("ratelimit");
    state
        .split(";r=")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no r= in {state:?}"))
}

#[test]
fn spoofed_forwarding_headers_from_an_untrusted_peer_never_change_the_key() {
    const REQUESTS: u64 = 200;
    let _serial = serial();
    let mut rng = Rng(0x7370_6f6f_6665_6421);
    runtime().block_on(async {
        // The test client connects from 127.0.0.1; these proxies do not include it,
        // though the spoofed headers name their networks often.
        let proxies = TrustedProxies::new(["10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32"])
            .expect("proxies");
        let layer = layer_of(fixed_window("client", REQUESTS).key(key::client_ip(proxies)));
        let server = Server::start(app(layer)).await;
        for i in 0..REQUESTS {
            let reply = server.send(spoofed_request(&mut rng)).await;
            assert_eq!(reply.status, StatusCode::OK);
            // Every request, whatever it claims, spends the peer's one quota.
            assert_eq!(remaining(&reply), REQUESTS - 1 - i);
        }
        let over = server.send(spoofed_request(&mut rng)).await;
        assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            over.body.starts_with("rate limit exceeded"),
            "{}",
            over.body
        );
    });
}

#[test]
fn hops_left_of_the_client_never_change_the_key_behind_a_trusted_proxy() {
    const REQUESTS: u64 = 100;
    let _serial = serial();
    let mut rng = Rng(0x6c65_6674_686f_7073);
    runtime().block_on(async {
        // 127.0.0.1 is the proxy now; it appends the client it saw, 198.51.100.7.
        let proxies = TrustedProxies::new(["127.0.0.1"])
            .expect("proxies")
            .header(ProxyHeader::XForwardedFor);
        let layer = layer_of(fixed_window("client", REQUESTS).key(key::client_ip(proxies)));
        let server = Server::start(app(layer)).await;
        for i in 0..REQUESTS {
            let invented: Vec<String> = (0..rng.below_usize(40))
                .map(|_| spoofed_hop(&mut rng))
                .collect();
            let mut chain = invented.join(", ");
            chain.push_str(if chain.is_empty() { "" } else { ", " });
            chain.push_str("198.51.100.7");
            let request = Request::get("/")
                .header("x-forwarded-for", chain)
                .body(Full::default())
                .expect("request");
            let reply = server.send(request).await;
            assert_eq!(reply.status, StatusCode::OK);
            assert_eq!(remaining(&reply), REQUESTS - 1 - i);
        }
        // Another client behind the same proxy has its own quota.
        let other = Request::get("/")
            .header("x-forwarded-for", "198.51.100.8")
            .body(Full::default())
            .expect("request");
        assert_eq!(remaining(&server.send(other).await), REQUESTS - 1);
    });
}

// ---------------------------------------------------------------------------------
// Hostile key material

fn keyed_by_header(store: &MemoryStore) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(fixed_window("api-key", 3).key(key::header("x-api-key").expect("name")))
        .store(store.clone())
        .build()
        .expect("layer")
}

fn with_api_key(value: &[u8]) -> Request<Full<Bytes>> {
    let mut request = Request::get("/").body(Full::default()).expect("request");
    request.headers_mut().insert(
        "x-api-key",
        HeaderValue::from_bytes(value).expect("a valid header value"),
    );
    request
}

#[test]
fn braces_huge_and_non_utf8_values_get_bounded_keys_of_their_own() {
    let _serial = serial();
    let mut rng = Rng(0x686f_7374_696c_6521);
    let mut values: Vec<Vec<u8>> = vec![
        b"{tenant}".to_vec(),
        b"{tenant}:1".to_vec(),
        b"{}".to_vec(),
        b"{{{{".to_vec(),
        b"a{b}c{d}".to_vec(),
        b"\xff\xfe\xfd".to_vec(),
        b"caf\xc3".to_vec(),
        b"\x80".to_vec(),
        b"\t{x}\t".to_vec(),
    ];
    for len in [65_535, 65_536] {
        // Printable ASCII, invalid UTF-8, braces: 64 KiB of all of them.
        let value: Vec<u8> = (0..len)
            .map(|_| match rng.below_usize(3) {
                0 => 0x20 + rng.below_usize(0x5f) as u8,
                1 => 0x80 + rng.below_usize(0x80) as u8,
                _ => *b"{}".get(rng.below_usize(2)).expect("brace"),
            })
            .collect();
        let mut twin = value.clone();
        *twin.last_mut().expect("not empty") ^= 1;
        values.push(value);
        values.push(twin);
    }
    runtime().block_on(async {
        let store = MemoryStore::with_clock(ManualClock::new(BASE));
        let server = Server::start(app(keyed_by_header(&store))).await;
        for (i, value) in values.iter().enumerate() {
            let first = server.send(with_api_key(value)).await;
            assert_eq!(first.status, StatusCode::OK, "value {i}");
            assert_eq!(remaining(&first), 2, "value {i} shares a key with another");
            let second = server.send(with_api_key(value)).await;
            assert_eq!(remaining(&second), 1, "value {i} did not keep its key");
            // One fixed-size entry per distinct value, however long the value.
            assert_eq!(store.len(), i + 1);
        }
    });
    // Keys reach Redis as hex fingerprints: braces never become hash tags.
    for value in &values {
        let hex = Key::from(value.as_slice()).to_hex();
        assert_eq!(hex.len(), 32);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}

#[test]
fn forwarding_headers_of_64_kib_and_invalid_utf8_key_the_request_by_its_proxy() {
    let _serial = serial();
    runtime().block_on(async {
        // Trusting 127.0.0.1: its unreadable reports key the request by the proxy.
        let layer =
            layer_of(fixed_window("client", 10).key(key::client_ip(TrustedProxies::loopback())));
        let server = Server::start(app(layer)).await;
        let mut huge_list = vec!["203.0.113.9"; 5_500].join(",").into_bytes();
        huge_list.extend_from_slice(b",\xff");
        assert!(huge_list.len() >= 64 << 10);
        let unreadable: [(&str, Vec<u8>); 4] = [
            ("x-forwarded-for", huge_list),
            ("x-forwarded-for", b"203.0.113.9\xff".to_vec()),
            ("forwarded", vec![b'f'; 64 << 10]),
            ("x-real-ip", b"\xc3\x28".to_vec()),
        ];
        for (i, (name, value)) in unreadable.iter().enumerate() {
            let mut request = Request::get("/").body(Full::default()).expect("request");
            request
                .headers_mut()
                .insert(*name, HeaderValue::from_bytes(value).expect("valid value"));
            let reply = server.send(request).await;
            assert_eq!(reply.status, StatusCode::OK, "{name}");
            // All of them, and a plain request, share 127.0.0.1's quota.
            assert_eq!(remaining(&reply), 9 - i as u64, "{name}");
        }
        assert_eq!(remaining(&server.get("/").await), 5);
    });
}

/// Sends raw bytes on a fresh connection and returns the status line.
fn raw_status_line(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request).expect("write");
    let mut reply = Vec::new();
    let mut buf = [0; 1024];
    while !reply.windows(2).any(|w| w == b"\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn nul_bytes_never_reach_a_key_and_the_server_keeps_serving() {
    let _serial = serial();
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let server = runtime.block_on(Server::start(app(keyed_by_header(&store))));
    let addr = server.addr;
    // HTTP forbids NUL in a field value: the server answers 400 before any layer
    // runs, so no key is made from it.
    for request in [
        &b"GET / HTTP/1.1\r\nhost: x\r\nx-api-key: a\0b\r\nconnection: close\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nhost: x\r\nx-api-key: \0\r\nconnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 1.2.3.4\0\r\nconnection: close\r\n\r\n",
    ] {
        let status = runtime
            .block_on(async {
                tokio::task::spawn_blocking(move || raw_status_line(addr, request)).await
            })
            .expect("client thread");
        assert!(status.starts_with("HTTP/1.1 400"), "{status:?}");
    }
    assert_eq!(store.len(), 0);
    let ok = runtime.block_on(server.send(with_api_key(b"after-the-nuls")));
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(store.len(), 1);
    // Extractors of your own may see NULs: the key is still a fixed-size fingerprint,
    // and a NUL is a byte like any other.
    let keys = [&b"a\0b"[..], b"a", b"ab", b"a\0", b"\0"].map(Key::from);
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
        assert_eq!(a.fingerprint().len(), 16);
    }
    drop(server);
}
