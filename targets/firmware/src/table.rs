//! The consume-queue table of a device: a fixed number of queues, each over a directory
//! made in advance, with no heap. A broker keeps a hash map here; the engine only needs
//! the [`QueueTable`] operations.

use core::mem;

use heapless::{String, Vec};
use tern_engine::Error;
use tern_engine::faulty::Crash;
use tern_engine::ram::{RamDir, RamError};
use tern_engine::record::RecordError;
use tern_engine::store::{QueueSlot, QueueTable};

/// Most queues the device holds; a put to one more fails with `TableFull`.
pub const MAX_QUEUES: usize = 4;
/// Files (segments) per queue.
pub const FILES_PER_QUEUE: usize = 4;
/// Longest topic name the table stores.
pub const MAX_TOPIC_BYTES: usize = 32;

/// The directory of one queue's files.
pub type QueueDir<'a> = RamDir<'a, FILES_PER_QUEUE>;
/// What a queue of the store holds: its directory, borrowed from a static.
type Dir<'a> = &'a mut QueueDir<'a>;

/// One queue across store runs: open while a store holds it, parked as its directory
/// between a close (or a power cut) and the next open.
#[derive(Debug)]
enum State<'a> {
    Open(QueueSlot<Dir<'a>>),
    Parked(Dir<'a>),
    /// Only while `open_existing` has handed the directory to the engine.
    Opening,
}

#[derive(Debug)]
struct Queue<'a> {
    topic: String<MAX_TOPIC_BYTES>,
    queue_id: i32,
    state: State<'a>,
}

/// The table: queues in creation order, and the directories new queues are given.
#[derive(Debug)]
pub struct FixedQueues<'a> {
    free: Vec<Dir<'a>, MAX_QUEUES>,
    queues: Vec<Queue<'a>, MAX_QUEUES>,
}

impl<'a> FixedQueues<'a> {
    /// An empty table whose queues will be stored in `dirs` (empty directories with their
    /// buffers given), one each.
    pub fn new(dirs: impl Iterator<Item = &'a mut QueueDir<'a>>) -> Result<Self, RamError> {
        let mut free = Vec::new();
        for d in dirs {
            free.push(d).map_err(|_| RamError::NoSpace)?;
        }
        Ok(Self {
            free,
            queues: Vec::new(),
        })
    }

    /// Queues the table holds, open or parked.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Takes every queue back from a store that is gone (closed, or "crashed" by
    /// `Store::into_parts`), so the next `Store::open` finds them in `open_existing`.
    pub fn park(&mut self) {
        for q in self.queues.iter_mut() {
            if !matches!(q.state, State::Open(_)) {
                continue;
            }
            if let State::Open(slot) = mem::replace(&mut q.state, State::Opening) {
                q.state = State::Parked(slot.queue.into_dir());
            }
        }
    }

    /// Cuts power to every queue file: each loses what a crash of `kind` may lose.
    /// Returns the writes that were still pending (not flushed) when the power went.
    pub fn crash(&mut self, kind: Crash) -> usize {
        self.park();
        let mut pending = 0;
        for q in self.queues.iter_mut() {
            if let State::Parked(dir) = &mut q.state {
                for (_, media) in dir.segments_mut() {
                    pending += media.pending_writes();
                    media.crash(kind);
                }
            }
        }
        pending
    }

    fn find(&self, topic: &str, queue_id: i32) -> Option<&Queue<'a>> {
        self.queues
            .iter()
            .find(|q| q.queue_id == queue_id && q.topic.as_str() == topic)
    }
}

impl<'a> QueueTable for FixedQueues<'a> {
    type Dir = Dir<'a>;

    fn get(&self, topic: &str, queue_id: i32) -> Option<&QueueSlot<Dir<'a>>> {
        match &self.find(topic, queue_id)?.state {
            State::Open(slot) => Some(slot),
            _ => None,
        }
    }

    fn get_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut QueueSlot<Dir<'a>>> {
        let q = self
            .queues
            .iter_mut()
            .find(|q| q.queue_id == queue_id && q.topic.as_str() == topic)?;
        match &mut q.state {
            State::Open(slot) => Some(slot),
            _ => None,
        }
    }

    fn create_dir(&mut self, topic: &str, _queue_id: i32) -> Result<Dir<'a>, Error<RamError>> {
        // Refuse before taking a directory: one that could not be inserted would be
        // stranded, and the table has no heap to grow into.
        if self.queues.is_full() {
            return Err(Error::TableFull);
        }
        if topic.len() > MAX_TOPIC_BYTES {
            return Err(Error::Record(RecordError::TopicTooLong));
        }
        self.free.pop().ok_or(Error::TableFull)
    }

    fn insert(
        &mut self,
        topic: &str,
        queue_id: i32,
        slot: QueueSlot<Dir<'a>>,
    ) -> Result<(), Error<RamError>> {
        let mut name = String::new();
        name.push_str(topic)
            .map_err(|_| Error::Record(RecordError::TopicTooLong))?;
        self.queues
            .push(Queue {
                topic: name,
                queue_id,
                state: State::Open(slot),
            })
            .map_err(|_| Error::TableFull)
    }

    fn open_existing(
        &mut self,
        open: &mut dyn FnMut(Dir<'a>) -> Result<QueueSlot<Dir<'a>>, Error<RamError>>,
    ) -> Result<(), Error<RamError>> {
        for q in self.queues.iter_mut() {
            if !matches!(q.state, State::Parked(_)) {
                continue;
            }
            if let State::Parked(dir) = mem::replace(&mut q.state, State::Opening) {
                q.state = State::Open(open(dir)?);
            }
        }
        Ok(())
    }

    fn for_each_mut(
        &mut self,
        f: &mut dyn FnMut(&str, i32, &mut QueueSlot<Dir<'a>>) -> Result<(), Error<RamError>>,
    ) -> Result<(), Error<RamError>> {
        for q in self.queues.iter_mut() {
            if let State::Open(slot) = &mut q.state {
                f(&q.topic, q.queue_id, slot)?;
            }
        }
        Ok(())
    }
}
