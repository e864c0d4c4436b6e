//! Reading a stopped stream's files without changing them (`semaq verify --dir`).
//!
//! Unlike [`crate::FileStore::open`], nothing is written: no torn tail cut, no index rebuilt, no
//! floor applied. The directory is read under a shared lock on its meta file, which a running
//! store's exclusive lock excludes, so a reader never sees files a server is changing, and a
//! server cannot start on them while they are read. Messages come out in sequence order
//! straight from the segment logs (one segment in memory at a time); sequences below the floor
//! (raised, as open raises it, to a segment started behind a skip), in a delete log or removed by a
//! rollback marker are left out, and records that cannot be read are reported as such.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::delete_log;
use crate::error::{io_error, StoreResult};
use crate::index::IndexFile;
use crate::limits::{index_entry as ie, record_header as rh, SEALS_PENDING_MAX_COUNT};
use crate::meta;
use crate::record;
use crate::recovery::{floor_after_skip, scan_active_log, scan_log, Scanned};
use crate::segment::{parse_segment_name, segment_path, DELETE_EXTENSION, INDEX_EXTENSION, LOG_EXTENSION};
use crate::storage::{self, SharedStorage, StdDisk, StorageFile};
use crate::types::MessageRef;

/// One step of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadItem<'a> {
    /// A stored message whose record passed its checksum.
    Message(MessageRef<'a>),
    /// A sequence the stream should hold whose record cannot be read (or no segment holds).
    Unreadable {
        /// The sequence.
        seq: u64,
        /// Why.
        detail: String,
    },
}

/// What a read saw besides the items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Bytes at the end of the last segment that are not a whole record: a write cut short by a
    /// crash, never acknowledged (the server cuts them when it next opens the stream).
    pub torn_tail_bytes: u64,
}

/// A stopped stream directory opened for reading; see the module doc.
#[derive(Debug)]
pub struct LogReader {
    dir: PathBuf,
    storage: SharedStorage,
    /// Holds the shared lock while the reader lives.
    _lock: Option<Box<dyn StorageFile>>,
    floor_seq: u64,
    /// First sequences of the segments, sorted.
    segments: Vec<u64>,
}

impl LogReader {
    /// Opens `dir` (a stream's `msgs` directory); `StoreError::Locked` when a store has it open.
    pub fn open(dir: &Path) -> StoreResult<Self> {
        Self::open_on(StdDisk::shared(), dir)
    }

    /// [`LogReader::open`] on the given storage.
    pub fn open_on(storage: SharedStorage, dir: &Path) -> StoreResult<Self> {
        let (lock, floor_seq) = meta::read_floor_shared(&*storage, dir)?;
        // As recovery does: a segment started behind a skip made durable before its floor
        // (a crash in between) says nothing below it was live, whatever the meta file says.
        let floor_seq = floor_after_skip(&*storage, dir, floor_seq)?.unwrap_or(floor_seq);
        let names = storage.list_dir(dir).map_err(io_error("list", dir))?;
        let mut segments: Vec<u64> = names.iter().filter_map(|name| parse_segment_name(name, LOG_EXTENSION)).collect();
        segments.sort_unstable();
        Ok(LogReader { dir: dir.to_path_buf(), storage, _lock: lock, floor_seq, segments })
    }

    /// The first sequence the stream can hold: everything below it was removed from the head.
    pub fn first_seq(&self) -> u64 {
        let first_segment = self.segments.first().copied().unwrap_or(self.floor_seq);
        self.floor_seq.max(first_segment).max(1)
    }

    /// Hands every item from `from_seq` on to `visit`, in sequence order, until it says `Break`.
    pub fn read(
        &self,
        from_seq: u64,
        mut visit: impl FnMut(ReadItem<'_>) -> ControlFlow<()>,
    ) -> StoreResult<ReadSummary> {
        let start = from_seq.max(self.first_seq());
        let mut summary = ReadSummary::default();
        let mut expected = start;
        for (position, &first_seq) in self.segments.iter().enumerate() {
            let end_seq = self.segments.get(position + 1).copied();
            if end_seq.is_some_and(|end| end <= start) {
                continue;
            }
            if first_seq > expected {
                let detail = format!("no segment holds seqs {expected}..{first_seq} (exclusive)");
                if visit(ReadItem::Unreadable { seq: expected, detail }).is_break() {
                    return Ok(summary);
                }
            }
            let later = &self.segments[(position + 1).min(self.segments.len())..];
            let later = &later[..later.len().min(SEALS_PENDING_MAX_COUNT)];
            let segment = SegmentRead { storage: &*self.storage, dir: &self.dir, first_seq, end_seq, start, later };
            match segment.read(&mut expected, &mut visit)? {
                SegmentEnd::Stopped => return Ok(summary),
                SegmentEnd::Done { torn_tail_bytes } => summary.torn_tail_bytes += torn_tail_bytes,
            }
        }
        Ok(summary)
    }
}

/// How reading one segment ended.
enum SegmentEnd {
    Stopped,
    Done { torn_tail_bytes: u64 },
}

/// One segment to read: `first_seq..end_seq` (`None`: the last, active one), from `start`.
struct SegmentRead<'a> {
    storage: &'a dyn storage::Storage,
    dir: &'a Path,
    first_seq: u64,
    end_seq: Option<u64>,
    start: u64,
    /// The next logs' first sequences, as many as seals may be pending: a rollback marker in
    /// one of them may remove this segment's records while its index is not written.
    later: &'a [u64],
}

