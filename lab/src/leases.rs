//! The lease mode: the same patterns decided by several processes, each with its own
//! [`LeasedStore`] over one shared store, against the same algorithm in one process
//! without leases.
//!
//! Arrivals go to the processes in turn (a round-robin load balancer). Every process
//! returns its expired leases every 250 ms (the default longest lease), as a periodic
//! task of a real service would. What is measured: whether the admissions still keep
//! the algorithm's documented bound (they must: leases never admit what the quota did
//! not cover), what the leases cost in admissions (units parked in one process's lease
//! are not available to the others), and how many store calls they save.

use std::fmt::{self, Write as _};
use std::time::Duration;

use super::measures::{admitted_times, max_in_window, respects_fluid_bound};
use super::table::label;
use super::{Lab, LabError, Measures, Pattern, ideal, runtime};
use tollgate::store::LeasedStore;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore};

/// How often each simulated process returns its expired leases (the default longest
/// lease).
const SWEEP_US: u64 = 250_000;

/// One algorithm on one pattern, with and without leases.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    /// The pattern's name.
    pub pattern: String,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// One process, no leases: the lab's own replay.
    pub plain: Measures,
    /// `processes` processes with leases.
    pub leased: Measures,
    /// Whether the leased admissions keep the algorithm's documented bound.
    pub within_bound: bool,
    /// Store calls the leased processes made (charges and returns).
    pub store_calls: u64,
}

impl LeaseRow {
    /// What leases cost: requests admitted without leases but not with them, net, as a
    /// share of those admitted without (0 when leases admitted as many or more).
    pub fn under_admission(&self) -> f64 {
        self.plain.admitted.saturating_sub(self.leased.admitted) as f64
            / self.plain.admitted.max(1) as f64
    }

    /// Store calls per decision with leases (1 without).
    pub fn calls_per_decision(&self) -> f64 {
        self.store_calls as f64 / self.leased.requests.max(1) as f64
    }
}

/// Every pattern through every algorithm, with and without leases.
#[derive(Debug, Clone)]
pub struct LeaseReport {
    /// The lab that ran.
    pub quota: tollgate::Quota,
    /// Simulated processes.
    pub processes: usize,
    /// Per pattern, then per algorithm, in the lab's order.
    pub rows: Vec<LeaseRow>,
}

/// One algorithm over every pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSummary {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Admitted without leases, over every pattern.
    pub plain_admitted: u64,
    /// Admitted with leases, over every pattern.
    pub leased_admitted: u64,
    /// The worst window over `L` without leases.
    pub plain_worst_ratio: f64,
    /// The worst window over `L` with leases.
    pub leased_worst_ratio: f64,
    /// Whether every pattern kept the documented bound with leases.
    pub within_bound: bool,
    /// Store calls per decision with leases, over every pattern.
    pub calls_per_decision: f64,
}

impl LeaseReport {
    /// One row per algorithm, over every pattern.
    pub fn summary(&self) -> Vec<LeaseSummary> {
        let mut out: Vec<LeaseSummary> = Vec::new();
        let mut decisions: Vec<u64> = Vec::new();
        let mut calls: Vec<u64> = Vec::new();
        for row in &self.rows {
            let i = if let Some(i) = out.iter().position(|s| s.algorithm == row.algorithm) {
                i
            } else {
                out.push(LeaseSummary {
                    algorithm: row.algorithm,
                    plain_admitted: 0,
                    leased_admitted: 0,
                    plain_worst_ratio: 0.0,
                    leased_worst_ratio: 0.0,
                    within_bound: true,
                    calls_per_decision: 0.0,
                });
                decisions.push(0);
                calls.push(0);
                out.len() - 1
            };
            let s = &mut out[i];
            s.plain_admitted += row.plain.admitted;
            s.leased_admitted += row.leased.admitted;
            s.plain_worst_ratio = s.plain_worst_ratio.max(row.plain.max_ratio);
            s.leased_worst_ratio = s.leased_worst_ratio.max(row.leased.max_ratio);
            s.within_bound &= row.within_bound;
            decisions[i] += row.leased.requests;
            calls[i] += row.store_calls;
            s.calls_per_decision = calls[i] as f64 / decisions[i].max(1) as f64;
        }
        out
    }

    /// The summary as a Markdown table.
    ///
    /// ```
    /// use tollgate::Quota;
    /// let report = tollgate_lab::Lab::new(Quota::per_second(10)).periods(2).run_leases(4)?;
    /// assert!(report.summary_table().contains("| gcra |"));
    /// # Ok::<(), tollgate_lab::LabError>(())
    /// ```
    pub fn summary_table(&self) -> String {
        let mut out = String::from(
            "| algorithm | admitted without leases | with leases | under-admission | \
             worst window / L (without / with) | within its bound | store calls per decision |\n\
             |---|---|---|---|---|---|---|\n",
        );
        for s in self.summary() {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2}% | {:.2} / {:.2} | {} | {:.3} |",
                label(s.algorithm),
                s.plain_admitted,
                s.leased_admitted,
                s.plain_admitted.saturating_sub(s.leased_admitted) as f64 * 100.0
                    / s.plain_admitted.max(1) as f64,
                s.plain_worst_ratio,
                s.leased_worst_ratio,
                if s.within_bound { "yes" } else { "NO" },
                s.calls_per_decision,
            );
        }
        out
    }
}

