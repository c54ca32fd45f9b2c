//! Timer messages on their way into `rmq_sys_wheel_timer` and back out of it
//! (RocketMQ 5's `HookUtils.handleScheduleMessage` in, `TimerMessageStore.convert` out).
//!
//! In: a message asking for a due time ([`tern_engine::timer::rule`]) is stored in the
//! timer topic, queue 0, with `TIMER_OUT_MS` (its slot), `REAL_TOPIC` and `REAL_QID`
//! added. A delay level wins: the timer keys are removed and the level decides. Out: when
//! due, the record is stored again in its real topic and queue with `REAL_*` removed and
//! `TIMER_ENQUEUE_MS` / `TIMER_DEQUEUE_MS` added, everything else as it was (the producer's
//! message id included); a delay past the roll window is stored back into the timer topic
//! with `TIMER_ROLL_TIMES` counted up, to be filed again for its next leg.

use tern_engine::properties::{self, key};
use tern_engine::record::{MessageIn, RecordView};
use tern_engine::timer::rule::REQUEST_KEYS;
use tern_engine::timer::{TIMER_TOPIC, TimerError, Timing, classify};
use tern_shell::ResponseCode;

use super::settings::TimerSettings;
use crate::schedule::message::{RestoreError, Restored, wanted_level, with_properties, without};
use crate::store::PutError;

/// What a message becomes on the way in.
#[derive(Debug)]
pub enum Inbound {
    /// Stored as it is (not a timer message, or one due already).
    AsIs,
    /// A delay level with timer keys beside it: stored with these properties (the keys
    /// removed), then delayed by its level.
    Stripped(Vec<u8>),
    /// A timer message: stored in the timer topic with these properties.
    Timed(Vec<u8>),
}

impl Inbound {
    /// The slot a timer message is filed under.
    pub fn slot_ms(&self) -> Option<i64> {
        match self {
            Inbound::Timed(p) => properties::get(p, key::TIMER_OUT_MS)?.parse().ok(),
            _ => None,
        }
    }

    /// `original` as it is to be stored.
    pub fn message<'a>(&'a self, original: &MessageIn<'a>) -> MessageIn<'a> {
        match self {
            Inbound::AsIs => *original,
            Inbound::Stripped(p) => MessageIn {
                properties: p,
                ..*original
            },
            Inbound::Timed(p) => MessageIn {
                topic: TIMER_TOPIC,
                queue_id: 0,
                properties: p,
                ..*original
            },
        }
    }
}

/// What `msg`, stored at `now_ms`, becomes; RocketMQ's refusals with its codes and
/// remarks.
pub fn inbound(
    msg: &MessageIn<'_>,
    settings: &TimerSettings,
    now_ms: i64,
) -> Result<Inbound, PutError> {
    if wanted_level(msg)?.is_some() {
        if tern_engine::timer::rule::strips_for_delay_level(msg.properties) {
            return Ok(Inbound::Stripped(without(msg.properties, &REQUEST_KEYS)));
        }
        return Ok(Inbound::AsIs);
    }
    if settings.pass_through {
        return Ok(Inbound::AsIs);
    }
    let timing = classify(
        msg.properties,
        msg.sys_flag,
        msg.topic,
        now_ms,
        &settings.rules(),
    );
    if !settings.enabled && timing != Ok(Timing::NotTimer) {
        return Err(PutError::Refused(
            ResponseCode::SystemError,
            "accurate timer message is not enabled, timerWheelEnable is false".into(),
        ));
    }
    let slot_ms = match timing {
        Ok(Timing::NotTimer | Timing::DueNow) => return Ok(Inbound::AsIs),
        Ok(Timing::Timer { slot_ms }) => slot_ms,
        Err(why) => {
            return Err(PutError::Refused(
                ResponseCode::MessageIllegal,
                illegal_remark(why, settings),
            ));
        }
    };
    let (out, qid) = (slot_ms.to_string(), msg.queue_id.to_string());
    let props = with_properties(
        msg.properties,
        &[
            (key::TIMER_OUT_MS, out.as_str()),
            (key::REAL_TOPIC, msg.topic),
            (key::REAL_QID, qid.as_str()),
        ],
    );
    if props.len() > properties::MAX_PROPERTIES_LEN {
        return Err(PutError::Illegal(format!(
            "message properties with TIMER_OUT_MS, REAL_TOPIC and REAL_QID exceed {} bytes",
            properties::MAX_PROPERTIES_LEN
        )));
    }
    Ok(Inbound::Timed(props))
}

