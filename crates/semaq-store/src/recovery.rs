//! Opening a stream directory: find the segments, trust the index of each sealed segment whose
//! sizes match, scan only the active (last) segment and segments whose index is missing or
//! stale, cut a torn tail, and report damage instead of hiding it.
//!
//! Why this is correct is argued in `docs/design.md` ("Recovery").

use std::collections::VecDeque;
use std::path::Path;

use crate::checkpoint::{self, Restored};
use crate::commit::{Owed, SealWork};
use crate::delete_log;
use crate::error::{io_error, StoreError, StoreResult};
use crate::index::IndexFile;
use crate::ledger::{Ledger, SlotState};
use crate::limits::{
    index_entry as ie, record_header as rh, segment_header as sh, DISK_SECTOR_BYTES, GAP_FILL_MAX_COUNT,
    LOST_WRITE_ZEROS_MIN_BYTES, ROLLBACK_COUNT_MAX, SEALS_PENDING_MAX_COUNT, SKIP_COUNT_MAX,
};
use crate::meta::MetaFile;
use crate::record;
use crate::segment::{
    self, parse_segment_name, remove_if_present, segment_path, Segment, DELETE_EXTENSION, INDEX_EXTENSION,
    LOG_EXTENSION,
};
use crate::storage::{self, OpenMode, Storage, StorageFile};
use crate::types::{SizeModel, StoreLimits};

/// What opening a file store found and did; worth a log line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments loaded.
    pub segments_count: usize,
    /// Sealed segments whose index was missing or stale and was rebuilt by a scan.
    pub indexes_rebuilt_count: usize,
    /// Log bytes read by scans (the active segment and rebuilt ones); payloads elsewhere are not read.
    pub log_bytes_scanned: u64,
    /// Index bytes read.
    pub index_bytes_read: u64,
    /// Bytes cut from the end of the active segment: a write that never completed.
    pub torn_bytes_truncated: u64,
    /// Segments removed because every message in them was below the persisted floor.
    pub segments_removed_count: usize,
    /// Damage found: each entry names the file, the bytes and the sequences affected.
    pub corruption: Vec<String>,
    /// Sealed segments whose state came from the checkpoint (`stream.ckpt`), their indexes unread.
    pub checkpointed_segments_count: usize,
}

/// Everything a `FileStore` is made of, as found on disk.
pub(crate) struct Recovered {
    pub segments: Vec<Segment>,
    pub ledger: Ledger<u32>,
    pub meta: MetaFile,
    pub report: RecoveryReport,
    /// The sequence the active segment's next record must carry for its records to stay
    /// contiguous; the persisted floor can move `ledger.next_seq()` past it.
    pub active_next_seq: u64,
    /// Seals found unfinished (the newest sealed segments' indexes not valid), oldest first:
    /// their segments are loaded into slots, their indexes built in memory, for the next
    /// commit to write.
    pub sealing: VecDeque<SealWork>,
}

/// Recovery's fsyncs: run where they come (an open), or owed to the next commit's ticket (a
/// store reloading itself after a full disk, under its lock, where readers would wait on them).
pub(crate) enum Syncs {
    /// Each fsync runs at once.
    Now,
    /// Each fsync is added to what the next commit's ticket runs first.
    Later(Owed),
}

impl Syncs {
    /// The cut or written `file` must be durable (a whole fsync: its length may have changed).
    fn file(&mut self, file: std::sync::Arc<dyn StorageFile>, path: &Path) -> StoreResult<()> {
        match self {
            Syncs::Now => file.sync_all().map_err(io_error("fsync", path)),
            Syncs::Later(owed) => {
                owed.file(file, path.to_path_buf());
                Ok(())
            }
        }
    }

    /// The entries of `dir` must be durable, after the files before them.
    fn dir(&mut self, storage: &dyn Storage, dir: &Path) -> StoreResult<()> {
        match self {
            Syncs::Now => segment::sync_dir(storage, dir),
            Syncs::Later(owed) => {
                owed.dir(dir);
                Ok(())
            }
        }
    }

    /// Whether fsyncs are owed rather than run.
    fn later(&self) -> bool {
        matches!(self, Syncs::Later(_))
    }

    /// A new, empty active segment: durable at once, or left to the next commit as at a roll.
    fn create_segment(&self, storage: &dyn Storage, dir: &Path, first_seq: u64) -> StoreResult<Segment> {
        match self {
            Syncs::Now => Segment::create(storage, dir, first_seq),
            Syncs::Later(_) => Segment::create_unsynced(storage, dir, first_seq),
        }
    }

    /// Cuts the active log's torn tail at `valid_end`: durable at once, or left to the next
    /// commit's fsync of the active log (a reloaded active log counts as unsynced).
    fn cut_active(&self, segment: &mut Segment, valid_end: u64) -> StoreResult<()> {
        match self {
            Syncs::Now => segment.truncate(valid_end),
            Syncs::Later(_) => segment.cut_to(valid_end),
        }
    }
}

/// Opens (creating if needed) the stream in `dir`.
pub(crate) fn recover(storage: &dyn Storage, dir: &Path, limits: StoreLimits) -> StoreResult<Recovered> {
    storage.create_dir_all(dir).map_err(io_error("create", dir))?;
    let meta = MetaFile::open(storage, dir)?;
    recover_locked(storage, dir, limits, meta, &mut Syncs::Now).map_err(|(error, _)| error)
}

/// [`recover`] with the directory's meta file (and so its lock) already open: a store
/// reloading itself from disk keeps its lock throughout, also when this fails (the meta file
/// comes back with the error). `syncs` says whether its fsyncs run or are owed.
pub(crate) fn recover_locked(
    storage: &dyn Storage,
    dir: &Path,
    limits: StoreLimits,
    mut meta: MetaFile,
    syncs: &mut Syncs,
) -> Result<Recovered, (StoreError, MetaFile)> {
    let floor_seq = match raise_floor_after_skip(storage, dir, &mut meta, syncs) {
        Ok(floor_seq) => floor_seq,
        Err(error) => return Err((error, meta)),
    };
    match recover_files(storage, dir, limits, (meta.floor_seq(), floor_seq), syncs) {
        Ok(Found { segments, ledger, report, active_next_seq, sealing }) => {
            Ok(Recovered { segments, ledger, meta, report, active_next_seq, sealing })
        }
        Err(error) => Err((error, meta)),
    }
}

