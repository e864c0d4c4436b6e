//! One segment: a log file named by its first sequence, its delete log, and (once sealed) its
//! index file. The active segment buffers appends in memory and hands them to the OS in large
//! writes; reads of bytes still in that buffer are served from it.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::commit::{IndexBytes, SealWork, SyncMark, SyncTicket};
use crate::delete_log;
use crate::error::{fit, io_error, StoreResult};
use crate::index;
use crate::ledger::Ledger;
use crate::limits::{
    INDEX_WRITE_BUFFER_BYTES, PREALLOCATE_CHUNK_BYTES, PREALLOCATE_RECORD_BYTES_MAX, PREALLOCATE_WRITE_BYTES,
    WRITEBACK_START_BYTES, WRITE_BUFFER_BYTES, WRITE_BUFFER_KEPT_MAX_BYTES,
};
use crate::record;
use crate::storage::{OpenMode, Storage, StorageFile};

/// Zeros for preallocation, written a piece at a time.
static ZEROS: [u8; PREALLOCATE_WRITE_BYTES] = [0; PREALLOCATE_WRITE_BYTES];

/// Extension of a segment's log file.
pub(crate) const LOG_EXTENSION: &str = "log";
/// Extension of a sealed segment's index file.
pub(crate) const INDEX_EXTENSION: &str = "idx";
/// Extension of a segment's delete log.
pub(crate) const DELETE_EXTENSION: &str = "del";

/// `<dir>/<first_seq, 20 digits>.<extension>`: names sort in sequence order.
pub(crate) fn segment_path(dir: &Path, first_seq: u64, extension: &str) -> PathBuf {
    dir.join(format!("{first_seq:020}.{extension}"))
}

/// The first sequence encoded in a segment file name with `extension`, if it is one.
pub(crate) fn parse_segment_name(name: &str, extension: &str) -> Option<u64> {
    let stem = name.strip_suffix(extension)?.strip_suffix('.')?;
    (stem.len() == 20 && stem.bytes().all(|byte| byte.is_ascii_digit())).then(|| stem.parse().ok()).flatten()
}

/// Makes a directory's entries (created or renamed files) durable.
pub(crate) fn sync_dir(storage: &dyn Storage, dir: &Path) -> StoreResult<()> {
    storage.sync_dir(dir).map_err(io_error("fsync", dir))
}

/// One segment of a stream.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Sequence of the first record; also the file name.
    pub first_seq: u64,
    log_path: PathBuf,
    /// Shared with sync tickets, which fsync it without the store's lock.
    log: Arc<dyn StorageFile>,
    /// Bytes already handed to the OS.
    written_bytes: u64,
    /// Bytes known to be on stable storage.
    synced_bytes: u64,
    /// Bytes whose writeback was started ahead of their fsync (`start_writeback`).
    writeback_bytes: u64,
    /// The log file's length: past `written_bytes` it is zeros written ahead (preallocation).
    allocated_bytes: u64,
    /// Preallocation failed (a full disk): this segment grows by its appends only.
    allocation_failed: bool,
    /// Records appended since the last commit began, and `written_bytes` then: their mean
    /// size decides whether the commit grows the log (`growth`).
    records_since_commit: u64,
    written_at_commit: u64,
    /// Appended bytes not yet handed to the OS (active segment only).
    pending: Vec<u8>,
    /// Size of the index file, once sealed.
    index_bytes: u64,
    /// Delete log size on disk plus entries waiting in `delete_pending`.
    delete_bytes: u64,
    delete_pending: Vec<u8>,
    /// The open delete log, once written to.
    delete_file: Option<Arc<dyn StorageFile>>,
    /// Writes to the delete log so far, and how many of them are known durable.
    delete_writes: u64,
    delete_synced_writes: u64,
    /// The delete log was created and its directory entry is not yet durable.
    delete_dir_unsynced: bool,
    /// The log was created at a roll and its directory entry is not yet durable.
    log_dir_unsynced: bool,
    /// No longer appended to: its index is written, or being written by a seal (`begin_seal`).
    sealed: bool,
}

