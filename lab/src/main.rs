//! The accuracy lab: replays seeded traffic patterns through all seven algorithms at
//! 100 per minute, prints what each let through next to the ideal sliding window, and
//! writes the charts (PNG and SVG) to `target/lab/`. Then the lease mode: the same
//! patterns decided by four processes with a `LeasedStore` each over one memory store
//! (what leases cost in admissions, the calls they save, and that every bound holds),
//! with its chart `leases.png`/`.svg`.
//!
//! Run from the repository's root with: `cargo run --release -p tollgate-lab`
//!
//! Options: `--quota "20/s"` (any quota notation), `--periods N` (pattern length in
//! periods, default 10), `--seed N` (default 42), `--out DIR` (default `target/lab`),
//! `--redis URL` (replay on a Redis store instead of memory; needs `--features redis`),
//! `--processes N` (processes of the lease mode, default 4).

use std::path::PathBuf;
use std::time::Instant;

use tollgate::Quota;
use tollgate_lab::{Lab, LabError, Report, plot};

struct Options {
    quota: Quota,
    periods: u32,
    seed: u64,
    out: PathBuf,
    redis: Option<String>,
    processes: usize,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        quota: Quota::per_minute(100),
        periods: 10,
        seed: 42,
        out: PathBuf::from("target/lab"),
        redis: None,
        processes: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--quota" => options.quota = value.parse().map_err(|e| format!("{e}"))?,
            "--periods" => {
                options.periods = value.parse().map_err(|e| format!("--periods: {e}"))?;
            }
            "--seed" => options.seed = value.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => options.out = PathBuf::from(value),
            "--redis" => options.redis = Some(value),
            "--processes" => {
                options.processes = value.parse().map_err(|e| format!("--processes: {e}"))?;
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(options)
}

#[cfg(feature = "redis")]
fn run_on_redis(lab: &Lab, url: &str) -> Result<Report, Box<dyn std::error::Error>> {
    // A simulation has no latency budget: a generous deadline keeps a busy machine
    // from turning slow answers into errors.
    let store = tollgate::RedisStore::from_url(url)?
        .with_clock(lab.clock())
        .deadline(std::time::Duration::from_secs(5))?;
    // A prefix per replay: every run starts from empty state, and runs of several lab
    // processes never share keys. Keys expire by themselves (every key has a TTL).
    // Clones share the denial cache, whose entries do not depend on the prefix:
    // each replay gets a cache of its own, or one replay's blocks would leak into the
    // next (the clock starts over for each).
    let nonce = std::process::id();
    Ok(lab.run_on(|run| {
        store
            .clone()
            .prefix(&format!("tollgate-lab:{nonce}:{run}"))
            .denial_cache(tollgate::RedisStore::DEFAULT_DENIAL_CACHE_KEYS)
    })?)
}

#[cfg(not(feature = "redis"))]
fn run_on_redis(_lab: &Lab, _url: &str) -> Result<Report, Box<dyn std::error::Error>> {
    Err("--redis needs the redis feature: cargo run --release -p tollgate-lab --features redis -- --redis URL".into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    let lab = Lab::new(options.quota)
        .periods(options.periods)
        .seed(options.seed);
    let started = Instant::now();
    let (report, store) = match &options.redis {
        Some(url) => (run_on_redis(&lab, url)?, "redis"),
        None => (lab.run()?, "memory"),
    };
    let simulated = started.elapsed();
    println!("{report}");
    let mut written =
        plot::write_all(&report, &options.out).map_err(|e: LabError| e.to_string())?;
    let leases = lab.run_leases(options.processes)?;
    println!("\n{leases}");
    written.extend(plot::lease_chart(&leases, &options.out, "leases")?);
    println!(
        "\n{} decisions on the {store} store in {:.1} s; {} charts written to {}",
        report
            .patterns
            .iter()
            .map(|p| p.pattern.arrivals().len() * p.results.len())
            .sum::<usize>(),
        simulated.as_secs_f64(),
        written.len(),
        options.out.display()
    );
    Ok(())
}
