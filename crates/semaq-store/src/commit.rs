//! A commit in three steps, so that the fsync, the slow part, runs without the lock that
//! readers of the store wait on:
//!
//! 1. [`StreamStore::sync_begin`](crate::StreamStore::sync_begin), under the caller's lock:
//!    every change is handed to the OS and a [`SyncTicket`] names what must reach the disk
//!    (file handles shared with the store, the lengths they must cover, directories whose
//!    entries changed, the floor to persist once the records it was computed from are down);
//!    zeros written ahead of the appends (preallocation) are written here too.
//! 2. [`SyncTicket::run`], without the lock: the fsyncs, in that order. A ticket taken after
//!    the active segment filled also completes its seal (`SealWork`), or the seals of every
//!    segment filled since the last commit, oldest first: the full logs' fsyncs first, then
//!    the write and fsync of each index from bytes built at its roll, then the directory
//!    entries of the next segments, so no index is durable before its records and no segment
//!    before the full ones it follows.
//! 3. [`StreamStore::sync_finish`](crate::StreamStore::sync_finish), under the lock again:
//!    the store records what is now durable, or takes the failure (a failed fsync poisons it).
//!
//! Only one task appends, and it may append the next batch while a ticket runs (the server
//! pipelines its ingest): those appends land past what the ticket covers, which therefore never
//! changes; the next ticket is taken after this one finished. Whatever else runs under the
//! lock in between (a purge, a delete) syncs its own changes itself, or takes a ticket of its
//! own (a lazy purge): marks only raise what is recorded as synced, so tickets finishing in
//! any order are harmless. A file removed meanwhile is still fsynced through its open
//! handle, which is harmless.
//!
//! Such work commits with [`StreamStore::sync_begin_aside`](crate::StreamStore::sync_begin_aside)
//! (or `sync_aside`): its step 1 hands the appender's buffered appends to the OS too, and if
//! that meets a full disk, the reload drops them. The failure is then the appender's to hear:
//! the aside commit fails without taking the report, every change is refused until the
//! appender's next commit (or `report_dropped`) fails with it, and a ticket the appender took
//! before the reload still finishes `Ok`, since the reload kept what it covered.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{io_error, StoreError, StoreResult};
use crate::limits::{INDEX_CHUNKS_SPARE_MAX_COUNT, INDEX_WRITE_BUFFER_BYTES};
use crate::meta::MetaHandle;
use crate::storage::{SharedStorage, StorageFile};

/// What step 2 of a commit must make durable; see the module documentation.
#[derive(Debug, Default)]
#[must_use = "a ticket's fsyncs make the changes durable: run it, then finish the sync"]
pub struct SyncTicket {
    /// The store's reload count when the ticket was taken: a ticket of an older one is stale.
    pub(crate) epoch: u64,
    storage: Option<SharedStorage>,
    /// What a reload after a full disk left unsynced, fsynced before everything else.
    owed: Owed,
    /// Files whose written bytes must reach the disk, with their paths for errors; `true`
    /// asks for `fsync` (a length cut too), `false` for `fdatasync`.
    files: Vec<(Arc<dyn StorageFile>, PathBuf, bool)>,
    /// The seals to complete, oldest first, between the files and the directories.
    seals: Vec<SealWork>,
    /// Directories whose entries (files created) must reach the disk, after the files.
    dirs: Vec<PathBuf>,
    /// The floor to persist after the files: never durable ahead of the records it counts.
    floor: Option<(MetaHandle, u64)>,
    /// What the store records as durable once the fsyncs succeeded.
    pub(crate) marks: Vec<SyncMark>,
}

/// A seal begun at a roll (`FileStore::roll`, under the lock) and completed by the next ticket:
/// the full segment's log, no longer appended to, and its index, built in memory at the roll.
#[derive(Clone)]
pub(crate) struct SealWork {
    /// First sequence of the segment being sealed.
    pub first_seq: u64,
    /// The sequence after its last: the first of the next segment.
    pub end_seq: u64,
    /// The full segment's log: fsynced before the index is written; identifies the seal.
    pub log: Arc<dyn StorageFile>,
    /// Its path, for errors.
    pub log_path: PathBuf,
    /// The index file, created empty at the roll: written through this handle, so a segment
    /// removed meanwhile leaves only an unlinked file written, never a new one.
    pub index: Arc<dyn StorageFile>,
    /// Its path, for errors and for opening it to read once sealed.
    pub index_path: PathBuf,
    /// The whole index, its real header included (written last).
    pub bytes: Arc<IndexBytes>,
    /// Its subject table as ledger ids (`Ledger::index_subjects` at the roll).
    pub subjects: Arc<[crate::subjects::SubjectId]>,
}

