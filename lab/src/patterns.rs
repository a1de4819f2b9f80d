//! Seeded, reproducible traffic patterns: when each request arrives, and from whom.

use tollgate::Quota;

/// One request of a [`Pattern`]: when it arrives and which client sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Microseconds since the pattern's start.
    pub at_us: u64,
    /// The client (key) index, `0..Pattern::keys()`; 0 is the busiest client.
    pub key: u32,
}

/// A named sequence of arrivals, sorted by time.
///
/// Every constructor is deterministic: the same quota, length and seed give the same
/// arrivals on every machine, so the lab's figures are reproducible.
///
/// ```
/// use tollgate::Quota;
/// use tollgate_lab::Pattern;
///
/// let quota = Quota::per_minute(100);
/// let a = Pattern::poisson(&quota, 10, 1.0, 7);
/// assert_eq!(a, Pattern::poisson(&quota, 10, 1.0, 7));
/// // About 100 per minute over ten minutes.
/// assert!((900..1100).contains(&a.arrivals().len()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    name: String,
    description: String,
    duration_us: u64,
    keys: u32,
    arrivals: Vec<Arrival>,
}

impl Pattern {
    fn new(name: String, description: String, duration_us: u64, keys: u32) -> Self {
        Self {
            name,
            description,
            duration_us,
            keys,
            arrivals: Vec::new(),
        }
    }

    /// An empty pattern lasting `periods` periods of `quota`, with the period (µs) and
    /// the limit the generators space their arrivals by.
    fn begin(
        quota: &Quota,
        periods: u32,
        name: String,
        description: String,
        keys: u32,
    ) -> (Self, u64, u64) {
        let (period, limit) = period_and_limit(quota);
        let duration = period * u64::from(periods);
        (Self::new(name, description, duration, keys), period, limit)
    }

    fn push(&mut self, at_us: u64, key: u32) {
        if at_us < self.duration_us {
            self.arrivals.push(Arrival { at_us, key });
        }
    }

    /// Sorts arrivals by time; stable, so simultaneous arrivals keep their order.
    fn finish(mut self) -> Self {
        self.arrivals.sort_by_key(|a| a.at_us);
        self
    }

    /// Your own arrivals: `keys` clients over `duration_us`. Arrivals at or after the
    /// end, or from a client outside `0..keys`, are dropped; the rest are sorted.
    ///
    /// ```
    /// use tollgate_lab::{Arrival, Pattern};
    /// let p = Pattern::custom("pair", "two at once", 1_000, 1, vec![Arrival { at_us: 5, key: 0 }; 2]);
    /// assert_eq!(p.arrivals().len(), 2);
    /// ```
    pub fn custom(
        name: &str,
        description: &str,
        duration_us: u64,
        keys: u32,
        arrivals: Vec<Arrival>,
    ) -> Self {
        let mut p = Self::new(name.to_owned(), description.to_owned(), duration_us, keys);
        for a in arrivals.into_iter().filter(|a| a.key < keys) {
            p.push(a.at_us, a.key);
        }
        p.finish()
    }

    /// A short name, usable in file names (`steady-2x`, `boundary-attack`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One line saying what the pattern sends.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// How long the pattern lasts.
    pub fn duration_us(&self) -> u64 {
        self.duration_us
    }

    /// How many distinct clients send requests (`0..keys`).
    pub fn keys(&self) -> u32 {
        self.keys
    }