impl SegmentRead<'_> {
    fn read(
        &self,
        expected: &mut u64,
        visit: &mut impl FnMut(ReadItem<'_>) -> ControlFlow<()>,
    ) -> StoreResult<SegmentEnd> {
        let path = segment_path(self.dir, self.first_seq, LOG_EXTENSION);
        let bytes = self.storage.read(&path).map_err(io_error("read", &path))?;
        let mut deleted = self.deleted()?;
        self.rolled_back_later(bytes.len() as u64, &mut deleted)?;
        // A rollback marker follows the records it removes: collected first, so that they are
        // left out as deleted ones are.
        // The active log ends at its first unreadable stretch, as open cuts it there.
        let scan = if self.end_seq.is_some() { scan_log } else { scan_active_log };
        scan(&bytes, self.first_seq, |event| {
            if let Scanned::RolledBack { first, last } = event {
                deleted.extend(first..=last);
            }
        });
        let mut stopped = false;
        let mut step = |item: ReadItem<'_>| {
            if !stopped {
                stopped = visit(item).is_break();
            }
        };
        if record::decode_segment_header(&bytes) != Some(self.first_seq) {
            let detail = format!("segment {} has a damaged header or names another sequence", self.first_seq);
            step(ReadItem::Unreadable { seq: self.first_seq.max(self.start), detail });
        }
        let mut next = self.first_seq;
        let scan = if self.end_seq.is_some() { scan_log } else { scan_active_log };
        let scan = scan(&bytes, self.first_seq, |event| {
            if matches!(event, Scanned::RolledBack { .. }) {
                return; // takes no sequence; its range was collected above
            }
            let seq = next;
            next += 1;
            if seq < self.start || deleted.contains(&seq) {
                return;
            }
            match event {
                Scanned::Record { offset, length, .. } => {
                    let record = &bytes[offset as usize..offset as usize + length as usize];
                    step(ReadItem::Message(message_of(record, seq)));
                }
                Scanned::Lost => step(ReadItem::Unreadable { seq, detail: "damaged record".into() }),
                // Never stored: nothing to read, as for a deleted message.
                Scanned::Skipped { .. } | Scanned::RolledBack { .. } => {}
            }
        });
        *expected = (*expected).max(next);
        let mut torn_tail_bytes = 0;
        if let Some((offset, reason)) = scan.bad_tail {
            match self.end_seq {
                // A sealed segment was complete when sealed: unreadable bytes are damage.
                Some(_) => step(ReadItem::Unreadable {
                    seq: next.max(self.start),
                    detail: format!("bytes from {offset} on: {reason}"),
                }),
                // Zeros alone were written ahead of the appends (preallocation), not torn.
                None if zeros_from(&bytes, offset) => {}
                None => torn_tail_bytes = bytes.len() as u64 - offset,
            }
            *expected = self.end_seq.unwrap_or(next).max(*expected);
        }
        Ok(if stopped { SegmentEnd::Stopped } else { SegmentEnd::Done { torn_tail_bytes } })
    }

    /// Adds this sealed segment's sequences that rollback markers in later logs removed: its
    /// index marks them deleted once written (it is written after such a marker), and before
    /// that the marker lies in one of the next logs.
    fn rolled_back_later(&self, log_length: u64, deleted: &mut HashSet<u64>) -> StoreResult<()> {
        let Some(end_seq) = self.end_seq else { return Ok(()) };
        let index_path = segment_path(self.dir, self.first_seq, INDEX_EXTENSION);
        let index = storage::read_if_present(self.storage, &index_path).map_err(io_error("read", &index_path))?;
        if let Some(Ok(index)) = index.as_deref().map(|bytes| IndexFile::parse(bytes, self.first_seq, log_length)) {
            deleted.extend(index.entries().filter(|entry| entry.flags & ie::FLAG_DELETED != 0).map(|entry| entry.seq));
            return Ok(());
        }
        for &later in self.later {
            let path = segment_path(self.dir, later, LOG_EXTENSION);
            let Some(bytes) = storage::read_if_present(self.storage, &path).map_err(io_error("read", &path))? else {
                continue;
            };
            scan_log(&bytes, later, |event| {
                if let Scanned::RolledBack { first, last } = event {
                    deleted.extend(first.max(self.first_seq)..=last.min(end_seq.saturating_sub(1)));
                }
            });
        }
        Ok(())
    }

    fn deleted(&self) -> StoreResult<HashSet<u64>> {
        let path = segment_path(self.dir, self.first_seq, DELETE_EXTENSION);
        match storage::read_if_present(self.storage, &path).map_err(io_error("read", &path))? {
            Some(bytes) => Ok(delete_log::decode(&bytes).seqs.into_iter().collect()),
            None => Ok(HashSet::new()),
        }
    }
}

