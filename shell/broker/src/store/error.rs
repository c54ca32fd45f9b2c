//! The store's errors: what an append refused or failed.

use std::sync::Arc;

use tern_engine_fs::fs_store::FsStoreError;

/// Why an append failed.
#[derive(Debug)]
pub enum PutError {
    /// Writes are refused: the disk is past its hard watermark.
    DiskFull,
    /// Writes are refused: what is stored but not yet taken away (an edge gateway's
    /// unforwarded backlog) is over its budget.
    OverBudget,
    /// The message cannot be stored (too large for a segment, bad layout).
    Illegal(String),
    /// A broker rule refuses the message, answered with RocketMQ's code and remark for
    /// it (a timer message past `timerMaxDelaySec`, timers switched off).
    Refused(tern_shell::ResponseCode, String),
    /// The broker is shutting down and the store is sealed.
    ShuttingDown,
    /// The store failed.
    Store(FsStoreError),
    /// A flush failed earlier: the store refuses writes until the broker restarts.
    Failed(Arc<str>),
}

/// What the store refused or failed, for a log line or a remark after "ack not stored: ";
/// the send processor's refusals (`From<PutError> for Refusal`) add RocketMQ's codes.
impl std::fmt::Display for PutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutError::DiskFull => {
                f.write_str("the broker's disk is full, writes are refused until space is freed")
            }
            PutError::OverBudget => {
                f.write_str("the stored backlog is over its budget; writes resume as it drains")
            }
            PutError::Illegal(why) => write!(f, "message cannot be stored: {why}"),
            PutError::Refused(_, remark) => f.write_str(remark),
            PutError::ShuttingDown => f.write_str("the broker is shutting down"),
            PutError::Store(e) => write!(f, "append failed: {e}"),
            PutError::Failed(why) => write!(
                f,
                "the store failed ({why}); writes are refused until the broker is restarted"
            ),
        }
    }
}
