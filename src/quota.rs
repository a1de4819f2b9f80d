//! [`Quota`]: how much cost a key may spend per period, and the notation parser.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::ConfigError;

/// The longest period a quota accepts: a century (of 365-day years).
const MAX_PERIOD: Duration = Duration::from_secs(100 * 365 * 86_400);

const SYNTAX: &str = "expected \"<count>/<unit>\" or \"<count> per <n> <unit>\" \
                      (units: ms, s, min, h, d), e.g. \"100/min\" or \"20 per 10 seconds\"";

/// A rate: at most `limit` units of cost per `period`, with an optional `burst`.
///
/// `burst` is the most cost admitted at one instant from an idle key; it defaults to the
/// limit. Only the token bucket, GCRA and leaky bucket honour a burst different from the
/// limit; the window algorithms reject it when the limiter is built.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// let q: Quota = "100/min".parse()?;
/// assert_eq!(q, Quota::per_minute(100));
/// assert_eq!(q.limit(), 100);
/// assert_eq!(q.period(), Duration::from_secs(60));
/// assert_eq!(q.burst(), 100);
///
/// let q = Quota::per_second(10).with_burst(25)?;
/// assert_eq!(q.burst(), 25);
/// assert_eq!("20 per 10 seconds".parse::<Quota>()?, Quota::new(20, Duration::from_secs(10))?);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    /// The period in whole microseconds (a `Duration` would double the size of every
    /// `Quota`, which each `Decision` carries).
    period_us: u64,
    /// 0: the default, the limit.
    burst: u64,
}

impl Quota {
    /// The largest limit or burst a quota accepts: 2^40.
    ///
    /// Large enough for 10^9 requests per second, small enough that every algorithm's
    /// arithmetic stays exact on every store (Redis scripts compute with doubles).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// assert_eq!(Quota::MAX_COUNT, 1 << 40);
    /// assert!(Quota::new(Quota::MAX_COUNT, Duration::from_secs(1)).is_ok());
    /// assert!(Quota::new(Quota::MAX_COUNT + 1, Duration::from_secs(1)).is_err());
    /// ```
    pub const MAX_COUNT: u64 = 1 << 40;

    /// `limit` units per `period`.
    ///
    /// The period must be a whole number of microseconds between 1 µs and a century;
    /// the limit must be between 1 and [`MAX_COUNT`](Self::MAX_COUNT).
    ///
    /// ```
    /// use std::time::Duration;
    /// let q = tollgate::Quota::new(5, Duration::from_secs(2))?;
    /// assert_eq!(q.to_string(), "5/2s");
    /// assert!(tollgate::Quota::new(5, Duration::ZERO).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(limit: u64, period: Duration) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::new(format!(
                "invalid quota limit 0 per {period:?}: the limit must be at least 1"
            )));
        }
        if limit > Self::MAX_COUNT {
            return Err(ConfigError::new(format!(
                "invalid quota limit {limit}: the limit must be at most {max}",
                max = Self::MAX_COUNT
            )));
        }
        if period.is_zero() {
            return Err(ConfigError::new(format!(
                "invalid quota period 0 for limit {limit}: the period must be at least 1 microsecond"
            )));
        }
        if !period.subsec_nanos().is_multiple_of(1_000) {
            return Err(ConfigError::new(format!(
                "invalid quota period {period:?}: the period must be a whole number of microseconds"
            )));
        }
        if period > MAX_PERIOD {
            return Err(ConfigError::new(format!(
                "invalid quota period {period:?}: the period must be at most a century"
            )));
        }
        Ok(Self {
            limit,
            period_us: period.as_micros() as u64,
            burst: 0,
        })
    }

    const fn literal(limit: u64, period: Duration) -> Self {
        assert!(
            limit > 0 && limit <= Self::MAX_COUNT,
            "quota limit must be between 1 and 2^40"
        );
        Self {
            limit,
            period_us: period.as_micros() as u64,
            burst: 0,
        }
    }

    /// `limit` per second.
    ///
    /// # Panics
    /// When `limit` is 0 or above [`MAX_COUNT`](Self::MAX_COUNT); use [`Quota::new`] for values that are
    /// not literals.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(10).to_string(), "10/s");
    /// ```
    pub const fn per_second(limit: u64) -> Self {
        Self::literal(limit, Duration::from_secs(1))
    }

    /// `limit` per minute.
    ///
    /// # Panics
    /// When `limit` is 0 or above [`MAX_COUNT`](Self::MAX_COUNT).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_minute(100).to_string(), "100/min");
    /// ```
    pub const fn per_minute(limit: u64) -> Self {
        Self::literal(limit, Duration::from_secs(60))
    }

    /// `limit` per hour.
    ///
    /// # Panics
    /// When `limit` is 0 or above [`MAX_COUNT`](Self::MAX_COUNT).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_hour(5000).to_string(), "5000/h");
    /// ```
    pub const fn per_hour(limit: u64) -> Self {
        Self::literal(limit, Duration::from_secs(3600))
    }

    /// `limit` per day.
    ///
    /// # Panics
    /// When `limit` is 0 or above [`MAX_COUNT`](Self::MAX_COUNT).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_day(1).to_string(), "1/d");
    /// ```
    pub const fn per_day(limit: u64) -> Self {
        Self::literal(limit, Duration::from_secs(86_400))
    }

    /// The same rate with a different burst: the most cost admitted at one instant from
    /// an idle key.
    ///
    /// ```
    /// let q = tollgate::Quota::per_minute(100).with_burst(20)?;
    /// assert_eq!((q.limit(), q.burst()), (100, 20));
    /// assert!(tollgate::Quota::per_minute(100).with_burst(0).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn with_burst(self, burst: u64) -> Result<Self, ConfigError> {
        if burst == 0 || burst > Self::MAX_COUNT {
            return Err(ConfigError::new(format!(
                "invalid burst {burst} for quota \"{self}\": the burst must be between 1 and {max}",
                max = Self::MAX_COUNT
            )));
        }
        Ok(Self { burst, ..self })
    }

    /// The most cost admitted per period at a steady pace.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_hour(7).limit(), 7);
    /// ```
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period the limit applies to.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_hour(7).period().as_secs(), 3600);
    /// ```
    pub const fn period(&self) -> Duration {
        Duration::from_micros(self.period_us)
    }

    /// The most cost admitted at one instant from an idle key (defaults to the limit).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_hour(7).burst(), 7);
    /// ```
    pub const fn burst(&self) -> u64 {
        if self.burst == 0 {
            self.limit
        } else {
            self.burst
        }
    }

    /// Whether a burst different from the limit was set with [`Quota::with_burst`].
    ///
    /// ```
    /// let q = tollgate::Quota::per_hour(7);
    /// assert!(!q.has_custom_burst());
    /// assert!(q.with_burst(7)?.has_custom_burst());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub const fn has_custom_burst(&self) -> bool {
        self.burst != 0
    }

    /// The period in whole microseconds.
    pub(crate) fn period_micros(&self) -> u64 {
        self.period_us
    }

    /// Parses several quotas separated by `;`, `,` or `|`.
    ///
    /// ```
    /// use tollgate::Quota;
    /// let quotas = Quota::parse_many("10/s; 1000/h")?;
    /// assert_eq!(quotas, vec![Quota::per_second(10), Quota::per_hour(1000)]);
    /// assert!(Quota::parse_many("10/s; often").is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn parse_many(input: &str) -> Result<Vec<Self>, ConfigError> {
        let quotas = input
            .split([';', ',', '|'])
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Self>, _>>()?;
        if quotas.is_empty() {
            return Err(ConfigError::new(format!(
                "invalid quota list \"{}\": {SYNTAX}, separated by ';', ',' or '|'",
                input.escape_debug()
            )));
        }
        Ok(quotas)
    }
}

