//! From the file's values to [`Policy`]s, through the same constructors a program
//! calls (`Quota` parsing, `Limit::new`, `Costs::route`, `TrustedProxies::new`), so a
//! file accepts exactly what the builder accepts. Each mistake is placed at the value
//! that causes it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use toml::Spanned;

use super::PlanName;
use super::place::Text;
use super::schema::{LimitSpec, PlanSpec};
use crate::key::{self, Extractor};
use crate::key::{ProxyHeader, TrustedProxies};
use crate::layer::{Costs, MissingKey};
use crate::{Algorithm, ConfigError, Limit, Policy, Quota};

/// The policies of every `[[limit]]`, in file order.
pub(super) fn policies(text: &Text<'_>, specs: &[LimitSpec]) -> Result<Vec<Policy>, ConfigError> {
    let mut names = HashSet::new();
    let mut policies = Vec::with_capacity(specs.len());
    for spec in specs {
        if !names.insert(spec.name.get_ref().clone()) {
            return Err(text.place(
                ConfigError::new(format!(
                    "duplicate limit name \"{}\": each [[limit]] needs its own name",
                    spec.name.get_ref().escape_debug()
                )),
                &spec.name.span(),
            ));
        }
        policies.push(policy(text, spec)?);
    }
    super::rules::fallbacks(text, specs, policies)
}

fn policy(text: &Text<'_>, spec: &LimitSpec) -> Result<Policy, ConfigError> {
    let at = |error: ConfigError, span: Range<usize>| text.place(error, &span);

    let quota = quota(text, &spec.quota, spec.burst.as_ref())?;
    let algorithm = algorithm(text, spec.algorithm.as_ref(), spec.buckets.as_ref())?;
    let mut limit = Limit::new(spec.name.get_ref(), quota)
        .map_err(|e| at(e, spec.name.span()))?
        .algorithm(algorithm);
    if let Some(max_delay) = &spec.max_delay {
        if algorithm != Algorithm::LeakyBucket {
            return Err(at(
                ConfigError::new(format!(
                    "max_delay \"{}\" applies only to algorithm \"leaky_bucket\" (this limit uses \"{}\")",
                    max_delay.get_ref().escape_debug(),
                    algorithm.name()
                )),
                max_delay.span(),
            ));
        }
        limit =
            limit.max_delay(duration(max_delay.get_ref()).map_err(|e| at(e, max_delay.span()))?);
    }
    limit
        .validate()
        .map_err(|e| at(e, unsuited_span(spec, algorithm)))?;

    let mut policy = Policy::from(limit).key(extractor(text, spec)?);
    if let Some(choice) = &spec.on_missing_key {
        policy = policy.on_missing_key(match choice.get_ref().as_str() {
            "skip" => MissingKey::Skip,
            "reject" => MissingKey::Reject,
            other => {
                return Err(at(
                    ConfigError::new(format!(
                        "invalid on_missing_key \"{}\": expected \"skip\" or \"reject\"",
                        other.escape_debug()
                    )),
                    choice.span(),
                ));
            }
        });
    }
    if let Some(costs) = &spec.costs {
        let costs = self::costs(text, &policy, costs)?;
        policy = policy.costs(costs);
    }
    let policy = plans(text, policy, spec)?;
    let policy = super::rules::apply(text, policy, spec)?;
    let policy = rollout(text, policy, spec)?;
    // What the limiter builder would refuse is refused here, at the limit's name: the
    // checks above place each mistake more precisely, this keeps the two in step.
    policy.validate().map_err(|e| at(e, spec.name.span()))?;
    Ok(policy)
}

/// Where a quota that does not suit its algorithm is wrong: the burst a window
/// algorithm cannot honour, the buckets that do not divide the period, else the
/// algorithm.
fn unsuited_span(spec: &LimitSpec, algorithm: Algorithm) -> Range<usize> {
    let burst = spec.burst.as_ref().filter(|_| !algorithm.takes_burst());
    burst
        .map(Spanned::span)
        .or_else(|| spec.buckets.as_ref().map(Spanned::span))
        .or_else(|| spec.algorithm.as_ref().map(Spanned::span))
        .unwrap_or_else(|| spec.quota.span())
}

