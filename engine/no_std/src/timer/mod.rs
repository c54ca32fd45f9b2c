//! Timer messages (RocketMQ 5): a message due at any time, not only at one of the 18
//! delay levels. See `docs/design/timers.md` for RocketMQ's design and Tern's.
//!
//! - [`rule`]: which stored messages are timer messages, when they are due, and in which
//!   slot they are filed; the broker's put path and the crash simulation share it.
//! - [`wheel`]: the ring of slots pointing into the timer log.
//! - [`log`]: the timer log, units linked per slot, cut at the first torn one.
//! - [`checkpoint`]: how far the timer got, in two copies written in turn.
//! - [`state`]: the three together, and the order of writes that survives a crash.
//! - [`driver`]: the task over them: filing, delivery and checkpoints, over a source
//!   and a sink the owner implements ([`owner`]).

pub mod checkpoint;
pub mod driver;
pub mod log;
pub mod owner;
pub mod rule;
pub mod state;
pub mod wheel;

pub use driver::{TimerDriver, TimerSink, TimerSource};
pub use rule::{TIMER_TOPIC, TimerError, TimerRules, Timing, classify};
pub use state::{Filing, SlotUnit, Timer, TimerConfig, TimerRecovery};
