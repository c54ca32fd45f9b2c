//! The engine's timer on files: the wheel `<store>/timerwheel` (one mapped file), the
//! timer log `<store>/timerlog/<20-digit base>` (mapped segments) and the checkpoint
//! `<store>/config/timercheck` (one mapped page), RocketMQ's names and places.
//!
//! The timer is opened beside the store (whose lock keeps other processes out of these
//! files) and owned by its own service, so filing and delivering timers never takes the
//! store's append lock.

use std::io::ErrorKind;

use tern_engine::timer::{Timer, TimerConfig, TimerRecovery};

use crate::directory::{FileDirectory, OFFSET_NAME_DIGITS, sync_dir};
use crate::error::{FsError, FsOp, StoreError};
use crate::layout::StoreLayout;
use crate::mapped::{Access, MappedFile};
use crate::store::{create_zeroed, open_or_create_mapped};

/// The timer over its files.
pub type FsTimer = Timer<MappedFile, FileDirectory, MappedFile>;

/// The engine's errors over files.
pub type TimerError = tern_engine::Error<FsError>;

/// Why the timer could not be opened.
#[derive(Debug)]
pub enum TimerOpenError {
    /// A file or folder could not be made or mapped.
    Dir(StoreError),
    /// The engine refused what it found (a wheel of another geometry, a failed read).
    Engine(TimerError),
}

impl std::fmt::Display for TimerOpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimerOpenError::Dir(e) => write!(f, "{e}"),
            TimerOpenError::Engine(tern_engine::Error::Corrupt(
                tern_engine::error::Corruption::TimerWheelSize { len },
            )) => write!(
                f,
                "the timer wheel is {len} bytes, which is not this timerPrecisionMs / slot \
                 geometry's: start with the settings it was made with, or remove timerwheel, \
                 timerlog and config/timercheck to start the timer empty"
            ),
            TimerOpenError::Engine(e) => write!(f, "the timer: {e}"),
        }
    }
}

impl std::error::Error for TimerOpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TimerOpenError::Dir(e) => Some(e),
            TimerOpenError::Engine(e) => Some(e),
        }
    }
}

/// Opens (creating if needed) the timer of the store at `layout` and recovers it against
/// the commit log's recovered end `log_end`, at `now_ms`.
pub fn open_timer(
    layout: &StoreLayout,
    cfg: TimerConfig,
    log_end: u64,
    now_ms: i64,
) -> Result<(FsTimer, TimerRecovery), TimerOpenError> {
    let root = layout.root();
    let wheel_path = layout.timer_wheel_path();
    // An empty wheel file: the engine sizes it for its geometry (fallocated, zero).
    let wheel = open_or_create_mapped(&wheel_path, root, 0).map_err(TimerOpenError::Dir)?;
    let log = FileDirectory::open(&layout.timer_log_dir(), OFFSET_NAME_DIGITS, Access::Random)
        .map_err(TimerOpenError::Dir)?;
    sync_dir(root).map_err(|e| TimerOpenError::Dir(StoreError::io(root, e)))?;
    let cp_path = layout.timer_checkpoint_path();
    let cp = open_or_create_mapped(
        &cp_path,
        &layout.config_dir(),
        tern_engine::timer::checkpoint::FILE_SIZE,
    )
    .map_err(TimerOpenError::Dir)?;
    Timer::open(wheel, log, cp, cfg, log_end, now_ms).map_err(TimerOpenError::Engine)
}

/// The mark of a timer to be rebuilt (`<store>/config/timer.reset`).
fn reset_mark(layout: &StoreLayout) -> std::path::PathBuf {
    layout.config_dir().join("timer.reset")
}

/// Marks the timer at `layout` to be rebuilt empty before it runs again
/// ([`clear_timer`]), durably. Written before the commit log is cut under it: its units
/// and filing place may then name records the cut takes.
pub fn mark_timer_reset(layout: &StoreLayout) -> Result<(), StoreError> {
    let dir = layout.config_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| StoreError::io(&dir, FsError::io(FsOp::Create, &e)))?;
    create_zeroed(&reset_mark(layout), &dir, 0).map(drop)
}

/// Whether the timer at `layout` is marked to be rebuilt.
pub fn timer_reset_marked(layout: &StoreLayout) -> bool {
    reset_mark(layout).exists()
}

/// Deletes the timer's files (checkpoint, wheel, log segments), then its reset mark: the
/// next [`open_timer`] starts it empty. The timer must not be open. A crash midway leaves
/// the mark, and the next call finishes the work.
pub fn clear_timer(layout: &StoreLayout) -> Result<(), StoreError> {
    let gone = |path: &std::path::Path, r: std::io::Result<()>| match r {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(StoreError::io(path, FsError::io(FsOp::Remove, &e)))
        }
        _ => Ok(()),
    };
    let cp = layout.timer_checkpoint_path();
    gone(&cp, std::fs::remove_file(&cp))?;
    let wheel = layout.timer_wheel_path();
    gone(&wheel, std::fs::remove_file(&wheel))?;
    let log = layout.timer_log_dir();
    gone(&log, std::fs::remove_dir_all(&log))?;
    let root = layout.root();
    sync_dir(root).map_err(|e| StoreError::io(root, e))?;
    let mark = reset_mark(layout);
    gone(&mark, std::fs::remove_file(&mark))?;
    let dir = layout.config_dir();
    sync_dir(&dir).map_err(|e| StoreError::io(&dir, e))
}
