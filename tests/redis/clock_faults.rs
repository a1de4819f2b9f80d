//! The Redis server's own clock jumping, with a `RedisStore` that reads it (no injected
//! clock: every script calls `redis.call('TIME')`).
//!
//! A real `redis-server` runs under libfaketime: its wall clock is the real one plus
//! an offset read from a file at every reading, which the test rewrites between
//! requests. Its monotonic clock is left alone, so the event loop is undisturbed; key
//! expiry (`PX`) follows the faked clock, as it would after a real NTP step.
//!
//! What must hold, for all seven algorithms: no panic and no error; waits that are
//! never negative and never longer than the clock's error plus two periods; while the
//! server clock is stepped back (it stands still at each key's latest instant), and
//! once it returns, no more than the bound on a true clock plus one period's quota in
//! any period of the test's real time. Redis keeps the latest instant per key, and the
//! store carries the latest server time it has seen forward as a floor, which holds
//! keys idle through the step too (without it they could take two periods' quota more:
//! found by this file, fixed, and kept as a regression test). After a jump of ten
//! years ahead and back: exactly one capacity more, then nothing for the keys decided
//! during the jump until the server clock is past that instant again.
#![cfg(feature = "redis")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::redis_server::RedisServer;
use support::rng::Rng;
use tempfile::TempDir;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, Quota, RedisStore};

const PERIOD: Duration = Duration::from_secs(1);
const LIMIT: u64 = 10;
const BURST: u64 = 5;
const YEAR_SECS: u64 = 365 * 86_400;

/// Where Debian and Ubuntu put libfaketime (`apt-get install libfaketime`).
const LIBFAKETIME: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// One algorithm under test, at 10 per second (burst 5 where it takes one), with the
/// most it may admit in one period of real time.
struct Case {
    algorithm: Algorithm,
    takes_burst: bool,
    /// On a clock that never goes back (the bounds stated on `Algorithm`).
    bound: u64,
}

impl Case {
    const fn window(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            takes_burst: false,
            bound: 2 * LIMIT,
        }
    }

    const fn bucket(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            takes_burst: true,
            bound: BURST + LIMIT,
        }
    }
}

const CASES: [Case; 7] = [
    Case::window(Algorithm::FixedWindow),
    Case::window(Algorithm::SlidingWindow),
    Case::window(Algorithm::SlidingWindowCounters { buckets: 10 }),
    Case {
        algorithm: Algorithm::SlidingWindowLog,
        takes_burst: false,
        bound: LIMIT,
    },
    Case::bucket(Algorithm::TokenBucket),
    Case::bucket(Algorithm::Gcra),
    Case::bucket(Algorithm::LeakyBucket),
];

fn case(algorithm: Algorithm) -> &'static Case {
    CASES
        .iter()
        .find(|c| c.algorithm == algorithm)
        .expect("a case")
}

/// One policy per case, named `p0` to `p6`.
fn policies() -> Vec<Limit> {
    let rate = Quota::per_second(LIMIT);
    CASES
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let quota = if c.takes_burst {
                rate.with_burst(BURST).expect("burst")
            } else {
                rate
            };
            Limit::new(format!("p{i}"), quota)
                .expect("policy")
                .algorithm(c.algorithm)
        })
        .collect()
}

/// A redis-server whose wall clock is the real one plus an offset the test sets.
struct FakedServer {
    server: Option<RedisServer>,
    /// Holds the offset file (libfaketime reads it at every clock reading).
    _dir: TempDir,
    offset_file: PathBuf,
}

