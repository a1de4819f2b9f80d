//! The wire of a batch of single decisions (`coalesce.rs`): the `FCALL` of the
//! library's batch function that carries them, and its reply read back per decision.
//! `lua/fcall_batch.lua` reads the same layout (written out at its top).

use redis::{Cmd, FromRedisValue, ParsingError, RedisError, Value};

use super::wire::words;
use super::{Call, LEAN_MOST};
use crate::store::redis::connection::error_reply;

/// Bytes of one decision's reply: its verdict's eight integers and the instant it was
/// decided at, little-endian 64-bit integers (prelude.lua's `packed_reply`).
const REPLY_BYTES: usize = 9 * 8;

/// A decision's head byte says its escalation follows among the arguments.
const ESCALATES: u8 = 128;

/// `FCALL <batch function> <numkeys> KEYS… ARGV…` carrying `calls`, each one charge
/// decided (as [`Call::fcall`] would send it alone): their keys in order, their packed
/// numbers in one argument, each after a byte that counts them, and the escalations of
/// those that have one.
pub(in crate::store::redis) fn fcall(function: &str, calls: &[&Call]) -> Cmd {
    let keys: usize = calls.iter().map(|c| c.keys.len()).sum();
    let mut packed = Vec::with_capacity(calls.len() * (1 + 8 * LEAN_MOST));
    let mut escalations = Vec::new();
    for call in calls {
        let [charge] = call.charges.as_slice() else {
            unreachable!("a batch carries single decisions");
        };
        let (numbers, len) = call.packed(charge);
        let count = u8::try_from(len / 8).unwrap_or(u8::MAX);
        if charge.escalation.is_empty() {
            packed.push(count);
        } else {
            packed.push(count | ESCALATES);
            escalations.push(charge.escalation.as_str());
        }
        packed.extend_from_slice(&numbers[..len]);
    }
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(function).arg(keys);
    for call in calls {
        cmd.arg(&call.keys);
    }
    cmd.arg(&packed[..]).arg(escalations);
    cmd
}

/// A batch's reply: each decision's integers (as [`Reply`](super::Reply) holds one
/// call's), or the error its own call would have been answered with.
pub(in crate::store::redis) struct BatchReply(
    pub(in crate::store::redis) Vec<Result<Vec<i64>, RedisError>>,
);

impl FromRedisValue for BatchReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            // Every decision answered: their replies joined.
            Value::BulkString(bytes) if bytes.len() % REPLY_BYTES == 0 => Ok(Self(
                bytes
                    .chunks_exact(REPLY_BYTES)
                    .map(|reply| Ok(words(reply)))
                    .collect(),
            )),
            // One failed: each reply or error on its own.
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::BulkString(bytes) => Ok(match bytes.strip_prefix(b"-") {
                        Some(line) => Err(error_reply(&String::from_utf8_lossy(line))),
                        None => Ok(words(&bytes)),
                    }),
                    other => Err(ParsingError::from(format!(
                        "a batched decision's reply is not a string: {other:?}"
                    ))),
                })
                .collect::<Result<_, _>>()
                .map(Self),
            other => Err(ParsingError::from(format!(
                "a batch's reply is neither its decisions' replies nor a list of them: {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::lua;
    use super::*;

    #[test]
    fn fcall_batch_lua_reads_the_head_byte_rust_writes() {
        let count = format!("local n = head % {ESCALATES}");
        assert!(lua::FCALL_BATCH.contains(&count), "{count}");
        let escalates = format!("if head >= {ESCALATES} then");
        assert!(lua::FCALL_BATCH.contains(&escalates), "{escalates}");
    }

    #[test]
    fn a_batch_reply_is_read_per_decision_and_an_error_fails_only_its_own() {
        let one = |allowed: i64| -> Vec<u8> {
            (0..9_i64)
                .flat_map(|i| if i == 0 { allowed } else { i }.to_le_bytes())
                .collect()
        };
        let joined = [one(1), one(0)].concat();
        let BatchReply(replies) =
            BatchReply::from_redis_value(Value::BulkString(joined)).expect("read");
        assert_eq!(replies.len(), 2);
        assert_eq!(replies[0].as_ref().expect("ok")[0], 1);
        assert_eq!(replies[1].as_ref().expect("ok")[0], 0);

        let mixed = Value::Array(vec![
            Value::BulkString(one(1)),
            Value::BulkString(b"-OOM command not allowed".to_vec()),
        ]);
        let BatchReply(replies) = BatchReply::from_redis_value(mixed).expect("read");
        assert_eq!(replies[0].as_ref().expect("ok")[8], 8);
        let err = replies[1].as_ref().expect_err("its own error");
        assert_eq!(err.code(), Some("OOM"));
    }
}