    /// The arrivals, sorted by time.
    pub fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }

    /// Evenly spaced requests from one client at `factor` times the quota's rate, with
    /// a seeded phase.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_lab::Pattern;
    /// let p = Pattern::steady(&Quota::per_minute(100), 10, 2.0, 1);
    /// assert_eq!(p.arrivals().len(), 2000);
    /// assert_eq!(p.name(), "steady-2x");
    /// ```
    pub fn steady(quota: &Quota, periods: u32, factor: f64, seed: u64) -> Self {
        let (mut p, period, limit) = Self::begin(
            quota,
            periods,
            format!("steady-{}x", trim(factor)),
            format!("one client, evenly spaced at {}× the limit", trim(factor)),
            1,
        );
        let gap = period as f64 / (limit as f64 * factor);
        let phase = Rng::new(seed).unit() * gap;
        let count = (p.duration_us() as f64 / gap) as u64;
        for i in 0..count {
            p.push((phase + i as f64 * gap) as u64, 0);
        }
        p.finish()
    }

    /// One client sending a Poisson stream at `factor` times the quota's rate.
    pub fn poisson(quota: &Quota, periods: u32, factor: f64, seed: u64) -> Self {
        let (mut p, period, limit) = Self::begin(
            quota,
            periods,
            format!("poisson-{}x", trim(factor)),
            format!(
                "one client, Poisson arrivals at {}× the limit",
                trim(factor)
            ),
            1,
        );
        let mean_gap = period as f64 / (limit as f64 * factor);
        let mut rng = Rng::new(seed);
        let mut t = rng.exponential(mean_gap);
        while t < p.duration_us() as f64 {
            p.push(t as u64, 0);
            t += rng.exponential(mean_gap);
        }
        p.finish()
    }

    /// On/off bursts: in every period, one quarter (at a seeded offset) of Poisson
    /// traffic at 4× the limit, silence for the rest; on average exactly the limit.
    pub fn on_off(quota: &Quota, periods: u32, seed: u64) -> Self {
        let (mut p, period, limit) = Self::begin(
            quota,
            periods,
            "on-off".to_owned(),
            "one client: a quarter of each period at 4× the limit, then silence".to_owned(),
            1,
        );
        let mut rng = Rng::new(seed);
        let on = period / 4;
        let mean_gap = period as f64 / (limit as f64 * 4.0);
        for cycle in 0..u64::from(periods) {
            let start = cycle * period + (rng.unit() * (period - on) as f64) as u64;
            let mut t = rng.exponential(mean_gap);
            while t < on as f64 {
                p.push(start + t as u64, 0);
                t += rng.exponential(mean_gap);
            }
        }
        p.finish()
    }

    /// The boundary attack: at every other window edge, a full quota spread over the
    /// last 1/100 of a period before the edge and another over the first 1/100 after
    /// it. Windows are aligned to the pattern's start (the lab starts on an edge).
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_lab::Pattern;
    /// let p = Pattern::boundary_attack(&Quota::per_minute(100), 4);
    /// // Edges at 1 and 3 minutes, 2 × 100 requests each.
    /// assert_eq!(p.arrivals().len(), 400);
    /// assert!(p.arrivals()[99].at_us < 60_000_000 && p.arrivals()[100].at_us >= 60_000_000);
    /// ```
    pub fn boundary_attack(quota: &Quota, periods: u32) -> Self {
        let (mut p, period, limit) = Self::begin(
            quota,
            periods,
            "boundary-attack".to_owned(),
            "one client: a full quota just before every other window edge, another just after"
                .to_owned(),
            1,
        );
        let spread = (period / 100).max(limit);
        for edge in (1..u64::from(periods)).step_by(2).map(|k| k * period) {
            for i in 0..limit {
                let offset = i * spread / limit;
                p.push(edge - spread + offset, 0);
            }
            for i in 0..limit {
                p.push(edge + i * spread / limit, 0);
            }
        }
        p.finish()
    }

    /// A slow ramp: one client whose rate grows linearly from 0 to 3× the limit over the
    /// whole run (deterministic spacing).
    pub fn ramp(quota: &Quota, periods: u32) -> Self {
        let (mut p, period, limit) = Self::begin(
            quota,
            periods,
            "ramp".to_owned(),
            "one client, rate rising linearly from 0 to 3× the limit".to_owned(),
            1,
        );
        // Requests so far at t: N(t) = 3L/P · t² / (2D), so the i-th arrives at
        // t = sqrt(2·D·P·i / (3L)).
        let duration = p.duration_us() as f64;
        let scale = 2.0 * duration * period as f64 / (3.0 * limit as f64);
        let total = (3.0 * limit as f64 * duration / (2.0 * period as f64)) as u64;
        for i in 1..=total {
            p.push((scale * i as f64).sqrt() as u64, 0);
        }
        p.finish()
    }

    /// Many clients: `keys` clients whose shares follow Zipf's law (exponent 1), sending
    /// a Poisson stream of 20× the limit in total. The busiest client sends about twice
    /// its quota; most send a handful of requests.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_lab::Pattern;
    /// let p = Pattern::many_clients(&Quota::per_minute(100), 10, 10_000, 3);
    /// let busiest = p.arrivals().iter().filter(|a| a.key == 0).count();
    /// assert!((1_600..2_500).contains(&busiest));
    /// ```
    pub fn many_clients(quota: &Quota, periods: u32, keys: u32, seed: u64) -> Self {
        let keys = keys.max(1);
        let (mut p, period, limit) = Self::begin(
            quota,
            periods,
            "many-clients".to_owned(),
            format!("{keys} clients, Zipf shares, Poisson arrivals at 20× the limit in total"),
            keys,
        );
        // Cumulative Zipf weights 1/1, 1/2, ..., 1/keys.
        let mut cumulative = Vec::with_capacity(keys as usize);
        let mut sum = 0.0;
        for rank in 1..=keys {
            sum += 1.0 / f64::from(rank);
            cumulative.push(sum);
        }
        let mean_gap = period as f64 / (limit as f64 * 20.0);
        let mut rng = Rng::new(seed);
        let mut t = rng.exponential(mean_gap);
        while t < p.duration_us() as f64 {
            let u = rng.unit() * sum;
            let key = cumulative
                .partition_point(|&c| c <= u)
                .min(keys as usize - 1);
            p.push(t as u64, key as u32);
            t += rng.exponential(mean_gap);
        }
        p.finish()
    }

    /// The lab's standard set, in report order: steady at 0.5×, 1× and 2× the limit,
    /// Poisson at the limit, on/off bursts, the boundary attack, a slow ramp, and 10 000
    /// Zipf-distributed clients.
    ///
    /// ```
    /// use tollgate::Quota;
    /// let patterns = tollgate_lab::Pattern::standard(&Quota::per_minute(100), 10, 42);
    /// assert_eq!(patterns.len(), 8);
    /// ```
    pub fn standard(quota: &Quota, periods: u32, seed: u64) -> Vec<Self> {
        // Each pattern draws from its own stream, so adding one changes no other.
        vec![
            Self::steady(quota, periods, 0.5, seed),
            Self::steady(quota, periods, 1.0, seed ^ 1),
            Self::steady(quota, periods, 2.0, seed ^ 2),
            Self::poisson(quota, periods, 1.0, seed ^ 3),
            Self::on_off(quota, periods, seed ^ 4),
            Self::boundary_attack(quota, periods),
            Self::ramp(quota, periods),
            Self::many_clients(quota, periods, 10_000, seed ^ 5),
        ]
    }
}

