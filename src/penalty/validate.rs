//! What a limiter refuses in a [`Penalty`]: zeros, blocks that shrink, a memory too
//! short to ever escalate, and spans the Redis store could not count exactly (it keeps
//! instants in Lua doubles, exact below 2^53 µs since the epoch; now is about 2^50.7).

use std::time::Duration;

use super::{MAX_STEPS, Penalty};
use crate::ConfigError;
use crate::time::micros_up;

/// Which option of a [`Penalty`] a problem is with, so that the TOML file can point
/// at its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "config"), allow(dead_code))]
pub(crate) enum Culprit {
    After,
    Within,
    BlockFor,
    /// The list of escalation blocks as a whole.
    Escalate,
    /// One escalation block, counted from 0.
    Step(usize),
    Factor,
    Cap,
    Remember,
    /// Something missing: the penalty as a whole.
    Whole,
}

impl Penalty {
    /// Refuses what the penalty could not mean; the message names the limit.
    pub(crate) fn validate(&self, limit: &str) -> Result<(), ConfigError> {
        match self.problem() {
            Some((_, why)) => Err(Self::invalid(limit, &why)),
            None => Ok(()),
        }
    }

    /// The error for a penalty of `limit` with problem `why`.
    pub(crate) fn invalid(limit: &str, why: &str) -> ConfigError {
        ConfigError::new(format!("invalid penalty of limit \"{limit}\": {why}"))
    }

    /// The first thing wrong with the penalty, if any, and which option it is with.
    pub(crate) fn problem(&self) -> Option<(Culprit, String)> {
        self.problem_with_counts()
            .or_else(|| self.problem_with_steps())
            .or_else(|| self.problem_with_growth())
            .or_else(|| self.problem_with_memory())
    }

    /// `after`, `within` and `block_for`.
    fn problem_with_counts(&self) -> Option<(Culprit, String)> {
        if self.after == 0 {
            return Some((
                Culprit::After,
                "Penalty::after(0): at least 1 rejection must trip it".to_owned(),
            ));
        }
        if self.within.is_zero() && self.after > 1 {
            return Some((
                Culprit::Whole,
                format!(
                    "Penalty::after({}) counts rejections within a window: set Penalty::within",
                    self.after
                ),
            ));
        }
        if self.block_for.is_zero() {
            return Some((
                Culprit::BlockFor,
                "a zero block: set Penalty::block_for".to_owned(),
            ));
        }
        let culprit = if too_long(self.within) {
            Culprit::Within
        } else if too_long(self.block_for) {
            Culprit::BlockFor
        } else {
            return None;
        };
        Some((
            culprit,
            format!(
                "window {:?} or block {:?} longer than 100 years",
                self.within, self.block_for
            ),
        ))
    }

    /// `escalate`: at most [`MAX_STEPS`], none longer than 100 years, none shorter
    /// than the block before it.
    fn problem_with_steps(&self) -> Option<(Culprit, String)> {
        let e = &self.escalation;
        if e.given > MAX_STEPS {
            return Some((
                Culprit::Escalate,
                format!(
                    "Penalty::escalate with {} blocks: at most {MAX_STEPS}; grow longer with \
                     Penalty::escalate_by",
                    e.given
                ),
            ));
        }
        let mut before = self.block_us();
        for (i, &step) in e.steps().iter().enumerate() {
            let step_d = Duration::from_micros(step);
            if step > micros_up(Penalty::MAX_DENIAL) {
                return Some((
                    Culprit::Step(i),
                    format!(
                        "escalation block {} ({step_d:?}) longer than 100 years",
                        i + 1
                    ),
                ));
            }
            if step < before {
                return Some((
                    Culprit::Step(i),
                    format!(
                        "escalation block {} ({step_d:?}) is shorter than the block before it \
                         ({:?}): blocks must not shrink",
                        i + 1,
                        Duration::from_micros(before)
                    ),
                ));
            }
            before = step;
        }
        None
    }

