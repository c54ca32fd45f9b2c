//! Delay levels: RocketMQ's `messageDelayLevel` table, and the delivery time that a
//! delayed message's consume-queue entry carries instead of a tag hash.
//!
//! A producer asks for a delay with the property `DELAY` = n (a level, 1-based). The
//! broker stores such a message in [`SCHEDULE_TOPIC`], queue n − 1, and dispatch writes
//! the entry's tag code as the delivery time: store time + level n's delay, as
//! RocketMQ's `CommitLog` does. The broker's schedule service then only reads 20-byte
//! entries to know what is due, and recovery rebuilds the same entries from the log,
//! because the table is part of [`crate::store::StoreConfig`].
//!
//! The table is fixed-capacity and `Copy` (no heap): at most [`MAX_LEVELS`] levels, each
//! a whole number of seconds (RocketMQ's units are `s`, `m`, `h` and `d`).

use core::fmt;

use crate::properties::{self, key};

/// The topic delayed messages wait in, one queue per level (RocketMQ's name).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// Most levels a table holds: far above RocketMQ's 18, and a bound on the schedule
/// topic's queues.
pub const MAX_LEVELS: usize = 64;

/// RocketMQ's default `messageDelayLevel`.
pub const DEFAULT_DELAY_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// What delivering a record with `DELAY` set would use when the level is unknown
/// (RocketMQ's `computeDeliverTimestamp` fallback): one second.
const UNKNOWN_LEVEL_DELAY_MS: i64 = 1_000;

/// The delay of each level, in seconds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DelayLevels {
    secs: [u32; MAX_LEVELS],
    count: u8,
}

/// Why a `messageDelayLevel` string was refused. Levels are 1-based, as users count them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DelayLevelsError {
    /// No level at all.
    Empty,
    /// More than [`MAX_LEVELS`] levels.
    TooMany,
    /// A level's unit is not `s`, `m`, `h` or `d`.
    BadUnit {
        /// The level.
        level: u8,
    },
    /// A level's number is missing or not a plain decimal number.
    BadNumber {
        /// The level.
        level: u8,
    },
    /// A level is longer than a `u32` of seconds (136 years).
    TooLong {
        /// The level.
        level: u8,
    },
}

impl fmt::Display for DelayLevelsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("no delay level given"),
            Self::TooMany => write!(f, "more than {MAX_LEVELS} delay levels"),
            Self::BadUnit { level } => {
                write!(f, "level {level}: the unit must be s, m, h or d")
            }
            Self::BadNumber { level } => {
                write!(
                    f,
                    "level {level}: expected a number followed by s, m, h or d"
                )
            }
            Self::TooLong { level } => write!(f, "level {level}: delay too long"),
        }
    }
}

/// A refusal of the text itself: no inner error.
impl core::error::Error for DelayLevelsError {}

impl DelayLevels {
    /// RocketMQ's default table ([`DEFAULT_DELAY_LEVELS`]).
    pub const ROCKETMQ: DelayLevels = {
        const DEFAULT: [u32; 18] = [
            1,
            5,
            10,
            30,
            60,
            2 * 60,
            3 * 60,
            4 * 60,
            5 * 60,
            6 * 60,
            7 * 60,
            8 * 60,
            9 * 60,
            10 * 60,
            20 * 60,
            30 * 60,
            3600,
            2 * 3600,
        ];
        let mut secs = [0u32; MAX_LEVELS];
        let mut i = 0;
        while i < DEFAULT.len() {
            secs[i] = DEFAULT[i];
            i += 1;
        }
        DelayLevels {
            secs,
            count: DEFAULT.len() as u8,
        }
    };

