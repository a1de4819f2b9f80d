//! The file's shape as serde reads it: every value kept with its place in the text
//! (`Spanned`), so that mistakes found after parsing can still point at their value.
//! What the values mean is `build.rs`'s job.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor, value::MapAccessDeserializer};
use toml::Spanned;

/// The whole file: `[[limit]]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub(super) limit: Vec<LimitSpec>,
}

/// One `[[limit]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitSpec {
    pub(super) name: Spanned<String>,
    pub(super) quota: Spanned<String>,
    pub(super) burst: Option<Spanned<u64>>,
    pub(super) algorithm: Option<Spanned<String>>,
    pub(super) buckets: Option<Spanned<u32>>,
    pub(super) max_delay: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
    pub(super) trusted_proxies: Option<Spanned<Vec<Spanned<String>>>>,
    /// The one forwarding header `client_ip` believes (`TrustedProxies::header`).
    pub(super) proxy_header: Option<Spanned<String>>,
    pub(super) on_missing_key: Option<Spanned<String>>,
    /// `"METHOD /template" = cost`, plus `default = cost`.
    pub(super) costs: Option<BTreeMap<Spanned<String>, Spanned<u32>>>,
    pub(super) plan_from: Option<Spanned<String>>,
    pub(super) plans: Option<Spanned<BTreeMap<Spanned<String>, Spanned<PlanSpec>>>>,
    /// `["POST /login", "* /admin/{*rest}"]`: the requests the limit applies to.
    pub(super) routes: Option<Spanned<Vec<Spanned<String>>>>,
    /// `[401, 403, "5xx"]`: the response statuses that count.
    pub(super) count_when: Option<Spanned<Vec<Spanned<toml::Value>>>>,
    pub(super) penalty: Option<Spanned<PenaltySpec>>,
    /// The name of the limit whose missing key this one stands in for.
    pub(super) fallback_for: Option<Spanned<String>>,
    /// Rollout: the share of callers enforced (`0.1`), or shadow mode for all.
    pub(super) enforce: Option<Spanned<Share>>,
    pub(super) shadow: Option<Spanned<bool>>,
    /// At most this many requests of one key at once.
    pub(super) in_flight: Option<Spanned<u32>>,
    /// Hold a request that will fit within this long instead of rejecting it.
    pub(super) wait: Option<Spanned<String>>,
    /// Settle each request to the actual its handler reports (`Meter`).
    pub(super) metered: Option<Spanned<bool>>,
    /// The most one request is settled to.
    pub(super) max_actual: Option<Spanned<u64>>,
    /// Bytes as the unit: `"request-bytes"` or `"response-bytes"`.
    pub(super) meter: Option<Spanned<String>>,
}

/// `penalty = { after = 5, within = "1min", block_for = "10min" }`, and to escalate,
/// `escalate = ["30min", "2h"]`, `escalate_by = { factor = 2, cap = "1d" }`,
/// `remember = "1d"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PenaltySpec {
    pub(super) after: Spanned<u32>,
    pub(super) within: Option<Spanned<String>>,
    pub(super) block_for: Spanned<String>,
    /// The blocks of the 2nd, 3rd, … remembered trips.
    pub(super) escalate: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) escalate_by: Option<Spanned<EscalateBySpec>>,
    pub(super) remember: Option<Spanned<String>>,
}

/// `escalate_by = { factor = 2, cap = "1h" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EscalateBySpec {
    pub(super) factor: Spanned<u32>,
    pub(super) cap: Spanned<String>,
}

/// A share written as a float (`0.1`) or an integer (`0`, `1`): TOML keeps the two
/// apart, and `enforce = 1` should read as every caller.
#[derive(Clone, Copy)]
pub(super) struct Share(pub(super) f64);

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ShareVisitor;

        impl Visitor<'_> for ShareVisitor {
            type Value = Share;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a share of callers from 0 to 1, such as 0.1")
            }

            fn visit_f64<E: de::Error>(self, share: f64) -> Result<Share, E> {
                Ok(Share(share))
            }

            fn visit_i64<E: de::Error>(self, share: i64) -> Result<Share, E> {
                Ok(Share(share as f64))
            }

            fn visit_u64<E: de::Error>(self, share: u64) -> Result<Share, E> {
                Ok(Share(share as f64))
            }
        }

        deserializer.deserialize_any(ShareVisitor)
    }
}

/// A plan's quota: `pro = "1000/min"`, or `pro = { quota = "1000/min", burst = 50 }`
/// when the plan needs its own burst.
pub(super) enum PlanSpec {
    /// The notation alone; its place is the place of the whole value.
    Quota(String),
    Table(PlanTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanTable {
    pub(super) quota: Spanned<String>,
    pub(super) burst: Option<Spanned<u64>>,
}

// By hand rather than `#[serde(untagged)]`: untagged enums buffer the value first,
// and a buffered value has lost its place in the text (no `Spanned` inside).
impl<'de> Deserialize<'de> for PlanSpec {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PlanVisitor;

        impl<'de> Visitor<'de> for PlanVisitor {
            type Value = PlanSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a quota such as \"1000/min\", or a table { quota = \"1000/min\", burst = 50 }",
                )
            }

            fn visit_str<E: de::Error>(self, quota: &str) -> Result<PlanSpec, E> {
                Ok(PlanSpec::Quota(quota.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PlanSpec, A::Error> {
                PlanTable::deserialize(MapAccessDeserializer::new(map)).map(PlanSpec::Table)
            }
        }

        deserializer.deserialize_any(PlanVisitor)
    }
}
