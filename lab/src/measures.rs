//! What an algorithm let through, measured against the quota and the ideal limiter.
//!
//! Every measure works on admission instants per client, in microseconds since the
//! pattern's start. A *window* is a half-open interval `(t − P, t]`, the interval a
//! sliding-window limiter deciding at `t` looks at; "every window" means every `t`.

use std::collections::VecDeque;

use super::patterns::Pattern;

/// The ideal limiter's decisions for `pattern`: the exact sliding log with the same
/// quota, replaying the same arrivals.
///
/// A request of client `k` arriving at `t` is admitted if and only if fewer than
/// `limit` of `k`'s requests admitted *by the ideal limiter itself* arrived in
/// `(t − period, t]`. It is what [`Algorithm::SlidingWindowLog`](tollgate::Algorithm::SlidingWindowLog)
/// decides, written again here independently so the two check each other.
///
/// ```
/// use tollgate::Quota;
/// use tollgate_lab::{Pattern, ideal};
/// let quota = Quota::per_minute(100);
/// let attack = Pattern::boundary_attack(&quota, 2);
/// let admitted = ideal(&attack, quota.limit(), 60_000_000);
/// // The first burst fits; the second, one second later, does not.
/// assert_eq!(admitted.iter().filter(|&&a| a).count(), 100);
/// ```
pub fn ideal(pattern: &Pattern, limit: u64, period_us: u64) -> Vec<bool> {
    let mut logs: Vec<VecDeque<u64>> = vec![VecDeque::new(); pattern.keys() as usize];
    pattern
        .arrivals()
        .iter()
        .map(|arrival| {
            let log = &mut logs[arrival.key as usize];
            while log
                .front()
                .is_some_and(|&at| at + period_us <= arrival.at_us)
            {
                log.pop_front();
            }
            let admit = (log.len() as u64) < limit;
            if admit {
                log.push_back(arrival.at_us);
            }
            admit
        })
        .collect()
}

/// Judges each decision by the exact rule applied to the algorithm's *own* history:
/// returns how many requests were admitted although the client's window `(t − P, t]`
/// already held `limit` of its admissions (each one pushes that window over the quota),
/// and how many were rejected although it held fewer (the exact rule had room).
///
/// Unlike the comparison with [`ideal`], an early difference does not carry over into
/// later decisions: this counts each decision's own mistake.
///
/// ```
/// use tollgate_lab::{Arrival, Pattern, judge_locally};
/// let p = Pattern::custom("three", "", 100, 1, vec![Arrival { at_us: 0, key: 0 }; 3]);
/// // Limit 2: admitting the third overshoots.
/// assert_eq!(judge_locally(&p, 2, 50, &[true, true, true]), (1, 0));
/// // Rejecting the second was wrong: the window held one admission.
/// assert_eq!(judge_locally(&p, 2, 50, &[true, false, true]), (0, 1));
/// ```
pub fn judge_locally(
    pattern: &Pattern,
    limit: u64,
    period_us: u64,
    admitted: &[bool],
) -> (u64, u64) {
    let mut logs: Vec<VecDeque<u64>> = vec![VecDeque::new(); pattern.keys() as usize];
    let (mut over, mut room) = (0, 0);
    for (arrival, &ok) in pattern.arrivals().iter().zip(admitted) {
        let log = &mut logs[arrival.key as usize];
        while log
            .front()
            .is_some_and(|&at| at + period_us <= arrival.at_us)
        {
            log.pop_front();
        }
        let full = log.len() as u64 >= limit;
        match (ok, full) {
            (true, true) => over += 1,
            (false, false) => room += 1,
            _ => {}
        }
        if ok {
            log.push_back(arrival.at_us);
        }
    }
    (over, room)
}

/// The admission instants of each client, from a pattern and one decision per arrival.
///
/// ```
/// use tollgate::Quota;
/// use tollgate_lab::{Pattern, admitted_times};
/// let p = Pattern::steady(&Quota::per_minute(2), 1, 1.0, 0);
/// let times = admitted_times(&p, &[true, false]);
/// assert_eq!(times[0].len(), 1);
/// ```
pub fn admitted_times(pattern: &Pattern, admitted: &[bool]) -> Vec<Vec<u64>> {
    let mut times = vec![Vec::new(); pattern.keys() as usize];
    for (arrival, &ok) in pattern.arrivals().iter().zip(admitted) {
        if ok {
            times[arrival.key as usize].push(arrival.at_us);
        }
    }
    times
}