    /// Parses `messageDelayLevel`: levels separated by spaces, each a decimal number and a
    /// unit (`s`, `m`, `h`, `d`), e.g. `"1s 5s 10s 30s 1m"`.
    pub fn parse(text: &str) -> Result<Self, DelayLevelsError> {
        let mut secs = [0u32; MAX_LEVELS];
        let mut count = 0usize;
        for word in text.split_ascii_whitespace() {
            if count == MAX_LEVELS {
                return Err(DelayLevelsError::TooMany);
            }
            let level = count as u8 + 1;
            // The unit is one ASCII byte, so splitting before it is on a char boundary.
            let unit_secs: u64 = match word.as_bytes().last() {
                Some(b's') => 1,
                Some(b'm') => 60,
                Some(b'h') => 3600,
                Some(b'd') => 86_400,
                _ => return Err(DelayLevelsError::BadUnit { level }),
            };
            let number = &word[..word.len() - 1];
            if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
                return Err(DelayLevelsError::BadNumber { level });
            }
            let n: u64 = number
                .parse()
                .map_err(|_| DelayLevelsError::TooLong { level })?;
            secs[count] = n
                .checked_mul(unit_secs)
                .and_then(|s| u32::try_from(s).ok())
                .ok_or(DelayLevelsError::TooLong { level })?;
            count += 1;
        }
        if count == 0 {
            return Err(DelayLevelsError::Empty);
        }
        Ok(Self {
            secs,
            count: count as u8,
        })
    }

    /// Number of levels (at least 1).
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Always false: a table has at least one level (clippy wants the pair).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The highest level.
    pub fn max_level(&self) -> i32 {
        i32::from(self.count)
    }

    /// The level a message asking for `level` (> 0) is delayed by: higher ones are
    /// clamped to the highest, as RocketMQ does.
    pub fn clamp(&self, level: i32) -> i32 {
        level.min(self.max_level())
    }

    /// The delay of `level` (1-based) in milliseconds; `None` outside the table.
    pub fn delay_ms(&self, level: i32) -> Option<i64> {
        let i = usize::try_from(level).ok()?.checked_sub(1)?;
        self.secs[..self.len()]
            .get(i)
            .map(|&s| i64::from(s) * 1_000)
    }

    /// When a record of `level` stored at `store_timestamp` is due (RocketMQ's
    /// `computeDeliverTimestamp`: a level outside the table waits one second).
    pub fn deliver_timestamp(&self, level: i32, store_timestamp: i64) -> i64 {
        store_timestamp.saturating_add(self.delay_ms(level).unwrap_or(UNKNOWN_LEVEL_DELAY_MS))
    }

    /// The tag code of a consume-queue entry for a record of `topic` with `props`: the
    /// delivery time for a delayed record in [`SCHEDULE_TOPIC`], `None` for every other
    /// record (whose tag code is its tag hash).
    pub fn schedule_tag_code(
        &self,
        topic: &str,
        props: &[u8],
        store_timestamp: i64,
    ) -> Option<i64> {
        if topic != SCHEDULE_TOPIC {
            return None;
        }
        let level = delay_level(props).filter(|&l| l > 0)?;
        Some(self.deliver_timestamp(self.clamp(level), store_timestamp))
    }
}

/// The `DELAY` level in `props`: `None` when absent or not a number.
pub fn delay_level(props: &[u8]) -> Option<i32> {
    properties::get(props, key::DELAY).and_then(|v| v.trim().parse().ok())
}

impl Default for DelayLevels {
    fn default() -> Self {
        Self::ROCKETMQ
    }
}

