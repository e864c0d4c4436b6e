//! The store for `storage: file`: an append-only, segmented, checksummed log per stream.
//!
//! Appends go to the active (last) segment through a write buffer; `sync` makes them durable.
//! Reads use the in-memory ledger to find a record's segment, offset and length, then read and
//! verify exactly that record. See `docs/design.md` for the format and the durability promise.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::checkpoint::{self, CheckpointTicket};
use crate::commit::{Owed, SealWork, SyncTicket, Synced};
use crate::error::{io_error, StoreError, StoreResult};
use crate::ledger::{Ledger, SlotState};
use crate::limits::{
    record_header, segment_header, CORRUPTION_REPORTS_MAX_COUNT, RECORD_SIZE_MAX_BYTES, ROLLBACK_COUNT_MAX,
    SEALS_PENDING_MAX_COUNT, SEGMENT_SIZE_DEFAULT_BYTES, SEGMENT_SIZE_MAX_BYTES, SEGMENT_SIZE_MIN_BYTES,
    SKIP_COUNT_MAX,
};
use crate::meta::MetaFile;
use crate::record::{self, record_size};
pub use crate::recovery::RecoveryReport;
use crate::recovery::{recover, recover_locked, Recovered, Syncs};
use crate::segment::Segment;
use crate::storage::{self, OpenMode, SharedStorage, StdDisk};
use crate::types::{PurgeRequest, SizeModel, StoreLimits, StoredMessage, StreamState};
use crate::StreamStore;

/// Where and how a file store keeps a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStoreConfig {
    /// The stream's own directory (created if missing; the store owns every file in it).
    pub dir: PathBuf,
    /// Size at which the active segment is sealed; between the store's min and max.
    pub segment_size_bytes: u64,
    /// Retention limits.
    pub limits: StoreLimits,
}

impl FileStoreConfig {
    /// Default segment size, no limits.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStoreConfig {
            dir: dir.into(),
            segment_size_bytes: SEGMENT_SIZE_DEFAULT_BYTES,
            limits: StoreLimits::default(),
        }
    }
}

/// Damage reports, kept for `state()`.
#[derive(Debug, Default)]
struct CorruptionLog {
    reports: Vec<String>,
    more_count: u64,
}

impl CorruptionLog {
    fn add(&mut self, report: String) {
        if self.reports.contains(&report) {
            return;
        }
        if self.reports.len() < CORRUPTION_REPORTS_MAX_COUNT {
            self.reports.push(report);
        } else {
            self.more_count += 1;
        }
    }

    fn summary(&self) -> Option<String> {
        let mut summary = self.reports.join("; ");
        if self.more_count > 0 {
            summary.push_str(&format!("; and {} more", self.more_count));
        }
        (!summary.is_empty()).then_some(summary)
    }
}

/// A stream stored on disk.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    /// Every file of the stream is reached through it.
    storage: SharedStorage,
    segment_size_bytes: u64,
    /// Sorted by first sequence; the last one is active (takes appends), the others are sealed.
    segments: Vec<Segment>,
    ledger: Ledger<u32>,
    /// `None` only while a reload from disk runs.
    meta: Option<MetaFile>,
    /// Behind a mutex because reads take `&self` and may find damage.
    corruption: Mutex<CorruptionLog>,
    recovery: RecoveryReport,
    /// Set when a write or fsync failed: the page cache may then differ from the disk, so the
    /// store refuses further changes rather than acknowledge on top of an unknown state.
    poisoned: Option<String>,
    /// Set when a write found the medium full and the reload dropped appends that `sync` or
    /// `flush` had not yet reported on: their caller may be in the middle of a batch, or its
    /// commit be pipelined behind the write, so every change is refused until the appender's
    /// `sync`, `sync_begin`, `flush` or `report_dropped` has reported the failure once. A commit
    /// taken aside (`sync_aside`, `sync_begin_aside`) fails with it but leaves it.
    out_of_space: Option<String>,
    /// Appends were accepted since the last `sync` or `flush` that succeeded.
    appends_unreported: bool,
    /// A reload after a full medium failed for lack of space too: the in-memory state still
    /// serves reads; the next change tries the reload again.
    reload_pending: bool,
    /// While a refused batch's rollback marker is written: the log holding the batch's first
    /// record and its offset, where a reload after a full disk cuts (`remove_refused`).
    refused_cut: Option<(u64, u64)>,
    /// The sealed segments changed since the checkpoint was written: the next `sync` writes one.
    checkpoint_due: bool,
    /// False when open found damage: a full open then reports it again every time.
    checkpoints_enabled: bool,
    /// Checkpoints captured so far: each write's number, so an older one never replaces a newer.
    checkpoint_captures: u64,
    /// Orders the writes made in place and by tickets (`checkpoint_ticket`).
    checkpoint_writes: Arc<checkpoint::Writes>,
    /// Reloads so far: a sync ticket taken before a reload has nothing left to record.
    epoch: u64,
    /// The fsyncs the last reload's recovery owes (it runs none under the caller's lock): in
    /// every ticket, first, until one of this epoch has run them.
    owed: Owed,
    /// The seals begun at rolls since the last commit's ticket completed them, oldest first:
    /// the segments before the active one, whose slots the ledger still holds (see `roll`).
    /// At most `SEALS_PENDING_MAX_COUNT`.
    sealing: VecDeque<SealWork>,
    /// A lazy purge (`purge_unsynced`) left nothing live: once a commit has made its floor
    /// durable, the segments are replaced by an empty one (`settle_durable`), as `purge` does at once.
    release_due: bool,
    /// `skip_to_unsynced` moved the next sequence past the active segment: the fresh segment
    /// it needs is created once the floor is durable, or before the next append (which then
    /// persists the floor under the caller's lock).
    skip_pending: bool,
}

impl FileStore {
    /// Opens the stream in `config.dir`, recovering from whatever a crash left (see `recovery_report`).
    pub fn open(config: FileStoreConfig) -> StoreResult<Self> {
        Self::open_on(config, StdDisk::shared())
    }

    /// [`FileStore::open`] on the given storage (a simulated disk in tests).
    pub fn open_on(config: FileStoreConfig, storage: SharedStorage) -> StoreResult<Self> {
        let segment_size = config.segment_size_bytes;
        if !(SEGMENT_SIZE_MIN_BYTES..=SEGMENT_SIZE_MAX_BYTES).contains(&segment_size) {
            let range = format!("{SEGMENT_SIZE_MIN_BYTES}..={SEGMENT_SIZE_MAX_BYTES}");
            return Err(StoreError::InvalidConfig(format!("segment size {segment_size} outside {range}")));
        }
        let Recovered { segments, ledger, meta, report, active_next_seq, sealing } =
            recover(&*storage, &config.dir, config.limits)?;
        let corruption = CorruptionLog { reports: Vec::new(), more_count: 0 };
        let mut store = FileStore {
            dir: config.dir,
            storage,
            segment_size_bytes: segment_size,
            segments,
            ledger,
            meta: Some(meta),
            corruption: Mutex::new(corruption),
            recovery: report,
            poisoned: None,
            out_of_space: None,
            appends_unreported: false,
            reload_pending: false,
            refused_cut: None,
            checkpoint_due: false,
            checkpoints_enabled: false,
            checkpoint_captures: 0,
            checkpoint_writes: Arc::default(),
            epoch: 0,
            owed: Owed::default(),
            sealing,
            release_due: false,
            skip_pending: false,
        };
        for report in store.recovery.corruption.clone() {
            store.report_corruption(report);
        }
        store.settle_opened(active_next_seq)?;
        store.checkpoints_enabled = store.recovery.corruption.is_empty();
        if store.recovery.checkpointed_segments_count + 1 < store.segments.len() {
            // Indexes were read: the next open need not read them again.
            store.write_checkpoint();
        }
        Ok(store)
    }

