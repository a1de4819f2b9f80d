//! Hand-computed scenario tables: the exact answer of every algorithm, step by step.
//!
//! Every expected value below was worked out by hand from the contract the crate
//! documents, not copied from the implementation: each algorithm's rule, notation
//! (`L`, `P`, `B`, `T = P/L`) and bound on [`tollgate::Algorithm`]; what `remaining`,
//! `reset_after`, `retry_after` and `delay` mean on the fields of
//! [`tollgate::Decision`]; refunds by receipt on [`tollgate::Limiter::refund_charge`].
//! The arithmetic is in the comment on each step. The tables are an independent check,
//! and every store (memory, Redis, Redis Cluster) must reproduce them to the
//! microsecond.
//!
//! Times are offsets in µs from [`BASE`], a multiple of 86 400 s, so windows of 1 s,
//! 10 s, 1 min, 1 h and 1 day all start there. In the comments, `e` is the offset in the
//! current window, `w0`, `w1`, … the windows, `s0`, `s1`, … the sub-windows, and
//! `→ X` gives the instant (offset) whose distance from the step's time is reported.
//!
//! Invoke [`scenario_tests!`](crate::scenario_tests) once per store, in the module
//! that should hold the tests, with anything callable as
//! `make_store(clock: ManualClock) -> impl Store` (a path or a closure):
//!
//! ```ignore
//! support::scenario_tests!(tollgate::MemoryStore::with_clock);
//! // or, e.g.: support::scenario_tests!(|clock| redis_store_for_test(clock))
//! ```
//!
//! One file per concern: the edges, refunds and backwards clocks of each algorithm
//! (`fixed_window.rs` … `leaky_bucket.rs`), then one semantic across every algorithm
//! (`late_refunds.rs`, `quota_changes.rs`, `operations.rs`, `penalty.rs`,
//! `settle.rs`); the step
//! constructors the tables are written with stay here, the runner is `runner.rs`.
//! Escalating penalties have tables of their own, each run on every algorithm
//! (`escalation.rs`, its runner `escalation_runner.rs`).

// The per-algorithm tables: edges, refunds and a clock that goes back.
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod sliding_window;
mod sliding_window_counters;
mod sliding_window_log;
mod token_bucket;
// One semantic across every algorithm.
mod escalation;
mod escalation_runner;
mod late_refunds;
mod operations;
mod penalty;
mod quota_changes;
mod runner;
mod settle;

use std::time::Duration;

use tollgate::Algorithm;

pub use self::escalation::*;
pub use self::escalation_runner::run_escalation;
pub use self::fixed_window::*;
pub use self::gcra::*;
pub use self::late_refunds::*;
pub use self::leaky_bucket::*;
pub use self::operations::*;
pub use self::penalty::*;
pub use self::quota_changes::*;
pub use self::runner::run;
pub use self::settle::*;
pub use self::sliding_window::*;
pub use self::sliding_window_counters::*;
pub use self::sliding_window_log::*;
pub use self::token_bucket::*;

/// Every scenario starts here: 2023-11-14T00:00:00Z, a multiple of one day.
pub const BASE: Duration = Duration::from_secs(1_699_920_000);

/// One hand-computed scenario: a policy and the requests made under it, in order.
#[derive(Debug)]
pub struct Scenario {
    /// Also the policy's name, so failures and Redis keys say which table it is.
    pub name: &'static str,
    /// Parsed with `str::parse::<Quota>()`.
    pub quota: &'static str,
    /// Applied with `Quota::with_burst` (token bucket, GCRA and leaky bucket only).
    pub burst: Option<u64>,
    /// The algorithm under test.
    pub algorithm: Algorithm,
    /// Applied with `Limit::max_delay` (the leaky bucket's bound on delays, µs);
    /// `None` keeps the default, one period.
    pub max_delay_us: Option<u64>,
    /// Applied with `Limit::penalty`: `Penalty::after(n).within(p).block_for(d)` as
    /// `(n, p µs, d µs)`; `None`: no penalty box.
    pub penalty: Option<(u32, u64, u64)>,
    /// The requests and refunds, in order.
    pub steps: &'static [Step],
}