    /// `escalate_by`: a factor of at least 2, a cap from the last block to 100 years.
    fn problem_with_growth(&self) -> Option<(Culprit, String)> {
        let e = &self.escalation;
        if e.factor == 0 {
            return None;
        }
        if e.factor < 2 {
            return Some((
                Culprit::Factor,
                format!(
                    "Penalty::escalate_by({}, ..): a factor below 2 never grows the block; \
                     leave escalate_by out to repeat the last block",
                    e.factor
                ),
            ));
        }
        if too_long(e.cap) {
            return Some((
                Culprit::Cap,
                format!("escalation cap {:?} longer than 100 years", e.cap),
            ));
        }
        let last = e.steps().last().copied().unwrap_or(self.block_us());
        if e.cap_us() < last {
            return Some((
                Culprit::Cap,
                format!(
                    "escalation cap {:?} is shorter than the block before it ({:?})",
                    e.cap,
                    Duration::from_micros(last)
                ),
            ));
        }
        None
    }

    /// `remember`: set when the block grows, at most 100 years, and longer than the
    /// longest block.
    fn problem_with_memory(&self) -> Option<(Culprit, String)> {
        let e = &self.escalation;
        if e.grows() && e.remember.is_zero() {
            return Some((
                Culprit::Whole,
                "escalating blocks need Penalty::remember: how long a trip is remembered"
                    .to_owned(),
            ));
        }
        if too_long(e.remember) {
            return Some((
                Culprit::Remember,
                format!("remember {:?} longer than 100 years", e.remember),
            ));
        }
        let longest = e.longest_us(self.block_us());
        if !e.remember.is_zero() && e.remember_us() <= longest {
            return Some((
                Culprit::Remember,
                format!(
                    "remember {:?} is not longer than the longest block ({:?}): the next trip \
                     comes after a block ends, so no trip would be remembered by then",
                    e.remember,
                    Duration::from_micros(longest)
                ),
            ));
        }
        None
    }
}

/// Longer than any denial lasts.
fn too_long(d: Duration) -> bool {
    d > Penalty::MAX_DENIAL
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn refused(penalty: Penalty, says: &str) {
        let error = penalty.validate("login").expect_err(says).to_string();
        assert!(error.contains("\"login\""), "{error}");
        assert!(error.contains(says), "{error}");
    }

    #[test]
    fn an_escalation_is_checked_before_a_limiter_takes_it() {
        let base = Penalty::after(1).block_for(secs(60));
        refused(base.escalate(&[secs(300)]), "need Penalty::remember");
        refused(base.escalate_by(2, secs(600)), "need Penalty::remember");
        refused(
            base.escalate(&[secs(300), secs(120)]).remember(secs(3_600)),
            "block 2 (120s) is shorter",
        );
        refused(
            base.escalate(&[secs(30)]).remember(secs(3_600)),
            "block 1 (30s) is shorter",
        );
        refused(
            base.escalate_by(1, secs(600)).remember(secs(3_600)),
            "below 2",
        );
        refused(
            base.escalate_by(2, secs(30)).remember(secs(3_600)),
            "cap 30s",
        );
        refused(
            base.escalate_by(2, Duration::MAX).remember(Duration::MAX),
            "longer than 100 years",
        );
        refused(
            base.escalate(&[Duration::MAX]).remember(secs(3_600)),
            "longer than 100 years",
        );
        refused(base.remember(Duration::MAX), "longer than 100 years");
        refused(
            base.escalate(&[secs(60); 9]).remember(secs(3_600)),
            "at most 8",
        );
        refused(
            base.escalate_by(2, secs(3_600)).remember(secs(3_600)),
            "not longer than the longest block (3600s)",
        );
        refused(base.remember(secs(60)), "not longer than the longest block");
        assert!(
            base.escalate(&[secs(60); 8])
                .escalate_by(u32::MAX, Penalty::MAX_DENIAL)
                .remember(Penalty::MAX_DENIAL + Duration::from_nanos(1))
                .validate("login")
                .is_err(),
            "remember past 100 years"
        );
        base.escalate(&[secs(60); 8])
            .escalate_by(u32::MAX, Penalty::MAX_DENIAL.saturating_sub(secs(1)))
            .remember(Penalty::MAX_DENIAL)
            .validate("login")
            .expect("the extremes that fit");
        base.remember(secs(61))
            .validate("login")
            .expect("trips counted, not escalated");
    }
}
