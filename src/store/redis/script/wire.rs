//! The wire contract between Rust and the Lua scripts, written once here and once in
//! the header of `evalsha.lua` (the tests below compare the two): the layout of a
//! charge's arguments ([`arg`]) and the one place that writes them ([`ChargeArgs`]),
//! the layout of a reply ([`reply`]) and the one place that reads it ([`verdicts`]).

use redis::{Cmd, FromRedisValue, ParsingError, ScriptInvocation, ToRedisArgs, Value};

use super::Reads;
use crate::algorithm::Verdict;
use crate::decision::Receipt;
use crate::store::Charge;
use crate::{Algorithm, StoreError, StoreErrorKind};

/// The wire layout of one charge's arguments: each an offset from the charge's first
/// argument (`i` in Lua, which reads `args[i + <offset>]`). The header of
/// `evalsha.lua` lists the same (`i+<offset>`; a test compares them), and
/// [`ChargeArgs::write`] is the one place that writes them.
pub(super) mod arg {
    /// The algorithm's name ([`Algorithm::name`](crate::Algorithm::name)).
    pub(in crate::store::redis::script) const ALGORITHM: usize = 0;
    pub(in crate::store::redis::script) const COST: usize = 1;
    pub(in crate::store::redis::script) const LIMIT: usize = 2;
    /// µs.
    pub(in crate::store::redis::script) const PERIOD: usize = 3;
    pub(in crate::store::redis::script) const CAPACITY: usize = 4;
    /// The first of the algorithm's five parameters (`ChargeArgs::params`).
    pub(in crate::store::redis::script) const PARAMS: usize = 5;
    /// The penalty box: the rejections that trip it (0: no box), its window and its
    /// block (µs).
    pub(in crate::store::redis::script) const PENALTY_AFTER: usize = 10;
    pub(in crate::store::redis::script) const PENALTY_WITHIN: usize = 11;
    pub(in crate::store::redis::script) const PENALTY_BLOCK: usize = 12;
    /// When the decision reads the caller's record ([`Reads`](super::Reads)).
    pub(in crate::store::redis::script) const READS: usize = 13;
    /// The penalty's escalation, as text (`Penalty::escalation_wire`): how its block
    /// grows with the trips it remembers; empty when it remembers none. The last of
    /// a charge's own arguments.
    pub(in crate::store::redis::script) const ESCALATION: usize = 14;
    /// A refund of charges or a settle only (`Mode::RefundCharges`, `Mode::Settle`):
    /// the receipt's two instants.
    pub(in crate::store::redis::script) const RECEIPT_AT: usize = 15;
    pub(in crate::store::redis::script) const RECEIPT_UNTIL: usize = 16;
    /// A settle only: what its charge gives back by the receipt (its cost is the
    /// extra).
    pub(in crate::store::redis::script) const GIVE_BACK: usize = 17;
    /// Arguments per charge, per charge of a refund of charges, and per settle.
    /// (Before the first charge come two: the clock and the mode, `Call::write_args`.)
    pub(in crate::store::redis::script) const PER_CHARGE: usize = ESCALATION + 1;
    pub(in crate::store::redis::script) const PER_REFUND: usize = RECEIPT_UNTIL + 1;
    pub(in crate::store::redis::script) const PER_SETTLE: usize = GIVE_BACK + 1;
}

/// The wire layout of a reply: per verdict, these integers (offsets from its first);
/// then, once, the instant (µs) the call decided at. The header of `evalsha.lua`
/// lists the same (`v[<offset + 1>]`, Lua's tables counting from 1), prelude.lua's
/// `verdict` builds it, and [`verdicts`] is the one place that reads it.
pub(super) mod reply {
    /// 1 or 0.
    pub(in crate::store::redis::script) const ALLOWED: usize = 0;
    pub(in crate::store::redis::script) const REMAINING: usize = 1;
    /// µs.
    pub(in crate::store::redis::script) const RESET_AFTER: usize = 2;
    /// µs, -1 for none.
    pub(in crate::store::redis::script) const RETRY_AFTER: usize = 3;
    /// µs.
    pub(in crate::store::redis::script) const DELAY: usize = 4;
    /// µs, -1 when not blocked.
    pub(in crate::store::redis::script) const BLOCKED_FOR: usize = 5;
    /// 1 when this call tripped the penalty box.
    pub(in crate::store::redis::script) const TRIPPED: usize = 6;
    /// The penalty's trips the key's record remembers.
    pub(in crate::store::redis::script) const TRIPS: usize = 7;
    /// Integers per verdict.
    pub(in crate::store::redis::script) const PER_VERDICT: usize = 8;
}

