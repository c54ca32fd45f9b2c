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
//! A lone frame (a single sync sender) is written at once as before: it has nothing to
//! wait for, and a yield would only add to its latency.
//!
//! Rules: a frame is taken by exactly one writer, in the order frames were queued; the
//! writer that takes frames writes them whole or the connection is closed (a frame cut
//! on the wire would corrupt every frame after it), so a request whose frame someone
//! else took learns of a failed write from its waiter, which the close answers.

use std::io::IoSlice;

use super::{Connection, RemotingError};
use crate::frame::RemotingCommand;
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
    /// Queues `frame`; returns its number, or `None` when the outbox is full.
    fn queue(&mut self, head: &[u8], body: &[u8]) -> Option<u64> {
        if !self.frames.is_empty() && self.frames.len() + head.len() + body.len() > MAX_QUEUED_BYTES
        {
            return None;
        }
        if self.frames.capacity() == 0 {
            self.frames = std::mem::take(&mut self.spare);
        }
        self.frames.extend_from_slice(head);
        self.frames.extend_from_slice(body);
        self.queued += 1;
        Some(self.queued)
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
        let head = cmd.encode_head(0).map_err(RemotingError::Frame)?;
        let queued = self.inner.outbox.guard().queue(&head, &cmd.body);
        let Some(mine) = queued else {
            return self.write(cmd).await;
        };
        runtime::yield_now().await;
        let mut w = self.lock_writer().await?;
        let Some(batch) = self.inner.outbox.guard().take(mine) else {
            return Ok(());
        };
        // From here the frames are ours alone: written whole, or the connection closes.
        let mut cut = CloseUnlessWritten(Some(self));
        let res = self.write_locked(&mut w, &mut [IoSlice::new(&batch)]).await;
        cut.0 = None;
        drop(w);
        self.inner.outbox.guard().give_back(batch);
        res
    }
}

/// Closes the connection when dropped armed: a writer dropped part-way through frames it
/// took (its caller gave up) must not leave them cut or unsent while their requests wait.
struct CloseUnlessWritten<'a>(Option<&'a Connection>);

impl Drop for CloseUnlessWritten<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.0 {
            conn.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_once_in_order() {
        let mut o = Outbox::default();
        let a = o.queue(b"a", b"1").unwrap();
        let b = o.queue(b"b", b"2").unwrap();
        assert_eq!(o.take(a).as_deref(), Some(&b"a1b2"[..]));
        // The second was written with the first.
        assert_eq!(o.take(b), None);
        let c = o.queue(b"c", b"3").unwrap();
        assert_eq!(o.take(c).as_deref(), Some(&b"c3"[..]));
    }

    #[test]
    fn a_full_outbox_refuses_but_never_an_empty_one() {
        let mut o = Outbox::default();
        let big = vec![0u8; MAX_QUEUED_BYTES];
        assert!(
            o.queue(b"h", &big).is_some(),
            "an empty outbox takes any frame"
        );
        assert!(o.queue(b"h", b"x").is_none());
        let n = o.queued;
        let buf = o.take(n).unwrap();
        o.give_back(buf);
        assert!(o.queue(b"h", b"x").is_some());
    }

    #[test]
    fn the_spare_buffer_is_reused() {
        let mut o = Outbox::default();
        let n = o.queue(b"head", b"body").unwrap();
        let buf = o.take(n).unwrap();
        let ptr = buf.as_ptr();
        o.give_back(buf);
        let n = o.queue(b"h", b"b").unwrap();
        let again = o.take(n).unwrap();
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again, b"hb");
    }
}