    /// Captures the checkpoint of the sealed segments, numbered; the caller has just made every
    /// change durable. `None` when there is nothing to capture, or it cannot be now (it stays due).
    fn capture_checkpoint(&mut self) -> Option<(checkpoint::Checkpoint, u64)> {
        if !self.checkpoints_enabled || self.poisoned.is_some() {
            return None;
        }
        if !self.sealing.is_empty() {
            // A segment being sealed has no index yet, and its successor's directory entry
            // must not become durable (the checkpoint's rename syncs the directory) before
            // its records: the commit that completes the seal writes the checkpoint.
            self.checkpoint_due = true;
            return None;
        }
        let sealed: Vec<(u64, u64, u64)> =
            self.segments.windows(2).map(|pair| (pair[0].first_seq, pair[1].first_seq, pair[0].len())).collect();
        let captured = checkpoint::capture(&*self.storage, &self.dir, &self.ledger, &sealed);
        self.checkpoint_due = captured.is_err();
        let captured = captured.ok()??;
        self.checkpoint_captures += 1;
        Some((captured, self.checkpoint_captures))
    }

    /// Writes the checkpoint of the sealed segments in place (after a ticket's write in
    /// progress, if any); the caller has just made every change durable. A failure leaves the
    /// older checkpoint, which open then finds stale (the store does not depend on it), so it
    /// is only tried again later.
    fn write_checkpoint(&mut self) {
        let Some((captured, capture)) = self.capture_checkpoint() else { return };
        self.checkpoint_due = self.checkpoint_writes.write(&*self.storage, &self.dir, &captured, capture).is_err();
    }

    /// The checkpoint a commit made due, captured, for the caller to write with its lock let go;
    /// `None` while another ticket is out, or while changes made after the commit (a pipelined
    /// caller's appends) are not durable: they may have removed older messages (limits) that
    /// the checkpoint would then call gone for good.
    fn checkpoint_ticket(&mut self) -> Option<CheckpointTicket> {
        if self.checkpoint_writes.take_ticket_failure() {
            self.checkpoint_due = true;
        }
        if !self.checkpoint_due || !self.all_durable() || self.checkpoint_writes.ticket_out() {
            return None;
        }
        let captured = self.capture_checkpoint()?;
        Some(CheckpointTicket::new(
            self.storage.clone(),
            self.dir.clone(),
            captured,
            Arc::clone(&self.checkpoint_writes),
        ))
    }

    /// Whether every change is on stable storage: the segments' records and deletions, and
    /// the floor computed from them.
    fn all_durable(&self) -> bool {
        let floor_durable = self.meta.as_ref().is_some_and(|meta| meta.floor_seq() >= self.ledger.first_seq());
        floor_durable
            && self.owed.is_empty()
            && self.sealing.is_empty()
            && self.segments.iter().all(Segment::is_durable)
    }

    /// The last steps of opening, on what recovery found.
    fn settle_opened(&mut self, active_next_seq: u64) -> StoreResult<()> {
        self.settle_recovered(active_next_seq)?;
        self.settle()?;
        // Unfinished seals are left to the next commit: opening must not need the space their
        // indexes take.
        let ticket = self.prepare_step(false)?;
        self.finish_step(ticket.run())
    }

    /// What opening and a reload do first on what recovery found: a segment to continue in,
    /// the limits applied again.
    fn settle_recovered(&mut self, active_next_seq: u64) -> StoreResult<()> {
        if self.ledger.next_seq() != active_next_seq {
            // A purge moved the floor past the active segment's records but crashed before the
            // fresh segment existed: appends must not continue there with a sequence gap.
            if self.ledger.state().msgs == 0 {
                self.restart_at_floor()?;
            } else {
                self.roll()?;
            }
        }
        // Limits may have been lowered, or removals lost with unsynced writes: apply them again.
        self.ledger.enforce_count_limits();
        Ok(())
    }

    /// Makes everything durable: records first, then the floor computed from them. The three
    /// steps of a commit (`commit.rs`) run here in a row, under whatever the caller holds.
    fn sync_step(&mut self) -> StoreResult<()> {
        let ticket = self.prepare_step(true)?;
        self.finish_step(ticket.run())
    }

    /// A ticket of this epoch with what a reload owes in front: like a seal, that goes in every
    /// ticket until one ran it.
    fn new_ticket(&self) -> SyncTicket {
        let mut ticket = SyncTicket::new(self.epoch, self.storage.clone());
        ticket.owed(&self.owed);
        ticket
    }

    /// Step 1 of a commit: every change handed to the OS, and a ticket for what to fsync
    /// (with the pending seals' work when `seal`).
    fn prepare_step(&mut self, seal: bool) -> StoreResult<SyncTicket> {
        let mut ticket = self.new_ticket();
        // A seal begun at a roll goes in every ticket until one completed it (a ticket still
        // running writes the same bytes through the same handles, so doing it twice is harmless).
        if seal && !self.sealing.is_empty() {
            ticket.seals(self.sealing.make_contiguous(), Some(self.dir.clone()));
        }
        // The active segment first: the ticket fsyncs in order, and deletions of older messages
        // queued by its appends (limits) must not be durable before those appends.
        for segment in self.segments.iter_mut().rev() {
            segment.prepare_sync(&*self.storage, &self.dir, &mut ticket, self.segment_size_bytes)?;
        }
        // Run after the records: a floor must never be durable ahead of what it was computed from.
        let floor_seq = self.ledger.first_seq();
        let meta = self.meta.as_ref().ok_or_else(|| StoreError::Poisoned("the meta file is gone".into()))?;
        if floor_seq > meta.floor_seq() {
            ticket.floor(meta.handle(), floor_seq);
        }
        // The appends are with the OS now: a reload after a full disk keeps them.
        self.appends_unreported = false;
        Ok(ticket)
    }

    /// Step 3 of a commit: the failure of an fsync, or what became durable.
    fn finish_step(&mut self, synced: Synced) -> StoreResult<()> {
        if let Some(failure) = synced.failure {
            return Err(failure);
        }
        if synced.epoch != self.epoch {
            // A reload came in between: it kept what the ticket covered, and its own fsyncs
            // are owed to the tickets taken since.
            return Ok(());
        }
        if synced.owed_paid {
            self.owed = Owed::default();
        }
        for mark in &synced.marks {
            if let Some(segment) = self.segments.iter_mut().find(|segment| segment.owns(mark)) {
                segment.mark_synced(mark);
            }
        }
        for log in &synced.sealed {
            self.finish_seal(log)?;
        }
        Ok(())
    }