/// The period in microseconds and the limit, as the patterns use them.
fn period_and_limit(quota: &Quota) -> (u64, u64) {
    let period = u64::try_from(quota.period().as_micros()).unwrap_or(u64::MAX);
    (period.max(1), quota.limit())
}

/// `0.5`, `1`, `2`: factors as they appear in names.
fn trim(factor: f64) -> String {
    let text = format!("{factor}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

/// `SplitMix64`: tiny, fast, and good enough for arrival times. Written here so the
/// patterns do not depend on another crate's stream staying the same across versions.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, 53 bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed with the given mean.
    pub(crate) fn exponential(&mut self, mean: f64) -> f64 {
        // 1 − u is in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.unit()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_sorted_and_inside_their_duration() {
        for p in Pattern::standard(&Quota::per_minute(100), 4, 9) {
            assert!(p.arrivals().windows(2).all(|w| w[0].at_us <= w[1].at_us));
            assert!(p.arrivals().iter().all(|a| a.at_us < p.duration_us()));
            assert!(p.arrivals().iter().all(|a| a.key < p.keys()));
        }
    }

    #[test]
    fn rng_is_uniform_enough() {
        // Ten standard errors of slack: the check is for gross mistakes (a bad shift),
        // not for statistical quality.
        let mut rng = Rng::new(1);
        let mean = (0..100_000).map(|_| rng.unit()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        let exp = (0..100_000).map(|_| rng.exponential(2.0)).sum::<f64>() / 100_000.0;
        assert!((exp - 2.0).abs() < 0.07, "{exp}");
    }
}
