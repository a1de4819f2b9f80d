//! How a penalty's block grows with the trips a key repeats: the blocks after the
//! first ([`Penalty::escalate`](super::Penalty::escalate)), a growth factor with a cap
//! ([`Penalty::escalate_by`](super::Penalty::escalate_by)), and how long a trip is
//! remembered ([`Penalty::remember`](super::Penalty::remember)). The arithmetic of
//! "the block of the n-th trip" is here once, and once in `lua/block.lua`
//! (`pb_block_of`), on the same whole µs: the scenario tables hold them to the same
//! answers.

use std::time::Duration;

use crate::time::micros_up;

/// The most blocks [`Penalty::escalate`](super::Penalty::escalate) takes after the
/// first. A penalty is `Copy` and sent whole to Redis with every charge that may trip
/// it, so its steps live inline; a longer growth is a factor
/// ([`Penalty::escalate_by`](super::Penalty::escalate_by)).
pub(crate) const MAX_STEPS: usize = 8;

/// The escalation of a penalty: zeros when the block never grows and no trip is
/// remembered (a penalty as it was before escalation existed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Escalation {
    /// How long a trip is remembered, from its instant: a trip later than that after
    /// the previous one starts over at the first block. Zero: never remembered.
    pub(crate) remember: Duration,
    /// The blocks of the 2nd, 3rd, … trips, in µs rounded up (saturating); the first
    /// `given.min(MAX_STEPS)` are set.
    pub(crate) steps: [u64; MAX_STEPS],
    /// How many steps were given: more than [`MAX_STEPS`] is refused by `validate`.
    pub(crate) given: usize,
    /// After the last step (or the first block), each block is the one before times
    /// this, up to `cap`; 0 when not set.
    pub(crate) factor: u32,
    pub(crate) cap: Duration,
}

impl Escalation {
    /// The steps given, in µs (at most [`MAX_STEPS`]).
    pub(crate) fn steps(&self) -> &[u64] {
        &self.steps[..self.given.min(MAX_STEPS)]
    }

    /// Whether the block ever grows.
    pub(crate) fn grows(&self) -> bool {
        self.given > 0 || self.factor > 0
    }

    pub(crate) fn remember_us(&self) -> u64 {
        micros_up(self.remember)
    }

    pub(crate) fn cap_us(&self) -> u64 {
        micros_up(self.cap)
    }

    /// The block, in µs, of a key's `trip`-th remembered trip (1: the first, which
    /// blocks for `first_us`). Past the last step, the last step repeats, or grows by
    /// the factor up to the cap: at most 64 multiplications, as a factor of at least
    /// 2 reaches any cap below 2^64 by then, however large `trip` is (a zero block,
    /// which `validate` refuses, would never grow: it stops at once).
    ///
    /// The twin of `pb_block_of` in `lua/block.lua`: there the products are doubles,
    /// exact below 2^53; a product that is not exact is above every cap (each below
    /// 2^52 µs, a century), so both sides land on the cap.
    pub(crate) fn block_of(&self, first_us: u64, trip: u32) -> u64 {
        if trip <= 1 {
            return first_us;
        }
        let steps = self.steps();
        // The trip's step, counting the first block as step 0.
        let step = trip as usize - 1;
        if let Some(&block) = steps.get(step - 1) {
            return block;
        }
        let mut block = steps.last().copied().unwrap_or(first_us);
        if self.factor >= 2 {
            let cap = self.cap_us();
            let mut more = step - steps.len();
            while more > 0 && block > 0 && block < cap {
                block = block.saturating_mul(u64::from(self.factor)).min(cap);
                more -= 1;
            }
        }
        block
    }

    /// The longest block any trip gets, in µs.
    pub(crate) fn longest_us(&self, first_us: u64) -> u64 {
        let last = self.steps().last().copied().unwrap_or(first_us);
        if self.factor >= 2 {
            last.max(self.cap_us())
        } else {
            last
        }
    }

    /// The escalation as the Redis scripts read it (`lua/block.lua`,
    /// `pb_escalation`): "<remember> <factor> <cap> <step>…" in µs, or empty when no
    /// trip is remembered (every trip then blocks for the first block).
    pub(crate) fn wire(&self) -> String {
        use std::fmt::Write as _;
        let remember = self.remember_us();
        if remember == 0 {
            return String::new();
        }
        let mut text = format!("{remember} {} {}", self.factor, self.cap_us());
        for step in self.steps() {
            let _ = write!(text, " {step}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escalation(steps: &[u64], factor: u32, cap_us: u64) -> Escalation {
        let mut e = Escalation {
            remember: Duration::from_secs(3_600),
            given: steps.len(),
            factor,
            cap: Duration::from_micros(cap_us),
            ..Escalation::default()
        };
        e.steps[..steps.len()].copy_from_slice(steps);
        e
    }

    #[test]
    fn explicit_steps_then_the_last_repeats() {
        let e = escalation(&[5, 10], 0, 0);
        let blocks: Vec<u64> = (0..6).map(|trip| e.block_of(2, trip)).collect();
        assert_eq!(blocks, [2, 2, 5, 10, 10, 10]);
        assert_eq!(e.longest_us(2), 10);
    }

    #[test]
    fn a_factor_grows_from_the_last_step_up_to_the_cap() {
        let e = escalation(&[5], 3, 100);
        let blocks: Vec<u64> = (1..7).map(|trip| e.block_of(2, trip)).collect();
        assert_eq!(blocks, [2, 5, 15, 45, 100, 100]);
        assert_eq!(e.longest_us(2), 100);
        // No steps: from the first block.
        let e = escalation(&[], 2, 9);
        let blocks: Vec<u64> = (1..6).map(|trip| e.block_of(2, trip)).collect();
        assert_eq!(blocks, [2, 4, 8, 9, 9]);
    }

    #[test]
    fn the_most_trips_and_the_largest_factor_stay_at_the_cap() {
        let cap = crate::time::micros(super::super::Penalty::MAX_DENIAL);
        let e = escalation(&[], u32::MAX, cap);
        assert_eq!(e.block_of(1, u32::MAX), cap);
        assert_eq!(e.block_of(1, 2), u64::from(u32::MAX));
        assert_eq!(e.block_of(1, 3), cap);
        let e = escalation(&[], 2, cap);
        assert_eq!(e.block_of(1, u32::MAX), cap);
    }

    #[test]
    fn the_wire_lists_remember_factor_cap_and_steps_in_micros() {
        assert_eq!(escalation(&[5, 10], 2, 99).wire(), "3600000000 2 99 5 10");
        assert_eq!(Escalation::default().wire(), "");
    }
}
