//! The timer's `broker.conf` keys: RocketMQ 5's names and defaults
//! (`MessageStoreConfig`, `BrokerConfig`), plus Tern's `timerWheelSlots`.

use std::time::Duration;

use tern_engine::timer::{TimerConfig, TimerRules};
use tern_shell::config::{ConfigError, ConfigReader, in_range};

/// Slots RocketMQ keeps free at the end of the ring (`TIMER_BLANK_SLOTS`): the roll
/// window is clamped below the ring's span by this many.
const BLANK_SLOTS: u32 = 60;

/// How the broker times messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerSettings {
    /// `timerWheelEnable` (true): off, timer messages are refused (SYSTEM_ERROR).
    pub enabled: bool,
    /// `timerPrecisionMs` (1000): the slot width; a delivery is at most this late.
    pub precision_ms: i64,
    /// `timerMaxDelaySec` (3 days): longer delays are refused (MESSAGE_ILLEGAL).
    pub max_delay_sec: i64,
    /// `timerRollWindowSlot` (2 days of slots): delays at least this long wait in steps.
    pub roll_window_slots: u32,
    /// Tern's `timerWheelSlots` (7 days of slots, twice: RocketMQ's fixed ring).
    pub wheel_slots: u32,
    /// `mappedFileSizeTimerLog` (100 MiB).
    pub log_segment_size: u64,
    /// `timerFlushIntervalMs` (1000): how often delivery progress is checkpointed.
    pub flush_interval: Duration,
    /// `recallMessageEnable` (false, as RocketMQ): RECALL_MESSAGE is refused when off.
    pub recall_enabled: bool,
    /// Not a `broker.conf` key: timer messages are stored as sent, in their topic, for
    /// the broker they are forwarded to to time, and no timer runs here. The edge gateway
    /// sets it: its retention keeps only what is not yet forwarded (and the delayed,
    /// half and retry records it tracks), so a timer record waiting locally could be
    /// deleted before it is due.
    pub pass_through: bool,
}

impl TimerSettings {
    /// Reads the keys from `r`.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let precision_ms = r.get_checked("timerPrecisionMs", 1_000i64, in_range(1, 60_000))?;
        let wheel_slots = r.get_checked(
            "timerWheelSlots",
            tern_engine::timer::wheel::DEFAULT_SLOTS,
            in_range(2 * BLANK_SLOTS + 4, 64 * 1024 * 1024),
        )?;
        let roll: u32 = r.get_checked("timerRollWindowSlot", 172_800u32, in_range(2, u32::MAX))?;
        Ok(TimerSettings {
            enabled: r.get("timerWheelEnable", true)?,
            precision_ms,
            max_delay_sec: r.get_checked(
                "timerMaxDelaySec",
                tern_engine::timer::rule::DEFAULT_MAX_DELAY_SEC,
                in_range(1, 100 * 365 * 86_400),
            )?,
            // RocketMQ clamps the window into the ring the same way.
            roll_window_slots: roll.clamp(2, wheel_slots - BLANK_SLOTS),
            wheel_slots,
            log_segment_size: r.get_checked(
                "mappedFileSizeTimerLog",
                tern_engine::timer::log::DEFAULT_SEGMENT_SIZE,
                in_range(4096, 1u64 << 32),
            )?,
            flush_interval: Duration::from_millis(r.get_checked(
                "timerFlushIntervalMs",
                1_000u64,
                in_range(10, 60_000),
            )?),
            recall_enabled: r.get("recallMessageEnable", false)?,
            pass_through: false,
        })
    }

    /// What decides whether a message is a timer message and when it is due.
    pub fn rules(&self) -> TimerRules {
        TimerRules {
            precision_ms: self.precision_ms,
            max_delay_ms: self.max_delay_sec.saturating_mul(1000),
        }
    }

    /// The engine's geometry.
    pub fn engine(&self) -> TimerConfig {
        TimerConfig {
            slots: self.wheel_slots,
            precision_ms: self.precision_ms,
            roll_window_ms: i64::from(self.roll_window_slots) * self.precision_ms,
            log_segment_size: self.log_segment_size,
        }
    }
}
