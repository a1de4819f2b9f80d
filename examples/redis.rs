//! Several app instances (three limiters, each with its own Redis connection, as three
//! processes would have) sharing one limit through Redis, with a memory fallback.
//!
//! Run with: `REDIS_URL=redis://127.0.0.1:6379 cargo run --example redis --features redis`

use std::time::Duration;

use tollgate::store::Fallback;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota, RedisStore};

/// One "instance" of the app: its own store (connection) and limiter.
fn instance(url: &str) -> Result<Limiter, Box<dyn std::error::Error>> {
    // Redis is the shared truth; if it fails, each instance limits from memory until
    // it is back (looser by the number of instances, but never unlimited).
    let redis = RedisStore::from_url(url)?
        .prefix("example")
        .deadline(Duration::from_millis(50))?;
    let store = Fallback::new(redis, MemoryStore::new());
    Ok(Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(10).with_burst(5)?)?.algorithm(Algorithm::Gcra))
        .store(store)
        .build()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let instances = [instance(&url)?, instance(&url)?, instance(&url)?];
    // A caller unique to this run, so earlier runs do not count.
    let caller = Key::from(format!("caller-{}", std::process::id()));

    // Twelve requests from one caller, spread round-robin over the three instances:
    // together they admit the burst of 5, not 5 per instance.
    let mut admitted = 0;
    for i in 0..12 {
        let decision = instances[i % 3].check("api", &caller, 1).await?;
        admitted += u32::from(decision.allowed);
        println!(
            "instance {} request {i:>2}: {} remaining {} retry after {:?}",
            i % 3,
            if decision.allowed {
                "allowed"
            } else {
                "denied "
            },
            decision.remaining,
            decision.retry_after
        );
    }
    println!("admitted {admitted} of 12 across 3 instances (burst 5, plus any refill meanwhile)");

    // A tenth of a second later, one more request fits, whichever instance asks.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let decision = instances[1].check("api", &caller, 1).await?;
    println!(
        "after 100 ms: {}",
        if decision.allowed {
            "allowed"
        } else {
            "denied"
        }
    );
    Ok(())
}