fn quota(
    text: &Text<'_>,
    notation: &Spanned<String>,
    burst: Option<&Spanned<u64>>,
) -> Result<Quota, ConfigError> {
    let quota: Quota = notation
        .get_ref()
        .parse()
        .map_err(|e| text.place(e, &notation.span()))?;
    match burst {
        Some(burst) => quota
            .with_burst(*burst.get_ref())
            .map_err(|e| text.place(e, &burst.span())),
        None => Ok(quota),
    }
}

fn algorithm(
    text: &Text<'_>,
    name: Option<&Spanned<String>>,
    buckets: Option<&Spanned<u32>>,
) -> Result<Algorithm, ConfigError> {
    let Some(name) = name else {
        return match buckets {
            Some(buckets) => {
                Err(text.place(buckets_without_counters(buckets, "gcra"), &buckets.span()))
            }
            None => Ok(Algorithm::default()),
        };
    };
    let found = Algorithm::ALL
        .into_iter()
        .find(|algorithm| algorithm.name() == name.get_ref())
        .ok_or_else(|| {
            let known: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            text.place(
                ConfigError::new(format!(
                    "unknown algorithm \"{}\": expected one of {}",
                    name.get_ref().escape_debug(),
                    known.join(", ")
                )),
                &name.span(),
            )
        })?;
    match (found, buckets) {
        (Algorithm::SlidingWindowCounters { .. }, Some(buckets)) => {
            Ok(Algorithm::SlidingWindowCounters { buckets: *buckets.get_ref() })
        }
        (Algorithm::SlidingWindowCounters { .. }, None) => Err(text.place(
            ConfigError::new(
                "algorithm \"sliding_window_counters\" needs buckets (sub-windows per period, e.g. buckets = 10)",
            ),
            &name.span(),
        )),
        (other, Some(buckets)) => Err(text.place(
            buckets_without_counters(buckets, other.name()),
            &buckets.span(),
        )),
        (other, None) => Ok(other),
    }
}

fn buckets_without_counters(buckets: &Spanned<u32>, algorithm: &str) -> ConfigError {
    ConfigError::new(format!(
        "buckets = {} applies only to algorithm \"sliding_window_counters\" (this limit uses \"{algorithm}\")",
        buckets.get_ref()
    ))
}

/// `"<n><unit>"` or `"<n> <unit>"`, with the units quotas use (`ms`, `s`, `min`, …).
pub(super) fn duration(notation: &str) -> Result<Duration, ConfigError> {
    let text = notation.trim().to_ascii_lowercase();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(digits_end);
    let micros = count
        .parse::<u64>()
        .ok()
        .zip(crate::quota::unit_micros(unit.trim()))
        .and_then(|(count, unit)| count.checked_mul(unit));
    micros.map(Duration::from_micros).ok_or_else(|| {
        ConfigError::new(format!(
            "invalid duration \"{}\": expected \"<count><unit>\" (units: ms, s, min, h, d), e.g. \"500ms\" or \"2s\"",
            notation.escape_debug()
        ))
    })
}

