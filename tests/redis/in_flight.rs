//! In-flight limits on a real `redis-server`: every way a request ends gives its lease
//! back (over real TCP), a crashed process's leases expire within the TTL, live leases
//! are renewed past it, the lease set's name, hash tag and TTL, inner-service errors,
//! and the fail modes when Redis is away.
#![cfg(feature = "redis")]

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::in_flight::{crash_holding, every_way_a_request_ends, until_free};
use support::redis_server::{free_port, shared_server, unique_prefix};
use tollgate::{FailMode, Key, Limit, Limiter, Policy, Quota, RateLimitLayer, RedisStore, Store};
use tower::{Layer, ServiceExt};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn store(prefix: &str) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(prefix)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
}

fn layer(policy: Policy, store: RedisStore) -> RateLimitLayer {
    RateLimitLayer::new(
        Limiter::builder()
            .policy(policy)
            .store(store)
            .build()
            .expect("limiter"),
    )
}

fn limit() -> Limit {
    Limit::new("jobs", Quota::per_second(1)).expect("limit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_request_ends_gives_its_lease_back() {
    let policy = Policy::in_flight_only("slow", 2).expect("policy");
    let layer = layer(policy, store(&unique_prefix("in-flight")));
    every_way_a_request_ends(2, |router| router.layer(layer)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_process_s_leases_expire_within_the_ttl() -> TestResult {
    let prefix = unique_prefix("crash");
    let ttl = Duration::from_millis(300);
    let (limit, key) = (limit(), Key::from("alice"));
    let crashed = prefix.clone();
    crash_holding(
        move || store(&crashed).in_flight_ttl(ttl).expect("a ttl"),
        limit.clone(),
        key,
        2,
    );
    let live = store(&prefix).in_flight_ttl(ttl)?;
    let set = live.in_flight_key(&limit, &key);
    // The dead process's leases are still there, and count.
    assert_eq!(shared_server().cli(&["ZCARD", &set]), "2");
    until_free(&live, &limit, &key, 2).await;
    // Once they expired the set holds only live leases, and goes with the last.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while shared_server().cli(&["EXISTS", &set]) != "0" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease set stayed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_leases_are_renewed_past_their_ttl() -> TestResult {
    let prefix = unique_prefix("renew");
    let ttl = Duration::from_secs(1);
    let (limit, key) = (limit(), Key::from("alice"));
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    let other = store(&prefix).in_flight_ttl(ttl)?;
    let held = [
        holder.acquire_in_flight(&limit, &key, 2).await?,
        holder.acquire_in_flight(&limit, &key, 2).await?,
    ];
    assert!(held.iter().all(Option::is_some));
    tokio::time::sleep(ttl * 3).await;
    // Three lifetimes later, still held: renewed every ttl/3.
    assert!(other.acquire_in_flight(&limit, &key, 2).await?.is_none());
    let set = holder.in_flight_key(&limit, &key);
    assert_eq!(shared_server().cli(&["ZCARD", &set]), "2");
    let pttl: u64 = shared_server().cli(&["PTTL", &set]).parse()?;
    assert!(pttl > 0 && pttl <= 1000, "PTTL {pttl}");
    drop(held);
    until_free(&other, &limit, &key, 2).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_set_shares_the_rate_state_s_hash_tag() {
    let live = store("tags");
    let (limit, key) = (limit(), Key::from("alice"));
    let set = live.in_flight_key(&limit, &key);
    let state = live.state_key(&limit, &key);
    let tag = |name: &str| name[name.find('{').expect("{")..=name.find('}').expect("}")].to_owned();
    assert_eq!(tag(&set), tag(&state));
    assert_eq!(set, format!("tags:jobs:{}:inflight", tag(&state)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_service_error_gives_the_lease_back() -> TestResult {
    let prefix = unique_prefix("error");
    let policy = Policy::in_flight_only("jobs", 1)?;
    let service =
        layer(policy, store(&prefix)).layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
            Err::<Response<Full<Bytes>>, _>("inner failure")
        }));
    for _ in 0..3 {
        // Each call must find the slot given back by the one before.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match service.clone().oneshot(Request::new(Full::default())).await {
                Err(error) => {
                    assert_eq!(error, "inner failure");
                    break;
                }
                Ok(refused) => {
                    assert_eq!(refused.status(), http::StatusCode::TOO_MANY_REQUESTS);
                    assert!(tokio::time::Instant::now() < deadline, "the lease stayed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_open_or_closed_as_the_layer_says() -> TestResult {
    let away = RedisStore::from_url(&format!("redis://127.0.0.1:{}", free_port(false)))?
        .deadline(Duration::from_millis(50))?;
    let call = |mode| {
        let policy = Policy::in_flight_only("jobs", 1).expect("policy");
        let service = layer(policy, away.clone())
            .on_store_error(mode)
            .layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
                Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default()))
            }));
        service.oneshot(Request::new(Full::default()))
    };
    assert_eq!(call(FailMode::Open).await?.status(), http::StatusCode::OK);
    let closed = call(FailMode::Closed).await?;
    assert_eq!(closed.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(closed.headers()["retry-after"], "1");
    Ok(())
}