    /// Step 3 of a seal (`roll` began it, a ticket wrote its index): the segment's slots move
    /// into the sealed tier, which reads the index from now on. Nothing when another commit
    /// completed it first, or the segment is gone (a purge). Seals complete oldest first: the
    /// ledger's slots move into the sealed tier from the front, and a ticket's seals, less
    /// those completed since, are the front of the queue (it only grows at the back).
    fn finish_seal(&mut self, log: &std::sync::Arc<dyn crate::storage::StorageFile>) -> StoreResult<()> {
        if !self.sealing.front().is_some_and(|seal| seal.is_of(log)) {
            return Ok(());
        }
        let Some(seal) = self.sealing.pop_front() else { return Ok(()) };
        // The ticket fsynced the whole log before the index.
        if let Some(segment) = self.segments.iter_mut().find(|segment| seal.is_of(segment.log())) {
            segment.mark_log_synced();
        }
        let path = seal.index_path;
        let index = self.storage.open(&path, OpenMode::Read, 0).map_err(io_error("open", &path))?;
        self.ledger.seal_tail((seal.first_seq, seal.end_seq), Some(&seal.subjects), (index, path));
        self.checkpoint_due = true;
        Ok(())
    }

    /// Completes every seal begun at a roll, under the lock: a ticket with the seals' work
    /// alone, run in place. For what must not happen before their records are durable (a
    /// floor, a new segment, the checkpoint). Nothing else is handed to the OS: an append whose
    /// limits brought this here is still in the buffer, so if an index finds no space, the
    /// reload drops that append with the failure instead of keeping it.
    fn complete_seal(&mut self) -> StoreResult<()> {
        if self.sealing.is_empty() {
            return Ok(());
        }
        let mut ticket = self.new_ticket();
        ticket.seals(self.sealing.make_contiguous(), Some(self.dir.clone()));
        self.finish_step(ticket.run())
    }

    /// Completes the oldest pending seal under the lock, for a roll that found the queue full:
    /// its log fsynced, its index written and fsynced, but no directory fsync, which would make
    /// the entries of the segments after it durable before their records (still pending). Its
    /// index's entry becomes durable with the next commit's directory fsync; a crash before
    /// that finds the seal unfinished, as if it had stayed pending.
    fn complete_oldest_seal(&mut self) -> StoreResult<()> {
        let Some(oldest) = self.sealing.front().cloned() else { return Ok(()) };
        let mut ticket = self.new_ticket();
        ticket.seals(std::slice::from_ref(&oldest), None);
        self.finish_step(ticket.run())
    }

    /// After a write found the medium full: cuts the active log back to what was handed to the
    /// OS before the failed write and rebuilds the store from disk, so nothing half-written
    /// stays visible and the store takes writes again once space returns. The directory lock
    /// is held throughout. No fsync runs here, under the caller's lock: what recovery would
    /// sync is owed to the next commit's ticket (`Owed`), which runs it before its own
    /// fsyncs, so nothing acknowledged after the reload is durable before the cuts.
    fn reload_after_full(&mut self) -> StoreResult<()> {
        match self.refused_cut.take() {
            // A refused batch whose marker found no space: its records go too, from the log
            // holding its first on (recovery takes a sealing log cut short for the active one
            // and drops the logs after it), and their sequences are given again.
            Some((segment_first, offset)) => {
                for segment in self.segments.iter_mut().filter(|segment| segment.first_seq >= segment_first) {
                    let length =
                        if segment.first_seq == segment_first { offset } else { segment_header::SIZE_BYTES as u64 };
                    segment.cut_to(length)?;
                }
            }
            None => {
                if let Some(active) = self.segments.last_mut() {
                    active.cut_unwritten()?;
                }
            }
        }
        let meta = self.meta.take().ok_or_else(|| StoreError::Poisoned("the meta file is gone".into()))?;
        let limits = self.ledger.limits().clone();
        // Owed on top of what an earlier reload still owes, which the disk may not have yet.
        let mut syncs = Syncs::Later(std::mem::take(&mut self.owed));
        let recovered = recover_locked(&*self.storage, &self.dir, limits, meta, &mut syncs);
        if let Syncs::Later(owed) = syncs {
            self.owed = owed;
        }
        let Recovered { segments, ledger, meta, report, active_next_seq, sealing } = match recovered {
            Ok(recovered) => recovered,
            Err((error, meta)) => {
                // The old state (buffer included) keeps serving reads until a reload succeeds.
                self.meta = Some(meta);
                return Err(error);
            }
        };
        self.reload_pending = false;
        self.epoch += 1;
        // What is on disk now decides: a skip or release whose floor was not durable is undone.
        (self.release_due, self.skip_pending) = (false, false);
        // Recovery found them unfinished and prepared them again from what is on disk.
        self.sealing = sealing;
        self.segments = segments;
        self.ledger = ledger;
        self.meta = Some(meta);
        for report in report.corruption {
            self.report_corruption(report);
        }
        self.settle_recovered(active_next_seq)?;
        // Lazily: the front the limits emptied goes once the next commit made the floor durable.
        self.settle_lazy();
        Ok(())
    }

    /// What opening the store found: scans, rebuilt indexes, torn bytes cut, damage.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The stream's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of segments (sealed ones plus the active one).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Reports a failed read of a sealed index entry, if there was one, and removes the
    /// checkpoint: the next open then checks every index and rebuilds a damaged one from its log.
    fn note_sealed_failure(&self) -> Option<String> {
        let failure = self.ledger.sealed_failure()?;
        self.report_corruption(failure.clone());
        self.checkpoint_writes.retire(&*self.storage, &self.dir);
        Some(failure)
    }

    /// Counts may be off by what a failed index read could not tell: no change is taken on
    /// top of them.
    fn poison_on_sealed_failure(&mut self) {
        if let Some(failure) = self.note_sealed_failure() {
            self.poisoned.get_or_insert_with(|| format!("reading a sealed index failed: {failure}"));
        }
    }

    fn report_corruption(&self, report: String) {
        // A poisoned mutex only means another reader panicked mid-push; the list is still usable.
        let mut log = self.corruption.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.add(report);
    }

    fn check_writable(&self) -> StoreResult<()> {
        if let Some(reason) = &self.poisoned {
            return Err(StoreError::Poisoned(reason.clone()));
        }
        match &self.out_of_space {
            Some(reason) => Err(StoreError::OutOfSpace(reason.clone())),
            None => Ok(()),
        }
    }

    /// Runs the appender's `sync`, `sync_begin` or `flush`: reports an out-of-space failure not
    /// yet reported to them, or runs the step; either way the failure has then been reported
    /// and changes resume.
    fn reporting(&mut self, step: impl FnOnce(&mut Self) -> StoreResult<()>) -> StoreResult<()> {
        if let Some(reason) = self.out_of_space.take() {
            if self.poisoned.is_none() {
                return Err(StoreError::OutOfSpace(reason));
            }
        }
        let result = self.guarded(step);
        // A failure now is reported to this caller, the batch's own sync or flush.
        self.out_of_space = None;
        result
    }

