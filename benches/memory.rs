//! Nanoseconds per decision: tollgate's memory store (all seven algorithms) against
//! governor's keyed limiter, in one binary and one run.
//!
//! Cases: one hot key, 10 000 keys and 1 000 000 keys (16 random bytes each, generated
//! before any timing and cycled through in order), on 1 thread and on 2 threads sharing
//! one limiter. Each case builds a fresh limiter and runs one untimed pass over its key
//! set first, so every key has state and every table is at its final size before the
//! clock starts.
//!
//! **Quota.** Every limiter enforces the same quota: 4·10⁹ per 2·10⁹ seconds, burst
//! = limit, i.e. emission interval `T` = 0.5 s and a capacity of 4·10⁹ per key (governor:
//! `Quota::with_period(0.5 s).allow_burst(4·10⁹)`, near its `u32` ceiling; 10⁸ was spent
//! by one hot key within a case once a check took under 30 ns). No key can spend it in one case, so
//! every request is admitted and every decision writes state; and because `T` is long,
//! no key goes idle during a run, so both limiters find every key's state and update it
//! in place (tollgate's store is bounded at 2 000 000 keys so that nothing is evicted
//! either). The group `decide/1M-regimes/1t` measures the two regimes this avoids:
//! tollgate's default bound (1 000 000 keys) under 1 000 000 active keys, and a quota
//! (10⁹/s, `T` = 1 ns) whose keys go idle right after each request, so tollgate's
//! once-a-second sweep drops them and they are inserted again.
//!
//! tollgate keys are fingerprinted (`Key::from(&bytes[..])`) before timing, as an
//! extractor does while reading the request; the cost of that step is measured on its
//! own by `key/fingerprint`. governor gets the raw `[u8; 16]`.
//!
//! `Limiter::check` is `async` but finishes on its first poll with the memory store;
//! [`now_or_never`] polls it exactly once with a no-op waker (no runtime involved).
//!
//! The two-thread figures come from `iter_custom`: two scoped threads each make half of
//! the decisions on the shared limiter, released together by a barrier; the wall time
//! from the first thread's start to the last thread's finish is reported, so they read
//! as wall nanoseconds per decision of the pair.
//!
//! Run with `cargo bench --bench memory` (filter with e.g. `-- decide/1M`).

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{Bencher, BenchmarkGroup, Criterion};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

/// The quota every limiter enforces: `LIMIT` per `PERIOD_SECS`, burst `LIMIT`.
const LIMIT: u32 = 4_000_000_000;
const PERIOD_SECS: u64 = 2_000_000_000;
/// The quota of the "idle after every request" regime: `FAST_LIMIT` per second.
const FAST_LIMIT: u32 = 1_000_000_000;
/// tollgate's store bound in the main cases: room for every key of the largest set.
const MAX_KEYS: usize = 2_000_000;
const POLICY: &str = "bench";

const ALGORITHMS: [(&str, Algorithm); 7] = [
    ("fixed_window", Algorithm::FixedWindow),
    ("sliding_window", Algorithm::SlidingWindow),
    (
        "sliding_window_counters",
        Algorithm::SlidingWindowCounters { buckets: 10 },
    ),
    ("sliding_window_log", Algorithm::SlidingWindowLog),
    ("token_bucket", Algorithm::TokenBucket),
    ("gcra", Algorithm::Gcra),
    ("leaky_bucket", Algorithm::LeakyBucket),
];

const KEY_SETS: [(&str, usize); 3] = [("hot", 1), ("10k", 10_000), ("1M", 1_000_000)];

/// Polls `future` once with a waker that does nothing and returns its output.
///
/// The memory store never suspends, so one poll always completes `Limiter::check`;
/// a future that is still pending would mean a store that does I/O, which this
/// benchmark does not measure, hence the panic.
fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory store completed nothing on the first poll"),
    }
}

/// `n` distinct pseudo-random 16-byte keys (splitmix64: deterministic, no dependency).
fn raw_keys(n: usize) -> Vec<[u8; 16]> {
    let mut state: u64 = 0x5eed_0f70_1166_a7e0;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|_| {
            let mut key = [0_u8; 16];
            key[..8].copy_from_slice(&next().to_le_bytes());
            key[8..].copy_from_slice(&next().to_le_bytes());
            key
        })
        .collect()
}

