//! The reference model: what each algorithm may admit (DESIGN.md §3, the algorithms
//! table), computed from the admissions the model saw, and the penalty box's rule.

use tollgate::Algorithm;

/// One admission a served request left standing under one enforced policy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admission {
    /// The instant it counts at (µs): its decision's, plus its delay (a held turn, a
    /// reserved place).
    pub(crate) at_us: u64,
    /// What it still counts for: its cost, its settled actual or its bytes; 0 when
    /// given back (`count_when`).
    pub(crate) units: u64,
    /// How far its actual went beyond its estimate (charged after the fact).
    pub(crate) overshoot: u64,
    /// The step it came from: requests of one burst share one.
    pub(crate) group: u64,
    /// Its response stayed open across later steps (settled late).
    pub(crate) lingering: bool,
    /// The quota it was decided under (a plan's, or the policy's).
    pub(crate) limit: u64,
    pub(crate) burst: u64,
    pub(crate) period_us: u64,
    /// How much later than `at_us` it may count (a byte limit's frames wait for
    /// their place up to the policy's wait).
    pub(crate) spread_us: u64,
}

/// What a metered overshoot may add to a span: the settle of a request lands after the
/// next decisions only when it runs concurrently with them (one burst, a lingering
/// response), or — `loose` — whenever settles run in the background (remote stores).
fn allowance(span: &[&Admission], loose: bool) -> u64 {
    if loose {
        return span.iter().map(|a| a.overshoot).sum();
    }
    let lingering: u64 = span
        .iter()
        .filter(|a| a.lingering)
        .map(|a| a.overshoot)
        .sum();
    let mut groups: Vec<(u64, u64)> = Vec::new();
    for a in span.iter().filter(|a| !a.lingering) {
        match groups.iter_mut().find(|(g, _)| *g == a.group) {
            Some((_, sum)) => *sum += a.overshoot,
            None => groups.push((a.group, a.overshoot)),
        }
    }
    lingering + groups.iter().map(|(_, sum)| *sum).max().unwrap_or(0)
}

fn total(span: &[&Admission]) -> u64 {
    span.iter().map(|a| a.units).sum()
}

/// Checks one policy's admissions for one key in one segment (no reset, no reload in
/// between) against the algorithm's bound; the first span that breaks it, described.
pub(crate) fn check(algorithm: Algorithm, admissions: &[Admission], loose: bool) -> Option<String> {
    // A change of period starts fresh state: each period is its own account.
    let mut periods: Vec<u64> = admissions.iter().map(|a| a.period_us).collect();
    periods.sort_unstable();
    periods.dedup();
    for period in periods {
        let mut of: Vec<&Admission> = admissions
            .iter()
            .filter(|a| a.period_us == period && a.units > 0)
            .collect();
        of.sort_by_key(|a| a.at_us);
        let limit = of.iter().map(|a| a.limit).max().unwrap_or(0);
        let burst = of.iter().map(|a| a.burst).max().unwrap_or(0);
        if let Some(broken) = check_period(algorithm, &of, period, limit, burst, loose) {
            return Some(broken);
        }
    }
    None
}

/// Whether an admission counted in slots `first..=last` (of `slot` µs) may have
/// counted outside them (its frames placed later): its span is then not checked.
fn straddles(of: &[&Admission], slot: u64, first: u64, last: u64) -> bool {
    of.iter().any(|a| {
        let (from, to) = (a.at_us / slot, (a.at_us + a.spread_us) / slot);
        from != to && ((first..=last).contains(&from) || (first..=last).contains(&to))
    })
}

fn check_period(
    algorithm: Algorithm,
    of: &[&Admission],
    period: u64,
    limit: u64,
    burst: u64,
    loose: bool,
) -> Option<String> {
    let over = |span: &[&Admission], bound: u64, what: &str| -> Option<String> {
        let admitted = total(span);
        let bound = bound + allowance(span, loose);
        (admitted > bound).then(|| {
            format!(
                "{algorithm:?} admitted {admitted} units {what} where its bound is {bound} \
                 (limit {limit}, burst {burst}, period {period} µs); admissions (µs, units): {:?}",
                span.iter().map(|a| (a.at_us, a.units)).collect::<Vec<_>>()
            )
        })
    };
    match algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow => {
            for a in of {
                let w = a.at_us / period;
                if straddles(of, period, w, w) {
                    continue;
                }
                let span: Vec<&Admission> = of
                    .iter()
                    .copied()
                    .filter(|b| b.at_us / period == w)
                    .collect();
                if let Some(broken) = over(&span, limit, &format!("in window {w}")) {
                    return Some(broken);
                }
            }
        }
        Algorithm::SlidingWindowCounters { buckets } => {
            let sub = period / u64::from(buckets);
            for a in of {
                let first = a.at_us / sub;
                let last = first + u64::from(buckets) - 1;
                if straddles(of, sub, first, last) {
                    continue;
                }
                let span: Vec<&Admission> = of
                    .iter()
                    .copied()
                    .filter(|b| (first..=last).contains(&(b.at_us / sub)))
                    .collect();
                if let Some(broken) =
                    over(&span, limit, &format!("in sub-windows {first}..={last}"))
                {
                    return Some(broken);
                }
            }
        }
        Algorithm::SlidingWindowLog => {
            for a in of {
                let spread = of.iter().map(|b| b.spread_us).max().unwrap_or(0);
                let span: Vec<&Admission> = of
                    .iter()
                    .copied()
                    .filter(|b| {
                        !std::ptr::eq(*b, *a)
                            && b.at_us >= a.at_us + spread
                            && b.at_us + spread < a.at_us + period
                    })
                    .chain(std::iter::once(*a))
                    .collect();
                if let Some(broken) =
                    over(&span, limit, &format!("in the period from {} µs", a.at_us))
                {
                    return Some(broken);
                }
            }
        }
        _ => {
            // Token bucket, GCRA, leaky bucket: B + L·t/P over any stretch t.
            for (i, a) in of.iter().enumerate() {
                for b in &of[i..] {
                    let span: Vec<&Admission> = of
                        .iter()
                        .copied()
                        .filter(|c| c.at_us >= a.at_us && c.at_us <= b.at_us)
                        .collect();
                    let stretch =
                        b.at_us - a.at_us + span.iter().map(|c| c.spread_us).max().unwrap_or(0);
                    let refill = (u128::from(stretch) * u128::from(limit))
                        .div_ceil(u128::from(period)) as u64;
                    if let Some(broken) = over(
                        &span,
                        burst + refill,
                        &format!("from {} µs to {} µs", a.at_us, b.at_us),
                    ) {
                        return Some(broken);
                    }
                }
            }
        }
    }
    None
}

/// A penalty box as the model keeps it, for one policy and one key.
#[derive(Debug, Default, Clone)]
pub(crate) struct BoxModel {
    /// Rejections that count towards the next trip.
    pub(crate) counted: u32,
    /// Blocked (by a trip or an operator) until this instant (µs).
    pub(crate) blocked_until: Option<u64>,
    /// The model cannot know every rejection the store counted (a client left while
    /// its decision was on the way): its trip is not checked until a reset.
    pub(crate) uncertain: bool,
    /// This step answered a rejection as the trip's block.
    pub(crate) trip_seen: bool,
}
