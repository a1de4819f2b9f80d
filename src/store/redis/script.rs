//! The Lua scripts, and the one written contract between them and Rust: the order of
//! a call's keys and arguments ([`arg`], [`Call`]) and of its reply's integers
//! ([`reply`], [`verdicts`]).
//!
//! A script is `prelude.lua`, the `decide.lua` of the algorithms it runs (each the
//! twin of the Rust file with the same stem in `src/algorithm/`), `block.lua`,
//! `clock.lua`, `lean.lua` and `evalsha.lua` (the entry point and its common case),
//! then `prelude_steps.lua`, the same algorithms' `steps.lua` and `evalsha_batch.lua`
//! (refunds, batches, operators' calls): `lua/README.md` tells the whole assembly. Lua
//! runs a script's body on every call, creating a closure for each `local function`
//! it reaches, so a script defines only the algorithm it needs, and the common case
//! (one charge decided) returns before anything that only refunds and batches use; a
//! batch that mixes algorithms runs the script holding all seven, still in one round
//! trip. The function library (`function.rs`) joins the same files up to the
//! decisions.

use std::sync::LazyLock;

use redis::{Cmd, FromRedisValue, ParsingError, Script, ScriptInvocation, ToRedisArgs, Value};

use super::keys;
use crate::algorithm::Verdict;
use crate::store::Charge;
use crate::{Algorithm, Receipt, StoreError, StoreErrorKind};

/// The Lua files every script and the function library share, each named after its
/// file (`lua/README.md`).
pub(super) mod lua {
    pub(in crate::store::redis) const PRELUDE: &str = include_str!("lua/prelude.lua");
    pub(in crate::store::redis) const BLOCK: &str = include_str!("lua/block.lua");
    pub(in crate::store::redis) const CLOCK: &str = include_str!("lua/clock.lua");
    pub(in crate::store::redis) const LEAN: &str = include_str!("lua/lean.lua");
    pub(in crate::store::redis) const EVALSHA: &str = include_str!("lua/evalsha.lua");
    pub(in crate::store::redis) const PRELUDE_STEPS: &str = include_str!("lua/prelude_steps.lua");
    pub(in crate::store::redis) const EVALSHA_BATCH: &str = include_str!("lua/evalsha_batch.lua");
    pub(in crate::store::redis) const FCALL: &str = include_str!("lua/fcall.lua");
}

/// An algorithm's Lua twin: the files of its folder, `lua/<name>/` (named as
/// [`Algorithm::name`]), and the algorithm whose functions they build on, whose files
/// come first.
pub(super) struct LuaTwin {
    pub(super) decide: &'static str,
    steps: &'static str,
    builds_on: Option<Algorithm>,
}

macro_rules! twin {
    ($stem:literal) => {
        twin!($stem, None)
    };
    ($stem:literal, $on:expr) => {
        LuaTwin {
            decide: include_str!(concat!("lua/", $stem, "/decide.lua")),
            steps: include_str!(concat!("lua/", $stem, "/steps.lua")),
            builds_on: $on,
        }
    };
}

/// `algorithm`'s Lua files. Exhaustive: an algorithm does not compile without its twin.
pub(super) fn twin(algorithm: Algorithm) -> LuaTwin {
    match algorithm {
        Algorithm::FixedWindow => twin!("fixed_window"),
        Algorithm::SlidingWindow => twin!("sliding_window"),
        Algorithm::SlidingWindowCounters { .. } => twin!("sliding_window_counters"),
        Algorithm::SlidingWindowLog => twin!("sliding_window_log"),
        Algorithm::TokenBucket => twin!("token_bucket"),
        Algorithm::Gcra => twin!("gcra"),
        // The leaky bucket is GCRA with a queue: it builds on GCRA's functions.
        Algorithm::LeakyBucket => twin!("leaky_bucket", Some(Algorithm::Gcra)),
    }
}

/// The script that runs `algorithms` (each after those it builds on), joined in the
/// order `lua/README.md` gives.
fn script_source(algorithms: &[Algorithm]) -> String {
    let twins: Vec<LuaTwin> = algorithms.iter().map(|&a| twin(a)).collect();
    let mut out = String::from(lua::PRELUDE);
    for t in &twins {
        out.push_str(t.decide);
    }
    for part in [
        lua::BLOCK,
        lua::CLOCK,
        lua::LEAN,
        lua::EVALSHA,
        lua::PRELUDE_STEPS,
    ] {
        out.push_str(part);
    }
    for t in &twins {
        out.push_str(t.steps);
    }
    out.push_str(lua::EVALSHA_BATCH);
    out
}