/// One charge's arguments, as [`arg`] lays them out.
pub(super) struct ChargeArgs {
    pub(super) algorithm: Algorithm,
    pub(super) cost: u64,
    pub(super) limit: u64,
    pub(super) period_us: u64,
    pub(super) capacity: u64,
    /// The algorithm's own: the sliding window counters' bucket count and length
    /// (µs); the token bucket's units per token and per µs; GCRA's and the leaky
    /// bucket's T and B·T, each split in (µs, ns) (a double is not exact past 2^53:
    /// see gcra/decide.lua), and the leaky bucket's bound on delays (µs; 0 for GCRA).
    pub(super) params: [u64; 5],
    /// The penalty box's rejections, window and block (µs); zeros for none.
    pub(super) penalty: [u64; 3],
    pub(super) reads: Reads,
    /// The penalty's escalation ([`arg::ESCALATION`]); empty for none.
    pub(super) escalation: String,
    pub(super) receipt: Option<Receipt>,
    /// A settle's give-back by the receipt (which it needs).
    pub(super) give_back: Option<u64>,
}

// The text after the numbers, then the receipt's: `ChargeArgs::write` writes them in
// this order.
const _: () = assert!(arg::ESCALATION == arg::READS + 1 && arg::RECEIPT_AT == arg::PER_CHARGE);

/// The numbers of a charge that the packed call sends: from [`arg::COST`] to
/// [`arg::PENALTY_BLOCK`].
pub(super) const NUMBERS: usize = arg::READS - arg::COST;

impl ChargeArgs {
    pub(super) fn new(charge: &Charge<'_>, reads: Reads, receipt: Option<Receipt>) -> Self {
        let p = charge.limit.params();
        let box_ = charge.limit.penalty_box();
        let penalty = box_.map_or([0; 3], |p| {
            [u64::from(p.get_after()), p.within_us(), p.block_us()]
        });
        let escalation = box_
            .map(crate::Penalty::escalation_wire)
            .unwrap_or_default();
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
            escalation,
            receipt,
            give_back: None,
        }
    }

    /// The numbers after the algorithm's name, from [`arg::COST`] through
    /// [`arg::READS`], each at its [`arg`] offset less the name's.
    pub(super) fn numbers(&self) -> [u64; arg::READS] {
        let at = |offset: usize| offset - (arg::ALGORITHM + 1);
        let mut n = [0; arg::READS];
        n[at(arg::COST)] = self.cost;
        n[at(arg::LIMIT)] = self.limit;
        n[at(arg::PERIOD)] = self.period_us;
        n[at(arg::CAPACITY)] = self.capacity;
        n[at(arg::PARAMS)..at(arg::PARAMS) + 5].copy_from_slice(&self.params);
        n[at(arg::PENALTY_AFTER)] = self.penalty[0];
        n[at(arg::PENALTY_WITHIN)] = self.penalty[1];
        n[at(arg::PENALTY_BLOCK)] = self.penalty[2];
        n[at(arg::READS)] = self.reads as u64;
        n
    }

    /// The numbers after the escalation, each at its [`arg`] offset less
    /// [`arg::RECEIPT_AT`]'s, and how many the call sends: none without a receipt,
    /// the receipt's two, with a give-back three.
    fn receipt_numbers(&self) -> ([u64; arg::PER_SETTLE - arg::RECEIPT_AT], usize) {
        let mut n = [0; arg::PER_SETTLE - arg::RECEIPT_AT];
        let Some(receipt) = self.receipt else {
            return (n, 0);
        };
        n[0] = receipt.at_us();
        n[arg::RECEIPT_UNTIL - arg::RECEIPT_AT] = receipt.until_us();
        match self.give_back {
            Some(give_back) => {
                n[arg::GIVE_BACK - arg::RECEIPT_AT] = give_back;
                (n, arg::PER_SETTLE - arg::RECEIPT_AT)
            }
            None => (n, arg::PER_REFUND - arg::RECEIPT_AT),
        }
    }

    /// The charge's arguments as text, in [`arg`]'s order.
    pub(super) fn write(&self, out: &mut impl Args) {
        out.push(self.algorithm.name());
        for n in self.numbers() {
            out.push(n);
        }
        out.push(self.escalation.as_str());
        let (receipt, count) = self.receipt_numbers();
        for &n in &receipt[..count] {
            out.push(n);
        }
    }
}

/// The most numbers a packed call holds (lean.lua's `LEAN_FORMATS`): the clock's kind
/// and value, the mode, the algorithm, then a charge's numbers.
pub(super) const LEAN_MOST: usize = 4 + NUMBERS;

/// Where a call's arguments go: a script invocation or a command.
pub(super) trait Args {
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

/// A call's reply, the integers evalsha.lua lists: an array of them (the scripts'
/// general driver), or, for one charge decided (the common call), little-endian
/// 64-bit integers packed in one string, which Redis sends as it is and the client
/// reads without parsing an array.
pub(in crate::store::redis) struct Reply(pub(in crate::store::redis) Vec<i64>);

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::BulkString(bytes) if bytes.len() % 8 == 0 => Ok(Self(words(&bytes))),
            other => Vec::<i64>::from_redis_value(other).map(Self),
        }
    }
}

/// The little-endian 64-bit integers packed in `bytes` (a whole number of them):
/// a single call's reply, and each decision's part of a batch's.
pub(in crate::store::redis) fn words(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|chunk| {
            let mut word = [0_u8; 8];
            word.copy_from_slice(chunk);
            i64::from_le_bytes(word)
        })
        .collect()
}

