//! The bytes of one stored message (a record) and of a segment file's header.
//!
//! Pure functions: no I/O. Every decode verifies the checksum right after reading (paired with
//! the encode that computed it right before writing).

use bytes::Bytes;

use crate::error::{fit, StoreResult};
use crate::limits::{record_header as rh, segment_header as sh, RECORD_SIZE_MAX_BYTES, SUBJECT_LENGTH_MAX_BYTES};
use crate::types::StoredMessage;

/// The decoded fixed part of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    /// Total record length, header included.
    pub length: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
    pub subject_length: u16,
    pub flags: u16,
    pub headers_length: u32,
}

/// Why bytes at an offset are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Fewer bytes remain than the header, or than the declared length.
    Short,
    /// The declared length or inner lengths are impossible.
    BadLength,
    /// The CRC does not match the bytes.
    BadChecksum,
    /// The subject is not UTF-8.
    BadSubject,
}

impl FrameError {
    /// A short description for corruption reports.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            FrameError::Short => "record runs past end of file",
            FrameError::BadLength => "impossible record length",
            FrameError::BadChecksum => "checksum mismatch",
            FrameError::BadSubject => "subject is not UTF-8",
        }
    }
}

/// Total record size for these parts.
pub(crate) fn record_size(subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> usize {
    rh::SIZE_BYTES + subject.len() + headers.map_or(0, <[u8]>::len) + payload.len()
}

/// Appends one record to `out`. The caller has checked sizes against the limits; a length that
/// still does not fit its header field is `TooLarge`, and then nothing is appended.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    seq: u64,
    timestamp_ns: i64,
    subject: &str,
    headers: Option<&[u8]>,
    payload: &[u8],
) -> StoreResult<()> {
    let flags = if headers.is_some() { rh::FLAG_HAS_HEADERS } else { 0 };
    encode_flagged(out, (seq, timestamp_ns, flags), subject, headers.unwrap_or_default(), payload)
}

/// The subject a skip marker carries (framing wants one; no message is stored under it).
pub(crate) const SKIP_SUBJECT: &str = "$SKIP";

/// Appends a skip marker: the sequences from the one the log expects through `last_skipped`
/// were never stored. It takes no sequence of its own.
pub(crate) fn encode_skip(out: &mut Vec<u8>, last_skipped: u64, timestamp_ns: i64) -> StoreResult<()> {
    encode_flagged(out, (last_skipped, timestamp_ns, rh::FLAG_SKIP), SKIP_SUBJECT, &[], &[])
}

/// The subject a rollback marker carries (framing wants one; no message is stored under it).
pub(crate) const ROLLBACK_SUBJECT: &str = "$ROLLBACK";

/// Appends a rollback marker: the sequences `first..=last`, written just before it (`last` in
/// the same log, `first` possibly in earlier ones), are removed. It takes no sequence of its
/// own; `first` is its payload.
pub(crate) fn encode_rollback(out: &mut Vec<u8>, (first, last): (u64, u64), timestamp_ns: i64) -> StoreResult<()> {
    let payload = first.to_le_bytes();
    encode_flagged(out, (last, timestamp_ns, rh::FLAG_ROLLBACK), ROLLBACK_SUBJECT, &[], &payload)
}

/// The range `first..=last` a record validated by `check` removes, if it is a rollback marker
/// (the flag, and the 8-byte payload naming `first`).
pub(crate) fn rollback_range(record: &[u8], header: &RecordHeader) -> Option<(u64, u64)> {
    if header.flags & rh::FLAG_ROLLBACK == 0 {
        return None;
    }
    let payload_start = rh::SIZE_BYTES + header.subject_length as usize + header.headers_length as usize;
    let payload = record.get(payload_start..header.length as usize)?;
    let first = u64::from_le_bytes(payload.try_into().ok()?);
    Some((first, header.seq))
}

