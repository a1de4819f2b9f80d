//! What a Redis failure means: the [`StoreError`] (of which [`StoreErrorKind`]) a
//! caller sees, and whether the connection it came on is still usable.
//!
//! Timeouts, lost connections and servers that are up but not serving (`LOADING`,
//! `CLUSTERDOWN`, `READONLY`, `OOM`, …) each come back as an error of their kind,
//! never as a panic; only an error that breaks the socket (or a cluster that is down)
//! drops the connection, every other error reply proves it alive.
//!
//! Redis 6.2 wraps an error a script's `redis.call` raised in an `ERR Error running
//! script …: -READONLY …` reply where Redis 7 and Valkey pass the inner code on: the
//! inner code decides the kind either way ([`script_inner_code`]). A server whose
//! scripting is unavailable to the store (an ACL without `EVALSHA`, a server without
//! Lua) gets an error that says so and names what the store needs.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::{StoreError, StoreErrorKind};

/// Whether an error means the connection itself is unusable.
///
/// A reply redis-rs could not read as the type asked for (`Parse`) was read whole,
/// so the connection is still in step and kept. redis-rs 1 reports bytes that are not
/// RESP with the same kind, but then closes that connection itself, and the next
/// call's error drops it.
pub(super) fn breaks_connection(err: &RedisError) -> bool {
    if err.kind() == ErrorKind::Parse {
        return false;
    }
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
        || matches!(
            err.kind(),
            ErrorKind::ClusterConnectionNotFound | ErrorKind::Server(ServerErrorKind::ClusterDown)
        )
}

/// The codes of a server that is up but not serving now: a later call may succeed.
const NOT_SERVING: [&str; 9] = [
    "LOADING",
    "CLUSTERDOWN",
    "READONLY",
    "TRYAGAIN",
    "MASTERDOWN",
    "OOM",
    "BUSY",
    "MISCONF",
    "NOREPLICAS",
];

/// The code of the error a script's `redis.call` raised, as Redis 6.2 reports it
/// inside its own: `ERR Error running script (call to f_…): @user_script:1:
/// @user_script: 1: -READONLY You can't write against a read only replica.`
fn script_inner_code(err: &RedisError) -> Option<&str> {
    if err.code() != Some("ERR") {
        return None;
    }
    let detail = err.detail()?;
    if !detail.starts_with("Error running script") {
        return None;
    }
    let (_, inner) = detail.split_once(": -")?;
    inner.split_whitespace().next()
}

/// Whether the server refused the store's scripting itself: `EVALSHA`, `SCRIPT LOAD`
/// or a command the script runs forbidden by an ACL (`NOPERM`), or a server without
/// them (`ERR unknown command`).
fn scripting_refused(err: &RedisError) -> bool {
    match err.code() {
        Some("NOPERM") => true,
        Some("ERR") => err.detail().is_some_and(|d| {
            let d = d.to_ascii_lowercase();
            d.starts_with("unknown command")
                && ["evalsha", "script", "eval"]
                    .iter()
                    .any(|c| d.contains(&format!("'{c}'")) || d.contains(&format!("`{c}`")))
        }),
        _ => false,
    }
}

/// Maps a Redis error to a [`StoreError`] of the right kind.
pub(super) fn store_error(err: RedisError) -> StoreError {
    let kind = if err.is_timeout() {
        StoreErrorKind::Timeout
    } else if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.kind() == ErrorKind::ClusterConnectionNotFound
    {
        StoreErrorKind::Connection
    } else {
        match err.kind() {
            // LOADING, CLUSTERDOWN, READONLY, TRYAGAIN, MASTERDOWN: up but not serving.
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::TryAgain
                | ServerErrorKind::MasterDown,
            ) => StoreErrorKind::Unavailable,
            // Out of memory (`noeviction`), busy with a long script, refusing writes
            // after a failed save or without enough replicas: up but not serving either;
            // so is a script whose own call was refused so (Redis 6.2).
            _ if err
                .code()
                .into_iter()
                .chain(script_inner_code(&err))
                .any(|code| NOT_SERVING.contains(&code)) =>
            {
                StoreErrorKind::Unavailable
            }
            _ => StoreErrorKind::Protocol,
        }
    };
    let message = match (err.code(), script_inner_code(&err)) {
        (Some(code), _) if scripting_refused(&err) => format!(
            "redis answered {code}: the store cannot run its Lua here; it needs EVALSHA, \
             SCRIPT LOAD and the commands its scripts run on the prefix's keys (see the \
             README's ACL rules); FCALL and FUNCTION LOAD are optional"
        ),
        (Some(code), Some(inner)) => format!("redis answered {code} ({inner} in the script)"),
        (Some(code), None) => format!("redis answered {code}"),
        (None, _) => format!("redis call failed ({:?})", err.kind()),
    };
    StoreError::new(kind, message).with_source(err)
}

#[cfg(feature = "deadpool")]
pub(super) fn pool_error(err: deadpool_redis::PoolError) -> StoreError {
    match err {
        deadpool_redis::PoolError::Backend(err) => store_error(err),
        deadpool_redis::PoolError::Timeout(_) => StoreError::new(
            StoreErrorKind::Timeout,
            "no redis connection within the pool's timeout",
        ),
        other => {
            StoreError::new(StoreErrorKind::Connection, "no redis connection").with_source(other)
        }
    }
}

#[cfg(feature = "deadpool")]
pub(super) fn cluster_pool_error(err: deadpool_redis::cluster::PoolError) -> StoreError {
    match err {
        deadpool_redis::cluster::PoolError::Backend(err) => store_error(err),
        deadpool_redis::cluster::PoolError::Timeout(_) => StoreError::new(
            StoreErrorKind::Timeout,
            "no redis cluster connection within the pool's timeout",
        ),
        other => StoreError::new(StoreErrorKind::Connection, "no redis cluster connection")
            .with_source(other),
    }
}

