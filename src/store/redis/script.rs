//! The Lua scripts, their arguments and their replies.
//!
//! Each algorithm's script is the prelude, the algorithm's file (the twin of the Rust
//! file with the same stem in `src/algorithm/`: its `decide` and the helpers that
//! calls), the driver's clock and common case, then the steps' prelude, the
//! algorithm's `_steps` file and the general driver, joined at compile time. Lua runs
//! a script's body on every call, creating a closure for each `local function` it
//! reaches, so a script defines only the algorithm it needs, and the common case (one
//! charge decided) returns before anything that only refunds and batches use; a
//! batch that mixes algorithms runs the script holding all seven, still in one round
//! trip.

use std::sync::LazyLock;

use redis::{Cmd, FromRedisValue, ParsingError, Script, ScriptInvocation, ToRedisArgs, Value};

use super::keys;
use crate::algorithm::Verdict;
use crate::store::Charge;
use crate::{Algorithm, Receipt, StoreError, StoreErrorKind};

/// The script `EVALSHA` runs, joined in the order `lua/README.md` gives.
macro_rules! script_source {
    ($($file:literal),+) => {
        concat!(
            include_str!("lua/prelude.lua"),
            $(include_str!(concat!("lua/", $file, "/decide.lua")),)+
            include_str!("lua/block.lua"),
            include_str!("lua/clock.lua"),
            include_str!("lua/lean.lua"),
            include_str!("lua/evalsha.lua"),
            include_str!("lua/prelude_steps.lua"),
            $(include_str!(concat!("lua/", $file, "/steps.lua")),)+
            include_str!("lua/evalsha_batch.lua"),
        )
    };
}

/// Calls `$join!` with every algorithm's Lua folder (the stem of its Rust file), in
/// the order both the script and the function library (`function.rs`) join them: the
/// leaky bucket builds on GCRA's functions, so it comes after it.
macro_rules! every_algorithm {
    ($join:ident) => {
        $join!(
            "fixed_window",
            "sliding_window",
            "sliding_window_counters",
            "sliding_window_log",
            "token_bucket",
            "gcra",
            "leaky_bucket"
        )
    };
}
pub(super) use every_algorithm;

/// Every script, in the order of [`index`]; the last one holds every algorithm.
/// `redis::Script` reloads a script by itself after a `NOSCRIPT` (a flush, a restart,
/// a failover to a replica that never saw it).
static SCRIPTS: LazyLock<[Script; 8]> = LazyLock::new(|| {
    [
        Script::new(script_source!("fixed_window")),
        Script::new(script_source!("sliding_window")),
        Script::new(script_source!("sliding_window_counters")),
        Script::new(script_source!("sliding_window_log")),
        Script::new(script_source!("token_bucket")),
        Script::new(script_source!("gcra")),
        // The leaky bucket is GCRA with a queue: it builds on GCRA's functions.
        Script::new(script_source!("gcra", "leaky_bucket")),
        Script::new(every_algorithm!(script_source)),
    ]
});

fn index(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingWindow => 1,
        Algorithm::SlidingWindowCounters { .. } => 2,
        Algorithm::SlidingWindowLog => 3,
        Algorithm::TokenBucket => 4,
        Algorithm::Gcra => 5,
        Algorithm::LeakyBucket => 6,
    }
}

/// The smallest script that can run every charge of the batch.
fn script_for<'c>(charges: impl IntoIterator<Item = &'c Charge<'c>>) -> &'static Script {
    let mut indices = charges
        .into_iter()
        .map(|c| index(c.limit.params().algorithm));
    let first = indices.next();
    let same = indices.all(|i| Some(i) == first);
    &SCRIPTS[match first {
        Some(i) if same => i,
        _ => 7,
    }]
}

