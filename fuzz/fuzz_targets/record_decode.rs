//! Any stored bytes: the record decoder validates or refuses, never panics, and every
//! accessor of a record it accepts stays in bounds. A parsed record re-encodes to the
//! same bytes, or, where the encoder normalises the layout (v1/v2 by topic length), to a
//! record with the same fields. The properties iterator takes any bytes. A replica's log
//! fed the bytes as a master's stream takes what verifies, refuses the rest, never panics,
//! and recovers to what it took.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_engine::layout::{MAGIC_V1, MAGIC_V2};
use tern_engine::properties::{self, Properties};
use tern_engine::record::{
    MessageIn, RecordError, RecordView, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, StoreStamp,
    V1_MAX_TOPIC_LEN,
};

fuzz_target!(|data: &[u8]| {
    properties_never_panic(data);
    replica_never_panics(data);
    let Ok(view) = RecordView::parse(data) else {
        return;
    };
    let size = view.total_size() as usize;
    assert!(size <= data.len());
    assert_eq!(view.bytes(), &data[..size]);
    touch_every_accessor(&view);
    let crc_ok = view.verify_crc().is_ok();
    properties_never_panic(view.properties());

    // Re-encode what was parsed. `MessageIn` carries the topic as text: a record whose
    // topic is not UTF-8 cannot be re-encoded, and the broker never writes one.
    let Some(topic) = view.topic_str() else {
        return;
    };
    let msg = MessageIn::restored(&view, topic, view.queue_id(), view.properties());
    let stamp = StoreStamp {
        queue_offset: view.queue_offset(),
        physical_offset: view.physical_offset(),
        store_timestamp: view.store_timestamp(),
    };
    let mut out = vec![0u8; size + 2];
    let n = match msg.encode_with_crc(stamp, view.body_crc(), &mut out) {
        Ok(n) => n,
        // The parser accepts a u16 properties length; the encoder keeps Java's short limit.
        Err(RecordError::PropertiesTooLong) => {
            assert!(view.properties().len() > properties::MAX_PROPERTIES_LEN);
            return;
        }
        Err(e) => panic!("a parsed record does not re-encode: {e:?}"),
    };
    // The encoder picks v2 exactly when the topic is longer than v1 allows; a v1 record
    // with a 128..=255-byte topic (or a v2 record with a short one) changes layout.
    let layout_kept = (view.magic() == MAGIC_V2) == (topic.len() > V1_MAX_TOPIC_LEN);
    if layout_kept {
        assert_eq!(&out[..n], view.bytes(), "re-encoding changed the bytes");
        if crc_ok {
            // With a good CRC, computing it afresh gives the same bytes too.
            let mut again = vec![0u8; n];
            assert_eq!(msg.encode(stamp, &mut again), Ok(n));
            assert_eq!(again, view.bytes());
        }
    } else {
        let back = RecordView::parse(&out[..n]).expect("re-encoded record parses");
        assert!(back.magic() == MAGIC_V1 || back.magic() == MAGIC_V2);
        assert_ne!(back.magic(), view.magic());
        assert_eq!(
            n as i64 - size as i64,
            if back.magic() == MAGIC_V2 { 1 } else { -1 }
        );
        assert_same_fields(&back, &view);
    }
});

fn touch_every_accessor(v: &RecordView<'_>) {
    let _ = (v.magic(), v.body_crc(), v.queue_id(), v.flag());
    let _ = (v.queue_offset(), v.physical_offset(), v.born_timestamp());
    let _ = (v.store_timestamp(), v.reconsume_times());
    let _ = v.prepared_transaction_offset();
    let (born, store) = (v.born_host(), v.store_host());
    assert_eq!(
        born.stored_len() == 20,
        v.sys_flag() & SYSFLAG_BORNHOST_V6 != 0
    );
    assert_eq!(
        store.stored_len() == 20,
        v.sys_flag() & SYSFLAG_STOREHOST_V6 != 0
    );
    let parts = v.body().len() + v.topic().len() + v.properties().len();
    assert!(parts <= v.total_size() as usize);
    let _ = v.topic_str();
}

fn assert_same_fields(a: &RecordView<'_>, b: &RecordView<'_>) {
    assert_eq!(a.body_crc(), b.body_crc());
    assert_eq!(a.queue_id(), b.queue_id());
    assert_eq!(a.flag(), b.flag());
    assert_eq!(a.queue_offset(), b.queue_offset());
    assert_eq!(a.physical_offset(), b.physical_offset());
    assert_eq!(a.sys_flag(), b.sys_flag());
    assert_eq!(a.born_timestamp(), b.born_timestamp());
    assert_eq!(a.born_host(), b.born_host());
    assert_eq!(a.store_timestamp(), b.store_timestamp());
    assert_eq!(a.store_host(), b.store_host());
    assert_eq!(a.reconsume_times(), b.reconsume_times());
    assert_eq!(
        a.prepared_transaction_offset(),
        b.prepared_transaction_offset()
    );
    assert_eq!(a.body(), b.body());
    assert_eq!(a.topic(), b.topic());
    assert_eq!(a.properties(), b.properties());
}

fn properties_never_panic(bytes: &[u8]) {
    let mut n = 0usize;
    for (name, value) in Properties::new(bytes) {
        // What the iterator yields is what Java keeps: non-empty, separator-free pieces.
        assert!(!name.is_empty() && !value.is_empty());
        assert!(!name.as_bytes().contains(&properties::NAME_VALUE_SEPARATOR));
        assert!(!value.as_bytes().contains(&properties::PROPERTY_SEPARATOR));
        n += 1;
        assert!(n <= bytes.len() / 3 + 1);
    }
    let _ = properties::get(bytes, properties::key::TAGS);
    let _ = properties::tag_code(bytes);
}

/// The bytes as a master's replication stream, in two chunks split where the first byte
/// says: whatever the log takes, recovery finds again.
fn replica_never_panics(data: &[u8]) {
    use tern_engine::commitlog::{CommitLog, Recovery};
    use tern_engine::faulty::FaultPlan;
    use tern_engine::ram::RamDir;
    const SEG: u64 = 4096;
    let plan = FaultPlan::none();
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; SEG as usize]).collect();
    let dir: RamDir<'_, 4> = RamDir::with_buffers(&plan, &mut bufs).unwrap();
    let (mut log, _) = CommitLog::open(dir, SEG, Recovery::Scan { from: 0 }).unwrap();
    let split = data.first().map_or(0, |b| usize::from(*b).min(data.len()));
    let mut pending_at = 0u64;
    let mut pending = Vec::new();
    for chunk in [&data[..split], &data[split..]] {
        pending.extend_from_slice(chunk);
        match log.append_replicated(pending_at, &pending) {
            Ok(to) => {
                assert!(to >= pending_at && to - pending_at <= pending.len() as u64);
                pending.drain(..(to - pending_at) as usize);
                pending_at = to;
            }
            Err(_) => break,
        }
    }
    let end = log.max_offset();
    log.flush().unwrap();
    let (back, _) = CommitLog::open(log.into_dir(), SEG, Recovery::Scan { from: 0 }).unwrap();
    assert_eq!(
        back.max_offset(),
        end,
        "recovery disagrees with what was taken"
    );
}
