//! The request rules a `[[limit]]` may add beyond its quota and key: the routes it
//! applies to (`routes`), the responses that count (`count_when`) and its penalty box
//! (`penalty`, with its escalation), each through the same method a program calls, each mistake placed at
//! its value.

use std::ops::Range;

use http::StatusCode;
use toml::Spanned;

use super::build::{duration, method_and_template};
use super::place::Text;
use super::schema::{LimitSpec, PenaltySpec};
use crate::penalty::Culprit;
use crate::{ConfigError, Penalty, Policy};

/// `policy` with the routes, counted statuses and penalty `spec` gives it.
pub(super) fn apply(
    text: &Text<'_>,
    policy: Policy,
    spec: &LimitSpec,
) -> Result<Policy, ConfigError> {
    let mut policy = policy;
    if let Some(routes) = &spec.routes {
        policy = self::routes(text, policy, routes)?;
    }
    if let Some(statuses) = &spec.count_when {
        policy = count_when(text, policy, statuses)?;
    }
    policy = work(text, policy, spec)?;
    if let Some(penalty) = &spec.penalty {
        let penalty = self::penalty(text, spec.name.get_ref(), penalty)?;
        policy = policy.penalty(penalty);
    }
    Ok(policy)
}

fn routes(
    text: &Text<'_>,
    mut policy: Policy,
    routes: &Spanned<Vec<Spanned<String>>>,
) -> Result<Policy, ConfigError> {
    if routes.get_ref().is_empty() {
        return Err(text.place(
            ConfigError::new(
                "routes = []: a limit on no route limits nothing; list at least one \
                 \"<METHOD> <route>\", or leave routes out to limit every request",
            ),
            &routes.span(),
        ));
    }
    for route in routes.get_ref() {
        let at = |error: ConfigError| text.place(error, &route.span());
        let (method, template) = method_and_template(route.get_ref(), "route").map_err(at)?;
        policy = match method {
            Some(method) => policy.on_route(method, template),
            None => policy.on_route_any(template),
        }
        .map_err(at)?;
    }
    Ok(policy)
}

/// A counted status: one code (`401`), or a class (`"5xx"`).
#[derive(Clone, Copy)]
enum Counted {
    Status(u16),
    Class(u16),
}

