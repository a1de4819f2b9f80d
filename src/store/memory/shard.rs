//! One shard of the memory store: the states of the keys that hash to it, one table
//! per policy, bounded and swept of idle state as it is used.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use foldhash::fast::RandomState;

use super::blocks::{Blocks, Record};
use super::cells::{AtomicTat, Cell, entry_bytes};
use super::eviction::pick_victim;
use super::footprint::Footprint;
use super::tables::{Map, States, Table, with_rule};
use crate::algorithm::{
    self, Params, Refund, Rule, Verdict, fixed_window::FixedWindow, gcra, gcra::Gcra,
    leaky_bucket::LeakyBucket, sliding_window::SlidingWindow,
    sliding_window_counters::SlidingWindowCounters, sliding_window_log::SlidingWindowLog,
    token_bucket::TokenBucket,
};
use crate::penalty::Penalty;
use crate::{Key, Limit};

/// How often (µs of store time) a shard drops idle state as it is touched.
const SWEEP_INTERVAL_US: u64 = 1_000_000;
/// The states of one shard.
///
/// Aligned to a cache line so that, behind its lock, it starts on a line of its own:
/// read-locked decisions write the lock word on every call, and would otherwise take
/// the line holding `latest`, `next_sweep` and the tables away from each other's core.
///
/// **Budgets.** The shard holds at most `capacity` entries and `max_bytes` bytes, and
/// each table (policy) has an equal share of both: a table that has reached its share
/// makes room among its own states only, so a flood of new keys through one policy
/// never evicts another policy's state. Only a table holding more than its share
/// (possible when a policy first used after the others shrinks every share) gives
/// room to the others.
#[repr(align(64))]
pub(crate) struct Shard {
    tables: Vec<Table>,
    capacity: usize,
    max_bytes: usize,
    /// States stored across all tables (kept here: summing the tables per decision
    /// showed up in profiles).
    entries: usize,
    /// Bytes across all tables.
    bytes: usize,
    /// When the next sweep is due. Atomic, like `latest`, so the read-locked path can
    /// see it; written under the write lock only.
    next_sweep: AtomicU64,
    /// The latest instant this shard has seen. Time never runs backwards for the keys
    /// in it: a clock that steps back is treated as standing still here.
    latest: AtomicU64,
    hasher: RandomState,
    /// Blocks and penalty counts of this shard's keys, at most `capacity` of them.
    blocks: Blocks,
    /// Picks eviction samples. Seeded from the OS-seeded generator of the thread that
    /// built the store: callers cannot predict which entries a sample will hold.
    rng: fastrand::Rng,
}

/// A key and its hash under the store's hasher, computed once per decision: it picks
/// the shard (bits 32..) and the bucket in the shard's table (the low bits and top 7).
#[derive(Clone, Copy)]
pub(crate) struct Hashed<'a> {
    pub(crate) key: &'a Key,
    pub(crate) hash: u64,
}

/// Decides in `map` for a key it holds; `None` when the key is not stored. Also
/// returns by how many bytes the entry grew (a log that took a new entry).
fn run_stored<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    cost: u64,
    charge: bool,
) -> Option<(Verdict, isize)>
where
    R::State: Footprint,
{
    let (_, cell) = map.find_mut(key.hash, |(k, _)| k == key.key)?;
    let before = entry_bytes(cell);
    let verdict = cell.with_mut(|state| {
        let verdict = algorithm::evaluate::<R>(p, state, now, floor, cost, charge);
        state.compact();
        verdict
    });
    if charge && cost > 0 && verdict.allowed {
        cell.stamp(now.max(floor));
    }
    let grown = entry_bytes(cell).cast_signed() - before.cast_signed();
    Some((verdict, grown))
}

/// Decides for a key with no state: on a fresh state, stored only by `insert`.
fn run_fresh<R: Rule>(
    p: &Params,
    (now, floor): (u64, u64),
    cost: u64,
    charge: bool,
) -> (Verdict, R::State) {
    let mut state = R::State::default();
    let verdict = algorithm::evaluate::<R>(p, &mut state, now, floor, cost, charge);
    (verdict, state)
}

fn refund_in<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    what: Refund,
) {
    if let Some((_, cell)) = map.find_mut(key.hash, |(k, _)| k == key.key) {
        cell.with_mut(|state| algorithm::refund::<R>(p, state, now, floor, what));
    }
}