    /// Runs a write step. A full medium makes the store reload what is on disk (see
    /// `reload_after_full`); any other I/O failure, or a failed reload, poisons it.
    fn guarded<T>(&mut self, step: impl FnOnce(&mut Self) -> StoreResult<T>) -> StoreResult<T> {
        self.poison_on_sealed_failure();
        self.check_writable()?;
        if self.reload_pending {
            self.retry_reload()?;
        }
        let result = step(self);
        self.poison_on_sealed_failure();
        let Err(StoreError::Io { source, .. }) = &result else { return result };
        let reason = result.as_ref().err().map(ToString::to_string).unwrap_or_default();
        if !storage::is_out_of_space(source) {
            self.poisoned = Some(reason);
            return result;
        }
        // Taken before the reload, whose own sync would clear it.
        let dropped_appends = std::mem::take(&mut self.appends_unreported);
        if dropped_appends {
            self.out_of_space = Some(reason.clone());
        }
        self.reload_pending = true;
        self.retry_reload()?;
        Err(StoreError::OutOfSpace(reason))
    }

    /// Reloads after a full medium; a reload that itself runs out of space is tried again at
    /// the next change (`OutOfSpace` meanwhile), any other failure poisons.
    fn retry_reload(&mut self) -> StoreResult<()> {
        match self.reload_after_full() {
            Ok(()) => Ok(()),
            Err(StoreError::Io { source, operation, path }) if storage::is_out_of_space(&source) => {
                Err(StoreError::OutOfSpace(format!(
                    "reloading after a full disk: {operation} {}: {source}",
                    path.display()
                )))
            }
            Err(error) => {
                self.poisoned = Some(format!("reloading from disk after a full disk failed: {error}"));
                Err(error)
            }
        }
    }

    fn segment_for(&self, seq: u64) -> Option<&Segment> {
        let position = self.segments.partition_point(|segment| segment.first_seq <= seq).checked_sub(1)?;
        self.segments.get(position)
    }

