//! [`FailMode`]: what the layer does when its store fails.

/// What the layer does when the store cannot decide (Redis down, slow, failing over).
///
/// ```
/// assert_eq!(tollgate::layer::FailMode::default(), tollgate::layer::FailMode::Open);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailMode {
    /// Let the request through, unlimited, and log a warning (the default): an outage
    /// of the limiter is not an outage of the API.
    #[default]
    Open,
    /// Reject with 503 and `Retry-After: 1` (gRPC `UNAVAILABLE`).
    Closed,
}