/// One request (or refund) at `BASE + at_us`.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// Offset from [`BASE`]; may be earlier than the previous step's (clock went back).
    pub at_us: u64,
    /// What is asked at that instant.
    pub op: Op,
}

/// What a step does.
#[derive(Debug, Clone, Copy)]
#[allow(
    missing_docs,
    reason = "each variant's fields are named in its own doc"
)]
pub enum Op {
    /// `Limiter::check(cost)`, or `Limiter::check_with(cost, quota)` when `quota` is
    /// a caller's own (quota notation and burst), and the decision it must return.
    Check {
        cost: u32,
        expect: Expect,
        quota: Option<(&'static str, Option<u64>)>,
    },
    /// `Limiter::refund(amount)`: the key's newest charges.
    Refund { amount: u32 },
    /// `Limiter::refund_charge(amount)` of the decision that step `of` (an earlier
    /// check) returned: that charge only, by its receipt.
    RefundCharge { of: usize, amount: u32 },
    /// `Limiter::peek`, and the decision it must return.
    Peek { expect: Expect },
    /// `Limiter::reset`: the key is idle and unblocked.
    Reset,
    /// `Limiter::block(us)`, and the decision it must return.
    Block { us: u64, expect: Expect },
    /// `Limiter::penalize(n)`, and the decision it must return.
    Penalize { n: u32, expect: Expect },
    /// `Limiter::settle(actual)` of the decision that step `of` (an earlier check or
    /// settle) returned, the decision it must return, and the cost of that decision's
    /// receipt (`None`: no receipt).
    Settle {
        of: usize,
        actual: u64,
        expect: Expect,
        receipt: Option<u64>,
    },
}

/// The expected decision of a check, durations in µs. `limit` is not listed: it is
/// always the capacity, derived from the scenario's quota and burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the `Decision` field of its name, in µs"
)]
pub struct Expect {
    pub allowed: bool,
    pub remaining: u64,
    pub reset_after_us: u64,
    pub retry_after_us: Option<u64>,
    pub delay_us: u64,
    pub blocked_us: Option<u64>,
}

// Step constructors, named for what the step expects, so a table reads as a story.

/// An admitted check without delay.
const fn ok(at_us: u64, cost: u32, remaining: u64, reset_after_us: u64) -> Step {
    queued(at_us, cost, remaining, reset_after_us, 0)
}

/// An admitted check with a delay (leaky bucket).
const fn queued(at_us: u64, cost: u32, remaining: u64, reset_after_us: u64, delay_us: u64) -> Step {
    check(at_us, cost, true, remaining, reset_after_us, None, delay_us)
}

/// A denied check that fits later, after exactly `retry_after_us`.
const fn deny(
    at_us: u64,
    cost: u32,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: u64,
) -> Step {
    check(
        at_us,
        cost,
        false,
        remaining,
        reset_after_us,
        Some(retry_after_us),
        0,
    )
}

/// A denied check whose cost exceeds the capacity: it can never fit.
const fn never(at_us: u64, cost: u32, remaining: u64, reset_after_us: u64) -> Step {
    check(at_us, cost, false, remaining, reset_after_us, None, 0)
}

/// A cost-0 check: always allowed, charges nothing, reports the current state.
const fn peek(at_us: u64, remaining: u64, reset_after_us: u64) -> Step {
    ok(at_us, 0, remaining, reset_after_us)
}

const fn refund(at_us: u64, amount: u32) -> Step {
    Step {
        at_us,
        op: Op::Refund { amount },
    }
}

/// A refund of `amount` of what the check at step `of` charged, by its receipt.
const fn refund_of(at_us: u64, of: usize, amount: u32) -> Step {
    Step {
        at_us,
        op: Op::RefundCharge { of, amount },
    }
}

const fn check(
    at_us: u64,
    cost: u32,
    allowed: bool,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: Option<u64>,
    delay_us: u64,
) -> Step {
    Step {
        at_us,
        op: Op::Check {
            cost,
            expect: Expect {
                allowed,
                remaining,
                reset_after_us,
                retry_after_us,
                delay_us,
                blocked_us: None,
            },
            quota: None,
        },
    }
}