/// The first sequences of the segment logs in `dir`, oldest first.
fn log_firsts(storage: &dyn Storage, dir: &Path) -> StoreResult<Vec<u64>> {
    let mut logs: Vec<u64> = storage
        .list_dir(dir)
        .map_err(io_error("list", dir))?
        .iter()
        .filter_map(|name| parse_segment_name(name, LOG_EXTENSION))
        .collect();
    logs.sort_unstable();
    Ok(logs)
}

/// The floor the stream really has: up to the newest segment whose header says it was started
/// behind a skip (`FLAG_AFTER_SKIP`: nothing below it was live then), whose commit makes its
/// directory entry durable before the floor, while the older segments, kept until that floor
/// is durable, hold only sequences below it. Open persists it before anything is removed. A
/// reload does not: the header it read may be in the page cache only, so the floor waits for
/// the next commit, which makes that segment durable first, and the older segments wait too.
fn raise_floor_after_skip(storage: &dyn Storage, dir: &Path, meta: &mut MetaFile, syncs: &Syncs) -> StoreResult<u64> {
    match floor_after_skip(storage, dir, meta.floor_seq())? {
        Some(first_seq) if syncs.later() => Ok(first_seq),
        Some(first_seq) => meta.write_floor(first_seq).map(|()| first_seq),
        None => Ok(meta.floor_seq()),
    }
}

/// The first sequence of the newest segment above `floor_seq` started behind a skip
/// (`FLAG_AFTER_SKIP`), the floor the stream really has; `None` when there is none.
pub(crate) fn floor_after_skip(storage: &dyn Storage, dir: &Path, floor_seq: u64) -> StoreResult<Option<u64>> {
    let logs = log_firsts(storage, dir)?;
    for &first_seq in logs.iter().rev() {
        if first_seq <= floor_seq {
            return Ok(None);
        }
        let path = segment_path(dir, first_seq, LOG_EXTENSION);
        let log = storage.open(&path, OpenMode::Read, 0).map_err(io_error("open", &path))?;
        let mut header = [0u8; sh::SIZE_BYTES];
        // A log shorter than a header has none (a segment never created).
        if log.read_at(&mut header, 0).is_err() {
            continue;
        }
        if record::segment_header_flags(&header, first_seq) & sh::FLAG_AFTER_SKIP != 0 {
            return Ok(Some(first_seq));
        }
    }
    Ok(None)
}

/// What recovery found in the segment files.
struct Found {
    segments: Vec<Segment>,
    ledger: Ledger<u32>,
    report: RecoveryReport,
    active_next_seq: u64,
    sealing: VecDeque<SealWork>,
}

/// Recovery's work on everything but the meta file, with the floor persisted and the floor
/// the stream has (above it only in a reload behind a skip).
fn recover_files(
    storage: &dyn Storage,
    dir: &Path,
    limits: StoreLimits,
    (persisted_floor_seq, floor_seq): (u64, u64),
    syncs: &mut Syncs,
) -> StoreResult<Found> {
    sync_newest_sealed_logs(storage, dir, syncs)?;
    syncs.dir(storage, dir)?;
    let mut report = RecoveryReport::default();
    let mut firsts = list_segments(storage, dir)?;
    report.segments_removed_count = remove_below_floor(storage, dir, &mut firsts, persisted_floor_seq)?;
    let below_floor = split_below_floor(&mut firsts, floor_seq);
    undo_unfinished_roll(storage, dir, &mut firsts, syncs)?;
    undo_rolls_after_a_torn_log(storage, dir, &mut firsts, syncs)?;
    let start_seq = firsts.first().copied().unwrap_or(floor_seq).max(1);
    if floor_seq > 0 && start_seq > floor_seq {
        // Front segments are removed only after the floor passed them.
        report.corruption.push(format!("seqs {floor_seq}..{start_seq} (exclusive) missing: no segment holds them"));
    }
    let (mut ledger, mut segments, delete_offsets) =
        match checkpoint::restore(storage, dir, &firsts, floor_seq, &limits) {
            Some(Restored { ledger, segments, delete_offsets, lost }) => {
                report.checkpointed_segments_count = segments.len();
                for (first_seq, lost_count) in lost {
                    report
                        .corruption
                        .push(format!("segment {first_seq}: {lost_count} messages lost to earlier corruption"));
                }
                (ledger, segments, delete_offsets)
            }
            None => (Ledger::new(start_seq, limits, SizeModel::File), Vec::with_capacity(firsts.len()), Vec::new()),
        };
    let mut sealing = VecDeque::new();
    // The lowest sequence a rollback marker removed below its own log: a refused batch that
    // rolled a segment, whose unfinished seals were built before the marker was read.
    let mut rolled_back_below = None;
    for (position, &first_seq) in firsts.iter().enumerate().skip(segments.len()) {
        let end_seq = firsts.get(position + 1).copied();
        if first_seq < ledger.next_seq() {
            report.corruption.push(format!("segment {first_seq}: overlaps sequences already loaded; skipped"));
            continue;
        }
        fill_gap(&mut ledger, first_seq, &mut report)?;
        let segment = match end_seq {
            Some(end_seq) => {
                // Only the newest sealed segments can be in the middle of their seals.
                let unfinished = (position + 1 + SEALS_PENDING_MAX_COUNT >= firsts.len()).then_some(&mut sealing);
                let found = (&mut ledger, &mut report, &mut rolled_back_below);
                load_sealed(storage, dir, (first_seq, end_seq), found, (unfinished, &mut *syncs))?
            }
            None => {
                let found = (&mut ledger, &mut report, &mut rolled_back_below);
                load_active(storage, dir, first_seq, found, &*syncs)?
            }
        };
        segments.push(segment);
    }
    if let Some(below) = rolled_back_below {
        rebuild_rolled_back_seals(storage, dir, (&mut segments, &mut sealing), &ledger, below)?;
    }
    if segments.is_empty() {
        segments.push(syncs.create_segment(storage, dir, ledger.next_seq().max(floor_seq))?);
    }
    if let (Syncs::Later(owed), Some(active)) = (&mut *syncs, segments.last()) {
        // A log the reload made the active one again (a rolled-back batch's): its appends
        // since must not become durable before the directory drops the segments after it.
        owed.forget(&active.path(dir, LOG_EXTENSION));
    }
    let active_next_seq = ledger.next_seq();
    ledger.settle_front();
    for (position, segment) in segments.iter().enumerate() {
        let applied_bytes = delete_offsets.get(position).copied().unwrap_or(0);
        apply_deletes(storage, dir, (segment, applied_bytes, active_next_seq), (&mut ledger, &mut report), syncs)?;
    }
    // Deletions read back are already durable: nothing to write again.
    ledger.take_removed();
    ledger.remove_below(floor_seq);
    ledger.settle_front();
    // Held by no ledger slot, removed once a commit has made the floor durable (`settle_durable`).
    let kept_below = below_floor.iter().map(|&first_seq| Segment::open(storage, dir, first_seq, true));
    segments.splice(0..0, kept_below.collect::<StoreResult<Vec<_>>>()?);
    report.segments_count = segments.len();
    Ok(Found { segments, ledger, report, active_next_seq, sealing })
}

