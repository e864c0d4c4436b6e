//! The stream checkpoint (`stream.ckpt`): the derived state of the sealed segments, so open
//! reads it and the active segment instead of every sealed index.
//!
//! It holds, as of one moment after a full sync: the oldest live sequence, where the sealed
//! segments end, each sealed segment's identity (log and index lengths, the index header's
//! checksum, the delete log's length) with its live bits, count and bytes, and every subject's
//! count and bounds over the sealed segments. Written whole through `write_atomic` with a
//! CRC-32 trailer. At open it is used only if everything it names is still on disk as it says
//! (see [`restore`]); what changed since (deletions appended to delete logs, a higher floor,
//! segments sealed after it) is replayed over it, exactly as a full open would apply it.
//! Anything else makes open ignore it and read the indexes (a damaged or stale checkpoint
//! costs time, never state).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{fit, StoreResult};
use crate::index::parse_subjects;
use crate::ledger::Ledger;
use crate::limits::{checkpoint as ck, index_entry as ie, index_header as ih, segment_header as sh};
use crate::record::{read_u32, read_u64};
use crate::sealed::{LiveBits, SealedSegment};
use crate::segment::{segment_path, Segment, DELETE_EXTENSION, INDEX_EXTENSION, LOG_EXTENSION};
use crate::storage::{self, OpenMode, SharedStorage, Storage};
use crate::subjects::SubjectRecord;
use crate::types::StoreLimits;

/// File name of the checkpoint inside a stream directory.
pub(crate) const CHECKPOINT_FILE_NAME: &str = "stream.ckpt";

/// A segment's live bits as stored: the runs of dead sequences when that is smaller, else
/// the bit words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredBits {
    /// `(start, length)` relative to the segment's first sequence, sorted, not overlapping.
    DeadRuns(Vec<(u64, u64)>),
    Words(Vec<u64>),
}

/// One sealed segment in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentRecord {
    pub first_seq: u64,
    pub end_seq: u64,
    pub log_length: u64,
    pub index_length: u64,
    /// The index header's own CRC (which covers the body's).
    pub index_crc: u32,
    /// The delete log's length (0: none); entries past it came after the checkpoint.
    pub delete_length: u64,
    pub live_count: u64,
    pub live_bytes: u64,
    pub lost_count: u64,
    pub live: StoredBits,
}

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub first_seq: u64,
    /// One past the last sealed sequence: the active segment's first then.
    pub end_seq: u64,
    pub last_ts: i64,
    pub segments: Vec<SegmentRecord>,
    pub subjects: Vec<SubjectRecord>,
}

/// `bits`'s dead runs among the first `count` bits, or its words when they are smaller.
pub(crate) fn store_bits(bits: &LiveBits, count: u64) -> StoredBits {
    let words = bits.words();
    let words_bytes = words.len() * 8;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut index = 0;
    while index < count {
        let word = words.get(usize::try_from(index / 64).unwrap_or(usize::MAX)).copied().unwrap_or(0);
        if index % 64 == 0 && word == u64::MAX && index + 64 <= count {
            index += 64;
            continue;
        }
        if !bits.get(index) {
            match runs.last_mut() {
                Some((start, length)) if *start + *length == index => *length += 1,
                _ => runs.push((index, 1)),
            }
            if runs.len() * 16 >= words_bytes {
                return StoredBits::Words(words.to_vec());
            }
        }
        index += 1;
    }
    StoredBits::DeadRuns(runs)
}

/// The live bits `stored` describes for a segment of `count` sequences; `None` when they do
/// not fit it or do not add up to `live_count`.
fn live_bits(stored: &StoredBits, count: u64, live_count: u64) -> Option<LiveBits> {
    let bits = match stored {
        StoredBits::Words(words) => LiveBits::from_words(words.clone(), count)?,
        StoredBits::DeadRuns(runs) => {
            let mut bits = LiveBits::new(count);
            let mut next_free = 0;
            let mut dead = runs.iter().peekable();
            for (start, length) in runs {
                if *start < next_free || start.checked_add(*length)? > count {
                    return None;
                }
                next_free = start + length;
            }
            let mut index = 0;
            while index < count {
                match dead.peek() {
                    Some(&&(start, length)) if start == index => {
                        index += length;
                        dead.next();
                    }
                    _ => {
                        bits.set(index);
                        index += 1;
                    }
                }
            }
            bits
        }
    };
    // Bits past the end would be counted by no one: a checkpoint with any is not ours.
    (bits.count() == live_count && bits.next_set(count, count.div_ceil(64) * 64).is_none()).then_some(bits)
}

