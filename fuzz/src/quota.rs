//! The quota notation parser: `Quota::from_str` and `Quota::parse_many`.
//!
//! Input: any bytes, read as text (invalid UTF-8 replaced).
//!
//! Properties: no panic; an accepted quota is within its documented bounds and reads
//! back from its own `Display`; a rejection quotes the input; `parse_many` accepts
//! exactly the lists whose parts all parse.

use std::time::Duration;

use tollgate::Quota;

/// 100 years of 365 days.
const CENTURY: Duration = Duration::from_hours(100 * 365 * 24);

pub fn check(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    match input.parse::<Quota>() {
        Ok(quota) => check_valid(&quota),
        Err(err) => {
            let message = err.to_string();
            let quoted = format!("invalid quota \"{}\"", input.escape_debug());
            assert!(
                message.starts_with(&quoted),
                "error {message:?} does not quote input {input:?}"
            );
        }
    }
    let parts: Vec<&str> = input
        .split([';', ',', '|'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect();
    match Quota::parse_many(&input) {
        Ok(quotas) => {
            assert_eq!(quotas.len(), parts.len(), "{input:?}");
            for (quota, part) in quotas.iter().zip(&parts) {
                assert_eq!(Ok(*quota), part.parse::<Quota>().map_err(drop), "{part:?}");
                check_valid(quota);
            }
        }
        Err(_) => assert!(
            parts.is_empty() || parts.iter().any(|part| part.parse::<Quota>().is_err()),
            "parse_many rejected {input:?}, whose parts all parse"
        ),
    }
}

fn check_valid(quota: &Quota) {
    assert!((1..=Quota::MAX_COUNT).contains(&quota.limit()), "{quota:?}");
    assert!((1..=Quota::MAX_COUNT).contains(&quota.burst()), "{quota:?}");
    let period = quota.period();
    assert!(
        period >= Duration::from_micros(1) && period <= CENTURY,
        "{quota:?}"
    );
    assert_eq!(period.subsec_nanos() % 1_000, 0, "{quota:?}");
    let shown = quota.to_string();
    assert_eq!(
        shown.parse::<Quota>().ok(),
        Some(*quota),
        "{shown:?} does not read back"
    );
}
