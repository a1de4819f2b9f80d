//! [`Algorithm::LeakyBucket`]: GCRA's rule with the queue's tail as `TAT`;
//! delay = `max(TAT, now) − now`.

use super::{Algorithm, Scenario, deny, never, peek, queued, refund};

/// L = 10, P = 1 s, B = 3: T = 100 ms, B·T = 300 ms.
pub const LEAKY_BUCKET_EDGES: Scenario = Scenario {
    name: "leaky_bucket/edges",
    quota: "10/s",
    burst: Some(3),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 3, 0),
        // B requests at one instant: delays 0, T, 2T; TAT 100, 200, 300 ms
        queued(0, 1, 2, 100_000, 0),
        queued(0, 1, 1, 200_000, 100_000),
        queued(0, 1, 0, 300_000, 200_000),
        // 300 + 100 − 0 > 300; retry 300 + 100 − 300 − 0 = 100 ms
        deny(0, 1, 0, 300_000, 100_000),
        never(0, 4, 0, 300_000),
        // 1 µs early: 400 − 99.999 = 300.001 > 300; retry 1 µs; remaining
        // floor((99.999 + 300 − 300)/100) = 0; reset 300 000 − 99 999
        deny(99_999, 1, 0, 200_001, 1),
        // 400 − 100 = 300 ≤ 300: delay 300 − 100 = 200 ms, TAT 400 ms
        queued(100_000, 1, 0, 300_000, 200_000),
        // floor((250 + 300 − 400)/100) = 1; reset 400 − 250 ms
        peek(250_000, 1, 150_000),
        // 400 + 200 − 250 = 350 > 300; retry 400 + 200 − 300 − 250 = 50 ms
        deny(250_000, 2, 1, 150_000, 50_000),
        // 400 + 200 − 300 = 300 ≤ 300: delay 400 − 300 = 100 ms, TAT 600 ms
        queued(300_000, 2, 0, 300_000, 100_000),
        // idle again (TAT 600 < 1000): c = B from idle, delay 0, TAT 1300 ms
        queued(1_000_000, 3, 0, 300_000, 0),
    ],
};

/// L = 3, P = 1 s, B = 2: T = 333 333 334 ns, B·T = 666 666 668 ns; delays rounded
/// up to µs, refunds, and a clock that goes back.
pub const LEAKY_BUCKET_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "leaky_bucket/refund-backwards",
    quota: "3/s",
    burst: Some(2),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = T; remaining floor((B·T − T)/T) = 1; reset 333 333.334 → 333 334
        queued(0, 1, 1, 333_334, 0),
        // T + T ≤ B·T: delay T = 333 333.334 → 333 334; TAT = 666 666 668;
        // reset 666 666.668 → 666 667
        queued(0, 1, 0, 666_667, 333_334),
        // retry 666 666 668 + T − B·T = 333 333 334 ns → 333 334
        deny(0, 1, 0, 666_667, 333_334),
        // c = B: retry 666 666 668 + 2T − B·T = 666 666 668 ns → 666 667 = reset
        deny(0, 2, 0, 666_667, 666_667),
        // TAT = max(0, 666 666 668 − T) = 333 333 334
        refund(0, 1),
        peek(0, 1, 333_334),
        // 333 333 334 + T − 200 000 000 = 466 666 668 ≤ B·T: delay
        // 133 333 334 ns → 133 334; TAT = 666 666 668; remaining floor(200 000 000/T)
        // = 0; reset 666 667 − 200 000
        queued(200_000, 1, 0, 466_667, 133_334),
        // Back to 100 ms: 666 666 668 + T − 100 000 000 = 900 000 002 > B·T; retry
        // 1 000 000 002 − B·T − 100 000 000 = 233 333 334 ns → 233 334;
        // reset 666 667 − 100 000
        deny(100_000, 1, 0, 566_667, 233_334),
        // 1 µs early: 1 000 000 002 − 333 333 000 = 666 667 002 > B·T; retry 334 ns → 1;
        // reset 666 667 − 333 333
        deny(333_333, 1, 0, 333_334, 1),
        // 1 000 000 002 − 333 334 000 = 666 666 002 ≤ B·T: delay 666 666 668 −
        // 333 334 000 = 333 332 668 ns → 333 333; TAT = 1 000 000 002;
        // reset 1 000 001 − 333 334
        queued(333_334, 1, 0, 666_667, 333_333),
        // TAT = max(333 334 000, 1 000 000 002 − 2T = 333 333 334) = 333 334 000 = now:
        // idle, not better
        refund(333_334, 2),
        peek(333_334, 2, 0),
        peek(5_000_000, 2, 0),
    ],
};

