//! [`Divisor`]: division by a number fixed when a limit is built, without a `div`.

/// A divisor known at configuration time, with its reciprocal.
///
/// A 64-bit `div` takes tens of cycles, which showed up in profiles of the hottest
/// path (GCRA's `remaining` on every decision). Dividing by a fixed `d` is instead a
/// multiplication by `m = ⌊(2⁶⁴ − 1) / d⌋` and one correction step.
///
/// Why one step suffices: write `m = (2⁶⁴ − 1 − e) / d` with `0 ≤ e < d`. Then
/// `n·m / 2⁶⁴ = n/d − n·(1 + e) / (d·2⁶⁴)`, and the subtracted term is below 1 because
/// `n < 2⁶⁴` and `1 + e ≤ d`. So `⌊n·m / 2⁶⁴⌋` is `⌊n/d⌋` or one less, and the
/// remainder test decides which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    d: u64,
    m: u64,
}

impl Divisor {
    /// Division by `d`; 0 is read as 1 (parameters are clamped, never zero).
    pub(crate) const fn new(d: u64) -> Self {
        let d = if d == 0 { 1 } else { d };
        Self { d, m: u64::MAX / d }
    }

    /// `⌊n / d⌋`.
    #[inline]
    pub(crate) fn div(self, n: u64) -> u64 {
        let q = ((u128::from(n) * u128::from(self.m)) >> 64) as u64;
        // q ≤ ⌊n/d⌋, so q·d ≤ n: neither line can overflow.
        let r = n - q * self.d;
        q + u64::from(r >= self.d)
    }
}

#[cfg(test)]
mod tests {
    use super::Divisor;

    #[test]
    fn matches_hardware_division_at_the_edges_and_at_random() {
        let mut divisors = vec![1, 2, 3, 7, 10, 1_000, 999_999_937, u64::MAX - 1, u64::MAX];
        divisors.extend((0..64).map(|s| 1_u64 << s));
        divisors.extend((1..64).map(|s| (1_u64 << s) - 1));
        divisors.extend((1..64).map(|s| (1_u64 << s) + 1));
        let mut state = 0x1234_5678_9abc_def0_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        divisors.extend((0..200).map(|_| next() >> (next() % 64)).filter(|&d| d > 0));
        for &d in &divisors {
            let div = Divisor::new(d);
            let mut numerators = vec![0, 1, d - 1, d, d.saturating_add(1), u64::MAX, u64::MAX - 1];
            numerators.extend((1..=3).map(|k| d.saturating_mul(k)));
            numerators.extend((1..=3).map(|k| d.saturating_mul(k).saturating_sub(1)));
            numerators.extend((0..200).map(|_| next() >> (next() % 64)));
            for n in numerators {
                assert_eq!(div.div(n), n / d, "{n} / {d}");
            }
        }
    }

    #[test]
    fn zero_is_read_as_one() {
        assert_eq!(Divisor::new(0).div(42), 42);
    }
}