impl Segment {
    /// Creates a new, empty active segment whose first record will be `first_seq`; durable on
    /// return. Only recovery, whose open syncs everything anyway: the store creates segments
    /// unsynced ([`Segment::create_unsynced`]) and leaves their fsyncs to the next commit.
    pub(crate) fn create(storage: &dyn Storage, dir: &Path, first_seq: u64) -> StoreResult<Self> {
        let log_path = segment_path(dir, first_seq, LOG_EXTENSION);
        let log = storage.open(&log_path, OpenMode::Truncate, 0).map_err(io_error("create", &log_path))?;
        let header = record::encode_segment_header(first_seq);
        log.write_at(&header, 0).map_err(io_error("write", &log_path))?;
        log.sync_all().map_err(io_error("fsync", &log_path))?;
        sync_dir(storage, dir)?;
        let length = header.len() as u64;
        Ok(Segment::from_parts(first_seq, log_path, Arc::from(log), length, false))
    }

    /// Creates the next active segment without an fsync (at a roll, or outside one after the
    /// floor was persisted): its header and directory entry become durable with the next
    /// commit, after the full segment's records and index (recovery takes a missing or short
    /// newest log as a segment never created, and restarts at a floor past every log).
    pub(crate) fn create_unsynced(storage: &dyn Storage, dir: &Path, first_seq: u64) -> StoreResult<Self> {
        Self::create_unsynced_with(storage, dir, first_seq, 0)
    }

    /// [`Segment::create_unsynced`] with header flags (`segment_header::FLAG_*`).
    pub(crate) fn create_unsynced_with(
        storage: &dyn Storage,
        dir: &Path,
        first_seq: u64,
        flags: u32,
    ) -> StoreResult<Self> {
        let log_path = segment_path(dir, first_seq, LOG_EXTENSION);
        let log = storage.open(&log_path, OpenMode::Truncate, 0).map_err(io_error("create", &log_path))?;
        let header = record::encode_segment_header_with(first_seq, flags);
        log.write_at(&header, 0).map_err(io_error("write", &log_path))?;
        let mut segment = Segment::from_parts(first_seq, log_path, Arc::from(log), header.len() as u64, false);
        segment.synced_bytes = 0;
        segment.log_dir_unsynced = true;
        Ok(segment)
    }

    /// Opens an existing segment whose log recovery has validated (and cut, if torn).
    pub(crate) fn open(storage: &dyn Storage, dir: &Path, first_seq: u64, sealed: bool) -> StoreResult<Self> {
        let log_path = segment_path(dir, first_seq, LOG_EXTENSION);
        let log = storage.open(&log_path, OpenMode::ReadWrite, 0).map_err(io_error("open", &log_path))?;
        let length = log.length().map_err(io_error("stat", &log_path))?;
        let mut segment = Segment::from_parts(first_seq, log_path, Arc::from(log), length, sealed);
        if !sealed {
            // Whoever wrote the active log last (a process that crashed, or this store before
            // it reloaded) may have left bytes in the page cache that never reached the disk:
            // the first sync fsyncs whatever is there. A sealed log was fsynced before its seal.
            segment.synced_bytes = 0;
        }
        segment.delete_bytes = storage.file_length(&segment.path(dir, DELETE_EXTENSION)).unwrap_or(0);
        Ok(segment)
    }

    fn from_parts(first_seq: u64, log_path: PathBuf, log: Arc<dyn StorageFile>, length: u64, sealed: bool) -> Self {
        Segment {
            first_seq,
            log_path,
            log,
            written_bytes: length,
            synced_bytes: length,
            writeback_bytes: length,
            allocated_bytes: length,
            allocation_failed: false,
            records_since_commit: 0,
            written_at_commit: length,
            pending: Vec::new(),
            index_bytes: 0,
            delete_bytes: 0,
            delete_pending: Vec::new(),
            delete_file: None,
            delete_writes: 0,
            delete_synced_writes: 0,
            delete_dir_unsynced: false,
            log_dir_unsynced: false,
            sealed,
        }
    }

