//! The write half: whole frames under a lock (one, or several gathered by the
//! [`outbox`](super::outbox)), each write bounded by the write timeout and finished even
//! when its caller gives up.

use std::io::IoSlice;
use std::sync::atomic::Ordering;

use async_std::io::prelude::*;

use super::{Connection, RemotingError};
use crate::frame::RemotingCommand;
use crate::runtime;
use crate::tls::WriteHalf;

impl Connection {
    /// Writes one command as a whole frame, bounded by the write timeout (see
    /// [`ConnectionConfig::write_timeout`]): on expiry the connection is closed.
    pub async fn write(&self, cmd: &RemotingCommand) -> Result<(), RemotingError> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        // Small bodies go behind the header in one buffer (one syscall); large ones
        // (batches, pulled records) are written from where they lie, saving a copy.
        let inline = cmd.body.len() <= INLINE_BODY_BYTES;
        let head = cmd
            .encode_head(if inline { cmd.body.len() } else { 0 })
            .map_err(RemotingError::Frame)?;
        let mut bytes = head;
        if inline {
            bytes.extend_from_slice(&cmd.body);
            self.write_slices(&mut [IoSlice::new(&bytes)]).await
        } else {
            self.write_slices(&mut [IoSlice::new(&bytes), IoSlice::new(&cmd.body)])
                .await
        }
    }

    /// Writes frames already encoded back to back (the read loop's answers to quick
    /// requests, gathered while more requests were buffered): one syscall for them all.
    pub(super) async fn write_encoded(&self, frames: &[u8]) -> Result<(), RemotingError> {
        self.write_slices(&mut [IoSlice::new(frames)]).await
    }

    /// Writes `bufs` whole under the writer lock, bounded by the write timeout.
    async fn write_slices(&self, bufs: &mut [IoSlice<'_>]) -> Result<(), RemotingError> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        let w = self.lock_writer().await?;
        self.write_locked(w, bufs).await
    }

    /// Writes `bufs` whole with the writer lock `w`; a failed or stalled write closes
    /// the connection. Dropped part-way (its caller gave up), the write is finished by a
    /// task that keeps the lock: a frame cut on the wire would corrupt every frame after
    /// it, and frames another writer took to write are waited for by their requests.
    pub(super) async fn write_locked(
        &self,
        w: Writer,
        bufs: &mut [IoSlice<'_>],
    ) -> Result<(), RemotingError> {
        if self.is_closed() {
            // Closed while we queued (a stalled write before ours, or a close).
            return Err(self.closed_error());
        }
        let mut writing = Writing {
            conn: self,
            w: Some(w),
            left: bufs,
        };
        let res = writing.run().await;
        // Finished (or failed): nothing for a task to finish. The lock goes after the
        // outcome: a failed write closes the connection before another writer could put
        // a frame behind a cut one.
        let w = writing.w.take();
        drop(writing);
        let out = self.written(res);
        drop(w);
        out
    }

    /// The outcome of a whole write: a failure closes the connection.
    fn written(&self, res: Result<(), RemotingError>) -> Result<(), RemotingError> {
        match res {
            Ok(()) => {
                self.touch();
                Ok(())
            }
            // Someone else closed it under us (a writer queued behind that saw no
            // progress, or a close): the shut socket's error says nothing more.
            Err(RemotingError::Io { .. }) if self.is_closed() => Err(self.closed_error()),
            Err(e) => {
                if e == RemotingError::WriteTimeout {
                    log::warn!(
                        "closing connection {} to {}: it took no byte for {:?}",
                        self.id(),
                        self.peer_addr(),
                        self.inner.write_timeout
                    );
                }
                self.abort();
                Err(e)
            }
        }
    }

    /// The write half, waiting while the writer ahead makes progress. A wait of a whole
    /// write timeout during which the socket took nothing means the peer stopped reading:
    /// the connection is closed (the writer ahead times out too).
    pub(super) async fn lock_writer(&self) -> Result<Writer, RemotingError> {
        loop {
            let seen = self.inner.written_bytes.load(Ordering::Relaxed);
            match runtime::timeout(self.inner.write_timeout, self.inner.writer.lock_arc()).await {
                Ok(w) => return Ok(w),
                Err(_) if self.is_closed() => return Err(self.closed_error()),
                Err(_) if self.inner.written_bytes.load(Ordering::Relaxed) == seen => {
                    log::warn!(
                        "closing connection {} to {}: writes stalled for {:?}",
                        self.id(),
                        self.peer_addr(),
                        self.inner.write_timeout
                    );
                    self.abort();
                    return Err(RemotingError::WriteTimeout);
                }
                Err(_) => {}
            }
        }
    }

    /// `write_all` over several buffers with `writev`, resuming after partial writes
    /// (`bufs` is advanced past what was written); each call must make progress within
    /// the write timeout. A timer is armed only when the socket is full: a write that
    /// goes through at once costs none.
    async fn write_bounded(
        &self,
        w: &mut WriteHalf,
        bufs: &mut &mut [IoSlice<'_>],
    ) -> Result<(), RemotingError> {
        let limit = self.inner.write_timeout;
        IoSlice::advance_slices(bufs, 0);
        while !bufs.is_empty() {
            match runtime::timeout(limit, w.write_vectored(bufs)).await {
                Err(_) => return Err(RemotingError::WriteTimeout),
                Ok(Ok(0)) => return Err(io_error(std::io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => {
                    self.inner
                        .written_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.inner.writes.fetch_add(1, Ordering::Relaxed);
                    IoSlice::advance_slices(bufs, n);
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(io_error(e)),
            }
        }
        match runtime::timeout(limit, w.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(io_error(e)),
            Err(_) => Err(RemotingError::WriteTimeout),
        }
    }
}

/// The writer lock, owned so that an unfinished write can hand it to a task.
pub(super) type Writer = async_lock::MutexGuardArc<WriteHalf>;

/// A write under way: the lock and what is left to write.
struct Writing<'c, 's, 'b> {
    conn: &'c Connection,
    /// `None` once the write finished or failed.
    w: Option<Writer>,
    left: &'s mut [IoSlice<'b>],
}

impl Writing<'_, '_, '_> {
    async fn run(&mut self) -> Result<(), RemotingError> {
        let w = self.w.as_mut().expect("a write under way holds the lock");
        self.conn.write_bounded(w, &mut self.left).await
    }
}

impl Drop for Writing<'_, '_, '_> {
    /// Dropped with the write under way: a task writes the rest (a copy of it: the
    /// caller's buffers go with it) and flushes, holding the lock meanwhile.
    fn drop(&mut self) {
        let Some(mut w) = self.w.take() else { return };
        let mut rest = Vec::with_capacity(self.left.iter().map(|s| s.len()).sum());
        for s in self.left.iter() {
            rest.extend_from_slice(s);
        }
        let conn = self.conn.clone();
        runtime::spawn(async move {
            let mut slices = [IoSlice::new(&rest)];
            let res = conn.write_bounded(&mut w, &mut &mut slices[..]).await;
            let _ = conn.written(res);
            drop(w);
        });
    }
}

/// Bodies up to this size are copied behind the header and sent in one write.
pub(super) const INLINE_BODY_BYTES: usize = 8 << 10;

fn io_error(e: std::io::Error) -> RemotingError {
    RemotingError::Io {
        reason: e.to_string(),
        cause: e.into(),
    }
}
