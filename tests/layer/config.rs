//! `tollgate::config`: malformed files, each placed at its line and column with the
//! value quoted; a file that reads into the same limits as the builder; plans from a
//! header and from the request extensions.

use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use http::request::Parts;
use tollgate::config::{Limits, PlanName};
use tollgate::key::TrustedProxies;
use tollgate::layer::{Costs, MissingKey};
use tollgate::{Algorithm, Penalty, Policy, Quota, key};

/// `(what, file, line, column, text the message must quote)`.
type Case = (&'static str, &'static str, usize, usize, &'static str);

const HEAD: &str = "[[limit]]\nname = \"api\"\nquota = \"100/min\"\n";

const MALFORMED: &[Case] = &[
    // Syntax.
    (
        "unquoted quota",
        "[[limit]]\nname = \"api\"\nquota = 100/min\n",
        3,
        9,
        "\"100/min\"",
    ),
    (
        "string never closed",
        "[[limit]]\nname = \"api\nquota = \"1/s\"\n",
        2,
        12,
        "\"name = \\\"api\"",
    ),
    (
        "key given twice",
        "[[limit]]\nname = \"api\"\nname = \"web\"\nquota = \"1/s\"\n",
        3,
        1,
        "\"name\"",
    ),
    // Shape: unknown keys, wrong types, missing keys.
    (
        "misspelt key",
        "[[limit]]\nname = \"api\"\nqouta = \"1/s\"\n",
        3,
        1,
        "`qouta`",
    ),
    (
        "misspelt table",
        "[[limits]]\nname = \"api\"\nquota = \"1/s\"\n",
        1,
        3,
        "`limits`",
    ),
    (
        "burst as a string",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nburst = \"20\"\n",
        4,
        9,
        "\"20\"",
    ),
    ("no quota", "[[limit]]\nname = \"api\"\n", 1, 1, "`quota`"),
    (
        "negative cost",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\n[limit.costs]\n\"POST /a\" = -1\n",
        5,
        13,
        "`-1`",
    ),
    (
        "misspelt plan key",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nplan_from = \"extension\"\nplans = { pro = { quota = \"2/s\", brust = 3 } }\n",
        5,
        34,
        "`brust`",
    ),
    ("no limit at all", "# nothing yet\n", 1, 1, "[[limit]]"),
    // Semantics, placed at the value after parsing.
    (
        "bad quota",
        "[[limit]]\nname = \"api\"\nquota = \"100/fortnight\"\n",
        3,
        9,
        "\"100/fortnight\"",
    ),
    (
        "zero quota",
        "[[limit]]\nname = \"api\"\nquota = \"0/min\"\n",
        3,
        9,
        "\"0/min\"",
    ),
    (
        "zero burst",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nburst = 0\n",
        4,
        9,
        "burst 0",
    ),
    (
        "bad name",
        "[[limit]]\nname = \"a\\tb\"\nquota = \"1/s\"\n",
        2,
        8,
        "\"a\\tb\"",
    ),
    (
        "duplicate name",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\n[[limit]]\nname = \"api\"\nquota = \"2/s\"\n",
        5,
        8,
        "\"api\"",
    ),
    (
        "unknown algorithm",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nalgorithm = \"token-bucket\"\n",
        4,
        13,
        "\"token-bucket\"",
    ),
    (
        "burst on a window algorithm",
        "[[limit]]\nname = \"api\"\nquota = \"10/s\"\nalgorithm = \"fixed_window\"\nburst = 20\n",
        5,
        9,
        "burst 20",
    ),
    (
        "buckets not dividing the period",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\nalgorithm = \"sliding_window_counters\"\nbuckets = 7\n",
        5,
        11,
        "7 buckets",
    ),
    (
        "counters without buckets",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\nalgorithm = \"sliding_window_counters\"\n",
        4,
        13,
        "\"sliding_window_counters\"",
    ),
    (
        "buckets on gcra",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\nbuckets = 6\n",
        4,
        11,
        "buckets = 6",
    ),
    (
        "max_delay on gcra",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\nmax_delay = \"2s\"\n",
        4,
        13,
        "\"2s\"",
    ),
    (
        "bad max_delay",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\nalgorithm = \"leaky_bucket\"\nmax_delay = \"2 fortnights\"\n",
        5,
        13,
        "\"2 fortnights\"",
    ),
    (
        "unknown key kind",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"cookie:session\"\n",
        4,
        7,
        "\"cookie:session\"",
    ),
    (
        "bad header name",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"header:x api\"\n",
        4,
        7,
        "\"x api\"",
    ),
    (
        "bad CIDR",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"client_ip\"\ntrusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n",
        5,
        34,
        "\"10.0.0.0/33\"",
    ),
    (
        "proxies without client_ip",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"peer_ip\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
        5,
        19,
        "\"peer_ip\"",
    ),
    (
        "unknown on_missing_key",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\non_missing_key = \"drop\"\n",
        4,
        18,
        "\"drop\"",
    ),
    (
        "cost above capacity",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\n[limit.costs]\n\"POST /upload\" = 11\n",
        5,
        18,
        "cost 11",
    ),
    (
        "default cost above capacity",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\n[limit.costs]\ndefault = 12\n",
        5,
        11,
        "default cost 12",
    ),
    (
        "axum 0.7 route syntax",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\n[limit.costs]\n\"GET /users/:id\" = 2\n",
        5,
        1,
        "\"/users/:id\"",
    ),
    (
        "lowercase method",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\n[limit.costs]\n\"post /users\" = 2\n",
        5,
        1,
        "\"post /users\"",
    ),
    (
        "route without a method",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\n[limit.costs]\n\"/users\" = 2\n",
        5,
        1,
        "\"/users\"",
    ),
    (
        "routes that tie",
        "[[limit]]\nname = \"api\"\nquota = \"10/min\"\n[limit.costs]\n\"GET /a/{x}\" = 1\n\"GET /a/{y}\" = 2\n",
        6,
        1,
        "\"GET /a/{y}\"",
    ),
    (
        "unknown plan_from",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nplan_from = \"cookie:plan\"\nplans = { pro = \"2/s\" }\n",
        4,
        13,
        "\"cookie:plan\"",
    ),
    (
        "plans without plan_from",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nplans = { pro = \"2/s\" }\n",
        4,
        9,
        "plan_from",
    ),
    (
        "plan_from without plans",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nplan_from = \"extension\"\n",
        4,
        13,
        "\"extension\"",
    ),
    (
        "bad plan quota",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nplan_from = \"extension\"\n[limit.plans]\npro = \"lots\"\n",
        6,
        7,
        "\"lots\"",
    ),
    (
        "bad plan quota in a table",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nplan_from = \"extension\"\n[limit.plans]\npro = { quota = \"1/s\", burst = 0 }\n",
        6,
        32,
        "burst 0",
    ),
    (
        "plan burst on a window algorithm",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nalgorithm = \"sliding_window\"\nplan_from = \"header:x-plan\"\n[limit.plans]\npro = { quota = \"10/s\", burst = 20 }\n",
        7,
        7,
        "plan \"pro\": invalid limit \"api\": sliding_window",
    ),
    // Routes, counted statuses, penalties.
    (
        "empty routes",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nroutes = []\n",
        4,
        10,
        "limits nothing",
    ),
    (
        "route with a lowercase method",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nroutes = [\"POST /a\", \"post /login\"]\n",
        4,
        22,
        "invalid route \"post /login\"",
    ),
    (
        "route in axum 0.7 syntax",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nroutes = [\"GET /users/:id\"]\n",
        4,
        11,
        "\"/users/:id\"",
    ),
    (
        "status out of range",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\ncount_when = [401, 99]\n",
        4,
        20,
        "invalid count_when status 99",
    ),
    (
        "status class misspelt",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\ncount_when = [\"4xy\"]\n",
        4,
        15,
        "\"4xy\"",
    ),
    (
        "penalty after 0",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 0, block_for = \"1min\" }\n",
        4,
        21,
        "Penalty::after(0)",
    ),
    (
        "penalty of several rejections without a window",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 3, block_for = \"1min\" }\n",
        4,
        11,
        "set Penalty::within",
    ),
    (
        "penalty block misspelt",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"ten minutes\" }\n",
        4,
        36,
        "invalid duration \"ten minutes\"",
    ),
    (
        "penalty with an unknown key",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block = \"1min\" }\n",
        4,
        24,
        "`block`",
    ),
    (
        "penalty escalation that shrinks",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate = [\"30min\", \"5min\"], remember = \"1d\" }\n",
        4,
        66,
        "escalation block 2 (300s) is shorter",
    ),
    (
        "penalty escalation misspelt",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate = [\"an hour\"], remember = \"1d\" }\n",
        4,
        57,
        "invalid duration \"an hour\"",
    ),
    (
        "penalty escalation empty",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate = [], remember = \"1d\" }\n",
        4,
        56,
        "escalate = []",
    ),
    (
        "penalty escalation of more than 8 blocks",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"1min\", escalate = [\"1min\", \"1min\", \"1min\", \"1min\", \"1min\", \"1min\", \"1min\", \"1min\", \"1min\"], remember = \"1d\" }\n",
        4,
        55,
        "at most 8",
    ),
    (
        "penalty growth by a factor of 1",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate_by = { factor = 1, cap = \"1h\" }, remember = \"1d\" }\n",
        4,
        70,
        "a factor below 2",
    ),
    (
        "penalty growth capped below its block",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate_by = { factor = 2, cap = \"5min\" }, remember = \"1d\" }\n",
        4,
        79,
        "escalation cap 300s is shorter",
    ),
    (
        "penalty growth with an unknown key",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate_by = { factor = 2, max = \"1h\" }, remember = \"1d\" }\n",
        4,
        73,
        "`max`",
    ),
    (
        "penalty escalation without remember",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate = [\"1h\"] }\n",
        4,
        11,
        "need Penalty::remember",
    ),
    (
        "penalty remembered no longer than its longest block",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", escalate_by = { factor = 2, cap = \"1d\" }, remember = \"1d\" }\n",
        4,
        98,
        "not longer than the longest block",
    ),
    (
        "penalty remember misspelt",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", remember = \"forever\" }\n",
        4,
        56,
        "invalid duration \"forever\"",
    ),
    (
        "penalty remembered past a century",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\npenalty = { after = 1, block_for = \"10min\", remember = \"36501d\" }\n",
        4,
        56,
        "longer than 100 years",
    ),
    (
        "fallback for an unknown limit",
        "[[limit]]\nname = \"ip\"\nquota = \"1/s\"\nfallback_for = \"per-key\"\n",
        4,
        16,
        "no [[limit]] of that name",
    ),
    (
        "fallback for itself",
        "[[limit]]\nname = \"ip\"\nquota = \"1/s\"\nfallback_for = \"ip\"\n",
        4,
        16,
        "cannot stand in for itself",
    ),
    (
        "fallback for a fallback",
        "[[limit]]\nname = \"a\"\nquota = \"1/s\"\nkey = \"header:x-a\"\n[[limit]]\nname = \"b\"\nquota = \"1/s\"\nfallback_for = \"a\"\n[[limit]]\nname = \"c\"\nquota = \"1/s\"\nfallback_for = \"b\"\n",
        12,
        16,
        "itself a fallback",
    ),
    (
        "in_flight 0",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nin_flight = 0\n",
        4,
        13,
        "invalid in_flight 0",
    ),
    (
        "wait misspelt",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nwait = \"two seconds\"\n",
        4,
        8,
        "invalid duration \"two seconds\"",
    ),
    (
        "max_actual 0 (a metered limit would limit nothing)",
        "[[limit]]\nname = \"api\"\nquota = \"5/min\"\nmetered = true\nmax_actual = 0\n",
        5,
        14,
        "invalid max_actual 0",
    ),
    (
        "fallback that takes costs above its capacity",
        "[[limit]]\nname = \"per-key\"\nquota = \"10/min\"\nkey = \"header:x-api-key\"\ncosts = { \"POST /upload\" = 5 }\n[[limit]]\nname = \"anonymous\"\nquota = \"2/min\"\nkey = \"peer_ip\"\nfallback_for = \"per-key\"\n",
        10,
        16,
        "takes the costs of \"per-key\"",
    ),
    (
        "fallback for a limit every request has a key for, scoped to a route",
        "[[limit]]\nname = \"all\"\nquota = \"10/min\"\nroutes = [\"GET /a\"]\n[[limit]]\nname = \"anon\"\nquota = \"1/min\"\nkey = \"peer_ip\"\nfallback_for = \"all\"\n",
        9,
        16,
        "finds a key for every request",
    ),
    (
        "meter misspelt",
        "[[limit]]\nname = \"api\"\nquota = \"1/s\"\nmeter = \"bytes\"\n",
        4,
        9,
        "invalid meter \"bytes\"",
    ),
];

#[test]
fn every_mistake_is_placed_and_quoted() {
    assert!(MALFORMED.len() >= 15);
    let mut wrong = Vec::new();
    for &(what, text, line, column, quoted) in MALFORMED {
        match Limits::from_toml(text) {
            Ok(_) => wrong.push(format!("{what}: accepted")),
            Err(err) => {
                let shown = err.to_string();
                if (err.line(), err.column()) != (Some(line), Some(column))
                    || !shown.starts_with(&format!("line {line}, column {column}: "))
                    || !shown.contains(quoted)
                {
                    wrong.push(format!(
                        "{what}: expected {line}:{column} quoting {quoted}, got {:?}:{:?} {shown}",
                        err.line(),
                        err.column()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn errors_from_a_file_name_it() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("limits.toml");
    std::fs::write(&path, format!("{HEAD}algorithm = \"gcra2\"\n"))?;
    let err = Limits::from_path(&path).expect_err("unknown algorithm");
    assert_eq!(err.file(), Some(path.as_path()));
    assert_eq!((err.line(), err.column()), (Some(4), Some(13)));
    assert!(
        err.to_string().starts_with(&format!(
            "{}:4:13: unknown algorithm \"gcra2\"",
            path.display()
        )),
        "{err}"
    );
    // What `fn main() -> Result<(), Box<dyn Error>>` prints: the same text.
    let boxed: Box<dyn std::error::Error> = Box::new(err.clone());
    assert_eq!(format!("{boxed:?}"), err.to_string());

    let missing = dir.path().join("missing.toml");
    let err = Limits::from_path(&missing).expect_err("no such file");
    assert_eq!(err.file(), Some(missing.as_path()));
    assert_eq!(err.line(), None);
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read", missing.display()))
    );
    Ok(())
}

const FILE: &str = r#"
[[limit]]
name = "api"
quota = "100/min"
burst = 20
key = "client_ip"
trusted_proxies = ["10.0.0.0/8"]

[limit.costs]
"POST /users" = 2
"GET /files/{*path}" = 5
"* /admin/{*rest}" = 10
default = 1

[[limit]]
name = "per-key"
quota = "60/min"
algorithm = "token_bucket"
key = "header:x-api-key"
on_missing_key = "reject"
plan_from = "extension"
plans = { pro = "1000/min", enterprise = { quota = "10000/min", burst = 2000 } }

[[limit]]
name = "by-header-plan"
quota = "10/s"
algorithm = "sliding_window"
key = "peer_ip"
plan_from = "header:x-plan"
plans = { gold = "50/s" }

[[limit]]
name = "uploads"
quota = "10/h"
algorithm = "sliding_window_counters"
buckets = 6

[[limit]]
name = "reports"
quota = "5/s"
algorithm = "leaky_bucket"
max_delay = "2s"
key = "matched_path"

[[limit]]
name = "log"
quota = "3 per 10 seconds"
algorithm = "sliding_window_log"

[[limit]]
name = "windows"
quota = "1000/d"
algorithm = "fixed_window"
"#;

fn built() -> Result<Vec<Policy>, tollgate::ConfigError> {
    let plans = |parts: &Parts| match parts.extensions.get::<PlanName>()?.0.as_str() {
        "pro" => Some(Quota::per_minute(1000)),
        "enterprise" => Quota::per_minute(10000).with_burst(2000).ok(),
        _ => None,
    };
    Ok(vec![
        Policy::new("api", Quota::per_minute(100).with_burst(20)?)?
            .key(key::client_ip(TrustedProxies::new(["10.0.0.0/8"])?))
            .costs(
                Costs::new()
                    .route(Method::POST, "/users", 2)?
                    .route(Method::GET, "/files/{*path}", 5)?
                    .route_any("/admin/{*rest}", 10)?
                    .default(1),
            ),
        Policy::new("per-key", Quota::per_minute(60))?
            .algorithm(Algorithm::TokenBucket)
            .key(key::header("x-api-key")?)
            .on_missing_key(MissingKey::Reject)
            .quota_from(plans),
        Policy::new("by-header-plan", Quota::per_second(10))?
            .algorithm(Algorithm::SlidingWindow)
            .key(key::peer_ip())
            .quota_from(|parts| {
                (parts.headers.get("x-plan")? == "gold").then(|| Quota::per_second(50))
            }),
        Policy::new("uploads", Quota::per_hour(10))?
            .algorithm(Algorithm::SlidingWindowCounters { buckets: 6 }),
        Policy::new("reports", Quota::per_second(5))?
            .algorithm(Algorithm::LeakyBucket)
            .max_delay(Duration::from_secs(2))
            .key(key::matched_path()),
        Policy::new("log", Quota::new(3, Duration::from_secs(10))?)?
            .algorithm(Algorithm::SlidingWindowLog),
        Policy::new("windows", Quota::per_day(1000))?.algorithm(Algorithm::FixedWindow),
    ])
}

/// Requests that tell the rules apart: methods, routes, peers behind and outside the
/// proxy, API keys, plans from the extensions and from a header.
fn samples() -> Vec<Parts> {
    let mut samples = Vec::new();
    let routes = [
        (Method::POST, "/users"),
        (Method::GET, "/users"),
        (Method::GET, "/files/a/b.txt"),
        (Method::DELETE, "/admin/x"),
        (Method::HEAD, "/files/x"),
    ];
    let peers = ["10.0.0.2:4000", "203.0.113.5:4000", "[2001:db8::1]:80"];
    let plans = [
        None,
        Some("pro"),
        Some("enterprise"),
        Some("gold"),
        Some("unknown"),
    ];
    for (i, (method, uri)) in routes.iter().enumerate() {
        for (j, peer) in peers.iter().enumerate() {
            for (k, plan) in plans.iter().enumerate() {
                let mut request = http::Request::builder()
                    .method(method.clone())
                    .uri(*uri)
                    .header("x-forwarded-for", format!("198.51.100.{}", i + j));
                if (i + j + k) % 2 == 0 {
                    request = request.header("x-api-key", format!("key-{k}"));
                }
                if let Some(plan) = plan {
                    request = request.header("x-plan", *plan);
                }
                let mut request = request.body(()).expect("request");
                request
                    .extensions_mut()
                    .insert(peer.parse::<SocketAddr>().expect("peer"));
                if let Some(plan) = plan {
                    request.extensions_mut().insert(PlanName::from(*plan));
                }
                samples.push(request.into_parts().0);
            }
        }
    }
    samples
}

#[test]
fn a_file_reads_into_the_limits_the_builder_makes() -> Result<(), Box<dyn std::error::Error>> {
    let from_file = Limits::from_toml(FILE)?.into_policies();
    let built = built()?;
    assert_eq!(from_file.len(), built.len());
    let samples = samples();
    for (file, code) in from_file.iter().zip(&built) {
        let name = code.name();
        assert_eq!(file.name(), name);
        assert_eq!(file.quota(), code.quota(), "{name}");
        assert_eq!(file.quota().burst(), code.quota().burst(), "{name}");
        assert_eq!(file.get_algorithm(), code.get_algorithm(), "{name}");
        assert_eq!(file.get_max_delay(), code.get_max_delay(), "{name}");
        assert_eq!(file.missing_key(), code.missing_key(), "{name}");
        for parts in &samples {
            let request = format!("{name}: {} {} {:?}", parts.method, parts.uri, parts.headers);
            assert_eq!(file.key_of(parts), code.key_of(parts), "{request}");
            assert_eq!(file.cost_of(parts), code.cost_of(parts), "{request}");
            assert_eq!(file.quota_of(parts), code.quota_of(parts), "{request}");
        }
    }
    // The builder accepts what the file gave.
    tollgate::RateLimitLayer::builder()
        .policies(from_file)
        .build()?;
    Ok(())
}

#[test]
fn an_escalating_penalty_reads_as_the_builder_makes_it() -> Result<(), Box<dyn std::error::Error>> {
    let file = Limits::from_toml(
        r#"
[[limit]]
name = "login"
quota = "5/min"
penalty = { after = 5, within = "1min", block_for = "2min", escalate = ["5min", "10min"], escalate_by = { factor = 2, cap = "1h" }, remember = "1d" }

[[limit]]
name = "api"
quota = "100/min"
penalty = { after = 1, block_for = "1min", remember = "2min" }
"#,
    )?
    .into_policies();
    let min = |m: u64| Duration::from_secs(60 * m);
    // The README's ("Operating limits").
    let login = Penalty::after(5)
        .within(min(1))
        .block_for(min(2))
        .escalate(&[min(5), min(10)])
        .escalate_by(2, min(60))
        .remember(min(24 * 60));
    let api = Penalty::after(1).block_for(min(1)).remember(min(2));
    assert_eq!(file[0].limit().get_penalty(), Some(login));
    assert_eq!(file[1].limit().get_penalty(), Some(api));
    // 2, 5, 10, then doubling up to the hour.
    let blocks: Vec<Duration> = (0..7).map(|trips| login.next_block(trips)).collect();
    assert_eq!(
        blocks,
        [min(2), min(5), min(10), min(20), min(40), min(60), min(60)]
    );
    Ok(())
}

fn request(header_plan: Option<&str>, extension_plan: Option<&str>) -> Parts {
    let mut request = http::Request::get("/");
    if let Some(plan) = header_plan {
        request = request.header("x-plan", plan);
    }
    let mut request = request.body(()).expect("request");
    if let Some(plan) = extension_plan {
        request.extensions_mut().insert(PlanName::from(plan));
    }
    request.into_parts().0
}

/// `(plan in the x-plan header, plan in the extensions, quota expected)`.
type PlanCase = (Option<&'static str>, Option<&'static str>, Option<Quota>);

fn assert_plans(file: &str, cases: &[PlanCase]) -> Result<(), tollgate::ConfigError> {
    let policy = Limits::from_toml(file)?.into_policies().remove(0);
    for &(header, extension, expected) in cases {
        let got = policy.quota_of(&request(header, extension));
        assert_eq!(got, expected, "header {header:?}, extension {extension:?}");
    }
    Ok(())
}

#[test]
fn plans_come_from_a_header() -> Result<(), Box<dyn std::error::Error>> {
    let file = format!(
        "{HEAD}plan_from = \"header:X-Plan\"\n[limit.plans]\npro = \"1000/min\"\nmax = {{ quota = \"5000/min\", burst = 100 }}\n"
    );
    assert_plans(
        &file,
        &[
            (Some("pro"), None, Some(Quota::per_minute(1000))),
            (
                Some("max"),
                None,
                Some(Quota::per_minute(5000).with_burst(100)?),
            ),
            // Unknown, differently cased, absent, or only in the extensions: the limit's own.
            (Some("free"), None, None),
            (Some("PRO"), None, None),
            (None, None, None),
            (None, Some("pro"), None),
        ],
    )?;
    Ok(())
}

#[test]
fn plans_come_from_the_extension() -> Result<(), Box<dyn std::error::Error>> {
    let file = format!(
        "{HEAD}plan_from = \"extension\"\nplans = {{ pro = \"1000/min\", team = \"20 per 1 second\" }}\n"
    );
    assert_plans(
        &file,
        &[
            (None, Some("pro"), Some(Quota::per_minute(1000))),
            (None, Some("team"), Some(Quota::per_second(20))),
            (None, Some("gold"), None),
            // The header is what a caller could send itself: not read here.
            (Some("pro"), None, None),
        ],
    )?;
    Ok(())
}

#[test]
fn defaults_are_the_builders() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Limits::from_toml(HEAD)?.into_policies().remove(0);
    let default = Policy::new("api", Quota::per_minute(100))?;
    assert_eq!(policy.get_algorithm(), default.get_algorithm());
    assert_eq!(policy.missing_key(), MissingKey::Skip);
    let parts = request(Some("pro"), Some("pro"));
    assert_eq!(policy.key_of(&parts), key::global().extract(&parts));
    assert_eq!(policy.cost_of(&parts), 1);
    assert_eq!(policy.quota_of(&parts), None);
    Ok(())
}

#[test]
fn the_example_file_reads() -> Result<(), tollgate::ConfigError> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tollgate.toml");
    let names: Vec<&str> = Limits::from_path(path)?
        .policies()
        .iter()
        .map(Policy::name)
        .collect();
    assert_eq!(names, ["api", "per-key"]);
    Ok(())
}

/// A file cut while it is being written, settled (issue 23, "also seen"). Cut inside a
/// value or a table, it is refused whole, naming where. Cut at a line or table
/// boundary, it is a valid, shorter file: `burst = 2000` cut to `burst = 2`, or the
/// second `[[limit]]` missing. No parser can tell; the docs (`Limits::from_path`)
/// say to replace the file atomically (write a temporary file, rename it over), and
/// `examples/config.rs` reloads only a file that reads the same twice.
#[test]
fn a_file_cut_mid_write_is_refused_or_reads_as_a_shorter_file() {
    let whole = "[[limit]]\nname = \"api\"\nquota = \"2000/min\"\nburst = 2000\n\n\
                 [[limit]]\nname = \"login\"\nquota = \"5/min\"\n";
    let full = Limits::from_toml(whole).expect("the whole file");
    assert_eq!(full.policies().len(), 2);
    // Inside a string or a table header: refused, nothing replaced.
    for cut in [
        "[[limit]]\nname = \"api\"\nquota = \"2000/m",
        "[[limit]]\nname = \"api\"\nquota = \"2000/min\"\nburst = 2000\n\n[[lim",
    ] {
        assert!(Limits::from_toml(cut).is_err(), "refused: {cut:?}");
    }
    // At a digit or a table boundary: valid, and smaller than meant.
    let digits = Limits::from_toml(&whole[..whole.find("000\n\n").expect("the burst")])
        .expect("a shorter, valid file");
    assert_eq!(digits.policies()[0].quota().burst(), 2);
    let first = Limits::from_toml(
        &whole[..whole
            .find("\n[[limit]]\nname = \"login\"")
            .expect("the second table")],
    )
    .expect("a shorter, valid file");
    assert_eq!(first.policies().len(), 1);
}

/// `max_actual = 0` made a metered limit limit nothing (every request settled to 0:
/// 50 of 50 served on 5/min); it is refused, in the file and in code, naming the input.
#[test]
fn max_actual_0_is_refused_in_the_file_and_in_code() {
    let file = format!("{HEAD}metered = true\nmax_actual = 0\n");
    let err = Limits::from_toml(&file).expect_err("max_actual 0");
    assert_eq!((err.line(), err.column()), (Some(5), Some(14)), "{err}");
    assert!(err.to_string().contains("invalid max_actual 0"), "{err}");

    let policy = Policy::new("tokens", Quota::per_minute(5))
        .expect("a policy")
        .metered()
        .max_actual(0);
    let err = tollgate::RateLimitLayer::builder()
        .policy(policy)
        .build()
        .expect_err("max_actual 0");
    assert!(
        err.to_string()
            .starts_with("invalid policy \"tokens\": it has max_actual 0"),
        "{err}"
    );
    // 1 is the least that still limits.
    assert!(Limits::from_toml(&format!("{HEAD}metered = true\nmax_actual = 1\n")).is_ok());
}

/// A UTF-8 byte-order mark (what some Windows editors write first) is not a
/// character of the first line: errors there are placed where they are without it.
#[test]
fn a_byte_order_mark_does_not_shift_first_line_columns() {
    let cases: &[(&str, usize, usize)] = &[
        // A misspelt table name on line 1: `limits` starts at column 3.
        ("[[limits]]\nname = \"api\"\nquota = \"1/s\"\n", 1, 3),
        // A value of the wrong type on line 1: it starts at column 9.
        ("limit = 5\n", 1, 9),
        // Later lines were never shifted; they stay as they are.
        (
            "[[limit]]\nname = \"api\"\nquota = \"100/fortnight\"\n",
            3,
            9,
        ),
    ];
    for &(text, line, column) in cases {
        let plain = Limits::from_toml(text).expect_err("a mistake");
        let marked = Limits::from_toml(&format!("\u{feff}{text}")).expect_err("a mistake");
        assert_eq!(
            (plain.line(), plain.column()),
            (Some(line), Some(column)),
            "{plain}"
        );
        assert_eq!(
            (marked.line(), marked.column()),
            (Some(line), Some(column)),
            "{marked}"
        );
        assert_eq!(marked.to_string(), plain.to_string());
    }
    let marked = Limits::from_toml(&format!("\u{feff}{HEAD}")).expect("a file with a BOM reads");
    assert_eq!(marked.policies()[0].quota(), Quota::per_minute(100));
}