/// Fsyncs the logs before the newest (the newest sealed ones, as many as seals may be
/// pending, oldest first) ahead of the directory's fsync: a seal completes in the commit after
/// the roll that created the next log, so a process that crashed, or this store reloading, may
/// have left their records in the page cache only, and the next logs' directory entries must
/// not become durable before them.
fn sync_newest_sealed_logs(storage: &dyn Storage, dir: &Path, syncs: &mut Syncs) -> StoreResult<()> {
    let logs = log_firsts(storage, dir)?;
    let sealed = &logs[..logs.len().saturating_sub(1)];
    for &first_seq in &sealed[sealed.len().saturating_sub(SEALS_PENDING_MAX_COUNT)..] {
        let path = segment_path(dir, first_seq, LOG_EXTENSION);
        let log = storage.open(&path, OpenMode::ReadWrite, 0).map_err(io_error("open", &path))?;
        // A full fsync: the seal's cut of the zeros written ahead changed the length.
        syncs.file(log.into(), &path)?;
    }
    Ok(())
}

/// Accounts for sequences between the last one loaded and a segment starting at `first_seq`.
/// Nothing the store does leaves such a gap, so it is reported; the sequences count as lost.
fn fill_gap(ledger: &mut Ledger<u32>, first_seq: u64, report: &mut RecoveryReport) -> StoreResult<()> {
    let missing_from = ledger.next_seq();
    if first_seq == missing_from {
        return Ok(());
    }
    if first_seq - missing_from > GAP_FILL_MAX_COUNT {
        let detail =
            format!("segment {first_seq} starts {} sequences after the previous one", first_seq - missing_from);
        return Err(StoreError::Corrupt { seq: missing_from, detail });
    }
    report.corruption.push(format!("seqs {missing_from}..{first_seq} (exclusive) missing: no segment holds them"));
    while ledger.next_seq() < first_seq {
        ledger.push_dead(SlotState::Lost, 0);
    }
    Ok(())
}

/// First sequences of the segments in `dir`, sorted; orphaned index and delete files removed.
fn list_segments(storage: &dyn Storage, dir: &Path) -> StoreResult<Vec<u64>> {
    let mut logs = Vec::new();
    let mut others = Vec::new();
    for name in storage.list_dir(dir).map_err(io_error("list", dir))? {
        let name = name.as_str();
        if let Some(first_seq) = parse_segment_name(name, LOG_EXTENSION) {
            logs.push(first_seq);
        }
        for extension in [INDEX_EXTENSION, DELETE_EXTENSION] {
            if let Some(first_seq) = parse_segment_name(name, extension) {
                others.push((first_seq, extension));
            }
        }
    }
    logs.sort_unstable();
    for (first_seq, extension) in others {
        if logs.binary_search(&first_seq).is_err() {
            // A segment removal that crashed after deleting the log (see Segment::remove_files).
            remove_if_present(storage, &segment_path(dir, first_seq, extension))?;
        }
    }
    Ok(logs)
}

/// A roll whose seal never completed (the index of the segment before the newest is not
/// valid) and whose new segment holds no record: the new segment goes, durably, and the full
/// one is the active one again, scanned as such. Rebuilding its index instead would need disk
/// space, which a store reloading after a full disk may not have.
fn undo_unfinished_roll(
    storage: &dyn Storage,
    dir: &Path,
    firsts: &mut Vec<u64>,
    syncs: &mut Syncs,
) -> StoreResult<()> {
    let [.., sealing, newest] = firsts[..] else { return Ok(()) };
    let newest_path = segment_path(dir, newest, LOG_EXTENSION);
    let newest_length = storage.file_length(&newest_path).map_err(io_error("stat", &newest_path))?;
    if newest_length > sh::SIZE_BYTES as u64 {
        return Ok(());
    }
    let log_path = segment_path(dir, sealing, LOG_EXTENSION);
    let log_length = storage.file_length(&log_path).map_err(io_error("stat", &log_path))?;
    let index_path = segment_path(dir, sealing, INDEX_EXTENSION);
    let index = storage::read_if_present(storage, &index_path).map_err(io_error("read", &index_path))?;
    if index.is_some_and(|bytes| IndexFile::parse(&bytes, sealing, log_length).is_ok()) {
        return Ok(());
    }
    for extension in [LOG_EXTENSION, INDEX_EXTENSION, DELETE_EXTENSION] {
        remove_if_present(storage, &segment_path(dir, newest, extension))?;
    }
    // Before the full segment takes appends again: the removed one must not come back.
    syncs.dir(storage, dir)?;
    firsts.pop();
    Ok(())
}

