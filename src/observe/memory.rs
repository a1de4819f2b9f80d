//! The memory store's size (`tollgate_memory_keys`, `tollgate_memory_bytes`: gauges
//! moved by each change, summed over the process's stores) and its evictions by the
//! bound that forced them.

/// Which bound made a memory store evict a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Eviction {
    /// Its share of `max_keys`.
    Keys,
    /// Its share of `max_bytes`.
    Bytes,
}

/// A shard's states changed by `entries` and its bytes by `bytes`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub(crate) fn memory_changed(entries: isize, bytes: isize) {
    #[cfg(feature = "metrics")]
    {
        use super::names::emit;
        if entries != 0 {
            emit!(gauge, "tollgate_memory_keys", "rate_limit.memory.keys"; increment(entries as f64));
        }
        if bytes != 0 {
            emit!(gauge, "tollgate_memory_bytes", "rate_limit.memory.bytes"; increment(bytes as f64));
        }
    }
}

/// A memory store evicted a state to stay within `bound`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn memory_evicted(bound: Eviction) {
    #[cfg(feature = "metrics")]
    {
        use super::names::emit;
        match bound {
            Eviction::Keys => {
                emit!(counter, "tollgate_memory_evictions_total", "rate_limit.memory.evictions", "reason" => "keys"; increment(1));
            }
            Eviction::Bytes => {
                emit!(counter, "tollgate_memory_evictions_total", "rate_limit.memory.evictions", "reason" => "bytes"; increment(1));
            }
        }
    }
}
