//! A sealed segment's index file: fixed-size entries (one per sequence) and the segment's subject
//! table, so opening a stream learns every message's place, size, time and subject without
//! reading a payload.
//!
//! Written once, when the segment is sealed (or rebuilt by a scan); never modified. Encoding
//! to any writer and decoding here; the caller owns the file.

use std::collections::hash_map::{Entry, HashMap};
use std::io::{self, Write};
use std::path::Path;

use crate::error::{fit, io_error, StoreResult};
use crate::ledger::{Ledger, SlotState};
use crate::limits::{index_entry as ie, index_header as ih, index_subject};
use crate::record::{read_i64, read_u32, read_u64};
use crate::subjects::SubjectId;

/// One decoded entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub seq: u64,
    pub timestamp_ns: i64,
    pub offset: u32,
    pub length: u32,
    pub subject_index: u32,
    pub flags: u32,
}

/// Writes an index file as a stream: a placeholder header, the entries in sequence order, then
/// the subject table they point into; [`IndexWriter::finish`] returns the real header, which
/// the caller writes over the placeholder. A sealed segment's index can be tens of megabytes:
/// streaming it through a small buffer keeps sealing from faulting in that much fresh memory.
#[derive(Debug)]
pub(crate) struct IndexWriter<W: Write> {
    sink: W,
    body_hasher: crc32fast::Hasher,
    subjects: Vec<u8>,
    /// `subjects.len()`, kept as the header field it becomes (`add_subject` refuses past it).
    subjects_length: u32,
    entry_count: u32,
    subject_count: u32,
}

impl<W: Write> IndexWriter<W> {
    /// Starts the file with a zeroed header (invalid until it is replaced).
    pub(crate) fn new(mut sink: W) -> io::Result<Self> {
        sink.write_all(&[0u8; ih::SIZE_BYTES])?;
        Ok(IndexWriter {
            sink,
            body_hasher: crc32fast::Hasher::new(),
            subjects: Vec::new(),
            subjects_length: 0,
            entry_count: 0,
            subject_count: 0,
        })
    }

    /// Appends the entry for the next sequence.
    pub(crate) fn push(&mut self, entry: &IndexEntry) -> io::Result<()> {
        let mut raw = [0u8; ie::SIZE_BYTES];
        raw[ie::SEQ_OFFSET..ie::SEQ_OFFSET + 8].copy_from_slice(&entry.seq.to_le_bytes());
        raw[ie::TIMESTAMP_OFFSET..ie::TIMESTAMP_OFFSET + 8].copy_from_slice(&entry.timestamp_ns.to_le_bytes());
        raw[ie::OFFSET_OFFSET..ie::OFFSET_OFFSET + 4].copy_from_slice(&entry.offset.to_le_bytes());
        raw[ie::LENGTH_OFFSET..ie::LENGTH_OFFSET + 4].copy_from_slice(&entry.length.to_le_bytes());
        raw[ie::SUBJECT_INDEX_OFFSET..ie::SUBJECT_INDEX_OFFSET + 4].copy_from_slice(&entry.subject_index.to_le_bytes());
        raw[ie::FLAGS_OFFSET..ie::FLAGS_OFFSET + 4].copy_from_slice(&entry.flags.to_le_bytes());
        self.body_hasher.update(&raw);
        self.entry_count += 1;
        self.sink.write_all(&raw)
    }

    /// Adds a subject to the table and returns its index (the caller deduplicates);
    /// `TooLarge` when the subject or the table outgrows its length field.
    pub(crate) fn add_subject(&mut self, subject: &str) -> StoreResult<u32> {
        let length: u16 = fit("index subject length", subject.len())?;
        let added = index_subject::LENGTH_PREFIX_BYTES + subject.len();
        let subjects_length: u32 = fit("index subject table length", self.subjects.len() + added)?;
        self.subjects.extend_from_slice(&length.to_le_bytes());
        self.subjects.extend_from_slice(subject.as_bytes());
        self.subjects_length = subjects_length;
        self.subject_count += 1;
        Ok(self.subject_count - 1)
    }