    fn active(&mut self) -> &mut Segment {
        // `open` guarantees at least one segment and nothing removes the last one without a successor.
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    fn read_message(&self, seq: u64) -> StoreResult<Option<StoredMessage>> {
        let Some((offset, meta)) = self.ledger.live_record(seq) else {
            if !self.ledger.is_live(seq) {
                return Ok(None);
            }
            let detail = "its sealed index entry cannot be read".to_string();
            self.note_sealed_failure();
            return Err(StoreError::Corrupt { seq, detail });
        };
        let Some(segment) = self.segment_for(seq) else { return Ok(None) };
        // A sealed entry is read from its index file after open: a damaged one must not make
        // the read run past the log or allocate what it claims.
        let placed =
            meta.size as usize <= RECORD_SIZE_MAX_BYTES && u64::from(offset) + u64::from(meta.size) <= segment.len();
        let decoded = if placed {
            record::decode(segment.read(offset, meta.size)?, seq)
        } else {
            Err(format!("index places the record at {offset}+{} beyond its log", meta.size))
        };
        // The record must agree with the index about everything both know.
        let decoded = decoded.and_then(|message| {
            let subject = self.ledger.subject_name_of(meta.subject);
            if message.subject != subject {
                return Err(format!("record subject {:?} differs from index subject {subject:?}", message.subject));
            }
            if message.timestamp_ns != meta.timestamp_ns {
                return Err(format!(
                    "record time {} differs from index time {}",
                    message.timestamp_ns, meta.timestamp_ns
                ));
            }
            Ok(message)
        });
        decoded.map(Some).map_err(|detail| {
            self.report_corruption(format!("segment {}: seq {seq}: {detail}", segment.first_seq));
            StoreError::Corrupt { seq, detail }
        })
    }

    /// After removals: queue delete records for sequences removed from the middle, and drop
    /// segments that hold nothing live at the front.
    fn settle(&mut self) -> StoreResult<()> {
        self.settle_lazy();
        self.drop_front_segments()
    }

    /// After lazy removals: queues delete records for sequences removed from the middle, and
    /// leaves the front (segments the floor covers) to `settle_durable`, once a commit has made
    /// the floor durable: dropping them earlier would need the floor's fsync here, under the
    /// caller's lock.
    fn settle_lazy(&mut self) {
        let first_seq = self.ledger.first_seq();
        for seq in self.ledger.take_removed() {
            if seq < first_seq {
                continue; // the floor covers it
            }
            let position = self.segments.partition_point(|segment| segment.first_seq <= seq);
            if let Some(segment) = position.checked_sub(1).and_then(|position| self.segments.get_mut(position)) {
                segment.record_delete(seq);
            }
        }
    }

    /// After lazy removals: when nothing is live, the segments are to be replaced by an empty
    /// one once the floor is durable (`settle_durable`).
    fn note_release(&mut self) {
        let active_empty = self.active().len() <= segment_header::SIZE_BYTES as u64;
        if self.ledger.state().msgs == 0 && !(active_empty && self.segments.len() == 1) {
            self.release_due = true;
        }
    }

    /// After a whole `sync` (everything is durable): what lazy removals left for the floor, and
    /// the checkpoint when due.
    fn after_sync(&mut self) -> StoreResult<()> {
        self.guarded(Self::settle_durable)?;
        if self.checkpoint_due {
            self.write_checkpoint();
        }
        Ok(())
    }

    /// After a commit: what lazy removals left for a durable floor, done without an fsync.
    /// Segments wholly below the durable floor are removed (a file that reappears after a
    /// crash, its unlink not durable, is below the floor and removed again); a purge that left
    /// nothing live, or a skip, gets its fresh segment at the next sequence, created unsynced
    /// (the next commit makes its entry durable; recovery restarts at the floor without it).
    /// While seals are pending, only the segments before the oldest sealing one go: removing a
    /// sealing one, or creating a segment, would need the seals completed first (left to a
    /// later commit). A steady bounded stream rolls and drops in the same commits, so waiting
    /// for a commit with no seal pending could let dead segments pile up.
    fn settle_durable(&mut self) -> StoreResult<()> {
        if self.poisoned.is_some() {
            return Ok(());
        }
        let Some(meta) = self.meta.as_ref() else { return Ok(()) };
        let durable = meta.floor_seq().min(self.ledger.first_seq());
        let sealing = self.sealing.front().map(|seal| {
            self.segments.iter().position(|segment| seal.is_of(segment.log())).unwrap_or(self.segments.len())
        });
        let dead = self.segments.windows(2).take_while(|pair| pair[1].first_seq <= durable).count();
        let dead = dead.min(sealing.unwrap_or(usize::MAX));
        if dead > 0 {
            self.checkpoint_due = true;
            for segment in self.segments.drain(..dead) {
                segment.remove_files(&*self.storage, &self.dir)?;
            }
        }
        if sealing.is_some() {
            return Ok(());
        }
        let next_seq = self.ledger.next_seq();
        let restart = self.release_due || self.skip_pending;
        if !restart || self.ledger.state().msgs > 0 || durable < next_seq {
            // Appended to meanwhile (the messages continue the active segment), or not yet durable.
            self.release_due &= self.ledger.state().msgs == 0;
            return Ok(());
        }
        let active_empty = self.active().len() <= segment_header::SIZE_BYTES as u64;
        let in_place = active_empty && self.segments.len() == 1 && self.active().first_seq == next_seq;
        if !in_place {
            let fresh = Segment::create_unsynced(&*self.storage, &self.dir, next_seq)?;
            self.segments.push(fresh);
            self.checkpoint_due = true;
            let last = self.segments.len() - 1;
            for segment in self.segments.drain(..last) {
                segment.remove_files(&*self.storage, &self.dir)?;
            }
        }
        (self.release_due, self.skip_pending) = (false, false);
        Ok(())
    }

    /// Removes leading segments whose every sequence is below the first live one. The floor is
    /// persisted first, so a crash cannot bring their messages back.
    fn drop_front_segments(&mut self) -> StoreResult<()> {
        let first_seq = self.ledger.first_seq();
        let dead = self.segments.windows(2).take_while(|pair| pair[1].first_seq <= first_seq).count();
        if dead == 0 {
            return Ok(());
        }
        self.persist_floor()?;
        self.checkpoint_due = true;
        for segment in self.segments.drain(..dead) {
            segment.remove_files(&*self.storage, &self.dir)?;
        }
        Ok(())
    }

    /// When nothing is live, replaces every segment with one empty segment so the disk space
    /// comes back at once; its name (the next sequence) keeps sequences from being reused.
    fn release_if_empty(&mut self) -> StoreResult<()> {
        let active_empty = self.active().len() <= segment_header::SIZE_BYTES as u64;
        if self.ledger.state().msgs > 0 || (active_empty && self.segments.len() == 1) {
            return Ok(());
        }
        self.persist_floor()?;
        if !active_empty {
            // The active segment holds records, so its name is below the next sequence: no clash.
            // Unsynced, as at a roll: the next commit's ticket makes its header and directory
            // entry durable (the floor already is, so recovery restarts there without it).
            let fresh = Segment::create_unsynced(&*self.storage, &self.dir, self.ledger.next_seq())?;
            self.segments.push(fresh);
        }
        self.checkpoint_due = true;
        (self.release_due, self.skip_pending) = (false, false);
        let last = self.segments.len() - 1;
        for segment in self.segments.drain(..last) {
            segment.remove_files(&*self.storage, &self.dir)?;
        }
        Ok(())
    }

    /// Makes the floor durable, after the appends it may have been computed from: appends
    /// that pushed older messages out (limits) must not be lost while the floor that dropped
    /// those messages stays.
    fn persist_floor(&mut self) -> StoreResult<()> {
        // The floor may count the sealing segments' records, and syncs the active one only.
        self.complete_seal()?;
        let floor_seq = self.ledger.first_seq();
        let persisted = self.meta.as_ref().ok_or_else(|| StoreError::Poisoned("the meta file is gone".into()))?;
        if floor_seq <= persisted.floor_seq() {
            return Ok(());
        }
        let (storage, dir) = (&*self.storage, &self.dir);
        if let Some(active) = self.segments.last_mut() {
            active.sync(storage, dir)?;
        }
        let meta = self.meta.as_mut().ok_or_else(|| StoreError::Poisoned("the meta file is gone".into()))?;
        meta.write_floor(floor_seq)
    }

    /// Starts a fresh segment at the next sequence and removes the older ones, which hold only
    /// sequences below the floor. Sealing them instead would write an index entry for every
    /// sequence up to the floor, and a floor far ahead (a purge to any `seq`) made that endless.
    /// The fresh segment is created unsynced, as at a roll: the next commit's ticket makes it
    /// durable, and until then recovery restarts at the floor (persisted by every caller first).
    /// No seal is completed first (which would fsync under the lock): a seal pending here is
    /// of a segment below that floor, whose records nothing needs any more.
    fn restart_at_floor(&mut self) -> StoreResult<()> {
        self.sealing.clear();
        let fresh = Segment::create_unsynced(&*self.storage, &self.dir, self.ledger.next_seq())?;
        self.segments.push(fresh);
        self.checkpoint_due = true;
        (self.release_due, self.skip_pending) = (false, false);
        let last = self.segments.len() - 1;
        for segment in self.segments.drain(..last) {
            segment.remove_files(&*self.storage, &self.dir)?;
        }
        Ok(())
    }

    /// Starts the segment an append behind a skip not yet committed needs (a publish racing a
    /// purge to a later sequence), without an fsync: its header says nothing below it was live
    /// (`FLAG_AFTER_SKIP`), so a crash that makes it durable before the floor has open take
    /// the floor up to it rather than find a gap. The older segments hold only sequences below
    /// the skip and stay until a commit has made the floor durable (`settle_durable`): removed
    /// now, a crash could keep their removal and lose the floor, and reuse their sequences.
    /// Their pending seals are dropped (the ledger forgot their slots at the skip); a ticket in
    /// flight still writes those indexes, which the next open ignores below the floor.
    fn start_after_skip(&mut self) -> StoreResult<()> {
        let after_skip = segment_header::FLAG_AFTER_SKIP;
        let fresh = Segment::create_unsynced_with(&*self.storage, &self.dir, self.ledger.next_seq(), after_skip)?;
        self.segments.push(fresh);
        self.sealing.clear();
        self.checkpoint_due = true;
        (self.release_due, self.skip_pending) = (false, false);
        Ok(())
    }

    /// Begins the seal of the full active segment and starts the next one at the next
    /// sequence, without an fsync (readers wait on the caller's lock): the next commit's ticket
    /// completes it with any seals still pending (`commit.rs`), so segments filled between two
    /// commits (a large object whose commit waits for its last chunk) cost no fsync here. Only
    /// a roll that finds `SEALS_PENDING_MAX_COUNT` seals pending completes the oldest in place,
    /// under the lock: each pending seal holds its index in memory. A caller that asks
    /// `commit_before_append` first commits aside before such a roll and never gets there.
    fn roll(&mut self) -> StoreResult<()> {
        if self.sealing.len() >= SEALS_PENDING_MAX_COUNT {
            self.complete_oldest_seal()?;
        }
        let end_seq = self.ledger.next_seq();
        let last = self.segments.len() - 1;
        let seal = self.segments[last].begin_seal(&*self.storage, &self.dir, &self.ledger, end_seq)?;
        let mut next = Segment::create_unsynced(&*self.storage, &self.dir, end_seq)?;
        next.reuse_write_buffer(self.segments[last].take_write_buffer());
        self.segments.push(next);
        self.sealing.push_back(seal);
        Ok(())
    }

    /// `skip_msgs` behind stored messages, without its sync: one marker in the log covers the
    /// gap (recovery reads it back as deleted slots, and a crash that keeps a later record keeps
    /// the marker before it); the slots make the gap count as deleted now, and sealing indexes
    /// them as such.
    fn skip_behind_messages(&mut self, next_seq: u64) -> StoreResult<bool> {
        let from = self.ledger.next_seq();
        if next_seq <= from || next_seq - from > SKIP_COUNT_MAX {
            return Ok(false);
        }
        let last_ts = self.ledger.state().last_ts;
        self.guarded(|store| {
            store.active().append_skip(next_seq - 1, last_ts)?;
            for _ in from..next_seq {
                store.ledger.push_dead(SlotState::Deleted, last_ts);
            }
            Ok(true)
        })
    }

    /// Whether a rollback marker in the active log may remove sequences from `first` on: they
    /// lie in the active segment, or in segments whose seals are pending and held by no ticket,
    /// so that their indexes, written by the next commit after the marker's log is fsynced, can
    /// be built again without them (recovery replays a marker into earlier logs only while their
    /// seals are unfinished; a finished index must already say).
    fn rollback_can_name(&self, first: u64) -> bool {
        let Some(active) = self.segments.last() else { return false };
        if active.first_seq <= first {
            return true;
        }
        let mut covering = self.sealing.iter().filter(|seal| seal.end_seq > first).peekable();
        covering.peek().is_some_and(|oldest| oldest.first_seq <= first)
            && covering.all(|seal| std::sync::Arc::strong_count(&seal.bytes) == 1)
    }

    /// Builds again the in-memory indexes of the pending seals holding sequences from `first`
    /// on, after a rollback removed some of them.
    fn rebuild_seals_from(&mut self, first: u64) -> StoreResult<()> {
        for seal in self.sealing.iter_mut().filter(|seal| seal.end_seq > first) {
            if let Some(segment) = self.segments.iter_mut().find(|segment| segment.first_seq == seal.first_seq) {
                segment.rebuild_seal(seal, &self.ledger)?;
            }
        }
        Ok(())
    }

    /// Seals begun at rolls and not yet completed by a commit (at most `SEALS_PENDING_MAX_COUNT`).
    pub fn seals_pending_count(&self) -> usize {
        self.sealing.len()
    }

    /// Appends one record and applies the limits it triggers. Nothing can fail once the record
    /// has its slot: what the limits remove is queued for the next commit (`settle_lazy`), whose
    /// ticket persists the floor after the records and whose `sync_finish` gives back the
    /// segments it covers (`settle_durable`), so no fsync runs here, under the caller's lock.
    fn append_step(
        &mut self,
        (subject, headers, payload): (&str, Option<&[u8]>, &[u8]),
        timestamp_ns: i64,
    ) -> StoreResult<u64> {
        let message_size = headers.map_or(0, <[u8]>::len) + payload.len();
        let has_headers = headers.is_some_and(|block| !block.is_empty());
        let sizes = (record_size(subject, headers, payload), has_headers);
        let size = self.ledger.check_append(subject, message_size, sizes)?;
        if self.skip_pending {
            self.start_after_skip()?;
        }
        let active_length = self.active().len();
        if active_length > segment_header::SIZE_BYTES as u64
            && active_length + u64::from(size) > self.segment_size_bytes
        {
            self.roll()?;
        }
        let seq = self.ledger.next_seq();
        let offset = self.active().append(seq, timestamp_ns, subject, headers, payload)?;
        // `check_append` has refused whatever `push` would, so the buffered record gets its slot.
        let pushed = self.ledger.push(subject, (size, has_headers), timestamp_ns, offset)?;
        debug_assert_eq!(pushed, seq);
        if self.ledger.enforce_after_append(seq) > 0 {
            self.settle_lazy();
        }
        Ok(seq)
    }
}

impl StreamStore for FileStore {
    fn append(
        &mut self,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
        timestamp_ns: i64,
    ) -> StoreResult<(u64, i64)> {
        let unreported = std::mem::replace(&mut self.appends_unreported, true);
        let refused_as_is = self.out_of_space.is_some() || self.poisoned.is_some();
        let result = self.guarded(|store| store.append_step((subject, headers, payload), timestamp_ns));
        if let Err(error) = &result {
            if refused_as_is || !matches!(error, StoreError::Io { .. } | StoreError::OutOfSpace(_)) {
                // Refused before the buffer changed (a limit, a pending report, a poisoned
                // store): a full disk met later has no loss of this append to report.
                self.appends_unreported = unreported;
            }
        }
        result.map(|seq| (seq, timestamp_ns))
    }