fn extractor(text: &Text<'_>, spec: &LimitSpec) -> Result<Extractor, ConfigError> {
    let at = |error: ConfigError, span: Range<usize>| text.place(error, &span);
    let name = spec
        .key
        .as_ref()
        .map_or("global", |key| key.get_ref().as_str());
    if let Some(proxies) = &spec.trusted_proxies
        && name != "client_ip"
    {
        return Err(at(
            ConfigError::new(format!(
                "trusted_proxies applies only to key \"client_ip\" (this limit's key is \"{}\")",
                name.escape_debug()
            )),
            proxies.span(),
        ));
    }
    if let Some(header) = &spec.proxy_header
        && name != "client_ip"
    {
        return Err(at(
            ConfigError::new(format!(
                "proxy_header applies only to key \"client_ip\" (this limit's key is \"{}\")",
                name.escape_debug()
            )),
            header.span(),
        ));
    }
    let key_span = || spec.key.as_ref().map_or(0..0, Spanned::span);
    Ok(match name {
        "global" => key::global(),
        "peer_ip" => key::peer_ip(),
        "matched_path" => key::matched_path(),
        "client_ip" => {
            let entries = spec
                .trusted_proxies
                .as_ref()
                .map_or(&[][..], |p| p.get_ref().as_slice());
            // One at a time first, so that the bad entry is the one placed.
            for entry in entries {
                TrustedProxies::new([entry.get_ref()]).map_err(|e| at(e, entry.span()))?;
            }
            let mut proxies = TrustedProxies::new(entries.iter().map(Spanned::get_ref))
                .map_err(|e| at(e, key_span()))?;
            if let Some(header) = &spec.proxy_header {
                proxies = proxies
                    .header(proxy_header(header.get_ref()).map_err(|e| at(e, header.span()))?);
            }
            key::client_ip(proxies)
        }
        other => match other.strip_prefix("header:") {
            Some(header) => key::header(header.trim()).map_err(|e| at(e, key_span()))?,
            None => {
                return Err(at(
                    ConfigError::new(format!(
                        "unknown key \"{}\": expected \"global\", \"peer_ip\", \"client_ip\", \
                         \"matched_path\" or \"header:<name>\"",
                        other.escape_debug()
                    )),
                    key_span(),
                ));
            }
        },
    })
}

/// The forwarding header `proxy_header` names, in any case.
fn proxy_header(name: &str) -> Result<ProxyHeader, ConfigError> {
    ProxyHeader::from_name(name).ok_or_else(|| {
        let known: Vec<String> = ProxyHeader::KNOWN
            .iter()
            .map(|header| format!("\"{}\"", header.name()))
            .collect();
        ConfigError::new(format!(
            "unknown proxy_header \"{}\": expected one of {}",
            name.escape_debug(),
            known.join(", ")
        ))
    })
}

fn costs(
    text: &Text<'_>,
    policy: &Policy,
    entries: &BTreeMap<Spanned<String>, Spanned<u32>>,
) -> Result<Costs, ConfigError> {
    let mut costs = Costs::new();
    for (route, cost) in entries {
        let single = if route.get_ref() == "default" {
            costs = costs.default(*cost.get_ref());
            Costs::new().default(*cost.get_ref())
        } else {
            let (method, template) = method_and_template(route.get_ref(), "cost route")
                .map_err(|e| text.place(e, &route.span()))?;
            let add = |costs: Costs| match &method {
                Some(method) => costs.route(method.clone(), template, *cost.get_ref()),
                None => costs.route_any(template, *cost.get_ref()),
            };
            costs = add(costs).map_err(|e| text.place(e, &route.span()))?;
            add(Costs::new().default(0)).map_err(|e| text.place(e, &route.span()))?
        };
        // Checked entry by entry, so the cost that can never pass is the one placed.
        single
            .validate(policy.name(), policy.capacity())
            .map_err(|e| text.place(e, &cost.span()))?;
    }
    Ok(costs)
}

/// `"POST /users"` → (POST, "/users"); `"* /admin/{*rest}"` → (any method, …).
/// `what` names the value in the error ("cost route", "route").
pub(super) fn method_and_template<'a>(
    route: &'a str,
    what: &str,
) -> Result<(Option<Method>, &'a str), ConfigError> {
    let invalid = |why: &str| {
        ConfigError::new(format!(
            "invalid {what} \"{}\": {why}",
            route.escape_debug()
        ))
    };
    let Some((method, template)) = route.trim().split_once(char::is_whitespace) else {
        return Err(invalid(
            "expected \"<METHOD> <route>\" (e.g. \"POST /users\", \"* /admin/{*rest}\") or \"default\"",
        ));
    };
    let template = template.trim();
    if method == "*" {
        return Ok((None, template));
    }
    // HTTP methods are case-sensitive: "post" would be a method no client sends.
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(invalid(
            "methods are case-sensitive: write them in capitals, e.g. \"POST\"",
        ));
    }
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|_| invalid("not an HTTP method"))?;
    Ok((Some(method), template))
}

