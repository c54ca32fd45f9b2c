//! Tern's storage engine on real files.
//!
//! The engine itself (`tern-engine`) is `no_std` and runs over two traits, `Media` and
//! `Directory`. This crate implements them on a Linux file system and adds what a broker
//! needs around a store directory:
//!
//! - [`MappedFile`] (`mapped`): one segment, mapped with memmap2, preallocated with
//!   `fallocate`, flushed by range with `msync`;
//! - [`FileDirectory`] (`directory`): the segments of one folder, named by base offset;
//! - [`StoreLayout`] (`layout`): RocketMQ's store paths, and the consume queues present;
//! - [`StoreLock`] (`lock`): the exclusive `flock` that keeps a second process out;
//! - [`StoreDir`] (`store`): an opened store directory: lock, abort marker, checkpoint;
//! - [`FsQueues`] (`fs_queues`): the engine's queue table, a folder per consume queue;
//! - [`FsStore`] (`fs_store`): the [`Engine`] on all of the above, as the broker
//!   opens it;
//! - [`SegmentFiles`] (`reader`): a directory's segment files, shared, so published
//!   bytes can be read (`pread`) without the owner's lock;
//! - [`NextSegment`] (`prealloc`): the commit log's next segment, made ahead of need by
//!   a background task so no append creates a file;
//! - [`meta`]: metadata files, postcard + CRC32, atomically replaced, with a `.bak`;
//! - [`disk_usage`] (`disk`): free space for the broker's retention watermarks.
//!
//! Everything is synchronous; the broker decides when to flush and runs flushes off its
//! reactor. Errors never panic on a bad file: media errors are the small `Copy`
//! [`FsError`] the engine carries; store-level errors ([`StoreError`], [`MetaError`]) name
//! the file.
//!
//! What a segment promises the engine is stated in `mapped`: writes are visible at once
//! and survive a process crash; they survive power loss once `flush` of their range has
//! returned.

pub mod directory;
pub mod disk;
pub mod error;
pub mod fs_queues;
pub mod fs_store;
pub mod layout;
pub mod lock;
pub mod locks;
pub mod mapped;
pub mod meta;
pub mod prealloc;
pub mod reader;
pub mod spare;
pub mod store;
pub mod sync;
pub mod timer_files;

pub use directory::{FileDirectory, INDEX_NAME_DIGITS, OFFSET_NAME_DIGITS};
pub use disk::{DiskUsage, disk_usage};
pub use error::{FsError, FsOp, StoreError};
pub use fs_queues::FsQueues;
pub use fs_store::{EngineError, FileEngine, FsStore, FsStoreError};
pub use layout::StoreLayout;
pub use lock::StoreLock;
pub use mapped::{Access, Advised, MappedFile, Writes};
pub use meta::{MetaError, load, replace_file, save};
pub use prealloc::NextSegment;
pub use reader::{ReadError, ReadMode, SegmentFiles};
pub use spare::Spares;
pub use store::{CHECKPOINT_LEN, StoreDir};