impl FakedServer {
    fn start() -> Self {
        let Some(library) = LIBFAKETIME.iter().find(|p| Path::new(p).exists()) else {
            panic!(
                "libfaketime is not installed (looked for {LIBFAKETIME:?}): this test fakes \
                 the redis-server clock with it. Install it with `sudo apt-get install -y \
                 libfaketime` (scripts/test does)."
            );
        };
        let dir = tempfile::tempdir().expect("temp dir for the clock offset");
        let offset_file = dir.path().join("offset");
        std::fs::write(&offset_file, "+0\n").expect("write the clock offset");
        // libc comes second so that its malloc precedes Debian's dynamically linked
        // jemalloc: jemalloc reads the clock while it initialises, and libfaketime,
        // initialising on that reading, allocates (a known clash: libfaketime #130).
        let preload = format!("{library}:libc.so.6");
        let file = offset_file.display().to_string();
        let server = RedisServer::start_with_env(
            &[],
            &[
                ("LD_PRELOAD", preload.as_str()),
                ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
                ("FAKETIME_NO_CACHE", "1"),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        );
        let faked = Self {
            server: Some(server),
            _dir: dir,
            offset_file,
        };
        // The server's clock must follow the file, or this test proves nothing.
        faked.set_offset(1_000.0);
        let skew = faked.server_time_secs() - unix_now_secs() - 1_000.0;
        assert!(
            skew.abs() < 5.0,
            "redis-server does not follow the faked clock (off by {skew} s from the offset)"
        );
        faked.set_offset(0.0);
        faked
    }

    fn server(&self) -> &RedisServer {
        self.server.as_ref().expect("running")
    }

    /// From the next clock reading on, the server's wall clock is real time plus
    /// `seconds` (negative: behind). Written whole and renamed into place, so that no
    /// reading sees half a file.
    ///
    /// Returns once the server's `TIME` says so: Valkey 9 reads the wall clock
    /// through a cache it refreshes on its own (an offset is seen up to a server tick
    /// later), where Redis reads it at each call.
    fn set_offset(&self, seconds: f64) {
        let next = self.offset_file.with_extension("next");
        std::fs::write(&next, format!("{seconds:+}\n")).expect("write the clock offset");
        std::fs::rename(&next, &self.offset_file).expect("replace the clock offset");
        let written = std::time::Instant::now();
        while (self.server_time_secs() - unix_now_secs() - seconds).abs() > 0.5 {
            assert!(
                written.elapsed() < Duration::from_secs(5),
                "the server's clock did not follow the offset {seconds:+} s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The server's `TIME`, in seconds since the epoch.
    fn server_time_secs(&self) -> f64 {
        let time = self.server().cli(&["TIME"]);
        let mut parts = time.lines().map(|l| l.trim().parse::<f64>().expect("TIME"));
        let (secs, micros) = (parts.next().expect("secs"), parts.next().expect("µs"));
        secs + micros / 1e6
    }

    fn store(&self) -> RedisStore {
        RedisStore::from_url(&self.server().url())
            .expect("a valid url")
            // Every decision is the server's: no local answers from the denial cache.
            .denial_cache(0)
            // Answers are checked, not speed, on a possibly busy machine.
            .deadline(Duration::from_secs(5))
            .expect("a deadline")
    }
}

impl Drop for FakedServer {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let pid = server.pid();
            drop(server); // killed and reaped
            // libfaketime's shared memory and semaphore, left behind by a SIGKILL.
            let _ = std::fs::remove_file(format!("/dev/shm/faketime_shm_{pid}"));
            let _ = std::fs::remove_file(format!("/dev/shm/sem.faketime_sem_{pid}"));
        }
    }
}

fn unix_now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

fn limiter(store: RedisStore) -> Limiter {
    policies()
        .into_iter()
        .fold(Limiter::builder(), tollgate::LimiterBuilder::limit)
        .store(store)
        .build()
        .expect("limiter")
}

async fn check(limiter: &Limiter, policy: &str, key: &Key, cost: u32) -> Decision {
    limiter
        .check(policy, key, cost)
        .await
        .unwrap_or_else(|e| panic!("{policy}: a store error under a faked clock: {e}"))
}

/// One admission: when it was sent and answered, in real time since the test began
/// (the server decided somewhere in between), and its cost.
#[derive(Clone, Copy)]
struct Admission {
    sent: Duration,
    answered: Duration,
    cost: u64,
}

/// The most cost admitted in one period of real time, as bounds (admissions are in
/// sending order, one at a time): `(surely, at most)`. `surely` counts, for a window
/// opening at an admission, only those certainly decided inside it; `at most` also
/// those that may have been.
fn most_in_any_period(admitted: &[Admission]) -> (u64, u64) {
    let (mut surely, mut at_most) = (0, 0);
    for (j, first) in admitted.iter().enumerate() {
        let rest = &admitted[j..];
        let sure: u64 = rest
            .iter()
            .filter(|a| a.answered < first.sent + PERIOD)
            .map(|a| a.cost)
            .sum();
        let may: u64 = rest
            .iter()
            .filter(|a| a.sent < first.answered + PERIOD)
            .map(|a| a.cost)
            .sum();
        surely = surely.max(sure);
        at_most = at_most.max(may);
    }
    (surely, at_most)
}

/// Requests are sent in one burst per tick; 7.5 ticks per period keeps bursts about
/// 0.07 s away from being exactly one period apart, so a window's edges rarely fall
/// inside a burst and the two bounds above agree.
const TICK: Duration = Duration::from_micros(133_333);
const TICKS: u32 = 200;

/// Mid-traffic, the server clock steps back by 2 to 5 periods and, after less than the
/// step, forward to the true time; then true time for a while, and again. In any
/// period of real time, every key admits no more than the bound on a true clock plus
/// one period's quota: a key decided just before each step stands still at its own
/// latest instant, a key idle through a step is held by the store's floor.
#[tokio::test]
async fn server_time_stepping_back_periods_and_forward_over_admits_at_most_one_period() {
    let server = FakedServer::start();
    let limiter = limiter(server.store());
    let policies = policies();
    // Per policy, three keys: dense traffic, sparse traffic, and all-or-nothing bursts.
    let keys: Vec<[Key; 3]> = (0..policies.len())
        .map(|i| [0, 1, 2].map(|k| Key::from(format!("step{i}-{k}"))))
        .collect();
    let mut admitted: Vec<[Vec<Admission>; 3]> = vec![Default::default(); policies.len()];
    let mut rng = Rng(0x7265_6469_7374_696d);
    let (mut offset, mut next_change) = (0.0_f64, 3_u32);
    let (mut back_steps, mut requests, mut denied_behind) = (0, 0, 0);
    let period = PERIOD.as_secs_f64();
    let start = Instant::now();
    for tick in 0..TICKS {
        tokio::time::sleep_until((start + TICK * tick).into()).await;
        if tick == next_change {
            let hold = if offset == 0.0 {
                // 2 to 5 periods back, held for up to 8 ticks (1.07 periods): less
                // than the step, so a key decided just before stands still throughout.
                let periods = 2.0 + rng.below(13) as f64 / 4.0;
                offset = -periods * period;
                back_steps += 1;
                1 + rng.below(8)
            } else {
                // True time for more than a period: one return per period of real time.
                offset = 0.0;
                8 + rng.below(6)
            };
            server.set_offset(offset);
            next_change = tick + u32::try_from(hold).expect("small");
        }
        // The wait a denial may announce: the clock's error plus two periods.
        let longest = Duration::from_secs_f64(-offset) + 2 * PERIOD;
        for ((i, policy), k) in policies
            .iter()
            .enumerate()
            .flat_map(|p| [(p, 0), (p, 1), (p, 2)])
        {
            let sends = match k {
                0 => 1 + rng.below(4),
                1 => rng.below(3),
                _ => 5 * rng.below(2),
            };
            for _ in 0..sends {
                let cost = 1 + rng.below(2);
                let sent = start.elapsed();
                let d = check(&limiter, policy.name(), &keys[i][k], cost as u32).await;
                let answered = start.elapsed();
                requests += 1;
                let algorithm = policy.get_algorithm();
                assert!(d.remaining <= policy.capacity(), "{algorithm}: {d:?}");
                assert!(d.reset_after <= longest, "{algorithm}: {d:?}");
                if d.allowed {
                    assert_eq!(d.retry_after, None, "{algorithm}");
                    admitted[i][k].push(Admission {
                        sent,
                        answered,
                        cost,
                    });
                } else {
                    let retry = d.retry_after.expect("a cost of 1 or 2 fits later");
                    assert!(retry <= longest, "{algorithm}: waits {retry:?}");
                    if offset < 0.0 {
                        denied_behind += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "{back_steps} steps back, {requests} requests over {:.1} s of real time, \
         {denied_behind} denied while the server clock was behind",
        start.elapsed().as_secs_f64()
    );
    for (policy, admitted) in policies.iter().zip(&admitted) {
        let algorithm = policy.get_algorithm();
        let bound = case(algorithm).bound;
        // The dense key is decided at every tick, so its own latest instant holds it
        // through every step; the others may sit idle through one, held by the floor.
        let allowed = [bound + LIMIT; 3];
        for (k, key) in admitted.iter().enumerate() {
            let (surely, at_most) = most_in_any_period(key);
            eprintln!(
                "{algorithm} {}: at most {at_most} admitted in one period of real time \
                 ({surely} surely; bound on a true clock {bound}, allowed {})",
                ["dense", "sparse", "bursts"][k],
                allowed[k]
            );
            assert!(
                at_most <= allowed[k],
                "{algorithm} key {k}: {at_most} in one period"
            );
        }
    }
    assert!(back_steps >= 10, "only {back_steps} steps back");
}

/// Sleeps until the wall clock's fraction of a second is `frac` (windows are aligned
/// to the epoch, and the server's clock is the wall clock plus the offset).
async fn sleep_until_fraction(frac: f64) {
    let now = unix_now_secs();
    let mut wait = frac - now.fract();
    if wait <= 0.0 {
        wait += 1.0;
    }
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
}

/// Regression: a fixed-window key with no state while the server clock is 2.5 periods
/// behind used to be decided at the lagging time (its own latest instant cannot hold
/// it), across a window edge, and when the clock returned across another: four
/// windows' quotas, 4 L, within 0.8 s of real time, where a true clock admits at most
/// 2 L. The store's floor (the latest server time it has seen, carried forward) now
/// decides it at the true time: L in the true window of the first three bursts, L in
/// the next.
#[tokio::test]
async fn an_idle_key_through_a_step_back_gains_nothing() {
    let server = FakedServer::start();
    let limiter = limiter(server.store());
    let policy = &policies()[0];
    assert_eq!(policy.get_algorithm(), Algorithm::FixedWindow);
    // (fraction of the wall-clock second to start at, offset): the first three bursts
    // fall in one true window, the last in the next; a burst that strays across a
    // window edge (a stalled machine) retries.
    let plan = [(0.35, -2.5), (0.65, -2.5), (0.75, 0.0), (0.15, 0.0)];
    for attempt in 0.. {
        assert!(attempt < 5, "the bursts never fell inside their windows");
        server.set_offset(0.0);
        // The store sees the true time once, on another key, as any running process has.
        check(&limiter, policy.name(), &Key::from("warm-up"), 1).await;
        let key = Key::from(format!("idle{attempt}"));
        let (mut admitted, mut windows, mut first, mut last) = (0, Vec::new(), 0.0, 0.0);
        for (i, &(frac, offset)) in plan.iter().enumerate() {
            sleep_until_fraction(frac).await;
            server.set_offset(offset);
            let sent = unix_now_secs();
            for _ in 0..LIMIT {
                admitted += u64::from(check(&limiter, policy.name(), &key, 1).await.allowed);
            }
            let answered = unix_now_secs();
            // True windows: the floor keeps the key on the true clock.
            let window = |wall: f64| wall.floor() as i64;
            if window(sent) == window(answered) {
                windows.push(window(sent));
            }
            if i == 0 {
                first = sent;
            }
            last = answered;
        }
        windows.dedup();
        if windows.len() != 2 || last - first >= PERIOD.as_secs_f64() {
            continue;
        }
        eprintln!(
            "idle key, server clock 2.5 periods behind then back: {admitted} admitted \
             within {:.3} s of real time (a true clock: at most {}; before the floor: {})",
            last - first,
            case(Algorithm::FixedWindow).bound,
            4 * LIMIT
        );
        assert_eq!(admitted, 2 * LIMIT);
        break;
    }
}

/// Spends up to `2 × capacity` at cost 1; how many passed.
async fn spend(limiter: &Limiter, policy: &Limit, key: &Key) -> u64 {
    let mut passed = 0;
    for _ in 0..2 * policy.capacity() {
        if check(limiter, policy.name(), key, 1).await.allowed {
            passed += 1;
        }
    }
    passed
}

/// Ten years ahead, then back. Keys decided during the jump (`touched`) admit one
/// capacity more there, then stand still at that far instant: denied, with a wait
/// measured to it, until the server clock gets there again. Keys left alone during the
/// jump (`untouched`) lose their state to Redis' expiry (their TTL ran out on the
/// faked clock): back in the present they admit one capacity more, then refill at the
/// true rate.
#[tokio::test]
async fn server_time_ten_years_ahead_and_back_admits_one_capacity_more_then_stands_still() {
    let server = FakedServer::start();
    let store = server.store();
    let limiter = limiter(store.clone());
    let policies = policies();
    let jump = Duration::from_secs(10 * YEAR_SECS);
    let touched: Vec<Key> = (0..7).map(|i| Key::from(format!("touched{i}"))).collect();
    let untouched: Vec<Key> = (0..7).map(|i| Key::from(format!("untouched{i}"))).collect();
    // Every round below that must admit exactly one capacity starts just after a
    // window edge (offsets are whole seconds, so the faked clock's windows turn with
    // the wall clock's), after a first call has loaded the library: a round that
    // straddled an edge would admit part of a second window's quota.
    check(&limiter, policies[0].name(), &Key::from("warm-up"), 0).await;
    sleep_until_fraction(0.02).await;
    let start = Instant::now();

    for (i, policy) in policies.iter().enumerate() {
        let capacity = policy.capacity();
        assert_eq!(spend(&limiter, policy, &touched[i]).await, capacity);
        assert_eq!(spend(&limiter, policy, &untouched[i]).await, capacity);
    }

    sleep_until_fraction(0.02).await;
    server.set_offset(jump.as_secs_f64());
    let ahead = server.server_time_secs() - unix_now_secs();
    assert!((ahead - jump.as_secs_f64()).abs() < 5.0, "{ahead} s ahead");
    let mut last_far = vec![Duration::ZERO; policies.len()];
    for (i, policy) in policies.iter().enumerate() {
        // Ten years ahead looks like ten years of refill: one capacity more.
        last_far[i] = start.elapsed();
        assert_eq!(
            spend(&limiter, policy, &touched[i]).await,
            policy.capacity(),
            "{}",
            policy.get_algorithm()
        );
        // Redis expires the untouched keys' state (EXISTS expires what it finds
        // expired; the server's own expiry cycle would, a little later).
        let name = store.state_key(policy, &untouched[i]);
        let log = format!("{name}:log");
        assert_eq!(server.server().cli(&["EXISTS", &name, &log]), "0", "{name}");
    }

    server.set_offset(0.0);
    let mut ttl_past_jump = f64::MAX;
    for (i, policy) in policies.iter().enumerate() {
        let pttl: i64 = server
            .server()
            .cli(&["PTTL", &store.state_key(policy, &touched[i])])
            .parse()
            .expect("PTTL");
        assert!(pttl > 0, "{}: PTTL {pttl}", policy.get_algorithm());
        ttl_past_jump = ttl_past_jump.min(pttl as f64 / 1e3 - jump.as_secs_f64());
    }
    // Back in the present: the touched keys stand still at the far instant.
    let mut denied = 0;
    let (mut shortest, mut longest) = (Duration::MAX, Duration::ZERO);
    for step in 0..15 {
        let since = last_far[policies.len() - 1] + PERIOD / 5 * step;
        tokio::time::sleep_until((start + since).into()).await;
        for (i, policy) in policies.iter().enumerate() {
            let algorithm = policy.get_algorithm();
            let d = check(&limiter, policy.name(), &touched[i], 1).await;
            assert!(!d.allowed, "{algorithm} admitted after the jump back");
            denied += 1;
            let retry = d.retry_after.expect("a cost of 1 fits later");
            // The wait is honest: at least until the far instant the key last saw
            // (decided after `last_far`, on a clock `jump` ahead; this decision before
            // `start.elapsed()` now), at most two periods past it.
            let until_far = jump.saturating_sub(start.elapsed().saturating_sub(last_far[i]));
            assert!(retry >= until_far, "{algorithm}: waits {retry:?}");
            assert!(retry <= jump + 2 * PERIOD, "{algorithm}: waits {retry:?}");
            shortest = shortest.min(retry);
            longest = longest.max(retry);
        }
    }
    // The untouched keys lost their state during the jump: one capacity more, then the
    // true rate.
    sleep_until_fraction(0.02).await;
    for (i, policy) in policies.iter().enumerate() {
        assert_eq!(
            spend(&limiter, policy, &untouched[i]).await,
            policy.capacity(),
            "{}",
            policy.get_algorithm()
        );
        assert!(
            !check(&limiter, policy.name(), &untouched[i], 1)
                .await
                .allowed
        );
    }
    tokio::time::sleep(PERIOD + PERIOD / 10).await;
    for (i, policy) in policies.iter().enumerate() {
        let d = check(&limiter, policy.name(), &untouched[i], 1).await;
        assert!(d.allowed, "{}: {d:?}", policy.get_algorithm());
    }
    // Once the server clock is past the far instant, the touched keys refill as usual.
    server.set_offset((jump + 3 * PERIOD).as_secs_f64());
    for (i, policy) in policies.iter().enumerate() {
        let d = check(&limiter, policy.name(), &touched[i], 1).await;
        assert!(d.allowed, "{}: {d:?}", policy.get_algorithm());
    }
    eprintln!(
        "ten years ahead and back: one capacity more at the far instant for every \
         algorithm; back in the present, {denied} of {denied} requests to those keys \
         denied over 3 s, waits from ten years - {:.3} s to ten years + {:.3} s, their \
         state's TTL at least ten years {:+.1} s; keys untouched during the jump expired, \
         admitted one capacity more, then again a period later",
        jump.saturating_sub(shortest).as_secs_f64(),
        longest.saturating_sub(jump).as_secs_f64(),
        ttl_past_jump,
    );
}

/// Server clocks where µs since the epoch leave the integers a double holds exactly
/// (2^53 µs is in the year 2255), past where the memory store saturates (10^16 µs, in
/// 2286), a thousand years ahead, and back: no panic, no error, one capacity at each
/// new far instant, then standing still.
#[tokio::test]
async fn server_time_centuries_ahead_never_panics_nor_errs() {
    let server = FakedServer::start();
    let limiter = limiter(server.store());
    let policies = policies();
    let key = Key::from("far");
    let mut far: Option<Duration> = None;
    for years in [0, 250, 300, 1_000, 0, 300] {
        let ahead = Duration::from_secs(years * YEAR_SECS);
        let forward = far.is_none_or(|far| ahead > far);
        if forward {
            // Offsets are whole seconds, so the faked clock's windows turn with the wall
            // clock's: starting a round that must admit exactly one capacity just after
            // an edge keeps it in one window (one that straddled an edge admitted a
            // second window's quota). Rounds that go back follow at once: their waits
            // are measured to the far instant, which real time shortens.
            sleep_until_fraction(0.02).await;
        }
        server.set_offset(ahead.as_secs_f64());
        let far = *far.insert(far.unwrap_or(ahead).max(ahead));
        for policy in &policies {
            let algorithm = policy.get_algorithm();
            let mut passed = 0;
            for _ in 0..2 * policy.capacity() {
                let d = check(&limiter, policy.name(), &key, 1).await;
                assert!(d.remaining <= policy.capacity(), "{algorithm}: {d:?}");
                if d.allowed {
                    passed += 1;
                } else {
                    let retry = d.retry_after.expect("a cost of 1 fits later");
                    assert!(
                        retry <= far.saturating_sub(ahead) + 2 * PERIOD,
                        "{algorithm} at {years} years ahead: {d:?}"
                    );
                    assert!(
                        retry + PERIOD >= far.saturating_sub(ahead),
                        "{algorithm} at {years} years ahead: {d:?}"
                    );
                }
            }
            let expected = if forward { policy.capacity() } else { 0 };
            assert_eq!(passed, expected, "{algorithm} at {years} years ahead");
        }
    }
}