/// The main quota: `LIMIT` per `PERIOD_SECS`, burst `LIMIT` (`T` = 0.5 s).
fn slow_quota() -> Quota {
    Quota::new(u64::from(LIMIT), Duration::from_secs(PERIOD_SECS)).expect("valid quota")
}

/// The "idle after every request" quota: `FAST_LIMIT` per second (`T` = 1 ns).
fn fast_quota() -> Quota {
    Quota::per_second(u64::from(FAST_LIMIT))
}

fn tollgate_limiter(algorithm: Algorithm, quota: Quota, store: MemoryStore) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new(POLICY, quota)
                .expect("valid policy")
                .algorithm(algorithm),
        )
        .store(store)
        .build()
        .expect("valid limiter")
}

fn bounded_store() -> MemoryStore {
    MemoryStore::new().max_keys(MAX_KEYS).expect("valid bound")
}

type Governor = DefaultKeyedRateLimiter<[u8; 16]>;

/// governor with the same quota as [`slow_quota`]: one cell per 0.5 s, burst `LIMIT`.
fn governor_slow() -> Governor {
    let period = Duration::from_secs(PERIOD_SECS) / LIMIT;
    let burst = NonZeroU32::new(LIMIT).expect("non-zero limit");
    let quota = governor::Quota::with_period(period)
        .expect("non-zero period")
        .allow_burst(burst);
    RateLimiter::keyed(quota)
}

/// governor with the same quota as [`fast_quota`].
fn governor_fast() -> Governor {
    let limit = NonZeroU32::new(FAST_LIMIT).expect("non-zero limit");
    RateLimiter::keyed(governor::Quota::per_second(limit))
}

fn tollgate_decide(limiter: &Limiter, key: &Key) -> bool {
    now_or_never(limiter.check(POLICY, key, 1))
        .expect("memory store never fails")
        .allowed
}

fn governor_decide(limiter: &Governor, key: &[u8; 16]) -> bool {
    limiter.check_key(key).is_ok()
}

/// Runs `n` decisions over `keys`, starting at `*cursor` and wrapping around.
#[inline]
fn run<K>(keys: &[K], cursor: &mut usize, n: u64, decide: &impl Fn(&K) -> bool) {
    let mut i = *cursor;
    for _ in 0..n {
        black_box(decide(black_box(&keys[i])));
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    *cursor = i;
}

/// Where each thread is in the key set; kept between samples so every pass cycles on.
type Cursors = [usize; 2];

/// Fresh cursors for a key set, after one untimed pass over it (every key has state
/// and every table has grown before timing). The second thread starts half-way
/// through, so with many keys the two threads mostly touch different keys.
fn prepare<K>(keys: &[K], decide: &impl Fn(&K) -> bool) -> Cursors {
    let mut cursor = 0;
    run(keys, &mut cursor, keys.len() as u64, decide);
    [0, keys.len() / 2]
}

/// Benchmarks one limiter over one key set on `threads` threads (1 or 2).
fn measure<K: Sync>(
    b: &mut Bencher<'_>,
    keys: &[K],
    cursors: &mut Cursors,
    threads: usize,
    decide: impl Fn(&K) -> bool + Sync,
) {
    if threads == 1 {
        let cursor = &mut cursors[0];
        b.iter(|| {
            let k = &keys[*cursor];
            *cursor += 1;
            if *cursor == keys.len() {
                *cursor = 0;
            }
            decide(black_box(k))
        });
        return;
    }
    b.iter_custom(|iters| {
        // Both threads wait at the barrier, then time their own share; the pair's wall
        // time runs from the first start to the last finish (taken in the workers, so
        // a late-scheduled main thread cannot shorten it).
        let barrier = Barrier::new(2);
        let shares = [iters - iters / 2, iters / 2];
        thread::scope(|s| {
            let handles: Vec<_> = cursors
                .iter()
                .zip(shares)
                .map(|(&start, n)| {
                    let (barrier, decide) = (&barrier, &decide);
                    s.spawn(move || {
                        let mut cursor = start;
                        barrier.wait();
                        let began = Instant::now();
                        run(keys, &mut cursor, n, decide);
                        (cursor, began, Instant::now())
                    })
                })
                .collect();
            let mut first_start: Option<Instant> = None;
            let mut last_end: Option<Instant> = None;
            for (slot, handle) in cursors.iter_mut().zip(handles) {
                let (cursor, began, ended) = handle.join().expect("bench thread panicked");
                *slot = cursor;
                first_start = Some(first_start.map_or(began, |t| t.min(began)));
                last_end = Some(last_end.map_or(ended, |t| t.max(ended)));
            }
            match (first_start, last_end) {
                (Some(start), Some(end)) => end - start,
                _ => Duration::ZERO,
            }
        })
    });
}

/// After a case: a few more decisions must all be admitted, or the quota did not
/// keep the limiter on its "admit and write" path.
fn assert_all_admitted<K>(what: &str, keys: &[K], decide: impl Fn(&K) -> bool) {
    let denied = keys.iter().take(1_000).filter(|k| !decide(k)).count();
    assert_eq!(
        denied, 0,
        "{what}: requests were denied: the quota is too small"
    );
}

/// One case: builds its limiter and makes the untimed pass on first use. Criterion
/// calls a case's routine only when the case matches the command line's filter, so a
/// filtered run (scripts/bench-memory runs one case at a time) prepares only what it
/// measures instead of a million keys for every limiter.
fn case<K: Sync, L: Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: &[K],
    threads: usize,
    build: impl FnOnce() -> L,
    decide: fn(&L, &K) -> bool,
) {
    let mut build = Some(build);
    let mut prepared: Option<(L, Cursors)> = None;
    group.bench_function(name, |b| {
        let (limiter, cursors) = prepared.get_or_insert_with(|| {
            let limiter = build.take().expect("built once")();
            let cursors = prepare(keys, &|k| decide(&limiter, k));
            (limiter, cursors)
        });
        let limiter = &*limiter;
        measure(b, keys, cursors, threads, |k| decide(limiter, k));
    });
    if let Some((limiter, _)) = &prepared {
        assert_all_admitted(name, keys, |k| decide(limiter, k));
    }
}