fn encode_flagged(
    out: &mut Vec<u8>,
    (seq, timestamp_ns, flags): (u64, i64, u16),
    subject: &str,
    headers: &[u8],
    payload: &[u8],
) -> StoreResult<()> {
    let length = rh::SIZE_BYTES + subject.len() + headers.len() + payload.len();
    debug_assert!(length <= RECORD_SIZE_MAX_BYTES && subject.len() <= SUBJECT_LENGTH_MAX_BYTES);
    let length: u32 = fit("record length", length)?;
    let subject_length: u16 = fit("subject length", subject.len())?;
    let headers_length: u32 = fit("headers length", headers.len())?;
    let start = out.len();
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // crc, filled below once the bytes it covers exist
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&timestamp_ns.to_le_bytes());
    out.extend_from_slice(&subject_length.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&headers_length.to_le_bytes());
    out.extend_from_slice(subject.as_bytes());
    out.extend_from_slice(headers);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[start + rh::SEQ_OFFSET..]);
    out[start + rh::CRC_OFFSET..start + rh::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Validates the record at the start of `bytes` (which may continue past it): framing, then checksum.
pub(crate) fn check(bytes: &[u8]) -> Result<RecordHeader, FrameError> {
    let header = check_framing(bytes)?;
    let record = &bytes[..header.length as usize];
    let stored_crc = read_u32(record, rh::CRC_OFFSET);
    if crc32fast::hash(&record[rh::SEQ_OFFSET..]) != stored_crc {
        return Err(FrameError::BadChecksum);
    }
    let subject = &record[rh::SIZE_BYTES..rh::SIZE_BYTES + header.subject_length as usize];
    std::str::from_utf8(subject).map_err(|_| FrameError::BadSubject)?;
    Ok(header)
}

/// Validates lengths only (cheap: no checksum), for scanning and resynchronising.
pub(crate) fn check_framing(bytes: &[u8]) -> Result<RecordHeader, FrameError> {
    if bytes.len() < rh::SIZE_BYTES {
        return Err(FrameError::Short);
    }
    let header = RecordHeader {
        length: read_u32(bytes, rh::LENGTH_OFFSET),
        seq: read_u64(bytes, rh::SEQ_OFFSET),
        timestamp_ns: read_i64(bytes, rh::TIMESTAMP_OFFSET),
        subject_length: read_u16(bytes, rh::SUBJECT_LENGTH_OFFSET),
        flags: read_u16(bytes, rh::FLAGS_OFFSET),
        headers_length: read_u32(bytes, rh::HEADERS_LENGTH_OFFSET),
    };
    let length = header.length as usize;
    let inner = rh::SIZE_BYTES + header.subject_length as usize + header.headers_length as usize;
    let lengths_possible = length <= RECORD_SIZE_MAX_BYTES
        && header.subject_length > 0
        && header.subject_length as usize <= SUBJECT_LENGTH_MAX_BYTES
        && inner <= length;
    if !lengths_possible {
        return Err(FrameError::BadLength);
    }
    if bytes.len() < length {
        return Err(FrameError::Short);
    }
    Ok(header)
}

/// The subject of a record already validated by `check`.
pub(crate) fn subject_of<'a>(record: &'a [u8], header: &RecordHeader) -> &'a str {
    let subject = &record[rh::SIZE_BYTES..rh::SIZE_BYTES + header.subject_length as usize];
    // `check` verified UTF-8; an empty string here would only hide a caller bug.
    std::str::from_utf8(subject).unwrap_or_default()
}

/// Verifies a whole record read back from disk and splits it into a message without copying.
pub(crate) fn decode(record: Bytes, expected_seq: u64) -> Result<StoredMessage, String> {
    let header = check(&record).map_err(|error| error.describe().to_string())?;
    if header.length as usize != record.len() {
        return Err(format!("record length {} differs from index length {}", header.length, record.len()));
    }
    if header.seq != expected_seq {
        return Err(format!("record holds seq {}", header.seq));
    }
    let subject_end = rh::SIZE_BYTES + header.subject_length as usize;
    let headers_end = subject_end + header.headers_length as usize;
    let subject = subject_of(&record, &header).to_string();
    let headers = (header.flags & rh::FLAG_HAS_HEADERS != 0).then(|| record.slice(subject_end..headers_end));
    Ok(StoredMessage {
        seq: header.seq,
        subject,
        headers,
        payload: record.slice(headers_end..),
        timestamp_ns: header.timestamp_ns,
    })
}

/// The header every segment file starts with.
pub(crate) fn encode_segment_header(first_seq: u64) -> [u8; sh::SIZE_BYTES] {
    encode_segment_header_with(first_seq, 0)
}

