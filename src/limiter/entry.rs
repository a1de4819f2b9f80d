//! [`CheckEntry`]: one (limit, key, cost) of [`Limiter::check_all`](super::Limiter::check_all),
//! with or without the caller's own quota.

use crate::{Key, Quota};

/// One entry of [`Limiter::check_all`](crate::Limiter::check_all): `(limit, key, cost)`,
/// or `(limit, key, cost, quota)` to count it with this caller's quota (see
/// [`Limiter::check_with`](crate::Limiter::check_with)); the quota may be an
/// `Option<Quota>`, `None` meaning the limit's own.
///
/// ```
/// use tollgate::{Key, Limit, Limiter, Quota};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_minute(100))?)
///     .limit(Limit::new("daily", Quota::per_day(1000))?)
///     .build()?;
/// let key = Key::from("alice");
/// let pro = Quota::per_minute(10_000);
/// let decisions = limiter.check_all(&[("api", &key, 1, Some(pro)), ("daily", &key, 1, None)]).await?;
/// assert_eq!((decisions[0].quota, decisions[1].quota), (pro, Quota::per_day(1000)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait CheckEntry {
    /// The limit's name, the key, the cost, and the caller's quota if it has one.
    fn parts(&self) -> (&str, &Key, u32, Option<Quota>);
}

impl CheckEntry for (&str, &Key, u32) {
    fn parts(&self) -> (&str, &Key, u32, Option<Quota>) {
        (self.0, self.1, self.2, None)
    }
}

impl CheckEntry for (&str, &Key, u32, Quota) {
    fn parts(&self) -> (&str, &Key, u32, Option<Quota>) {
        (self.0, self.1, self.2, Some(self.3))
    }
}

impl CheckEntry for (&str, &Key, u32, Option<Quota>) {
    fn parts(&self) -> (&str, &Key, u32, Option<Quota>) {
        (self.0, self.1, self.2, self.3)
    }
}