/// Decides one charge for a stored key of a GCRA or leaky-bucket table under the
/// shard's read lock: the new TAT is computed from the one read and installed by
/// compare-and-swap, again from the fresh value when another thread got there first.
/// `None` when the key is not stored (inserting needs the write lock).
fn run_atomic<R: Rule<State = gcra::State>>(
    map: &Map<AtomicTat>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    cost: u64,
) -> Option<Verdict> {
    let (_, AtomicTat { tat, emission_ns }) = map.find(key.hash, |(k, _)| k == key.key)?;
    if *emission_ns != p.emission_ns {
        // Counted under another quota: re-counting it needs the write lock.
        return None;
    }
    let mut seen = tat.load(Relaxed);
    loop {
        let mut state = gcra::State {
            tat_ns: seen,
            emission_ns: p.emission_ns,
        };
        let step = algorithm::apply::<R>(p, &mut state, now, floor, cost, true);
        // A denial (or a zero cost) changes nothing: its verdict holds for the TAT
        // read. A charge holds once its TAT is installed over the one it started from.
        if state.tat_ns != seen
            && let Err(current) = tat.compare_exchange_weak(seen, state.tat_ns, Relaxed, Relaxed)
        {
            seen = current;
            continue;
        }
        return Some(algorithm::report::<R>(p, &state, now, cost, step));
    }
}

impl Shard {
    pub(crate) fn new(capacity: usize, max_bytes: usize, hasher: RandomState) -> Self {
        Self {
            tables: Vec::new(),
            capacity,
            max_bytes,
            entries: 0,
            bytes: 0,
            next_sweep: AtomicU64::new(0),
            latest: AtomicU64::new(0),
            hasher,
            blocks: Blocks::default(),
            rng: fastrand::Rng::new(),
        }
    }

    /// How many block and penalty records the shard holds.
    pub(crate) fn blocks_len(&self) -> usize {
        self.blocks.len()
    }

    /// The answer for `key` under `policy` at `now` if the key is blocked. Costs one
    /// emptiness check while no key of the shard has a record.
    #[inline]
    fn blocked(&self, policy: &Limit, key: Hashed<'_>, now: u64) -> Option<Verdict> {
        if self.blocks.is_empty() {
            return None;
        }
        let left = self
            .blocks
            .get(policy.table(), key)?
            .offences
            .blocked_for(now)?;
        Some(Verdict::blocked(left, false))
    }

    /// The tail of `key`'s queue of reservations under `policy`, if it is still ahead
    /// of `now`. One emptiness check while no key of the shard has a record.
    #[inline]
    fn queued(&self, policy: &Limit, key: Hashed<'_>, now: u64) -> Option<u64> {
        if self.blocks.is_empty() {
            return None;
        }
        let tail = self.blocks.get(policy.table(), key)?.queue_until;
        (tail > now).then_some(tail)
    }

    /// Reserves `cost` for `key` under `policy` at `now`: the request's place is the
    /// earliest instant, behind the key's queue of reservations, at which the rule
    /// admits it; if that is within `max_wait_us`, it is charged there and then (the
    /// state runs ahead of the clock until then) and the verdict's delay is the wait.
    /// Otherwise nothing is charged and the denial's `retry_after` says when it could.
    pub(crate) fn reserve(
        &mut self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        max_wait_us: u64,
    ) -> Verdict {
        let floor = self.advance_and_sweep(now);
        if let Some(blocked) = self.blocked(policy, key, now) {
            return blocked;
        }
        let tail = self.queued(policy, key, now).unwrap_or(0);
        let first = floor.max(tail);
        let probe = self.decide_at(policy, key, now, first, cost, false);
        // Measured on the caller's clock, as the Redis store measures it: a place the
        // rule gives at once is now, even when the key's latest instant is ahead.
        // Full again no earlier than where the probe stood, as Redis reports it.
        let reset_after_us = probe.reset_after_us.max(first - now);
        let at = if probe.allowed {
            now.max(tail)
        } else {
            match probe.retry_after_us {
                Some(retry) => now + retry,
                None => {
                    return Verdict {
                        reset_after_us,
                        ..probe
                    };
                }
            }
        };
        // The leaky bucket serves its place when the queue ahead has drained: the
        // wait is until then (its reset at the place), and that is what max_wait bounds.
        let served = if policy.params().algorithm == crate::Algorithm::LeakyBucket {
            let there = self.decide_at(policy, key, now, floor.max(at), cost, false);
            at.max(now + there.reset_after_us)
        } else {
            at
        };
        if served - now > max_wait_us {
            // Refused, charging nothing: a probe the rule admitted at the queue's
            // tail is still a refusal here (it used to be reported allowed, with
            // nothing charged: a caller that trusted it went uncounted).
            return Verdict {
                allowed: false,
                reset_after_us,
                retry_after_us: Some(served - now),
                delay_us: 0,
                receipt: None,
                ..probe
            };
        }
        let mut verdict = self.decide_at(policy, key, now, floor.max(at), cost, true);
        if !verdict.allowed {
            return verdict;
        }
        verdict.delay_us = verdict.delay_us.max(at - now);
        if at > now {
            let record = self.record(policy, key, now);
            record.queue_until = record.queue_until.max(at);
            record.expires_at = record.expires_at.max(at);
        }
        verdict
    }

