//! A Redis Cluster as the shared store: a per-user and a per-tenant limit checked
//! together. Each policy's keys carry the caller's fingerprint as their hash tag, so
//! one caller's state stays on one slot; the two keys here live on different slots,
//! so the store charges them in order and refunds the first if the second denies.
//!
//! Run with: `REDIS_CLUSTER_URLS=redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002 cargo run --example redis_cluster --features redis`

use std::time::Duration;

use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = std::env::var("REDIS_CLUSTER_URLS").unwrap_or_else(|_| {
        "redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002".into()
    });
    let store = RedisStore::from_cluster_urls(urls.split(','))?
        .prefix("example")
        // A cluster call may follow a redirect while slots move: allow a little more.
        .deadline(Duration::from_millis(100))?;
    let limiter = Limiter::builder()
        .limit(Limit::new("user", Quota::per_minute(5))?.algorithm(Algorithm::SlidingWindowLog))
        .limit(Limit::new("tenant", Quota::per_minute(3))?.algorithm(Algorithm::FixedWindow))
        .store(store.clone())
        .build()?;

    let run = std::process::id();
    let tenant = Key::from(format!("acme-{run}"));
    for user in ["alice", "bob"] {
        let user_key = Key::from(format!("{user}-{run}"));
        println!(
            "{user}'s key: {}",
            store.state_key(limiter.limit("user").ok_or("no limit")?, &user_key)
        );
        for request in 0..3 {
            let decisions = limiter
                .check_all(&[("user", &user_key, 1), ("tenant", &tenant, 1)])
                .await?;
            let summary: Vec<String> = decisions
                .iter()
                .map(|d| format!("{}: {} ({} left)", d.limit, d.allowed, d.remaining))
                .collect();
            println!("  request {request}: {}", summary.join(", "));
        }
    }
    // The tenant's 3 were spent by alice and bob together; bob's denied requests were
    // refunded to his own per-user limit.
    let bob = Key::from(format!("bob-{run}"));
    println!(
        "bob's own limit still has {} left",
        limiter.check("user", &bob, 0).await?.remaining
    );
    Ok(())
}
