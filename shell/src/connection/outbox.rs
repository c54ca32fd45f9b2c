//! Frames written while other requests are in flight on the connection, gathered into
//! one write.
//!
//! Why: a client with many requests in flight on one connection (async sends, a shared
//! producer) wrote each frame with a `writev` of its own: a third of the client's CPU
//! per async send went to that syscall, and on loopback each write also runs the
//! receiver's TCP path. Taking the writer lock does not gather them by itself: each task
//! finishes its write before the next one runs (a first try, queueing only frames that
//! found the lock taken, saved 13% of the writes). So a frame that is not alone is
//! queued and its task yields once: the tasks that run in the same turn queue theirs,
//! and the first to take the writer lock writes them all. Requests gather when others
//! wait for answers; a server's answers from request tasks gather when other requests
//! of the connection are still being processed (a group commit wakes many at once).
//! Answers to quick requests are gathered by the read loop already. NATS's client
//! flushes from a connection task for the same reason.
//!
//! A frame with no other request of its connection waiting (a single sync sender) is
//! written at once as before: it has nothing to wait for, and a yield would only add to
//! its latency. Long-polling pulls count as waiting, so a producer that shares its
//! connection with a consumer's held pull pays the yield (about a microsecond).
//!
//! Rules: a frame is taken by exactly one writer, in the order frames were queued, and
//! written whole (a writer that gives up part-way leaves the rest to a task that keeps
//! the lock, see `write_locked`), or the connection closes; a request whose frame someone
//! else took learns of a failed write from its waiter, which the close answers. A writer
//! that gives up before a frame is taken leaves a task to write the outbox. Either arises
//! only when a caller drops its future between polls: during the yield, while the writer
//! ahead holds the lock, or while the socket is full.

use std::io::IoSlice;

use super::write::Writer;
use super::{Connection, RemotingError};
use crate::frame::{FrameError, RemotingCommand};
use crate::runtime;
use crate::sync::MutexExt;

/// Frames queued and not yet taken, and the spare buffer of the last write.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    frames: Vec<u8>,
    /// Number of the last frame queued (from 1).
    queued: u64,
    /// Number of the last frame a writer took.
    taken: u64,
    /// The buffer a writer gave back: reused so queueing does not allocate.
    spare: Vec<u8>,
}

/// Queued bytes past which a request writes on its own (after waiting for the writer
/// lock like any other) instead of growing the outbox: a peer that stops reading holds
/// back at most this much plus the frames in flight.
const MAX_QUEUED_BYTES: usize = 256 << 10;
/// A buffer above this size is not kept as the spare.
const MAX_SPARE_BYTES: usize = 64 << 10;

impl Outbox {
    /// Queues the frame of `cmd`, encoded straight into the outbox; returns its number,
    /// or `None` when the outbox is full.
    fn queue(&mut self, cmd: &RemotingCommand) -> Result<Option<u64>, FrameError> {
        if self.frames.capacity() == 0 {
            self.frames = std::mem::take(&mut self.spare);
        }
        let before = self.frames.len();
        cmd.append_head(&mut self.frames)?;
        if before > 0 && self.frames.len() + cmd.body.len() > MAX_QUEUED_BYTES {
            self.frames.truncate(before);
            return Ok(None);
        }
        self.frames.extend_from_slice(&cmd.body);
        self.queued += 1;
        Ok(Some(self.queued))
    }

    /// Takes every queued frame for writing, unless frame `mine` was taken already.
    fn take(&mut self, mine: u64) -> Option<Vec<u8>> {
        if self.taken >= mine {
            return None;
        }
        self.taken = self.queued;
        Some(std::mem::take(&mut self.frames))
    }

    /// Gives a written buffer back for reuse.
    fn give_back(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= MAX_SPARE_BYTES && self.spare.capacity() == 0 {
            buf.clear();
            self.spare = buf;
        }
    }
}

impl Connection {
    /// Writes a request or an answer; `others_in_flight` says whether more requests of
    /// the connection are under way, whose frames are likely to follow within this turn.
    /// Alone (and nothing queued), it is written at once. Otherwise it is queued, yields
    /// once for the tasks of this turn to queue theirs, and is written with them. Returns
    /// once its frame is on the socket, or was taken by a writer that puts it there (or
    /// closes the connection, which answers every waiter).
    pub(super) async fn write_sharing(
        &self,
        cmd: &RemotingCommand,
        others_in_flight: bool,
    ) -> Result<(), RemotingError> {
        let queue_empty = || self.inner.outbox.guard().frames.is_empty();
        if cmd.body.len() > super::write::INLINE_BODY_BYTES
            || self.is_closed()
            || (!others_in_flight && queue_empty())
        {
            return self.write(cmd).await;
        }
        let queued = self.inner.outbox.guard().queue(cmd);
        let Some(mine) = queued.map_err(RemotingError::Frame)? else {
            return self.write(cmd).await;
        };
        // Until a writer takes it, the frame is ours to see written: given up before
        // that, a task takes and writes it (and whatever joined it).
        let mut waiting = Untaken(Some(self));
        runtime::yield_now().await;
        let w = self.lock_writer().await?;
        let batch = self.inner.outbox.guard().take(mine);
        waiting.0 = None;
        match batch {
            Some(batch) => self.write_batch(w, batch).await,
            None => Ok(()),
        }
    }