    fn get(&self, seq: u64) -> StoreResult<Option<StoredMessage>> {
        self.read_message(seq)
    }

    fn get_next(&self, from_seq: u64, filter: Option<&str>) -> StoreResult<Option<StoredMessage>> {
        match self.ledger.next_match(from_seq, filter) {
            Some(seq) => self.read_message(seq),
            None => Ok(None),
        }
    }

    fn get_last_for_subject(&self, filter: &str) -> StoreResult<Option<StoredMessage>> {
        match self.ledger.last_match(filter) {
            Some(seq) => self.read_message(seq),
            None => Ok(None),
        }
    }

    fn delete(&mut self, seq: u64) -> StoreResult<bool> {
        self.guarded(|store| {
            let removed = store.ledger.remove(seq);
            store.settle()?;
            store.sync_step()?;
            Ok(removed)
        })
    }

    fn remove(&mut self, seq: u64) -> StoreResult<bool> {
        self.guarded(|store| {
            let removed = store.ledger.remove(seq);
            // Segments it empties at the front go at the commit that makes the floor durable.
            store.settle_lazy();
            Ok(removed)
        })
    }

    fn remove_refused(&mut self, first: u64, last: u64) -> StoreResult<u64> {
        let marked = self.rollback_can_name(first)
            && first <= last
            && last < self.ledger.next_seq()
            && last - first < ROLLBACK_COUNT_MAX
            && !self.skip_pending;
        if !marked {
            // Behind a finished seal (its index is written, and a marker replayed from a later
            // log would not reach it once that log is sealed too), or larger than a marker may
            // cover: synced deletes, under the caller's lock.
            return crate::delete_each(self, first, last);
        }
        let last_ts = self.ledger.state().last_ts;
        // Where the batch's records begin: a full disk met writing the marker cuts the logs
        // back to there, so the reload cannot bring back records the OS already held.
        self.refused_cut = (first..=last).find_map(|seq| {
            let (offset, _) = self.ledger.live_record(seq)?;
            Some((self.segment_for(seq)?.first_seq, u64::from(offset)))
        });
        let result = self.guarded(|store| {
            // Gone for readers first: a reload that finds no space keeps this state serving.
            let removed = store.ledger.remove_unlogged(first..=last);
            store.rebuild_seals_from(first)?;
            // The marker follows the records in the same log, so any commit that makes a later
            // record durable makes it durable first; a crash before that loses it with no
            // later record, and start-up removes the batch left without its commit marker.
            store.active().append_rollback((first, last), last_ts)?;
            // The front may have moved: the floor goes with the next commit, after the log.
            store.settle_lazy();
            Ok(removed)
        });
        self.refused_cut = None;
        result
    }

    fn purge(&mut self, request: &PurgeRequest) -> StoreResult<u64> {
        self.guarded(|store| {
            let purged = store.ledger.purge(request)?;
            store.settle()?;
            store.release_if_empty()?;
            store.sync_step()?;
            Ok(purged)
        })
    }

    fn purge_unsynced(&mut self, request: &PurgeRequest) -> StoreResult<u64> {
        self.guarded(|store| {
            let purged = store.ledger.purge(request)?;
            store.settle_lazy();
            store.note_release();
            Ok(purged)
        })
    }

