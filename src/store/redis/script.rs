//! The Lua scripts, and the one written contract between them and Rust: the order of
//! a call's keys and arguments ([`arg`](wire::arg), [`Call`]) and of its reply's integers
//! ([`reply`](wire::reply), [`verdicts`]).
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

pub(super) mod batch;
mod sources;
mod wire;

use std::sync::LazyLock;

use redis::{Cmd, Script, ScriptInvocation};

use self::sources::script_source;
pub(super) use self::sources::{lua, twin};
use self::wire::{Args, ChargeArgs, LEAN_MOST, NUMBERS};
pub(super) use self::wire::{Reply, verdicts};
use super::keys;
use crate::Algorithm;
use crate::decision::Receipt;
use crate::store::Charge;

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
    /// Settle one charge by its receipt: give back this much of it, then charge the
    /// cost (the extra) whether or not it fits (`Store::settle`).
    Settle(u64),
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
            Self::Settle(_) => "s",
        }
    }

    /// Whether the call answers with verdicts, rather than only changing state.
    pub(super) fn decides(self) -> bool {
        matches!(
            self,
            Self::Acquire
                | Self::DryRun
                | Self::Block
                | Self::Penalize
                | Self::Reserve(_)
                | Self::Settle(_)
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

    /// The settle, at `at`, of the charge `receipt` names: `give_back` of it given
    /// back, then `charge.cost` (the extra) charged whether or not it fits.
    pub(super) fn settle(
        prefix: &str,
        at: At,
        charge: &Charge<'_>,
        receipt: Receipt,
        give_back: u64,
    ) -> Self {
        let script = script_for([charge]);
        let one = std::iter::once((charge, Reads::ByMark, Some(receipt)));
        let mut call = Self::build(prefix, at, Mode::Settle(give_back), script, one);
        for args in &mut call.charges {
            args.give_back = Some(give_back);
        }
        call
    }

    fn build<'c>(
        prefix: &str,
        at: At,
        mode: Mode,
        script: &'static Script,
        charges: impl ExactSizeIterator<Item = (&'c Charge<'c>, Reads, Option<Receipt>)>,
    ) -> Self {
        // Up to four keys a charge: its state, the log's set, the base state, its
        // record; a give-back by receipt, a fifth: its given-back record.
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
            if let Some(receipt) = receipt {
                // A give-back by receipt: the key that says it gave back already.
                keys.push(keys::given_key(
                    prefix,
                    charge.limit,
                    charge.key,
                    receipt.nonce(),
                ));
            }
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

    /// ARGV: the clock, the mode, then [`arg::PER_CHARGE`](wire::arg::PER_CHARGE) per charge
    /// ([`arg::PER_REFUND`](wire::arg::PER_REFUND) with a receipt), then a reservation's longest wait; one
    /// charge decided: the whole call packed in one argument (see lean.lua), and the
    /// penalty's escalation in a second when it has one.
    fn write_args(&self, out: &mut impl Args) {
        if let [charge @ ChargeArgs { receipt: None, .. }] = self.charges.as_slice()
            && self.mode.in_library()
        {
            let (packed, len) = self.packed(charge);
            out.push(&packed[..len]);
            if !charge.escalation.is_empty() {
                out.push(charge.escalation.as_str());
            }
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
    /// numbers in [`arg`](wire::arg)'s order (without the penalty box's three zeros when it has
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
        let all_numbers = charge.numbers();
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

    /// The key whose slot the call goes to on a cluster (every key of a call shares
    /// its hash tag).
    pub(super) fn first_key(&self) -> &str {
        self.keys.first().map_or("", String::as_str)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evalsha_lua_lists_every_mode_rust_sends() {
        let header = lua::EVALSHA
            .split_once("-- ARGV[2]")
            .and_then(|(_, rest)| rest.split_once("-- ARGV[3..]"))
            .map_or("", |(modes, _)| modes);
        for mode in [
            Mode::Acquire,
            Mode::DryRun,
            Mode::Refund,
            Mode::RefundCharges,
            Mode::Reset,
            Mode::Block,
            Mode::Penalize,
            Mode::Reserve(0),
            Mode::Settle(0),
        ] {
            let listed = format!("'{}' ", mode.arg());
            assert!(header.contains(&listed), "{mode:?}");
        }
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
}