/// What a blocked key answers, `left_us` before its block ends: denied, nothing
/// left, both waits the block's end.
const fn blocked_answer(left_us: u64) -> Expect {
    Expect {
        allowed: false,
        remaining: 0,
        reset_after_us: left_us,
        retry_after_us: Some(left_us),
        delay_us: 0,
        blocked_us: Some(left_us),
    }
}

/// A check of `cost` denied because the key is blocked for `left_us` more (or
/// because this very rejection tripped its penalty box).
const fn blocked(at_us: u64, cost: u32, left_us: u64) -> Step {
    Step {
        at_us,
        op: Op::Check {
            cost,
            expect: blocked_answer(left_us),
            quota: None,
        },
    }
}

/// `Limiter::peek` of a key that is not blocked (the answer of a cost-0 check).
const fn peek_op(at_us: u64, remaining: u64, reset_after_us: u64) -> Step {
    let Op::Check { expect, .. } = peek(at_us, remaining, reset_after_us).op else {
        unreachable!()
    };
    Step {
        at_us,
        op: Op::Peek { expect },
    }
}

/// `Limiter::peek` of a key blocked for `left_us` more.
const fn peek_blocked(at_us: u64, left_us: u64) -> Step {
    Step {
        at_us,
        op: Op::Peek {
            expect: blocked_answer(left_us),
        },
    }
}

/// `Limiter::block` for `us`: the key is blocked for exactly that.
const fn block(at_us: u64, us: u64) -> Step {
    Step {
        at_us,
        op: Op::Block {
            us,
            expect: blocked_answer(us),
        },
    }
}

/// `Limiter::penalize(n)`: charged whatever fits, answered as a peek.
const fn penalize(at_us: u64, n: u32, remaining: u64, reset_after_us: u64) -> Step {
    let Op::Check { expect, .. } = peek(at_us, remaining, reset_after_us).op else {
        unreachable!()
    };
    Step {
        at_us,
        op: Op::Penalize { n, expect },
    }
}

const fn reset(at_us: u64) -> Step {
    Step {
        at_us,
        op: Op::Reset,
    }
}

/// The check `step` made with the caller's own quota `quota` (and `burst`):
/// `Limiter::check_with`.
const fn under(quota: &'static str, burst: Option<u64>, step: Step) -> Step {
    match step.op {
        Op::Check { cost, expect, .. } => Step {
            at_us: step.at_us,
            op: Op::Check {
                cost,
                expect,
                quota: Some((quota, burst)),
            },
        },
        _ => step,
    }
}