    /// A sibling file of this segment.
    pub(crate) fn path(&self, dir: &Path, extension: &str) -> PathBuf {
        segment_path(dir, self.first_seq, extension)
    }

    /// Length of the log including buffered appends.
    pub(crate) fn len(&self) -> u64 {
        self.written_bytes + self.pending.len() as u64
    }

    /// Bytes this segment occupies on disk, index and delete log included.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.len() + self.index_bytes + self.delete_bytes
    }

    /// Records the size of an index file found valid or written by recovery.
    pub(crate) fn set_index_bytes(&mut self, index_bytes: u64) {
        self.index_bytes = index_bytes;
    }

    /// Appends one record and returns its offset in the log; `TooLarge` (with nothing appended)
    /// when the offset or a length does not fit the format.
    pub(crate) fn append(
        &mut self,
        seq: u64,
        timestamp_ns: i64,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> StoreResult<u32> {
        debug_assert!(!self.sealed);
        // Segment sizes are capped so that offsets fit (see limits.rs); checked all the same.
        let offset: u32 = fit("segment offset", self.len())?;
        record::encode(&mut self.pending, seq, timestamp_ns, subject, headers, payload)?;
        self.records_since_commit += 1;
        if self.pending.len() >= WRITE_BUFFER_BYTES {
            self.flush()?;
        }
        Ok(offset)
    }

    /// Appends a rollback marker (`record::encode_rollback`) and hands the buffer to the OS, so
    /// that no cut back to what the OS holds (a full disk's reload) keeps the records it removes
    /// without it.
    pub(crate) fn append_rollback(&mut self, range: (u64, u64), timestamp_ns: i64) -> StoreResult<()> {
        debug_assert!(!self.sealed);
        record::encode_rollback(&mut self.pending, range, timestamp_ns)?;
        self.flush()
    }

    /// Appends a skip marker (`record::encode_skip`): sequences up to `last_skipped` hold nothing.
    pub(crate) fn append_skip(&mut self, last_skipped: u64, timestamp_ns: i64) -> StoreResult<()> {
        debug_assert!(!self.sealed);
        record::encode_skip(&mut self.pending, last_skipped, timestamp_ns)?;
        if self.pending.len() >= WRITE_BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands buffered appends to the OS (no fsync).
    pub(crate) fn flush(&mut self) -> StoreResult<()> {
        if !self.pending.is_empty() {
            self.log.write_at(&self.pending, self.written_bytes).map_err(io_error("write", &self.log_path))?;
            self.written_bytes += self.pending.len() as u64;
            self.pending.clear();
            self.start_writeback();
        }
        Ok(())
    }

    /// Starts the device's writeback of a long run of unsynced appends, so the fsync that
    /// makes them durable finds most of them written.
    fn start_writeback(&mut self) {
        let from = self.writeback_bytes.max(self.synced_bytes);
        if self.written_bytes.saturating_sub(from) >= WRITEBACK_START_BYTES {
            self.log.start_writeback(from, self.written_bytes - from);
            self.writeback_bytes = self.written_bytes;
        }
    }

    /// Reads `length` bytes at `offset`, from the write buffer when they are still there.
    pub(crate) fn read(&self, offset: u32, length: u32) -> StoreResult<Bytes> {
        let (offset, length) = (u64::from(offset), length as usize);
        if offset >= self.written_bytes {
            // Bytes the buffer does not hold come back empty, which the record check reports.
            let start = usize::try_from(offset - self.written_bytes).ok();
            let bytes = start.and_then(|start| self.pending.get(start..start.checked_add(length)?));
            return Ok(Bytes::copy_from_slice(bytes.unwrap_or_default()));
        }
        let mut buffer = BytesMut::zeroed(length);
        self.log.read_at(&mut buffer, offset).map_err(io_error("read", &self.log_path))?;
        Ok(buffer.freeze())
    }

    /// Queues a deletion record for `seq` (written at the next sync).
    pub(crate) fn record_delete(&mut self, seq: u64) {
        self.delete_pending.extend_from_slice(&delete_log::encode(seq));
        self.delete_bytes += crate::limits::delete_entry::SIZE_BYTES as u64;
    }

    /// Makes appends and deletions durable; does nothing when nothing changed.
    pub(crate) fn sync(&mut self, storage: &dyn Storage, dir: &Path) -> StoreResult<()> {
        self.flush()?;
        if self.synced_bytes < self.written_bytes {
            self.log.sync_data().map_err(io_error("fsync", &self.log_path))?;
            self.synced_bytes = self.written_bytes;
        }
        let writes = self.write_deletes(storage, dir)?;
        if self.delete_synced_writes < writes {
            if let Some(file) = &self.delete_file {
                let path = self.path(dir, DELETE_EXTENSION);
                file.sync_data().map_err(io_error("fsync", &path))?;
            }
            self.delete_synced_writes = writes;
        }
        if self.delete_dir_unsynced || self.log_dir_unsynced {
            sync_dir(storage, dir)?;
            self.delete_dir_unsynced = false;
            self.log_dir_unsynced = false;
        }
        Ok(())
    }

    /// Whether every change to this segment (appends, deletions, the delete log's directory
    /// entry) is known to be on stable storage.
    pub(crate) fn is_durable(&self) -> bool {
        self.pending.is_empty()
            && self.synced_bytes >= self.written_bytes
            && self.delete_pending.is_empty()
            && self.delete_synced_writes >= self.delete_writes
            && !self.delete_dir_unsynced
            && !self.log_dir_unsynced
    }

    /// Step 1 of a commit (`commit.rs`): hands appends and deletions to the OS and adds what
    /// must be fsynced for them to `ticket`; the active segment (sealed at `size_bytes`) also
    /// asks for zeros ahead of its appends.
    pub(crate) fn prepare_sync(
        &mut self,
        storage: &dyn Storage,
        dir: &Path,
        ticket: &mut SyncTicket,
        size_bytes: u64,
    ) -> StoreResult<()> {
        self.flush()?;
        let delete_writes = self.write_deletes(storage, dir)?;
        let log_unsynced = self.synced_bytes < self.written_bytes;
        let deletes_unsynced = self.delete_synced_writes < delete_writes;
        if !log_unsynced && !deletes_unsynced && !self.delete_dir_unsynced && !self.log_dir_unsynced {
            return Ok(());
        }
        // The zeros are written here, under the caller's lock, not in the ticket's run: a
        // pipelined caller appends (and hands to the OS) the next batch while the ticket runs,
        // and zeros written then could land on those appends.
        let grown = self.grow_log(size_bytes);
        self.records_since_commit = 0;
        self.written_at_commit = self.written_bytes;
        if log_unsynced || grown {
            ticket.file(self.log.clone(), self.log_path.clone());
        }
        if let Some(file) = self.delete_file.as_ref().filter(|_| deletes_unsynced) {
            ticket.file(file.clone(), self.path(dir, DELETE_EXTENSION));
        }
        if self.delete_dir_unsynced || self.log_dir_unsynced {
            ticket.dir(dir.to_path_buf());
        }
        ticket.marks.push(SyncMark {
            log: self.log.clone(),
            log_bytes: self.written_bytes,
            delete_writes,
            delete_dir: self.delete_dir_unsynced,
            log_dir: self.log_dir_unsynced,
        });
        Ok(())
    }

    /// The zeros to write ahead of the appends, when what is left of the preallocation is
    /// less than half a chunk: up to a chunk past the appends, never past the segment's size.
    /// None when the records since the last commit are large (`PREALLOCATE_RECORD_BYTES_MAX`):
    /// their commit is bound by the bytes it writes, which the zeros would double, not by the
    /// metadata write they spare.
    fn growth(&self, size_bytes: u64) -> Option<std::ops::Range<u64>> {
        if self.sealed || self.allocation_failed {
            return None;
        }
        let appended_bytes = self.written_bytes.saturating_sub(self.written_at_commit);
        if appended_bytes >= PREALLOCATE_RECORD_BYTES_MAX.saturating_mul(self.records_since_commit.max(1)) {
            return None;
        }
        let chunk = PREALLOCATE_CHUNK_BYTES.min(size_bytes / 4);
        if chunk < WRITE_BUFFER_BYTES as u64 {
            // Small segments (tests' mostly) would grow at nearly every flush: not worth it.
            return None;
        }
        let start = self.allocated_bytes.max(self.written_bytes);
        let end = (self.written_bytes + chunk).min(size_bytes);
        (start < self.written_bytes + chunk / 2 && start < end).then_some(start..end)
    }

    /// Writes the zeros of `growth` after the appends (all handed to the OS); on failure cuts
    /// the log back to where they started and grows no more, so a full disk costs the
    /// preallocation, never a failed commit. Returns whether zeros were written.
    fn grow_log(&mut self, size_bytes: u64) -> bool {
        let Some(range) = self.growth(size_bytes) else { return false };
        let mut offset = range.start;
        while offset < range.end {
            let piece = usize::try_from(range.end - offset).map_or(ZEROS.len(), |left| left.min(ZEROS.len()));
            if self.log.write_at(&ZEROS[..piece], offset).is_err() {
                // Best effort: if even the cut fails, the zeros stay, and recovery ignores them.
                let _ = self.log.set_len(range.start);
                self.allocation_failed = true;
                return false;
            }
            offset += piece as u64;
        }
        self.allocated_bytes = self.allocated_bytes.max(range.end);
        true
    }

    /// Whether the log holds only zeros from `from` on: what a crash leaves of the zeros
    /// written ahead of the appends after the last record, which is no torn write.
    pub(crate) fn zeros_from(&self, from: u64) -> StoreResult<bool> {
        let tail_length = usize::try_from(self.written_bytes.saturating_sub(from)).unwrap_or(0);
        let mut tail = vec![0; tail_length];
        self.log.read_at(&mut tail, from).map_err(io_error("read", &self.log_path))?;
        Ok(tail.iter().all(|&byte| byte == 0))
    }

    /// Cuts the zeros written ahead of the appends (a clean close, a seal); not fsynced.
    pub(crate) fn trim_allocation(&mut self) -> StoreResult<()> {
        if self.allocated_bytes > self.written_bytes {
            self.log.set_len(self.written_bytes).map_err(io_error("truncate", &self.log_path))?;
            self.allocated_bytes = self.written_bytes;
        }
        Ok(())
    }

    /// The log's handle (identifies the segment in a seal's work).
    pub(crate) fn log(&self) -> &Arc<dyn StorageFile> {
        &self.log
    }

    /// Records that a seal's ticket fsynced the whole log.
    pub(crate) fn mark_log_synced(&mut self) {
        self.synced_bytes = self.written_bytes;
    }

    /// Whether `mark` (from a ticket) is about this segment.
    pub(crate) fn owns(&self, mark: &SyncMark) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.log), Arc::as_ptr(&mark.log))
    }

    /// Step 3 of a commit: records what a ticket's fsyncs made durable.
    pub(crate) fn mark_synced(&mut self, mark: &SyncMark) {
        self.synced_bytes = self.synced_bytes.max(mark.log_bytes.min(self.written_bytes));
        self.delete_synced_writes = self.delete_synced_writes.max(mark.delete_writes);
        if mark.delete_dir {
            self.delete_dir_unsynced = false;
        }
        if mark.log_dir {
            self.log_dir_unsynced = false;
        }
    }

    /// Hands queued deletion records to the OS; returns the delete log's write count.
    fn write_deletes(&mut self, storage: &dyn Storage, dir: &Path) -> StoreResult<u64> {
        if self.delete_pending.is_empty() {
            return Ok(self.delete_writes);
        }
        let path = self.path(dir, DELETE_EXTENSION);
        let file = match &self.delete_file {
            Some(file) => file.clone(),
            None => {
                let existed = crate::storage::exists(storage, &path);
                let file: Arc<dyn StorageFile> =
                    Arc::from(storage.open(&path, OpenMode::Create, 0).map_err(io_error("open", &path))?);
                self.delete_dir_unsynced |= !existed;
                self.delete_file = Some(file.clone());
                file
            }
        };
        // Appended at the end the file has, so a torn entry cut by recovery is written over.
        let end = file.length().map_err(io_error("stat", &path))?;
        self.delete_writes += 1;
        file.write_at(&self.delete_pending, end).map_err(io_error("write", &path))?;
        self.delete_pending.clear();
        Ok(self.delete_writes)
    }

    /// Begins the seal of this full segment (its records end before `end_seq`), under the
    /// store's lock and without an fsync: buffered appends handed to the OS, the zeros written
    /// ahead cut off (a sealed log ends at its last record), no more appends, the index built
    /// in memory from the ledger and its file created empty. The next commit's ticket writes
    /// and fsyncs it after the log (`commit.rs`).
    pub(crate) fn begin_seal(
        &mut self,
        storage: &dyn Storage,
        dir: &Path,
        ledger: &Ledger<u32>,
        end_seq: u64,
    ) -> StoreResult<SealWork> {
        self.flush()?;
        self.trim_allocation()?;
        self.seal_work(storage, dir, ledger, end_seq)
    }

    /// The rest of [`Segment::begin_seal`], also for a seal recovery found unfinished (the
    /// records handed to the OS, the zeros cut): the index built, its file created anew (a
    /// ticket of a store reloading may still write the old one through its handle).
    pub(crate) fn seal_work(
        &mut self,
        storage: &dyn Storage,
        dir: &Path,
        ledger: &Ledger<u32>,
        end_seq: u64,
    ) -> StoreResult<SealWork> {
        let index_path = self.path(dir, INDEX_EXTENSION);
        let bytes = index_bytes(ledger, self.first_seq, end_seq, self.len(), &index_path)?;
        remove_if_present(storage, &index_path)?;
        let index = storage.open(&index_path, OpenMode::Truncate, 0).map_err(io_error("create", &index_path))?;
        self.index_bytes = bytes.len() as u64;
        self.sealed = true;
        Ok(SealWork {
            first_seq: self.first_seq,
            end_seq,
            log: self.log.clone(),
            log_path: self.log_path.clone(),
            index: Arc::from(index),
            index_path,
            bytes: Arc::new(bytes),
            subjects: Arc::from(ledger.index_subjects(self.first_seq, end_seq)),
        })
    }

    /// Builds this segment's pending seal's index again from the ledger (a refused batch's
    /// rollback removed some of its records since the roll), into the same index file, which
    /// no ticket has written yet.
    pub(crate) fn rebuild_seal(&mut self, seal: &mut SealWork, ledger: &Ledger<u32>) -> StoreResult<()> {
        let bytes = index_bytes(ledger, seal.first_seq, seal.end_seq, self.len(), &seal.index_path)?;
        self.index_bytes = bytes.len() as u64;
        seal.bytes = Arc::new(bytes);
        seal.subjects = Arc::from(ledger.index_subjects(seal.first_seq, seal.end_seq));
        Ok(())
    }

    /// The write buffer of a segment just sealed, emptied, for the next active segment: one
    /// buffer serves every segment, where one allocated per segment and freed at its seal was
    /// a block past glibc's mmap threshold freed at every roll, which raised the threshold and
    /// left the next ones in its heaps (see `IndexBytes`). A buffer a large record grew past
    /// `WRITE_BUFFER_KEPT_MAX_BYTES` is shrunk back first.
    pub(crate) fn take_write_buffer(&mut self) -> Vec<u8> {
        debug_assert!(self.pending.is_empty(), "taken after the seal's flush");
        let mut buffer = std::mem::take(&mut self.pending);
        buffer.clear();
        buffer.shrink_to(WRITE_BUFFER_KEPT_MAX_BYTES);
        buffer
    }

    /// Where the write buffer lives and how much it holds (tests follow it across rolls).
    #[cfg(test)]
    pub(crate) fn write_buffer_allocation(&self) -> (*const u8, usize) {
        (self.pending.as_ptr(), self.pending.capacity())
    }

    /// Installs `buffer` (empty) as the write buffer of this new active segment.
    pub(crate) fn reuse_write_buffer(&mut self, mut buffer: Vec<u8>) {
        debug_assert!(self.pending.is_empty() && !self.sealed);
        buffer.clear();
        self.pending = buffer;
    }

    /// Cuts whatever a failed write left past the bytes handed to the OS before it (a partial
    /// record must not be read back after a reload). The write buffer stays: until the store
    /// is reloaded, reads of its records are served from it.
    pub(crate) fn cut_unwritten(&mut self) -> StoreResult<()> {
        self.log.set_len(self.written_bytes).map_err(io_error("truncate", &self.log_path))?;
        self.allocated_bytes = self.written_bytes;
        Ok(())
    }

    /// Cuts the log back to `length`, or to what was handed to the OS if that is shorter, with
    /// no fsync (a reload after a full disk: the recovery that follows makes what is left
    /// durable).
    pub(crate) fn cut_to(&mut self, length: u64) -> StoreResult<()> {
        self.written_bytes = self.written_bytes.min(length);
        self.cut_unwritten()
    }

    /// Cuts the log back to `length` (a torn tail) and makes that durable.
    pub(crate) fn truncate(&mut self, length: u64) -> StoreResult<()> {
        self.log.set_len(length).map_err(io_error("truncate", &self.log_path))?;
        self.log.sync_all().map_err(io_error("fsync", &self.log_path))?;
        self.written_bytes = length;
        self.synced_bytes = length;
        self.allocated_bytes = length;
        Ok(())
    }

    /// Deletes the segment's files: log first, so a crash leaves at most orphans that recovery removes.
    pub(crate) fn remove_files(&self, storage: &dyn Storage, dir: &Path) -> StoreResult<()> {
        storage.remove_file(&self.log_path).map_err(io_error("remove", &self.log_path))?;
        for extension in [INDEX_EXTENSION, DELETE_EXTENSION] {
            remove_if_present(storage, &self.path(dir, extension))?;
        }
        Ok(())
    }
}