/// The checkpoint's bytes.
pub(crate) fn encode(checkpoint: &Checkpoint) -> StoreResult<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(&ck::MAGIC.to_le_bytes());
    out.extend_from_slice(&ck::VERSION.to_le_bytes());
    for value in [checkpoint.first_seq, checkpoint.end_seq] {
        out.extend_from_slice(&value.to_le_bytes());
    }
    out.extend_from_slice(&checkpoint.last_ts.to_le_bytes());
    out.extend_from_slice(&fit::<u32, _>("checkpoint segment count", checkpoint.segments.len())?.to_le_bytes());
    out.extend_from_slice(&fit::<u32, _>("checkpoint subject count", checkpoint.subjects.len())?.to_le_bytes());
    for segment in &checkpoint.segments {
        let fields = [
            segment.first_seq,
            segment.end_seq,
            segment.log_length,
            segment.index_length,
            segment.delete_length,
            segment.live_count,
            segment.live_bytes,
            segment.lost_count,
        ];
        for value in fields {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(&segment.index_crc.to_le_bytes());
        match &segment.live {
            StoredBits::DeadRuns(runs) => {
                out.extend_from_slice(&ck::BITS_DEAD_RUNS.to_le_bytes());
                out.extend_from_slice(&fit::<u32, _>("checkpoint run count", runs.len())?.to_le_bytes());
                for (start, length) in runs {
                    out.extend_from_slice(&start.to_le_bytes());
                    out.extend_from_slice(&length.to_le_bytes());
                }
            }
            StoredBits::Words(words) => {
                out.extend_from_slice(&ck::BITS_WORDS.to_le_bytes());
                out.extend_from_slice(&fit::<u32, _>("checkpoint word count", words.len())?.to_le_bytes());
                for word in words {
                    out.extend_from_slice(&word.to_le_bytes());
                }
            }
        }
    }
    for subject in &checkpoint.subjects {
        out.extend_from_slice(&fit::<u16, _>("checkpoint subject length", subject.name.len())?.to_le_bytes());
        out.extend_from_slice(subject.name.as_bytes());
        for value in [subject.count, subject.first, subject.last] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.push(u8::from(subject.first_exact) | u8::from(subject.last_exact) << 1);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Reads fields in order; every read is checked against what is left.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8], &'static str> {
        if self.bytes.len() < length {
            return Err("checkpoint truncated");
        }
        let (taken, rest) = self.bytes.split_at(length);
        self.bytes = rest;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        self.take(8).map(|bytes| read_u64(bytes, 0))
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        self.take(4).map(|bytes| read_u32(bytes, 0))
    }
}

/// Decodes a checkpoint, checking its CRC first; allocates nothing its bytes do not back.
pub(crate) fn decode(bytes: &[u8]) -> Result<Checkpoint, &'static str> {
    let body_length = bytes.len().checked_sub(4).ok_or("checkpoint shorter than its checksum")?;
    let (body, crc) = bytes.split_at(body_length);
    if crc32fast::hash(body) != read_u32(crc, 0) {
        return Err("checkpoint checksum mismatch");
    }
    let mut cursor = Cursor { bytes: body };
    if cursor.u32()? != ck::MAGIC || cursor.u32()? != ck::VERSION {
        return Err("not a checkpoint of this version");
    }
    let (first_seq, end_seq) = (cursor.u64()?, cursor.u64()?);
    let last_ts = cursor.u64()?.cast_signed();
    let (segment_count, subject_count) = (cursor.u32()?, cursor.u32()?);
    let mut segments = Vec::new();
    for _ in 0..segment_count {
        segments.push(decode_segment(&mut cursor)?);
    }
    let mut subjects = Vec::new();
    for _ in 0..subject_count {
        let length = u16::from_le_bytes([cursor.take(1)?[0], cursor.take(1)?[0]]) as usize;
        let name = std::str::from_utf8(cursor.take(length)?).map_err(|_| "subject is not UTF-8")?.to_string();
        let (count, first, last) = (cursor.u64()?, cursor.u64()?, cursor.u64()?);
        let flags = cursor.take(1)?[0];
        subjects.push(SubjectRecord {
            name,
            count,
            first,
            last,
            first_exact: flags & 1 != 0,
            last_exact: flags & 2 != 0,
        });
    }
    if !cursor.bytes.is_empty() {
        return Err("checkpoint has trailing bytes");
    }
    Ok(Checkpoint { first_seq, end_seq, last_ts, segments, subjects })
}

