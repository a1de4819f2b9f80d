//! One caller, one record, on the memory store: a key's block, penalty count and
//! reservations belong to (limit name, key), whatever quota, period or algorithm it is
//! decided under, and no flood can evict them (issue "Hardening III", items 1, 2, 3, 5
//! and 9). Each test replays the figures and counts, exactly, what the store
//! gave away.

use std::time::Duration;

use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Penalty, Quota};

const BASE: Duration = Duration::from_secs(1_700_000_000);
/// The bound on a limit name's tables per shard (`names.rs`).
const MAX_TABLES_PER_NAME: usize = 16;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// "login" 1/min, whose first rejection blocks the key for 15 min.
fn login() -> Limit {
    Limit::new("login", Quota::per_minute(1))
        .expect("a limit")
        .penalty(Penalty::after(1).within(secs(60)).block_for(secs(900)))
}

fn limiter(store: &MemoryStore, limits: impl IntoIterator<Item = Limit>) -> Limiter {
    limits
        .into_iter()
        .fold(Limiter::builder(), tollgate::LimiterBuilder::limit)
        .store(store.clone())
        .build()
        .expect("a limiter")
}

fn check(limiter: &Limiter, name: &str, key: &Key, cost: u32) -> tollgate::Decision {
    immediate(limiter.check(name, key, cost)).expect("the memory store")
}

fn check_with(limiter: &Limiter, name: &str, key: &Key, quota: Quota) -> tollgate::Decision {
    immediate(limiter.check_with(name, key, 1, quota)).expect("the memory store")
}

/// Makes `n` distinct keys trip "login"'s box once each: admitted once, then rejected.
fn trip_login(limiter: &Limiter, clock: &ManualClock, n: u64) {
    for i in 0..n {
        let key = Key::from(format!("offender-{i}").as_str());
        assert!(check(limiter, "login", &key, 1).allowed);
        assert!(!check(limiter, "login", &key, 1).allowed);
        if i % 1_000 == 0 {
            clock.advance(Duration::from_micros(10));
        }
    }
}

/// How many of ten requests of `key` under `name` are admitted.
fn admitted_of_ten(limiter: &Limiter, name: &str, key: &Key) -> usize {
    (0..10)
        .filter(|_| check(limiter, name, key, 1).allowed)
        .count()
}

#[test]
fn a_flood_of_penalty_trips_never_lifts_an_earlier_block() {
    const MAX_KEYS: usize = 16_384;
    const FLOOD: u64 = 40_000;
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(MAX_KEYS)
        .expect("a bound");
    let limiter = limiter(&store, [login()]);
    let mallory = Key::from("mallory");
    assert!(check(&limiter, "login", &mallory, 1).allowed);
    assert_eq!(
        check(&limiter, "login", &mallory, 1).blocked_for,
        Some(secs(900))
    );
    trip_login(&limiter, &clock, FLOOD);
    clock.advance(secs(61));
    let d = check(&limiter, "login", &mallory, 1);
    assert!(!d.allowed);
    assert!(
        d.blocked_for.is_some_and(|left| left > secs(830)),
        "{:?}",
        d.blocked_for
    );
    assert_eq!(admitted_of_ten(&limiter, "login", &mallory), 0);
    // 64 shards of 256 keys, one limit: each holds 256 blocks and refuses the rest
    // of its offenders' trips (every shard sees more than 256 of the 40,001).
    assert_eq!(store.block_records(), MAX_KEYS);
    assert_eq!(store.refused_trips(), FLOOD + 1 - MAX_KEYS as u64);
    eprintln!(
        "blocks lifted by a flood of {FLOOD} trips: 0; refused trips counted: {}",
        store.refused_trips()
    );
}

#[test]
fn an_operators_block_survives_a_flood_of_another_limits_trips() -> TestResult {
    const FLOOD: u64 = 2_000;
    let clock = ManualClock::new(BASE);
    // One shard of 256 keys: "api" and "login" have 128 records each.
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let api = Limit::new("api", Quota::per_minute(100))?;
    let limiter = limiter(&store, [api, login()]);
    let victim = Key::from("victim");
    immediate(limiter.block("api", &victim, secs(600)))?;
    trip_login(&limiter, &clock, FLOOD);
    assert_eq!(admitted_of_ten(&limiter, "api", &victim), 0);
    assert_eq!(store.refused_trips(), FLOOD - 128);
    Ok(())
}