/// A sealed log among the newest (those whose seals may be pending) that ends short of the
/// next segment (torn or cut): no fsync ever covered it whole since its roll, so no record
/// after it was ever acknowledged (every commit fsyncs the pending seals' logs, oldest first,
/// before anything else). The newer segments exist only because a commit in flight at those
/// rolls fsynced the directory: they go, durably, and the torn log is the active one again,
/// its tail cut as a torn write (`load_active`). Reported as damage, that was a crash the
/// store made (design.md, "Recovery").
fn undo_rolls_after_a_torn_log(
    storage: &dyn Storage,
    dir: &Path,
    firsts: &mut Vec<u64>,
    syncs: &mut Syncs,
) -> StoreResult<()> {
    let sealed_count = firsts.len().saturating_sub(1);
    for position in sealed_count.saturating_sub(SEALS_PENDING_MAX_COUNT)..sealed_count {
        if !sealed_log_torn(storage, dir, (firsts[position], firsts[position + 1]))? {
            continue;
        }
        for &newer in &firsts[position + 1..] {
            // The log first, as `Segment::remove_files`: orphans are removed at the next open.
            for extension in [LOG_EXTENSION, INDEX_EXTENSION, DELETE_EXTENSION] {
                remove_if_present(storage, &segment_path(dir, newer, extension))?;
            }
        }
        // Before the torn log takes appends again: the removed ones must not come back.
        syncs.dir(storage, dir)?;
        firsts.truncate(position + 1);
        return Ok(());
    }
    Ok(())
}

/// Whether the sealed log holding `first_seq..end_seq` lacks records at its end (a torn or
/// cut tail), its seal never having written an index header: a seal writes it after the log's
/// fsync, so a log whose index header names it is whole (damage in it is reported as such).
fn sealed_log_torn(storage: &dyn Storage, dir: &Path, (first_seq, end_seq): (u64, u64)) -> StoreResult<bool> {
    let log_path = segment_path(dir, first_seq, LOG_EXTENSION);
    let log_length = storage.file_length(&log_path).map_err(io_error("stat", &log_path))?;
    let index_path = segment_path(dir, first_seq, INDEX_EXTENSION);
    if storage::exists(storage, &index_path) {
        let index = storage.open(&index_path, OpenMode::Read, 0).map_err(io_error("open", &index_path))?;
        let mut header = [0u8; crate::limits::index_header::SIZE_BYTES];
        // A file shorter than a header has none.
        let read = index.read_at(&mut header, 0);
        if read.is_ok() && crate::index::check_header(&header, first_seq, log_length).is_ok() {
            return Ok(false);
        }
    }
    let bytes = storage.read(&log_path).map_err(io_error("read", &log_path))?;
    let mut scanned_count = 0u64;
    // A rollback marker takes no sequence.
    let scan =
        scan_log(&bytes, first_seq, |event| scanned_count += u64::from(!matches!(event, Scanned::RolledBack { .. })));
    // A lost write is as torn as a short tail: the log was never fsynced whole, and a drive
    // writing out of order may have kept what follows it.
    let holed = scan.lost_write;
    Ok(holed || scan.bad_tail.is_some() || first_seq.saturating_add(scanned_count) < end_seq)
}

/// Takes out of `firsts` the segments that end below `floor_seq`, not yet persisted: they are
/// neither loaded nor judged (the one just below a skip ends short with no index, which would
/// pass for a torn roll), and stay on disk until the floor is durable.
fn split_below_floor(firsts: &mut Vec<u64>, floor_seq: u64) -> Vec<u64> {
    let below = firsts.windows(2).take_while(|pair| pair[1] <= floor_seq).count();
    firsts.drain(..below).collect()
}

/// Deletes segments that end below the floor (a purge or segment drop that crashed midway).
fn remove_below_floor(storage: &dyn Storage, dir: &Path, firsts: &mut Vec<u64>, floor_seq: u64) -> StoreResult<usize> {
    // Segment i holds sequences below firsts[i + 1]; the last segment is always kept, since
    // it is where appends continue.
    let doomed = firsts.windows(2).take_while(|pair| pair[1] <= floor_seq).count();
    for &first_seq in &firsts[..doomed] {
        for extension in [LOG_EXTENSION, INDEX_EXTENSION, DELETE_EXTENSION] {
            remove_if_present(storage, &segment_path(dir, first_seq, extension))?;
        }
    }
    firsts.drain(..doomed);
    Ok(doomed)
}