    /// Writes whatever the outbox holds (frames of writers that gave up before taking).
    async fn flush_outbox(&self) {
        let Ok(w) = self.lock_writer().await else {
            return;
        };
        let batch = {
            let mut o = self.inner.outbox.guard();
            let last = o.queued;
            o.take(last)
        };
        if let Some(batch) = batch {
            let _ = self.write_batch(w, batch).await;
        }
    }

    /// Writes frames taken from the outbox under the writer lock `w`, then gives their
    /// buffer back for the next batch.
    async fn write_batch(&self, w: Writer, batch: Vec<u8>) -> Result<(), RemotingError> {
        let res = self.write_locked(w, &mut [IoSlice::new(&batch)]).await;
        self.inner.outbox.guard().give_back(batch);
        res
    }
}

/// Armed from queueing a frame until a writer takes it: dropped armed (the writer gave
/// up), it starts a task that writes the outbox, so no queued frame waits for the next
/// writer to come along.
struct Untaken<'a>(Option<&'a Connection>);

impl Drop for Untaken<'_> {
    fn drop(&mut self) {
        // A closed connection failed every waiter already: nothing to write for.
        if let Some(conn) = self.0.filter(|c| !c.is_closed()) {
            let conn = conn.clone();
            runtime::spawn(async move { conn.flush_outbox().await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::RequestCode;

    /// A request whose frame is told apart by its opaque.
    fn frame(opaque: i32, body: &[u8]) -> RemotingCommand {
        let mut cmd = RemotingCommand::request_code(RequestCode::SendMessageV2)
            .with_ext("b", "TopicTest")
            .with_body(body.to_vec());
        cmd.opaque = opaque;
        cmd
    }

    fn queue(o: &mut Outbox, cmd: &RemotingCommand) -> Option<u64> {
        o.queue(cmd).expect("a plain request encodes")
    }

    /// The frames of `cmds`, back to back, as each would be written on its own.
    fn encoded(cmds: &[&RemotingCommand]) -> Vec<u8> {
        cmds.iter().flat_map(|c| c.encode().unwrap()).collect()
    }

    #[test]
    fn frames_are_taken_once_in_order() {
        let mut o = Outbox::default();
        let (f1, f2, f3) = (frame(1, b"1"), frame(2, b"2"), frame(3, b"3"));
        let a = queue(&mut o, &f1).unwrap();
        let b = queue(&mut o, &f2).unwrap();
        assert_eq!(o.take(a), Some(encoded(&[&f1, &f2])));
        // The second was written with the first.
        assert_eq!(o.take(b), None);
        let c = queue(&mut o, &f3).unwrap();
        assert_eq!(o.take(c), Some(encoded(&[&f3])));
    }

    #[test]
    fn a_full_outbox_refuses_but_never_an_empty_one() {
        let mut o = Outbox::default();
        let big = frame(1, &vec![0u8; MAX_QUEUED_BYTES]);
        assert!(
            queue(&mut o, &big).is_some(),
            "an empty outbox takes any frame"
        );
        let small = frame(2, b"x");
        assert!(queue(&mut o, &small).is_none());
        let n = o.queued;
        let buf = o.take(n).unwrap();
        assert_eq!(
            buf,
            encoded(&[&big]),
            "a refused frame leaves nothing behind"
        );
        o.give_back(buf);
        assert!(queue(&mut o, &small).is_some());
    }

    #[test]
    fn a_frame_that_cannot_be_encoded_leaves_the_outbox_as_it_was() {
        let mut o = Outbox::default();
        let first = frame(1, b"1");
        let n = queue(&mut o, &first).unwrap();
        let mut bad = frame(2, b"2");
        bad.serialize_type = crate::frame::SerializeType::RocketMq;
        bad.code = i32::from(i16::MAX) + 1;
        assert!(o.queue(&bad).is_err());
        assert_eq!(o.take(n), Some(encoded(&[&first])));
    }

    #[test]
    fn the_spare_buffer_is_reused() {
        let mut o = Outbox::default();
        let n = queue(&mut o, &frame(1, b"body")).unwrap();
        let buf = o.take(n).unwrap();
        let ptr = buf.as_ptr();
        o.give_back(buf);
        let second = frame(2, b"b");
        let n = queue(&mut o, &second).unwrap();
        let again = o.take(n).unwrap();
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again, encoded(&[&second]));
    }
}
