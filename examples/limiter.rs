//! Uses the `Limiter` directly (no HTTP): a burst against two policies, every decision printed.
//!
//! Run with: `cargo run --example limiter`

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A manual clock makes the run reproducible: 10 requests in the first second, then
    // a pause, then a few more.
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", "5/s".parse::<Quota>()?.with_burst(3)?)?.algorithm(Algorithm::Gcra),
        )
        .limit(Limit::new("daily", Quota::per_day(12))?.algorithm(Algorithm::FixedWindow))
        .store(MemoryStore::with_clock(clock.clone()))
        .build()?;
    let caller = Key::from("203.0.113.9".parse::<std::net::IpAddr>()?);

    println!("policies: api = 5/s with a burst of 3 (gcra), daily = 12/day (fixed window)\n");
    println!(
        "{:>8}  {:>7}  {:>14}  {:>16}  {:>12}",
        "t (ms)", "result", "api remaining", "daily remaining", "retry after"
    );
    let mut elapsed = Duration::ZERO;
    let schedule = [
        0, 0, 0, 0, 50, 100, 150, 200, 250, 300, 1_500, 1_500, 1_500, 1_700, 3_000,
    ];
    for at_ms in schedule {
        let at = Duration::from_millis(at_ms);
        clock.advance(at.saturating_sub(elapsed));
        elapsed = at;
        let decisions = limiter
            .check_all(&[("api", &caller, 1), ("daily", &caller, 1)])
            .await?;
        let passed = decisions.iter().all(|d| d.allowed);
        let retry = decisions
            .iter()
            .filter_map(|d| d.retry_after)
            .max()
            .map_or_else(|| "-".to_string(), |d| format!("{} ms", d.as_millis()));
        println!(
            "{:>8}  {:>7}  {:>14}  {:>16}  {:>12}",
            at_ms,
            if passed { "200" } else { "429" },
            decisions[0].remaining,
            decisions[1].remaining,
            retry
        );
    }
    println!("\nA request denied by one policy is charged to none (see \"daily remaining\").");
    Ok(())
}
