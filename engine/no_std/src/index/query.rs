//! Queries by key: the walk down one hash bucket's chain, newest file to oldest, written
//! once over [`IndexSource`] so the owner of the index (under its lock) and a reader of
//! published files (without it) run the same code.

use crate::hash::index_key_hash;
use crate::layout::{IndexEntry, IndexHeader};

use super::MAX_QUERY_RESULTS;

/// Most index entries one query visits, over all files: about 2 ms of cached reads, so
/// a query by a hot key bounds how long it holds its caller (RocketMQ walks up to every
/// entry of a file).
pub const MAX_QUERY_HOPS: u32 = 20_000;

/// A query by key in progress, resumable (see [`IndexQuery::step`]).
#[derive(Clone, Copy, Debug)]
pub struct IndexQuery {
    hash: i32,
    max: usize,
    begin: i64,
    end: i64,
    found: usize,
    hops: u32,
    pub(super) at: QueryAt,
}

/// Where a query goes on.
#[derive(Clone, Copy, Debug)]
pub(super) enum QueryAt {
    /// Not begun: the newest file's slot.
    Start,
    /// At entry `next` of the file at `base` (0: that file is done).
    File { base: u64, next: u32 },
}

impl IndexQuery {
    /// A query for `topic#key` between `begin` and `end` (ms, inclusive), at most `max`
    /// offsets (capped at [`MAX_QUERY_RESULTS`]).
    pub fn new(topic: &str, key: &str, max: usize, begin: i64, end: i64) -> IndexQuery {
        IndexQuery {
            hash: index_key_hash(&[topic, "#", key]),
            max: max.min(MAX_QUERY_RESULTS),
            begin,
            end,
            found: 0,
            hops: 0,
            at: QueryAt::Start,
        }
    }

    /// Offsets found so far.
    pub fn found(&self) -> usize {
        self.found
    }

    /// Goes on for at most `hops` entries of `src`; true once the query is done. Between
    /// two steps the index may change (appends, rolls, retention): entries are only ever
    /// added, each chain hop goes to an older entry, and a query whose file was removed
    /// meanwhile ends there (everything older went with it).
    pub fn step<S: IndexSource>(
        &mut self,
        src: &S,
        hops: u32,
        out: &mut dyn FnMut(u64),
    ) -> Result<bool, S::Error> {
        if let QueryAt::Start = self.at {
            let Some(newest) = src.newest_file() else {
                return Ok(true);
            };
            self.at = QueryAt::File {
                base: newest,
                next: self.chain_head(src, newest)?,
            };
        }
        let mut left = hops.max(1);
        loop {
            let QueryAt::File { base, mut next } = self.at else {
                return Ok(true);
            };
            // Positions shift as files come and go: the file is found by its base.
            let Some(h) = src.file_header(base)? else {
                return Ok(true);
            };
            let count = h.index_count.get() as u32;
            // Every hop goes to a strictly older entry: a chain ends within `count` hops.
            while next > 0 && next < count {
                if self.found >= self.max || self.hops >= MAX_QUERY_HOPS {
                    return Ok(true);
                }
                if left == 0 {
                    self.at = QueryAt::File { base, next };
                    return Ok(false);
                }
                let e = src.entry(base, next)?;
                let t = h
                    .begin_timestamp
                    .get()
                    .saturating_add(i64::from(e.time_diff.get()) * 1000);
                if t < self.begin {
                    break;
                }
                if e.key_hash.get() == self.hash && t <= self.end {
                    out(e.phy_offset.get() as u64);
                    self.found += 1;
                }
                let prev = e.prev_index.get() as u32;
                next = if prev < next { prev } else { 0 };
                self.hops += 1;
                left -= 1;
            }
            // This file is done: on to the next older one, if any.
            let Some(older) = src.older_file(base) else {
                return Ok(true);
            };
            self.at = QueryAt::File {
                base: older,
                next: self.chain_head(src, older)?,
            };
        }
    }

    /// The newest entry of the query's hash bucket in the file at `base`, or 0 when the
    /// file is empty or gone, or its time range misses the query's.
    fn chain_head<S: IndexSource>(&self, src: &S, base: u64) -> Result<u32, S::Error> {
        let Some(h) = src.file_header(base)? else {
            return Ok(0);
        };
        if h.index_count.get() <= 1
            || h.end_timestamp.get() < self.begin
            || h.begin_timestamp.get() > self.end
        {
            return Ok(0);
        }
        src.slot(base, self.hash)
    }
}

/// What a query by key reads: the index files, each file's header, slots and entries.
/// [`Index`] is one, read under its owner's lock; a reader of published files outside that
/// lock is another (the broker's). The walk ([`IndexQuery::step`]) is written once, over
/// this.
pub trait IndexSource {
    /// Why a read failed.
    type Error;
    /// Base of the newest file, if there is one.
    fn newest_file(&self) -> Option<u64>;
    /// Base of the file just older than the one at `base`: `None` when there is none, or
    /// when that file is gone.
    fn older_file(&self, base: u64) -> Option<u64>;
    /// Header of the file at `base`, `None` once the file is gone.
    fn file_header(&self, base: u64) -> Result<Option<IndexHeader>, Self::Error>;
    /// The newest entry of `hash`'s bucket in the file at `base`: 0 for none, else below
    /// the `index_count` of every header [`IndexSource::file_header`] gives from then on.
    fn slot(&self, base: u64, hash: i32) -> Result<u32, Self::Error>;
    /// Entry `n` (below its file's `index_count`) of the file at `base`.
    fn entry(&self, base: u64, n: u32) -> Result<IndexEntry, Self::Error>;
}