/// What the script does with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Decide every charge at one instant and charge all of them or none.
    Acquire,
    /// Decide, charge nothing.
    DryRun,
    /// Return each charge's cost of its key's newest charges.
    Refund,
    /// Return each charge's cost of the one charge its receipt names.
    RefundCharges,
    /// Make each charge's key idle: state, block and penalty count deleted.
    Reset,
    /// Block each charge's key for its cost in µs (0 lifts the block).
    Block,
    /// Charge each cost whether or not it fits.
    Penalize,
    /// Reserve one charge's place within this many µs (`Limiter::reserve`).
    Reserve(u64),
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Self::Acquire => "a",
            Self::DryRun => "d",
            Self::Refund => "r",
            Self::RefundCharges => "c",
            Self::Reset => "x",
            Self::Block => "k",
            Self::Penalize => "p",
            Self::Reserve(_) => "w",
        }
    }

    /// Whether the call answers with verdicts, rather than only changing state.
    pub(super) fn decides(self) -> bool {
        matches!(
            self,
            Self::Acquire | Self::DryRun | Self::Block | Self::Penalize | Self::Reserve(_)
        )
    }

    /// Whether the function library runs this mode (for one charge): the common
    /// decisions; everything else is a script.
    pub(super) fn in_library(self) -> bool {
        matches!(self, Self::Acquire | Self::DryRun)
    }
}

/// When a charge's decision reads the caller's record (block.lua's `guarded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reads {
    /// When its state is marked or missing (prelude.lua): the common call.
    ByMark = 0,
    /// Always: its name was decided under another algorithm or period in this
    /// process (a reload), whose records did not mark this state.
    Always = 1,
    /// Always, and a record it writes also marks the base state (its key is passed
    /// before the record's): a charge under another period than its limit's (a plan),
    /// whose state an operator's block through the limit does not mark.
    AlwaysMarkingBase = 2,
}

/// Which clock a call decides on.
#[derive(Debug, Clone, Copy)]
pub(super) enum At {
    /// The injected clock's reading, in µs.
    Client(u64),
    /// The server's `TIME`, but never earlier than `floor` (the latest server time
    /// this store has seen, carried forward: see `server_time.rs`).
    Server { floor: Option<u64> },
}

/// One call's keys and arguments, sent as a script (`EVALSHA`) or, for a single
/// charge, as the function library's entry point (`FCALL`): both read the same.
/// The arguments are kept as numbers and written straight into the command, so a
/// call allocates its key names and little else.
pub(super) struct Call {
    script: &'static Script,
    keys: Vec<String>,
    at: At,
    mode: Mode,
    /// Per charge: the algorithm's name, then cost, limit, period (µs), capacity, the
    /// five algorithm parameters and the three of the penalty box; when it reads the
    /// record; for a refund of charges, each one's receipt.
    charges: Vec<(Algorithm, [u64; 12], Reads, Option<Receipt>)>,
    /// A reservation's longest wait (µs), after the charge.
    max_wait: Option<u64>,
}

/// Where a call's arguments go: a script invocation or a command.
trait Args {
    fn push<T: ToRedisArgs>(&mut self, arg: T);
}

impl Args for ScriptInvocation<'_> {
    fn push<T: ToRedisArgs>(&mut self, arg: T) {
        self.arg(arg);
    }
}

impl Args for Cmd {
    fn push<T: ToRedisArgs>(&mut self, arg: T) {
        self.arg(arg);
    }
}