/// Admissions in the window `(t − period, t]`, given sorted admission instants.
///
/// ```
/// assert_eq!(tollgate_lab::window_count(&[0, 10, 20], 20, 15), 2);
/// ```
pub fn window_count(times: &[u64], t: u64, period_us: u64) -> u64 {
    let upto = times.partition_point(|&a| a <= t);
    let before = times.partition_point(|&a| a + period_us <= t);
    (upto - before) as u64
}

/// The most admissions in any window of length `period` (sorted instants).
///
/// ```
/// assert_eq!(tollgate_lab::max_in_window(&[0, 5, 10, 30], 11), 3);
/// ```
pub fn max_in_window(times: &[u64], period_us: u64) -> u64 {
    // The count of (t − P, t] only rises at admissions, so the maximum is reached at
    // one: for each admission, count those less than P before it.
    let mut oldest = 0;
    let mut best = 0;
    for (newest, &t) in times.iter().enumerate() {
        while times[oldest] + period_us <= t {
            oldest += 1;
        }
        best = best.max(newest + 1 - oldest);
    }
    best as u64
}

/// How long (µs) the window count stays above `limit`, over windows ending in
/// `[0, duration)`.
///
/// ```
/// // Three admissions at 0, 1, 2 with limit 2 and P = 10: over from 2 until 10.
/// assert_eq!(tollgate_lab::time_over_quota(&[0, 1, 2], 2, 10, 100), 8);
/// ```
pub fn time_over_quota(times: &[u64], limit: u64, period_us: u64, duration_us: u64) -> u64 {
    // Sweep the instants where the count changes: +1 at an admission, −1 one period
    // later. Both lists are sorted, so merge them.
    let (mut enter, mut leave) = (0, 0);
    let mut count: u64 = 0;
    let mut over = 0;
    let mut since = 0;
    while enter < times.len() || leave < times.len() {
        let next_enter = times.get(enter).copied().unwrap_or(u64::MAX);
        let next_leave = times[leave] + period_us;
        // Leaving first at equal instants: an admission exactly P earlier is out of
        // the window (t − P, t].
        let at = next_enter.min(next_leave).min(duration_us);
        if count > limit {
            over += at.saturating_sub(since);
        }
        since = at;
        if at >= duration_us {
            break;
        }
        if next_leave <= next_enter {
            leave += 1;
            count -= 1;
        } else {
            enter += 1;
            count += 1;
        }
    }
    over
}

/// The largest burst seen: the most that any interval `[a, b]` admitted beyond the
/// fluid allowance `L·(b − a)/P`. A fluid limiter (token bucket, GCRA, leaky bucket)
/// with burst `B` never exceeds `B`; a window algorithm can reach about `2L`.
///
/// ```
/// // Two admissions at the same instant, nothing else: a burst of 2.
/// assert_eq!(tollgate_lab::largest_burst(&[5, 5], 100, 60_000_000), 2.0);
/// ```
pub fn largest_burst(times: &[u64], limit: u64, period_us: u64) -> f64 {
    // With g(k) = k·P − L·t_k, the excess of [t_i, t_j] is (g(j) − g(i))/P + 1.
    let mut lowest = i128::MAX;
    let mut best = i128::MIN;
    for (k, &t) in times.iter().enumerate() {
        let g = k as i128 * i128::from(period_us) - i128::from(limit) * i128::from(t);
        lowest = lowest.min(g);
        best = best.max(g - lowest);
    }
    if times.is_empty() {
        0.0
    } else {
        best as f64 / period_us as f64 + 1.0
    }
}

/// Whether `times` respects the fluid bound `burst + limit·t/period` in every interval
/// of every length `t`, in exact integer arithmetic.
///
/// ```
/// use tollgate_lab::respects_fluid_bound;
/// // 10 per second, burst 2: two at once, then one each 100 ms.
/// assert!(respects_fluid_bound(&[0, 0, 100_000, 200_000], 10, 2, 1_000_000));
/// assert!(!respects_fluid_bound(&[0, 0, 0], 10, 2, 1_000_000));
/// ```
pub fn respects_fluid_bound(times: &[u64], limit: u64, burst: u64, period_us: u64) -> bool {
    let mut lowest = i128::MAX;
    for (k, &t) in times.iter().enumerate() {
        let g = k as i128 * i128::from(period_us) - i128::from(limit) * i128::from(t);
        lowest = lowest.min(g);
        // count − L·Δt/P ≤ B  ⇔  g(j) − g(i) + P ≤ B·P
        if g - lowest + i128::from(period_us) > i128::from(burst) * i128::from(period_us) {
            return false;
        }
    }
    true
}

