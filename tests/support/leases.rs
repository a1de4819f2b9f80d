//! Many "processes" (each its own `LeasedStore` on its own backing store, sharing one
//! server or cluster) × many tasks hammering one hot key: for the Redis and the Redis
//! Cluster lease tests alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::store::{LeasedStore, Store};
use tollgate::{Algorithm, Key, Limit, Limiter};

/// What a hammering admitted and what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hammered {
    /// Admitted cost, over every process.
    pub admitted: u64,
    /// Decisions taken, over every process.
    pub decisions: u64,
    /// Calls the leases made to their backing stores, over every process.
    pub store_calls: u64,
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
    let mut handles = Vec::new();
    for store in stores {
        let limiter = Limiter::builder()
            .limit(limit.clone())
            .store(store.clone())
            .build()
            .expect("a limiter");
        for _ in 0..tasks {
            let limiter = limiter.clone();
            let admitted = admitted.clone();
            let name = limit.name();
            handles.push(tokio::spawn(async move {
                for _ in 0..attempts {
                    let decision = limiter
                        .check(name, &Key::from("shared"), 1)
                        .await
                        .expect("a decision");
                    if decision.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
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
