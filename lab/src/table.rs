//! The report as Markdown tables: what the lab's binary prints and the docs page shows.

use std::fmt::{self, Write as _};

use super::{Measures, Report};
use tollgate::Algorithm;

/// A short label for tables and chart axes.
pub(crate) fn label(algorithm: Algorithm) -> String {
    match algorithm {
        Algorithm::SlidingWindowCounters { buckets } => format!("counters({buckets})"),
        Algorithm::FixedWindow => "fixed_window".to_owned(),
        Algorithm::SlidingWindow => "sliding_window".to_owned(),
        Algorithm::SlidingWindowLog => "sliding_log".to_owned(),
        other => other.name().to_owned(),
    }
}

fn percent(share: f64) -> String {
    if share == 0.0 {
        "0".to_owned()
    } else if share < 0.001 {
        format!("{:.4}%", share * 100.0)
    } else {
        format!("{:.2}%", share * 100.0)
    }
}

/// Decisions per second, in millions or (a network store) thousands.
fn rate(per_second: f64) -> String {
    if per_second >= 100_000.0 {
        format!("{:.2} M", per_second / 1e6)
    } else {
        format!("{:.1} k", per_second / 1e3)
    }
}

fn row(f: &mut fmt::Formatter<'_>, name: &str, m: &Measures) -> fmt::Result {
    writeln!(
        f,
        "| {name} | {} | {} | {:.2} | {:.1} | {} | {} | {} | {} | {} |",
        m.admitted,
        m.ideal_admitted,
        m.max_ratio,
        m.largest_burst,
        percent(m.time_over_quota),
        percent(m.wrongly_admitted_share()),
        percent(m.wrongly_rejected_share()),
        m.admitted_over_quota,
        m.rejected_with_room,
    )
}

impl Report {
    /// The summary table alone: one row per algorithm.
    ///
    /// ```
    /// use tollgate::Quota;
    /// let report = tollgate_lab::Lab::new(Quota::per_second(10)).periods(2).run()?;
    /// assert!(report.summary_table().contains("| gcra |"));
    /// # Ok::<(), tollgate_lab::LabError>(())
    /// ```
    pub fn summary_table(&self) -> String {
        let mut out = String::from(
            "| algorithm | burst at t=0 from idle | worst window / L | largest burst | \
             wrongly admitted | wrongly rejected | locally wrong | \
             state bytes per key (documented) | decisions/s |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.summary {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.1} | {} | {} | {} | {} | {} |",
                label(s.algorithm),
                s.burst_from_idle,
                s.worst_ratio,
                s.worst_burst,
                percent(s.wrongly_admitted),
                percent(s.wrongly_rejected),
                percent(s.locally_wrong),
                s.documented_bytes,
                rate(s.decisions_per_second),
            );
        }
        out
    }
}

/// Every pattern's table, then the summary.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Quota {}: L = {}.\n", self.quota, self.quota.limit())?;
        for p in &self.patterns {
            writeln!(
                f,
                "### {} ({} requests): {}\n",
                p.pattern.name(),
                p.pattern.arrivals().len(),
                p.pattern.description()
            )?;
            writeln!(
                f,
                "| algorithm | admitted | ideal admitted | worst window / L | largest burst | \
                 time over quota | wrongly admitted | wrongly rejected | admitted over quota | \
                 rejected with room |"
            )?;
            writeln!(f, "|---|---|---|---|---|---|---|---|---|---|")?;
            for (trace, m) in &p.results {
                row(f, &label(trace.algorithm), m)?;
            }
            writeln!(f)?;
        }
        writeln!(f, "### Summary over all patterns\n")?;
        f.write_str(&self.summary_table())
    }
}