/// Every measure of one algorithm on one pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measures {
    /// Requests in the pattern.
    pub requests: u64,
    /// Requests the algorithm admitted.
    pub admitted: u64,
    /// Requests the ideal limiter admitted.
    pub ideal_admitted: u64,
    /// The most any client had admitted in one window of length `P`.
    pub max_window: u64,
    /// `max_window / L`.
    pub max_ratio: f64,
    /// Share of time, averaged over the clients that sent anything, during which a
    /// client's window count was above `L`.
    pub time_over_quota: f64,
    /// Admitted by the algorithm, rejected by the ideal limiter.
    pub wrongly_admitted: u64,
    /// Rejected by the algorithm, admitted by the ideal limiter.
    pub wrongly_rejected: u64,
    /// Admitted although the client's own window already held `L` (see
    /// [`judge_locally`]).
    pub admitted_over_quota: u64,
    /// Rejected although the client's own window held fewer than `L` (see
    /// [`judge_locally`]).
    pub rejected_with_room: u64,
    /// The largest burst any client got (see [`largest_burst`]).
    pub largest_burst: f64,
}

impl Measures {
    /// Measures `admitted` (one decision per arrival) against `ideal` on `pattern`.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_lab::{Measures, Pattern, ideal};
    /// let quota = Quota::per_minute(100);
    /// let p = Pattern::boundary_attack(&quota, 2);
    /// let everything = vec![true; p.arrivals().len()];
    /// let m = Measures::of(&p, 100, 60_000_000, &everything, &ideal(&p, 100, 60_000_000));
    /// assert_eq!((m.max_ratio, m.wrongly_admitted, m.wrongly_rejected), (2.0, 100, 0));
    /// ```
    pub fn of(
        pattern: &Pattern,
        limit: u64,
        period_us: u64,
        admitted: &[bool],
        ideal: &[bool],
    ) -> Self {
        let count = |v: &[bool]| v.iter().filter(|&&a| a).count() as u64;
        let (mut wrongly_admitted, mut wrongly_rejected) = (0, 0);
        for (&a, &i) in admitted.iter().zip(ideal) {
            match (a, i) {
                (true, false) => wrongly_admitted += 1,
                (false, true) => wrongly_rejected += 1,
                _ => {}
            }
        }
        let mut senders = vec![false; pattern.keys() as usize];
        for arrival in pattern.arrivals() {
            senders[arrival.key as usize] = true;
        }
        let active = senders.iter().filter(|&&s| s).count().max(1);
        let (mut max_window, mut over, mut burst) = (0, 0u128, 0.0f64);
        for times in admitted_times(pattern, admitted) {
            max_window = max_window.max(max_in_window(&times, period_us));
            over += u128::from(time_over_quota(
                &times,
                limit,
                period_us,
                pattern.duration_us(),
            ));
            burst = burst.max(largest_burst(&times, limit, period_us));
        }
        let (admitted_over_quota, rejected_with_room) =
            judge_locally(pattern, limit, period_us, admitted);
        Self {
            requests: pattern.arrivals().len() as u64,
            admitted: count(admitted),
            ideal_admitted: count(ideal),
            max_window,
            max_ratio: max_window as f64 / limit as f64,
            time_over_quota: over as f64 / (active as f64 * pattern.duration_us().max(1) as f64),
            wrongly_admitted,
            wrongly_rejected,
            admitted_over_quota,
            rejected_with_room,
            largest_burst: burst,
        }
    }

    /// Wrongly admitted requests as a share of all requests.
    pub fn wrongly_admitted_share(&self) -> f64 {
        self.wrongly_admitted as f64 / self.requests.max(1) as f64
    }

    /// Wrongly rejected requests as a share of all requests.
    pub fn wrongly_rejected_share(&self) -> f64 {
        self.wrongly_rejected as f64 / self.requests.max(1) as f64
    }

    /// [`admitted_over_quota`](Measures::admitted_over_quota) plus
    /// [`rejected_with_room`](Measures::rejected_with_room), as a share of all requests:
    /// the share of decisions the exact rule would have taken the other way.
    pub fn locally_wrong_share(&self) -> f64 {
        (self.admitted_over_quota + self.rejected_with_room) as f64 / self.requests.max(1) as f64
    }
}