/// The message in a record the scan already checked (framing and checksum).
fn message_of(record: &[u8], seq: u64) -> MessageRef<'_> {
    // The scan accepted this record, so its framing is valid; the fallbacks only guard a bug.
    let Ok(header) = record::check_framing(record) else {
        return MessageRef { seq, subject: "", headers: None, payload: &[], timestamp_ns: 0 };
    };
    let subject_end = rh::SIZE_BYTES + header.subject_length as usize;
    let headers_end = subject_end + header.headers_length as usize;
    MessageRef {
        seq,
        subject: record::subject_of(record, &header),
        headers: (header.flags & rh::FLAG_HAS_HEADERS != 0).then(|| &record[subject_end..headers_end]),
        payload: &record[headers_end..],
        timestamp_ns: header.timestamp_ns,
    }
}

/// Whether `bytes` holds only zeros from `offset` on.
fn zeros_from(bytes: &[u8], offset: u64) -> bool {
    usize::try_from(offset).ok().and_then(|offset| bytes.get(offset..)).is_some_and(|tail| tail.iter().all(|&b| b == 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileStore, FileStoreConfig, PurgeRequest, StoreError, StreamStore};
    use std::fs;

    /// (seq, subject, headers, payload) of a message read.
    type Read = (u64, String, Option<Vec<u8>>, Vec<u8>);

    fn collect(reader: &LogReader, from_seq: u64) -> Vec<Result<Read, u64>> {
        let mut items = Vec::new();
        reader
            .read(from_seq, |item| {
                items.push(match item {
                    ReadItem::Message(m) => {
                        Ok((m.seq, m.subject.to_string(), m.headers.map(<[u8]>::to_vec), m.payload.to_vec()))
                    }
                    ReadItem::Unreadable { seq, .. } => Err(seq),
                });
                ControlFlow::Continue(())
            })
            .unwrap();
        items
    }

    #[test]
    fn reads_what_the_store_holds_in_order_and_refuses_an_open_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = FileStoreConfig::new(dir.path());
        config.segment_size_bytes = 4096;
        let mut store = FileStore::open(config).unwrap();
        for n in 0..300u32 {
            let headers = (n % 2 == 0).then_some(&b"NATS/1.0\r\nA: b\r\n\r\n"[..]);
            store.append("s.x", headers, &n.to_le_bytes(), 0).unwrap();
        }
        store.purge(&PurgeRequest { up_to_seq: Some(11), ..PurgeRequest::default() }).unwrap();
        store.delete(150).unwrap();
        store.sync().unwrap();
        assert!(store.segment_count() > 2, "several segments");
        assert!(matches!(LogReader::open(dir.path()), Err(StoreError::Locked(_))));
        drop(store);

        let reader = LogReader::open(dir.path()).unwrap();
        assert_eq!(reader.first_seq(), 11);
        let items = collect(&reader, 0);
        let seqs: Vec<u64> = items.iter().map(|item| item.as_ref().map_or(0, |m| m.0)).collect();
        let expected: Vec<u64> = (11..=300).filter(|&seq| seq != 150).collect();
        assert_eq!(seqs, expected);
        let (eleventh, twelfth) = (items[0].as_ref().unwrap(), items[1].as_ref().unwrap());
        assert_eq!((eleventh.2.is_some(), eleventh.3.clone()), (true, 10u32.to_le_bytes().to_vec()));
        assert_eq!((twelfth.2.is_some(), twelfth.3.clone()), (false, 11u32.to_le_bytes().to_vec()));
        assert_eq!(collect(&reader, 295).len(), 6);
        assert!(matches!(FileStore::open(FileStoreConfig::new(dir.path())), Err(StoreError::Locked(_))));
    }

    #[test]
    fn a_damaged_record_is_reported_and_the_rest_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FileStore::open(FileStoreConfig::new(dir.path())).unwrap();
        for n in 0..5u8 {
            store.append("s", None, &[n; 40], 0).unwrap();
        }
        store.sync().unwrap();
        drop(store);
        let log = segment_path(dir.path(), 1, LOG_EXTENSION);
        let mut bytes = fs::read(&log).unwrap();
        let record_bytes = (bytes.len() - 24) / 5;
        bytes[24 + 2 * record_bytes + 40] ^= 0xff;
        fs::write(&log, &bytes).unwrap();
        let items = collect(&LogReader::open(dir.path()).unwrap(), 0);
        let seqs: Vec<Result<u64, u64>> =
            items.iter().map(|item| item.as_ref().map(|m| m.0).map_err(|seq| *seq)).collect();
        assert_eq!(seqs, vec![Ok(1), Ok(2), Err(3), Ok(4), Ok(5)]);
    }

    #[test]
    fn a_refused_batch_rolled_back_by_a_marker_is_left_out_as_open_leaves_it_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FileStore::open(FileStoreConfig::new(dir.path())).unwrap();
        for n in 0..6u8 {
            store.append("s", None, &[n; 8], 0).unwrap();
        }
        assert_eq!(store.remove_refused(3, 5).unwrap(), 3);
        store.append("s", None, b"after", 0).unwrap();
        store.sync().unwrap();
        drop(store);
        let items = collect(&LogReader::open(dir.path()).unwrap(), 0);
        let seqs: Vec<u64> = items.iter().map(|item| item.as_ref().map_or(0, |m| m.0)).collect();
        assert_eq!(seqs, vec![1, 2, 6, 7]);
        let reopened = FileStore::open(FileStoreConfig::new(dir.path())).unwrap();
        assert_eq!((reopened.state().msgs, reopened.state().last_seq), (4, 7), "open agrees");
    }

    #[test]
    fn a_refused_batch_that_rolled_a_segment_is_left_out_before_and_after_its_seal_commits() {
        for committed in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = FileStoreConfig { segment_size_bytes: 4096, ..FileStoreConfig::new(dir.path()) };
            let mut store = FileStore::open(config).unwrap();
            for n in 0..150u8 {
                store.append("s", None, &[n; 8], 0).unwrap();
                if n == 9 {
                    store.sync().unwrap();
                }
            }
            assert!(store.segment_count() > 1, "the batch rolled a segment");
            assert_eq!(store.remove_refused(11, 150).unwrap(), 140);
            store.append("s", None, b"after", 0).unwrap();
            if committed {
                store.sync().unwrap();
            }
            drop(store);
            let items = collect(&LogReader::open(dir.path()).unwrap(), 0);
            let seqs: Vec<u64> = items.iter().map(|item| item.as_ref().map_or(0, |m| m.0)).collect();
            assert_eq!(seqs, [(1..=10).collect::<Vec<_>>(), vec![151]].concat(), "seal committed: {committed}");
        }
    }

    #[test]
    fn a_segment_started_behind_an_uncommitted_skip_hides_the_older_ones_as_open_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FileStore::open(FileStoreConfig::new(dir.path())).unwrap();
        for n in 0..10u8 {
            store.append("s", None, &[n; 8], 0).unwrap();
        }
        store.sync().unwrap();
        store.purge_unsynced(&PurgeRequest::default()).unwrap();
        assert!(store.skip_to_unsynced(500).unwrap());
        // Stopped before a commit made the floor durable: the purged segment is still there.
        store.append("s", None, b"after", 0).unwrap();
        drop(store);
        assert!(segment_path(dir.path(), 1, LOG_EXTENSION).exists(), "the purged segment stays until a commit");

        let reader = LogReader::open(dir.path()).unwrap();
        assert_eq!(reader.first_seq(), 500);
        let items = collect(&reader, 0);
        assert_eq!(items, vec![Ok((500, "s".to_string(), None, b"after".to_vec()))]);
        drop(reader);
        let reopened = FileStore::open(FileStoreConfig::new(dir.path())).unwrap();
        assert_eq!((reopened.state().first_seq, reopened.state().msgs), (500, 1), "open agrees");
    }
}
