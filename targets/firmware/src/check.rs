//! Checks of a store against the model: what recovery promises, verified record by record.

use tern_engine::commitlog::Slot;
use tern_engine::index::MAX_QUERY_RESULTS;

use crate::FwEngine;
use crate::report::{ensure, must};
use crate::workload::{self, BODY_MAX_BYTES, QUEUES, Sent};

/// What a store held when it passed the checks.
#[derive(Clone, Copy, Debug)]
pub struct Verified {
    /// Records in the log, all matching the model's first ones.
    pub records: usize,
    /// Consume queues present.
    pub queues: usize,
    /// Index lookups that found their message (UNIQ_KEY and KEYS).
    pub index_hits: usize,
}

/// Checks that the log is exactly the first `n` messages of `sent` for some `n >= durable`
/// (each intact, in order, at the offsets the puts returned), that every queue holds
/// entries for exactly those messages at contiguous offsets from 0, and that the index finds
/// each by its keys. Fails the run on the first difference.
pub fn verify(store: &FwEngine<'_>, sent: &[Sent], durable: usize) -> Verified {
    let records = verify_log(store, sent, durable);
    let sent = &sent[..records];
    let queues = verify_queues(store, sent);
    let index_hits = verify_index(store, sent);
    Verified {
        records,
        queues,
        index_hits,
    }
}

/// Walks the log; returns how many records it holds.
fn verify_log(store: &FwEngine<'_>, sent: &[Sent], durable: usize) -> usize {
    let log = store.log();
    let mut pos = log.min_offset();
    let mut found = 0usize;
    let mut body = [0u8; BODY_MAX_BYTES];
    while pos < log.max_offset() {
        let size = match must!(log.slot_at(pos), "log slot at {pos}") {
            Slot::Skip(next) => {
                pos = next;
                continue;
            }
            Slot::End => break,
            Slot::Record(size) => size,
        };
        let Some(s) = sent.get(found) else {
            crate::report::fail(format_args!(
                "record {found} at {pos} was never put: the log holds more than was acknowledged"
            ))
        };
        let want_body = workload::body(s.seq, &mut body);
        let (topic, queue_id) = QUEUES[usize::from(s.queue)];
        must!(
            log.with_record(pos, size, &mut [], |view| {
                let v = must!(view, "record #{} at {pos} does not parse", s.seq);
                must!(v.verify_crc(), "record #{} at {pos}: body CRC", s.seq);
                ensure!(
                    v.physical_offset() as u64 == s.offset && pos == s.offset,
                    "record #{} at {pos}: put returned offset {}, record says {}",
                    s.seq,
                    s.offset,
                    v.physical_offset()
                );
                ensure!(
                    v.body() == want_body,
                    "record #{} at {pos}: body differs",
                    s.seq
                );
                ensure!(
                    v.topic() == topic.as_bytes() && v.queue_id() == queue_id,
                    "record #{} at {pos}: wrong topic or queue",
                    s.seq
                );
                ensure!(
                    v.queue_offset() as u64 == s.queue_offset,
                    "record #{} at {pos}: queue offset {} (put returned {})",
                    s.seq,
                    v.queue_offset(),
                    s.queue_offset
                );
                Ok(())
            }),
            "reading record #{} at {pos}",
            s.seq
        );
        found += 1;
        pos += u64::from(size);
    }
    ensure!(
        pos == log.max_offset(),
        "the log walk stopped at {pos}, the log ends at {}",
        log.max_offset()
    );
    ensure!(
        found >= durable,
        "{durable} messages were flushed, only {found} recovered"
    );
    found
}

/// Every queue holds exactly its surviving messages, at offsets 0, 1, 2, …
fn verify_queues(store: &FwEngine<'_>, sent: &[Sent]) -> usize {
    let log = store.log();
    for (qi, &(topic, queue_id)) in QUEUES.iter().enumerate() {
        let mut want = sent.iter().filter(|s| usize::from(s.queue) == qi);
        let count = want.clone().count() as u64;
        let Some(cq) = store.queue(topic, queue_id) else {
            ensure!(
                count == 0,
                "queue {topic}/{queue_id} missing ({count} messages)"
            );
            continue;
        };
        ensure!(
            cq.min_offset() == 0 && cq.max_offset() == count,
            "queue {topic}/{queue_id}: offsets {}..{}, want 0..{count}",
            cq.min_offset(),
            cq.max_offset()
        );
        for i in 0..count {
            // The filter yields `count` items: this never runs dry.
            let Some(s) = want.next() else { break };
            ensure!(
                s.queue_offset == i,
                "queue {topic}/{queue_id}: #{} was given queue offset {}, want {i}",
                s.seq,
                s.queue_offset
            );
            let e = must!(cq.get(i), "queue {topic}/{queue_id} entry {i}");
            let Some(e) = e else {
                crate::report::fail(format_args!("queue {topic}/{queue_id}: entry {i} missing"))
            };
            ensure!(
                e.physical_offset == s.offset,
                "queue {topic}/{queue_id} entry {i}: points at {}, #{} is at {}",
                e.physical_offset,
                s.seq,
                s.offset
            );
            let size = must!(
                log.slot_at(e.physical_offset),
                "slot of {topic}/{queue_id}#{i}"
            );
            ensure!(
                size == Slot::Record(e.size),
                "queue {topic}/{queue_id} entry {i}: size {} but the log has {size:?}",
                e.size
            );
        }
    }
    store.queues().len()
}

/// Every surviving message is found by its UNIQ_KEY and, when it has one, its KEYS.
fn verify_index(store: &FwEngine<'_>, sent: &[Sent]) -> usize {
    let mut hits = 0;
    for s in sent {
        let topic = QUEUES[usize::from(s.queue)].0;
        let keys = [
            Some(workload::uniq_key(s.seq)),
            workload::keyed(s.seq).then(|| workload::business_key(s.seq)),
        ];
        for key in keys.iter().flatten() {
            ensure!(
                finds(store, topic, key, s.offset),
                "index: {topic}#{key} does not find #{} at {}",
                s.seq,
                s.offset
            );
            hits += 1;
        }
    }
    hits
}

/// Whether looking `key` up in `topic` returns `offset` among its hits.
fn finds(store: &FwEngine<'_>, topic: &str, key: &str, offset: u64) -> bool {
    let mut found = false;
    must!(
        store
            .index()
            .query(topic, key, MAX_QUERY_RESULTS, 0, i64::MAX, &mut |o| {
                found |= o == offset
            }),
        "index query {topic}#{key}"
    );
    found
}

/// Messages a power cut took must leave no trace: the index finds none of their unique
/// keys (every hit would point at a record that is not theirs). Returns how many were
/// checked.
pub fn verify_lost(store: &FwEngine<'_>, lost: &[Sent]) -> usize {
    for s in lost {
        let topic = QUEUES[usize::from(s.queue)].0;
        let uniq = workload::uniq_key(s.seq);
        let mut hits = 0u32;
        must!(
            store
                .index()
                .query(topic, &uniq, MAX_QUERY_RESULTS, 0, i64::MAX, &mut |_| {
                    hits += 1
                }),
            "index query {topic}#{uniq}"
        );
        ensure!(
            hits == 0,
            "index: lost message #{} ({topic}#{uniq}) still has {hits} entries",
            s.seq
        );
    }
    lost.len()
}
