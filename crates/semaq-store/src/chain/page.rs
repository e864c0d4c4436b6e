//! Chain pages: stored messages in bulk with their exact header bytes, as the server answers
//! `$SEMAQ.API.STREAM.CHAIN.<stream>` for an online `semaq verify`.
//!
//! A NATS client parses a delivered message's headers into a map, which loses the exact bytes
//! the chain hashed; so a page carries records verbatim, many per response.
//!
//! ```text
//! page:   "SQPG" | version u32 | first_seq u64 | last_seq u64 | next_seq u64 | count u32 | records
//! record: seq u64 | timestamp_ns i64 | subject_len u32 | headers_len u32 (u32::MAX: none) | payload_len u32
//!         | subject | headers | payload
//! ```
//!
//! `first_seq`/`last_seq` are the stream's bounds when the page was read; the next page starts
//! at `next_seq`, and the walk is complete once `next_seq > last_seq`. Sequences between two
//! records of a page (or between pages) are not stored.

use crate::error::{fit, StoreError, StoreResult};
use crate::types::MessageRef;

const MAGIC: &[u8; 4] = b"SQPG";
const VERSION: u32 = 1;
/// Bytes before the first record.
pub const PAGE_HEADER_BYTES: usize = 4 + 4 + 8 + 8 + 8 + 4;
/// Bytes of a record before its subject.
pub const RECORD_PREFIX_BYTES: usize = 8 + 8 + 4 + 4 + 4;
/// `headers_len` of a message without a header block.
const NO_HEADERS: u32 = u32::MAX;

/// A decoded page, borrowing from the response bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    /// The stream's first sequence when the page was read.
    pub first_seq: u64,
    /// The stream's last sequence when the page was read.
    pub last_seq: u64,
    /// Where the next page starts.
    pub next_seq: u64,
    /// The records, in sequence order.
    pub messages: Vec<MessageRef<'a>>,
}

/// Builds a page: the header first, then [`push_record`] for each message, then [`finish`].
pub fn start(first_seq: u64, last_seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(PAGE_HEADER_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&last_seq.to_le_bytes());
    out.extend_from_slice(&[0; 8 + 4]);
    out
}

/// Appends one record; [`StoreError::TooLarge`], with nothing appended, when a length does not
/// fit its `u32` field (a header block must also stay below `u32::MAX`, which means "none").
pub fn push_record(out: &mut Vec<u8>, message: &MessageRef<'_>) -> StoreResult<()> {
    let subject_len: u32 = fit("page subject length", message.subject.len())?;
    let headers_len = match message.headers {
        None => NO_HEADERS,
        Some(headers) => match u32::try_from(headers.len()) {
            Ok(length) if length != NO_HEADERS => length,
            _ => {
                let (value, max) = (headers.len() as u64, u64::from(NO_HEADERS - 1));
                return Err(StoreError::TooLarge { what: "page headers length", value, max });
            }
        },
    };
    let payload_len: u32 = fit("page payload length", message.payload.len())?;
    out.extend_from_slice(&message.seq.to_le_bytes());
    out.extend_from_slice(&message.timestamp_ns.to_le_bytes());
    out.extend_from_slice(&subject_len.to_le_bytes());
    out.extend_from_slice(&headers_len.to_le_bytes());
    out.extend_from_slice(&payload_len.to_le_bytes());
    out.extend_from_slice(message.subject.as_bytes());
    out.extend_from_slice(message.headers.unwrap_or_default());
    out.extend_from_slice(message.payload);
    Ok(())
}

/// Fills in where the next page starts and how many records this one holds.
pub fn finish(out: &mut [u8], next_seq: u64, count: u32) {
    out[24..32].copy_from_slice(&next_seq.to_le_bytes());
    out[32..36].copy_from_slice(&count.to_le_bytes());
}

/// Whether `bytes` look like a page (rather than a JSON error).
pub fn is_page(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Decodes a page; `Err` says what is malformed.
pub fn decode(bytes: &[u8]) -> Result<Page<'_>, &'static str> {
    let mut reader = Reader { bytes, at: 0 };
    if reader.take(4)? != MAGIC || reader.u32()? != VERSION {
        return Err("not a chain page of this version");
    }
    let (first_seq, last_seq, next_seq) = (reader.u64()?, reader.u64()?, reader.u64()?);
    let count = reader.u32()? as usize;
    let mut messages = Vec::with_capacity(count.min(bytes.len() / RECORD_PREFIX_BYTES));
    for _ in 0..count {
        let (seq, timestamp_ns) = (reader.u64()?, reader.i64()?);
        let (subject_len, headers_len, payload_len) = (reader.u32()?, reader.u32()?, reader.u32()?);
        let subject = std::str::from_utf8(reader.take(subject_len as usize)?).map_err(|_| "subject is not UTF-8")?;
        let headers = match headers_len {
            NO_HEADERS => None,
            length => Some(reader.take(length as usize)?),
        };
        let payload = reader.take(payload_len as usize)?;
        messages.push(MessageRef { seq, subject, headers, payload, timestamp_ns });
    }
    if reader.at != bytes.len() {
        return Err("bytes after the last record");
    }
    Ok(Page { first_seq, last_seq, next_seq, messages })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8], &'static str> {
        let end = self.at.checked_add(length).filter(|&end| end <= self.bytes.len()).ok_or("page is cut short")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        let raw = self.take(4)?;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]))
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        let (low, high) = (u64::from(self.u32()?), u64::from(self.u32()?));
        Ok(low | high << 32)
    }

    /// Two's complement, as `i64::to_le_bytes` wrote it.
    fn i64(&mut self) -> Result<i64, &'static str> {
        Ok(i64::from_le_bytes(self.u64()?.to_le_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_refuse_truncation() {
        let messages = [
            MessageRef { seq: 3, subject: "a.b", headers: Some(b"NATS/1.0\r\n\r\n"), payload: b"{}", timestamp_ns: -1 },
            MessageRef { seq: 5, subject: "a.c", headers: None, payload: b"", timestamp_ns: 9 },
            MessageRef { seq: 6, subject: "a.d", headers: Some(b""), payload: b"x", timestamp_ns: 10 },
        ];
        let mut bytes = start(3, 9);
        for message in &messages {
            push_record(&mut bytes, message).unwrap();
        }
        finish(&mut bytes, 7, 3);
        assert!(is_page(&bytes) && !is_page(b"{\"error\":{}}"));
        let page = decode(&bytes).unwrap();
        assert_eq!((page.first_seq, page.last_seq, page.next_seq), (3, 9, 7));
        assert_eq!(page.messages, messages);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode(&extra).is_err());
    }
}
