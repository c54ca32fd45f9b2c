//! The write half: one whole frame at a time under a lock, each write bounded by the
//! write timeout.

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
        let mut w = self.lock_writer().await?;
        self.write_locked(&mut w, bufs).await
    }

    /// Writes `bufs` whole with the writer lock held; a failed or stalled write closes
    /// the connection.
    pub(super) async fn write_locked(
        &self,
        w: &mut WriteHalf,
        bufs: &mut [IoSlice<'_>],
    ) -> Result<(), RemotingError> {
        if self.is_closed() {
            // Closed while we queued (a stalled write before ours, or a close).
            return Err(self.closed_error());
        }
        match self.write_bounded(w, bufs).await {
            Ok(()) => {
                self.touch();
                Ok(())
            }
            // Someone else closed it under us (a writer queued behind that saw no
            // progress, or a close): the shut socket's error says nothing more.
            Err(RemotingError::Io(..)) if self.is_closed() => Err(self.closed_error()),
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
    pub(super) async fn lock_writer(
        &self,
    ) -> Result<async_lock::MutexGuard<'_, WriteHalf>, RemotingError> {
        loop {
            let seen = self.inner.written_bytes.load(Ordering::Relaxed);
            match runtime::timeout(self.inner.write_timeout, self.inner.writer.lock()).await {
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

    /// `write_all` over several buffers with `writev`, resuming after partial writes;
    /// each call must make progress within the write timeout. A timer is armed only
    /// when the socket is full: a write that goes through at once costs none.
    async fn write_bounded(
        &self,
        w: &mut WriteHalf,
        mut bufs: &mut [IoSlice<'_>],
    ) -> Result<(), RemotingError> {
        let limit = self.inner.write_timeout;
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match runtime::timeout(limit, w.write_vectored(bufs)).await {
                Err(_) => return Err(RemotingError::WriteTimeout),
                Ok(Ok(0)) => return Err(io_error(std::io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => {
                    self.inner
                        .written_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.inner.writes.fetch_add(1, Ordering::Relaxed);
                    IoSlice::advance_slices(&mut bufs, n);
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

/// Bodies up to this size are copied behind the header and sent in one write.
pub(super) const INLINE_BODY_BYTES: usize = 8 << 10;

fn io_error(e: std::io::Error) -> RemotingError {
    RemotingError::Io(e.kind(), e.to_string())
}
