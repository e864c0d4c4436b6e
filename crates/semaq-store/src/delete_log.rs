//! A segment's delete log (`.del`): the sequences removed from the middle of the stream, one
//! checksummed fixed-size entry each, appended and never rewritten.
//!
//! Removals from the front need no entry: the persisted floor (`meta.rs`) covers them.

use crate::limits::delete_entry as de;
use crate::record::{read_u32, read_u64};

/// One entry's bytes.
pub(crate) fn encode(seq: u64) -> [u8; de::SIZE_BYTES] {
    let mut raw = [0u8; de::SIZE_BYTES];
    raw[de::SEQ_OFFSET..de::SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&raw[de::SEQ_OFFSET..de::SEQ_OFFSET + 8]);
    raw[de::CRC_OFFSET..de::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    raw
}

/// What a delete log holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct DeleteLog {
    /// Deleted sequences, in the order they were recorded.
    pub seqs: Vec<u64>,
    /// Entries whose checksum failed (their deletion may be forgotten: reported as corruption).
    pub damaged_count: usize,
    /// Bytes of a partial last entry (a torn append: the deletion was never synced).
    pub torn_bytes: usize,
}

/// Decodes a whole delete log, checking each entry right after reading it.
pub(crate) fn decode(bytes: &[u8]) -> DeleteLog {
    let mut log = DeleteLog { torn_bytes: bytes.len() % de::SIZE_BYTES, ..DeleteLog::default() };
    for raw in bytes.chunks_exact(de::SIZE_BYTES) {
        let seq = read_u64(raw, de::SEQ_OFFSET);
        if crc32fast::hash(&raw[de::SEQ_OFFSET..de::SEQ_OFFSET + 8]) == read_u32(raw, de::CRC_OFFSET) {
            log.seqs.push(seq);
        } else {
            log.damaged_count += 1;
        }
    }
    log
}

/// The offset of the first intact entry deleting `end_seq` or a later sequence, if any.
pub(crate) fn first_at_or_past(bytes: &[u8], end_seq: u64) -> Option<usize> {
    bytes
        .chunks_exact(de::SIZE_BYTES)
        .position(|raw| {
            let intact = crc32fast::hash(&raw[de::SEQ_OFFSET..de::SEQ_OFFSET + 8]) == read_u32(raw, de::CRC_OFFSET);
            intact && read_u64(raw, de::SEQ_OFFSET) >= end_seq
        })
        .map(|position| position * de::SIZE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_and_tears_are_counted() {
        let mut bytes = Vec::new();
        for seq in [5, 9, 7] {
            bytes.extend_from_slice(&encode(seq));
        }
        bytes[de::SIZE_BYTES] ^= 1;
        bytes.extend_from_slice(&encode(11)[..5]);
        let log = decode(&bytes);
        assert_eq!(log.seqs, vec![5, 7]);
        assert_eq!(log.damaged_count, 1);
        assert_eq!(log.torn_bytes, 5);
    }
}
