//! Borrowed storage for the store.
//!
//! The engine takes its directories and media by value and moves them through
//! `Store::open`; a broker's are small (file handles). On a device the storage is fixed:
//! here each directory lives in a static and the store holds a [`Handle`] to it, so
//! opening, closing and recovering move pointers, not the directories' tables.

use core::ops::Range;

use tern_engine::media::{Directory, Media};

/// A directory or media the store uses but does not own.
#[derive(Debug)]
pub struct Handle<'r, T>(pub &'r mut T);

impl<D: Directory> Directory for Handle<'_, D> {
    type Media = D::Media;
    type Error = D::Error;

    fn scan(&mut self, f: &mut dyn FnMut(u64)) -> Result<(), D::Error> {
        self.0.scan(f)
    }
    fn create(&mut self, base: u64, len: u64) -> Result<(), D::Error> {
        self.0.create(base, len)
    }
    fn media(&self, base: u64) -> Option<&D::Media> {
        self.0.media(base)
    }
    fn media_mut(&mut self, base: u64) -> Option<&mut D::Media> {
        self.0.media_mut(base)
    }
    fn remove(&mut self, base: u64) -> Result<(), D::Error> {
        self.0.remove(base)
    }
}

impl<M: Media> Media for Handle<'_, M> {
    type Error = M::Error;

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), M::Error> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), M::Error> {
        self.0.write_at(offset, data)
    }
    fn flush(&mut self, range: Range<u64>) -> Result<(), M::Error> {
        self.0.flush(range)
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn set_len(&mut self, len: u64) -> Result<(), M::Error> {
        self.0.set_len(len)
    }
    fn as_bytes(&self) -> Option<&[u8]> {
        self.0.as_bytes()
    }
    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        self.0.as_bytes_mut()
    }
}