/// L = 10, P = 1 s, B = 2 (T = 100 ms, B·T = 200 ms): a request queued while the
/// clock is behind the latest instant seen; its delay runs on the caller's clock.
pub const LEAKY_BUCKET_BACKWARDS_DELAY: Scenario = Scenario {
    name: "leaky_bucket/backwards-delay",
    quota: "10/s",
    burst: Some(2),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = 100 ms; remaining floor((200 − 100)/100) = 1
        queued(0, 1, 1, 100_000, 0),
        // floor((50 + 200 − 100)/100) = 1; reset 100 − 50 ms
        peek(50_000, 1, 50_000),
        // Back to 20 ms: max(TAT, now) = 100; 100 + 100 − 20 = 180 ≤ 200: the request
        // waits for the queue ahead of it, delay 100 − 20 = 80 ms. TAT = 200 ms;
        // remaining floor((20 + 200 − 200)/100) = 0; reset 200 − 20 ms
        queued(20_000, 1, 0, 180_000, 80_000),
        // 200 + 100 − 200 − 20 = 80 ms
        deny(20_000, 1, 0, 180_000, 80_000),
    ],
};

/// L = 10, P = 1 s, B = 10 (T = 100 ms, B·T = 1 s), `max_delay` 250 ms: a place is
/// given only if the queue ahead drains within 250 ms, `start ≤ now + 250 ms`;
/// `remaining` counts the queue's free places as GCRA does.
pub const LEAKY_BUCKET_MAX_DELAY: Scenario = Scenario {
    name: "leaky_bucket/max-delay",
    quota: "10/s",
    burst: Some(10),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: Some(250_000),
    penalty: None,
    steps: &[
        peek(0, 10, 0),
        // start 0: delay 0, TAT 100 ms; remaining floor((1000 − 100)/100)
        queued(0, 1, 9, 100_000, 0),
        // start 100 ≤ 250: delay 100 ms, TAT 200
        queued(0, 1, 8, 200_000, 100_000),
        // start 200 ≤ 250: delay 200 ms, TAT 300
        queued(0, 1, 7, 300_000, 200_000),
        // start 300 > 250: denied, although GCRA's rule holds (300 + 100 ≤ 1000);
        // retry when 300 − 250 = 50 ms; nothing charged (reset still 300 ms)
        deny(0, 1, 7, 300_000, 50_000),
        // the bound is on when a request is served, whatever its cost
        deny(0, 2, 7, 300_000, 50_000),
        // 300 + 800 > 1000 too: GCRA's retry 300 + 800 − 1000 = 100 ms is the later
        deny(0, 8, 7, 300_000, 100_000),
        never(0, 11, 7, 300_000),
        // at the retry: start 300 ≤ 50 + 250, delay exactly 250 ms; TAT 400;
        // remaining floor((50 + 1000 − 400)/100) = 6; reset 400 − 50
        queued(50_000, 1, 6, 350_000, 250_000),
        // 1 µs early: start 400 > 399.999; retry 400 000 − 250 000 − 149 999 = 1 µs;
        // remaining floor((149.999 + 1000 − 400)/100) = 7; reset 400 000 − 149 999
        deny(149_999, 1, 7, 250_001, 1),
        // cost 4 served at 400 ≤ 150 + 250 (delay 250 ms) although its units drain
        // until 800: 800 ≤ 150 + 1000; TAT 800; remaining floor((1150 − 800)/100) = 3;
        // reset 800 − 150
        queued(150_000, 4, 3, 650_000, 250_000),
        // TAT = max(150, 800 − 400) = 400
        refund(150_000, 4),
        // floor((150 + 1000 − 400)/100) = 7; reset 400 − 150
        peek(150_000, 7, 250_000),
        // a place 250 ms away again: 400 ≤ 150 + 250; TAT 500
        queued(150_000, 1, 6, 350_000, 250_000),
        peek(1_000_000, 10, 0),
    ],
};

