//! The function library: the single-charge path as a Redis Function (Redis 7 and
//! later), loaded once per server and called with `FCALL`.
//!
//! `EVALSHA` runs a script's whole body on every call, so every call defines the
//! prelude's and the algorithm's functions again (a closure each) before deciding.
//! A library's body runs once, when it is loaded; a call runs only its entry point.
//! The library holds every algorithm's `decide` and two entry points: one decision
//! (`fcall.lua`) and a batch of single decisions, each decided as if alone
//! (`fcall_batch.lua`, sent by `coalesce.rs`). Refunds and multi-limit batches
//! (all-or-nothing across charges) stay scripts (they are rarer and need the steps).
//!
//! The library and its function are named after a hash of their source, so two
//! tollgate versions sharing a server each call their own code, and loading is
//! idempotent (`FUNCTION LOAD REPLACE` of identical code). A server without the
//! library (a new node, `FUNCTION FLUSH`, a restart without persistence) answers
//! "Function not found": the library is loaded and the call made again, as `NOSCRIPT`
//! reloads a script. A server that cannot load it (Redis 6, an ACL without
//! `FUNCTION`, a managed service that renamed the command) makes the store go back
//! to scripts for good.
//!
//! A load takes the server about half a millisecond (it compiles the library), so
//! concurrent calls that all found the library missing (a cold start, a flush) do
//! not each load it: one loads, the others wait for it and call again.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use redis::{Cmd, RedisError, Script};
use tokio::sync::Mutex;

use super::connection::Conn;
use super::script::{Call, Reply, lua, twin};
use crate::Algorithm;

/// The library's source and its versioned function names.
pub(super) struct Library {
    /// One decision (`fcall.lua`).
    pub(super) function: String,
    /// A batch of single decisions (`fcall_batch.lua`, see `coalesce.rs`).
    pub(super) batch: String,
    source: String,
}

/// The function library `FCALL` calls, joined in the order `lua/README.md` gives:
/// every algorithm's `decide` ([`Algorithm::ALL`], each after the one it builds on),
/// and the entry points `fcall.lua` and `fcall_batch.lua` instead of the scripts'
/// drivers.
fn library_body() -> String {
    let mut body = String::from(lua::PRELUDE);
    for &algorithm in &Algorithm::ALL {
        body.push_str(twin(algorithm).decide);
    }
    for part in [
        lua::BLOCK,
        lua::CLOCK,
        lua::LEAN,
        lua::FCALL,
        lua::FCALL_BATCH,
    ] {
        body.push_str(part);
    }
    body
}

pub(super) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let body = library_body();
    // The SHA-1 that `EVALSHA` would use: a stable name for this exact code.
    let hash = Script::new(&body).get_hash().to_owned();
    let function = format!("tollgate_{}", &hash[..16]);
    let batch = format!("{function}_batch");
    let source = format!(
        "#!lua name={function}\n{body}\nredis.register_function('{function}', call)\n\
         redis.register_function('{batch}', call_batch)\n"
    );
    Library {
        function,
        batch,
        source,
    }
});

impl Library {
    /// `FUNCTION LOAD REPLACE <source>`: on a cluster, redis-rs sends it to every
    /// master.
    pub(super) fn load(&self) -> Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&self.source);
        cmd
    }
}

/// Whether the server answered that it has no such function (not loaded there yet).
pub(super) fn is_missing(err: &RedisError) -> bool {
    err.code() == Some("ERR")
        && err
            .detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// Whether the server refused to load the library for good: `NOPERM` (an ACL), or an
/// `ERR` (an unknown command, functions not supported, code it will not take). Other
/// errors (`OOM`, `BUSY`, `LOADING`, `READONLY`, a lost connection) pass, and the next
/// call tries again.
pub(super) fn is_refusal(err: &RedisError) -> bool {
    matches!(err.code(), Some("NOPERM" | "ERR"))
}

/// Whether `FCALL` itself is unknown or forbidden here (Redis 6, an ACL without it):
/// the store goes back to scripts.
pub(super) fn is_unsupported(err: &RedisError) -> bool {
    err.code() == Some("NOPERM")
        || (err.code() == Some("ERR")
            && err
                .detail()
                .is_some_and(|d| d.starts_with("unknown command")))
}

/// A store's use of the library: shared by its clones.
#[derive(Debug)]
pub(super) struct Functions {
    enabled: AtomicBool,
    /// Successful loads so far, so that a call that found the library missing can
    /// tell whether another call loaded it since.
    loads: AtomicU64,
    /// Held while loading: one load at a time per store.
    loading: Mutex<()>,
}

impl Functions {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled: AtomicBool::new(enabled),
            loads: AtomicU64::new(0),
            loading: Mutex::new(()),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// One charge through the library: `None` when the server cannot run it (no
    /// `FUNCTION` or `FCALL` there), after which the store uses scripts; the caller
    /// then sends the script. A server without the library yet gets it, and the call
    /// is made again.
    pub(super) async fn call(
        &self,
        conn: &mut Conn,
        request: &Call,
    ) -> Option<Result<Reply, RedisError>> {
        self.query(conn, &request.fcall(&LIBRARY.function)).await
    }

    /// `fcall`, a call of one of the library's functions, as [`call`](Self::call)
    /// sends it: `None` when the server cannot run functions.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        conn: &mut Conn,
        fcall: &Cmd,
    ) -> Option<Result<T, RedisError>> {
        let loads_before = self.loads.load(Relaxed);
        match conn.query(fcall).await {
            Err(err) if is_missing(&err) => {
                let _loading = self.loading.lock().await;
                if self.loads.load(Relaxed) == loads_before {
                    match conn.query::<redis::Value>(&LIBRARY.load()).await {
                        Ok(_) => self.loads.fetch_add(1, Relaxed),
                        Err(err) if is_refusal(&err) => return self.refused(),
                        Err(err) => return Some(Err(err)),
                    };
                }
                Some(conn.query(fcall).await)
            }
            Err(err) if is_unsupported(&err) => self.refused(),
            reply => Some(reply),
        }
    }

    fn refused<T>(&self) -> Option<T> {
        self.enabled.store(false, Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::connection::error_reply as reply;
    use super::*;

    #[test]
    fn a_server_without_the_library_is_told_apart_from_one_without_functions() {
        let missing = reply("ERR Function not found");
        assert!(is_missing(&missing));
        assert!(!is_unsupported(&missing));
        // Redis 6, and an ACL without FCALL: back to scripts.
        for line in [
            "ERR unknown command 'FCALL', with args beginning with: 'tollgate_0' '1' ",
            "NOPERM User default has no permissions to run the 'fcall' command",
        ] {
            let err = reply(line);
            assert!(is_unsupported(&err), "{line}");
            assert!(!is_missing(&err), "{line}");
        }
    }

    #[test]
    fn a_load_is_refused_for_good_only_by_an_acl_or_an_err() {
        for line in [
            "NOPERM User default has no permissions to run the 'function|load' command",
            "ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' ",
            "ERR Error compiling function: user_function:1: syntax error",
        ] {
            assert!(is_refusal(&reply(line)), "{line}");
        }
        // Passing conditions: the next call loads again.
        for line in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "BUSY Redis is busy running a script.",
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica.",
        ] {
            assert!(!is_refusal(&reply(line)), "{line}");
        }
    }
}
