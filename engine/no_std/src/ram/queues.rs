//! A consume-queue table without a heap: a fixed number of queues, each over a directory
//! the caller made in advance. A broker keeps a hash map here; a device, the crash
//! simulation and the recovery fuzz target keep this one.

use core::mem;

use heapless::{String, Vec};

use crate::error::Error;
use crate::faulty::FaultPlan;
use crate::media::Directory;
use crate::ram::{RamDir, RamError};
use crate::record::{RecordError, V1_MAX_TOPIC_LEN};
use crate::store::{QueueSlot, QueueTable};

/// One queue across store runs: open while a store holds it, parked as its directory
/// between a close (or a power cut) and the next open.
#[derive(Debug)]
enum State<D: Directory> {
    Open(QueueSlot<D>),
    Parked(D),
    /// Only while `open_existing` has handed the directory to the engine.
    Opening,
}

#[derive(Debug)]
struct Queue<D: Directory, const TOPIC: usize> {
    topic: String<TOPIC>,
    queue_id: i32,
    state: State<D>,
}

impl<D: Directory, const TOPIC: usize> Queue<D, TOPIC> {
    fn is(&self, topic: &str, queue_id: i32) -> bool {
        self.queue_id == queue_id && self.topic.as_str() == topic
    }
}

/// Up to `N` queues, kept in (topic, queue id) order so that every run visits them
/// (flushes, crashes) in one order, over directories of type `D` given up front; topic
/// names up to `TOPIC` bytes. A put to one queue more fails with [`Error::TableFull`], to
/// a longer topic with [`RecordError::TopicTooLong`].
#[derive(Debug)]
pub struct RamQueues<D: Directory, const N: usize, const TOPIC: usize = V1_MAX_TOPIC_LEN> {
    free: Vec<D, N>,
    queues: Vec<Queue<D, TOPIC>, N>,
}

impl<D: Directory, const N: usize, const TOPIC: usize> RamQueues<D, N, TOPIC> {
    /// An empty table whose queues will be stored in `dirs` (empty directories with their
    /// buffers given), one each.
    pub fn new(dirs: impl IntoIterator<Item = D>) -> Result<Self, RamError> {
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

    /// Whether the table holds no queue.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Takes every queue back from a store that is gone (closed, or "crashed" by
    /// `Engine::into_parts`), so the next `Engine::open` finds them in `open_existing`.
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

    /// The directories of the parked queues, in table order: to cut power under them or
    /// rot their bits.
    pub fn parked_mut(&mut self) -> impl Iterator<Item = &mut D> {
        self.queues.iter_mut().filter_map(|q| match &mut q.state {
            State::Parked(d) => Some(d),
            _ => None,
        })
    }

    /// Adds a queue whose files `dir` already holds (written outside a store), parked:
    /// the next `Engine::open` opens it.
    pub fn insert_parked(
        &mut self,
        topic: &str,
        queue_id: i32,
        dir: D,
    ) -> Result<(), Error<D::Error>> {
        self.add(topic, queue_id, State::Parked(dir))
    }

    fn add(&mut self, topic: &str, queue_id: i32, state: State<D>) -> Result<(), Error<D::Error>> {
        let mut name = String::new();
        name.push_str(topic)
            .map_err(|_| Error::Record(RecordError::TopicTooLong))?;
        let at = self
            .queues
            .partition_point(|q| (q.topic.as_str(), q.queue_id) < (topic, queue_id));
        self.queues
            .insert(
                at,
                Queue {
                    topic: name,
                    queue_id,
                    state,
                },
            )
            .map_err(|_| Error::TableFull)
    }
}

impl<'a, const F: usize, const N: usize, const TOPIC: usize> RamQueues<RamDir<'a, F>, N, TOPIC> {
    /// An empty table whose queues will be stored in directories of `F` buffers each,
    /// taken from `bufs` in order (a last directory may get fewer), all drawing on `plan`.
    /// [`RamError::NoSpace`] when `bufs` holds more than `N` directories' worth.
    pub fn with_buffers<B: AsMut<[u8]> + ?Sized + 'a>(
        plan: &'a FaultPlan,
        bufs: impl IntoIterator<Item = &'a mut B>,
    ) -> Result<Self, RamError> {
        let mut bufs = bufs.into_iter().peekable();
        let mut dirs: Vec<RamDir<'a, F>, N> = Vec::new();
        while bufs.peek().is_some() {
            let dir = RamDir::with_buffers(plan, bufs.by_ref().take(F))?;
            dirs.push(dir).map_err(|_| RamError::NoSpace)?;
        }
        Self::new(dirs)
    }
}

impl<D: Directory, const N: usize, const TOPIC: usize> QueueTable for RamQueues<D, N, TOPIC> {
    type Dir = D;

    fn get(&self, topic: &str, queue_id: i32) -> Option<&QueueSlot<D>> {
        match &self.queues.iter().find(|q| q.is(topic, queue_id))?.state {
            State::Open(slot) => Some(slot),
            _ => None,
        }
    }

    fn get_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut QueueSlot<D>> {
        match &mut self
            .queues
            .iter_mut()
            .find(|q| q.is(topic, queue_id))?
            .state
        {
            State::Open(slot) => Some(slot),
            _ => None,
        }
    }

    fn create_dir(&mut self, topic: &str, _queue_id: i32) -> Result<D, Error<D::Error>> {
        // Refuse before taking a directory: one that could not be inserted would be
        // stranded, and the table has no heap to grow into.
        if self.queues.is_full() {
            return Err(Error::TableFull);
        }
        if topic.len() > TOPIC {
            return Err(Error::Record(RecordError::TopicTooLong));
        }
        self.free.pop().ok_or(Error::TableFull)
    }

    fn insert(
        &mut self,
        topic: &str,
        queue_id: i32,
        slot: QueueSlot<D>,
    ) -> Result<(), Error<D::Error>> {
        self.add(topic, queue_id, State::Open(slot))
    }

    fn open_existing(
        &mut self,
        open: &mut dyn FnMut(D) -> Result<QueueSlot<D>, Error<D::Error>>,
    ) -> Result<(), Error<D::Error>> {
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
        f: &mut dyn FnMut(&str, i32, &mut QueueSlot<D>) -> Result<(), Error<D::Error>>,
    ) -> Result<(), Error<D::Error>> {
        for q in self.queues.iter_mut() {
            if let State::Open(slot) = &mut q.state {
                f(&q.topic, q.queue_id, slot)?;
            }
        }
        Ok(())
    }
}
