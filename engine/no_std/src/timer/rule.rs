//! Which messages are timer messages, and when they are due (RocketMQ 5's
//! `HookUtils.handleScheduleMessage` and `transformTimerMessage`, as rules).
//!
//! A producer asks for a due time with one of three properties, the first present in
//! this order winning: `TIMER_DELAY_SEC` (seconds from now), `TIMER_DELAY_MS` (ms from
//! now), `TIMER_DELIVER_MS` (absolute, ms). A message due later goes to the timer, filed
//! under the slot that ends at or after its due time: slot `T` holds the due times in
//! `(T, T + precision]` and is read once the clock passes `T + precision`, so a timer
//! message is never delivered early and at most one precision late. A message due
//! already is stored in its topic as is and delivered at once, as RocketMQ does.
//!
//! What is not a timer message: a transaction half or rollback (a commit is timed from
//! the commit), a message already in [`TIMER_TOPIC`] (a long delay put back for a later
//! window), and a copy that carries `TIMER_OUT_MS` (one the timer delivered: timing it
//! again would loop). A delay level (`DELAY` > 0) wins over the timer properties; the
//! caller checks that first and strips them ([`strips_for_delay_level`]).

use crate::properties::{self, key};
use crate::record::{
    SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
};

/// The topic timer messages wait in (RocketMQ's `rmq_sys_wheel_timer`), one queue.
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

/// What every timer property's name starts with.
const TIMER_KEY_PREFIX: &str = "TIMER_";

/// The timer properties a producer sets, in the order RocketMQ looks for them.
pub const REQUEST_KEYS: [&str; 3] = [
    key::TIMER_DELAY_SEC,
    key::TIMER_DELAY_MS,
    key::TIMER_DELIVER_MS,
];

/// RocketMQ's `timerPrecisionMs` default.
pub const DEFAULT_PRECISION_MS: i64 = 1_000;
/// RocketMQ's `timerMaxDelaySec` default: three days.
pub const DEFAULT_MAX_DELAY_SEC: i64 = 3 * 24 * 3600;

/// The broker's timer settings that decide what a message becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerRules {
    /// Slot width, ms (`timerPrecisionMs`); at least 1.
    pub precision_ms: i64,
    /// Longest delay accepted, ms (`timerMaxDelaySec` × 1000).
    pub max_delay_ms: i64,
}

impl Default for TimerRules {
    fn default() -> Self {
        TimerRules {
            precision_ms: DEFAULT_PRECISION_MS,
            max_delay_ms: DEFAULT_MAX_DELAY_SEC * 1000,
        }
    }
}

/// What a message becomes on the way in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Not a timer message: stored as it is.
    NotTimer,
    /// Due later: stored in [`TIMER_TOPIC`] with `TIMER_OUT_MS` = `slot_ms`, the start of
    /// the slot it is filed under (its due time is in `(slot_ms, slot_ms + precision]`).
    Timer {
        /// The slot's time, ms.
        slot_ms: i64,
    },
    /// Due already (a past or zero delay): stored in its topic as is, delivered at once.
    DueNow,
}

/// Why a timer message is refused; the broker answers MESSAGE_ILLEGAL (13) with
/// RocketMQ's remark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerError {
    /// The winning property is not a decimal `i64` (Java's `Long.parseLong`), or the due
    /// time it gives does not fit an `i64` of ms.
    BadValue,
    /// Due further ahead than the longest delay.
    TooFar,
    /// A recall marker that is due already: it could cancel nothing.
    RecallDue,
}

/// Whether a message with a delay level must lose its timer properties: RocketMQ removes
/// them so the level alone decides, and the delivered copy is not timed again.
pub fn strips_for_delay_level(props: &[u8]) -> bool {
    properties::any_name_starts_with(props, TIMER_KEY_PREFIX)
        && REQUEST_KEYS
            .iter()
            .any(|k| properties::get(props, k).is_some())
}

/// Topics whose records are never timed: a half message is stored there without its
/// transaction bits (as RocketMQ stores it), so only the topic tells. Its timer keys
/// count from the commit, when the committed copy is put (RocketMQ 5.3 times the half
/// at prepare and its committed copy lands in the half topic).
const NEVER_TIMED: [&str; 2] = ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"];