/// RocketMQ's remark for WHEEL_TIMER_MSG_ILLEGAL, with what was wrong in front.
fn illegal_remark(why: TimerError, settings: &TimerSettings) -> String {
    let what = match why {
        TimerError::BadValue => "the timer property is not a whole number of ms or s",
        TimerError::TooFar => "the due time is past timerMaxDelaySec",
        TimerError::RecallDue => "the recall is due already",
    };
    format!(
        "{what}: timer message illegal, the delay time should not be bigger than the max delay \
         {}ms; or if set del msg, the delay time should be bigger than the current time",
        settings.max_delay_sec.saturating_mul(1000)
    )
}

/// A timer-topic record the timer driver hands over for delivery or a roll (the driver
/// reads what it decides on itself: `tern_engine::timer::driver`).
#[derive(Debug)]
pub struct TimerRecord<'a> {
    /// The record.
    pub view: RecordView<'a>,
    /// Its `TIMER_OUT_MS`: the slot it is due in.
    pub out_ms: i64,
}

impl<'a> TimerRecord<'a> {
    /// Reads a record of the timer topic; `None` for one that is not a timer message.
    pub fn parse(bytes: &'a [u8]) -> Option<Self> {
        let view = RecordView::parse(bytes).ok()?;
        let out_ms = properties::get(view.properties(), key::TIMER_OUT_MS)?
            .parse()
            .ok()?;
        properties::get(view.properties(), key::REAL_TOPIC)?;
        Some(TimerRecord { view, out_ms })
    }

    /// The copy delivered to the real topic: `REAL_*` removed, `TIMER_ENQUEUE_MS` (when
    /// it was filed; `i64::MAX` when it was due on arrival) and `TIMER_DEQUEUE_MS` added.
    pub fn delivered(&self, enqueued_ms: i64, now_ms: i64) -> Result<Restored, RestoreError> {
        let r = Restored::from_view(&self.view)?;
        let (enq, deq) = (enqueued_ms.to_string(), now_ms.to_string());
        let kept = without(self.view.properties(), &[key::REAL_TOPIC, key::REAL_QID]);
        let properties = with_properties(
            &kept,
            &[
                (key::TIMER_ENQUEUE_MS, enq.as_str()),
                (key::TIMER_DEQUEUE_MS, deq.as_str()),
            ],
        );
        Ok(Restored { properties, ..r })
    }

    /// The properties of the copy put back into the timer topic for a delay's next leg.
    pub fn rolled_properties(&self) -> Vec<u8> {
        let props = self.view.properties();
        let times = properties::get(props, key::TIMER_ROLL_TIMES)
            .and_then(|t| t.parse::<u32>().ok())
            .unwrap_or(0)
            .saturating_add(1)
            .to_string();
        with_properties(props, &[(key::TIMER_ROLL_TIMES, times.as_str())])
    }
}

