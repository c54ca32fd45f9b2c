//! Dispatch: following the log into consume queues and the index, in bounded passes an
//! owner can run one per hold of its lock ([`Engine::dispatch_some`]), or all at once
//! ([`Engine::dispatch`]).

use super::{Engine, QueueSlot, QueueTable, Res};
use crate::commitlog::Slot;
use crate::consumequeue::{ConsumeQueue, Entry, Put};
use crate::dispatch::DispatchRecord;
use crate::error::{Corruption, Error};
use crate::index::RecordKeys;
use crate::media::{Directory, Media};
use crate::record::RecordError;

/// Records [`Engine::dispatch`] hands to one [`Engine::dispatch_some`] pass.
pub const DISPATCH_PASS_RECORDS: u64 = 1024;

/// What one bounded dispatch pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dispatched {
    /// Records dispatched.
    pub count: u64,
    /// Records remain below the log's end and the pass's bound: call again.
    pub more: bool,
    /// The pass stopped at its bound (`below`): the next record ends past it, and waits
    /// until the owner raises the bound. `more` is false then.
    pub limited: bool,
    /// The pass stopped before a record whose index roll waits for the newest index
    /// file to be flushed (only with [`Engine::defer_index_rolls`]): flush it, outside
    /// the owner's lock (a checkpoint), then call again. `more` is false then.
    pub index_flush: bool,
}

/// What dispatching one record did.
enum Step {
    /// Not a record for queues or index (a transaction's marker).
    Skipped,
    /// Dispatched; its store time.
    Done(i64),
    /// Not dispatched: its index roll waits for a flush.
    WaitIndexFlush,
}

impl<L, I, Q, C> Engine<L, I, Q, C>
where
    L: Directory,
    I: Directory<Error = L::Error>,
    Q: QueueTable,
    Q::Dir: Directory<Error = L::Error>,
    C: Media<Error = L::Error>,
{
    /// Follows the log from the last dispatched offset to its end, adding each record to
    /// its consume queue and the index, and telling `on_record` (the broker wakes waiting
    /// pulls). Returns how many records were dispatched. No bound: recovery and a cut
    /// dispatch every record the log holds. A loop over
    /// [`Engine::dispatch_some`]; owners that hold a lock around it should call that
    /// instead, one bounded pass per lock hold.
    pub fn dispatch(
        &mut self,
        scratch: &mut [u8],
        on_record: &mut dyn FnMut(&DispatchRecord<'_>),
    ) -> Res<u64, L::Error> {
        let mut count = 0;
        loop {
            let pass = self.dispatch_some(scratch, DISPATCH_PASS_RECORDS, u64::MAX, on_record)?;
            count += pass.count;
            if pass.index_flush {
                // Nobody else to hand it to: flush here (what an undeferred roll does).
                let r = self.index.flush();
                self.fail_on_err(r)?;
                continue;
            }
            if !pass.more {
                return Ok(count);
            }
        }
    }

    /// With `on`, [`Engine::dispatch_some`] stops before a record whose index roll would
    /// flush the newest index file (a 420 MB mapping's dirty pages at RocketMQ's
    /// geometry) inside the pass, and says so (`Dispatched::index_flush`): an owner that
    /// holds a lock around each pass flushes it outside the lock and dispatches again, so
    /// nothing waiting on that lock waits for the flush. Recovery is the same: a file
    /// still rolls only once it is durable.
    pub fn defer_index_rolls(&mut self, on: bool) {
        self.defer_index_rolls = on;
    }

    /// Dispatches at most `max_records` records from the last dispatched offset (see
    /// [`Engine::dispatch`]), none that ends past `below` (`u64::MAX`: no bound). The bound
    /// is the owner's confirm offset: a replicated broker shows readers only what every
    /// replica that may be elected holds, and a record the bound cuts waits whole.
    /// `more` says records remain below the log's end and the bound; `limited` that the
    /// pass stopped at the bound.
    pub fn dispatch_some(
        &mut self,
        scratch: &mut [u8],
        max_records: u64,
        below: u64,
        on_record: &mut dyn FnMut(&DispatchRecord<'_>),
    ) -> Res<Dispatched, L::Error> {
        let end = self.log.max_offset();
        let mut count = 0;
        let mut unwritten = false;
        let mut index_flush = false;
        let mut limited = false;
        while self.dispatched < end && count < max_records {
            let at = self.dispatched;
            let size = match self.log.slot_at(at)? {
                Slot::Record(size) => size,
                Slot::Skip(next) if next > below => {
                    limited = true;
                    break;
                }
                Slot::Skip(next) => {
                    self.dispatched = next;
                    continue;
                }
                Slot::End => {
                    unwritten = true;
                    break;
                }
            };
            // A size that rotted after recovery verified it: stop here rather than move
            // past the log's end.
            if at + u64::from(size) > end {
                return Err(Corruption::Record {
                    offset: at,
                    error: RecordError::BadSize(size as i32),
                }
                .into());
            }
            // A bound inside a record (an acknowledgement that arrived mid-record): the
            // record waits whole.
            if at + u64::from(size) > below {
                limited = true;
                break;
            }
            let (log, queues, index, config) =
                (&self.log, &mut self.queues, &mut self.index, &self.config);
            let defer = self.defer_index_rolls;
            let step = log.with_record(at, size, scratch, |view| {
                let view = view.map_err(|error| Corruption::Record { offset: at, error })?;
                let Some(rec) = DispatchRecord::from_view(&view, at) else {
                    return Ok(Step::Skipped);
                };
                let keys = RecordKeys {
                    topic: rec.topic,
                    uniq_key: rec.uniq_key,
                    keys: rec.keys,
                };
                // Before anything of the record is written: it is dispatched whole, later.
                if defer && rec.goes_to_index() && index.roll_waits_for_flush(keys, at) {
                    return Ok(Step::WaitIndexFlush);
                }
                if rec.goes_to_queue() {
                    if queues.get(rec.topic, rec.queue_id).is_none() {
                        let dir = queues.create_dir(rec.topic, rec.queue_id)?;
                        let queue =
                            ConsumeQueue::open(dir, config.queue_entries_per_file, log, None)?;
                        let next_offset = queue.max_offset();
                        queues.insert(rec.topic, rec.queue_id, QueueSlot { queue, next_offset })?;
                    }
                    let slot = queues
                        .get_mut(rec.topic, rec.queue_id)
                        .ok_or(Error::TableFull)?;
                    let tag_code = config
                        .delay_levels
                        .schedule_tag_code(rec.topic, rec.properties, rec.store_timestamp)
                        .unwrap_or(rec.tag_code);
                    let entry = Entry {
                        physical_offset: at,
                        size,
                        tag_code,
                    };
                    if let Put::Stored(n) =
                        slot.queue
                            .put_below(rec.queue_offset as u64, entry, log.max_offset())?
                    {
                        slot.next_offset = slot.next_offset.max(n + 1);
                    }
                }
                if rec.goes_to_index() {
                    index.put_record(keys, at, rec.store_timestamp)?;
                }
                on_record(&rec);
                Ok(Step::Done(rec.store_timestamp))
            })?;
            match step {
                Step::WaitIndexFlush => {
                    index_flush = true;
                    break;
                }
                Step::Done(ts) => self.last_dispatched_timestamp = ts,
                Step::Skipped => {}
            }
            self.dispatched = at + u64::from(size);
            count += 1;
        }
        debug_assert!(self.dispatched <= end, "dispatched past the log's end");
        Ok(Dispatched {
            count,
            more: self.dispatched < end && !unwritten && !index_flush && !limited,
            index_flush,
            limited,
        })
    }
}