/// Reads [`reply::PER_VERDICT`] integers per charge, then the instant (µs) the script
/// decided at.
pub(in crate::store::redis) fn verdicts(
    reply: &[i64],
    count: usize,
) -> Result<(Vec<Verdict>, u64), StoreError> {
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
                trips: u32::try_from(non_negative(v[reply::TRIPS])?).unwrap_or(u32::MAX),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((verdicts, decided_at))
}

#[cfg(test)]
mod tests {
    use super::super::lua;
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
            (arg::ESCALATION, "escalation"),
            (arg::RECEIPT_AT, "receipt_at"),
            (arg::RECEIPT_UNTIL, "receipt_until"),
            (arg::GIVE_BACK, "give_back"),
        ];
        let expected: Vec<_> = args.iter().map(|&(i, n)| (i, n.to_owned())).collect();
        assert_eq!(header_rows(lua::EVALSHA, "i+", " "), expected);
        assert_eq!(arg::PARAMS + 5, arg::PENALTY_AFTER);
        // Before the charges: the clock and the mode.
        let counts = format!(
            "local BEFORE_CHARGES, PER_CHARGE, PER_REFUND, PER_SETTLE = 2, {}, {}, {}\n",
            arg::PER_CHARGE,
            arg::PER_REFUND,
            arg::PER_SETTLE
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
            (reply::TRIPS, "trips"),
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
    fn the_lua_drivers_read_a_charge_at_the_offsets_rust_writes() {
        let reads = |lua: &str, table: &str, offsets: &[usize]| {
            for offset in offsets {
                let read = format!("{table}[i + {offset}]");
                assert!(lua.contains(&read), "{read}");
            }
        };
        // evalsha_batch.lua's charge table, and the receipt of a refund of charges.
        let params: Vec<usize> = (arg::PARAMS..arg::PARAMS + 4).collect();
        reads(lua::EVALSHA_BATCH, "ARGV", &params);
        reads(
            lua::EVALSHA_BATCH,
            "ARGV",
            &[
                arg::COST,
                arg::LIMIT,
                arg::PERIOD,
                arg::CAPACITY,
                arg::READS,
                arg::RECEIPT_AT,
                arg::RECEIPT_UNTIL,
                arg::GIVE_BACK,
            ],
        );
        // block.lua's penalty box and record reads.
        reads(
            lua::BLOCK,
            "args",
            &[
                arg::COST,
                arg::PENALTY_AFTER,
                arg::PENALTY_WITHIN,
                arg::PENALTY_BLOCK,
                arg::READS,
                arg::ESCALATION,
            ],
        );
        // lean.lua lays the packed charge out from its fourth number, the algorithm's.
        let lean_reads = format!("args[{}] = (mode - dry) / 2", 4 + arg::READS);
        assert!(lua::LEAN.contains(&lean_reads), "{lean_reads}");
        let lean_escalation = format!("args[{}] = escalation", 4 + arg::ESCALATION);
        assert!(lua::LEAN.contains(&lean_escalation), "{lean_escalation}");
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

    /// The arguments a call writes, as text.
    impl Args for Vec<String> {
        fn push<T: ToRedisArgs>(&mut self, arg: T) {
            for bytes in arg.to_redis_args() {
                Vec::push(self, String::from_utf8(bytes).expect("text"));
            }
        }
    }

    #[test]
    fn a_charge_writes_its_arguments_at_their_offsets() {
        let args = ChargeArgs {
            algorithm: Algorithm::Gcra,
            cost: 1,
            limit: 2,
            period_us: 3,
            capacity: 4,
            params: [5, 6, 7, 8, 9],
            penalty: [10, 11, 12],
            reads: Reads::AlwaysMarkingBase,
            escalation: "14 0 0".to_owned(),
            receipt: Receipt::new(15, 16, 1),
            give_back: Some(17),
        };
        let mut written: Vec<String> = Vec::new();
        args.write(&mut written);
        assert_eq!(written.len(), arg::PER_SETTLE);
        assert_eq!(written[arg::ALGORITHM], "gcra");
        assert_eq!(written[arg::READS], "2");
        assert_eq!(written[arg::ESCALATION], "14 0 0");
        for (i, text) in written.iter().enumerate() {
            if ![arg::ALGORITHM, arg::READS, arg::ESCALATION].contains(&i) {
                assert_eq!(*text, i.to_string());
            }
        }
        let refund = ChargeArgs {
            give_back: None,
            ..args
        };
        let mut written: Vec<String> = Vec::new();
        refund.write(&mut written);
        assert_eq!(written.len(), arg::PER_REFUND);
        let charge = ChargeArgs {
            receipt: None,
            escalation: String::new(),
            ..refund
        };
        let mut written: Vec<String> = Vec::new();
        charge.write(&mut written);
        assert_eq!(written.len(), arg::PER_CHARGE);
        assert_eq!(written[arg::ESCALATION], "");
    }
}