impl Call {
    /// The call for `charges` at `at`, each reading its record as `reads` says.
    pub(super) fn new(
        prefix: &str,
        at: At,
        mode: Mode,
        charges: &[&Charge<'_>],
        reads: impl Fn(&Charge<'_>) -> Reads,
    ) -> Self {
        let script = script_for(charges.iter().copied());
        let charges = charges.iter().map(|c| (*c, reads(c), None));
        Self::build(prefix, at, mode, script, charges)
    }

    /// The refund, at `at`, of the charges that `receipts` name, one per charge.
    pub(super) fn refunds(
        prefix: &str,
        at: At,
        charges: &[&Charge<'_>],
        receipts: &[Receipt],
    ) -> Self {
        let script = script_for(charges.iter().copied());
        let charges = charges
            .iter()
            .zip(receipts)
            .map(|(c, r)| (*c, Reads::ByMark, Some(*r)));
        Self::build(prefix, at, Mode::RefundCharges, script, charges)
    }

    fn build<'c>(
        prefix: &str,
        at: At,
        mode: Mode,
        script: &'static Script,
        charges: impl ExactSizeIterator<Item = (&'c Charge<'c>, Reads, Option<Receipt>)>,
    ) -> Self {
        // Up to four keys a charge: its state, the log's set, the base state, its
        // record.
        let mut keys = Vec::with_capacity(3 * charges.len());
        let mut args = Vec::with_capacity(charges.len());
        for (charge, reads, receipt) in charges {
            let p = charge.limit.params();
            let state = keys::state_key(prefix, charge.limit, charge.key);
            // The driver reads keys in order: the log's sorted set follows its state,
            // the base state comes next, and the record last (every key shares the
            // state's hash tag).
            if p.algorithm == Algorithm::SlidingWindowLog {
                let log = keys::log_key(&state);
                keys.push(state);
                keys.push(log);
            } else {
                keys.push(state);
            }
            if reads == Reads::AlwaysMarkingBase {
                let base_period = charge.limit.base_period_us();
                keys.push(keys::state_key_at(
                    prefix,
                    charge.limit,
                    charge.key,
                    base_period,
                ));
            }
            keys.push(keys::record_key(prefix, charge.limit, charge.key));
            let (after, within_us, block_us) = charge.limit.get_penalty().map_or((0, 0, 0), |p| {
                (u64::from(p.get_after()), p.within_us(), p.block_us())
            });
            let extra: [u64; 5] = match p.algorithm {
                Algorithm::SlidingWindowCounters { .. } => [p.buckets, p.bucket_us, 0, 0, 0],
                Algorithm::TokenBucket => [p.units_per_token, p.units_per_us, 0, 0, 0],
                // Nanoseconds split into (µs, ns): a double is not exact past 2^53. The
                // leaky bucket's fifth is its bound on delays (µs; 0 for GCRA).
                Algorithm::Gcra | Algorithm::LeakyBucket => [
                    p.emission_ns / 1_000,
                    p.emission_ns % 1_000,
                    p.tolerance_ns / 1_000,
                    p.tolerance_ns % 1_000,
                    p.max_delay_us,
                ],
                _ => [0; 5],
            };
            let [e0, e1, e2, e3, e4] = extra;
            args.push((
                p.algorithm,
                [
                    charge.cost,
                    p.limit,
                    p.period_us,
                    p.capacity,
                    e0,
                    e1,
                    e2,
                    e3,
                    e4,
                    after,
                    within_us,
                    block_us,
                ],
                reads,
                receipt,
            ));
        }
        Self {
            script,
            keys,
            at,
            mode,
            charges: args,
            max_wait: match mode {
                Mode::Reserve(max_wait) => Some(max_wait),
                _ => None,
            },
        }
    }

    /// ARGV: the clock, the mode, then 14 per charge, 16 with a receipt (see
    /// evalsha.lua); one charge decided: the whole call packed in one argument (see
    /// lean.lua).
    fn write_args(&self, out: &mut impl Args) {
        if let [(algorithm, numbers, reads, None)] = self.charges.as_slice()
            && self.mode.in_library()
        {
            let (packed, len) = self.packed(*algorithm, numbers, *reads);
            out.push(&packed[..len]);
            return;
        }
        match self.at {
            At::Client(now) => out.push(now),
            At::Server { floor: Some(floor) } => {
                // "f<µs>", formatted on the stack.
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(floor).as_bytes();
                let mut text = [0_u8; 21];
                text[0] = b'f';
                text[1..=digits.len()].copy_from_slice(digits);
                out.push(&text[..=digits.len()]);
            }
            At::Server { floor: None } => out.push(""),
        }
        out.push(self.mode.arg());
        for (algorithm, numbers, reads, receipt) in &self.charges {
            out.push(algorithm.name());
            for &n in numbers {
                out.push(n);
            }
            out.push(*reads as u8);
            if let Some(receipt) = receipt {
                out.push(receipt.at_us());
                out.push(receipt.until_us());
            }
        }
        if let Some(max_wait) = self.max_wait {
            out.push(max_wait);
        }
    }

    /// The common call, one charge decided, as lean.lua reads it: the clock's kind and
    /// value, the mode (with when it reads the record: `2 × reads`, so the common
    /// call's argument is as long as it ever was), the algorithm's place, then the
    /// charge's numbers (without the
    /// penalty box's three zeros when it has none), as little-endian doubles. Redis
    /// parses, copies and hands Lua every argument on its own, a cost that grows with
    /// their count; one argument is the least it can be. Every number is exact: the
    /// scripts compute below 2^53 (see `algorithm::params`), and a larger cost rounds
    /// as Lua's own `tonumber` rounds its decimal text.
    fn packed(
        &self,
        algorithm: Algorithm,
        numbers: &[u64; 12],
        reads: Reads,
    ) -> ([u8; 8 * 16], usize) {
        let (kind, clock) = match self.at {
            At::Client(now) => (0, now),
            At::Server { floor: None } => (1, 0),
            At::Server { floor: Some(floor) } => (2, floor),
        };
        let mode = u64::from(self.mode != Mode::Acquire) + 2 * reads as u64;
        let place = index(algorithm) as u64 + 1;
        let numbers = match numbers {
            [head @ .., 0, 0, 0] => head,
            all => &all[..],
        };
        let mut packed = [0_u8; 8 * 16];
        let all = [kind, clock, mode, place]
            .into_iter()
            .chain(numbers.iter().copied());
        let mut len = 0;
        for (slot, n) in packed.chunks_exact_mut(8).zip(all) {
            #[allow(clippy::cast_precision_loss)]
            slot.copy_from_slice(&(n as f64).to_le_bytes());
            len += 8;
        }
        (packed, len)
    }

    /// As a script: `EVALSHA`, loading it after a `NOSCRIPT`.
    pub(super) fn invocation(&self) -> ScriptInvocation<'static> {
        let mut inv = self.script.prepare_invoke();
        for key in &self.keys {
            inv.key(key);
        }
        self.write_args(&mut inv);
        inv
    }

    /// As `FCALL <function> <numkeys> KEYS… ARGV…`.
    pub(super) fn fcall(&self, function: &str) -> Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(self.keys.len()).arg(&self.keys);
        self.write_args(&mut cmd);
        cmd
    }
}