    /// Writes the subject table; returns the sink, the header for a segment starting at
    /// `first_seq` whose log is `log_length` long, and the file's length.
    pub(crate) fn finish(mut self, first_seq: u64, log_length: u64) -> io::Result<Finished<W>> {
        self.sink.write_all(&self.subjects)?;
        self.body_hasher.update(&self.subjects);
        let mut header = [0u8; ih::SIZE_BYTES];
        header[ih::MAGIC_OFFSET..ih::MAGIC_OFFSET + 4].copy_from_slice(&ih::MAGIC.to_le_bytes());
        header[ih::VERSION_OFFSET..ih::VERSION_OFFSET + 4].copy_from_slice(&ih::VERSION.to_le_bytes());
        header[ih::FIRST_SEQ_OFFSET..ih::FIRST_SEQ_OFFSET + 8].copy_from_slice(&first_seq.to_le_bytes());
        header[ih::LOG_LENGTH_OFFSET..ih::LOG_LENGTH_OFFSET + 8].copy_from_slice(&log_length.to_le_bytes());
        header[ih::ENTRY_COUNT_OFFSET..ih::ENTRY_COUNT_OFFSET + 4].copy_from_slice(&self.entry_count.to_le_bytes());
        header[ih::SUBJECT_COUNT_OFFSET..ih::SUBJECT_COUNT_OFFSET + 4]
            .copy_from_slice(&self.subject_count.to_le_bytes());
        header[ih::SUBJECTS_LENGTH_OFFSET..ih::SUBJECTS_LENGTH_OFFSET + 4]
            .copy_from_slice(&self.subjects_length.to_le_bytes());
        header[ih::BODY_CRC_OFFSET..ih::BODY_CRC_OFFSET + 4]
            .copy_from_slice(&self.body_hasher.finalize().to_le_bytes());
        let header_crc = crc32fast::hash(&header[..ih::HEADER_CRC_OFFSET]);
        header[ih::HEADER_CRC_OFFSET..ih::HEADER_CRC_OFFSET + 4].copy_from_slice(&header_crc.to_le_bytes());
        let length = (ih::SIZE_BYTES + self.entry_count as usize * ie::SIZE_BYTES + self.subjects.len()) as u64;
        Ok(Finished { sink: self.sink, header, length })
    }
}

/// A written index: its sink, the header to put at offset 0, and the file's length.
#[derive(Debug)]
pub(crate) struct Finished<W> {
    pub sink: W,
    pub header: [u8; ih::SIZE_BYTES],
    pub length: u64,
}

/// A validated index file, decoded lazily entry by entry.
#[derive(Debug)]
pub(crate) struct IndexFile<'a> {
    entries: &'a [u8],
    /// The segment's subjects, by subject index.
    pub subjects: Vec<&'a str>,
}

impl<'a> IndexFile<'a> {
    /// Validates `bytes` as the index of the segment starting at `first_seq` whose log is now
    /// `log_length` long; any mismatch means the index must be rebuilt from the log.
    pub(crate) fn parse(bytes: &'a [u8], first_seq: u64, log_length: u64) -> Result<Self, &'static str> {
        check_header(bytes, first_seq, log_length)?;
        let entries_length = read_u32(bytes, ih::ENTRY_COUNT_OFFSET) as usize * ie::SIZE_BYTES;
        let subjects_length = read_u32(bytes, ih::SUBJECTS_LENGTH_OFFSET) as usize;
        if bytes.len() != ih::SIZE_BYTES + entries_length + subjects_length {
            return Err("index length differs from its header");
        }
        let body = &bytes[ih::SIZE_BYTES..];
        if crc32fast::hash(body) != read_u32(bytes, ih::BODY_CRC_OFFSET) {
            return Err("index checksum mismatch");
        }
        let subject_count = read_u32(bytes, ih::SUBJECT_COUNT_OFFSET) as usize;
        let subjects = parse_subjects(&body[entries_length..], subject_count)?;
        Ok(IndexFile { entries: &body[..entries_length], subjects })
    }

    /// Number of entries (sequences covered).
    pub(crate) fn len(&self) -> usize {
        self.entries.len() / ie::SIZE_BYTES
    }

    /// The entries in sequence order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = IndexEntry> + 'a {
        self.entries.chunks_exact(ie::SIZE_BYTES).map(|raw| IndexEntry {
            seq: read_u64(raw, ie::SEQ_OFFSET),
            timestamp_ns: read_i64(raw, ie::TIMESTAMP_OFFSET),
            offset: read_u32(raw, ie::OFFSET_OFFSET),
            length: read_u32(raw, ie::LENGTH_OFFSET),
            subject_index: read_u32(raw, ie::SUBJECT_INDEX_OFFSET),
            flags: read_u32(raw, ie::FLAGS_OFFSET),
        })
    }
}

/// Checks an index's header (the front of `bytes`): intact, and naming the segment starting at
/// `first_seq` whose log is now `log_length` long. A seal writes it last, after the log's fsync.
pub(crate) fn check_header(bytes: &[u8], first_seq: u64, log_length: u64) -> Result<(), &'static str> {
    if bytes.len() < ih::SIZE_BYTES {
        return Err("index shorter than its header");
    }
    let header_intact = read_u32(bytes, ih::MAGIC_OFFSET) == ih::MAGIC
        && read_u32(bytes, ih::VERSION_OFFSET) == ih::VERSION
        && crc32fast::hash(&bytes[..ih::HEADER_CRC_OFFSET]) == read_u32(bytes, ih::HEADER_CRC_OFFSET);
    if !header_intact {
        return Err("index header damaged");
    }
    if read_u64(bytes, ih::FIRST_SEQ_OFFSET) != first_seq || read_u64(bytes, ih::LOG_LENGTH_OFFSET) != log_length {
        return Err("index describes another log");
    }
    Ok(())
}