    fn skip_to_unsynced(&mut self, next_seq: u64) -> StoreResult<bool> {
        if self.ledger.state().msgs > 0 || next_seq <= self.ledger.next_seq() {
            return Ok(false);
        }
        self.guarded(|store| {
            store.ledger.remove_below(next_seq);
            store.skip_pending = true;
            Ok(true)
        })
    }

    fn state(&self) -> StreamState {
        self.note_sealed_failure();
        let mut state = self.ledger.state();
        state.corruption = self.corruption.lock().unwrap_or_else(std::sync::PoisonError::into_inner).summary();
        state
    }

    fn subjects_state(&self, filter: Option<&str>) -> BTreeMap<String, u64> {
        self.ledger.subjects_state(filter)
    }

    fn enforce_limits(&mut self, now_ns: i64) -> StoreResult<u64> {
        self.guarded(|store| {
            let removed = store.ledger.expire(now_ns) + store.ledger.enforce_count_limits();
            // No fsync here, under the caller's lock (the floor's, for segments this empties):
            // the removals are durable at the next sync or commit, which drops those segments.
            store.settle_lazy();
            store.note_release();
            Ok(removed)
        })
    }

    fn update_limits(&mut self, limits: StoreLimits) -> StoreResult<u64> {
        self.guarded(|store| {
            store.ledger.set_limits(limits);
            let removed = store.ledger.enforce_count_limits();
            // As `enforce_limits`: no fsync under the caller's lock; the next commit makes the
            // removals durable and gives back the segments they emptied.
            store.settle_lazy();
            store.note_release();
            Ok(removed)
        })
    }

    fn limits(&self) -> &StoreLimits {
        self.ledger.limits()
    }

    fn flush(&mut self) -> StoreResult<()> {
        self.reporting(|store| {
            if let Some(active) = store.segments.last_mut() {
                active.flush()?;
            }
            store.appends_unreported = false;
            Ok(())
        })
    }

    fn sync(&mut self) -> StoreResult<()> {
        self.reporting(Self::sync_step)?;
        self.after_sync()
    }

    fn sync_begin(&mut self) -> StoreResult<SyncTicket> {
        let mut ticket = None;
        self.reporting(|store| {
            ticket = Some(store.prepare_step(true)?);
            Ok(())
        })?;
        Ok(ticket.unwrap_or_default())
    }

    fn sync_finish(&mut self, synced: Synced) -> StoreResult<()> {
        if let Some(checkpoint) = self.sync_finish_deferring(synced)? {
            checkpoint.run();
        }
        Ok(())
    }

    fn sync_finish_deferring(&mut self, synced: Synced) -> StoreResult<Option<CheckpointTicket>> {
        if synced.failure.is_none() && synced.epoch != self.epoch && self.poisoned.is_none() {
            // A full disk met aside reloaded the store meanwhile. The reload kept what the ticket
            // covers (with the OS before it), which the ticket's fsyncs made durable: its
            // appends are acknowledged, and what the reload dropped is reported to the next commit.
            return Ok(None);
        }
        // A store poisoned meanwhile (another change's write failed) refuses here too.
        self.guarded(|store| store.finish_step(synced))?;
        self.guarded(Self::settle_durable)?;
        // What a seal or drop changed is durable now: the checkpoint may describe it.
        Ok(self.checkpoint_ticket())
    }

    fn sync_aside(&mut self) -> StoreResult<()> {
        // `guarded`, never `reporting`: a full disk's report stays for the appender.
        self.guarded(Self::sync_step)?;
        self.after_sync()
    }

    fn sync_begin_aside(&mut self) -> StoreResult<SyncTicket> {
        self.guarded(|store| store.prepare_step(true))
    }

    fn report_dropped(&mut self) -> StoreResult<()> {
        match self.out_of_space.take() {
            Some(reason) => Err(StoreError::OutOfSpace(reason)),
            None => Ok(()),
        }
    }

    fn compact(&mut self) -> StoreResult<()> {
        self.guarded(|store| {
            // Sealed segments in the middle are kept even when empty: removing them would leave
            // a gap in the sequences on disk, which recovery treats as damage.
            store.drop_front_segments()?;
            store.release_if_empty()?;
            store.sync_step()
        })
    }

    fn close(&mut self) -> StoreResult<()> {
        self.sync()?;
        // A clean close leaves no zeros written ahead for the next open to scan past.
        self.guarded(|store| store.active().trim_allocation())?;
        // Deletions since the last one would otherwise be read back from delete logs at open.
        self.write_checkpoint();
        Ok(())
    }

