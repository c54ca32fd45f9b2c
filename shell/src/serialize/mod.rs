//! The two header encodings: fastjson text (§1.3) and the ROCKETMQ binary form (§1.4).
//!
//! Decoders are lenient where real peers differ (the C++ client writes some extFields values
//! as JSON numbers, omits `serializeTypeCurrentRPC`, sends `remark: ""`); encoders always
//! write what the strictest reader (Go: string-only extFields; C++: JSON only) accepts.

mod binary;
mod json;

pub use binary::{decode_binary_header, encode_binary_header};
pub(crate) use json::{append_json_header, json_header_size_hint, push_json_str};
pub use json::{decode_json_header, encode_json_header};