impl std::fmt::Debug for SealWork {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the bytes: an index is megabytes.
        formatter
            .debug_struct("SealWork")
            .field("first_seq", &self.first_seq)
            .field("end_seq", &self.end_seq)
            .field("index_path", &self.index_path)
            .field("index_bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl SealWork {
    /// Whether `log` is the sealed segment's log (the seal the store still waits for).
    pub(crate) fn is_of(&self, log: &Arc<dyn StorageFile>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.log), Arc::as_ptr(log))
    }

    /// Writes the index (its header last, so a torn write fails its checks) and fsyncs it.
    pub(crate) fn write_index(&self) -> StoreResult<()> {
        let header = crate::limits::index_header::SIZE_BYTES.min(self.bytes.len());
        let io = || io_error("write", &self.index_path);
        let mut offset = 0u64;
        for chunk in &self.bytes.chunks {
            // The header is the front of the first chunk (chunks are larger than a header).
            let skip = usize::try_from((header as u64).saturating_sub(offset)).unwrap_or(usize::MAX).min(chunk.len());
            self.index.write_at(&chunk[skip..], offset + skip as u64).map_err(io())?;
            offset += chunk.len() as u64;
        }
        let head = self.bytes.chunks.first().map_or(&[][..], |first| &first[..header.min(first.len())]);
        self.index.write_at(head, 0).map_err(io())?;
        self.index.sync_all().map_err(io_error("fsync", &self.index_path))
    }
}

/// An index built in memory, in `INDEX_WRITE_BUFFER_BYTES` chunks rather than one block of
/// ~10 MB: glibc's allocator, once such a block has been freed, serves the next ones from its
/// heaps and keeps them there, so one block per seal made the RSS grow by the index size with
/// every segment sealed (23 B per stored message at 10M instead of 2). Its chunks come from and
/// go back to `SPARE_CHUNKS`, so every seal builds its index in the same memory: chunks freed
/// to glibc were kept in the heap of whichever thread had rolled (tokio's workers change
/// threads at every `block_in_place`), and once a freed block had raised glibc's trim threshold
/// (twice its mmap threshold, up to 64 MiB) each such heap could keep an index or more of
/// them (taken for most of the 206.8 MiB of RSS one run read at 50M stored, against 38.3).
#[derive(Debug, Default)]
pub(crate) struct IndexBytes {
    chunks: Vec<Vec<u8>>,
    /// The chunk being filled.
    open: Vec<u8>,
    length: usize,
}

/// Index chunks given back by the seals completed, emptied, for the next roll's index; at most
/// `INDEX_CHUNKS_SPARE_MAX_COUNT`. One list for the process, not one per store: what it saves
/// is the allocator's, which every stream shares.
static SPARE_CHUNKS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A chunk for an index: a spare one, or a new one of `INDEX_WRITE_BUFFER_BYTES`.
fn take_chunk() -> Vec<u8> {
    let spare = SPARE_CHUNKS.lock().unwrap_or_else(PoisonError::into_inner).pop();
    spare.unwrap_or_else(|| Vec::with_capacity(INDEX_WRITE_BUFFER_BYTES))
}

/// Keeps `chunks` (those of the chunk size) for the next indexes, up to the bound.
fn give_back(chunks: impl Iterator<Item = Vec<u8>>) {
    let mut spare = SPARE_CHUNKS.lock().unwrap_or_else(PoisonError::into_inner);
    let room = INDEX_CHUNKS_SPARE_MAX_COUNT.saturating_sub(spare.len());
    let kept = chunks.filter(|chunk| chunk.capacity() == INDEX_WRITE_BUFFER_BYTES).take(room);
    spare.extend(kept.map(|mut chunk| {
        chunk.clear();
        chunk
    }));
}

impl IndexBytes {
    /// Bytes written.
    pub(crate) fn len(&self) -> usize {
        self.length
    }

