//! What the engine's tests, the fuzz targets and the firmware image share (the `testkit`
//! feature; the engine's own unit tests always have it): a sample message to store.

use crate::record::{Host, MessageIn};

/// When every sample message was born (2023-11-14, a fixed clock).
pub const BORN_TIMESTAMP: i64 = 1_700_000_000_000;
/// Where every sample message comes from: a client on this machine.
pub const BORN_HOST: Host = Host::V4 {
    ip: [127, 0, 0, 1],
    port: 50_000,
};
/// Who stores every sample message: a broker on this machine, on RocketMQ's port.
pub const STORE_HOST: Host = Host::V4 {
    ip: [127, 0, 0, 1],
    port: 10_911,
};

/// A plain message to `topic`/`queue_id`: no flags, born at [`BORN_TIMESTAMP`] on
/// [`BORN_HOST`], stored by [`STORE_HOST`], never reconsumed, not transactional. A test
/// that needs another field says so with `MessageIn { field, ..message(…) }`.
pub fn message<'a>(
    topic: &'a str,
    queue_id: i32,
    body: &'a [u8],
    properties: &'a [u8],
) -> MessageIn<'a> {
    MessageIn {
        topic,
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: BORN_TIMESTAMP,
        born_host: BORN_HOST,
        store_host: STORE_HOST,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        properties,
    }
}