/// Every script: one per algorithm, indexed by [`Algorithm::code`], then the one
/// holding every algorithm ([`Algorithm::ALL`]). `redis::Script` reloads a script by
/// itself after a `NOSCRIPT` (a flush, a restart, a failover to a replica that never
/// saw it).
static SCRIPTS: LazyLock<Vec<Script>> = LazyLock::new(|| {
    let mut scripts: Vec<Script> = Algorithm::ALL
        .iter()
        .map(|&a| {
            let alone = [a];
            let with_base;
            let algorithms: &[Algorithm] = match twin(a).builds_on {
                Some(base) => {
                    with_base = [base, a];
                    &with_base
                }
                None => &alone,
            };
            Script::new(&script_source(algorithms))
        })
        .collect();
    scripts.push(Script::new(&script_source(&Algorithm::ALL)));
    scripts
});

/// The smallest script that can run every charge of the batch.
fn script_for<'c>(charges: impl IntoIterator<Item = &'c Charge<'c>>) -> &'static Script {
    let mut codes = charges
        .into_iter()
        .map(|c| c.limit.params().algorithm.code());
    let first = codes.next();
    let same = codes.all(|i| Some(i) == first);
    &SCRIPTS[match first {
        Some(i) if same => i,
        _ => Algorithm::ALL.len(),
    }]
}

/// The wire layout of one charge's arguments: each an offset from the charge's first
/// argument (`i` in Lua, which reads `args[i + <offset>]`). The header of
/// `evalsha.lua` lists the same (`i+<offset>`; a test compares them), and
/// [`ChargeArgs::write`] is the one place that writes them.
pub(super) mod arg {
    /// The algorithm's name ([`Algorithm::name`](crate::Algorithm::name)).
    pub(super) const ALGORITHM: usize = 0;
    pub(super) const COST: usize = 1;
    pub(super) const LIMIT: usize = 2;
    /// µs.
    pub(super) const PERIOD: usize = 3;
    pub(super) const CAPACITY: usize = 4;
    /// The first of the algorithm's five parameters (`ChargeArgs::params`).
    pub(super) const PARAMS: usize = 5;
    /// The penalty box: the rejections that trip it (0: no box), its window and its
    /// block (µs).
    pub(super) const PENALTY_AFTER: usize = 10;
    pub(super) const PENALTY_WITHIN: usize = 11;
    pub(super) const PENALTY_BLOCK: usize = 12;
    /// When the decision reads the caller's record ([`Reads`](super::Reads)).
    pub(super) const READS: usize = 13;
    /// A refund of charges only (`Mode::RefundCharges`): the receipt's two instants.
    pub(super) const RECEIPT_AT: usize = 14;
    pub(super) const RECEIPT_UNTIL: usize = 15;
    /// Arguments per charge, and per charge of a refund of charges. (Before the first
    /// charge come two: the clock and the mode, `Call::write_args`.)
    pub(super) const PER_CHARGE: usize = READS + 1;
    pub(super) const PER_REFUND: usize = RECEIPT_UNTIL + 1;
}

/// The wire layout of a reply: per verdict, these integers (offsets from its first);
/// then, once, the instant (µs) the call decided at. The header of `evalsha.lua`
/// lists the same (`v[<offset + 1>]`, Lua's tables counting from 1), prelude.lua's
/// `verdict` builds it, and [`verdicts`] is the one place that reads it.
pub(super) mod reply {
    /// 1 or 0.
    pub(super) const ALLOWED: usize = 0;
    pub(super) const REMAINING: usize = 1;
    /// µs.
    pub(super) const RESET_AFTER: usize = 2;
    /// µs, -1 for none.
    pub(super) const RETRY_AFTER: usize = 3;
    /// µs.
    pub(super) const DELAY: usize = 4;
    /// µs, -1 when not blocked.
    pub(super) const BLOCKED_FOR: usize = 5;
    /// 1 when this call tripped the penalty box.
    pub(super) const TRIPPED: usize = 6;
    /// Integers per verdict.
    pub(super) const PER_VERDICT: usize = 7;
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
    charges: Vec<ChargeArgs>,
    /// A reservation's longest wait (µs), after the charge.
    max_wait: Option<u64>,
}