/// The error redis-rs makes of one error reply, read from its wire bytes: what a
/// batched decision's error (`script/batch.rs`) would have been as a reply of its
/// own, and the tests' errors of every file that maps errors.
pub(super) fn error_reply(line: &str) -> RedisError {
    use redis::{Value, parse_redis_value};
    // One line: a reply ends at its first CR LF.
    let line = line.replace(['\r', '\n'], " ");
    let bytes = format!("-{line}\r\n");
    match parse_redis_value(bytes.as_bytes()).and_then(Value::extract_error) {
        Err(err) => err,
        Ok(_) => RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "an error reply that did not read as one",
        )),
    }
}

#[cfg(test)]
mod tests {
    use redis::{Value, from_redis_value};

    use super::error_reply as reply;
    use super::*;

    #[test]
    fn a_server_that_is_up_but_not_serving_is_unavailable() {
        for line in [
            "LOADING Redis is loading the dataset in memory",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "BUSY Redis is busy running a script.",
            "MISCONF Redis is configured to save RDB snapshots, but it's unable to persist",
            "NOREPLICAS Not enough good replicas to write.",
        ] {
            let err = store_error(reply(line));
            assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{line}: {err}");
            let code = line.split(' ').next().unwrap_or_default();
            assert!(
                err.to_string().ends_with(&format!("redis answered {code}")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_script_refused_so_on_redis_6_is_unavailable_too() {
        // Redis 6.2 wraps the inner error in its own ERR; Redis 7 passes it on.
        for inner in [
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            let line = format!(
                "ERR Error running script (call to f_7569): @user_script:1: @user_script: 1: -{inner}"
            );
            let err = store_error(reply(&line));
            assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{line}: {err}");
            let code = inner.split(' ').next().unwrap_or_default();
            assert!(
                err.to_string().contains(&format!("({code} in the script)")),
                "{err}"
            );
        }
        // A script's own failure stays a protocol error.
        let boom = "ERR Error running script (call to f_0123): @user_script:1: boom -x";
        assert_eq!(store_error(reply(boom)).kind(), StoreErrorKind::Protocol);
    }

    #[test]
    fn a_server_that_will_not_run_scripts_says_what_the_store_needs() {
        for line in [
            "NOPERM this user has no permissions to run the 'evalsha' command",
            "NOPERM User u has no permissions to run the 'evalsha' command",
            "ERR unknown command 'EVALSHA', with args beginning with: ",
            "ERR unknown command `evalsha`, with args beginning with: `bf38`, ",
            "ERR unknown command 'SCRIPT', with args beginning with: 'LOAD' ",
        ] {
            let err = store_error(reply(line));
            assert_eq!(err.kind(), StoreErrorKind::Protocol, "{line}");
            assert!(err.to_string().contains("EVALSHA, SCRIPT LOAD"), "{err}");
        }
        let other = store_error(reply("ERR unknown command 'FOO'"));
        assert!(!other.to_string().contains("EVALSHA"), "{other}");
    }

    #[test]
    fn only_a_cluster_that_is_down_drops_the_connection_among_error_replies() {
        // Every other error reply is an answer: the connection is alive.
        assert!(breaks_connection(&reply("CLUSTERDOWN The cluster is down")));
        for line in [
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica.",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "MASTERDOWN Link with MASTER is down",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "BUSY Redis is busy running a script.",
            "NOSCRIPT No matching script. Please use EVAL.",
            "ERR Function not found",
            "ERR unknown command 'FCALL', with args beginning with: ",
            "NOPERM User default has no permissions to run the 'fcall' command",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "CROSSSLOT Keys in request don't hash to the same slot",
        ] {
            assert!(!breaks_connection(&reply(line)), "{line}");
        }
    }

    #[test]
    fn refusals_of_the_call_itself_are_protocol_errors() {
        for line in [
            "ERR Error running script (call to f_0123): @user_script:1: boom",
            "NOSCRIPT No matching script. Please use EVAL.",
            "NOPERM User default has no permissions to run the 'evalsha' command",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "CROSSSLOT Keys in request don't hash to the same slot",
        ] {
            assert_eq!(
                store_error(reply(line)).kind(),
                StoreErrorKind::Protocol,
                "{line}"
            );
        }
    }

    #[test]
    fn a_reply_of_the_wrong_type_keeps_the_connection() {
        // The whole reply was read: redis-rs 1 calls this `Parse` and would reconnect.
        let err = RedisError::from(
            from_redis_value::<Vec<i64>>(Value::Array(vec![Value::SimpleString("x".into())]))
                .expect_err("a string is not an integer"),
        );
        assert!(!breaks_connection(&err));
        assert_eq!(store_error(err).kind(), StoreErrorKind::Protocol);
    }

    #[test]
    fn a_lost_socket_drops_the_connection() {
        for (io, kind) in [
            (std::io::ErrorKind::BrokenPipe, StoreErrorKind::Connection),
            (
                std::io::ErrorKind::ConnectionReset,
                StoreErrorKind::Connection,
            ),
            (
                std::io::ErrorKind::ConnectionRefused,
                StoreErrorKind::Connection,
            ),
            (
                std::io::ErrorKind::UnexpectedEof,
                StoreErrorKind::Connection,
            ),
            (std::io::ErrorKind::TimedOut, StoreErrorKind::Timeout),
        ] {
            let err = RedisError::from(std::io::Error::from(io));
            assert!(breaks_connection(&err), "{io:?}");
            assert_eq!(store_error(err).kind(), kind, "{io:?}");
        }
    }
}
