//! A reload that adds, changes or removes a penalty box reaches plan callers at once,
//! on every store (issue 23, item 4): the limiter's cache of limits derived for
//! callers' quotas used to keep the penalty of the set they were derived from.

use std::error::Error;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Key, Limit, Limiter, Penalty, Quota};

use crate::scenarios::BASE;

fn api(penalty: Option<Penalty>) -> Result<Limit, Box<dyn Error>> {
    let limit = Limit::new("api", Quota::per_minute(1))?;
    Ok(match penalty {
        Some(penalty) => limit.penalty(penalty),
        None => limit,
    })
}

/// "api" 1/min; a plan caller of 2/min (same period, so the same state) is checked
/// before and after reloads that add a box (`after(1)`, 10 min), then remove it.
pub async fn a_reload_that_changes_a_penalty_reaches_plan_callers<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    let clock = ManualClock::new(BASE);
    let limiter = Limiter::builder()
        .limit(api(None)?)
        .store(make_store(clock.clone()))
        .build()?;
    let plan = Quota::per_minute(2);
    let key = Key::from("plan-caller");
    for _ in 0..2 {
        assert!(limiter.check_with("api", &key, 1, plan).await?.allowed);
    }
    // No box yet: a plain rejection, and the derived limit is cached.
    let denied = limiter.check_with("api", &key, 1, plan).await?;
    assert!(!denied.allowed);
    assert_eq!(denied.blocked_for, None);

    let box_ = Penalty::after(1)
        .within(Duration::from_secs(60))
        .block_for(Duration::from_secs(600));
    limiter.reload([api(Some(box_))?])?;
    let tripped = limiter.check_with("api", &key, 1, plan).await?;
    assert_eq!(
        tripped.blocked_for,
        Some(Duration::from_secs(600)),
        "the box added by the reload trips for the plan caller"
    );
    clock.advance(Duration::from_secs(120));
    assert!(
        !limiter.check_with("api", &key, 1, plan).await?.allowed,
        "still blocked two minutes later, its quota refilled"
    );

    // The box removed and the key reset: rejections no longer block.
    limiter.reload([api(None)?])?;
    limiter.reset("api", &key).await?;
    for _ in 0..2 {
        assert!(limiter.check_with("api", &key, 1, plan).await?.allowed);
    }
    for _ in 0..3 {
        let rejection = limiter.check_with("api", &key, 1, plan).await?;
        assert!(!rejection.allowed);
        assert_eq!(rejection.blocked_for, None, "no box any more: no block");
    }
    clock.advance(Duration::from_secs(60));
    assert!(
        limiter.check_with("api", &key, 1, plan).await?.allowed,
        "a minute later the plan caller is admitted"
    );
    Ok(())
}