impl FromStr for Quota {
    type Err = ConfigError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse(input).map_err(|why| {
            ConfigError::new(format!("invalid quota \"{}\": {why}", input.escape_debug()))
        })
    }
}

/// Parses `<n> ("/" | "per") [<m>] <unit>`; the error says what was wrong, without the
/// input (the caller quotes it).
fn parse(input: &str) -> Result<Quota, String> {
    let text = input.trim().to_ascii_lowercase();
    let (count, rest) = if let Some((count, rest)) = text.split_once('/') {
        (count, rest)
    } else if let Some((count, rest)) = split_word(&text, "per") {
        (count, rest)
    } else {
        return Err(SYNTAX.to_string());
    };
    let limit = number(count.trim(), "count")?;
    let rest = rest.trim();
    let digits_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(rest.len());
    let (multiplier, unit) = rest.split_at(digits_end);
    let multiplier = if multiplier.is_empty() {
        1
    } else {
        number(multiplier, "period length")?
    };
    let unit = unit.trim();
    let unit_micros = unit_micros(unit).ok_or_else(|| {
        if unit.is_empty() {
            format!("missing time unit; {SYNTAX}")
        } else {
            format!("unknown time unit \"{unit}\"; {SYNTAX}")
        }
    })?;
    if limit == 0 {
        return Err("the count must be at least 1".to_string());
    }
    if multiplier == 0 {
        return Err("the period must be longer than zero".to_string());
    }
    let micros = multiplier
        .checked_mul(unit_micros)
        .ok_or_else(|| "the period is too long".to_string())?;
    Quota::new(limit, Duration::from_micros(micros)).map_err(|e| e.message().to_string())
}

fn split_word<'a>(text: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let at = text.find(word)?;
    let (before, after) = (&text[..at], &text[at + word.len()..]);
    let bounded =
        before.ends_with(' ') && after.starts_with(|c: char| c == ' ' || c.is_ascii_digit());
    bounded.then_some((before, after))
}

fn number(text: &str, what: &str) -> Result<u64, String> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the {what} \"{text}\" is not a whole number; {SYNTAX}"
        ));
    }
    digits
        .parse()
        .map_err(|_| format!("the {what} \"{text}\" is too large"))
}

pub(crate) fn unit_micros(unit: &str) -> Option<u64> {
    Some(match unit {
        "us" | "µs" | "micro" | "micros" | "microsecond" | "microseconds" => 1,
        "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000,
        "d" | "day" | "days" => 86_400_000_000,
        _ => return None,
    })
}

impl fmt::Display for Quota {
    /// Writes the notation [`FromStr`] reads back, e.g. `100/min` or `5/2s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 6] = [
            (86_400_000_000, "d"),
            (3_600_000_000, "h"),
            (60_000_000, "min"),
            (1_000_000, "s"),
            (1_000, "ms"),
            (1, "us"),
        ];
        let micros = self.period_micros();
        let (size, name) = UNITS
            .iter()
            .copied()
            .find(|(size, _)| micros.is_multiple_of(*size))
            .unwrap_or((1, "us"));
        match micros / size {
            1 => write!(f, "{}/{name}", self.limit),
            n => write!(f, "{}/{n}{name}", self.limit),
        }
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.has_custom_burst() {
            write!(f, "Quota({self}, burst {})", self.burst)
        } else {
            write!(f, "Quota({self})")
        }
    }
}
