//! Tern's remoting layer: the one place that knows RocketMQ's bytes on the wire.
//!
//! * [`frame`]: the frame codec and [`RemotingCommand`]; [`serialize`]: JSON and ROCKETMQ headers;
//!   [`ext_fields`]: the custom header's map.
//! * [`code`]: request, response and language codes (unknown values kept raw).
//! * [`headers`]: typed extFields headers for every request the services handle.
//! * [`lenient_json`] + [`body`]: fastjson-compatible JSON bodies (unquoted and object keys).
//! * [`message`]: batch bodies, pulled records, message ids, compression.
//! * [`allocate`]: Java's queue allocation strategies (client rebalance, QUERY_ASSIGNMENT).
//! * [`pop`]: POP consumption's receipt handles, revive records and bodies.
//! * [`recall`]: a timer message's recall handle.
//! * [`filter`]: SQL92 message selectors (parse once, test stored properties).
//! * [`answer`]: a processor's answer, or the refusal that becomes an error response.
//! * [`connection`], [`server`], [`pool`]: async transport; [`tls`]: TLS under it;
//!   [`runtime`]: executor glue; [`sync`]: locks that stay usable after a panic.
#![forbid(unsafe_code)]

pub mod acl;
/// UTC dates from day counts, the engine's: one calendar for file names and printed times.
pub use tern_engine::calendar;
pub mod allocate;
pub mod answer;
pub mod attributes;
pub mod body;
pub mod cli;
pub mod code;
pub mod config;
pub mod connection;
pub mod ext_fields;
pub mod filter;
pub mod frame;
pub mod headers;
pub mod http;
pub mod lenient_json;
pub mod logger;
pub mod message;
pub mod metrics;
pub mod pool;
pub mod pop;
pub mod recall;
pub mod runtime;
pub mod serialize;
pub mod server;
pub mod signal;
pub mod sync;
pub mod tls;
pub mod topic;

pub use answer::{Answer, Refusal};
pub use code::{LanguageCode, RequestCode, ResponseCode};
pub use connection::{
    Connection, ConnectionConfig, ConnectionCtx, IoCause, NoProcessor, Processor, RemotingError,
};
pub use frame::{ExtFields, FrameError, FrameLimits, RemotingCommand, SerializeType};
pub use headers::{FromExtFields, HeaderError, ToExtFields};
pub use pool::ConnectionPool;
pub use server::{Bound, Server, ServerConfig};