/// Expands to one `#[tokio::test]` per scenario of [`scenarios`](crate::scenarios),
/// each on a fresh store built by `$make_store` (callable as
/// `make_store(clock: ManualClock) -> impl Store`). The invoking crate needs `tokio`
/// with its `macros` feature.
#[macro_export]
macro_rules! scenario_tests {
    ($make_store:expr) => {
        $crate::scenario_tests!(@each $make_store;
            fixed_window_counts_per_window_and_waits_for_the_edge
                => FIXED_WINDOW_EDGES,
            fixed_window_refunds_and_holds_a_backwards_clock_at_the_window_start
                => FIXED_WINDOW_REFUND_AND_BACKWARDS,
            fixed_window_empty_key_behind_its_window_resets_now
                => FIXED_WINDOW_BACKWARDS_EMPTY,
            sliding_window_weights_the_previous_window_rounding_down
                => SLIDING_WINDOW_EDGES,
            sliding_window_refunds_current_then_previous_and_never_gains_going_back
                => SLIDING_WINDOW_REFUND_AND_BACKWARDS,
            sliding_window_empty_key_behind_its_window_resets_now
                => SLIDING_WINDOW_BACKWARDS_EMPTY,
            sliding_window_counters_release_counts_at_sub_window_boundaries
                => SLIDING_WINDOW_COUNTERS_EDGES,
            sliding_window_counters_refund_newest_and_charge_where_the_key_stands
                => SLIDING_WINDOW_COUNTERS_REFUND_AND_BACKWARDS,
            sliding_window_counters_empty_key_behind_its_sub_window_resets_now
                => SLIDING_WINDOW_COUNTERS_BACKWARDS_EMPTY,
            sliding_window_log_entries_leave_exactly_one_period_later
                => SLIDING_WINDOW_LOG_EDGES,
            sliding_window_log_refunds_newest_and_keeps_future_entries
                => SLIDING_WINDOW_LOG_REFUND_AND_BACKWARDS,
            token_bucket_refills_continuously_up_to_the_burst
                => TOKEN_BUCKET_EDGES,
            token_bucket_rounds_exact_rational_waits_up_and_refunds
                => TOKEN_BUCKET_RATIONAL_AND_REFUND,
            token_bucket_behind_its_last_refill_waits_from_that_refill
                => TOKEN_BUCKET_BACKWARDS,
            gcra_admits_the_burst_then_one_per_emission_interval
                => GCRA_EDGES,
            gcra_rounds_inexact_intervals_and_never_gains_going_back
                => GCRA_REFUND_AND_BACKWARDS,
            gcra_behind_the_latest_instant_stands_still_there
                => GCRA_BACKWARDS_WITH_QUOTA_LEFT,
            leaky_bucket_queues_the_burst_with_growing_delays
                => LEAKY_BUCKET_EDGES,
            leaky_bucket_rounds_delays_up_and_never_gains_going_back
                => LEAKY_BUCKET_REFUND_AND_BACKWARDS,
            leaky_bucket_delay_behind_the_latest_instant_runs_on_the_callers_clock
                => LEAKY_BUCKET_BACKWARDS_DELAY,
            leaky_bucket_denies_a_place_beyond_max_delay_charging_nothing
                => LEAKY_BUCKET_MAX_DELAY,
            leaky_bucket_holds_no_request_longer_than_one_period_by_default
                => LEAKY_BUCKET_DEFAULT_MAX_DELAY,
            leaky_bucket_with_zero_max_delay_admits_only_requests_served_at_once
                => LEAKY_BUCKET_ZERO_MAX_DELAY,
            leaky_bucket_max_delay_counts_from_the_latest_instant_seen
                => LEAKY_BUCKET_MAX_DELAY_BACKWARDS,
            fixed_window_refund_after_the_window_rolled_over_takes_back_nothing
                => FIXED_WINDOW_LATE_REFUNDS,
            sliding_window_refund_takes_from_the_charges_own_window_then_nothing
                => SLIDING_WINDOW_LATE_REFUNDS,
            sliding_window_counters_refund_only_from_the_charges_own_sub_window
                => SLIDING_WINDOW_COUNTERS_LATE_REFUNDS,
            sliding_window_log_refund_only_from_the_charges_own_entry
                => SLIDING_WINDOW_LOG_LATE_REFUNDS,
            token_bucket_refund_returns_only_what_the_refill_has_not_repaid
                => TOKEN_BUCKET_LATE_REFUNDS,
            token_bucket_refund_of_a_partly_repaid_charge_rounds_for_the_limiter
                => TOKEN_BUCKET_LATE_REFUNDS_RATIONAL,
            gcra_refund_returns_only_the_debt_time_has_not_repaid
                => GCRA_LATE_REFUNDS,
            gcra_refund_of_a_partly_repaid_charge_rounds_for_the_limiter
                => GCRA_LATE_REFUNDS_INEXACT,
            leaky_bucket_refund_after_the_queue_moved_on_frees_nothing
                => LEAKY_BUCKET_LATE_REFUNDS,
            fixed_window_keeps_its_count_when_the_quota_changes
                => FIXED_WINDOW_QUOTA_CHANGES,
            sliding_window_keeps_its_counts_when_the_quota_changes
                => SLIDING_WINDOW_QUOTA_CHANGES,
            sliding_window_counters_keep_their_counts_when_the_quota_changes
                => SLIDING_WINDOW_COUNTERS_QUOTA_CHANGES,
            sliding_window_log_keeps_its_entries_when_the_quota_changes
                => SLIDING_WINDOW_LOG_QUOTA_CHANGES,
            token_bucket_recounts_its_usage_when_the_quota_changes
                => TOKEN_BUCKET_QUOTA_CHANGES,
            gcra_recounts_its_usage_when_the_quota_changes
                => GCRA_QUOTA_CHANGES,
            leaky_bucket_recounts_its_queue_when_the_quota_changes
                => LEAKY_BUCKET_QUOTA_CHANGES,
            fixed_window_is_peeked_penalized_blocked_and_reset
                => FIXED_WINDOW_OPERATIONS,
            sliding_window_is_peeked_penalized_blocked_and_reset
                => SLIDING_WINDOW_OPERATIONS,
            sliding_window_counters_are_peeked_penalized_blocked_and_reset
                => SLIDING_WINDOW_COUNTERS_OPERATIONS,
            sliding_window_log_is_peeked_penalized_blocked_and_reset
                => SLIDING_WINDOW_LOG_OPERATIONS,
            token_bucket_is_peeked_penalized_blocked_and_reset
                => TOKEN_BUCKET_OPERATIONS,
            gcra_is_peeked_penalized_blocked_and_reset
                => GCRA_OPERATIONS,
            leaky_bucket_is_peeked_penalized_blocked_and_reset
                => LEAKY_BUCKET_OPERATIONS,
            fixed_window_penalty_box_trips_on_the_third_rejection_within_its_window
                => FIXED_WINDOW_PENALTY,
            sliding_window_penalty_box_trips_on_the_third_rejection_within_its_window
                => SLIDING_WINDOW_PENALTY,
            sliding_window_counters_penalty_box_trips_on_the_third_rejection_within_its_window
                => SLIDING_WINDOW_COUNTERS_PENALTY,
            sliding_window_log_penalty_box_trips_on_the_third_rejection_within_its_window
                => SLIDING_WINDOW_LOG_PENALTY,
            token_bucket_penalty_box_trips_on_the_third_rejection_within_its_window
                => TOKEN_BUCKET_PENALTY,
            gcra_penalty_box_trips_on_the_third_rejection_within_its_window
                => GCRA_PENALTY,
            leaky_bucket_penalty_box_trips_on_the_third_rejection_within_its_window
                => LEAKY_BUCKET_PENALTY,
            sliding_window_log_penalty_after_one_rejection_needs_no_window
                => SLIDING_WINDOW_LOG_FIRST_REJECTION_PENALTY,
            fixed_window_settles_in_the_charges_window_into_debt_through_blocks_and_resets
                => FIXED_WINDOW_SETTLE,
            sliding_window_settles_from_the_current_then_the_previous_count
                => SLIDING_WINDOW_SETTLE,
            sliding_window_counters_settle_in_the_charges_own_sub_window
                => SLIDING_WINDOW_COUNTERS_SETTLE,
            sliding_window_log_settles_the_charges_own_entry
                => SLIDING_WINDOW_LOG_SETTLE,
            token_bucket_settles_what_the_refill_has_not_repaid
                => TOKEN_BUCKET_SETTLE,
            gcra_settles_what_time_has_not_repaid
                => GCRA_SETTLE,
            leaky_bucket_settles_its_place_unless_a_later_one_is_queued
                => LEAKY_BUCKET_SETTLE,
        );
        $crate::scenario_tests!(@escalation $make_store;
            escalating_penalty_blocks_for_each_step_forgets_after_remember_and_on_reset
                => ESCALATION_STEPS,
            escalating_penalty_grows_by_its_factor_up_to_its_cap
                => ESCALATION_FACTOR,
            escalating_penalty_follows_a_reload_that_changes_it_mid_way
                => ESCALATION_RELOAD,
            escalating_penalty_reaches_its_cap_from_the_extremes_without_overflow
                => ESCALATION_EXTREMES,
        );
    };
    (@escalation $make_store:expr; $($test:ident => $scenario:ident,)*) => {
        $(
            /// Every algorithm, in turn (see `scenarios/escalation.rs`).
            #[tokio::test]
            async fn $test() -> Result<(), Box<dyn std::error::Error>> {
                $crate::scenarios::run_escalation(
                    &$crate::scenarios::$scenario,
                    $make_store,
                )
                .await
            }
        )*
    };
    (@each $make_store:expr; $($(#[$attr:meta])* $test:ident => $scenario:ident,)*) => {
        $(
            $(#[$attr])*
            #[tokio::test]
            async fn $test() -> Result<(), Box<dyn std::error::Error>> {
                $crate::scenarios::run(
                    &$crate::scenarios::$scenario,
                    $make_store,
                )
                .await
            }
        )*
    };
}
