//! Consumers.
//!
//! * [`pull`]: the pull consumer (lite-pull style): the caller assigns queues, pulls from
//!   offsets it chooses and commits offsets itself. Done.
//! * Next (not yet written), each in its own module here:
//!   - `push`: the push consumer: a rebalance loop (AllocateMessageQueueAveragely over the
//!     sorted queues and sorted `GET_CONSUMER_LIST_BY_GROUP` ids, every 20 s and on
//!     NOTIFY_CONSUMER_IDS_CHANGED), per-queue pull loops with long polling (SUSPEND,
//!     15 s), a process queue per queue, concurrent and orderly (LOCK_BATCH_MQ every 20 s)
//!     listeners, retry through CONSUMER_SEND_MSG_BACK, `%RETRY%group` subscription.
//!   - `offset_store`: remote offsets persisted every 5 s (UPDATE_CONSUMER_OFFSET oneway)
//!     for clustering, local files for broadcasting.
//!   - `rebalance`: allocation strategies.
//!
//!   The push consumer needs the client instance's connections to answer broker requests
//!   (NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO); today the pool refuses them.

pub mod pull;

pub use pull::{PullConsumer, PullResult, PullStatus};