/// The policy's rollout: `enforce = <share>` or `shadow = true`, not both.
fn rollout(text: &Text<'_>, policy: Policy, spec: &LimitSpec) -> Result<Policy, ConfigError> {
    match (&spec.enforce, &spec.shadow) {
        (Some(_), Some(shadow)) => Err(text.place(
            ConfigError::new(
                "shadow with enforce: say one (shadow = true is enforce = 0, shadow = false \
                 is enforce = 1)",
            ),
            &shadow.span(),
        )),
        (Some(share), None) => policy
            .enforce(share.get_ref().0)
            .map_err(|e| text.place(e, &share.span())),
        (None, Some(shadow)) => Ok(policy.shadow(*shadow.get_ref())),
        (None, None) => Ok(policy),
    }
}

/// Where a request's plan name is read from.
enum PlanFrom {
    Header(HeaderName),
    Extension,
}

fn plans(text: &Text<'_>, policy: Policy, spec: &LimitSpec) -> Result<Policy, ConfigError> {
    let at = |error: ConfigError, span: Range<usize>| text.place(error, &span);
    let (from, plans) = match (&spec.plan_from, &spec.plans) {
        (None, None) => return Ok(policy),
        (Some(from), None) => {
            return Err(at(
                ConfigError::new(format!(
                    "plan_from \"{}\" without plans: add a [limit.plans] table (plan name = quota)",
                    from.get_ref().escape_debug()
                )),
                from.span(),
            ));
        }
        (None, Some(plans)) => {
            return Err(at(
                ConfigError::new(
                    "plans without plan_from: say where a request's plan is read from \
                     (plan_from = \"header:<name>\" or \"extension\")",
                ),
                plans.span(),
            ));
        }
        (Some(from), Some(plans)) => (from, plans),
    };
    let source = match from.get_ref().as_str() {
        "extension" => PlanFrom::Extension,
        other => {
            let header = other
                .strip_prefix("header:")
                .map(str::trim)
                .ok_or_else(|| {
                    at(
                        ConfigError::new(format!(
                            "unknown plan_from \"{}\": expected \"header:<name>\" or \"extension\"",
                            other.escape_debug()
                        )),
                        from.span(),
                    )
                })?;
            let name = HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                at(
                    ConfigError::new(format!(
                        "invalid header name \"{}\" in plan_from: expected a token such as \"x-plan\"",
                        header.escape_debug()
                    )),
                    from.span(),
                )
            })?;
            PlanFrom::Header(name)
        }
    };

    let mut quotas = HashMap::with_capacity(plans.get_ref().len());
    for (name, plan) in plans.get_ref() {
        let quota = match plan.get_ref() {
            PlanSpec::Quota(notation) => {
                quota(text, &Spanned::new(plan.span(), notation.clone()), None)?
            }
            PlanSpec::Table(table) => quota(text, &table.quota, table.burst.as_ref())?,
        };
        // The plan's quota must suit the limit's algorithm as the limit's own does.
        Limit::new(policy.name(), quota)
            .map(|limit| limit.algorithm(policy.get_algorithm()))
            .and_then(|limit| limit.validate())
            .map_err(|e| {
                at(
                    ConfigError::new(format!(
                        "plan \"{}\": {}",
                        name.get_ref().escape_debug(),
                        e.message()
                    )),
                    plan.span(),
                )
            })?;
        quotas.insert(name.get_ref().clone(), quota);
    }
    let quotas = Arc::new(quotas);
    Ok(match source {
        PlanFrom::Extension => policy.quota_from(move |parts| {
            let plan = parts.extensions.get::<PlanName>()?;
            quotas.get(plan.0.as_str()).copied()
        }),
        PlanFrom::Header(header) => policy.quota_from(move |parts| {
            let plan = parts.headers.get(&header)?.to_str().ok()?;
            quotas.get(plan).copied()
        }),
    })
}