/// What a message with properties `props`, sysFlag `sys_flag`, in `topic`, becomes when
/// stored at `now_ms`. The caller has already handled a delay level (it wins).
pub fn classify(
    props: &[u8],
    sys_flag: i32,
    topic: &str,
    now_ms: i64,
    rules: &TimerRules,
) -> Result<Timing, TimerError> {
    let tx = sys_flag & SYSFLAG_TRANSACTION_MASK;
    if tx == SYSFLAG_TRANSACTION_PREPARED || tx == SYSFLAG_TRANSACTION_ROLLBACK {
        return Ok(Timing::NotTimer);
    }
    // Every name read below starts with `TIMER_`: one pass over the pairs settles the
    // common case (no timer key) instead of one `get` per name, on every message sent.
    if topic == TIMER_TOPIC
        || NEVER_TIMED.contains(&topic)
        || !properties::any_name_starts_with(props, TIMER_KEY_PREFIX)
        || properties::get(props, key::TIMER_OUT_MS).is_some()
    {
        return Ok(Timing::NotTimer);
    }
    let Some((name, value)) = REQUEST_KEYS
        .iter()
        .find_map(|k| properties::get(props, k).map(|v| (*k, v)))
    else {
        return Ok(Timing::NotTimer);
    };
    let v = parse_java_long(value).ok_or(TimerError::BadValue)?;
    let due = match name {
        key::TIMER_DELAY_SEC => v.checked_mul(1000).and_then(|ms| now_ms.checked_add(ms)),
        key::TIMER_DELAY_MS => now_ms.checked_add(v),
        _ => Some(v),
    }
    .ok_or(TimerError::BadValue)?;
    if due <= now_ms {
        if properties::get(props, key::TIMER_DEL_UNIQKEY).is_some() {
            return Err(TimerError::RecallDue);
        }
        return Ok(Timing::DueNow);
    }
    if due - now_ms > rules.max_delay_ms {
        return Err(TimerError::TooFar);
    }
    Ok(Timing::Timer {
        slot_ms: slot_of(due, rules.precision_ms),
    })
}

/// The slot a due time is filed under: the one whose `(T, T + precision]` holds it.
pub fn slot_of(due_ms: i64, precision_ms: i64) -> i64 {
    let p = precision_ms.max(1);
    let floor = due_ms.div_euclid(p) * p;
    if floor == due_ms { floor - p } else { floor }
}

