//! Property tests: encode → decode is identity; arbitrary bytes give a value or an error,
//! never a panic.

use proptest::prelude::*;
use tern_shell::body::{ConsumeStats, HeartbeatData, TopicRouteData, from_json};
use tern_shell::frame::body_offset;
use tern_shell::headers::{
    FromExtFields, PullMessageRequestHeader, SendMessageRequestHeaderV2, ToExtFields,
};
use tern_shell::message::{Message, decode_batch, decode_pulled, encode_batch};
use tern_shell::{
    ExtFields, FrameLimits, LanguageCode, RemotingCommand, SerializeType, lenient_json,
};

fn command() -> impl Strategy<Value = RemotingCommand> {
    (
        any::<i16>(),
        0u8..14,
        any::<i16>(),
        any::<i32>(),
        0i32..4,
        proptest::option::of("[^\u{0}]{1,20}"),
        proptest::collection::btree_map("[a-zA-Z]{1,8}", "[^\u{0}]{1,16}", 0..6),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    )
        .prop_map(
            |(code, lang, version, opaque, flag, remark, ext, body, binary)| RemotingCommand {
                code: i32::from(code),
                language: LanguageCode::from_raw(lang),
                version: i32::from(version),
                opaque,
                flag,
                remark,
                ext_fields: ext.into_iter().collect(),
                body,
                serialize_type: if binary {
                    SerializeType::RocketMq
                } else {
                    SerializeType::Json
                },
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn frame_encode_then_decode_is_identity(cmd in command()) {
        let bytes = cmd.encode().unwrap();
        let (back, used) = RemotingCommand::decode(&bytes, &FrameLimits::default()).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, cmd);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_frame_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = RemotingCommand::decode(&bytes, &FrameLimits::default());
        let _ = RemotingCommand::decode_payload(&bytes, &FrameLimits::default());
    }

    #[test]
    fn mutated_frames_never_panic_the_decoder(cmd in command(), at in any::<usize>(), val in any::<u8>()) {
        let mut bytes = cmd.encode().unwrap();
        let i = at % bytes.len();
        bytes[i] = val;
        let _ = RemotingCommand::decode(&bytes, &FrameLimits::default());
    }

    #[test]
    fn decode_in_parts_agrees_with_slice_decode(cmd in command(), at in any::<usize>(), val in any::<u8>(), mutate in any::<bool>()) {
        let mut bytes = cmd.encode().unwrap();
        if mutate {
            let i = 4 + at % (bytes.len() - 4);
            bytes[i] = val;
        }
        // As the connection reads: the mark, then the header and the body it locates.
        let payload = &bytes[4..];
        let limits = FrameLimits::default();
        let mark = u32::from_be_bytes(payload[..4].try_into().unwrap());
        let in_parts = body_offset(mark, payload.len(), &limits).and_then(|at| {
            RemotingCommand::decode_parts(mark, &payload[4..at], payload[at..].to_vec(), &limits)
        });
        prop_assert_eq!(in_parts, RemotingCommand::decode_payload(payload, &limits));
    }

    #[test]
    fn pull_header_round_trips(group in "[a-z]{1,10}", q in any::<i32>(), off in any::<i64>(), sub in proptest::option::of("[ -~]{0,20}")) {
        let h = PullMessageRequestHeader { consumer_group: group, queue_id: q, queue_offset: off, subscription: sub.filter(|s| !s.is_empty()), ..Default::default() };
        let mut ext = ExtFields::new();
        h.to_ext_fields(&mut ext);
        prop_assert_eq!(PullMessageRequestHeader::from_ext_fields(&ext).unwrap(), h);
    }

    #[test]
    fn send_v2_header_round_trips(a in "[a-z]{1,8}", e in any::<i32>(), g in any::<i64>(), m in proptest::option::of(any::<bool>())) {
        let h = SendMessageRequestHeaderV2 { a, b: "t".into(), c: "TBW102".into(), d: 4, e, g, m, ..Default::default() };
        let mut ext = ExtFields::new();
        h.to_ext_fields(&mut ext);
        prop_assert_eq!(SendMessageRequestHeaderV2::from_ext_fields(&ext).unwrap(), h);
    }

    #[test]
    fn arbitrary_ext_fields_give_header_or_error(ext in proptest::collection::btree_map("[a-zA-Z]{1,6}", ".{0,8}", 0..10)) {
        let ext: ExtFields = ext.into_iter().collect();
        let _ = PullMessageRequestHeader::from_ext_fields(&ext);
        let _ = SendMessageRequestHeaderV2::from_ext_fields(&ext);
    }

    #[test]
    fn arbitrary_bytes_never_panic_body_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = lenient_json::parse(&bytes);
        let _ = from_json::<TopicRouteData>(&bytes);
        let _ = from_json::<HeartbeatData>(&bytes);
        let _ = from_json::<ConsumeStats>(&bytes);
        let _ = decode_batch(&bytes);
        let _ = decode_pulled(&bytes, true);
    }

    #[test]
    fn arbitrary_json_like_text_never_panics_lenient_parser(text in "[{}\\[\\]:,\"0-9a-z \\\\.-]{0,64}") {
        let _ = lenient_json::parse(text.as_bytes());
    }

    #[test]
    fn batch_encode_then_decode_is_identity(msgs in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..64), any::<i32>(), "[A-Z]{1,5}", "[a-z]{1,5}"), 0..8)) {
        let msgs: Vec<Message> = msgs.into_iter().map(|(body, flag, k, v)| Message { flag, ..Message::new("t", body) }.with_property(k, v)).collect();
        let bytes = encode_batch(&msgs).unwrap();
        let items = decode_batch(&bytes).unwrap();
        prop_assert_eq!(items.len(), msgs.len());
        for (item, m) in items.iter().zip(&msgs) {
            prop_assert_eq!(item.body, &m.body[..]);
            prop_assert_eq!(item.flag, m.flag);
            prop_assert_eq!(item.properties_map(), m.properties.clone());
        }
    }
}
