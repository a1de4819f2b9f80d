//! The layer's rate-limit headers, read back with an independent Structured Field
//! Values parser (the `sfv` crate, RFC 9651).
//!
//! Input, one item per line:
//!
//! ```text
//! style draft11             draft11 (default), draft06, legacy, legacy-epoch
//! pk                        partition keys on (draft-11's `pk` on every member)
//! policy api<TAB>100/min<TAB>gcra<TAB>20<TAB>4   name, quota, algorithm, burst ("-":
//!                           none), and optionally an in-flight bound
//! at 1700000000000000       set the clock (µs since the epoch; may go backwards)
//! wait 1500000              advance the clock (µs)
//! req 1                     send a request costing 1 to every policy
//! ```
//!
//! The requests go through a real `RateLimitLayer` around a `tower::service_fn`.
//! Properties: no panic; every limited response's headers parse as the style's
//! Structured Fields, with one list member per policy, in order (in draft-11, then one
//! `qu="concurrent-requests"` member per in-flight bound), each with exactly the
//! documented parameters, and values that agree with the policy and with the
//! decisions the inner service was handed; with partition keys, every draft-11 member
//! ends with a `pk` that is the 16-byte fingerprint of the request's key.

use std::cell::RefCell;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode};
use sfv::{BareItem, Item, List, ListEntry, Parser};
use tokio::runtime::Runtime;
use tollgate::clock::ManualClock;
use tollgate::layer::Decisions;
use tollgate::layer::{HeaderStyle, ResetFormat};
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

const START: Duration = Duration::from_secs(1_700_000_000);

thread_local! {
    // Time is paused: leaky-bucket delays are skipped over, not slept.
    static RUNTIME: RefCell<Runtime> = RefCell::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime"),
    );
}

/// What a policy promises to show in headers.
struct Shown {
    name: String,
    limit: u64,
    capacity: u64,
    window_secs: u64,
    in_flight: Option<u32>,
}

/// What the headers of one run must show besides the policies.
#[derive(Clone, Copy)]
struct Options {
    style: HeaderStyle,
    partition_keys: bool,
}

pub fn check(data: &[u8]) {
    let clock = ManualClock::new(START);
    let mut style = HeaderStyle::Draft11;
    let mut partition_keys = false;
    let mut policies = Vec::new();
    let mut steps = Vec::new();
    for line in crate::lines(data) {
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match word {
            "style" => {
                style = match rest.trim() {
                    "draft06" => HeaderStyle::Draft06,
                    "legacy" => HeaderStyle::Legacy(ResetFormat::Seconds),
                    "legacy-epoch" => HeaderStyle::Legacy(ResetFormat::UnixEpoch),
                    _ => HeaderStyle::Draft11,
                };
            }
            "pk" => partition_keys = true,
            "policy" => policies.extend(policy(rest)),
            "at" | "wait" | "req" => {
                if let Ok(n) = rest.trim().parse::<u64>() {
                    steps.push((word.to_owned(), n));
                }
            }
            _ => {}
        }
    }
    if policies.len() > 8 || steps.len() > 64 {
        return;
    }
    let shown: Vec<Shown> = policies
        .iter()
        .map(|p: &Policy| Shown {
            name: p.name().to_owned(),
            limit: p.quota().limit(),
            capacity: match p.get_algorithm() {
                Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => {
                    p.quota().burst()
                }
                _ => p.quota().limit(),
            },
            window_secs: ceil_secs(p.quota().period()).max(1),
            in_flight: p.get_in_flight(),
        })
        .collect();
    let options = Options {
        style,
        partition_keys,
    };
    let Ok(layer) = RateLimitLayer::builder()
        .policies(policies)
        .store(MemoryStore::with_clock(clock.clone()))
        .partition_keys(partition_keys)
        .build()
    else {
        return;
    };
    let handed: Arc<Mutex<Option<Decisions>>> = Arc::default();
    let seen = handed.clone();
    let inner = tower::service_fn(move |request: Request<String>| {
        let decisions = request.extensions().get::<Decisions>().cloned();
        *seen.lock().unwrap_or_else(PoisonError::into_inner) = decisions;
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    });
    let service = layer.headers(style).layer(inner);

    RUNTIME.with_borrow(|runtime| {
        for (step, n) in steps {
            match step.as_str() {
                "at" => clock.set(Duration::from_micros(n)),
                "wait" => clock.advance(Duration::from_micros(n)),
                _ => {
                    let cost = u32::try_from(n).unwrap_or(u32::MAX);
                    *handed.lock().unwrap_or_else(PoisonError::into_inner) = None;
                    let request = Request::get("/")
                        .header("x-cost", cost)
                        .body(String::new())
                        .expect("request");
                    let response = runtime
                        .block_on(service.clone().oneshot(request))
                        .unwrap_or_else(|never| match never {});
                    let decisions = handed.lock().unwrap_or_else(PoisonError::into_inner).take();
                    check_response(options, &shown, cost, &response, decisions.as_ref());
                }
            }
        }
    });
}

