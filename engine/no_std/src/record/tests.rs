extern crate std;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::testkit;
use proptest::prelude::*;

fn sample<'a>(topic: &'a str, body: &'a [u8], props: &'a [u8], v6: bool) -> MessageIn<'a> {
    let born = if v6 {
        Host::V6 {
            ip: [1; 16],
            port: 1234,
        }
    } else {
        testkit::BORN_HOST
    };
    MessageIn {
        flag: 7,
        sys_flag: SYSFLAG_COMPRESSED,
        born_host: born,
        store_host: Host::V4 {
            ip: [10, 0, 0, 2],
            port: 10911,
        },
        reconsume_times: 2,
        ..testkit::message(topic, 3, body, props)
    }
}

const STAMP: StoreStamp = StoreStamp {
    queue_offset: 42,
    physical_offset: 4096,
    store_timestamp: 1_700_000_000_123,
};

#[test]
fn ipv4_v1_record_has_rocketmq_offsets() {
    let m = sample("TopicTest", b"hello", b"TAGS\x01A\x02", false);
    let mut buf = [0u8; 256];
    let n = m.encode(STAMP, &mut buf).unwrap();
    assert_eq!(n, 84 + 4 + 5 + 1 + 9 + 2 + 7);
    assert_eq!(&buf[4..8], &MAGIC_V1.to_be_bytes());
    assert_eq!(&buf[20..28], &42i64.to_be_bytes(), "queue offset @20");
    assert_eq!(&buf[28..36], &4096i64.to_be_bytes(), "physical offset @28");
    assert_eq!(
        &buf[56..64],
        &STAMP.store_timestamp.to_be_bytes(),
        "store time @56"
    );
}

#[test]
fn decode_returns_every_field() {
    let m = sample("T", b"body", b"KEYS\x01k\x02", true);
    let mut buf = [0u8; 256];
    let n = m.encode(STAMP, &mut buf).unwrap();
    let v = RecordView::parse(&buf[..n]).unwrap();
    v.verify_crc().unwrap();
    assert_eq!(v.total_size() as usize, n);
    assert_eq!(v.queue_id(), 3);
    assert_eq!(v.flag(), 7);
    assert_eq!(v.queue_offset(), 42);
    assert_eq!(v.physical_offset(), 4096);
    assert_eq!(v.sys_flag(), SYSFLAG_COMPRESSED | SYSFLAG_BORNHOST_V6);
    assert_eq!(
        v.born_host(),
        Host::V6 {
            ip: [1; 16],
            port: 1234
        }
    );
    assert_eq!(
        v.store_host(),
        Host::V4 {
            ip: [10, 0, 0, 2],
            port: 10911
        }
    );
    assert_eq!(v.store_timestamp(), STAMP.store_timestamp);
    assert_eq!(v.reconsume_times(), 2);
    assert_eq!(v.body(), b"body");
    assert_eq!(v.topic_str(), Some("T"));
    assert_eq!(v.properties(), b"KEYS\x01k\x02");
}

#[test]
fn long_topic_uses_v2_magic() {
    let topic: std::string::String = core::iter::repeat_n('t', 200).collect();
    let m = sample(&topic, b"", b"", false);
    let mut buf = vec![0u8; 512];
    let n = m.encode(STAMP, &mut buf).unwrap();
    let v = RecordView::parse(&buf[..n]).unwrap();
    assert_eq!(v.magic(), MAGIC_V2);
    assert_eq!(v.topic(), topic.as_bytes());
}

#[test]
fn flipped_body_bit_fails_crc() {
    let m = sample("T", b"payload", b"", false);
    let mut buf = [0u8; 256];
    let n = m.encode(STAMP, &mut buf).unwrap();
    buf[n - 8] ^= 0x01; // inside the body (the last 4 bytes are topic and property lengths)
    let v = RecordView::parse(&buf[..n]).unwrap();
    assert!(matches!(v.verify_crc(), Err(RecordError::BadCrc { .. })));
}

#[test]
fn too_small_buffer_and_oversized_properties_are_errors() {
    let m = sample("T", b"payload", b"", false);
    let mut buf = [0u8; 10];
    assert_eq!(m.encode(STAMP, &mut buf), Err(RecordError::BufferTooSmall));
    let props = vec![b'a'; MAX_PROPERTIES_LEN + 1];
    let m = sample("T", b"", &props, false);
    assert_eq!(m.encoded_len(), Err(RecordError::PropertiesTooLong));
}

proptest! {
    #[test]
    fn encode_then_parse_is_identity(
        topic in "[a-zA-Z0-9_%|-]{1,300}",
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        props in proptest::collection::vec(any::<u8>(), 0..512),
        v6 in any::<bool>(),
        queue_id in any::<i32>(),
        stamp in (any::<i64>(), any::<i64>(), any::<i64>()),
    ) {
        let mut m = sample(&topic, &body, &props, v6);
        m.queue_id = queue_id;
        let stamp = StoreStamp { queue_offset: stamp.0, physical_offset: stamp.1, store_timestamp: stamp.2 };
        let mut buf = vec![0u8; m.encoded_len().unwrap()];
        let n = m.encode(stamp, &mut buf).unwrap();
        let v = RecordView::parse(&buf[..n]).unwrap();
        prop_assert!(v.verify_crc().is_ok());
        prop_assert_eq!(v.topic(), topic.as_bytes());
        prop_assert_eq!(v.body(), &body[..]);
        prop_assert_eq!(v.properties(), &props[..]);
        prop_assert_eq!(v.queue_id(), queue_id);
        prop_assert_eq!(v.queue_offset(), stamp.queue_offset);
        prop_assert_eq!(v.physical_offset(), stamp.physical_offset);
        prop_assert_eq!(v.store_timestamp(), stamp.store_timestamp);
    }

    #[test]
    fn arbitrary_bytes_parse_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(v) = RecordView::parse(&bytes) {
            let _ = (v.body(), v.topic(), v.properties(), v.born_host(), v.store_host(), v.verify_crc());
        }
    }

    #[test]
    fn corrupted_record_fails_to_parse_or_shows_valid_parts(
        body in proptest::collection::vec(any::<u8>(), 0..256),
        at in any::<usize>(),
        bit in 0u8..8,
    ) {
        let m = sample("Topic", &body, b"TAGS\x01x\x02", false);
        let mut buf: Vec<u8> = vec![0u8; m.encoded_len().unwrap()];
        let n = m.encode(STAMP, &mut buf).unwrap();
        buf[at % n] ^= 1 << bit;
        if let Ok(v) = RecordView::parse(&buf[..n]) {
            prop_assert!(v.body().len() + v.topic().len() + v.properties().len() <= n);
        }
    }
}