#[test]
fn an_operators_block_is_stored_even_when_the_share_is_full_of_blocks() -> TestResult {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let limiter = limiter(&store, [login()]);
    trip_login(&limiter, &clock, 1_000);
    assert_eq!(store.block_records(), 256);
    for i in 0..10 {
        let key = Key::from(format!("operator-{i}").as_str());
        immediate(limiter.block("login", &key, secs(60)))?;
        assert_eq!(admitted_of_ten(&limiter, "login", &key), 0);
    }
    assert_eq!(store.block_records(), 266);
    Ok(())
}

#[test]
fn a_block_reaches_a_plan_caller_of_another_period() -> TestResult {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let limiter = limiter(&store, [Limit::new("api", Quota::per_minute(100))?]);
    let key = Key::from("mallory");
    immediate(limiter.block("api", &key, secs(3600)))?;
    let plan = Quota::per_hour(10_000);
    let admitted = (0..10)
        .filter(|_| check_with(&limiter, "api", &key, plan).allowed)
        .count();
    assert_eq!(admitted, 0);
    let d = check_with(&limiter, "api", &key, plan);
    assert_eq!(d.blocked_for, Some(secs(3600)));
    // A zero block lifts it for every quota.
    immediate(limiter.block("api", &key, Duration::ZERO))?;
    assert!(check_with(&limiter, "api", &key, plan).allowed);
    Ok(())
}

#[test]
fn a_reset_lifts_a_plan_callers_penalty_block_and_its_state_under_every_period() -> TestResult {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let api = Limit::new("api", Quota::per_minute(100))?
        .penalty(Penalty::after(1).within(secs(60)).block_for(secs(3600)));
    let limiter = limiter(&store, [api]);
    let key = Key::from("alice");
    let plan = Quota::per_hour(1);
    assert!(check_with(&limiter, "api", &key, plan).allowed);
    let tripped = check_with(&limiter, "api", &key, plan);
    assert_eq!(tripped.blocked_for, Some(secs(3600)));
    // The block is the caller's, whatever quota it is checked with.
    assert!(check(&limiter, "api", &key, 1).blocked_for.is_some());
    immediate(limiter.reset("api", &key))?;
    // One record stays, with no block: the reset's instant, kept while a receipt from
    // before it could still name a charge (its give-back must not take from the
    // fresh quota).
    assert_eq!(store.block_records(), 1);
    assert_eq!(immediate(limiter.peek("api", &key))?.blocked_for, None);
    // The plan's state is gone too: its one request an hour is there again.
    assert!(check_with(&limiter, "api", &key, plan).allowed);
    Ok(())
}

#[test]
fn penalize_charges_a_plan_caller_of_another_period() -> TestResult {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let limiter = limiter(&store, [Limit::new("api", Quota::per_minute(100))?]);
    let key = Key::from("alice");
    let plan = Quota::per_hour(1_000);
    assert_eq!(check_with(&limiter, "api", &key, plan).remaining, 999);
    // 1000 requests charged under the limit's own quota and under the plan's.
    let d = immediate(limiter.penalize("api", &key, 1_000))?;
    assert_eq!(d.remaining, 0);
    let admitted = (0..10)
        .filter(|_| check_with(&limiter, "api", &key, plan).allowed)
        .count();
    assert_eq!(admitted, 0);
    assert!(!check(&limiter, "api", &key, 1).allowed);
    Ok(())
}

/// 200 keys spend 5/day in a store of one shard (256 keys); then `attack` runs;
/// returns how many got quota back.
fn spent_keys_reset_by(attack: impl FnOnce(&Limiter, &ManualClock)) -> usize {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(256)
        .expect("a bound");
    let per_user = Limit::new("per-user", Quota::per_day(5)).expect("a limit");
    let limiter = limiter(&store, [per_user]);
    let victim = |i: u64| Key::from(format!("victim-{i}").as_str());
    for i in 0..200 {
        assert!(check(&limiter, "per-user", &victim(i), 5).allowed);
        clock.advance(Duration::from_micros(10));
    }
    clock.advance(secs(60));
    attack(&limiter, &clock);
    assert!(store.tables() <= MAX_TABLES_PER_NAME);
    // At most one state per table past the name's share (its first).
    assert!(store.len() < 256 + MAX_TABLES_PER_NAME, "{}", store.len());
    (0..200)
        .filter(|&i| check(&limiter, "per-user", &victim(i), 1).allowed)
        .count()
}