fn decode_segment(cursor: &mut Cursor<'_>) -> Result<SegmentRecord, &'static str> {
    let mut fields = [0u64; 8];
    for field in &mut fields {
        *field = cursor.u64()?;
    }
    let [first_seq, end_seq, log_length, index_length, delete_length, live_count, live_bytes, lost_count] = fields;
    let index_crc = cursor.u32()?;
    let (kind, item_count) = (cursor.u32()?, cursor.u32()?);
    let live = match kind {
        ck::BITS_DEAD_RUNS => {
            let mut runs = Vec::new();
            for _ in 0..item_count {
                runs.push((cursor.u64()?, cursor.u64()?));
            }
            StoredBits::DeadRuns(runs)
        }
        ck::BITS_WORDS => {
            let mut words = Vec::new();
            for _ in 0..item_count {
                words.push(cursor.u64()?);
            }
            StoredBits::Words(words)
        }
        _ => return Err("unknown live bits encoding"),
    };
    Ok(SegmentRecord {
        first_seq,
        end_seq,
        log_length,
        index_length,
        index_crc,
        delete_length,
        live_count,
        live_bytes,
        lost_count,
        live,
    })
}

/// Writes the checkpoint (temporary file, fsync, rename, directory fsync).
fn write(storage: &dyn Storage, dir: &Path, checkpoint: &Checkpoint) -> StoreResult<()> {
    let path = dir.join(CHECKPOINT_FILE_NAME);
    storage::write_atomic(storage, &path, &encode(checkpoint)?, 0).map_err(crate::error::io_error("write", &path))
}

/// The order of one store's checkpoint writes, shared with its [`CheckpointTicket`]: a write
/// holds `written` throughout, so a checkpoint captured earlier never replaces a later one;
/// the flags are read without waiting for a write in progress.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    /// The capture number of the newest checkpoint this store wrote (0: none).
    written: Mutex<u64>,
    /// A ticket was taken and has not ended: the store takes no other.
    ticket_out: AtomicBool,
    /// A ticket ended without its checkpoint written: the store makes one due again.
    ticket_failed: AtomicBool,
    /// Damage was found and the checkpoint removed: nothing is written again, so the next open
    /// checks every index.
    retired: AtomicBool,
}

impl Writes {
    /// Writes `checkpoint`, capture number `capture`, unless a later one was written or the
    /// checkpoint retired; waits for a write in progress.
    pub(crate) fn write(
        &self,
        storage: &dyn Storage,
        dir: &Path,
        checkpoint: &Checkpoint,
        capture: u64,
    ) -> StoreResult<()> {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if self.retired.load(Ordering::Acquire) || capture <= *written {
            return Ok(());
        }
        write(storage, dir, checkpoint)?;
        *written = capture;
        Ok(())
    }

    /// Whether a ticket ended without its checkpoint written since the last call.
    pub(crate) fn take_ticket_failure(&self) -> bool {
        self.ticket_failed.swap(false, Ordering::AcqRel)
    }

    /// Whether a ticket is out.
    pub(crate) fn ticket_out(&self) -> bool {
        self.ticket_out.load(Ordering::Acquire)
    }

    /// Removes the checkpoint for good (see `retired`), after a write in progress.
    pub(crate) fn retire(&self, storage: &dyn Storage, dir: &Path) {
        let _written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        self.retired.store(true, Ordering::Release);
        let _ = storage.remove_file(&dir.join(CHECKPOINT_FILE_NAME));
    }
}

/// A checkpoint captured under the store's lock at the end of a commit, to be written with the
/// lock let go (a temporary file, two fsyncs and a rename), after the commit's acknowledgements:
/// it describes what was durable at the capture, so later changes never make it wrong, only
/// stale (open catches it up or ignores it). Dropped unrun, the store makes one due again.
#[must_use = "run it, or the store writes the checkpoint at a later commit"]
pub struct CheckpointTicket {
    storage: SharedStorage,
    dir: PathBuf,
    checkpoint: Checkpoint,
    capture: u64,
    writes: Arc<Writes>,
    written: bool,
}