/// A policy from `name \t quota \t algorithm \t burst`, every request costing its
/// `x-cost` header.
fn policy(spec: &str) -> Option<Policy> {
    let mut fields = spec.split('\t');
    let name = fields.next()?;
    let mut quota: Quota = fields.next()?.parse().ok()?;
    let algorithm = match fields.next().unwrap_or("gcra") {
        "fixed_window" => Algorithm::FixedWindow,
        "sliding_window" => Algorithm::SlidingWindow,
        "sliding_window_log" => Algorithm::SlidingWindowLog,
        "token_bucket" => Algorithm::TokenBucket,
        "leaky_bucket" => Algorithm::LeakyBucket,
        other => match other.strip_prefix("sliding_window_counters:") {
            Some(buckets) => Algorithm::SlidingWindowCounters {
                buckets: buckets.parse().ok()?,
            },
            None => Algorithm::Gcra,
        },
    };
    if let Some(burst) = fields.next().and_then(|b| b.parse().ok()) {
        quota = quota.with_burst(burst).ok()?;
    }
    let mut policy = Policy::new(name, quota).ok()?.algorithm(algorithm);
    if let Some(max) = fields.next().and_then(|n| n.parse().ok()) {
        policy = policy.in_flight(max).ok()?;
    }
    Some(policy.costs(|parts: &http::request::Parts| {
        parts
            .headers
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    }))
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn check_response(
    options: Options,
    shown: &[Shown],
    cost: u32,
    response: &Response<tollgate::layer::RateLimitBody<String>>,
    decisions: Option<&Decisions>,
) {
    let status = response.status();
    assert!(
        status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS,
        "{status}"
    );
    let headers = response.headers();
    if let Some(retry) = headers.get("retry-after") {
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        let secs: u64 = text(retry.as_bytes())
            .parse()
            .expect("Retry-After is seconds");
        assert!(secs >= 1, "Retry-After: {secs}");
    }
    let style = options.style;
    if cost == 0 {
        // Free for every policy: no rate was checked, so none is described; only the
        // in-flight bounds (draft-11), which every request takes a slot of.
        assert_eq!(status, StatusCode::OK);
        for name in ["ratelimit", "ratelimit-limit", "x-ratelimit-limit"] {
            assert!(!headers.contains_key(name), "{name} on a free request");
        }
        let bounds = shown.iter().filter(|s| s.in_flight.is_some()).count();
        if style == HeaderStyle::Draft11 && bounds > 0 {
            let policy = list(headers, "ratelimit-policy");
            assert_eq!(policy.len(), bounds);
            for (member, shown) in policy
                .iter()
                .zip(shown.iter().filter(|s| s.in_flight.is_some()))
            {
                check_in_flight_member(item_of(member), shown, options.partition_keys);
            }
        } else {
            assert!(
                !headers.contains_key("ratelimit-policy"),
                "a policy header on a free request"
            );
        }
        return;
    }
    if status == StatusCode::OK {
        let decisions = decisions.expect("an admitted request carries its decisions");
        assert_eq!(decisions.len(), shown.len());
    }
    match style {
        HeaderStyle::Draft11 => check_draft11(headers, shown, decisions, options.partition_keys),
        HeaderStyle::Draft06 => {
            let policy = list(headers, "ratelimit-policy");
            assert_eq!(policy.len(), shown.len());
            for (member, shown) in policy.iter().zip(shown) {
                let item = item_of(member);
                assert_eq!(item.bare_item, BareItem::Integer(int(shown.limit)));
                assert_eq!(param_names(item), ["w"]);
                assert_eq!(
                    item.params.get("w"),
                    Some(&BareItem::Integer(int(shown.window_secs)))
                );
            }
            let limit = integer(headers, "ratelimit-limit");
            let remaining = integer(headers, "ratelimit-remaining");
            integer(headers, "ratelimit-reset");
            assert!(shown.iter().any(|s| s.capacity == limit), "limit {limit}");
            assert!(remaining <= limit);
        }
        HeaderStyle::Legacy(_) => {
            let number = |name: &str| -> u64 {
                let value = headers
                    .get(name)
                    .unwrap_or_else(|| panic!("{name} missing"));
                text(value.as_bytes()).parse().expect("a whole number")
            };
            let limit = number("x-ratelimit-limit");
            assert!(shown.iter().any(|s| s.capacity == limit), "limit {limit}");
            assert!(number("x-ratelimit-remaining") <= limit);
            number("x-ratelimit-reset");
        }
        _ => {}
    }
}

/// The SF String a policy is named by.
fn sf_name(shown: &Shown) -> BareItem {
    BareItem::String(
        sfv::StringRef::from_str(&shown.name)
            .expect("printable ASCII")
            .to_owned(),
    )
}

/// A policy's in-flight member: `"name";q=<max>;qu="concurrent-requests"`, and `pk`.
fn check_in_flight_member(member: &Item, shown: &Shown, partition_keys: bool) {
    assert_eq!(member.bare_item, sf_name(shown), "in-flight member");
    let expected: &[&str] = if partition_keys {
        &["q", "qu", "pk"]
    } else {
        &["q", "qu"]
    };
    assert_eq!(param_names(member), expected);
    assert_eq!(
        member.params.get("q"),
        Some(&BareItem::Integer(int(u64::from(
            shown.in_flight.expect("an in-flight bound")
        ))))
    );
    assert_eq!(
        member
            .params
            .get("qu")
            .and_then(BareItem::as_string)
            .map(sfv::StringRef::as_str),
        Some("concurrent-requests")
    );
    check_pk(member, partition_keys);
}

/// With partition keys, the member's `pk` is the request's key (every policy here is
/// keyed globally): 16 bytes, the global key's fingerprint.
fn check_pk(member: &Item, partition_keys: bool) {
    let pk = member.params.get("pk");
    if !partition_keys {
        assert!(pk.is_none(), "pk while partition keys are off");
        return;
    }
    let bytes = pk
        .and_then(BareItem::as_byte_sequence)
        .expect("pk is a Byte Sequence");
    let global = tollgate::key::global()
        .extract(&http::Request::new(()).into_parts().0)
        .expect("the global key");
    assert_eq!(bytes, global.fingerprint());
}

fn check_draft11(
    headers: &HeaderMap,
    shown: &[Shown],
    decisions: Option<&Decisions>,
    partition_keys: bool,
) {
    let policy = list(headers, "ratelimit-policy");
    let state = list(headers, "ratelimit");
    let bounds: Vec<&Shown> = shown.iter().filter(|s| s.in_flight.is_some()).collect();
    assert_eq!(policy.len(), shown.len() + bounds.len());
    assert_eq!(state.len(), shown.len());
    for (member, shown) in policy[shown.len()..].iter().zip(bounds) {
        check_in_flight_member(item_of(member), shown, partition_keys);
    }
    let (policy_params, state_params): (&[&str], &[&str]) = if partition_keys {
        (&["q", "w", "pk"], &["r", "t", "pk"])
    } else {
        (&["q", "w"], &["r", "t"])
    };
    for (i, shown) in shown.iter().enumerate() {
        let name = sf_name(shown);

        let member = item_of(&policy[i]);
        assert_eq!(member.bare_item, name, "policy member {i}");
        assert_eq!(param_names(member), policy_params);
        check_pk(member, partition_keys);
        assert_eq!(
            member.params.get("q"),
            Some(&BareItem::Integer(int(shown.limit)))
        );
        assert_eq!(
            member.params.get("w"),
            Some(&BareItem::Integer(int(shown.window_secs)))
        );

        let member = item_of(&state[i]);
        assert_eq!(member.bare_item, name, "state member {i}");
        assert_eq!(param_names(member), state_params);
        check_pk(member, partition_keys);
        let r = param_u64(member, "r");
        let t = param_u64(member, "t");
        assert!(
            r <= shown.capacity,
            "r={r} above capacity {}",
            shown.capacity
        );
        if let Some(d) = decisions.map(|d| &d[i]) {
            assert_eq!(d.limit, shown.name);
            assert_eq!(r, d.remaining);
            assert_eq!(t, ceil_secs(d.reset_after));
        }
    }
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("header values we write are ASCII")
}

fn list(headers: &HeaderMap, name: &str) -> List {
    let value = headers
        .get(name)
        .unwrap_or_else(|| panic!("{name} missing"));
    Parser::new(value.as_bytes())
        .parse::<List>()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not an SF List: {e}"))
}

fn integer(headers: &HeaderMap, name: &str) -> u64 {
    let value = headers
        .get(name)
        .unwrap_or_else(|| panic!("{name} missing"));
    let item: Item = Parser::new(value.as_bytes())
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not an SF Item: {e}"));
    assert!(item.params.is_empty(), "{name} has parameters");
    let n = item.bare_item.as_integer().expect("an SF Integer");
    u64::try_from(i64::from(n)).expect("not negative")
}

fn item_of(entry: &ListEntry) -> &Item {
    match entry {
        ListEntry::Item(item) => item,
        ListEntry::InnerList(_) => panic!("an inner list where an item belongs"),
    }
}

fn param_names(item: &Item) -> Vec<&str> {
    item.params.keys().map(|k| k.as_str()).collect()
}

fn param_u64(item: &Item, name: &str) -> u64 {
    let n = item
        .params
        .get(name)
        .and_then(BareItem::as_integer)
        .unwrap_or_else(|| panic!("parameter {name} is not an integer"));
    u64::try_from(i64::from(n)).expect("not negative")
}

fn int(n: u64) -> sfv::Integer {
    sfv::Integer::try_from(n).expect("within SF Integer range")
}
