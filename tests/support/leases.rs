//! Many "processes" (each its own `LeasedStore` on its own backing store, sharing one
//! server or cluster) × many tasks hammering one hot key: for the Redis and the Redis
//! Cluster lease tests alike. And issue 35's case 5, a stream of rejections a penalty
//! box must count wherever they are answered, for the memory and Redis lease tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::{LeasedStore, Store};
use tollgate::{Algorithm, Key, Limit, Limiter, Penalty};

/// What a hammering admitted and what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hammered {
    /// Admitted cost, over every process.
    pub admitted: u64,
    /// Decisions taken, over every process.
    pub decisions: u64,
    /// Calls the leases made to their backing stores, over every process.
    pub store_calls: u64,
    /// Requests denied without a block (each one a rejection a penalty box counts).
    pub rejected: u64,
    /// Requests denied by a block (an operator's, a tripped penalty box's).
    pub blocked: u64,
}

/// `tasks` tasks per store each ask `attempts` times for one unit of `limit` on the key
/// `"shared"`; each store is one process, with its own limiter.
pub async fn hammer<S: Store + Clone>(
    stores: &[LeasedStore<S>],
    limit: &Limit,
    tasks: usize,
    attempts: usize,
) -> Hammered {
    let admitted = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let blocked = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for store in stores {
        let limiter = Limiter::builder()
            .limit(limit.clone())
            .store(store.clone())
            .build()
            .expect("a limiter");
        for _ in 0..tasks {
            let limiter = limiter.clone();
            let (admitted, rejected, blocked) =
                (admitted.clone(), rejected.clone(), blocked.clone());
            let name = limit.name();
            handles.push(tokio::spawn(async move {
                for _ in 0..attempts {
                    let decision = limiter
                        .check(name, &Key::from("shared"), 1)
                        .await
                        .expect("a decision");
                    let outcome = if decision.allowed {
                        &admitted
                    } else if decision.blocked_for.is_some() {
                        &blocked
                    } else {
                        &rejected
                    };
                    outcome.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for handle in handles {
        handle.await.expect("no panic");
    }
    Hammered {
        admitted: admitted.load(Ordering::Relaxed),
        decisions: (stores.len() * tasks * attempts) as u64,
        store_calls: stores.iter().map(LeasedStore::store_calls).sum(),
        rejected: rejected.load(Ordering::Relaxed),
        blocked: blocked.load(Ordering::Relaxed),
    }
}

/// Checks a hammering that admitted `admitted` of `capacity` on a frozen clock:
/// `stores` still hold, in slices whose process ran out of demand, exactly the rest.
/// `release_all` returns those of window algorithms, which `fresh` processes on the
/// same server then admit, to the unit (fresh, because a frozen clock keeps each old
/// process's denials forever); the fluid algorithms' are left for time to repay.
pub async fn assert_exact<S: Store + Clone>(
    stores: &[LeasedStore<S>],
    fresh: Vec<LeasedStore<S>>,
    limit: &Limit,
    admitted: u64,
    capacity: u64,
) {
    let algorithm = limit.get_algorithm();
    let held: u64 = stores.iter().map(LeasedStore::held).sum();
    assert_eq!(
        admitted + held,
        capacity,
        "{algorithm}: {admitted} admitted"
    );
    let mut returned = 0;
    for store in stores {
        returned += store.release_all().await.expect("returned");
    }
    let fluid = matches!(
        algorithm,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
    );
    assert_eq!(returned, if fluid { 0 } else { held }, "{algorithm}");
    let again = hammer(&fresh, limit, 8, 20).await;
    assert_eq!(again.admitted, returned, "{algorithm}");
}

/// The penalty box of issue 35's case 5: the 3rd rejection within 500 ms blocks the
/// key for 10 minutes; with `escalate`, a second trip within the hour for 20.
pub fn case_five_penalty(escalate: bool) -> Penalty {
    let penalty = Penalty::after(3)
        .within(Duration::from_millis(500))
        .block_for(Duration::from_secs(600));
    if escalate {
        penalty
            .escalate(&[Duration::from_secs(1_200)])
            .remember(Duration::from_secs(3_600))
    } else {
        penalty
    }
}

/// What one request was told: admitted, and the block it reported.
pub type Told = (bool, Option<Duration>);

/// Issue 35's case 5, from the clock's instant now: `spend` requests at that instant
/// (the quota), then one request every 100 ms for 1 s (the first at the same
/// instant), then one 61 s after the first rejection; what each was told. Leaves the
/// clock at that last request.
pub async fn rejected_every_100_ms(
    limiter: &Limiter,
    name: &str,
    key: &Key,
    clock: &ManualClock,
    spend: u64,
) -> Vec<Told> {
    let ask = async || {
        let d = limiter.check(name, key, 1).await.expect("a decision");
        (d.allowed, d.blocked_for)
    };
    let mut told = Vec::new();
    for _ in 0..spend {
        told.push(ask().await);
    }
    for i in 0..=10 {
        if i > 0 {
            clock.advance(Duration::from_millis(100));
        }
        told.push(ask().await);
    }
    clock.advance(Duration::from_secs(60));
    told.push(ask().await);
    told
}

/// What [`rejected_every_100_ms`] tells a key whose box trips as its rule says: `spend`
/// admitted, two rejections, the third (at +200 ms) blocked for `block`, every later
/// request blocked for what is left of it, 61 s after the first rejection too.
pub fn tripped_at_the_third_rejection(spend: u64, block: Duration) -> Vec<Told> {
    let mut told = vec![(true, None); spend as usize];
    told.push((false, None));
    told.push((false, None));
    for i in 0..=8_u64 {
        told.push((
            false,
            Some(
                block
                    .checked_sub(Duration::from_millis(100 * i))
                    .expect("a block longer than 61 s"),
            ),
        ));
    }
    told.push((
        false,
        Some(
            block
                .checked_sub(Duration::from_millis(60_800))
                .expect("a block longer than 61 s"),
        ),
    ));
    told
}

/// `tasks` tasks in each of `stores` (processes sharing one backing store) hammer one
/// key of `limit` (whose box trips at its 3rd rejection) at a frozen instant: every
/// rejection is counted once, wherever it is answered. Two requests are denied without
/// a block (the 3rd rejection trips the box; one racing it per process may read as
/// unblocked), every later one is blocked, and
/// what was admitted plus what the leases still hold is the capacity.
pub async fn assert_each_rejection_counted_once<S: Store + Clone>(
    stores: &[LeasedStore<S>],
    limit: &Limit,
    tasks: usize,
    attempts: usize,
    capacity: u64,
) {
    let algorithm = limit.get_algorithm();
    let run = hammer(stores, limit, tasks, attempts).await;
    let held: u64 = stores.iter().map(LeasedStore::held).sum();
    // Two rejections before the box trips; a rejection another process answered in
    // the same moment the box tripped may still read as unblocked (it is counted all
    // the same, and denied either way): at most one more per process.
    assert!(
        (2..=2 + stores.len() as u64).contains(&run.rejected),
        "{algorithm}: {run:?}"
    );
    assert_eq!(
        run.admitted + run.rejected + run.blocked,
        run.decisions,
        "{algorithm}: {run:?}"
    );
    assert_eq!(
        run.admitted + held,
        capacity,
        "{algorithm}: {run:?}, {held} held"
    );
}