/// `topic + "+" + uniq_key`: how a recall marker names its target (RocketMQ's
/// `buildDeleteKey`; the timer driver hashes the target's `REAL_TOPIC`, "+" and
/// `UNIQ_KEY` the same way).
pub fn delete_key(topic: &str, uniq_key: &str) -> String {
    format!("{topic}+{uniq_key}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::message::tests::{msg, pairs};

    fn settings() -> TimerSettings {
        let src = tern_shell::config::ConfigSource::new();
        TimerSettings::read(&mut tern_shell::config::ConfigReader::new(&src)).unwrap()
    }

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn a_timer_message_waits_in_the_timer_topic_with_its_slot_and_real_place() {
        let m = msg("Orders", b"TIMER_DELAY_SEC\x013\x02UNIQ_KEY\x01U\x02");
        let i = inbound(&m, &settings(), NOW + 250).unwrap();
        let stored = i.message(&m);
        assert_eq!((stored.topic, stored.queue_id), (TIMER_TOPIC, 0));
        assert_eq!(
            pairs(stored.properties),
            [
                ("TIMER_DELAY_SEC", "3"),
                ("UNIQ_KEY", "U"),
                ("TIMER_OUT_MS", "1700000003000"),
                ("REAL_TOPIC", "Orders"),
                ("REAL_QID", "5"),
            ]
        );
    }

    #[test]
    fn a_delay_level_wins_and_the_timer_keys_go() {
        let m = msg("Orders", b"DELAY\x012\x02TIMER_DELAY_MS\x019000\x02");
        match inbound(&m, &settings(), NOW).unwrap() {
            Inbound::Stripped(p) => assert_eq!(pairs(&p), [("DELAY", "2")]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_far_and_disabled_timers_get_rocketmqs_codes() {
        let s = settings();
        for props in [
            &b"TIMER_DELAY_SEC\x01abc\x02"[..],
            b"TIMER_DELAY_SEC\x01 3\x02",
            b"TIMER_DELAY_SEC\x01259201\x02",
        ] {
            match inbound(&msg("T", props), &s, NOW) {
                Err(PutError::Refused(ResponseCode::MessageIllegal, remark)) => {
                    assert!(remark.contains("max delay 259200000ms"), "{remark}")
                }
                other => panic!("{props:?}: {other:?}"),
            }
        }
        let off = TimerSettings {
            enabled: false,
            ..s
        };
        assert!(matches!(
            inbound(&msg("T", b"TIMER_DELAY_SEC\x013\x02"), &off, NOW),
            Err(PutError::Refused(ResponseCode::SystemError, _))
        ));
        assert!(matches!(
            inbound(&msg("T", b"KEYS\x01k\x02"), &off, NOW),
            Ok(Inbound::AsIs)
        ));
        assert!(matches!(
            inbound(&msg("T", b"TIMER_DELIVER_MS\x0112\x02"), &s, NOW),
            Ok(Inbound::AsIs)
        ));
    }

    #[test]
    fn the_delivered_copy_is_the_original_in_its_topic_marked_with_the_timer_times() {
        let m = msg("Orders", b"TIMER_DELAY_SEC\x013\x02UNIQ_KEY\x01U\x02");
        let i = inbound(&m, &settings(), NOW).unwrap();
        let stored = i.message(&m);
        let mut buf = vec![0u8; stored.encoded_len().unwrap()];
        let stamp = tern_engine::record::StoreStamp {
            queue_offset: 0,
            physical_offset: 0,
            store_timestamp: NOW,
        };
        stored.encode(stamp, &mut buf).unwrap();
        let rec = TimerRecord::parse(&buf).unwrap();
        assert_eq!(rec.out_ms, NOW + 2_000, "the slot before a whole second");
        let d = rec.delivered(NOW, NOW + 3_000).unwrap();
        assert_eq!((d.topic.as_str(), d.queue_id), ("Orders", 5));
        assert_eq!(
            pairs(&d.properties),
            [
                ("TIMER_DELAY_SEC", "3"),
                ("UNIQ_KEY", "U"),
                ("TIMER_OUT_MS", "1700000002000"),
                ("TIMER_ENQUEUE_MS", "1700000000000"),
                ("TIMER_DEQUEUE_MS", "1700000003000"),
            ]
        );
        let rolled = rec.rolled_properties();
        assert_eq!(properties::get(&rolled, key::TIMER_ROLL_TIMES), Some("1"));
    }
}
