//! Floods of new keys against a full memory store: what they can make it forget.
//!
//! A full store must evict to take a new key, and an attacker who mints keys chooses
//! when that happens. These tests replay the attacks that once gave spent quota back
//! (issue "Hardening II", items 1–3) and count, exactly, how many spent keys got
//! their quota back.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

const BASE: Duration = Duration::from_secs(1_700_000_000);
const VICTIMS: u64 = 200;
const MAX_KEYS: usize = 1024;
/// Twenty times the store's bound: every slot is taken over many times.
const FLOOD: u64 = 20 * MAX_KEYS as u64;

const ALGORITHMS: [Algorithm; 7] = support::every_algorithm(24);

fn policy(name: &str, per_day: u64, algorithm: Algorithm) -> Limit {
    Limit::new(name, Quota::per_day(per_day))
        .unwrap()
        .algorithm(algorithm)
}

fn victim(i: u64) -> Key {
    Key::from(format!("victim-{i}").as_str())
}

/// Spends every victim's whole quota under `name`, one request of cost 1 at a time.
fn exhaust_victims(limiter: &Limiter, clock: &ManualClock, name: &str, quota: u32) {
    for i in 0..VICTIMS {
        for _ in 0..quota {
            clock.advance(Duration::from_micros(10));
            assert!(
                immediate(limiter.check(name, &victim(i), 1))
                    .unwrap()
                    .allowed
            );
        }
        assert!(
            !immediate(limiter.check(name, &victim(i), 1))
                .unwrap()
                .allowed
        );
    }
}

/// Sends `FLOOD` new keys through `name`, each charged `cost` (denials are fine).
fn flood(limiter: &Limiter, clock: &ManualClock, name: &str, cost: u32) {
    for i in 0..FLOOD {
        clock.advance(Duration::from_micros(10));
        let key = Key::from(format!("flood-{i}").as_str());
        immediate(limiter.check(name, &key, cost)).unwrap();
    }
}

/// How many victims are admitted again: each one that is had its quota given back.
fn victims_with_quota_back(limiter: &Limiter, name: &str) -> u64 {
    (0..VICTIMS)
        .filter(|&i| {
            immediate(limiter.check(name, &victim(i), 1))
                .unwrap()
                .allowed
        })
        .count() as u64
}

/// The experiment: every victim spends its 5/day quota under "per-user", a
/// minute passes, then `FLOOD` new keys go through `flood_through` (a policy of
/// `policies`), each charged `flood_cost`. Returns how many victims got their quota
/// back; the store never holds more than its bound.
fn spent_keys_reset_by_a_flood(policies: Vec<Limit>, flood_through: &str, flood_cost: u32) -> u64 {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(MAX_KEYS)
        .unwrap();
    let limiter = Limiter::builder()
        .limits(policies)
        .store(store.clone())
        .build()
        .unwrap();
    exhaust_victims(&limiter, &clock, "per-user", 5);
    clock.advance(Duration::from_secs(60));
    flood(&limiter, &clock, flood_through, flood_cost);
    assert!(store.len() <= MAX_KEYS);
    victims_with_quota_back(&limiter, "per-user")
}

#[test]
fn a_flood_of_new_keys_gives_no_spent_quota_back() {
    for algorithm in ALGORITHMS {
        // Flood keys charged once, and charged their whole quota (spent as much as
        // the victims, only later).
        for flood_cost in [1, 5] {
            let reset = spent_keys_reset_by_a_flood(
                vec![policy("per-user", 5, algorithm)],
                "per-user",
                flood_cost,
            );
            assert_eq!(
                reset, 0,
                "{algorithm}, flood keys charged {flood_cost}: {reset} of {VICTIMS} spent keys got their quota back"
            );
        }
    }
}

#[test]
fn a_flood_through_one_policy_never_evicts_another_policys_state() {
    for algorithm in ALGORITHMS {
        let reset = spent_keys_reset_by_a_flood(
            vec![
                policy("per-user", 5, algorithm),
                policy("per-ip", 1, algorithm),
            ],
            "per-ip",
            1,
        );
        assert_eq!(
            reset, 0,
            "{algorithm}: a per-ip flood reset {reset} of {VICTIMS} spent per-user keys"
        );
    }
}

#[test]
fn a_denied_request_never_evicts() {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let store = MemoryStore::with_clock(clock.clone()).max_keys(1).unwrap();
        let limiter = Limiter::builder()
            .limit(policy("api", 5, algorithm))
            .store(store.clone())
            .build()
            .unwrap();
        let alice = Key::from("alice");
        assert!(immediate(limiter.check("api", &alice, 5)).unwrap().allowed);
        // A new key asks for more than the capacity: denied, so it stores nothing
        // and evicts nothing.
        let denied = immediate(limiter.check("api", &Key::from("mallory"), 6)).unwrap();
        assert!(!denied.allowed);
        assert_eq!(store.len(), 1);
        let again = immediate(limiter.check("api", &alice, 1)).unwrap();
        assert!(!again.allowed, "{algorithm}: alice was evicted by a denial");
        assert_eq!(again.remaining, 0, "{algorithm}");
    }
}