/// Loads a sealed segment holding `first_seq..end_seq`: from its index when that is valid,
/// otherwise by scanning its log and writing a fresh index (its fsync as `syncs` says). One of
/// the newest sealed ones (`unfinished` given) is a seal whose commit never completed: its
/// slots stay and its index is built in memory for the next commit to write, so that neither
/// open nor a reload after a full disk needs space for it.
fn load_sealed(
    storage: &dyn Storage,
    dir: &Path,
    (first_seq, end_seq): (u64, u64),
    (ledger, report, rolled_back_below): (&mut Ledger<u32>, &mut RecoveryReport, &mut Option<u64>),
    (unfinished, syncs): (Option<&mut VecDeque<SealWork>>, &mut Syncs),
) -> StoreResult<Segment> {
    let mut segment = Segment::open(storage, dir, first_seq, true)?;
    let log_length = segment.len();
    let index_path = segment.path(dir, INDEX_EXTENSION);
    let index_bytes =
        storage::read_if_present(storage, &index_path).map_err(io_error("read", &index_path))?.unwrap_or_default();
    report.index_bytes_read += index_bytes.len() as u64;
    // Seals found unfinished before a valid index are completed here (`complete_found_seals`),
    // which writes and fsyncs their indexes; a reload cannot fsync, so this segment's seal is
    // built again from its log and pends with theirs instead.
    let seals_before = unfinished.as_ref().is_some_and(|pending| !pending.is_empty());
    let parsed = if seals_before && syncs.later() {
        Err("pending behind unfinished seals")
    } else {
        IndexFile::parse(&index_bytes, first_seq, log_length)
    };
    if let Ok(index) = parsed {
        if index_fits(&index, first_seq, end_seq, log_length) {
            if let Some(pending) = unfinished {
                complete_found_seals(storage, pending, ledger)?;
            }
            let file = storage.open(&index_path, OpenMode::Read, 0).map_err(io_error("open", &index_path))?;
            let lost_count = ledger.load_sealed(&index, first_seq, file, index_path)?;
            if lost_count > 0 {
                report
                    .corruption
                    .push(format!("segment {first_seq}: {lost_count} messages lost to earlier corruption"));
            }
            segment.set_index_bytes(index_bytes.len() as u64);
            return Ok(segment);
        }
    }
    scan_into(storage, dir, &segment, (ledger, report, rolled_back_below), Some(end_seq))?;
    report.indexes_rebuilt_count += 1;
    if let Some(sealing) = unfinished {
        sealing.push_back(segment.seal_work(storage, dir, ledger, ledger.next_seq())?);
        return Ok(segment);
    }
    // Written as a new file: a seal's commit still running (this store reloading after a full
    // disk) writes the old one through its handle, and must not mix its bytes into this one.
    remove_if_present(storage, &index_path)?;
    let (written, rebuilt_bytes) =
        segment::write_index(storage, &index_path, ledger, first_seq, ledger.next_seq(), log_length)?;
    // Its log was whole when its seal completed: an unsynced index, torn by a crash before the
    // fsync owed for it, fails its checksum at the next open and is rebuilt again.
    syncs.file(written.into(), &index_path)?;
    let file = storage.open(&index_path, OpenMode::Read, 0).map_err(io_error("open", &index_path))?;
    ledger.seal_tail((first_seq, ledger.next_seq()), None, (file, index_path));
    segment.set_index_bytes(rebuilt_bytes);
    Ok(segment)
}

/// Builds again the indexes of the unfinished seals holding sequences a later log's rollback
/// marker removed (from `below` on): they were built when their own logs were scanned, before
/// the marker was read. A finished seal's index was written after the marker (`remove_refused`
/// names earlier logs only while their seals are pending), so it already marks them deleted.
fn rebuild_rolled_back_seals(
    storage: &dyn Storage,
    dir: &Path,
    (segments, sealing): (&mut [Segment], &mut VecDeque<SealWork>),
    ledger: &Ledger<u32>,
    below: u64,
) -> StoreResult<()> {
    for seal in sealing.iter_mut().filter(|seal| seal.end_seq > below) {
        if let Some(segment) = segments.iter_mut().find(|segment| segment.first_seq == seal.first_seq) {
            *seal = segment.seal_work(storage, dir, ledger, seal.end_seq)?;
        }
    }
    Ok(())
}

/// Writes the indexes of seals found unfinished before a segment whose index is valid, and
/// moves them into the sealed tier, which must hold them before that segment. A commit writes
/// indexes oldest first, each fsynced before the next, so this takes a directory that lost an
/// older index's entry but kept a newer one's: damage, not a crash the store leaves.
fn complete_found_seals(
    storage: &dyn Storage,
    pending: &mut VecDeque<SealWork>,
    ledger: &mut Ledger<u32>,
) -> StoreResult<()> {
    while let Some(seal) = pending.pop_front() {
        seal.write_index()?;
        let file = storage.open(&seal.index_path, OpenMode::Read, 0).map_err(io_error("open", &seal.index_path))?;
        ledger.seal_tail((seal.first_seq, seal.end_seq), Some(&seal.subjects), (file, seal.index_path.clone()));
    }
    Ok(())
}

/// Whether every entry is where it claims to be (checked before any is loaded).
fn index_fits(index: &IndexFile<'_>, first_seq: u64, end_seq: u64, log_length: u64) -> bool {
    // The table was counted by a `u32` field; a count beyond it is an index to rebuild.
    let Ok(subject_count) = u32::try_from(index.subjects.len()) else { return false };
    let entries_fit = index.entries().enumerate().all(|(position, entry)| {
        let placed = entry.seq == first_seq + position as u64;
        let live = entry.flags & (ie::FLAG_DELETED | ie::FLAG_LOST) == 0;
        let within = u64::from(entry.offset) + u64::from(entry.length) <= log_length
            && entry.offset as usize >= sh::SIZE_BYTES
            && entry.length as usize > rh::SIZE_BYTES
            && entry.subject_index < subject_count;
        placed && (!live || within)
    });
    entries_fit && first_seq + index.len() as u64 <= end_seq
}

/// Loads the active segment by scanning it, cutting a torn tail.
fn load_active(
    storage: &dyn Storage,
    dir: &Path,
    first_seq: u64,
    (ledger, report, rolled_back_below): (&mut Ledger<u32>, &mut RecoveryReport, &mut Option<u64>),
    syncs: &Syncs,
) -> StoreResult<Segment> {
    let mut segment = Segment::open(storage, dir, first_seq, false)?;
    // An index left from a seal whose successor segment never became durable: the log is
    // scanned anyway, and the next seal writes a fresh one.
    remove_if_present(storage, &segment.path(dir, INDEX_EXTENSION))?;
    if segment.len() < sh::SIZE_BYTES as u64 {
        // Crashed while creating the segment: nothing was ever appended to it.
        drop(segment);
        return syncs.create_segment(storage, dir, first_seq);
    }
    let valid_end = scan_into(storage, dir, &segment, (ledger, report, rolled_back_below), None)?;
    if valid_end < segment.len() {
        // Zeros alone were written ahead of the appends (preallocation), not torn.
        if !segment.zeros_from(valid_end)? {
            report.torn_bytes_truncated += segment.len() - valid_end;
        }
        syncs.cut_active(&mut segment, valid_end)?;
    }
    Ok(segment)
}