fn decisions(c: &mut Criterion, all_raw: &[[u8; 16]], all_keys: &[Key]) {
    for (set, n) in KEY_SETS {
        let raw = &all_raw[..n];
        let keys = &all_keys[..n];
        for threads in [1, 2] {
            let mut group = c.benchmark_group(format!("decide/{set}/{threads}t"));
            group
                .sample_size(20)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_millis(2_500));
            for (name, algorithm) in ALGORITHMS {
                let build = || tollgate_limiter(algorithm, slow_quota(), bounded_store());
                case(&mut group, name, keys, threads, build, tollgate_decide);
            }
            case(
                &mut group,
                "governor",
                raw,
                threads,
                governor_slow,
                governor_decide,
            );
            group.finish();
        }
    }
}

/// 1 000 000 keys, 1 thread, in the two regimes the main cases avoid (see the crate
/// docs above): a store bound equal to the key count, and keys that go idle after
/// every request.
fn regimes(c: &mut Criterion, raw: &[[u8; 16]], keys: &[Key]) {
    let mut group = c.benchmark_group("decide/1M-regimes/1t");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2_500));
    let default_bound = || tollgate_limiter(Algorithm::Gcra, slow_quota(), MemoryStore::new());
    case(
        &mut group,
        "gcra_default_max_keys",
        keys,
        1,
        default_bound,
        tollgate_decide,
    );
    let idle_each = || tollgate_limiter(Algorithm::Gcra, fast_quota(), bounded_store());
    case(
        &mut group,
        "gcra_idle_each_request",
        keys,
        1,
        idle_each,
        tollgate_decide,
    );
    let governor_idle_each = "governor_idle_each_request";
    case(
        &mut group,
        governor_idle_each,
        raw,
        1,
        governor_fast,
        governor_decide,
    );
    group.finish();
}

fn fingerprint(c: &mut Criterion) {
    let raw = raw_keys(1_024);
    let mut group = c.benchmark_group("key");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    let mut i = 0;
    group.bench_function("fingerprint", |b| {
        b.iter(|| {
            let k = &raw[i];
            i = (i + 1) % raw.len();
            Key::from(&black_box(k)[..])
        });
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let raw = raw_keys(1_000_000);
    let keys: Vec<Key> = raw.iter().map(|k| Key::from(&k[..])).collect();
    decisions(&mut c, &raw, &keys);
    regimes(&mut c, &raw, &keys);
    fingerprint(&mut c);
    c.final_summary();
}