#[test]
fn new_keys_under_another_period_never_evict_the_limits_spent_keys() {
    let reset = spent_keys_reset_by(|limiter, clock| {
        let plan = Quota::new(5, secs(3_600)).expect("a quota");
        for i in 0..2_000 {
            let key = Key::from(format!("plan-{i}").as_str());
            assert!(check_with(limiter, "per-user", &key, plan).allowed);
            clock.advance(Duration::from_micros(10));
        }
    });
    assert_eq!(reset, 0, "{reset} of 200 spent keys got their quota back");
}

#[test]
fn a_caller_making_many_periods_gives_no_spent_key_its_quota_back() {
    let reset = spent_keys_reset_by(|limiter, _| {
        let caller = Key::from("many-periods");
        for i in 0..300 {
            let plan = Quota::new(5, secs(3_600 + i)).expect("a quota");
            // Past the bound of tables per name, a new period is denied: no error.
            let _ = check_with(limiter, "per-user", &caller, plan);
        }
        assert!(check(limiter, "per-user", &Key::from("newcomer"), 1).allowed);
    });
    assert_eq!(reset, 0, "{reset} of 200 spent keys got their quota back");
}

#[test]
fn reloads_through_other_periods_give_no_spent_key_its_quota_back() {
    let reset = spent_keys_reset_by(|limiter, clock| {
        for i in 1..=15 {
            let quota = Quota::new(5, secs(86_400 + i)).expect("a quota");
            limiter
                .reload([Limit::new("per-user", quota).expect("a limit")])
                .expect("a reload");
            // Keys decided under each period, so each leaves a table behind.
            for k in 0..20 {
                let key = Key::from(format!("reload-{i}-{k}").as_str());
                assert!(check(limiter, "per-user", &key, 1).allowed);
            }
            clock.advance(secs(2));
        }
        limiter
            .reload([Limit::new("per-user", Quota::per_day(5)).expect("a limit")])
            .expect("a reload");
    });
    assert_eq!(reset, 0, "{reset} of 200 spent keys got their quota back");
}

#[test]
fn a_flood_of_trips_never_evicts_a_pending_reservation() -> TestResult {
    let clock = ManualClock::new(BASE); // 20 s into a minute
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let window = Limit::new("window", Quota::per_minute(5))?.algorithm(Algorithm::FixedWindow);
    let limiter = limiter(&store, [window, login()]);
    let key = Key::from("alice");
    assert!(check(&limiter, "window", &key, 5).allowed);
    let reserved = immediate(limiter.reserve("window", &key, 1, secs(60)))?;
    assert!(reserved.allowed);
    assert_eq!(reserved.delay, secs(40)); // the next window
    trip_login(&limiter, &clock, 2_000);
    assert_eq!(admitted_of_ten(&limiter, "window", &key), 0);
    Ok(())
}

#[test]
fn a_reservation_that_finds_the_share_full_of_blocks_is_refused_and_charges_nothing() -> TestResult
{
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let limiter = limiter(&store, [login()]);
    trip_login(&limiter, &clock, 256);
    assert_eq!(store.block_records(), 256);
    let key = Key::from("patient");
    assert!(check(&limiter, "login", &key, 1).allowed);
    // Its place is a minute ahead: it needs a record, and there is no room.
    let refused = immediate(limiter.reserve("login", &key, 1, secs(120)))?;
    assert!(!refused.allowed);
    assert_eq!(store.block_records(), 256);
    // Nothing was charged: the next minute's request is there.
    clock.advance(secs(60));
    assert!(check(&limiter, "login", &key, 1).allowed);
    Ok(())
}