/// Scans a log into the ledger and returns where its valid records end. For a sealed segment
/// (`end_seq` given) an unreadable tail is damage and its sequences are lost; for the active
/// segment it is a torn write, left to the caller to cut.
fn scan_into(
    storage: &dyn Storage,
    dir: &Path,
    segment: &Segment,
    (ledger, report, rolled_back_below): (&mut Ledger<u32>, &mut RecoveryReport, &mut Option<u64>),
    end_seq: Option<u64>,
) -> StoreResult<u64> {
    let path = segment.path(dir, LOG_EXTENSION);
    let bytes = storage.read(&path).map_err(io_error("read", &path))?;
    report.log_bytes_scanned += bytes.len() as u64;
    let first_seq = segment.first_seq;
    if record::decode_segment_header(&bytes) != Some(first_seq) {
        report.corruption.push(format!("segment {first_seq}: file header damaged or names another sequence"));
    }
    let mut refused = Ok(());
    let scan = if end_seq.is_some() { scan_log } else { scan_active_log };
    let scan = scan(&bytes, first_seq, |event| match event {
        Scanned::Record { timestamp_ns, offset, length, subject, headers, .. } => {
            if refused.is_ok() {
                refused = ledger.push(subject, (length, headers), timestamp_ns, offset).map(drop);
            }
        }
        Scanned::Lost => ledger.push_dead(SlotState::Lost, 0),
        Scanned::Skipped { timestamp_ns } => ledger.push_dead(SlotState::Deleted, timestamp_ns),
        // The marker is the removal's durable record: nothing goes to a delete log for it.
        Scanned::RolledBack { first, last } => {
            ledger.remove_unlogged(first..=last);
            if first < first_seq {
                *rolled_back_below = Some(rolled_back_below.map_or(first, |below: u64| below.min(first)));
            }
        }
    });
    refused?;
    report.corruption.extend(scan.damage.iter().map(|damage| format!("segment {first_seq}: {damage}")));
    if let (Some((offset, reason)), Some(end_seq)) = (scan.bad_tail, end_seq) {
        let lost_from = ledger.next_seq();
        while ledger.next_seq() < end_seq {
            ledger.push_dead(SlotState::Lost, 0);
        }
        report.corruption.push(format!(
            "segment {first_seq}: bytes {offset}..{} unreadable ({reason}); seqs {lost_from}..{end_seq} (exclusive) lost",
            bytes.len()
        ));
    }
    Ok(scan.valid_end)
}

/// One step of a log scan.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scanned<'a> {
    /// A record that passed its checks.
    Record { seq: u64, timestamp_ns: i64, offset: u32, length: u32, subject: &'a str, headers: bool },
    /// The next sequence's record is destroyed.
    Lost,
    /// The next sequence was skipped (a skip marker covers it): never stored, counted deleted.
    Skipped { timestamp_ns: i64 },
    /// A rollback marker: `first..=last`, already reported by this scan, are removed.
    RolledBack { first: u64, last: u64 },
}

/// How a scan ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanEnd {
    /// Offset just past the last record accepted.
    pub valid_end: u64,
    /// Unreadable stretches followed by readable records (holes), described.
    pub damage: Vec<String>,
    /// Where an unreadable stretch with no readable record after it starts, and why.
    pub bad_tail: Option<(u64, &'static str)>,
    /// Whether a hole (`damage`) looks like a write that never reached the disk rather than
    /// rot: zeros up to a sector boundary (`lost_write_in`).
    pub lost_write: bool,
}

/// Walks the records of a whole log file, reporting each one, and steps over damage when a
/// readable record with a plausible sequence can be found after it.
pub(crate) fn scan_log<'a>(bytes: &'a [u8], first_seq: u64, emit: impl FnMut(Scanned<'a>)) -> ScanEnd {
    scan_log_with(bytes, first_seq, true, emit)
}

/// Walks the records of the active log: the first unreadable stretch that looks like a lost
/// write (`lost_write_in`) ends it, whatever follows. A write is lost only where no fsync
/// covered it (synced bytes survive), so nothing after it was acknowledged, and a drive writing
/// out of order may have kept later records while losing it: a rollback marker lost there must
/// not leave the records it removed in the middle of the stream, behind later ones. Other
/// damage (rot in synced records) is stepped over and reported, as in a sealed log.
pub(crate) fn scan_active_log<'a>(bytes: &'a [u8], first_seq: u64, emit: impl FnMut(Scanned<'a>)) -> ScanEnd {
    scan_log_with(bytes, first_seq, false, emit)
}