    /// The block record of `key` under `policy`, made if there is none (within the
    /// shard's bound, see `blocks.rs`).
    fn record(&mut self, policy: &Limit, key: Hashed<'_>, now: u64) -> &mut Record {
        self.blocks.entry(
            policy.table(),
            key,
            (self.capacity, now),
            self.hasher,
            &mut self.rng,
        )
    }

    /// Counts a rejection of `key` under `policy`'s `penalty` at `now`; the blocked
    /// answer when it trips the box. `verdict` is the rejection, returned otherwise.
    pub(crate) fn offend(
        &mut self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        penalty: &Penalty,
        verdict: Verdict,
    ) -> Verdict {
        let record = self.record(policy, key, now);
        if record.offences.blocked_for(now).is_some() {
            // Blocked since the rejection was decided (another thread): not counted.
            return verdict;
        }
        let tripped = record.offences.offend(penalty, now);
        record.expires_at = record
            .offences
            .idle_at(penalty.within_us())
            .max(record.queue_until);
        if tripped {
            Verdict::blocked(penalty.block_us(), true)
        } else {
            verdict
        }
    }

    /// Blocks `key` under `policy` for `duration_us` from `now`, replacing its block
    /// and its count; 0 lifts the block.
    pub(crate) fn block(&mut self, policy: &Limit, key: Hashed<'_>, now: u64, duration_us: u64) {
        if duration_us == 0 {
            self.blocks.remove(policy.table(), key);
            return;
        }
        let record = self.record(policy, key, now);
        let until = now.saturating_add(duration_us);
        record.offences = crate::penalty::Offences {
            blocked_until: until,
            count: 0,
            first_at: 0,
        };
        record.expires_at = until.max(record.queue_until);
    }

    /// Makes `key` idle under `policy`: its state, block and count are gone.
    pub(crate) fn reset(&mut self, policy: &Limit, key: Hashed<'_>) {
        self.blocks.remove(policy.table(), key);
        let index = self.table_index(policy);
        let table = &mut self.tables[index];
        let freed = with_rule!(&mut table.states, |map, R| {
            map.find_entry(key.hash, |(k, _)| k == key.key)
                .ok()
                .map(|entry| entry_bytes(&entry.remove().0.1))
        });
        if let Some(bytes) = freed {
            table.bytes -= bytes;
            self.bytes -= bytes;
            self.entries -= 1;
        }
    }