/// A call's reply, the integers evalsha.lua lists: an array of them (the scripts'
/// general driver), or, for one charge decided (the common call), little-endian
/// 64-bit integers packed in one string, which Redis sends as it is and the client
/// reads without parsing an array.
pub(super) struct Reply(pub(super) Vec<i64>);

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::BulkString(bytes) if bytes.len() % 8 == 0 => Ok(Self(
                bytes
                    .chunks_exact(8)
                    .map(|chunk| {
                        let mut word = [0_u8; 8];
                        word.copy_from_slice(chunk);
                        i64::from_le_bytes(word)
                    })
                    .collect(),
            )),
            other => Vec::<i64>::from_redis_value(other).map(Self),
        }
    }
}

/// Integers per verdict in a reply (see evalsha.lua).
const PER_VERDICT: usize = 7;

/// Reads 7 integers per charge, then the instant (µs) the script decided at.
pub(super) fn verdicts(reply: &[i64], count: usize) -> Result<(Vec<Verdict>, u64), StoreError> {
    let bad = || {
        StoreError::new(
            StoreErrorKind::Protocol,
            format!(
                "the rate-limit script returned {} values for {count} charges",
                reply.len()
            ),
        )
    };
    let Some((&decided_at, reply)) = reply.split_last() else {
        return Err(bad());
    };
    if reply.len() != count * PER_VERDICT {
        return Err(bad());
    }
    let decided_at = u64::try_from(decided_at).map_err(|_| bad())?;
    let verdicts = reply
        .chunks_exact(PER_VERDICT)
        .map(|v| {
            let non_negative = |x: i64| u64::try_from(x).map_err(|_| bad());
            Ok(Verdict {
                allowed: v[0] == 1,
                remaining: non_negative(v[1])?,
                reset_after_us: non_negative(v[2])?,
                retry_after_us: if v[3] < 0 {
                    None
                } else {
                    Some(non_negative(v[3])?)
                },
                delay_us: non_negative(v[4])?,
                // Only the caller knows whether the batch charged (see `RedisStore::run`).
                receipt: None,
                blocked_us: if v[5] < 0 {
                    None
                } else {
                    Some(non_negative(v[5])?)
                },
                tripped: v[6] == 1,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((verdicts, decided_at))
}