#[test]
fn a_reload_that_changes_algorithm_or_period_keeps_blocks_and_penalty_counts() -> TestResult {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone());
    let penalty = Penalty::after(3).within(secs(600)).block_for(secs(900));
    let gcra = Limit::new("login", Quota::per_minute(5))?.penalty(penalty);
    let limiter = limiter(&store, [gcra.clone()]);
    let (blocked, counted) = (Key::from("blocked"), Key::from("counted"));
    assert!(check(&limiter, "login", &blocked, 5).allowed);
    assert!(check(&limiter, "login", &counted, 5).allowed);
    for _ in 0..3 {
        check(&limiter, "login", &blocked, 1);
    }
    assert!(check(&limiter, "login", &blocked, 0).blocked_for.is_some());
    for _ in 0..2 {
        assert!(!check(&limiter, "login", &counted, 1).allowed);
    }
    let windowed = Limit::new("login", Quota::per_hour(10))?
        .algorithm(Algorithm::FixedWindow)
        .penalty(penalty);
    limiter.reload([windowed])?;
    assert_eq!(
        check(&limiter, "login", &blocked, 1).blocked_for,
        Some(secs(900))
    );
    // Usage starts fresh under the new period; the count of 2 does not: the first
    // rejection under it is the third, which blocks.
    assert!(check(&limiter, "login", &counted, 10).allowed);
    assert_eq!(
        check(&limiter, "login", &counted, 1).blocked_for,
        Some(secs(900))
    );
    limiter.reload([gcra])?;
    clock.advance(secs(60));
    for key in [&blocked, &counted] {
        assert!(check(&limiter, "login", key, 1).blocked_for.is_some());
    }
    Ok(())
}

#[test]
fn tables_per_name_stay_bounded_however_many_periods_a_caller_makes() -> TestResult {
    let clock = ManualClock::new(BASE);
    // One shard: the bound is the store's.
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let limiter = limiter(&store, [Limit::new("api", Quota::per_minute(100))?]);
    let mut denied = 0;
    for i in 0..1_000 {
        let key = Key::from(i);
        let plan = Quota::new(100, secs(60 + i))?;
        denied += usize::from(!check_with(&limiter, "api", &key, plan).allowed);
        // Every request finds its table by one lookup among at most 16 per name:
        // the work per request cannot grow with the periods made.
        assert!(store.tables() <= MAX_TABLES_PER_NAME);
    }
    assert_eq!(denied, 1_000 - MAX_TABLES_PER_NAME);
    // Each table is counted in the store's bytes.
    assert!(store.bytes() >= store.tables() * 64 + store.len() * 16);
    // The limit's own period is always served, even with the plans' tables full.
    assert!(check(&limiter, "api", &Key::from("own"), 1).allowed);
    // Once their states are idle, and nothing was stored in them for a sweep
    // interval, a sweep drops the tables: nothing left counts.
    for _ in 0..2 {
        clock.advance(secs(3_600));
        check(&limiter, "api", &Key::from("sweeper"), 0);
    }
    assert_eq!((store.tables(), store.len(), store.bytes()), (0, 0, 0));
    Ok(())
}

#[test]
fn a_denial_for_want_of_a_table_is_not_an_offence() -> TestResult {
    let store = MemoryStore::with_clock(ManualClock::new(BASE)).max_keys(256)?;
    let api = Limit::new("api", Quota::per_minute(100))?
        .penalty(Penalty::after(1).within(secs(60)).block_for(secs(60)));
    let limiter = limiter(&store, [api]);
    let squatter = Key::from("squatter");
    for i in 0..MAX_TABLES_PER_NAME as u64 {
        let plan = Quota::new(100, secs(3_600 + i))?;
        assert!(check_with(&limiter, "api", &squatter, plan).allowed);
    }
    let honest = Key::from("honest");
    let plan = Quota::new(100, secs(7_200))?;
    let d = check_with(&limiter, "api", &honest, plan);
    assert!(!d.allowed);
    assert_eq!(d.blocked_for, None);
    assert_eq!(store.block_records(), 0);
    Ok(())
}

/// Regression (issue 23, item 4): a reload that adds or removes a penalty box reaches
/// plan callers at once.
#[tokio::test]
async fn a_reload_that_changes_a_penalty_reaches_plan_callers() -> TestResult {
    support::reload_penalty::a_reload_that_changes_a_penalty_reaches_plan_callers(
        MemoryStore::with_clock,
    )
    .await
}