/// The subject table of an index: `count` length-prefixed UTF-8 names filling `table` exactly.
pub(crate) fn parse_subjects(mut table: &[u8], count: usize) -> Result<Vec<&str>, &'static str> {
    let mut subjects = Vec::with_capacity(count.min(table.len() / index_subject::LENGTH_PREFIX_BYTES));
    for _ in 0..count {
        if table.len() < index_subject::LENGTH_PREFIX_BYTES {
            return Err("subject table truncated");
        }
        let length = u16::from_le_bytes([table[0], table[1]]) as usize;
        let rest = &table[index_subject::LENGTH_PREFIX_BYTES..];
        if rest.len() < length {
            return Err("subject table truncated");
        }
        subjects.push(std::str::from_utf8(&rest[..length]).map_err(|_| "subject is not UTF-8")?);
        table = &rest[length..];
    }
    if !table.is_empty() {
        return Err("subject table has trailing bytes");
    }
    Ok(subjects)
}

/// Writes the index of the segment holding sequences `first_seq..end_seq` to `sink`, from the
/// ledger (at seal, or after a rebuild scan). Sequences the ledger no longer tracks were removed
/// from the front and are written as deleted. `path` names the sink in I/O errors.
pub(crate) fn build<W: Write>(
    ledger: &Ledger<u32>,
    first_seq: u64,
    end_seq: u64,
    log_length: u64,
    sink: W,
    path: &Path,
) -> StoreResult<Finished<W>> {
    let mut writer = IndexWriter::new(sink).map_err(io_error("write", path))?;
    let mut local_subjects: HashMap<SubjectId, u32> = HashMap::new();
    for seq in first_seq..end_seq {
        let mut entry = IndexEntry {
            seq,
            timestamp_ns: 0,
            offset: 0,
            length: 0,
            subject_index: ie::SUBJECT_NONE,
            flags: ie::FLAG_DELETED,
        };
        if let Some(slot) = ledger.slot(seq) {
            entry.timestamp_ns = slot.timestamp_ns;
            match slot.state {
                SlotState::Live => {
                    let subject_index = match local_subjects.entry(slot.subject) {
                        Entry::Occupied(known) => *known.get(),
                        Entry::Vacant(new) => *new.insert(writer.add_subject(ledger.subject_name(slot))?),
                    };
                    let flags = if slot.headers { ie::FLAG_HAS_HEADERS } else { 0 };
                    entry = IndexEntry { offset: slot.body, length: slot.size, subject_index, flags, ..entry };
                }
                SlotState::Lost => entry.flags = ie::FLAG_LOST,
                SlotState::Deleted => {}
            }
        }
        writer.push(&entry).map_err(io_error("write", path))?;
    }
    writer.finish(first_seq, log_length).map_err(io_error("write", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut writer = IndexWriter::new(Vec::new()).unwrap();
        let subject = writer.add_subject("a.b").unwrap();
        for seq in 10..13 {
            let timestamp_ns = i64::try_from(seq).unwrap();
            let entry = IndexEntry { seq, timestamp_ns, offset: 24, length: 40, subject_index: subject, flags: 0 };
            writer.push(&entry).unwrap();
        }
        let Finished { mut sink, header, length } = writer.finish(10, 1000).unwrap();
        assert_eq!(length, sink.len() as u64);
        sink[..header.len()].copy_from_slice(&header);
        sink
    }

    #[test]
    fn an_index_round_trips() {
        let bytes = sample();
        let index = IndexFile::parse(&bytes, 10, 1000).unwrap();
        assert_eq!(index.len(), 3);
        assert_eq!(index.subjects, vec!["a.b"]);
        assert_eq!(index.entries().map(|entry| entry.seq).collect::<Vec<_>>(), vec![10, 11, 12]);
    }

    #[test]
    fn a_damaged_short_or_stale_index_is_refused() {
        let bytes = sample();
        assert!(IndexFile::parse(&bytes, 10, 1001).is_err(), "log grew since sealing");
        assert!(IndexFile::parse(&bytes[..bytes.len() - 1], 10, 1000).is_err());
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x01;
            assert!(IndexFile::parse(&damaged, 10, 1000).is_err(), "flip at byte {index} went unnoticed");
        }
    }
}