impl std::fmt::Debug for CheckpointTicket {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CheckpointTicket").field("dir", &self.dir).field("capture", &self.capture).finish()
    }
}

impl CheckpointTicket {
    /// A ticket for `checkpoint`, the store's `capture`-th, marked out in `writes`.
    pub(crate) fn new(
        storage: SharedStorage,
        dir: PathBuf,
        (checkpoint, capture): (Checkpoint, u64),
        writes: Arc<Writes>,
    ) -> Self {
        writes.ticket_out.store(true, Ordering::Release);
        Self { storage, dir, checkpoint, capture, writes, written: false }
    }

    /// Writes the checkpoint unless a later one was written meanwhile. A failure leaves the
    /// older checkpoint, which open finds stale; the store tries again at a later commit.
    pub fn run(mut self) {
        self.written = self.writes.write(&*self.storage, &self.dir, &self.checkpoint, self.capture).is_ok();
    }
}

impl Drop for CheckpointTicket {
    fn drop(&mut self) {
        if !self.written {
            self.writes.ticket_failed.store(true, Ordering::Release);
        }
        self.writes.ticket_out.store(false, Ordering::Release);
    }
}

/// What a usable checkpoint gives open: the ledger with the checkpointed sealed segments, those
/// segments, and where each one's delete log continues past what the checkpoint applied.
pub(crate) struct Restored {
    pub ledger: Ledger<u32>,
    pub segments: Vec<Segment>,
    pub delete_offsets: Vec<u64>,
    pub lost: Vec<(u64, u64)>,
}

/// The state the checkpoint in `dir` gives, if it is usable: intact, its segments the first of
/// `firsts` (the segments on disk, the last one active) and each exactly as it recorded (log
/// and index lengths, index header and checksum, a delete log at least as long), its oldest
/// live sequence at or below the persisted floor, and its counts adding up. `None` otherwise:
/// open then reads every index. Failures to read count as unusable; a full open meets them again.
pub(crate) fn restore(
    storage: &dyn Storage,
    dir: &Path,
    firsts: &[u64],
    floor_seq: u64,
    limits: &StoreLimits,
) -> Option<Restored> {
    let bytes = storage::read_if_present(storage, &dir.join(CHECKPOINT_FILE_NAME)).ok()??;
    let checkpoint = decode(&bytes).ok()?;
    let count = checkpoint.segments.len();
    let covered = count > 0
        && count < firsts.len()
        && firsts.get(count) == Some(&checkpoint.end_seq)
        && checkpoint.segments.iter().zip(firsts).all(|(segment, &first)| segment.first_seq == first)
        && checkpoint.segments.windows(2).all(|pair| pair[0].end_seq == pair[1].first_seq)
        && checkpoint.segments.last().map(|segment| segment.end_seq) == Some(checkpoint.end_seq)
        && checkpoint.first_seq <= floor_seq.max(1)
        && checkpoint.first_seq <= checkpoint.end_seq;
    let live_total: u64 = checkpoint.segments.iter().map(|segment| segment.live_count).sum();
    let subject_total = checkpoint.subjects.iter().try_fold(0u64, |total, subject| total.checked_add(subject.count));
    if !covered || subject_total != Some(live_total) {
        return None;
    }
    let bounds = (checkpoint.first_seq, checkpoint.end_seq, checkpoint.last_ts);
    let mut ledger = Ledger::restore(limits.clone(), bounds, checkpoint.subjects).ok()??;
    let (mut segments, mut delete_offsets, mut lost) = (Vec::new(), Vec::new(), Vec::new());
    for record in &checkpoint.segments {
        segments.push(restore_segment(storage, dir, record, checkpoint.first_seq, &mut ledger)?);
        delete_offsets.push(record.delete_length);
        if record.lost_count > 0 {
            lost.push((record.first_seq, record.lost_count));
        }
    }
    Some(Restored { ledger, segments, delete_offsets, lost })
}