/// One charge's arguments, as [`arg`] lays them out.
struct ChargeArgs {
    algorithm: Algorithm,
    cost: u64,
    limit: u64,
    period_us: u64,
    capacity: u64,
    /// The algorithm's own: the sliding window counters' bucket count and length
    /// (µs); the token bucket's units per token and per µs; GCRA's and the leaky
    /// bucket's T and B·T, each split in (µs, ns) (a double is not exact past 2^53:
    /// see gcra/decide.lua), and the leaky bucket's bound on delays (µs; 0 for GCRA).
    params: [u64; 5],
    /// The penalty box's rejections, window and block (µs); zeros for none.
    penalty: [u64; 3],
    reads: Reads,
    receipt: Option<Receipt>,
}

/// The numbers of a charge that the packed call sends: from [`arg::COST`] to
/// [`arg::PENALTY_BLOCK`].
const NUMBERS: usize = arg::READS - arg::COST;

impl ChargeArgs {
    fn new(charge: &Charge<'_>, reads: Reads, receipt: Option<Receipt>) -> Self {
        let p = charge.limit.params();
        let penalty = charge.limit.get_penalty().map_or([0; 3], |p| {
            [u64::from(p.get_after()), p.within_us(), p.block_us()]
        });
        let params = match p.algorithm {
            Algorithm::SlidingWindowCounters { .. } => [p.buckets, p.bucket_us, 0, 0, 0],
            Algorithm::TokenBucket => [p.units_per_token, p.units_per_us, 0, 0, 0],
            Algorithm::Gcra | Algorithm::LeakyBucket => [
                p.emission_ns / 1_000,
                p.emission_ns % 1_000,
                p.tolerance_ns / 1_000,
                p.tolerance_ns % 1_000,
                p.max_delay_us,
            ],
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingWindowLog => {
                [0; 5]
            }
        };
        Self {
            algorithm: p.algorithm,
            cost: charge.cost,
            limit: p.limit,
            period_us: p.period_us,
            capacity: p.capacity,
            params,
            penalty,
            reads,
            receipt,
        }
    }

    /// The numbers after the algorithm's name, each at its [`arg`] offset less the
    /// name's, and how many of them the call sends: through [`arg::READS`], or with a
    /// receipt through [`arg::RECEIPT_UNTIL`].
    fn numbers(&self) -> ([u64; arg::PER_REFUND - 1], usize) {
        let at = |offset: usize| offset - (arg::ALGORITHM + 1);
        let mut n = [0; arg::PER_REFUND - 1];
        n[at(arg::COST)] = self.cost;
        n[at(arg::LIMIT)] = self.limit;
        n[at(arg::PERIOD)] = self.period_us;
        n[at(arg::CAPACITY)] = self.capacity;
        n[at(arg::PARAMS)..at(arg::PARAMS) + 5].copy_from_slice(&self.params);
        n[at(arg::PENALTY_AFTER)] = self.penalty[0];
        n[at(arg::PENALTY_WITHIN)] = self.penalty[1];
        n[at(arg::PENALTY_BLOCK)] = self.penalty[2];
        n[at(arg::READS)] = self.reads as u64;
        let count = match self.receipt {
            Some(receipt) => {
                n[at(arg::RECEIPT_AT)] = receipt.at_us();
                n[at(arg::RECEIPT_UNTIL)] = receipt.until_us();
                arg::PER_REFUND
            }
            None => arg::PER_CHARGE,
        };
        (n, count - 1)
    }

    /// The charge's arguments as text, in [`arg`]'s order.
    fn write(&self, out: &mut impl Args) {
        out.push(self.algorithm.name());
        let (numbers, count) = self.numbers();
        for &n in &numbers[..count] {
            out.push(n);
        }
    }
}

