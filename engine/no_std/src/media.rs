//! The storage the engine runs on, and the directory of segments it is split into.
//!
//! A [`Media`] is one fixed-size region of bytes (a mapped file, a RAM buffer, a flash
//! partition). A [`Directory`] holds the media of one segmented structure (the commit log,
//! one consume queue, the index) keyed by the segment's base offset, the way RocketMQ names
//! files by their start offset.

use core::fmt::Debug;
use core::ops::Range;

/// One region of bytes the engine reads and writes at offsets.
///
/// Promises the engine relies on (restated in the crate docs, where recovery is built on them):
/// - `write_at` is visible to every later `read_at` at once;
/// - data is durable only after a `flush` covering its range returns `Ok`;
/// - a crash may lose any write not yet flushed, and the last write in flight may be torn
///   at any byte; a process crash (as opposed to power loss) loses nothing already written.
pub trait Media {
    /// The media's own error, carried unchanged inside the engine's errors.
    type Error: Copy + Debug;

    /// Fills `buf` from `offset`. Reading past [`Media::len`] is an error of the media.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Self::Error>;

    /// Writes `data` at `offset`. Writing past [`Media::len`] is an error of the media.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), Self::Error>;

    /// Writes `pieces` back to back from `offset`, as one `write_at` of them joined
    /// would (by default one `write_at` a non-empty piece). Media whose every write is a
    /// system call override it to make one (a record goes in as six pieces).
    fn write_pieces(&mut self, offset: u64, pieces: &[&[u8]]) -> Result<(), Self::Error> {
        let mut at = offset;
        for piece in pieces.iter().filter(|p| !p.is_empty()) {
            self.write_at(at, piece)?;
            at += piece.len() as u64;
        }
        Ok(())
    }

    /// Makes the bytes in `range` durable.
    ///
    /// An error means the bytes in `range` may never become durable, even if a later
    /// flush of them returns `Ok`: the engine stops writing rather than retry.
    fn flush(&mut self, range: Range<u64>) -> Result<(), Self::Error>;

    /// The media's size in bytes.
    fn len(&self) -> u64;

    /// True when the media holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Grows or shrinks the media. New bytes read as zero.
    fn set_len(&mut self, len: u64) -> Result<(), Self::Error>;

    /// The whole media as one byte slice, when it is memory (mapped file, RAM).
    ///
    /// Lets readers hand out stored records without copying (pull responses are the stored
    /// bytes). Media that cannot offer it return `None` and readers copy through `read_at`.
    fn as_bytes(&self) -> Option<&[u8]> {
        None
    }

    /// The whole media as one mutable byte slice, when it is memory.
    ///
    /// Lets the commit log encode a record in place instead of through a scratch buffer.
    /// Bytes written this way count as written: they are made durable by `flush` like any
    /// other write.
    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        None
    }
}

/// The segments of one segmented structure, keyed by base offset.
///
/// The directory owns the open media; the engine keeps only the list of bases. Files,
/// mmap and names are the directory's business (`tern-engine-fs` names a segment by its
/// base as 20 zero-padded digits, as RocketMQ does).
pub trait Directory {
    /// The media of one segment.
    type Media: Media<Error = Self::Error>;
    /// Errors of the directory and its media.
    type Error: Copy + Debug;

    /// Calls `f` with the base of every segment present, in ascending order.
    fn scan(&mut self, f: &mut dyn FnMut(u64)) -> Result<(), Self::Error>;

    /// Creates the segment at `base`, `len` bytes long and zero-filled, and opens it.
    /// Creating a segment that exists is an error of the directory.
    fn create(&mut self, base: u64, len: u64) -> Result<(), Self::Error>;

    /// The open segment at `base`, if present.
    fn media(&self, base: u64) -> Option<&Self::Media>;

    /// The open segment at `base`, if present, for writing.
    fn media_mut(&mut self, base: u64) -> Option<&mut Self::Media>;

    /// Deletes the segment at `base`. Deleting a missing segment is not an error.
    fn remove(&mut self, base: u64) -> Result<(), Self::Error>;
}

// Borrowed storage works as owned storage: a store may run over directories and media the
// caller keeps (a device's statics), so opening, closing and recovering move a pointer,
// not the directory's tables (on a Cortex-M that was a 191 KB stack frame in
// `Engine::open`).

impl<M: Media + ?Sized> Media for &mut M {
    type Error = M::Error;

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), M::Error> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), M::Error> {
        (**self).write_at(offset, data)
    }
    fn write_pieces(&mut self, offset: u64, pieces: &[&[u8]]) -> Result<(), M::Error> {
        (**self).write_pieces(offset, pieces)
    }
    fn flush(&mut self, range: Range<u64>) -> Result<(), M::Error> {
        (**self).flush(range)
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn is_empty(&self) -> bool {
        (**self).is_empty()
    }
    fn set_len(&mut self, len: u64) -> Result<(), M::Error> {
        (**self).set_len(len)
    }
    fn as_bytes(&self) -> Option<&[u8]> {
        (**self).as_bytes()
    }
    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        (**self).as_bytes_mut()
    }
}

impl<D: Directory + ?Sized> Directory for &mut D {
    type Media = D::Media;
    type Error = D::Error;

    fn scan(&mut self, f: &mut dyn FnMut(u64)) -> Result<(), D::Error> {
        (**self).scan(f)
    }
    fn create(&mut self, base: u64, len: u64) -> Result<(), D::Error> {
        (**self).create(base, len)
    }
    fn media(&self, base: u64) -> Option<&D::Media> {
        (**self).media(base)
    }
    fn media_mut(&mut self, base: u64) -> Option<&mut D::Media> {
        (**self).media_mut(base)
    }
    fn remove(&mut self, base: u64) -> Result<(), D::Error> {
        (**self).remove(base)
    }
}