    /// Charges `cost` to `key` under `policy` at `now` whether or not it fits, and
    /// reports the key as a peek would (blocked, if it is).
    pub(crate) fn penalize(
        &mut self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
    ) -> Verdict {
        let floor = self.advance_and_sweep(now);
        let index = self.table_index(policy);
        let params = policy.params();
        let found = with_rule!(&mut self.tables[index].states, |map, R| {
            map.find(key.hash, |(k, _)| k == key.key).is_some()
        });
        if !found && cost > 0 {
            self.make_room_for_one(index, floor);
            let hasher = self.hasher;
            let table = &mut self.tables[index];
            let bytes = with_rule!(&mut table.states, |map, R| {
                let (_, cell) = map
                    .insert_unique(
                        key.hash,
                        (*key.key, Cell::new(<R as Rule>::State::default())),
                        |(k, _)| hasher.hash_one(k),
                    )
                    .into_mut();
                entry_bytes(cell)
            });
            table.bytes += bytes;
            self.entries += 1;
            self.bytes += bytes;
        }
        let table = &mut self.tables[index];
        let outcome = with_rule!(&mut table.states, |map, R| {
            map.find_mut(key.hash, |(k, _)| k == key.key)
                .map(|(_, cell)| {
                    let before = entry_bytes(cell);
                    let verdict = cell.with_mut(|state| {
                        let verdict = algorithm::penalize::<R>(params, state, now, floor, cost);
                        state.compact();
                        verdict
                    });
                    if cost > 0 {
                        cell.stamp(floor);
                    }
                    (
                        verdict,
                        entry_bytes(cell).cast_signed() - before.cast_signed(),
                    )
                })
        });
        let verdict = match outcome {
            Some((verdict, grown)) => {
                if grown != 0 {
                    self.tables[index].bytes =
                        self.tables[index].bytes.saturating_add_signed(grown);
                    self.bytes = self.bytes.saturating_add_signed(grown);
                    if grown > 0 {
                        self.fit_bytes(index, key.key, floor);
                    }
                }
                verdict
            }
            // Nothing charged to a key with no state: a peek of a fresh one.
            None => with_rule!(&self.tables[index].states, |_map, R| {
                let mut fresh = <R as Rule>::State::default();
                algorithm::penalize::<R>(params, &mut fresh, now, floor, 0)
            }),
        };
        self.blocked(policy, key, now).unwrap_or(verdict)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The table of `policy`, created (empty) if the shard has none yet.
    pub(crate) fn table_index(&mut self, policy: &Limit) -> usize {
        let id = policy.table();
        if let Some(i) = self.tables.iter().position(|t| t.id == id) {
            return i;
        }
        let params = *policy.params();
        self.tables.push(Table {
            id,
            params,
            states: States::new(params.algorithm),
            bytes: 0,
        });
        self.tables.len() - 1
    }

    /// Decides a charge of `cost` for `key` under `policy` at `now` with only the
    /// shard's read lock, when the policy's states are atomic (GCRA, leaky bucket)
    /// and the key is stored. `None` when the write lock is needed: the table or the
    /// key is not there yet, or a sweep is due.
    pub(crate) fn run_shared(
        &self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
    ) -> Option<Verdict> {
        let floor = self.advance(now);
        if floor >= self.next_sweep.load(Relaxed) {
            return None;
        }
        // One look at the key's record (none in the common case, an empty table): a
        // block answers, a queue of reservations needs the write lock.
        if !self.blocks.is_empty()
            && let Some(record) = self.blocks.get(policy.table(), key)
        {
            if let Some(left) = record.offences.blocked_for(now) {
                return Some(Verdict::blocked(left, false));
            }
            if record.queue_until > now {
                return None;
            }
        }
        let id = policy.table();
        let table = self.tables.iter().find(|t| t.id == id)?;
        match &table.states {
            States::Gcra(map) => run_atomic::<Gcra>(map, policy.params(), key, (now, floor), cost),
            States::LeakyBucket(map) => {
                run_atomic::<LeakyBucket>(map, policy.params(), key, (now, floor), cost)
            }
            _ => None,
        }
    }

    /// Decides `cost` for `key` under `policy` at `now`, with the write lock held.
    ///
    /// A key with no state is decided on a fresh one first; only an admitted charge
    /// stores it, and only then is room made, so a request that is denied (or peeks)
    /// never evicts anything.
    pub(crate) fn run(
        &mut self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        charge: bool,
    ) -> Verdict {
        let floor = self.advance_and_sweep(now);
        // A blocked key is denied whatever its rate state says, and charged nothing.
        if let Some(blocked) = self.blocked(policy, key, now) {
            return blocked;
        }
        if let Some(tail) = self.queued(policy, key, now) {
            if cost == 0 {
                // A peek while places are ahead answers as of the queue's tail, as the
                // Redis store does: there the state's latest instant is the latest
                // place, and decisions stand still there until the clock catches up.
                return self.decide_at(policy, key, now, floor.max(tail), 0, false);
            }
            // Reservations ahead: the request's place is behind them, so it is denied
            // now, with the wait until that place (it asked not to wait).
            let behind = self.decide_at(policy, key, now, floor.max(tail), cost, false);
            return Verdict {
                allowed: false,
                retry_after_us: if behind.allowed {
                    Some(tail - now)
                } else {
                    behind.retry_after_us
                },
                delay_us: 0,
                receipt: None,
                // Full again no earlier than the queue's tail, as Redis reports it.
                reset_after_us: behind.reset_after_us.max(tail - now),
                ..behind
            };
        }
        self.decide_at(policy, key, now, floor, cost, charge)
    }

    /// Decides `cost` for `key` under `policy`, on the caller's clock `now` but at the
    /// instant `max(now, floor)` (the latest seen, or a reservation's place).
    fn decide_at(
        &mut self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        floor: u64,
        cost: u64,
        charge: bool,
    ) -> Verdict {
        let index = self.table_index(policy);
        let at = (now, floor);
        let table = &mut self.tables[index];
        // The charge's own parameters, not the table's: a caller's quota may differ from
        // the limit's (a plan), and its state carries its usage over between them.
        let params = policy.params();
        let stored = with_rule!(&mut table.states, |map, R| run_stored::<R, _>(
            map, params, key, at, cost, charge
        ));
        if let Some((verdict, grown)) = stored {
            if grown != 0 {
                self.tables[index].bytes = self.tables[index].bytes.saturating_add_signed(grown);
                self.bytes = self.bytes.saturating_add_signed(grown);
                if grown > 0 {
                    self.fit_bytes(index, key.key, floor);
                }
            }
            return verdict;
        }
        let verdict = with_rule!(&self.tables[index].states, |_map, R| {
            run_fresh::<R>(params, at, cost, false).0
        });
        if !(charge && cost > 0 && verdict.allowed) {
            return verdict;
        }
        self.make_room_for_one(index, floor);
        let hasher = self.hasher;
        let table = &mut self.tables[index];
        let (verdict, bytes) = with_rule!(&mut table.states, |map, R| {
            let (verdict, state) = run_fresh::<R>(params, at, cost, true);
            let (_, cell) = map
                .insert_unique(key.hash, (*key.key, Cell::new(state)), |(k, _)| {
                    hasher.hash_one(k)
                })
                .into_mut();
            cell.stamp(floor);
            (verdict, entry_bytes(cell))
        });
        table.bytes += bytes;
        self.entries += 1;
        self.bytes += bytes;
        self.fit_bytes(index, key.key, floor);
        verdict
    }

    /// Records `now` and returns the latest instant seen, `max(now, latest)`.
    ///
    /// A plain store, not a `fetch_max`: with keys spread over the shards, most
    /// decisions find their shard's instant behind, and a locked read-modify-write here
    /// cost two threads more than the rest of a read-locked GCRA decision. Two
    /// read-locked decisions storing at once may leave the earlier of their two
    /// readings; a floor a little behind only makes a clock that steps back stand still
    /// a little earlier, which for GCRA and the leaky bucket (the only states decided
    /// under the read lock) is stricter, never more lenient. Under the write lock
    /// nobody else is in the shard.
    #[inline]
    fn advance(&self, now: u64) -> u64 {
        let latest = self.latest.load(Relaxed);
        if now <= latest {
            return latest;
        }
        self.latest.store(now, Relaxed);
        now
    }

    /// Refunds `amount` of `key`'s newest charges under `policy` at `now`.
    pub(crate) fn refund(&mut self, policy: &Limit, key: Hashed<'_>, now: u64, amount: u64) {
        self.refund_as(policy, key, now, Refund::Newest(amount));
    }

    /// Refunds to `key` under `policy` at `now`: its newest charges or one charge.
    pub(crate) fn refund_as(&mut self, policy: &Limit, key: Hashed<'_>, now: u64, what: Refund) {
        let floor = self.advance(now);
        let index = self.table_index(policy);
        let table = &mut self.tables[index];
        with_rule!(&mut table.states, |map, R| refund_in::<R, _>(
            map,
            policy.params(),
            key,
            (now, floor),
            what
        ));
    }

    /// Each table's share of the shard's keys (at least one).
    fn key_share(&self) -> usize {
        (self.capacity / self.tables.len().max(1)).max(1)
    }

    /// Each table's share of the shard's bytes.
    fn byte_share(&self) -> usize {
        self.max_bytes / self.tables.len().max(1)
    }

    /// Frees room for one more entry in table `index`: from the table itself when it
    /// has reached its share, else from a table holding more than its own.
    fn make_room_for_one(&mut self, index: usize, now: u64) {
        let share = self.key_share();
        while self.entries >= self.capacity || self.tables[index].len() >= share {
            let victim_table = if self.tables[index].len() >= share {
                index
            } else {
                match self.most_over_share(|t, share| t.len() > share, share) {
                    Some(other) => other,
                    None => break,
                }
            };
            if !self.evict_one(victim_table, None, now) {
                break;
            }
        }
    }

    /// After table `index` grew in bytes: evicts (never `keep`, the key just decided)
    /// until the table is within its byte share and the shard within its bound.
    fn fit_bytes(&mut self, index: usize, keep: &Key, now: u64) {
        let share = self.byte_share();
        while self.tables[index].bytes > share {
            if !self.evict_one(index, Some(keep), now) {
                break;
            }
        }
        while self.bytes > self.max_bytes {
            let victim_table = self
                .most_over_share(|t, share| t.bytes > share, share)
                .unwrap_or(index);
            if !self.evict_one(victim_table, Some(keep), now) {
                break;
            }
        }
    }

    /// The table furthest over its share by `over`, if any is.
    fn most_over_share(&self, over: impl Fn(&Table, usize) -> bool, share: usize) -> Option<usize> {
        self.tables
            .iter()
            .enumerate()
            .filter(|(_, t)| over(t, share))
            .max_by_key(|(_, t)| (t.len(), t.bytes))
            .map(|(i, _)| i)
    }

    /// Evicts one entry of table `index` (never `keep`): of a random sample, the one
    /// whose loss forgives the least. False when there is nothing to evict.
    fn evict_one(&mut self, index: usize, keep: Option<&Key>, now: u64) -> bool {
        let rng = &mut self.rng;
        let table = &mut self.tables[index];
        let p = table.params;
        let freed = with_rule!(&mut table.states, |map, R| {
            pick_victim::<R, _>(map, &p, now, keep, rng)
                .and_then(|bucket| map.get_bucket_entry(bucket).ok())
                .map(|entry| entry_bytes(&entry.remove().0.1))
        });
        let Some(bytes) = freed else {
            return false;
        };
        table.bytes -= bytes;
        self.bytes -= bytes;
        self.entries -= 1;
        true
    }

    /// [`advance`](Shard::advance), then a sweep if one is due: how every write-locked
    /// decision starts. Returns the latest instant seen.
    fn advance_and_sweep(&mut self, now: u64) -> u64 {
        let floor = self.advance(now);
        if floor >= *self.next_sweep.get_mut() {
            self.sweep(floor);
        }
        floor
    }

    /// Drops every state that is indistinguishable from a fresh one.
    fn sweep(&mut self, now: u64) {
        *self.next_sweep.get_mut() = now.saturating_add(SWEEP_INTERVAL_US);
        for table in &mut self.tables {
            let p = &table.params;
            table.bytes = with_rule!(&mut table.states, |map, R| {
                map.retain(|(_, cell)| cell.with(|s| <R as Rule>::idle_at(p, s)) > now);
                map.iter().map(|(_, cell)| entry_bytes(cell)).sum()
            });
        }
        self.entries = self.tables.iter().map(Table::len).sum();
        self.bytes = self.tables.iter().map(|t| t.bytes).sum();
        self.blocks.sweep(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;

    fn run(shard: &mut Shard, policy: &Limit, key: u64, now: u64, cost: u64) -> Verdict {
        let key = Key::from(key);
        let hash = shard.hasher.hash_one(key);
        shard.run(policy, Hashed { key: &key, hash }, now, cost, cost > 0)
    }

    #[test]
    fn a_full_shard_evicts_one_state_per_new_key_between_sweeps() {
        // Regression: a full shard used to sweep itself on every new key, a scan of
        // the whole shard per request under a flood of distinct keys.
        let policy = Limit::new("api", Quota::per_second(1_000)).expect("policy");
        let mut shard = Shard::new(4, usize::MAX, RandomState::default());
        let start = 10_000_000;
        for i in 0..4_u64 {
            assert!(run(&mut shard, &policy, i, start, 1).allowed);
        }
        // Every state is idle 1 ms later, but the next sweep is due only at
        // `start + 1 s`: before it, a new key evicts one state and leaves the others.
        let before_sweep = start + SWEEP_INTERVAL_US / 2;
        assert!(run(&mut shard, &policy, 4, before_sweep, 1).allowed);
        assert_eq!(shard.len(), 4);
        // The sweep, when due, drops what is idle.
        run(&mut shard, &policy, 5, start + SWEEP_INTERVAL_US, 0);
        assert_eq!(shard.len(), 0);
    }
}