fn scan_log_with<'a>(bytes: &'a [u8], first_seq: u64, resyncs: bool, mut emit: impl FnMut(Scanned<'a>)) -> ScanEnd {
    let mut end = ScanEnd::default();
    let mut offset = sh::SIZE_BYTES.min(bytes.len());
    let mut expected = first_seq;
    while offset < bytes.len() {
        let reason = match record::check(&bytes[offset..]) {
            Ok(header) if is_skip_from(&header, expected) => {
                for _ in expected..=header.seq {
                    emit(Scanned::Skipped { timestamp_ns: header.timestamp_ns });
                }
                offset += header.length as usize;
                expected = header.seq + 1;
                continue;
            }
            Ok(header) if header.flags & rh::FLAG_ROLLBACK != 0 => {
                match rollback_behind(&bytes[offset..], &header, first_seq, expected) {
                    Some((first, last)) => {
                        emit(Scanned::RolledBack { first, last });
                        offset += header.length as usize;
                        continue;
                    }
                    None => "rollback marker naming sequences not behind it",
                }
            }
            Ok(header) if header.seq == expected && header.flags & rh::FLAG_SKIP == 0 => {
                // Offsets are `u32` in the index and the ledger: a record past that cannot be
                // one the store wrote, so it ends the readable part like any impossible framing.
                let Ok(record_offset) = u32::try_from(offset) else {
                    end.bad_tail = Some((offset as u64, "record offset beyond the format's u32"));
                    break;
                };
                let subject = record::subject_of(&bytes[offset..], &header);
                let timestamp_ns = header.timestamp_ns;
                emit(Scanned::Record {
                    seq: expected,
                    timestamp_ns,
                    offset: record_offset,
                    length: header.length,
                    subject,
                    headers: header.headers_length > 0,
                });
                offset += header.length as usize;
                expected += 1;
                continue;
            }
            Ok(_) => "unexpected sequence",
            Err(error) => error.describe(),
        };
        let found = resync(bytes, offset, expected);
        let lost_write = lost_write_in(bytes, offset, found.map_or(bytes.len(), |(next_offset, _)| next_offset));
        let Some((next_offset, next_seq)) = found.filter(|_| resyncs || !lost_write) else {
            end.bad_tail = Some((offset as u64, reason));
            break;
        };
        end.lost_write |= lost_write;
        end.damage.push(format!(
            "bytes {offset}..{next_offset} unreadable ({reason}); seqs {expected}..{next_seq} (exclusive) lost"
        ));
        for _ in expected..next_seq {
            emit(Scanned::Lost);
        }
        offset = next_offset;
        expected = next_seq;
    }
    end.valid_end = offset as u64;
    end
}

/// Whether the unreadable stretch `start..end` holds what a lost write leaves (the zeros of a
/// preallocated or extended file, read back for a sector the drive never wrote): at least
/// `LOST_WRITE_ZEROS_MIN_BYTES` zeros right before a sector boundary. Rot flips bits; it does
/// not zero a sector's end.
fn lost_write_in(bytes: &[u8], start: usize, end: usize) -> bool {
    let end = end.min(bytes.len());
    let first_boundary = (start + LOST_WRITE_ZEROS_MIN_BYTES).next_multiple_of(DISK_SECTOR_BYTES);
    (first_boundary..=end)
        .step_by(DISK_SECTOR_BYTES)
        .any(|boundary| bytes[boundary - LOST_WRITE_ZEROS_MIN_BYTES..boundary].iter().all(|&byte| byte == 0))
}

/// Whether an intact record is a skip marker covering `expected` onwards (and no more than a
/// marker is ever written to cover).
fn is_skip_from(header: &record::RecordHeader, expected: u64) -> bool {
    header.flags & rh::FLAG_SKIP != 0 && header.seq >= expected && header.seq - expected < SKIP_COUNT_MAX
}

/// The range an intact rollback marker removes, if it ends in this log before the marker (its
/// start may lie in earlier logs: a refused batch that rolled a segment) and it covers no more
/// than a marker is ever written to cover.
fn rollback_behind(record: &[u8], header: &record::RecordHeader, first_seq: u64, expected: u64) -> Option<(u64, u64)> {
    let (first, last) = record::rollback_range(record, header)?;
    let behind = first_seq <= last && first <= last && last < expected && last - first < ROLLBACK_COUNT_MAX;
    behind.then_some((first, last))
}

/// The next offset after `damage_start` holding an intact record whose sequence could follow
/// `expected` given how many bytes were skipped (each lost record took at least a header and a
/// one-byte subject).
fn resync(bytes: &[u8], damage_start: usize, expected: u64) -> Option<(usize, u64)> {
    let smallest_record_bytes = rh::SIZE_BYTES + 1;
    (damage_start + 1..bytes.len().saturating_sub(rh::SIZE_BYTES) + 1).find_map(|candidate| {
        let header = record::check_framing(&bytes[candidate..]).ok()?;
        let skipped_max = ((candidate - damage_start) / smallest_record_bytes) as u64;
        let plausible = header.seq >= expected && header.seq <= expected + skipped_max;
        let intact = plausible && record::check(&bytes[candidate..]).is_ok();
        intact.then_some((candidate, header.seq))
    })
}

/// Applies a segment's delete log to the ledger, past the `applied_bytes` a checkpoint already
/// holds; cuts a torn last entry so appends stay aligned.
fn apply_deletes(
    storage: &dyn Storage,
    dir: &Path,
    (segment, applied_bytes, end_seq): (&Segment, u64, u64),
    (ledger, report): (&mut Ledger<u32>, &mut RecoveryReport),
    syncs: &mut Syncs,
) -> StoreResult<()> {
    let path = segment.path(dir, DELETE_EXTENSION);
    let Some(mut bytes) = storage::read_if_present(storage, &path).map_err(io_error("read", &path))? else {
        return Ok(());
    };
    // The checkpoint's lengths are whole entries, checked against this file when it was taken up.
    let applied = usize::try_from(applied_bytes).unwrap_or(usize::MAX).min(bytes.len());
    if let Some(stale) = delete_log::first_at_or_past(&bytes[applied..], end_seq) {
        // The deletion of a record the crash took: it was never synced (a delete syncs the log
        // first), nor was anything written after it. Kept, it would delete the message that
        // takes the same sequence next.
        let whole = (applied + stale) as u64;
        cut_deletes(storage, &path, whole, syncs)?;
        bytes.truncate(applied + stale);
    }
    let unapplied = &bytes[applied..];
    let log = delete_log::decode(unapplied);
    for seq in log.seqs {
        ledger.remove(seq);
    }
    if log.damaged_count > 0 {
        let first_seq = segment.first_seq;
        report.corruption.push(format!("segment {first_seq}: {} delete records damaged", log.damaged_count));
    }
    if log.torn_bytes > 0 {
        let whole = (bytes.len() - log.torn_bytes) as u64;
        cut_deletes(storage, &path, whole, syncs)?;
    }
    Ok(())
}

