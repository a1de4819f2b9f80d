//! One table of rate states in a shard (one (limit name, algorithm, period)): a hash
//! table typed by algorithm, so each entry is as small as its algorithm allows.

use std::mem::size_of;

use hashbrown::HashTable;

use super::cells::{AtomicTat, Cell, Plain, Stamped};
use crate::algorithm::{
    Params, Rule, fixed_window::FixedWindow, gcra::Gcra, leaky_bucket::LeakyBucket,
    sliding_window::SlidingWindow, sliding_window_counters::SlidingWindowCounters,
    sliding_window_log::SlidingWindowLog, token_bucket::TokenBucket,
};
use crate::{Algorithm, Key};

/// One limit's states: (key, cell) pairs found by a hash the store computes once per
/// decision (it also picks the shard), so a key is hashed once, not twice; and what
/// the table keeps for its cells besides (see [`Cell::Side`]).
pub(super) struct Map<C: Cell> {
    pub(super) entries: HashTable<(Key, C)>,
    pub(super) side: C::Side,
}

impl<C: Cell> Map<C> {
    fn new(p: &Params) -> Self {
        Self {
            entries: HashTable::new(),
            side: C::side(p),
        }
    }
}

/// One limit's states in this shard, typed by algorithm so each entry is as small as
/// its algorithm allows (GCRA: 16-byte key + 8-byte TAT).
pub(super) enum States {
    FixedWindow(Map<Stamped<<FixedWindow as Rule>::State>>),
    SlidingWindow(Map<Stamped<<SlidingWindow as Rule>::State>>),
    SlidingWindowCounters(Map<Stamped<<SlidingWindowCounters as Rule>::State>>),
    SlidingWindowLog(Map<Plain<<SlidingWindowLog as Rule>::State>>),
    TokenBucket(Map<Plain<<TokenBucket as Rule>::State>>),
    Gcra(Map<AtomicTat>),
    LeakyBucket(Map<AtomicTat>),
}

/// Runs `$body` with `$map` bound to the typed map and `$rule` to its rule type.
macro_rules! with_rule {
    ($states:expr, |$map:ident, $rule:ident| $body:expr) => {
        match $states {
            States::FixedWindow($map) => {
                #[allow(dead_code)]
                type $rule = FixedWindow;
                $body
            }
            States::SlidingWindow($map) => {
                #[allow(dead_code)]
                type $rule = SlidingWindow;
                $body
            }
            States::SlidingWindowCounters($map) => {
                #[allow(dead_code)]
                type $rule = SlidingWindowCounters;
                $body
            }
            States::SlidingWindowLog($map) => {
                #[allow(dead_code)]
                type $rule = SlidingWindowLog;
                $body
            }
            States::TokenBucket($map) => {
                #[allow(dead_code)]
                type $rule = TokenBucket;
                $body
            }
            States::Gcra($map) => {
                #[allow(dead_code)]
                type $rule = Gcra;
                $body
            }
            States::LeakyBucket($map) => {
                #[allow(dead_code)]
                type $rule = LeakyBucket;
                $body
            }
        }
    };
}

pub(super) use with_rule;

/// Runs `$body` with `$rule` bound to the rule type of the algorithm `$algorithm`
/// (no table needed: a fresh state's verdict).
macro_rules! with_algorithm {
    ($algorithm:expr, |$rule:ident| $body:expr) => {
        match $algorithm {
            $crate::Algorithm::FixedWindow => {
                type $rule = FixedWindow;
                $body
            }
            $crate::Algorithm::SlidingWindow => {
                type $rule = SlidingWindow;
                $body
            }
            $crate::Algorithm::SlidingWindowCounters { .. } => {
                type $rule = SlidingWindowCounters;
                $body
            }
            $crate::Algorithm::SlidingWindowLog => {
                type $rule = SlidingWindowLog;
                $body
            }
            $crate::Algorithm::TokenBucket => {
                type $rule = TokenBucket;
                $body
            }
            $crate::Algorithm::Gcra => {
                type $rule = Gcra;
                $body
            }
            $crate::Algorithm::LeakyBucket => {
                type $rule = LeakyBucket;
                $body
            }
        }
    };
}

pub(super) use with_algorithm;

impl States {
    pub(super) fn new(p: &Params) -> Self {
        match p.algorithm {
            Algorithm::FixedWindow => Self::FixedWindow(Map::new(p)),
            Algorithm::SlidingWindow => Self::SlidingWindow(Map::new(p)),
            Algorithm::SlidingWindowCounters { .. } => Self::SlidingWindowCounters(Map::new(p)),
            Algorithm::SlidingWindowLog => Self::SlidingWindowLog(Map::new(p)),
            Algorithm::TokenBucket => Self::TokenBucket(Map::new(p)),
            Algorithm::Gcra => Self::Gcra(Map::new(p)),
            Algorithm::LeakyBucket => Self::LeakyBucket(Map::new(p)),
        }
    }

    pub(super) fn len(&self) -> usize {
        with_rule!(self, |map, R| map.entries.len())
    }
}

/// What a table costs the shard in bytes besides its entries: the table itself (its
/// parameters and the hash table's header) and its place in the shard's index.
pub(super) const TABLE_BYTES: usize = size_of::<Table>() + size_of::<(u32, usize)>();

/// Aligned to a cache line, with its states first: a decision reads the hash table's
/// header and (GCRA, leaky bucket) the table's usual `T` next to it, one line, however
/// the shard's tables happen to be laid out in memory.
#[repr(C, align(64))]
pub(super) struct Table {
    pub(super) states: States,
    /// [`Limit::table`](crate::Limit): equal (name, algorithm, period) share a table.
    pub(super) id: u32,
    /// [`Limit::record`](crate::Limit): the limit name the table counts toward.
    pub(super) name: u32,
    pub(super) params: Params,
    /// Bytes of this table's entries (see [`entry_bytes`](super::cells::entry_bytes)).
    pub(super) bytes: usize,
    /// Whether a state was stored since the last sweep: a sweep drops a table found
    /// empty only if not, so a table whose keys all go idle between sweeps (and come
    /// back) keeps its allocation instead of growing it again every second.
    pub(super) stored: bool,
}

impl Table {
    pub(super) fn len(&self) -> usize {
        self.states.len()
    }
}