/// Checks one checkpointed segment against the disk and adds it to the ledger.
fn restore_segment(
    storage: &dyn Storage,
    dir: &Path,
    record: &SegmentRecord,
    first_live: u64,
    ledger: &mut Ledger<u32>,
) -> Option<Segment> {
    let count = record.end_seq.checked_sub(record.first_seq)?;
    let log_path = segment_path(dir, record.first_seq, LOG_EXTENSION);
    let delete_path = segment_path(dir, record.first_seq, DELETE_EXTENSION);
    let delete_length = match storage.file_length(&delete_path) {
        Ok(length) => length,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
        Err(_) => return None,
    };
    let whole_entries = record.delete_length.is_multiple_of(crate::limits::delete_entry::SIZE_BYTES as u64);
    let log_fits =
        storage.file_length(&log_path).ok()? == record.log_length && record.log_length >= sh::SIZE_BYTES as u64;
    if !log_fits || delete_length < record.delete_length || !whole_entries {
        return None;
    }
    let index_path = segment_path(dir, record.first_seq, INDEX_EXTENSION);
    let index = storage.open(&index_path, OpenMode::Read, 0).ok()?;
    let mut header = [0u8; ih::SIZE_BYTES];
    index.read_at(&mut header, 0).ok()?;
    let entries_bytes = count.checked_mul(ie::SIZE_BYTES as u64)?;
    let subjects_length = u64::from(read_u32(&header, ih::SUBJECTS_LENGTH_OFFSET));
    let header_fits = read_u32(&header, ih::MAGIC_OFFSET) == ih::MAGIC
        && read_u32(&header, ih::VERSION_OFFSET) == ih::VERSION
        && crc32fast::hash(&header[..ih::HEADER_CRC_OFFSET]) == read_u32(&header, ih::HEADER_CRC_OFFSET)
        && read_u32(&header, ih::HEADER_CRC_OFFSET) == record.index_crc
        && read_u64(&header, ih::FIRST_SEQ_OFFSET) == record.first_seq
        && read_u64(&header, ih::LOG_LENGTH_OFFSET) == record.log_length
        && u64::from(read_u32(&header, ih::ENTRY_COUNT_OFFSET)) == count
        && index.length().ok()? == record.index_length
        && ih::SIZE_BYTES as u64 + entries_bytes + subjects_length == record.index_length;
    if !header_fits {
        return None;
    }
    // From here on every size has been checked against the files themselves.
    let live = live_bits(&record.live, count, record.live_count)?;
    let mut table = vec![0u8; usize::try_from(subjects_length).ok()?];
    index.read_at(&mut table, ih::SIZE_BYTES as u64 + entries_bytes).ok()?;
    let subject_count = read_u32(&header, ih::SUBJECT_COUNT_OFFSET) as usize;
    let names = parse_subjects(&table, subject_count).ok()?;
    let mut segment = Segment::open(storage, dir, record.first_seq, true).ok()?;
    segment.set_index_bytes(record.index_length);
    if record.end_seq > first_live {
        let sealed = SealedSegment {
            first_seq: record.first_seq,
            end_seq: record.end_seq,
            live,
            live_count: record.live_count,
            live_bytes: record.live_bytes,
            lost_count: record.lost_count,
            subjects: Vec::new(),
            file: index,
            path: index_path,
        };
        ledger.restore_segment(sealed, &names);
    }
    Some(segment)
}