/// Cuts the delete log at `path` to `length`, its fsync run or owed (`syncs`).
fn cut_deletes(storage: &dyn Storage, path: &Path, length: u64, syncs: &mut Syncs) -> StoreResult<()> {
    let file = storage.open(path, OpenMode::ReadWrite, 0).map_err(io_error("open", path))?;
    file.set_len(length).map_err(io_error("truncate", path))?;
    syncs.file(file.into(), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(seqs: &[u64]) -> Vec<u8> {
        let mut bytes = record::encode_segment_header(1).to_vec();
        for &seq in seqs {
            record::encode(&mut bytes, seq, 0, "s", None, b"0123456789").unwrap();
        }
        bytes
    }

    fn scan_events(bytes: &[u8]) -> (Vec<Option<u64>>, ScanEnd) {
        let mut events = Vec::new();
        let end = scan_log(bytes, 1, |event| {
            events.push(match event {
                Scanned::Record { seq, .. } => Some(seq),
                Scanned::Lost => None,
                Scanned::Skipped { .. } => Some(0),
                Scanned::RolledBack { first, last } => Some(u64::MAX - (last - first + 1)),
            })
        });
        (events, end)
    }

    #[test]
    fn a_clean_log_scans_to_its_end() {
        let bytes = log_of(&[1, 2, 3]);
        let (events, end) = scan_events(&bytes);
        assert_eq!(events, vec![Some(1), Some(2), Some(3)]);
        assert_eq!(end, ScanEnd { valid_end: bytes.len() as u64, ..ScanEnd::default() });
    }

    #[test]
    fn a_skip_marker_stands_for_the_sequences_it_covers() {
        let mut bytes = log_of(&[1, 2]);
        record::encode_skip(&mut bytes, 5, 0).unwrap();
        record::encode(&mut bytes, 6, 0, "s", None, b"0123456789").unwrap();
        let (events, end) = scan_events(&bytes);
        assert_eq!(events, vec![Some(1), Some(2), Some(0), Some(0), Some(0), Some(6)], "3, 4, 5 skipped");
        assert_eq!(end, ScanEnd { valid_end: bytes.len() as u64, ..ScanEnd::default() });
        // A marker behind the sequence expected, or covering more than a marker may, is damage.
        let mut behind = log_of(&[1, 2]);
        record::encode_skip(&mut behind, 1, 0).unwrap();
        assert!(scan_events(&behind).1.bad_tail.is_some());
        let mut too_wide = log_of(&[1]);
        record::encode_skip(&mut too_wide, 2 + SKIP_COUNT_MAX, 0).unwrap();
        assert!(scan_events(&too_wide).1.bad_tail.is_some());
    }

    #[test]
    fn a_rollback_marker_removes_the_records_behind_it_and_takes_no_sequence() {
        let removed_two = Some(u64::MAX - 2);
        let mut bytes = log_of(&[1, 2, 3]);
        record::encode_rollback(&mut bytes, (2, 3), 0).unwrap();
        record::encode(&mut bytes, 4, 0, "s", None, b"0123456789").unwrap();
        let (events, end) = scan_events(&bytes);
        assert_eq!(events, vec![Some(1), Some(2), Some(3), removed_two, Some(4)]);
        assert_eq!(end, ScanEnd { valid_end: bytes.len() as u64, ..ScanEnd::default() });
        // One starting in an earlier log (a refused batch that rolled one) ends in this one.
        let mut across = log_of(&[1, 2, 3]);
        record::encode_rollback(&mut across, (0, 2), 0).unwrap();
        let (events, end) = scan_events(&across);
        assert_eq!((events.last(), end.bad_tail), (Some(&Some(u64::MAX - 3)), None));
        // A marker naming a sequence not yet in the log, ending before the log's first, or
        // backwards, is damage.
        for range in [(3, 4), (0, 0), (3, 2)] {
            let mut ahead = log_of(&[1, 2, 3]);
            record::encode_rollback(&mut ahead, range, 0).unwrap();
            assert!(scan_events(&ahead).1.bad_tail.is_some(), "{range:?}");
        }
    }

    #[test]
    fn a_partial_last_record_is_a_bad_tail() {
        let bytes = log_of(&[1, 2, 3]);
        let record_length = (bytes.len() - sh::SIZE_BYTES) / 3;
        let (events, end) = scan_events(&bytes[..bytes.len() - 5]);
        assert_eq!(events, vec![Some(1), Some(2)]);
        assert_eq!(usize::try_from(end.valid_end).unwrap(), sh::SIZE_BYTES + 2 * record_length);
        assert!(end.bad_tail.is_some() && end.damage.is_empty());
    }

    #[test]
    fn a_damaged_middle_record_is_a_hole_and_the_rest_is_kept() {
        let mut bytes = log_of(&[1, 2, 3]);
        let record_length = (bytes.len() - sh::SIZE_BYTES) / 3;
        bytes[sh::SIZE_BYTES + record_length + rh::SIZE_BYTES + 3] ^= 0xff;
        let (events, end) = scan_events(&bytes);
        assert_eq!(events, vec![Some(1), None, Some(3)]);
        assert_eq!(end.damage.len(), 1);
        assert_eq!(end.bad_tail, None);
    }

    #[test]
    fn a_damaged_length_field_is_stepped_over() {
        let mut bytes = log_of(&[1, 2, 3, 4]);
        let record_length = (bytes.len() - sh::SIZE_BYTES) / 4;
        bytes[sh::SIZE_BYTES + record_length + 2] = 0x7f;
        let (events, end) = scan_events(&bytes);
        assert_eq!(events, vec![Some(1), None, Some(3), Some(4)]);
        assert_eq!(usize::try_from(end.valid_end).unwrap(), bytes.len());
    }
}