fn count_when(
    text: &Text<'_>,
    policy: Policy,
    statuses: &Spanned<Vec<Spanned<toml::Value>>>,
) -> Result<Policy, ConfigError> {
    if statuses.get_ref().is_empty() {
        return Err(text.place(
            ConfigError::new(
                "count_when = []: no response would count; list statuses such as [401, \"5xx\"], \
                 or leave count_when out to count every response",
            ),
            &statuses.span(),
        ));
    }
    let counted = statuses
        .get_ref()
        .iter()
        .map(|status| counted(status.get_ref()).map_err(|e| text.place(e, &status.span())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(policy.count_when(move |status: StatusCode| {
        let code = status.as_u16();
        counted.iter().any(|counted| match *counted {
            Counted::Status(one) => one == code,
            Counted::Class(class) => class == code / 100,
        })
    }))
}

fn counted(value: &toml::Value) -> Result<Counted, ConfigError> {
    let shown = match value {
        toml::Value::Integer(code) => code.to_string(),
        toml::Value::String(text) => format!("\"{}\"", text.escape_debug()),
        other => format!("(a {})", other.type_str()),
    };
    let invalid = || {
        ConfigError::new(format!(
            "invalid count_when status {shown}: expected a status code from 100 to 599 (401) \
             or a class (\"4xx\", \"5xx\")"
        ))
    };
    match value {
        toml::Value::Integer(code) => u16::try_from(*code)
            .ok()
            .filter(|code| (100..600).contains(code))
            .map(Counted::Status)
            .ok_or_else(invalid),
        toml::Value::String(class) => match class.as_bytes() {
            [digit @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => {
                Ok(Counted::Class(u16::from(digit - b'0')))
            }
            _ => Err(invalid()),
        },
        _ => Err(invalid()),
    }
}

fn penalty(
    text: &Text<'_>,
    limit: &str,
    spec: &Spanned<PenaltySpec>,
) -> Result<Penalty, ConfigError> {
    let table = spec.get_ref();
    let at = |error: ConfigError, span: Range<usize>| text.place(error, &span);
    let read = |value: &Spanned<String>| duration(value.get_ref()).map_err(|e| at(e, value.span()));
    let mut penalty = Penalty::after(*table.after.get_ref()).block_for(read(&table.block_for)?);
    if let Some(within) = &table.within {
        penalty = penalty.within(read(within)?);
    }
    if let Some(steps) = &table.escalate {
        if steps.get_ref().is_empty() {
            return Err(at(
                ConfigError::new(
                    "escalate = []: list the blocks of the 2nd, 3rd, … trips, e.g. \
                     [\"30min\", \"2h\"], or leave escalate out",
                ),
                steps.span(),
            ));
        }
        let blocks = steps
            .get_ref()
            .iter()
            .map(read)
            .collect::<Result<Vec<_>, _>>()?;
        penalty = penalty.escalate(&blocks);
    }
    if let Some(growth) = &table.escalate_by {
        let growth = growth.get_ref();
        penalty = penalty.escalate_by(*growth.factor.get_ref(), read(&growth.cap)?);
    }
    if let Some(remember) = &table.remember {
        penalty = penalty.remember(read(remember)?);
    }
    // Placed at the value that is wrong (the whole table for one that is missing).
    if let Some((culprit, why)) = penalty.problem() {
        let span = match culprit {
            Culprit::After => Some(table.after.span()),
            Culprit::Within => table.within.as_ref().map(Spanned::span),
            Culprit::BlockFor => Some(table.block_for.span()),
            Culprit::Escalate => table.escalate.as_ref().map(Spanned::span),
            Culprit::Step(i) => table
                .escalate
                .as_ref()
                .and_then(|steps| steps.get_ref().get(i))
                .map(Spanned::span),
            Culprit::Factor => table
                .escalate_by
                .as_ref()
                .map(|growth| growth.get_ref().factor.span()),
            Culprit::Cap => table
                .escalate_by
                .as_ref()
                .map(|growth| growth.get_ref().cap.span()),
            Culprit::Remember => table.remember.as_ref().map(Spanned::span),
            Culprit::Whole => None,
        };
        return Err(at(
            Penalty::invalid(limit, &why),
            span.unwrap_or_else(|| spec.span()),
        ));
    }
    Ok(penalty)
}

/// Each `fallback_for = "<name>"` limit made to apply only to requests the named
/// limit finds no key for; the name must be another limit of the file, itself no
/// fallback (a chain would hide which key a caller is counted by).
pub(super) fn fallbacks(
    text: &Text<'_>,
    specs: &[LimitSpec],
    mut policies: Vec<Policy>,
) -> Result<Vec<Policy>, ConfigError> {
    for (index, spec) in specs.iter().enumerate() {
        let Some(main) = &spec.fallback_for else {
            continue;
        };
        let at = |error: ConfigError| text.place(error, &main.span());
        let found = specs
            .iter()
            .position(|other| other.name.get_ref() == main.get_ref());
        let main_index = match found {
            Some(main_index) if main_index == index => {
                return Err(at(ConfigError::new(format!(
                    "fallback_for \"{}\": a limit cannot stand in for itself",
                    main.get_ref().escape_debug()
                ))));
            }
            Some(main_index) if specs[main_index].fallback_for.is_some() => {
                return Err(at(ConfigError::new(format!(
                    "fallback_for \"{}\": that limit is itself a fallback; name the limit whose key it stands in for",
                    main.get_ref().escape_debug()
                ))));
            }
            Some(main_index) => main_index,
            None => {
                return Err(at(ConfigError::new(format!(
                    "fallback_for \"{}\": no [[limit]] of that name in this file",
                    main.get_ref().escape_debug()
                ))));
            }
        };
        let main = policies[main_index].clone();
        let fallback = policies[index]
            .clone()
            .fallback_for(&main)
            .map_err(|e| text.place(e, &spec.fallback_for.as_ref().map_or(0..0, Spanned::span)))?;
        policies[index] = fallback;
    }
    Ok(policies)
}

/// How the limit meets the work itself: requests at once (`in_flight`), holding
/// instead of rejecting (`wait`), and metering (`metered`, `max_actual`, `meter`).
fn work(text: &Text<'_>, mut policy: Policy, spec: &LimitSpec) -> Result<Policy, ConfigError> {
    if let Some(max) = &spec.in_flight {
        policy = policy
            .in_flight(*max.get_ref())
            .map_err(|e| text.place(e, &max.span()))?;
    }
    if let Some(wait) = &spec.wait {
        policy = policy.wait(duration(wait.get_ref()).map_err(|e| text.place(e, &wait.span()))?);
    }
    if let Some(metered) = &spec.metered
        && *metered.get_ref()
    {
        policy = policy.metered();
    }
    if let Some(max) = &spec.max_actual {
        if *max.get_ref() == 0 {
            return Err(text.place(
                ConfigError::new(
                    "invalid max_actual 0: every request would be settled to 0 and charged \
                     nothing, so the limit would limit nothing; set at least 1, or leave \
                     max_actual out",
                ),
                &max.span(),
            ));
        }
        policy = policy.max_actual(*max.get_ref());
    }
    if let Some(unit) = &spec.meter {
        policy = match unit.get_ref().as_str() {
            "request-bytes" => policy.meter_request_bytes(),
            "response-bytes" => policy.meter_response_bytes(),
            other => {
                return Err(text.place(
                    ConfigError::new(format!(
                        "invalid meter \"{}\": expected \"request-bytes\" or \"response-bytes\"",
                        other.escape_debug()
                    )),
                    &unit.span(),
                ));
            }
        };
    }
    Ok(policy)
}
