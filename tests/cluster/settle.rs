//! Settling (`Limiter::settle`) on a real local three-master Redis Cluster, with an
//! injected clock: the attacker's extremes, chains and resets (the shared bodies of
//! `support::settle`), and many tasks settling one key at once. The hand-computed
//! tables run in `scenarios`.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_cluster::shared_cluster;
use support::redis_server::unique_prefix;
use support::settle::{
    ALGORITHMS, BASE, a_charge_under_a_changed_limit_gives_nothing_back,
    a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended,
    a_settle_up_counts_in_full_under_a_larger_quota, chains_never_give_back_another_charge,
    concurrent_settles, each_receipt_moves_its_charge_once,
    each_receipt_moves_its_charge_once_through_a_lease, extremes_saturate,
    receipts_from_before_a_reset_give_nothing_back,
};
use tollgate::clock::ManualClock;
use tollgate::store::{LeasedStore, SliceSizing};
use tollgate::{Algorithm, RedisStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn store(clock: ManualClock) -> RedisStore {
    RedisStore::from_cluster_urls(shared_cluster().urls())
        .expect("valid urls")
        .prefix(&unique_prefix("settle"))
        // Many tasks on two cores: answers are checked here, not speed.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
        .with_clock(clock)
}

#[tokio::test]
async fn a_chain_of_settles_never_gives_back_another_requests_charge_on_the_cluster() -> TestResult
{
    chains_never_give_back_another_charge(store).await
}

#[tokio::test]
async fn an_estimate_of_1_settled_to_u64_max_saturates_on_the_cluster() -> TestResult {
    extremes_saturate(store).await
}

#[tokio::test]
async fn a_settle_up_under_a_small_quota_counts_in_full_under_a_larger_quota_of_the_key_on_the_cluster()
-> TestResult {
    a_settle_up_counts_in_full_under_a_larger_quota(store).await
}

#[tokio::test]
async fn a_receipt_from_before_a_reset_gives_nothing_back_on_the_cluster() -> TestResult {
    receipts_from_before_a_reset_give_nothing_back(store).await
}

#[tokio::test]
async fn a_decision_settled_or_refunded_twice_gives_back_once_on_the_cluster() -> TestResult {
    each_receipt_moves_its_charge_once(store).await
}

/// Slices of 25 (one process): every request of the scenario is spent from one lease
/// and every move is made in it, where only the lease's record can refuse a repeat.
#[tokio::test]
async fn a_decision_settled_or_refunded_twice_through_a_lease_gives_back_once_on_the_cluster()
-> TestResult {
    each_receipt_moves_its_charge_once_through_a_lease(|clock: ManualClock| {
        LeasedStore::builder(store(clock.clone()))
            .clock(clock)
            .processes(1)
            .and_then(|b| b.sizing(SliceSizing::Fixed(25)))
            .expect("one process, slices of 25")
            .build()
    })
    .await
}

#[tokio::test]
async fn a_decision_settled_in_a_lease_moves_nothing_when_settled_again_after_the_lease_ended_on_the_cluster()
-> TestResult {
    a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended(|clock: ManualClock| {
        LeasedStore::builder(store(clock.clone()))
            .clock(clock)
            .processes(1)
            .and_then(|b| b.sizing(SliceSizing::Fixed(8)))
            .expect("one process, slices of 8")
            .build()
    })
    .await
}

#[tokio::test]
async fn a_charge_made_before_a_reload_to_another_algorithm_gives_nothing_back_on_the_cluster()
-> TestResult {
    a_charge_under_a_changed_limit_gives_nothing_back(store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_settling_one_key_leave_exactly_the_sum_of_their_actuals_on_the_cluster() {
    for algorithm in ALGORITHMS {
        let (used, settled) =
            concurrent_settles(store(ManualClock::new(BASE)), algorithm, 8, 20).await;
        if algorithm == Algorithm::LeakyBucket {
            assert!(
                used >= settled,
                "{algorithm}: {used} used, {settled} settled"
            );
        } else {
            assert_eq!(used, settled, "{algorithm}");
        }
    }
}