#[test]
fn a_peek_at_a_new_key_never_evicts() {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone()).max_keys(1).unwrap();
    let limiter = Limiter::builder()
        .limit(policy("api", 5, Algorithm::Gcra))
        .store(store.clone())
        .build()
        .unwrap();
    let alice = Key::from("alice");
    assert!(immediate(limiter.check("api", &alice, 5)).unwrap().allowed);
    assert_eq!(
        immediate(limiter.check("api", &Key::from("bob"), 0))
            .unwrap()
            .remaining,
        5
    );
    assert!(!immediate(limiter.check("api", &alice, 1)).unwrap().allowed);
}

/// Shares are per limit in use in a shard (a limit with no state there, configured or
/// not, leaves its room to the others until it stores one).
#[test]
fn each_limit_in_use_keeps_an_equal_share_of_the_bound() {
    const B_KEYS: u64 = 64;
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(MAX_KEYS)
        .unwrap();
    let limiter = Limiter::builder()
        .limit(policy("a", 5, Algorithm::Gcra))
        .limit(policy("b", 5, Algorithm::FixedWindow))
        .store(store.clone())
        .build()
        .unwrap();
    // "b" is in use in every shard (64 keys over 4 shards).
    for i in 0..B_KEYS {
        let key = Key::from(format!("b-{i}").as_str());
        assert!(immediate(limiter.check("b", &key, 1)).unwrap().allowed);
    }
    // Limit "a" alone floods: it fills its half of the store, never more.
    flood(&limiter, &clock, "a", 1);
    assert!(
        store.len() <= MAX_KEYS / 2 + B_KEYS as usize,
        "{} keys for one of two policies",
        store.len()
    );
    flood(&limiter, &clock, "b", 1);
    assert!(store.len() <= MAX_KEYS);
    assert!(
        store.len() > MAX_KEYS / 2 + B_KEYS as usize,
        "the second policy got its own half"
    );
}

#[test]
fn an_idle_state_is_evicted_before_any_active_one() {
    // One shard of four keys: three spent keys and one that went idle.
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone()).max_keys(4).unwrap();
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(1)).unwrap())
        .store(store.clone())
        .build()
        .unwrap();
    assert!(
        immediate(limiter.check("api", &Key::from("early"), 1))
            .unwrap()
            .allowed
    );
    clock.advance(Duration::from_millis(999));
    for key in ["a", "b", "c"] {
        assert!(
            immediate(limiter.check("api", &Key::from(key), 1))
                .unwrap()
                .allowed
        );
    }
    // "early" is idle 1 ms later; the sweep is not due, so eviction must find it.
    clock.advance(Duration::from_millis(2));
    assert!(
        immediate(limiter.check("api", &Key::from("new"), 1))
            .unwrap()
            .allowed
    );
    for key in ["a", "b", "c"] {
        assert!(
            !immediate(limiter.check("api", &Key::from(key), 1))
                .unwrap()
                .allowed,
            "{key} was evicted while an idle state was there"
        );
    }
}

/// The residual risk, measured: a spent key is evicted only when every state of its
/// sample (16, drawn at random) is spent as much and was charged earlier, which
/// happens with probability `f^16` when a fraction `f` of the policy's share holds
/// such keys. Here half the store is spent keys and a flood mints 100 times the bound.
#[test]
fn a_flood_reaches_a_spent_key_only_when_its_whole_sample_is_spent() {
    const MAX: usize = 4096;
    const SPENT: u64 = MAX as u64 / 2;
    const MINTED: u64 = 100 * MAX as u64;
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(MAX)
        .unwrap();
    let limiter = Limiter::builder()
        .limit(policy("api", 5, Algorithm::FixedWindow))
        .store(store.clone())
        .build()
        .unwrap();
    for i in 0..SPENT {
        clock.advance(Duration::from_micros(10));
        assert!(
            immediate(limiter.check("api", &victim(i), 5))
                .unwrap()
                .allowed
        );
    }
    for i in 0..MINTED {
        clock.advance(Duration::from_micros(10));
        let key = Key::from(format!("flood-{i}").as_str());
        immediate(limiter.check("api", &key, 5)).unwrap();
    }
    let reset = (0..SPENT)
        .filter(|&i| {
            immediate(limiter.check("api", &victim(i), 1))
                .unwrap()
                .allowed
        })
        .count() as f64;
    // Each of the 16 shards (256 keys each) holds a binomial share of the spent keys;
    // one with `v` of them loses one per eviction with probability `(v/256)^16`.
    let evictions = (MINTED - MAX as u64 / 2) as f64;
    let (shards, share) = (16.0_f64, 256.0_f64);
    let p = 1.0 / shards;
    let mut pmf = (1.0 - p).powf(SPENT as f64);
    let mut per_eviction = 0.0;
    for v in 0..SPENT {
        per_eviction += pmf * (v as f64 / share).min(1.0).powi(16);
        pmf *= (SPENT - v) as f64 / (v + 1) as f64 * p / (1.0 - p);
    }
    let expected = evictions * per_eviction;
    eprintln!(
        "{SPENT} spent keys in a store of {MAX}, {MINTED} keys minted and spent: \
         {reset} spent keys evicted (f^16 predicts {expected:.1}); \
         {:.0} requests of cost 5 per key reset",
        MINTED as f64 / reset.max(1.0)
    );
    // A generous margin over the prediction: the test is about the order of
    // magnitude (before random sampling, a flood like this reset every spent key).
    assert!(reset <= 2.0 * expected + 10.0, "{reset} spent keys evicted");
}
