//! `Fallback` on memory stores: a failover never multiplies a limit in one process.

use support::fallback::admitted_under_a_half_failing_primary;
use support::scenarios::BASE;
use tollgate::MemoryStore;
use tollgate::clock::ManualClock;

/// At one frozen instant, a primary that fails half its calls (in runs of three) makes
/// the `Fallback` switch back and forth; the insurance store starts the key where the
/// primary left it, and the primary is charged on recovery what the insurance store
/// admitted: one process admits 10, one store's quota, not 20.
#[tokio::test]
async fn a_primary_failing_half_its_calls_admits_one_quota_at_one_instant() {
    let clock = ManualClock::new(BASE);
    let (admitted, switches, left) =
        admitted_under_a_half_failing_primary(MemoryStore::with_clock(clock.clone()), &clock).await;
    assert_eq!(admitted, 10, "one store's quota, after {switches} switches");
    assert!(switches >= 2, "it failed over and back: {switches}");
    assert_eq!(
        left, 0,
        "the primary was charged what the insurance admitted"
    );
}