/// Writes the table as `messageDelayLevel` text, each level in its largest exact unit.
impl fmt::Display for DelayLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &s) in self.secs[..self.len()].iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let (n, unit) = match s {
                0 => (0, 's'),
                s if s % 86_400 == 0 => (s / 86_400, 'd'),
                s if s % 3600 == 0 => (s / 3600, 'h'),
                s if s % 60 == 0 => (s / 60, 'm'),
                s => (s, 's'),
            };
            write!(f, "{n}{unit}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for DelayLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DelayLevels(\"{self}\")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn default_table_is_rocketmqs() {
        let d = DelayLevels::parse(DEFAULT_DELAY_LEVELS).unwrap();
        assert_eq!(d, DelayLevels::ROCKETMQ);
        assert_eq!(d.len(), 18);
        assert_eq!(d.delay_ms(1), Some(1_000));
        assert_eq!(d.delay_ms(5), Some(60_000));
        assert_eq!(d.delay_ms(18), Some(7_200_000));
        assert_eq!(d.delay_ms(0), None);
        assert_eq!(d.delay_ms(19), None);
        assert_eq!(d.delay_ms(-1), None);
        assert_eq!(d.to_string(), DEFAULT_DELAY_LEVELS);
    }

    #[test]
    fn parses_every_unit_and_extra_spaces() {
        let d = DelayLevels::parse("  2s  3m\t4h 1d 0s 90s ").unwrap();
        assert_eq!(d.len(), 6);
        let ms: std::vec::Vec<_> = (1..=6).map(|l| d.delay_ms(l).unwrap()).collect();
        assert_eq!(ms, [2_000, 180_000, 14_400_000, 86_400_000, 0, 90_000]);
        assert_eq!(d.to_string(), "2s 3m 4h 1d 0s 90s");
    }

    #[test]
    fn refuses_what_is_not_a_level_table() {
        use DelayLevelsError::*;
        for (text, err) in [
            ("", Empty),
            ("   ", Empty),
            ("1s 5x", BadUnit { level: 2 }),
            ("1", BadUnit { level: 1 }),
            ("1\u{e9}", BadUnit { level: 1 }),
            ("s", BadNumber { level: 1 }),
            ("1s -5s", BadNumber { level: 2 }),
            ("1s +5s", BadNumber { level: 2 }),
            ("1.5s", BadNumber { level: 1 }),
            ("1ms", BadNumber { level: 1 }),
            ("99999999999999999999999s", TooLong { level: 1 }),
            ("50000d", TooLong { level: 1 }),
        ] {
            assert_eq!(DelayLevels::parse(text), Err(err), "{text:?}");
        }
        let mut many = std::string::String::new();
        for _ in 0..MAX_LEVELS {
            many.push_str("1s ");
        }
        assert_eq!(DelayLevels::parse(&many).unwrap().len(), MAX_LEVELS);
        many.push_str("1s");
        assert_eq!(DelayLevels::parse(&many), Err(TooMany));
        assert!(BadUnit { level: 3 }.to_string().contains("level 3"));
    }

    #[test]
    fn levels_above_the_table_are_clamped_to_the_last() {
        let d = DelayLevels::parse("1s 2s 3s").unwrap();
        assert_eq!(d.clamp(2), 2);
        assert_eq!(d.clamp(3), 3);
        assert_eq!(d.clamp(18), 3);
        assert_eq!(d.deliver_timestamp(2, 1_000), 3_000);
        assert_eq!(d.deliver_timestamp(9, 1_000), 2_000, "unknown level: 1 s");
    }

    #[test]
    fn only_delayed_schedule_records_get_a_delivery_time_as_tag_code() {
        let d = DelayLevels::parse("1s 2s 3s").unwrap();
        let delayed = b"TAGS\x01A\x02DELAY\x012\x02";
        assert_eq!(
            d.schedule_tag_code(SCHEDULE_TOPIC, delayed, 10_000),
            Some(12_000)
        );
        assert_eq!(d.schedule_tag_code("Orders", delayed, 10_000), None);
        let beyond = b"DELAY\x0140\x02";
        assert_eq!(
            d.schedule_tag_code(SCHEDULE_TOPIC, beyond, 10_000),
            Some(13_000)
        );
        for props in [
            &b"DELAY\x010\x02"[..],
            b"DELAY\x01x\x02",
            b"TAGS\x01A\x02",
            b"",
        ] {
            assert_eq!(d.schedule_tag_code(SCHEDULE_TOPIC, props, 10_000), None);
        }
    }
}
