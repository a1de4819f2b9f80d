//! The Lua source: the files every script and the function library share, and each
//! algorithm's twin (see `lua/README.md`, "Assembly").

use crate::Algorithm;

/// The Lua files every script and the function library share, each named after its
/// file (`lua/README.md`).
pub(in crate::store::redis) mod lua {
    pub(in crate::store::redis) const PRELUDE: &str = include_str!("../lua/prelude.lua");
    pub(in crate::store::redis) const BLOCK: &str = include_str!("../lua/block.lua");
    pub(in crate::store::redis) const CLOCK: &str = include_str!("../lua/clock.lua");
    pub(in crate::store::redis) const LEAN: &str = include_str!("../lua/lean.lua");
    pub(in crate::store::redis) const EVALSHA: &str = include_str!("../lua/evalsha.lua");
    pub(in crate::store::redis) const PRELUDE_STEPS: &str =
        include_str!("../lua/prelude_steps.lua");
    pub(in crate::store::redis) const EVALSHA_BATCH: &str =
        include_str!("../lua/evalsha_batch.lua");
    pub(in crate::store::redis) const FCALL: &str = include_str!("../lua/fcall.lua");
    pub(in crate::store::redis) const FCALL_BATCH: &str = include_str!("../lua/fcall_batch.lua");
}

/// An algorithm's Lua twin: the files of its folder, `lua/<name>/` (named as
/// [`Algorithm::name`]), and the algorithm whose functions they build on, whose files
/// come first.
pub(in crate::store::redis) struct LuaTwin {
    pub(in crate::store::redis) decide: &'static str,
    pub(super) steps: &'static str,
    pub(super) builds_on: Option<Algorithm>,
}

macro_rules! twin {
    ($stem:literal) => {
        twin!($stem, None)
    };
    ($stem:literal, $on:expr) => {
        LuaTwin {
            decide: include_str!(concat!("../lua/", $stem, "/decide.lua")),
            steps: include_str!(concat!("../lua/", $stem, "/steps.lua")),
            builds_on: $on,
        }
    };
}

/// `algorithm`'s Lua files. Exhaustive: an algorithm does not compile without its twin.
pub(in crate::store::redis) fn twin(algorithm: Algorithm) -> LuaTwin {
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
pub(super) fn script_source(algorithms: &[Algorithm]) -> String {
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