/// L = 1, P = 1 h, B = 1000 (T = 1 h, B·T = 1000 h), the default `max_delay` of one
/// period: the 1000th place would wait 999 h (41 days); the bound gives only the
/// places served within 1 h.
pub const LEAKY_BUCKET_DEFAULT_MAX_DELAY: Scenario = Scenario {
    name: "leaky_bucket/default-max-delay",
    quota: "1/h",
    burst: Some(1_000),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 1_000, 0),
        // delay 0, TAT 1 h
        queued(0, 1, 999, 3_600_000_000, 0),
        // start 1 h ≤ 0 + 1 h: delay 1 h, TAT 2 h
        queued(0, 1, 998, 7_200_000_000, 3_600_000_000),
        // start 2 h > 1 h: denied, retry 2 h − 1 h; nothing charged
        deny(0, 1, 998, 7_200_000_000, 3_600_000_000),
        // c = B: GCRA's rule too, 2 h + 1000 h − 1000 h = 2 h is the later
        deny(0, 1_000, 998, 7_200_000_000, 7_200_000_000),
        // at the retry: start 2 h ≤ 1 h + 1 h, delay 1 h; TAT 3 h; remaining
        // floor((1 h + 1000 h − 3 h)/1 h) = 998; reset 3 h − 1 h
        queued(3_600_000_000, 1, 998, 7_200_000_000, 3_600_000_000),
    ],
};

/// L = 10, P = 1 s, B = 3 (T = 100 ms), `max_delay` 0: only a request served at once is
/// admitted, so the queue never holds anyone.
pub const LEAKY_BUCKET_ZERO_MAX_DELAY: Scenario = Scenario {
    name: "leaky_bucket/zero-max-delay",
    quota: "10/s",
    burst: Some(3),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: Some(0),
    penalty: None,
    steps: &[
        // TAT 100 ms
        queued(0, 1, 2, 100_000, 0),
        // start 100 > 0: retry 100 − 0 = 100 ms, although GCRA's rule holds
        deny(0, 1, 2, 100_000, 100_000),
        // start 100 = now: served at once; TAT 200 ms; floor((100 + 300 − 200)/100)
        queued(100_000, 1, 2, 100_000, 0),
        // TAT = max(100, 200 − 100) = 100 ms: idle
        refund(100_000, 1),
        peek(100_000, 3, 0),
    ],
};

/// L = 10, P = 1 s, B = 2 (T = 100 ms, B·T = 200 ms), `max_delay` 60 ms: the bound is
/// measured from the latest instant the key's store has seen (the instant the rule
/// computes at), so a caller whose clock is behind it hears a longer delay (the layer
/// never holds a request longer than `max_delay` all the same).
pub const LEAKY_BUCKET_MAX_DELAY_BACKWARDS: Scenario = Scenario {
    name: "leaky_bucket/max-delay-backwards",
    quota: "10/s",
    burst: Some(2),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: Some(60_000),
    penalty: None,
    steps: &[
        // TAT 100 ms; floor((200 − 100)/100) = 1
        queued(0, 1, 1, 100_000, 0),
        // start 100 > 0 + 60: denied; retry 100 − 60
        deny(0, 1, 1, 100_000, 40_000),
        // floor((50 + 200 − 100)/100) = 1; reset 100 − 50
        peek(50_000, 1, 50_000),
        // Back to 20 ms, computed at 50 ms: start 100 ≤ 50 + 60, admitted; its delay
        // runs on the caller's clock, 100 − 20 = 80 ms. TAT 200; reset 200 − 20
        queued(20_000, 1, 0, 180_000, 80_000),
        // GCRA's rule fails (200 + 100 > 50 + 200), its retry at 100 ms; the bound's
        // at 200 − 60 = 140 ms, the later: 140 − 20 = 120 ms
        deny(20_000, 1, 0, 180_000, 120_000),
    ],
};