    fn stored_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::stored_bytes).sum()
    }

    fn release_waits(&self) -> bool {
        if self.check_writable().is_err() || self.reload_pending {
            // A commit would fail: the appender's next commit hears why, and gives them back.
            return false;
        }
        let first_seq = self.ledger.first_seq();
        let front_dead = self.segments.get(1).is_some_and(|next| next.first_seq <= first_seq);
        // One roll short of the bound, so that a commit aside completes them first (appends
        // that defer their commit, an object's chunks, would otherwise reach it).
        let seals_near_bound = self.sealing.len() + 1 >= SEALS_PENDING_MAX_COUNT;
        front_dead || self.release_due || self.skip_pending || seals_near_bound
    }

    fn commit_before_append(&self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> bool {
        if self.sealing.len() < SEALS_PENDING_MAX_COUNT || self.check_writable().is_err() || self.reload_pending {
            return false;
        }
        let active_length = self.segments.last().map_or(0, Segment::len);
        let size = record_size(subject, headers, payload) as u64;
        active_length > segment_header::SIZE_BYTES as u64 && active_length + size > self.segment_size_bytes
    }

    fn commit_before_appends(&self, count: u64, message_bytes: u64) -> bool {
        if self.sealing.is_empty() || self.check_writable().is_err() || self.reload_pending {
            return false;
        }
        let header_bytes = segment_header::SIZE_BYTES as u64;
        let active_content = self.segments.last().map_or(0, Segment::len).saturating_sub(header_bytes);
        let records = message_bytes.saturating_add(count.saturating_mul(record_header::SIZE_BYTES as u64));
        let content = active_content.saturating_add(records);
        let capacity = self.segment_size_bytes.saturating_sub(header_bytes).max(1);
        if content <= capacity {
            return false;
        }
        // A segment rolls when its content and the next record exceed its capacity, so any two
        // neighbours hold more than one capacity: the rolls are fewer than twice the capacities
        // the content fills, and never more than one per record.
        let rolls = count.min(content.saturating_mul(2) / capacity);
        self.sealing.len() as u64 + rolls > SEALS_PENDING_MAX_COUNT as u64
    }

    fn skip_to(&mut self, next_seq: u64) -> StoreResult<bool> {
        if self.ledger.state().msgs > 0 || next_seq <= self.ledger.next_seq() {
            return Ok(false);
        }
        self.guarded(|store| {
            store.ledger.remove_below(next_seq);
            // The floor first: a crash before the fresh segment exists reopens past the old one.
            store.persist_floor()?;
            // Made durable by the sync below, with the directory's other changes.
            let fresh = Segment::create_unsynced(&*store.storage, &store.dir, next_seq)?;
            store.segments.push(fresh);
            store.checkpoint_due = true;
            (store.release_due, store.skip_pending) = (false, false);
            let last = store.segments.len() - 1;
            for segment in store.segments.drain(..last) {
                segment.remove_files(&*store.storage, &store.dir)?;
            }
            store.sync_step()?;
            Ok(true)
        })
    }

    fn skip_msgs(&mut self, next_seq: u64) -> StoreResult<bool> {
        if self.ledger.state().msgs == 0 {
            return self.skip_to(next_seq);
        }
        let skipped = self.skip_behind_messages(next_seq)?;
        if skipped {
            self.guarded(Self::sync_step)?;
        }
        Ok(skipped)
    }

    fn skip_msgs_unsynced(&mut self, next_seq: u64) -> StoreResult<bool> {
        if self.ledger.state().msgs == 0 {
            return self.skip_to_unsynced(next_seq);
        }
        self.skip_behind_messages(next_seq)
    }

    fn size_model(&self) -> SizeModel {
        SizeModel::File
    }

    fn poisoned(&self) -> Option<String> {
        self.poisoned.clone()
    }

    fn count_matching(&self, seqs: std::ops::Range<u64>, filter: Option<&str>, scan_max: u64) -> Option<u64> {
        self.ledger.count_matching(seqs, filter, scan_max)
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        // Hand buffered appends to the OS so a clean shutdown without `close` loses nothing a
        // process crash would not; durability still comes only from `sync`.
        // Not when a reload is pending: its buffer holds appends already reported as dropped.
        if self.poisoned.is_none() && !self.reload_pending {
            let active = self.active();
            let _ = active.flush().and_then(|()| active.trim_allocation());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::WRITE_BUFFER_KEPT_MAX_BYTES;
    use crate::segment::INDEX_EXTENSION;
    use crate::StreamStore;

    fn open(dir: &Path) -> FileStore {
        let config = FileStoreConfig { segment_size_bytes: SEGMENT_SIZE_MIN_BYTES, ..FileStoreConfig::new(dir) };
        FileStore::open(config).unwrap()
    }

    #[test]
    fn every_segment_appends_through_the_first_ones_write_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let append_until_roll = |store: &mut FileStore| {
            let segments = store.segment_count();
            while store.segment_count() == segments {
                store.append("orders", None, &[7; 100], 0).unwrap();
            }
            // One append into the new segment: the buffer holds it until the next flush.
            store.append("orders", None, &[7; 100], 0).unwrap();
        };
        // The first segments grow the buffer to what a segment of these records needs.
        for _ in 0..2 {
            append_until_roll(&mut store);
        }
        let first = store.segments.last().unwrap().write_buffer_allocation();
        for _ in 0..20 {
            append_until_roll(&mut store);
            store.sync().unwrap();
        }
        assert_eq!(store.segments.last().unwrap().write_buffer_allocation(), first, "allocated once, not per segment");
    }

    #[test]
    fn a_large_records_growth_of_the_write_buffer_is_given_back_at_the_roll() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        store.append("orders", None, &[7; 100], 0).unwrap();
        let large = vec![7; 4 * WRITE_BUFFER_KEPT_MAX_BYTES];
        store.append("orders", None, &large, 0).unwrap();
        store.append("orders", None, &[7; 100], 0).unwrap();
        assert!(store.segment_count() >= 2, "the large record filled its segment");
        let (_, capacity) = store.segments.last().unwrap().write_buffer_allocation();
        assert!(capacity <= WRITE_BUFFER_KEPT_MAX_BYTES, "kept {capacity} bytes");
        assert_eq!(store.get(3).unwrap().unwrap().payload.len(), 100);
        assert_eq!(store.get(2).unwrap().unwrap().payload.len(), large.len());
    }

    #[test]
    fn sealed_segments_keep_no_slot_and_answer_from_their_index_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        for n in 0..2_000u64 {
            let subject = if n % 3 == 0 { "orders.eu" } else { "orders.us" };
            store.append(subject, None, format!("message {n}").as_bytes(), i64::try_from(n).unwrap()).unwrap();
        }
        assert!(store.segment_count() > 10);
        // The last roll's seal completes with the next commit; until then its slots stay.
        store.sync().unwrap();
        let active_first = store.segments.last().unwrap().first_seq;
        assert_eq!(store.ledger.slot_count() as u64, 2_001 - active_first, "slots for the active segment only");
        // Removals inside sealed segments, then reads across them.
        assert!(store.delete(1).unwrap() && store.delete(500).unwrap() && !store.delete(500).unwrap());
        let purged = store.purge(&PurgeRequest {
            subject: Some("orders.eu".into()),
            up_to_seq: Some(1_000),
            ..Default::default()
        });
        assert_eq!(purged.unwrap(), 332, "eu is every third seq from 1: 4, 7, ..., 997 (1 was deleted)");
        let expected = store.state();
        assert_eq!((expected.first_seq, expected.msgs), (2, 2_000 - 2 - 332));
        assert_eq!(store.get_next(1, Some("orders.eu")).unwrap().unwrap().seq, 1_000);
        assert_eq!(store.get(501).unwrap().unwrap().payload.as_ref(), b"message 500");
        assert_eq!(store.get_last_for_subject("orders.eu").unwrap().unwrap().seq, 1_999);
        assert_eq!(store.count_matching(1..2_001, Some("orders.us"), u64::MAX), Some(1_333 - 1));
        store.close().unwrap();
        drop(store);
        let reopened = open(dir.path());
        assert_eq!(reopened.state(), expected);
        assert_eq!(
            reopened.subjects_state(None),
            BTreeMap::from([("orders.eu".into(), 334), ("orders.us".into(), 1_332)])
        );
    }

    #[test]
    fn a_sealed_index_damaged_after_open_is_reported_and_stops_changes_but_not_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        for n in 0..300u64 {
            store.append("orders", None, format!("message {n}").as_bytes(), 7).unwrap();
        }
        store.sync().unwrap();
        let sealed = store.segments[0].first_seq;
        let index_path = store.segments[0].path(&store.dir, INDEX_EXTENSION);
        // The entry of the segment's third message now names another sequence.
        let mut bytes = std::fs::read(&index_path).unwrap();
        let entry = crate::limits::index_header::SIZE_BYTES + 2 * crate::limits::index_entry::SIZE_BYTES;
        bytes[entry] ^= 0x01;
        std::fs::write(&index_path, &bytes).unwrap();
        assert!(matches!(store.get(sealed + 2), Err(StoreError::Corrupt { .. })));
        assert_eq!(store.get(sealed + 1).unwrap().unwrap().payload.as_ref(), b"message 1", "the rest is read");
        assert!(store.state().corruption.unwrap().contains("names another sequence"));
        assert!(matches!(store.append("orders", None, b"more", 8), Err(StoreError::Poisoned(_))));
        drop(store);
        // Reopened, the index fails its checksum and is rebuilt from the log.
        let reopened = open(dir.path());
        assert_eq!(reopened.recovery_report().indexes_rebuilt_count, 1);
        assert_eq!(reopened.get(sealed + 2).unwrap().unwrap().payload.as_ref(), b"message 2");
    }
}
