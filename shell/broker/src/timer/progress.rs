//! The timer's progress between replicas (RocketMQ's GET_TIMER_CHECK_POINT and the
//! slave's `syncTimerCheckPoint`): a master answers with its last timer checkpoint; a
//! slave keeps the newest one whose delivered copies its own log holds, and adopts it
//! when it is promoted, so it neither delivers again what the old master delivered nor
//! starts delivery from its own stale place (`TimerDriver::adopt`).
//!
//! The body is RocketMQ's `TimerCheckpoint.encode` (56 bytes, big-endian:
//! `lastReadTimeMs`, `lastTimerLogFlushPos`, `lastTimerQueueOffset`,
//! `masterTimerQueueOffset`, the data version's three longs), then Tern's 8 bytes: the
//! commit-log offset below which every copy the checkpoint counts lies. A Java slave
//! reads the first 56 and ignores the rest.

use tern_engine::timer::driver::Checkpointed;
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;

/// RocketMQ's part of the body.
const JAVA_LEN: usize = 56;
/// With Tern's log end.
const BODY_LEN: usize = JAVA_LEN + 8;

/// The body for checkpoint `c`.
pub fn encode(c: &Checkpointed) -> Vec<u8> {
    let mut b = Vec::with_capacity(BODY_LEN);
    b.extend_from_slice(&c.read_time.to_be_bytes());
    // lastTimerLogFlushPos: the timer log's own; nothing a replica can use.
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&(c.queue_offset as i64).to_be_bytes());
    // masterTimerQueueOffset: the master's own filing point, as RocketMQ sends it.
    b.extend_from_slice(&(c.queue_offset as i64).to_be_bytes());
    b.extend_from_slice(&[0u8; 24]);
    b.extend_from_slice(&(c.log_end as i64).to_be_bytes());
    debug_assert_eq!(b.len(), BODY_LEN);
    b
}

/// A body read back; `None` when it is not one of Tern's (too short, or negative fields).
pub fn decode(body: &[u8]) -> Option<Checkpointed> {
    let long = |i: usize| -> Option<i64> {
        let b: [u8; 8] = body.get(i * 8..i * 8 + 8)?.try_into().ok()?;
        Some(i64::from_be_bytes(b))
    };
    if body.len() < BODY_LEN {
        return None;
    }
    let (read_time, queue_offset, log_end) = (long(0)?, long(2)?, long(7)?);
    if read_time < 0 || queue_offset < 0 || log_end < 0 {
        return None;
    }
    Some(Checkpointed {
        read_time,
        queue_offset: queue_offset as u64,
        log_end: log_end as u64,
    })
}

/// GET_TIMER_CHECK_POINT.
pub fn get_checkpoint(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    match ctx.timer.checkpointed() {
        Some(c) => {
            Ok(RemotingCommand::response_to(req, ResponseCode::Success).with_body(encode(&c)))
        }
        None => Err(Refusal::new(
            ResponseCode::SystemError,
            "The checkpoint is null: the timer has not checkpointed here",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_survives_the_round_trip_and_a_java_body_is_refused() {
        let c = Checkpointed {
            read_time: 1_796_000_000_000,
            queue_offset: 42,
            log_end: 9 << 30,
        };
        let b = encode(&c);
        assert_eq!(b.len(), BODY_LEN);
        assert_eq!(&b[..8], &c.read_time.to_be_bytes(), "lastReadTimeMs first");
        assert_eq!(decode(&b), Some(c));
        assert_eq!(decode(&b[..JAVA_LEN]), None, "no log end: not usable");
        let mut bad = b.clone();
        bad[56] = 0x80;
        assert_eq!(decode(&bad), None, "a negative log end");
    }
}
