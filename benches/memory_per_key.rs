//! Bytes of memory per stored key: tollgate's memory store (each algorithm) against
//! governor's keyed limiter, both holding 1 000 000 keys of 16 bytes.
//!
//! The crate forbids `unsafe` code, benches included, and a counting global allocator
//! needs `unsafe impl GlobalAlloc`; so this measures resident memory instead. Each
//! measurement runs in a fresh child process (this same binary, re-executed with
//! `TOLLGATE_MEMORY_CASE` set), so no allocator state is inherited from an earlier
//! measurement: the child generates its keys, reads `VmRSS` from `/proc/self/status`,
//! builds the limiter, makes one admitted request per key, reads `VmRSS` again and
//! divides the growth by the number of keys the limiter reports holding. The parent
//! runs every case `RUNS` times and prints the median, once with glibc's default
//! allocator settings and once with a fixed mmap threshold (see [`MALLOC_MODES`]).
//!
//! The quota, 1000 per day with burst 1000, keeps every key's state alive (not idle)
//! for the whole measurement; the tollgate store is bounded at 2 000 000 keys so none
//! is evicted. Run with `cargo bench --bench memory_per_key` (Linux only).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::process::Command;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, RateLimiter};
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

const KEYS: usize = 1_000_000;
const RUNS: usize = 3;
const LIMIT: u32 = 1_000;
const CASE_VAR: &str = "TOLLGATE_MEMORY_CASE";

const CASES: [(&str, Option<Algorithm>); 8] = [
    ("fixed_window", Some(Algorithm::FixedWindow)),
    ("sliding_window", Some(Algorithm::SlidingWindow)),
    (
        "sliding_window_counters",
        Some(Algorithm::SlidingWindowCounters { buckets: 10 }),
    ),
    ("sliding_window_log", Some(Algorithm::SlidingWindowLog)),
    ("token_bucket", Some(Algorithm::TokenBucket)),
    ("gcra", Some(Algorithm::Gcra)),
    ("leaky_bucket", Some(Algorithm::LeakyBucket)),
    ("governor", None),
];

/// Resident memory of this process in bytes, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

/// Polls `Limiter::check` once: the memory store completes on the first poll.
fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory store completed nothing on the first poll"),
    }
}

/// `n` distinct pseudo-random 16-byte keys (splitmix64).
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

/// Child side: fills one limiter and prints `<rss growth in bytes> <keys held>`.
fn measure(case: &str) {
    let (_, algorithm) = CASES
        .iter()
        .find(|(name, _)| *name == case)
        .unwrap_or_else(|| panic!("unknown case {case:?}"));
    let raw = raw_keys(KEYS);
    let (growth, held) = if let Some(algorithm) = *algorithm {
        let keys: Vec<Key> = raw.iter().map(|k| Key::from(&k[..])).collect();
        drop(raw);
        let store = MemoryStore::new().max_keys(2 * KEYS).expect("valid bound");
        let quota = Quota::per_day(u64::from(LIMIT));
        let limiter = Limiter::builder()
            .limit(
                Limit::new("bench", quota)
                    .expect("valid policy")
                    .algorithm(algorithm),
            )
            .store(store.clone())
            .build()
            .expect("valid limiter");
        let before = rss_bytes();
        for key in &keys {
            let decision = now_or_never(limiter.check("bench", key, 1)).expect("memory store");
            assert!(decision.allowed);
        }
        let after = rss_bytes();
        black_box(&limiter);
        (after.saturating_sub(before), store.len())
    } else {
        let period = Duration::from_secs(86_400) / LIMIT;
        let burst = NonZeroU32::new(LIMIT).expect("non-zero");
        let quota = governor::Quota::with_period(period)
            .expect("non-zero period")
            .allow_burst(burst);
        let limiter: DefaultKeyedRateLimiter<[u8; 16]> = RateLimiter::keyed(quota);
        let before = rss_bytes();
        for key in &raw {
            assert!(limiter.check_key(key).is_ok());
        }
        let after = rss_bytes();
        (after.saturating_sub(before), limiter.len())
    };
    println!("{growth} {held}");
}

/// The two allocator settings each case is measured under: glibc's defaults (what a
/// process shows), and a fixed 128 KiB mmap threshold, which returns every freed large
/// block (old hash tables left behind by growth) to the system, so what remains is
/// close to the live tables alone.
const MALLOC_MODES: [(&str, Option<&str>); 2] =
    [("default malloc", None), ("mmap ≥128 KiB", Some("131072"))];

/// Parent side: runs one case in a fresh process, returns bytes per key held.
fn run_child(case: &str, mmap_threshold: Option<&str>) -> f64 {
    let exe = std::env::current_exe().expect("path of this binary");
    let mut command = Command::new(exe);
    command
        .env(CASE_VAR, case)
        .env_remove("MALLOC_MMAP_THRESHOLD_");
    if let Some(threshold) = mmap_threshold {
        command.env("MALLOC_MMAP_THRESHOLD_", threshold);
    }
    let output = command.output().expect("spawn measurement child");
    assert!(
        output.status.success(),
        "{case}: child failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut fields = stdout.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(growth)), Some(Ok(held))) = (fields.next(), fields.next()) else {
        panic!("{case}: unexpected child output {stdout:?}");
    };
    assert_eq!(
        held, KEYS as u64,
        "{case}: limiter holds {held} keys, not {KEYS}"
    );
    growth as f64 / held as f64
}

/// The median of `RUNS` fresh processes, and every run, for one case and mode.
fn median_of_runs(case: &str, mmap_threshold: Option<&str>) -> (f64, Vec<f64>) {
    let mut runs: Vec<f64> = (0..RUNS).map(|_| run_child(case, mmap_threshold)).collect();
    runs.sort_by(f64::total_cmp);
    (runs[RUNS / 2], runs)
}

fn main() {
    if let Ok(case) = std::env::var(CASE_VAR) {
        measure(&case);
        return;
    }
    println!("resident bytes per key, {KEYS} keys of 16 bytes, median of {RUNS} fresh processes");
    for (mode, threshold) in MALLOC_MODES {
        println!();
        println!(
            "{:<24} {:>10} {:>11}   runs ({mode})",
            "limiter", "bytes/key", "÷ governor"
        );
        let results: Vec<(&str, f64, Vec<f64>)> = CASES
            .iter()
            .map(|&(case, _)| {
                let (median, runs) = median_of_runs(case, threshold);
                (case, median, runs)
            })
            .collect();
        let governor = results
            .iter()
            .find(|(case, _, _)| *case == "governor")
            .map_or(f64::NAN, |&(_, median, _)| median);
        for (case, median, runs) in results {
            let shown: Vec<String> = runs.iter().map(|r| format!("{r:.1}")).collect();
            println!(
                "{case:<24} {median:>10.1} {:>10.2}×   [{}]",
                median / governor,
                shown.join(", ")
            );
        }
    }
}