/// Writes the index of `first_seq..end_seq` from the ledger, for the caller to fsync; returns
/// the file and its length. The header goes in last, so a crash leaves a file recovery rejects
/// (and rebuilds).
pub(crate) fn write_index(
    storage: &dyn Storage,
    path: &Path,
    ledger: &Ledger<u32>,
    first_seq: u64,
    end_seq: u64,
    log_length: u64,
) -> StoreResult<(Box<dyn StorageFile>, u64)> {
    let file = storage.open(path, OpenMode::Truncate, 0).map_err(io_error("create", path))?;
    let sink = BufWriter::with_capacity(INDEX_WRITE_BUFFER_BYTES, Appender { file, offset: 0 });
    let index::Finished { sink, header, length } = index::build(ledger, first_seq, end_seq, log_length, sink, path)?;
    let Appender { file, .. } = sink.into_inner().map_err(|error| io_error("write", path)(error.into_error()))?;
    file.write_at(&header, 0).map_err(io_error("write", path))?;
    Ok((file, length))
}

/// The index of `first_seq..end_seq` from the ledger, whole, its real header at the front.
fn index_bytes(
    ledger: &Ledger<u32>,
    first_seq: u64,
    end_seq: u64,
    log_length: u64,
    path: &Path,
) -> StoreResult<IndexBytes> {
    let index::Finished { sink: mut bytes, header, .. } =
        index::build(ledger, first_seq, end_seq, log_length, IndexBytes::default(), path)?;
    bytes.set_header(&header).map_err(io_error("write", path))?;
    Ok(bytes.finish())
}

