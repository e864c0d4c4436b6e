//! The pure decoders of the on-disk formats, reachable from outside the crate only so the fuzz
//! properties (`tests/fuzz_decode.rs`) can feed them arbitrary bytes. Thin wrappers: each calls
//! the crate's own decoder and returns what it decided, nothing more.

use bytes::Bytes;

use crate::types::StoredMessage;
use crate::{checkpoint, delete_log, index, record, recovery};

/// `record::encode`: one record's bytes, for building valid inputs to damage.
pub fn encode_record(seq: u64, timestamp_ns: i64, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    // A record too large for its length fields is refused with nothing appended: empty bytes.
    let _ = record::encode(&mut out, seq, timestamp_ns, subject, headers, payload);
    out
}

/// `record::decode`: a whole record read back from disk, checked against the sequence expected.
pub fn decode_record(bytes: &[u8], expected_seq: u64) -> Result<StoredMessage, String> {
    record::decode(Bytes::copy_from_slice(bytes), expected_seq)
}

/// `record::check`: the length of the valid record at the start of `bytes`, or why not.
pub fn check_record(bytes: &[u8]) -> Result<u32, &'static str> {
    record::check(bytes).map(|header| header.length).map_err(record::FrameError::describe)
}

/// `record::encode_segment_header`.
pub fn encode_segment_header(first_seq: u64) -> Vec<u8> {
    record::encode_segment_header(first_seq).to_vec()
}

/// `record::decode_segment_header`: the first sequence of an intact segment header.
pub fn decode_segment_header(bytes: &[u8]) -> Option<u64> {
    record::decode_segment_header(bytes)
}

/// `IndexFile::parse`, then every entry read: `(entries, subjects)` of a valid index file.
pub fn decode_index(bytes: &[u8], first_seq: u64, log_length: u64) -> Result<(Vec<u64>, Vec<String>), &'static str> {
    let file = index::IndexFile::parse(bytes, first_seq, log_length)?;
    let seqs = file.entries().map(|entry| entry.seq).collect();
    Ok((seqs, file.subjects.iter().map(|subject| (*subject).to_string()).collect()))
}

/// `delete_log::decode`: `(sequences, damaged entries, torn bytes)`.
pub fn decode_delete_log(bytes: &[u8]) -> (Vec<u64>, usize, usize) {
    let log = delete_log::decode(bytes);
    (log.seqs, log.damaged_count, log.torn_bytes)
}

/// `checkpoint::decode`: `(segments, subjects)` counted in a stream checkpoint.
pub fn decode_stream_checkpoint(bytes: &[u8]) -> Result<(usize, usize), &'static str> {
    checkpoint::decode(bytes).map(|decoded| (decoded.segments.len(), decoded.subjects.len()))
}

/// `delete_log::encode`: one entry's bytes.
pub fn encode_delete_entry(seq: u64) -> Vec<u8> {
    delete_log::encode(seq).to_vec()
}

/// What [`scan_log`] saw in a whole segment log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Sequences of the records accepted, in order.
    pub seqs: Vec<u64>,
    /// `(offset, length)` of each accepted record.
    pub spans: Vec<(u32, u32)>,
    /// Sequences reported lost.
    pub lost: u64,
    /// Sequences a skip marker covered.
    pub skipped: u64,
    /// Ranges `(first, last)` rollback markers removed, in log order.
    pub rolled_back: Vec<(u64, u64)>,
    /// Offset just past the last record accepted.
    pub valid_end: u64,
    /// Whether an unreadable tail ended the scan.
    pub bad_tail: bool,
}

/// `recovery::scan_log`: walks a segment log (header included) as recovery does.
pub fn scan_log(bytes: &[u8], first_seq: u64) -> Scan {
    let mut scan = Scan::default();
    let end = recovery::scan_log(bytes, first_seq, |item| match item {
        recovery::Scanned::Record { seq, offset, length, .. } => {
            scan.seqs.push(seq);
            scan.spans.push((offset, length));
        }
        recovery::Scanned::Lost => scan.lost += 1,
        recovery::Scanned::Skipped { .. } => scan.skipped += 1,
        recovery::Scanned::RolledBack { first, last } => scan.rolled_back.push((first, last)),
    });
    scan.valid_end = end.valid_end;
    scan.bad_tail = end.bad_tail.is_some();
    scan
}