/// Every pattern's rows, then the summary.
impl fmt::Display for LeaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Leases: {} processes with a LeasedStore each over one store, quota {}.\n",
            self.processes, self.quota
        )?;
        writeln!(
            f,
            "| pattern | algorithm | admitted without / with leases | under-admission | \
             worst window / L (without / with) | within its bound | store calls per decision |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|")?;
        for row in &self.rows {
            writeln!(
                f,
                "| {} | {} | {} / {} | {:.2}% | {:.2} / {:.2} | {} | {:.3} |",
                row.pattern,
                label(row.algorithm),
                row.plain.admitted,
                row.leased.admitted,
                row.under_admission() * 100.0,
                row.plain.max_ratio,
                row.leased.max_ratio,
                if row.within_bound { "yes" } else { "NO" },
                row.calls_per_decision(),
            )?;
        }
        writeln!(f, "\n### Leases: summary over all patterns\n")?;
        f.write_str(&self.summary_table())
    }
}

/// Whether admissions `times` (µs since an instant aligned to the period) keep the
/// documented bound of `algorithm` at `limit`/`burst` per `period_us`.
pub(super) fn respects_bound(
    algorithm: Algorithm,
    times: &[u64],
    (limit, burst, period_us): (u64, u64, u64),
) -> bool {
    let most_per = |span: u64, count: u64| {
        let mut sums = std::collections::BTreeMap::<u64, u64>::new();
        for &t in times {
            *sums.entry(t / span.max(1)).or_default() += 1;
        }
        sums.keys()
            .map(|&first| {
                sums.range(first..first + count)
                    .map(|(_, c)| c)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    };
    match algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow => most_per(period_us, 1) <= limit,
        Algorithm::SlidingWindowCounters { buckets } => {
            most_per(period_us / u64::from(buckets), u64::from(buckets)) <= limit
        }
        Algorithm::SlidingWindowLog => max_in_window(times, period_us) <= limit,
        _ => respects_fluid_bound(times, limit, burst, period_us),
    }
}

impl Lab {
    /// Replays `pattern` through `algorithm` decided by `processes` processes, each a
    /// [`LeasedStore`] over one shared [`MemoryStore`] on the lab's clock; arrivals go
    /// to the processes in turn. Returns one decision per arrival and the store calls.
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_lab::{Lab, Pattern};
    /// let lab = Lab::new(Quota::per_second(100));
    /// let steady = Pattern::steady(&lab.quota(), 2, 0.5, 1);
    /// let (admitted, calls) = lab.trace_leased(&steady, Algorithm::FixedWindow, 2)?;
    /// assert!(admitted.iter().all(|&a| a));
    /// assert!(calls < admitted.len() as u64);
    /// # Ok::<(), tollgate_lab::LabError>(())
    /// ```
    pub fn trace_leased(
        &self,
        pattern: &Pattern,
        algorithm: Algorithm,
        processes: usize,
    ) -> Result<(Vec<bool>, u64), LabError> {
        let processes = processes.max(1);
        let shared = MemoryStore::with_clock(self.clock.clone());
        let limit = Limit::new("lab", self.quota_for(algorithm)?)?.algorithm(algorithm);
        let stores = (0..processes)
            .map(|_| {
                Ok(LeasedStore::builder(shared.clone())
                    .clock(self.clock.clone())
                    .processes(processes as u64)?
                    .build())
            })
            .collect::<Result<Vec<_>, LabError>>()?;
        let limiters = stores
            .iter()
            .map(|store| {
                Limiter::builder()
                    .limit(limit.clone())
                    .store(store.clone())
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let keys: Vec<Key> = (0..u64::from(pattern.keys())).map(Key::from).collect();
        let start = self.start();
        let admitted = runtime()?.block_on(async {
            let mut admitted = Vec::with_capacity(pattern.arrivals().len());
            let mut sweep_at = 0;
            for (i, arrival) in pattern.arrivals().iter().enumerate() {
                self.clock.set(start + Duration::from_micros(arrival.at_us));
                if arrival.at_us >= sweep_at {
                    for store in &stores {
                        store.release_expired().await?;
                    }
                    sweep_at = arrival.at_us + SWEEP_US;
                }
                let limiter = &limiters[i % processes];
                let decision = limiter.check("lab", &keys[arrival.key as usize], 1).await?;
                admitted.push(decision.allowed);
            }
            Ok::<_, LabError>(admitted)
        })?;
        Ok((admitted, stores.iter().map(LeasedStore::store_calls).sum()))
    }

    /// Runs every pattern through every algorithm twice: in one process without leases,
    /// and in `processes` processes with leases (see [`Lab::trace_leased`]).
    ///
    /// ```
    /// use tollgate::Quota;
    /// let report = tollgate_lab::Lab::new(Quota::per_second(10)).periods(2).run_leases(4)?;
    /// assert!(report.rows.iter().all(|row| row.within_bound));
    /// # Ok::<(), tollgate_lab::LabError>(())
    /// ```
    pub fn run_leases(&self, processes: usize) -> Result<LeaseReport, LabError> {
        let (limit, period) = (self.quota.limit(), self.period_us());
        let mut rows = Vec::new();
        for pattern in self.patterns() {
            let ideal = ideal(&pattern, limit, period);
            for &algorithm in &self.algorithms {
                let plain = self.trace(&pattern, algorithm)?;
                let (leased, store_calls) = self.trace_leased(&pattern, algorithm, processes)?;
                let burst = self.quota_for(algorithm)?.burst();
                let within_bound = admitted_times(&pattern, &leased)
                    .iter()
                    .all(|times| respects_bound(algorithm, times, (limit, burst, period)));
                rows.push(LeaseRow {
                    pattern: pattern.name().to_owned(),
                    algorithm,
                    plain: Measures::of(&pattern, limit, period, &plain.admitted, &ideal),
                    leased: Measures::of(&pattern, limit, period, &leased, &ideal),
                    within_bound,
                    store_calls,
                });
            }
        }
        Ok(LeaseReport {
            quota: self.quota,
            processes: processes.max(1),
            rows,
        })
    }
}