/// Sequential writes into a storage file (for a `BufWriter`).
#[derive(Debug)]
struct Appender {
    file: Box<dyn StorageFile>,
    offset: u64,
}

impl Write for Appender {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.file.write_at(bytes, self.offset)?;
        self.offset += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Removes a file that may not exist.
pub(crate) fn remove_if_present(storage: &dyn Storage, path: &Path) -> StoreResult<()> {
    match storage.remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io_error("remove", path)(error)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_sequence_and_parse_back() {
        let dir = Path::new("d");
        let name = segment_path(dir, 42, LOG_EXTENSION);
        assert_eq!(name, Path::new("d/00000000000000000042.log"));
        assert_eq!(parse_segment_name("00000000000000000042.log", LOG_EXTENSION), Some(42));
        assert_eq!(parse_segment_name("42.log", LOG_EXTENSION), None);
        assert_eq!(parse_segment_name("00000000000000000042.idx", LOG_EXTENSION), None);
    }

    /// A log in memory that records the writeback hints it is given.
    #[derive(Debug, Default)]
    struct HintedLog {
        bytes: std::sync::Mutex<Vec<u8>>,
        hints: std::sync::Mutex<Vec<(u64, u64)>>,
    }

    impl StorageFile for HintedLog {
        fn read_at(&self, _buffer: &mut [u8], _offset: u64) -> std::io::Result<()> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
        fn write_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
            let mut log = self.bytes.lock().map_err(|_| std::io::ErrorKind::Other)?;
            let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            let end = start + bytes.len();
            let length = log.len().max(end);
            log.resize(length, 0);
            log[start..end].copy_from_slice(bytes);
            Ok(())
        }
        fn length(&self) -> std::io::Result<u64> {
            Ok(self.bytes.lock().map_err(|_| std::io::ErrorKind::Other)?.len() as u64)
        }
        fn set_len(&self, _length: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn sync_data(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn sync_all(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn start_writeback(&self, offset: u64, length: u64) {
            self.hints.lock().expect("hints").push((offset, length));
        }
        fn try_lock(&self, _mode: crate::storage::LockMode) -> std::io::Result<bool> {
            Ok(true)
        }
    }

    #[test]
    fn writeback_starts_once_per_run_of_unsynced_appends_and_never_for_synced_ones() {
        let log = Arc::new(HintedLog::default());
        let mut segment = Segment::from_parts(1, PathBuf::from("d/1.log"), log.clone(), 0, false);
        let payload = vec![7u8; 64 * 1024];
        let mut seq = 1;
        let mut append_until = |segment: &mut Segment, bytes: u64| {
            while segment.written_bytes < bytes {
                segment.append(seq, 0, "obj.chunk", None, &payload).expect("append");
                seq += 1;
            }
        };
        append_until(&mut segment, WRITEBACK_START_BYTES - WRITE_BUFFER_BYTES as u64);
        assert!(log.hints.lock().expect("hints").is_empty(), "less than a run: no hint yet");
        append_until(&mut segment, WRITEBACK_START_BYTES);
        let first = log.hints.lock().expect("hints").clone();
        assert_eq!(first, vec![(0, segment.written_bytes)], "the whole unsynced run, from the start");

        segment.sync(&crate::storage::StdDisk, Path::new("d")).expect("sync");
        let synced = segment.written_bytes;
        append_until(&mut segment, synced + WRITEBACK_START_BYTES - WRITE_BUFFER_BYTES as u64);
        assert_eq!(log.hints.lock().expect("hints").len(), 1, "synced bytes are never hinted again");
        append_until(&mut segment, synced + WRITEBACK_START_BYTES);
        let hints = log.hints.lock().expect("hints").clone();
        assert_eq!(hints[1], (synced, segment.written_bytes - synced), "the next run starts where the fsync ended");
    }
}
