//! Dispatch: what the reput service learns from each record it follows in the log.

use crate::properties::{self, key};
use crate::record::{RecordView, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK};

/// One record, as consume queues and the index need it.
#[derive(Clone, Copy, Debug)]
pub struct DispatchRecord<'a> {
    /// Commit-log offset.
    pub offset: u64,
    /// Record size.
    pub size: u32,
    /// Topic.
    pub topic: &'a str,
    /// Queue id.
    pub queue_id: i32,
    /// Consume-queue position.
    pub queue_offset: i64,
    /// Java hash of TAGS. The queue entry holds it, except for a delayed record in the
    /// schedule topic, whose entry holds its delivery time ([`crate::delay`]).
    pub tag_code: i64,
    /// Store time.
    pub store_timestamp: i64,
    /// UNIQ_KEY, if any.
    pub uniq_key: Option<&'a str>,
    /// KEYS, if any.
    pub keys: Option<&'a str>,
    /// sysFlag of the record.
    pub sys_flag: i32,
    /// The full properties string (delay and transaction services read more of it).
    pub properties: &'a [u8],
}

impl<'a> DispatchRecord<'a> {
    /// Reads what dispatch needs from a record. `None` for a record whose topic is not
    /// UTF-8 (the broker never writes one).
    pub fn from_view(view: &RecordView<'a>, offset: u64) -> Option<Self> {
        let props = view.properties();
        Some(Self {
            offset,
            size: view.total_size(),
            topic: view.topic_str()?,
            queue_id: view.queue_id(),
            queue_offset: view.queue_offset(),
            tag_code: properties::tag_code(props),
            store_timestamp: view.store_timestamp(),
            uniq_key: properties::get(props, key::UNIQ_KEY),
            keys: properties::get(props, key::KEYS),
            sys_flag: view.sys_flag(),
            properties: props,
        })
    }

    /// Whether the record goes into its consume queue: plain and committed messages do;
    /// half messages and rollback markers do not (RocketMQ's rule).
    pub fn goes_to_queue(&self) -> bool {
        matches!(
            self.sys_flag & SYSFLAG_TRANSACTION_MASK,
            0 | SYSFLAG_TRANSACTION_COMMIT
        )
    }

    /// Whether the record is indexed by key (rollback markers are not).
    pub fn goes_to_index(&self) -> bool {
        self.sys_flag & SYSFLAG_TRANSACTION_MASK != crate::record::SYSFLAG_TRANSACTION_ROLLBACK
    }
}