/// The checkpoint of a store whose every change is durable: `sealed` lists its sealed
/// segments on disk as `(first_seq, end_seq, log_length)`.
pub(crate) fn capture(
    storage: &dyn Storage,
    dir: &Path,
    ledger: &Ledger<u32>,
    sealed: &[(u64, u64, u64)],
) -> StoreResult<Option<Checkpoint>> {
    let Some(&(_, end_seq, _)) = sealed.last() else { return Ok(None) };
    // Every segment the tier holds must be one on disk with the same range: a checkpoint
    // must never call a message gone because the two disagree.
    let on_disk: std::collections::HashSet<(u64, u64)> = sealed.iter().map(|&(first, end, _)| (first, end)).collect();
    if !ledger.sealed().segments().all(|held| on_disk.contains(&(held.first_seq, held.end_seq))) {
        return Ok(None);
    }
    let mut tier = ledger.sealed().segments().peekable();
    let mut segments = Vec::with_capacity(sealed.len());
    for &(first_seq, segment_end, log_length) in sealed {
        while tier.peek().is_some_and(|held| held.first_seq < first_seq) {
            tier.next();
        }
        let held = tier.peek().filter(|held| held.first_seq == first_seq && held.end_seq == segment_end);
        let count = segment_end - first_seq;
        let (live, live_count, live_bytes, lost_count) = match held {
            Some(held) => (store_bits(&held.live, count), held.live_count, held.live_bytes, held.lost_count),
            // The tier let it go: every sequence in it is gone.
            None => (StoredBits::DeadRuns(if count > 0 { vec![(0, count)] } else { Vec::new() }), 0, 0, 0),
        };
        let index_path = segment_path(dir, first_seq, INDEX_EXTENSION);
        let io = crate::error::io_error;
        let index = storage.open(&index_path, OpenMode::Read, 0).map_err(io("open", &index_path))?;
        let mut header = [0u8; ih::SIZE_BYTES];
        index.read_at(&mut header, 0).map_err(io("read", &index_path))?;
        let index_length = index.length().map_err(io("stat", &index_path))?;
        let delete_path = segment_path(dir, first_seq, DELETE_EXTENSION);
        let delete_length = storage.file_length(&delete_path).unwrap_or(0);
        segments.push(SegmentRecord {
            first_seq,
            end_seq: segment_end,
            log_length,
            index_length,
            index_crc: read_u32(&header, ih::HEADER_CRC_OFFSET),
            delete_length,
            live_count,
            live_bytes,
            lost_count,
            live,
        });
    }
    let first_seq = ledger.first_seq().min(end_seq);
    let last_ts = ledger.sealed().last_ts;
    Ok(Some(Checkpoint { first_seq, end_seq, last_ts, segments, subjects: ledger.sealed_subjects() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        let mut bits = LiveBits::new(130);
        for index in (0..130).filter(|index| index % 7 != 0) {
            bits.set(index);
        }
        Checkpoint {
            first_seq: 3,
            end_seq: 231,
            last_ts: -5,
            segments: vec![
                SegmentRecord {
                    first_seq: 1,
                    end_seq: 101,
                    log_length: 5000,
                    index_length: 3300,
                    index_crc: 7,
                    delete_length: 24,
                    live_count: 98,
                    live_bytes: 9800,
                    lost_count: 0,
                    live: StoredBits::DeadRuns(vec![(0, 2)]),
                },
                SegmentRecord {
                    first_seq: 101,
                    end_seq: 231,
                    log_length: 6000,
                    index_length: 4200,
                    index_crc: 9,
                    delete_length: 0,
                    live_count: 111,
                    live_bytes: 11100,
                    lost_count: 1,
                    live: store_bits(&bits, 130),
                },
            ],
            subjects: vec![SubjectRecord {
                name: "orders.eu".into(),
                count: 209,
                first: 3,
                last: 230,
                first_exact: true,
                last_exact: false,
            }],
        }
    }

    #[test]
    fn a_checkpoint_round_trips_and_any_flipped_bit_is_refused() {
        let checkpoint = sample();
        let bytes = encode(&checkpoint).unwrap();
        assert_eq!(decode(&bytes), Ok(checkpoint));
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x10;
            assert!(decode(&damaged).is_err(), "flip at byte {index} went unnoticed");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn live_bits_are_stored_as_the_smaller_of_runs_and_words_and_come_back() {
        let mut mostly_live = LiveBits::new(1000);
        (0..1000).filter(|index| !(10..20).contains(index)).for_each(|index| mostly_live.set(index));
        assert_eq!(store_bits(&mostly_live, 1000), StoredBits::DeadRuns(vec![(10, 10)]));
        assert_eq!(live_bits(&StoredBits::DeadRuns(vec![(10, 10)]), 1000, 990), Some(mostly_live));
        let mut alternating = LiveBits::new(1000);
        (0..1000).step_by(2).for_each(|index| alternating.set(index));
        let stored = store_bits(&alternating, 1000);
        assert!(matches!(stored, StoredBits::Words(_)));
        assert_eq!(live_bits(&stored, 1000, 500), Some(alternating));
        assert_eq!(live_bits(&stored, 1000, 499), None, "the count must add up");
        assert_eq!(live_bits(&StoredBits::DeadRuns(vec![(5, 10), (8, 2)]), 1000, 985), None, "overlapping runs");
        assert_eq!(live_bits(&StoredBits::DeadRuns(vec![(995, 10)]), 1000, 995), None, "a run past the end");
    }
}
