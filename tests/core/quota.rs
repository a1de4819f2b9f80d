//! The quota notation: what parses, what it means, and how bad input is reported.

use std::time::Duration;

use tollgate::Quota;

fn q(limit: u64, secs: u64) -> Quota {
    Quota::new(limit, Duration::from_secs(secs)).expect("valid quota")
}

#[test]
fn parses_the_common_notations() {
    let cases = [
        ("100/min", q(100, 60)),
        ("10/s", q(10, 1)),
        ("5000/1h", q(5000, 3600)),
        ("20 per 10 seconds", q(20, 10)),
        ("1/2 days", q(1, 2 * 86_400)),
        ("  7 / 3 SECONDS ", q(7, 3)),
        ("60 Per Minute", q(60, 60)),
        ("1/d", q(1, 86_400)),
        ("3/hr", q(3, 3600)),
        ("2 per 5 mins", q(2, 300)),
        ("10_000/h", q(10_000, 3600)),
        ("9/m", q(9, 60)),
    ];
    for (text, expected) in cases {
        assert_eq!(text.parse::<Quota>(), Ok(expected), "{text}");
    }
    assert_eq!(
        "50/250ms".parse::<Quota>(),
        Quota::new(50, Duration::from_millis(250))
    );
}

#[test]
fn display_round_trips_through_the_parser() {
    for quota in [
        q(100, 60),
        q(1, 86_400),
        q(5, 2),
        q(3, 7200),
        Quota::new(9, Duration::from_micros(1500)).expect("valid"),
        Quota::new(2, Duration::from_millis(250)).expect("valid"),
    ] {
        assert_eq!(quota.to_string().parse::<Quota>(), Ok(quota), "{quota}");
    }
}

#[test]
fn rejects_bad_input_quoting_it_and_saying_what_was_expected() {
    for bad in [
        "",
        "100",
        "100/",
        "/min",
        "abc/min",
        "100/fortnight",
        "100/month",
        "100/year",
        "1.5/s",
        "-1/s",
        "100 every minute",
        "100/min/extra",
        "99999999999999999999999/s",
    ] {
        let err = bad.parse::<Quota>().expect_err(bad);
        let message = err.to_string();
        assert!(
            message.contains(&format!("\"{bad}\"")),
            "{bad:?}: message does not quote the input: {message}"
        );
        assert!(
            message.contains("expected") || message.contains("must") || message.contains("too"),
            "{bad:?}: message does not say what was expected: {message}"
        );
    }
}

#[test]
fn zero_anything_is_an_error() {
    for bad in ["0/s", "10/0s", "10 per 0 minutes", "0 per 0 s"] {
        let err = bad.parse::<Quota>().expect_err(bad);
        assert!(err.to_string().contains(bad), "{err}");
    }
    assert!(Quota::new(0, Duration::from_secs(1)).is_err());
    assert!(Quota::new(1, Duration::ZERO).is_err());
    assert!(Quota::per_second(1).with_burst(0).is_err());
}

#[test]
fn rejects_periods_that_are_not_whole_microseconds_or_absurdly_long() {
    assert!(Quota::new(1, Duration::from_nanos(1500)).is_err());
    assert!(Quota::new(1, Duration::from_secs(200 * 365 * 86_400)).is_err());
    assert!(Quota::new(tollgate::Quota::MAX_COUNT + 1, Duration::from_secs(1)).is_err());
    assert!(Quota::new(tollgate::Quota::MAX_COUNT, Duration::from_secs(1)).is_ok());
}

#[test]
#[should_panic(expected = "quota limit must be between 1 and 2^40")]
fn literal_constructors_panic_on_zero() {
    let _ = Quota::per_second(0);
}

#[test]
fn parse_many_splits_on_every_separator() {
    let expected = vec![q(10, 1), q(1000, 3600), q(5, 60)];
    assert_eq!(
        Quota::parse_many("10/s; 1000/h, 5/min"),
        Ok(expected.clone())
    );
    assert_eq!(Quota::parse_many("10/s|1000/h|5/min"), Ok(expected.clone()));
    assert_eq!(Quota::parse_many("10/s;1000/h;5/min;"), Ok(expected));
    let err = Quota::parse_many("10/s; 5/fortnight").expect_err("bad part");
    assert!(err.to_string().contains("\"5/fortnight\""), "{err}");
    assert!(Quota::parse_many(" ; ").is_err());
}

#[test]
fn burst_defaults_to_the_limit() {
    let quota = Quota::per_minute(100);
    assert_eq!(quota.burst(), 100);
    assert!(!quota.has_custom_burst());
    let quota = quota.with_burst(20).expect("valid burst");
    assert_eq!((quota.limit(), quota.burst()), (100, 20));
    assert_eq!(format!("{quota:?}"), "Quota(100/min, burst 20)");
}
