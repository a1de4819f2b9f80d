//! The two error types: [`ConfigError`] at build time, [`StoreError`] at request time.
//!
//! A rejection is a [`Decision`](crate::Decision), never an error.

use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration mistake, reported when a quota, limit or limiter is built.
///
/// The message quotes the offending input and says what was expected. A mistake read
/// from a configuration file also says where it is ([`file`](ConfigError::file),
/// [`line`](ConfigError::line), [`column`](ConfigError::column)), and its `Display`
/// starts with that place.
///
/// ```
/// let err = "100 per fortnight".parse::<tollgate::Quota>().unwrap_err();
/// assert!(err.to_string().contains("\"100 per fortnight\""));
/// assert_eq!(err.line(), None); // not from a file
/// ```
///
/// Its `Debug` form is its `Display` form, as `anyhow`'s and `toml`'s errors do, so
/// that a `main` returning `Result<(), Box<dyn Error>>` prints
/// `Error: tollgate.toml:7:9: …`, not the struct:
///
/// ```
/// let err = "100 per fortnight".parse::<tollgate::Quota>().unwrap_err();
/// assert_eq!(format!("{err:?}"), err.to_string());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigError {
    message: String,
    /// Boxed: most errors have no place, and results stay small.
    location: Option<Box<Location>>,
}

/// Where in a configuration file a mistake is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Location {
    file: Option<PathBuf>,
    /// 1-based line and column (in characters); `None` for a file that could not be read.
    line_column: Option<(usize, usize)>,
}

impl ConfigError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            location: None,
        }
    }

    /// The same mistake, found at 1-based `line` and `column` of a configuration text.
    #[cfg(feature = "config")]
    pub(crate) fn at(mut self, line: usize, column: usize) -> Self {
        self.location
            .get_or_insert_with(|| {
                Box::new(Location {
                    file: None,
                    line_column: None,
                })
            })
            .line_column = Some((line, column));
        self
    }

    /// The same mistake, found in the file at `path`.
    #[cfg(feature = "config")]
    pub(crate) fn in_file(mut self, path: &Path) -> Self {
        self.location
            .get_or_insert_with(|| {
                Box::new(Location {
                    file: None,
                    line_column: None,
                })
            })
            .file = Some(path.to_path_buf());
        self
    }

    /// The configuration file the mistake is in, when it was read from one.
    ///
    /// ```
    /// let err = tollgate::Quota::new(0, std::time::Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(err.file(), None);
    /// ```
    pub fn file(&self) -> Option<&Path> {
        self.location.as_ref()?.file.as_deref()
    }

    /// The 1-based line of the mistake, when it was read from a configuration text.
    ///
    /// ```
    /// let err = tollgate::Quota::new(0, std::time::Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(err.line(), None);
    /// ```
    pub fn line(&self) -> Option<usize> {
        self.location.as_ref()?.line_column.map(|(line, _)| line)
    }

    /// The 1-based column (in characters) of the mistake, when it was read from a
    /// configuration text.
    ///
    /// ```
    /// let err = tollgate::Quota::new(0, std::time::Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(err.column(), None);
    /// ```
    pub fn column(&self) -> Option<usize> {
        self.location
            .as_ref()?
            .line_column
            .map(|(_, column)| column)
    }

    /// The human-readable description of the mistake.
    ///
    /// ```
    /// let err = tollgate::Quota::new(0, std::time::Duration::from_secs(1)).unwrap_err();
    /// assert!(err.message().contains("limit"));
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    /// `file:line:column: message`, as compilers write it, for a mistake with a place;
    /// the message alone otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = &self.location {
            match (&location.file, location.line_column) {
                (Some(file), Some((line, column))) => {
                    write!(f, "{}:{line}:{column}: ", file.display())?;
                }
                (Some(file), None) => write!(f, "{}: ", file.display())?,
                (None, Some((line, column))) => write!(f, "line {line}, column {column}: ")?,
                (None, None) => {}
            }
        }
        f.write_str(&self.message)
    }
}

impl fmt::Debug for ConfigError {
    /// The `Display` form: what `main` prints for an error it returns.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl StdError for ConfigError {}

/// What went wrong when a store could not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The call did not finish before its deadline.
    Timeout,
    /// The connection to the backend failed or was lost.
    Connection,
    /// The backend is up but cannot serve right now (loading, failing over, read-only,
    /// out of memory, busy).
    Unavailable,
    /// The backend answered something the store did not expect.
    Protocol,
    /// `check` named a limit the limiter does not have.
    UnknownLimit,
    /// A caller's own quota ([`Limiter::check_with`](crate::Limiter::check_with), a
    /// policy's `quota_from`) that the limit's algorithm or the store cannot count
    /// exactly; the message names the quota and the reason.
    InvalidQuota,
    /// The store does not implement this operation (a custom [`Store`](crate::store::Store)
    /// that keeps the defaults of `reset`, `block` or `penalize`).
    Unsupported,
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Unavailable => "unavailable",
            Self::Protocol => "protocol",
            Self::UnknownLimit => "unknown limit",
            Self::InvalidQuota => "invalid quota",
            Self::Unsupported => "unsupported",
        })
    }
}

/// A store could not make a decision.
///
/// The Tower layer turns this into its `FailMode`; used directly, the caller decides.
///
/// ```
/// use tollgate::{Key, Limiter, Limit, Quota, StoreErrorKind};
/// # futures_lite_block_on(async {
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_second(5))?)
///     .build()?;
/// let err = limiter.check("nope", &Key::from("alice"), 1).await.unwrap_err();
/// assert_eq!(err.kind(), StoreErrorKind::UnknownLimit);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl StoreError {
    /// A store error of `kind` with a short description.
    ///
    /// ```
    /// use tollgate::{StoreError, StoreErrorKind};
    /// let err = StoreError::new(StoreErrorKind::Timeout, "no answer within 50 ms");
    /// assert_eq!(err.to_string(), "store timeout: no answer within 50 ms");
    /// ```
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error.
    ///
    /// ```
    /// use tollgate::{StoreError, StoreErrorKind};
    /// let io = std::io::Error::other("reset by peer");
    /// let err = StoreError::new(StoreErrorKind::Connection, "lost").with_source(io);
    /// assert!(std::error::Error::source(&err).is_some());
    /// ```
    #[must_use]
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind of failure.
    ///
    /// ```
    /// use tollgate::{StoreError, StoreErrorKind};
    /// assert_eq!(StoreError::new(StoreErrorKind::Unavailable, "LOADING").kind(), StoreErrorKind::Unavailable);
    /// ```
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// What went wrong, without the kind that `Display` puts in front.
    #[cfg(feature = "redis")]
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store {}: {}", self.kind, self.message)
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}