/// [`encode_segment_header`] with `flags` (`segment_header::FLAG_*`).
pub(crate) fn encode_segment_header_with(first_seq: u64, flags: u32) -> [u8; sh::SIZE_BYTES] {
    let mut out = [0u8; sh::SIZE_BYTES];
    out[sh::MAGIC_OFFSET..sh::MAGIC_OFFSET + 4].copy_from_slice(&sh::MAGIC.to_le_bytes());
    out[sh::VERSION_OFFSET..sh::VERSION_OFFSET + 4].copy_from_slice(&sh::VERSION.to_le_bytes());
    out[sh::FIRST_SEQ_OFFSET..sh::FIRST_SEQ_OFFSET + 8].copy_from_slice(&first_seq.to_le_bytes());
    out[sh::FLAGS_OFFSET..sh::FLAGS_OFFSET + 4].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32fast::hash(&out[..sh::CRC_OFFSET]);
    out[sh::CRC_OFFSET..sh::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The first sequence a segment header declares, if the header is intact and of this version.
pub(crate) fn decode_segment_header(bytes: &[u8]) -> Option<u64> {
    if bytes.len() < sh::SIZE_BYTES {
        return None;
    }
    let intact = read_u32(bytes, sh::MAGIC_OFFSET) == sh::MAGIC
        && read_u32(bytes, sh::VERSION_OFFSET) == sh::VERSION
        && crc32fast::hash(&bytes[..sh::CRC_OFFSET]) == read_u32(bytes, sh::CRC_OFFSET);
    intact.then(|| read_u64(bytes, sh::FIRST_SEQ_OFFSET))
}

/// The flags of an intact segment header naming `first_seq` (0 for any other).
pub(crate) fn segment_header_flags(bytes: &[u8], first_seq: u64) -> u32 {
    if decode_segment_header(bytes) == Some(first_seq) {
        read_u32(bytes, sh::FLAGS_OFFSET)
    } else {
        0
    }
}

/// Little-endian `u16` at `offset`; the caller has checked the bounds.
pub(crate) fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    let mut raw = [0u8; 2];
    raw.copy_from_slice(&bytes[offset..offset + 2]);
    u16::from_le_bytes(raw)
}

/// Little-endian `u32` at `offset`; the caller has checked the bounds.
pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(raw)
}

/// Little-endian `u64` at `offset`; the caller has checked the bounds.
pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(raw)
}

/// Little-endian `i64` at `offset` (two's complement, as `i64::to_le_bytes` wrote it); the
/// caller has checked the bounds.
pub(crate) fn read_i64(bytes: &[u8], offset: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[offset..offset + 8]);
    i64::from_le_bytes(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(seq: u64, headers: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, seq, 42, "orders.eu", headers, b"payload").unwrap();
        out
    }

    #[test]
    fn a_rollback_marker_names_the_range_it_removes_and_a_message_names_none() {
        let mut out = Vec::new();
        encode_rollback(&mut out, (5, 9), 42).unwrap();
        let header = check(&out).unwrap();
        assert_eq!(header.seq, 9);
        assert_eq!(rollback_range(&out, &header), Some((5, 9)));
        let message = encoded(9, None);
        assert_eq!(rollback_range(&message, &check(&message).unwrap()), None);
        // The flag without an 8-byte payload names nothing.
        let mut short = Vec::new();
        encode_flagged(&mut short, (9, 0, rh::FLAG_ROLLBACK), ROLLBACK_SUBJECT, &[], b"1234").unwrap();
        assert_eq!(rollback_range(&short, &check(&short).unwrap()), None);
    }

    #[test]
    fn a_record_round_trips_and_keeps_none_apart_from_empty_headers() {
        for headers in [None, Some(&b""[..]), Some(&b"NATS/1.0\r\nA: b\r\n\r\n"[..])] {
            let bytes = encoded(7, headers);
            assert_eq!(bytes.len(), record_size("orders.eu", headers, b"payload"));
            let message = decode(Bytes::from(bytes), 7).unwrap();
            assert_eq!(message.subject, "orders.eu");
            assert_eq!(message.headers.as_deref(), headers);
            assert_eq!(&message.payload[..], b"payload");
            assert_eq!(message.timestamp_ns, 42);
        }
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let bytes = encoded(7, Some(b"h"));
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x10;
            assert!(decode(Bytes::from(damaged), 7).is_err(), "flip at byte {index} went unnoticed");
        }
    }

    #[test]
    fn a_truncated_record_is_short() {
        let bytes = encoded(1, None);
        assert_eq!(check(&bytes[..bytes.len() - 1]), Err(FrameError::Short));
        assert_eq!(check(&bytes[..10]), Err(FrameError::Short));
    }

    #[test]
    fn segment_header_round_trips_and_rejects_damage() {
        let mut header = encode_segment_header(99);
        assert_eq!(decode_segment_header(&header), Some(99));
        header[9] ^= 1;
        assert_eq!(decode_segment_header(&header), None);
    }
}