    /// Replaces the front with `header` (written as a placeholder first).
    pub(crate) fn set_header(&mut self, header: &[u8]) -> std::io::Result<()> {
        let first = match self.chunks.first_mut() {
            Some(first) => &mut first[..],
            None => &mut self.open[..],
        };
        let front = first.get_mut(..header.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
        front.copy_from_slice(header);
        Ok(())
    }

    /// Seals the last chunk; nothing is written after.
    pub(crate) fn finish(mut self) -> Self {
        if !self.open.is_empty() {
            // Kept at its capacity: a chunk given back is reused whole.
            let last = std::mem::take(&mut self.open);
            self.chunks.push(last);
        }
        self
    }

    /// How many chunks are kept for the next indexes (tests).
    #[cfg(test)]
    pub(crate) fn spare_count() -> usize {
        SPARE_CHUNKS.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for IndexBytes {
    fn drop(&mut self) {
        let open = (self.open.capacity() > 0).then(|| std::mem::take(&mut self.open));
        give_back(std::mem::take(&mut self.chunks).into_iter().chain(open));
    }
}

impl std::io::Write for IndexBytes {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.open.capacity() == 0 {
            self.open = take_chunk();
        }
        let room = INDEX_WRITE_BUFFER_BYTES - self.open.len();
        let taken = bytes.len().min(room);
        self.open.extend_from_slice(&bytes[..taken]);
        self.length += taken;
        if self.open.len() == INDEX_WRITE_BUFFER_BYTES {
            let full = std::mem::take(&mut self.open);
            self.chunks.push(full);
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
    /// Whether the ticket syncs the directory entry of the log itself (a segment created at a roll).
    pub log_dir: bool,
}

/// The outcome of [`SyncTicket::run`], for [`StreamStore::sync_finish`](crate::StreamStore::sync_finish).
#[derive(Debug)]
#[must_use = "the store learns what is durable only from sync_finish"]
pub struct Synced {
    pub(crate) epoch: u64,
    pub(crate) marks: Vec<SyncMark>,
    /// The logs of the segments whose seals the ticket completed, oldest first.
    pub(crate) sealed: Vec<Arc<dyn StorageFile>>,
    /// Whether the ticket ran what a reload owed (`Owed`), successfully.
    pub(crate) owed_paid: bool,
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
        self.owed.is_empty()
            && self.files.is_empty()
            && self.seals.is_empty()
            && self.dirs.is_empty()
            && self.floor.is_none()
            && self.marks.is_empty()
    }

    /// Whether the ticket completes a seal.
    pub fn completes_seal(&self) -> bool {
        !self.seals.is_empty()
    }

    /// How many seals the ticket completes.
    pub fn seals_count(&self) -> usize {
        self.seals.len()
    }

    pub(crate) fn file(&mut self, file: Arc<dyn StorageFile>, path: PathBuf) {
        // A sealing log is already at the front of the list, with a full fsync.
        let known = self.files.iter().any(|(known, _, _)| std::ptr::addr_eq(Arc::as_ptr(known), Arc::as_ptr(&file)));
        if !known {
            self.files.push((file, path, false));
        }
    }

    /// The seals to complete, oldest first: their logs' fsyncs go before every other file, in
    /// that order (the records of a full segment come before those of the next one), their
    /// indexes after them, before any directory. `dir` is `None` for a seal completed alone
    /// while later ones stay pending: a directory fsync would make the entries of the
    /// segments after it durable before their records.
    pub(crate) fn seals(&mut self, seals: &[SealWork], dir: Option<PathBuf>) {
        let logs = seals.iter().map(|seal| (seal.log.clone(), seal.log_path.clone(), true));
        self.files.splice(0..0, logs);
        if let Some(dir) = dir {
            self.dir(dir);
        }
        self.seals.extend(seals.iter().cloned());
    }

    pub(crate) fn dir(&mut self, dir: PathBuf) {
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
    }

    pub(crate) fn floor(&mut self, meta: MetaHandle, floor_seq: u64) {
        self.floor = Some((meta, floor_seq));
    }

    /// What a reload left unsynced (`Owed`): run first, its files then its directories.
    pub(crate) fn owed(&mut self, owed: &Owed) {
        self.owed = owed.clone();
    }

    /// Step 2: the fsyncs, what a reload owed first, then files, then the seals' indexes (each
    /// written and fsynced, oldest first), then directories, then the floor. Blocks for the
    /// disk's time; call without holding the store's lock. Stops at the first failure.
    pub fn run(self) -> Synced {
        let SyncTicket { epoch, storage, owed, files, seals, dirs, floor, marks } = self;
        let storage = storage.as_deref();
        let failure =
            owed.run(storage).and_then(|()| Self::fsync(storage, &files, &seals, &dirs, floor.as_ref())).err();
        let sealed = if failure.is_none() { seals.into_iter().map(|seal| seal.log).collect() } else { Vec::new() };
        let owed_paid = failure.is_none() && !owed.is_empty();
        Synced { epoch, marks, sealed, owed_paid, failure }
    }

    fn fsync(
        storage: Option<&dyn crate::storage::Storage>,
        files: &[(Arc<dyn StorageFile>, PathBuf, bool)],
        seals: &[SealWork],
        dirs: &[PathBuf],
        floor: Option<&(MetaHandle, u64)>,
    ) -> StoreResult<()> {
        for (file, path, whole) in files {
            let synced = if *whole { file.sync_all() } else { file.sync_data() };
            synced.map_err(io_error("fsync", path))?;
        }
        for seal in seals {
            seal.write_index()?;
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

/// The fsyncs a reload after a full disk owes (recovery's, which would otherwise run under the
/// store's lock): the newest sealed logs, the files it cut and the indexes it rebuilt (whole
/// fsyncs), then the directories whose entries it changed, in recovery's order. Every ticket
/// runs them first until one of the store's current epoch has succeeded, so nothing a later
/// commit acknowledges is durable without them. The active log is not among them: a reloaded active
/// log counts as unsynced, so the ticket fsyncs it after these directories, and appends made
/// since the reload never become durable before the removals those directories record.
#[derive(Debug, Clone, Default)]
pub(crate) struct Owed {
    files: Vec<(Arc<dyn StorageFile>, PathBuf)>,
    dirs: Vec<PathBuf>,
}

impl Owed {
    /// Whether nothing is owed.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty()
    }

    /// A file whose contents and length must become durable.
    pub(crate) fn file(&mut self, file: Arc<dyn StorageFile>, path: PathBuf) {
        self.files.push((file, path));
    }

    /// A directory whose entries must become durable, after the files owed before it.
    pub(crate) fn dir(&mut self, dir: &std::path::Path) {
        if !self.dirs.iter().any(|known| known == dir) {
            self.dirs.push(dir.to_path_buf());
        }
    }

    /// Drops the file at `path` (the log that is the active one: the ticket fsyncs it later).
    pub(crate) fn forget(&mut self, path: &std::path::Path) {
        self.files.retain(|(_, known)| known != path);
    }

    fn run(&self, storage: Option<&dyn crate::storage::Storage>) -> StoreResult<()> {
        for (file, path) in &self.files {
            file.sync_all().map_err(io_error("fsync", path))?;
        }
        if let Some(storage) = storage {
            for dir in &self.dirs {
                crate::segment::sync_dir(storage, dir)?;
            }
        }
        Ok(())
    }
}

impl Synced {
    /// The outcome of a ticket that had nothing to do, or of a store that synced in step 1.
    pub fn done() -> Self {
        Synced { epoch: 0, marks: Vec::new(), sealed: Vec::new(), owed_paid: false, failure: None }
    }

    /// Whether every fsync succeeded (the store may still refuse at `sync_finish`: poisoned meanwhile).
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_index_is_held_in_chunks_of_the_chunk_size_and_their_spares_stay_bounded() {
        let indexes: Vec<IndexBytes> = (0..3)
            .map(|_| {
                let mut bytes = IndexBytes::default();
                let body = vec![1u8; INDEX_CHUNKS_SPARE_MAX_COUNT / 2 * INDEX_WRITE_BUFFER_BYTES + 5];
                bytes.write_all(&body).unwrap();
                let bytes = bytes.finish();
                assert_eq!(bytes.len(), body.len());
                assert!(bytes.chunks.iter().all(|chunk| chunk.capacity() == INDEX_WRITE_BUFFER_BYTES));
                bytes
            })
            .collect();
        drop(indexes);
        assert!(IndexBytes::spare_count() <= INDEX_CHUNKS_SPARE_MAX_COUNT, "{} kept", IndexBytes::spare_count());
        assert!(IndexBytes::spare_count() > 0, "chunks are kept for the next index");
    }
}
