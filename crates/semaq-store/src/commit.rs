//! A commit in three steps, so that the fsync, the slow part, runs without the lock that
//! readers of the store wait on:
//!
//! 1. [`StreamStore::sync_begin`](crate::StreamStore::sync_begin), under the caller's lock:
//!    every change is handed to the OS and a [`SyncTicket`] names what must reach the disk
//!    (file handles shared with the store, the lengths they must cover, directories whose
//!    entries changed, the floor to persist once the records it was computed from are down);
//!    zeros written ahead of the appends (preallocation) are written here too.
//! 2. [`SyncTicket::run`], without the lock: the fsyncs, in that order.
//! 3. [`StreamStore::sync_finish`](crate::StreamStore::sync_finish), under the lock again:
//!    the store records what is now durable, or takes the failure (a failed fsync poisons it).
//!
//! Only one task appends, and it may append the next batch while a ticket runs (the server
//! pipelines its ingest): those appends land past what the ticket covers, which therefore never
//! changes; the next ticket is taken after this one finished. Whatever else runs under the
//! lock in between (a purge, a delete) syncs its own changes itself. A file removed
//! meanwhile is still fsynced through its open handle, which is harmless.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{io_error, StoreError, StoreResult};
use crate::meta::MetaHandle;
use crate::storage::{SharedStorage, StorageFile};

/// What step 2 of a commit must make durable; see the module documentation.
#[derive(Debug, Default)]
#[must_use = "a ticket's fsyncs make the changes durable: run it, then finish the sync"]
pub struct SyncTicket {
    /// The store's reload count when the ticket was taken: a ticket of an older one is stale.
    pub(crate) epoch: u64,
    storage: Option<SharedStorage>,
    /// Files whose written bytes must reach the disk (`fdatasync`), with their paths for errors.
    files: Vec<(Arc<dyn StorageFile>, PathBuf)>,
    /// Directories whose entries (files created) must reach the disk, after the files.
    dirs: Vec<PathBuf>,
    /// The floor to persist after the files: never durable ahead of the records it counts.
    floor: Option<(MetaHandle, u64)>,
    /// What the store records as durable once the fsyncs succeeded.
    pub(crate) marks: Vec<SyncMark>,
}

/// What one segment's part of a ticket covers.
#[derive(Debug)]
pub(crate) struct SyncMark {
    /// The segment's log handle: identifies the segment (a purge may have replaced it).
    pub log: Arc<dyn StorageFile>,
    /// Log bytes the fsync covers.
    pub log_bytes: u64,
    /// The delete log's write count the fsync covers.
    pub delete_writes: u64,
    /// Whether the ticket syncs the directory entry of a delete log created for it.
    pub delete_dir: bool,
}

/// The outcome of [`SyncTicket::run`], for [`StreamStore::sync_finish`](crate::StreamStore::sync_finish).
#[derive(Debug)]
#[must_use = "the store learns what is durable only from sync_finish"]
pub struct Synced {
    pub(crate) epoch: u64,
    pub(crate) marks: Vec<SyncMark>,
    pub(crate) failure: Option<StoreError>,
}

impl SyncTicket {
    /// A ticket with nothing to sync (a store whose `sync_begin` already made everything durable).
    pub fn done() -> Self {
        SyncTicket::default()
    }

    pub(crate) fn new(epoch: u64, storage: SharedStorage) -> Self {
        SyncTicket { epoch, storage: Some(storage), ..SyncTicket::default() }
    }

    /// Whether the ticket has no fsync to run.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty() && self.floor.is_none() && self.marks.is_empty()
    }

    pub(crate) fn file(&mut self, file: Arc<dyn StorageFile>, path: PathBuf) {
        self.files.push((file, path));
    }

    pub(crate) fn dir(&mut self, dir: PathBuf) {
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
    }

    pub(crate) fn floor(&mut self, meta: MetaHandle, floor_seq: u64) {
        self.floor = Some((meta, floor_seq));
    }

    /// Step 2: the fsyncs, files first, then directories, then the floor. Blocks for the
    /// disk's time; call without holding the store's lock. Stops at the first failure.
    pub fn run(self) -> Synced {
        let SyncTicket { epoch, storage, files, dirs, floor, marks } = self;
        let failure = Self::fsync(storage.as_deref(), &files, &dirs, floor.as_ref()).err();
        Synced { epoch, marks, failure }
    }

    fn fsync(
        storage: Option<&dyn crate::storage::Storage>,
        files: &[(Arc<dyn StorageFile>, PathBuf)],
        dirs: &[PathBuf],
        floor: Option<&(MetaHandle, u64)>,
    ) -> StoreResult<()> {
        for (file, path) in files {
            file.sync_data().map_err(io_error("fsync", path))?;
        }
        if let Some(storage) = storage {
            for dir in dirs {
                crate::segment::sync_dir(storage, dir)?;
            }
        }
        if let Some((meta, floor_seq)) = floor {
            meta.raise_floor(*floor_seq)?;
        }
        Ok(())
    }
}

impl Synced {
    /// The outcome of a ticket that had nothing to do, or of a store that synced in step 1.
    pub fn done() -> Self {
        Synced { epoch: 0, marks: Vec::new(), failure: None }
    }

    /// Whether every fsync succeeded (the store may still refuse at `sync_finish`: poisoned meanwhile).
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }
}