/// Java's `Long.parseLong`: an optional sign, then decimal digits, nothing else.
fn parse_java_long(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
    use std::string::ToString;
    use std::vec::Vec;

    fn props(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in pairs {
            out.extend_from_slice(k.as_bytes());
            out.push(NAME_VALUE_SEPARATOR);
            out.extend_from_slice(v.as_bytes());
            out.push(PROPERTY_SEPARATOR);
        }
        out
    }

    const NOW: i64 = 1_700_000_000_500;
    const RULES: TimerRules = TimerRules {
        precision_ms: 1000,
        max_delay_ms: DEFAULT_MAX_DELAY_SEC * 1000,
    };

    fn of(pairs: &[(&str, &str)]) -> Result<Timing, TimerError> {
        classify(&props(pairs), 0, "T", NOW, &RULES)
    }

    /// What [`of`] answers for a timer filed under the slot starting at `slot_ms`.
    fn filed(slot_ms: i64) -> Result<Timing, TimerError> {
        Ok(Timing::Timer { slot_ms })
    }

    #[test]
    fn each_property_gives_a_due_time_filed_under_the_slot_ending_at_or_after_it() {
        // Due at NOW + 3000 = …003_500: the slot starting at …003_000 holds it.
        assert_eq!(of(&[(key::TIMER_DELAY_SEC, "3")]), filed(1_700_000_003_000));
        // Due at …002_000, a boundary: filed under the slot before it.
        assert_eq!(
            of(&[(key::TIMER_DELAY_MS, "1500")]),
            filed(1_700_000_001_000)
        );
        // Due exactly on a boundary: the slot before it, read when the boundary passes.
        assert_eq!(
            of(&[(key::TIMER_DELIVER_MS, "1700000005000")]),
            filed(1_700_000_004_000)
        );
    }

    #[test]
    fn the_first_property_present_wins_in_rocketmqs_order() {
        let both = [
            (key::TIMER_DELIVER_MS, "1700000100000"),
            (key::TIMER_DELAY_SEC, "2"),
        ];
        assert_eq!(of(&both), filed(1_700_000_002_000));
        let ms_over_deliver = [
            (key::TIMER_DELIVER_MS, "1700000100000"),
            (key::TIMER_DELAY_MS, "10"),
        ];
        assert_eq!(of(&ms_over_deliver), filed(1_700_000_000_000));
    }

    #[test]
    fn a_slot_never_starts_after_the_due_time_nor_a_precision_before_it() {
        for precision in [1, 7, 100, 1000] {
            for due in NOW..NOW + 2500 {
                let slot = slot_of(due, precision);
                assert!(
                    slot < due && due <= slot + precision,
                    "{due} {precision} {slot}"
                );
            }
        }
    }

    #[test]
    fn past_and_zero_delays_are_due_now_and_a_due_recall_is_refused() {
        assert_eq!(of(&[(key::TIMER_DELAY_SEC, "0")]), Ok(Timing::DueNow));
        assert_eq!(of(&[(key::TIMER_DELAY_MS, "-5")]), Ok(Timing::DueNow));
        assert_eq!(of(&[(key::TIMER_DELIVER_MS, "1")]), Ok(Timing::DueNow));
        assert_eq!(
            of(&[
                (key::TIMER_DELIVER_MS, "1"),
                (key::TIMER_DEL_UNIQKEY, "T+abc")
            ]),
            Err(TimerError::RecallDue)
        );
    }

    #[test]
    fn bad_values_and_delays_past_the_limit_are_refused() {
        // (An empty value is no property at all: Java's decoder drops it.)
        for bad in [" 3", "3 ", "3s", "1.5", "0x10", "+", "99999999999999999999"] {
            assert_eq!(
                of(&[(key::TIMER_DELAY_SEC, bad)]),
                Err(TimerError::BadValue),
                "{bad:?}"
            );
        }
        // Seconds that overflow as ms: refused, where Java would wrap.
        assert_eq!(
            of(&[(key::TIMER_DELAY_SEC, "9223372036854775")]),
            Err(TimerError::BadValue)
        );
        assert_eq!(of(&[(key::TIMER_DELAY_SEC, "+3")]).map(|_| ()), Ok(()));
        let three_days = DEFAULT_MAX_DELAY_SEC.to_string();
        assert!(matches!(
            of(&[(key::TIMER_DELAY_SEC, &three_days)]),
            Ok(Timing::Timer { .. })
        ));
        let more = (DEFAULT_MAX_DELAY_SEC + 1).to_string();
        assert_eq!(
            of(&[(key::TIMER_DELAY_SEC, &more)]),
            Err(TimerError::TooFar)
        );
    }

    #[test]
    fn halves_rolls_and_delivered_copies_are_not_timed() {
        let p = props(&[(key::TIMER_DELAY_SEC, "3")]);
        for sys_flag in [SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK] {
            assert_eq!(
                classify(&p, sys_flag, "T", NOW, &RULES),
                Ok(Timing::NotTimer)
            );
        }
        let commit = crate::record::SYSFLAG_TRANSACTION_COMMIT;
        assert!(matches!(
            classify(&p, commit, "T", NOW, &RULES),
            Ok(Timing::Timer { .. })
        ));
        assert_eq!(
            classify(&p, 0, TIMER_TOPIC, NOW, &RULES),
            Ok(Timing::NotTimer)
        );
        let delivered = props(&[(key::TIMER_DELAY_SEC, "3"), (key::TIMER_OUT_MS, "1")]);
        assert_eq!(
            classify(&delivered, 0, "T", NOW, &RULES),
            Ok(Timing::NotTimer)
        );
        assert_eq!(of(&[("a", "b")]), Ok(Timing::NotTimer));
    }

    #[test]
    fn a_delay_level_strips_only_messages_that_ask_for_a_timer() {
        assert!(strips_for_delay_level(&props(&[(
            key::TIMER_DELAY_MS,
            "5"
        )])));
        assert!(!strips_for_delay_level(&props(&[(key::DELAY, "3")])));
    }
}