/// The most numbers a packed call holds (lean.lua's `LEAN_FORMATS`): the clock's kind
/// and value, the mode, the algorithm, then a charge's numbers.
const LEAN_MOST: usize = 4 + NUMBERS;

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
            let state = keys::state_key(prefix, charge.limit, charge.key);
            // The driver reads keys in order: the log's sorted set follows its state,
            // the base state comes next, and the record last (every key shares the
            // state's hash tag).
            if charge.limit.params().algorithm == Algorithm::SlidingWindowLog {
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
            args.push(ChargeArgs::new(charge, reads, receipt));
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

    /// ARGV: the clock, the mode, then [`arg::PER_CHARGE`] per charge
    /// ([`arg::PER_REFUND`] with a receipt), then a reservation's longest wait; one
    /// charge decided: the whole call packed in one argument (see lean.lua).
    fn write_args(&self, out: &mut impl Args) {
        if let [charge @ ChargeArgs { receipt: None, .. }] = self.charges.as_slice()
            && self.mode.in_library()
        {
            let (packed, len) = self.packed(charge);
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
        for charge in &self.charges {
            charge.write(out);
        }
        if let Some(max_wait) = self.max_wait {
            out.push(max_wait);
        }
    }

    /// The common call, one charge decided, as lean.lua reads it: the clock's kind and
    /// value, the mode (with when it reads the record: `2 × reads`, so the common
    /// call's argument is as long as it ever was), the algorithm's place
    /// ([`Algorithm::code`] + 1: lean.lua's `LEAN_ALGORITHMS`), then the charge's
    /// numbers in [`arg`]'s order (without the penalty box's three zeros when it has
    /// none), as little-endian doubles. Redis parses, copies and hands Lua every
    /// argument on its own, a cost that grows with their count; one argument is the
    /// least it can be. Every number is exact: the scripts compute below 2^53 (see
    /// `algorithm::params`), and a larger cost rounds as Lua's own `tonumber` rounds
    /// its decimal text.
    fn packed(&self, charge: &ChargeArgs) -> ([u8; 8 * LEAN_MOST], usize) {
        let (kind, clock) = match self.at {
            At::Client(now) => (0, now),
            At::Server { floor: None } => (1, 0),
            At::Server { floor: Some(floor) } => (2, floor),
        };
        let mode = u64::from(self.mode != Mode::Acquire) + 2 * charge.reads as u64;
        let place = charge.algorithm.code() as u64 + 1;
        let (all_numbers, _) = charge.numbers();
        let numbers = match &all_numbers[..NUMBERS] {
            [head @ .., 0, 0, 0] => head,
            all => all,
        };
        let mut packed = [0_u8; 8 * LEAN_MOST];
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

/// Reads [`reply::PER_VERDICT`] integers per charge, then the instant (µs) the script
/// decided at.
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
    if reply.len() != count * reply::PER_VERDICT {
        return Err(bad());
    }
    let decided_at = u64::try_from(decided_at).map_err(|_| bad())?;
    let non_negative = |x: i64| u64::try_from(x).map_err(|_| bad());
    // -1 for none.
    let optional = |x: i64| {
        if x < 0 {
            Ok(None)
        } else {
            non_negative(x).map(Some)
        }
    };
    let verdicts = reply
        .chunks_exact(reply::PER_VERDICT)
        .map(|v| {
            Ok(Verdict {
                allowed: v[reply::ALLOWED] == 1,
                remaining: non_negative(v[reply::REMAINING])?,
                reset_after_us: non_negative(v[reply::RESET_AFTER])?,
                retry_after_us: optional(v[reply::RETRY_AFTER])?,
                delay_us: non_negative(v[reply::DELAY])?,
                // Only the caller knows whether the batch charged (see `RedisStore::run`).
                receipt: None,
                blocked_us: optional(v[reply::BLOCKED_FOR])?,
                tripped: v[reply::TRIPPED] == 1,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((verdicts, decided_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `--   <prefix><number>  <name>` lines of a Lua header, as (number, name).
    fn header_rows(lua: &str, prefix: &str, close: &str) -> Vec<(usize, String)> {
        lua.lines()
            .filter_map(|line| {
                let row = line.strip_prefix("--   ")?.strip_prefix(prefix)?;
                let (number, rest) = row.split_once(close)?;
                let name = rest.split_whitespace().next()?;
                Some((number.parse().ok()?, name.to_owned()))
            })
            .collect()
    }

    #[test]
    fn evalsha_lua_lists_the_arguments_and_the_reply_as_rust_lays_them_out() {
        let args = [
            (arg::ALGORITHM, "algorithm"),
            (arg::COST, "cost"),
            (arg::LIMIT, "limit"),
            (arg::PERIOD, "period"),
            (arg::CAPACITY, "capacity"),
            (arg::PARAMS, "params"),
            (arg::PENALTY_AFTER, "penalty_after"),
            (arg::PENALTY_WITHIN, "penalty_within"),
            (arg::PENALTY_BLOCK, "penalty_block"),
            (arg::READS, "reads"),
            (arg::RECEIPT_AT, "receipt_at"),
            (arg::RECEIPT_UNTIL, "receipt_until"),
        ];
        let expected: Vec<_> = args.iter().map(|&(i, n)| (i, n.to_owned())).collect();
        assert_eq!(header_rows(lua::EVALSHA, "i+", " "), expected);
        assert_eq!(arg::PARAMS + 5, arg::PENALTY_AFTER);
        // Before the charges: the clock and the mode.
        let counts = format!(
            "local BEFORE_CHARGES, PER_CHARGE, PER_REFUND = 2, {}, {}\n",
            arg::PER_CHARGE,
            arg::PER_REFUND
        );
        assert!(lua::EVALSHA.contains(&counts), "{counts}");

        let replies = [
            (reply::ALLOWED, "allowed"),
            (reply::REMAINING, "remaining"),
            (reply::RESET_AFTER, "reset_after"),
            (reply::RETRY_AFTER, "retry_after"),
            (reply::DELAY, "delay"),
            (reply::BLOCKED_FOR, "blocked_for"),
            (reply::TRIPPED, "tripped"),
        ];
        // Lua counts from 1.
        let expected: Vec<_> = replies
            .iter()
            .map(|&(i, n)| (i + 1, n.to_owned()))
            .collect();
        assert_eq!(header_rows(lua::EVALSHA, "v[", "]"), expected);
        assert_eq!(reply::PER_VERDICT, replies.len());
    }

    #[test]
    fn lean_lua_numbers_the_algorithms_as_rust_does() {
        let names: Vec<String> = Algorithm::ALL
            .iter()
            .map(|a| format!("'{}'", a.name()))
            .collect();
        let list = lua::LEAN
            .split_once("local LEAN_ALGORITHMS = {")
            .and_then(|(_, rest)| rest.split_once('}'))
            .map(|(list, _)| {
                list.split(',')
                    .map(|n| n.trim().to_owned())
                    .collect::<Vec<_>>()
            });
        assert_eq!(list, Some(names));
        let formats = format!(
            "{{ [{}] = '<{}', [{}] = '<{}' }}",
            LEAN_MOST - 3,
            "d".repeat(LEAN_MOST - 3),
            LEAN_MOST,
            "d".repeat(LEAN_MOST)
        );
        assert!(lua::LEAN.contains(&formats), "{formats}");
    }

    #[test]
    fn every_algorithm_has_its_lua_twin_after_the_one_it_builds_on() {
        for algorithm in Algorithm::ALL {
            let twin = twin(algorithm);
            let name = algorithm.name();
            assert!(twin.decide.contains(&format!("\nD.{name} = ")), "{name}");
            assert!(twin.steps.contains(&format!("\nA.{name} = ")), "{name}");
            if let Some(base) = twin.builds_on {
                assert!(base.code() < algorithm.code(), "{name}");
            }
        }
        assert_eq!(SCRIPTS.len(), Algorithm::ALL.len() + 1);
    }

    #[test]
    fn a_charge_writes_its_numbers_at_their_offsets() {
        let args = ChargeArgs {
            algorithm: Algorithm::Gcra,
            cost: 1,
            limit: 2,
            period_us: 3,
            capacity: 4,
            params: [5, 6, 7, 8, 9],
            penalty: [10, 11, 12],
            reads: Reads::AlwaysMarkingBase,
            receipt: Receipt::new(14, 15, 1),
        };
        let (numbers, count) = args.numbers();
        assert_eq!(count, arg::PER_REFUND - 1);
        assert_eq!(numbers[arg::READS - 1], 2);
        for (i, n) in numbers.iter().enumerate() {
            if i + 1 != arg::READS {
                assert_eq!(*n, (i + 1) as u64);
            }
        }
        let charge = ChargeArgs {
            receipt: None,
            ..args
        };
        assert_eq!(charge.numbers().1, arg::PER_CHARGE - 1);
    }
}
