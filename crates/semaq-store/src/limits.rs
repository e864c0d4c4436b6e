//! Every fixed limit and every on-disk layout constant of the store, in one place.
//!
//! Names carry their unit last (`_bytes`, `_count`). Layouts are given as byte offsets so the
//! encoders and decoders in `record.rs`, `index.rs`, `delete_log.rs` and `meta.rs` share one truth,
//! and `docs/design.md` draws the same tables.

/// Default size at which the active segment is sealed and a new one started.
pub const SEGMENT_SIZE_DEFAULT_BYTES: u64 = 64 * 1024 * 1024;
/// Smallest segment size a store accepts (tests use small segments to force rollover).
pub const SEGMENT_SIZE_MIN_BYTES: u64 = 4 * 1024;
/// Largest segment size: record offsets inside a segment are `u32`, and a segment may exceed
/// its size by one record, so the cap leaves room for one maximal record below 4 GiB.
pub const SEGMENT_SIZE_MAX_BYTES: u64 = 1024 * 1024 * 1024;

/// Longest subject, in bytes (the record header stores it as `u16`).
pub const SUBJECT_LENGTH_MAX_BYTES: usize = 4 * 1024;
/// Largest record (header + subject + headers + payload); a single message never exceeds it,
/// whatever `max_msg_size` says.
pub const RECORD_SIZE_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Most missing sequences recovery fills with placeholders between two segments (24 bytes
/// each); a larger gap means a stray or misnamed file, and open refuses the directory.
pub const GAP_FILL_MAX_COUNT: u64 = 1 << 24;

/// Bytes buffered in memory for the active segment before they are handed to the OS.
pub const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// Capacity of the write buffer kept from one segment to the next (the record that crosses
/// `WRITE_BUFFER_BYTES` doubles it once); a larger record's growth is given back at the roll.
pub const WRITE_BUFFER_KEPT_MAX_BYTES: usize = 2 * WRITE_BUFFER_BYTES;
/// Unsynced appends handed to the OS past which the device is asked to start writing them
/// (`StorageFile::start_writeback`): a large object's chunks, which wait for the object's one
/// fsync, are then mostly on the device by the time it runs.
pub const WRITEBACK_START_BYTES: u64 = 4 * 1024 * 1024;
/// The active segment's log is grown ahead of its appends by this much (at most a quarter of
/// the segment size; not at all when that is below `WRITE_BUFFER_BYTES`), zero-filled and fsynced with the commit that grows it: an fdatasync of
/// bytes written over blocks the file already has needs no metadata write, and costs about
/// half as much as one that extends the file (BENCHMARKS.md, "fsync latency").
pub const PREALLOCATE_CHUNK_BYTES: u64 = 8 * 1024 * 1024;
/// Records appended since the last commit averaging this size or more skip the growth: for
/// them the zeros would double the bytes written (each written twice: zeros, then records)
/// to spare a metadata write that is small beside them (an Object Store's 128 KiB chunks).
pub const PREALLOCATE_RECORD_BYTES_MAX: u64 = 64 * 1024;
/// Zeros written per `write` while preallocating.
pub const PREALLOCATE_WRITE_BYTES: usize = 256 * 1024;
/// Bytes buffered while an index file is written (it is streamed, never held whole), and the
/// size of the chunks an index built at a roll is held in.
pub const INDEX_WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// Index chunks (`INDEX_WRITE_BUFFER_BYTES` each) kept for the next seals once theirs completed,
/// for the whole process: 16 MiB, more than the index of a default segment of 128 B messages
/// (about 12.5 MiB).
pub const INDEX_CHUNKS_SPARE_MAX_COUNT: usize = 256;
/// Seals begun at rolls and not yet completed by a commit: each holds its index built in
/// memory (about 10 MB for a 64 MiB segment) and its segment's slots. A roll past it completes
/// the oldest in place, under the caller's lock.
pub const SEALS_PENDING_MAX_COUNT: usize = 4;
/// Distinct corruption reports kept for `state()`; later ones are only counted.
pub const CORRUPTION_REPORTS_MAX_COUNT: usize = 16;
/// Bytes of one page of a sealed index's entries, the unit its entries are read and cached in
/// (a whole number of entries).
pub const INDEX_PAGE_BYTES: usize = 4 * 1024;
/// Index pages cached per stream for reads of sealed segments' entries (4 KiB each).
pub const INDEX_CACHE_PAGES_MAX_COUNT: usize = 64;

/// Segment file header: `magic u32 | version u32 | first_seq u64 | reserved u32 | crc32 u32`.
pub mod segment_header {
    /// "SQLG" little-endian.
    pub const MAGIC: u32 = u32::from_le_bytes(*b"SQLG");
    /// Format version of the segment log.
    pub const VERSION: u32 = 1;
    /// Offset of the magic.
    pub const MAGIC_OFFSET: usize = 0;
    /// Offset of the version.
    pub const VERSION_OFFSET: usize = 4;
    /// Offset of the first sequence (pairs with the file name).
    pub const FIRST_SEQ_OFFSET: usize = 8;
    /// Offset of the flags (`u32`, once reserved and zero).
    pub const FLAGS_OFFSET: usize = 16;
    /// Flag: the segment was started by an append behind a skip not yet committed; nothing
    /// below its first sequence was live then, so open takes the floor up to it.
    pub const FLAG_AFTER_SKIP: u32 = 1;
    /// Offset of the CRC32 over bytes `0..CRC_OFFSET`.
    pub const CRC_OFFSET: usize = 20;
    /// Total header size; the first record starts here.
    pub const SIZE_BYTES: usize = 24;
}

/// Record header, followed by `subject`, then `headers`, then `payload`.
///
/// `length u32 | crc32 u32 | seq u64 | timestamp_ns i64 | subject_length u16 | flags u16 | headers_length u32`
pub mod record_header {
    /// Offset of the total record length (header included).
    pub const LENGTH_OFFSET: usize = 0;
    /// Offset of the CRC32 over bytes `SEQ_OFFSET..length`.
    pub const CRC_OFFSET: usize = 4;
    /// Offset of the sequence number.
    pub const SEQ_OFFSET: usize = 8;
    /// Offset of the caller's timestamp (unix nanoseconds).
    pub const TIMESTAMP_OFFSET: usize = 16;
    /// Offset of the subject length.
    pub const SUBJECT_LENGTH_OFFSET: usize = 24;
    /// Offset of the flags.
    pub const FLAGS_OFFSET: usize = 26;
    /// Offset of the header block length.
    pub const HEADERS_LENGTH_OFFSET: usize = 28;
    /// Total header size.
    pub const SIZE_BYTES: usize = 32;
    /// Flag: the message carries a header block (even an empty one), so `None` and `Some(b"")` differ.
    pub const FLAG_HAS_HEADERS: u16 = 1;
    /// Flag: a skip marker, not a message: every sequence from the one expected up to and
    /// including the record's own was never stored (a mirror keeping its origin's gaps).
    pub const FLAG_SKIP: u16 = 2;
    /// Flag: a rollback marker, not a message: the sequences from its 8-byte payload's (first)
    /// up to and including the record's own (last), stored just before it (the last in the
    /// same log), are removed (a refused atomic batch). A store written before the flag existed
    /// has none.
    pub const FLAG_ROLLBACK: u16 = 4;
}

/// Index file header; entries follow it, then the segment's subject table.
///
/// `magic u32 | version u32 | first_seq u64 | log_length u64 | entry_count u32 | subject_count u32 |
///  subjects_length u32 | body_crc32 u32 | reserved u32 | header_crc32 u32`
pub mod index_header {
    /// "SQIX" little-endian.
    pub const MAGIC: u32 = u32::from_le_bytes(*b"SQIX");
    /// Format version of the index.
    pub const VERSION: u32 = 1;
    /// Offset of the magic.
    pub const MAGIC_OFFSET: usize = 0;
    /// Offset of the version.
    pub const VERSION_OFFSET: usize = 4;
    /// Offset of the segment's first sequence.
    pub const FIRST_SEQ_OFFSET: usize = 8;
    /// Offset of the length of the log file the index describes.
    pub const LOG_LENGTH_OFFSET: usize = 16;
    /// Offset of the entry count.
    pub const ENTRY_COUNT_OFFSET: usize = 24;
    /// Offset of the subject table's entry count.
    pub const SUBJECT_COUNT_OFFSET: usize = 28;
    /// Offset of the subject table's length in bytes.
    pub const SUBJECTS_LENGTH_OFFSET: usize = 32;
    /// Offset of the CRC32 over entries and subject table.
    pub const BODY_CRC_OFFSET: usize = 36;
    /// Offset of the CRC32 over bytes `0..HEADER_CRC_OFFSET`.
    pub const HEADER_CRC_OFFSET: usize = 44;
    /// Total header size.
    pub const SIZE_BYTES: usize = 48;
}

/// One index entry per sequence of the segment, gaps included.
///
/// `seq u64 | timestamp_ns i64 | offset u32 | length u32 | subject_index u32 | flags u32`
pub mod index_entry {
    /// Offset of the sequence number.
    pub const SEQ_OFFSET: usize = 0;
    /// Offset of the timestamp.
    pub const TIMESTAMP_OFFSET: usize = 8;
    /// Offset of the record's byte offset in the log.
    pub const OFFSET_OFFSET: usize = 16;
    /// Offset of the record's total length.
    pub const LENGTH_OFFSET: usize = 20;
    /// Offset of the index into the segment's subject table.
    pub const SUBJECT_INDEX_OFFSET: usize = 24;
    /// Offset of the flags.
    pub const FLAGS_OFFSET: usize = 28;
    /// Total entry size.
    pub const SIZE_BYTES: usize = 32;
    /// Flag: the message had been deleted when the segment was sealed.
    pub const FLAG_DELETED: u32 = 1;
    /// Flag: the record was lost to corruption; no bytes back this sequence.
    pub const FLAG_LOST: u32 = 2;
    /// Flag: the record has a non-empty header block (nats-server counts 4 bytes more for it).
    /// Indexes written before it lack it: their messages then count as without headers.
    pub const FLAG_HAS_HEADERS: u32 = 4;
    /// Subject index of an entry that has no subject (deleted or lost).
    pub const SUBJECT_NONE: u32 = u32::MAX;
}

/// Subject table entry inside an index file: `length u16 | subject bytes`.
pub mod index_subject {
    /// Size of the length prefix.
    pub const LENGTH_PREFIX_BYTES: usize = 2;
}

/// Delete log entry (`.del`, one per segment that has deletions): `seq u64 | crc32 u32`.
pub mod delete_entry {
    /// Offset of the deleted sequence.
    pub const SEQ_OFFSET: usize = 0;
    /// Offset of the CRC32 over the sequence bytes.
    pub const CRC_OFFSET: usize = 8;
    /// Total entry size.
    pub const SIZE_BYTES: usize = 12;
}

/// Stream meta file: two slots written alternately, the valid one with the highest generation wins.
///
/// slot: `magic u32 | version u32 | generation u64 | floor_seq u64 | reserved u32 | crc32 u32`
pub mod meta_slot {
    /// "SQMT" little-endian.
    pub const MAGIC: u32 = u32::from_le_bytes(*b"SQMT");
    /// Format version of the meta file.
    pub const VERSION: u32 = 1;
    /// Offset of the magic.
    pub const MAGIC_OFFSET: usize = 0;
    /// Offset of the version.
    pub const VERSION_OFFSET: usize = 4;
    /// Offset of the write generation.
    pub const GENERATION_OFFSET: usize = 8;
    /// Offset of the floor: every sequence below it is gone.
    pub const FLOOR_SEQ_OFFSET: usize = 16;
    /// Offset of the CRC32 over bytes `0..CRC_OFFSET`.
    pub const CRC_OFFSET: usize = 28;
    /// Size of one slot.
    pub const SIZE_BYTES: usize = 32;
    /// Number of slots in the file.
    pub const SLOT_COUNT: usize = 2;
}

/// Stream checkpoint (`stream.ckpt`), little-endian, in this order, then a CRC-32 of all of it:
///
/// `magic u32 | version u32 | first_seq u64 | end_seq u64 | last_ts i64 | segment_count u32 |
///  subject_count u32`, then per segment `first_seq u64 | end_seq u64 | log_length u64 |
///  index_length u64 | delete_length u64 | live_count u64 | live_bytes u64 | lost_count u64 |
///  index_header_crc u32 | bits_kind u32 | item_count u32 | items` (dead runs: `start u64 |
///  length u64` each; words: `u64` each), then per subject `name_length u16 | name | count u64 |
///  first u64 | last u64 | flags u8` (bit 0: first exact, bit 1: last exact).
pub mod checkpoint {
    /// "SQCK" little-endian.
    pub const MAGIC: u32 = u32::from_le_bytes(*b"SQCK");
    /// Format version of the checkpoint.
    pub const VERSION: u32 = 1;
    /// Live bits stored as the runs of dead sequences.
    pub const BITS_DEAD_RUNS: u32 = 0;
    /// Live bits stored as 64-bit words, bit `i % 64` of word `i / 64` for sequence `first + i`.
    pub const BITS_WORDS: u32 = 1;
}

const _: () = assert!(SEGMENT_SIZE_MAX_BYTES + RECORD_SIZE_MAX_BYTES as u64 <= u32::MAX as u64);
const _: () = assert!(SUBJECT_LENGTH_MAX_BYTES <= u16::MAX as usize);
// Widening `usize` to `u64` (no `From` in a const): the sum is 56.
const _: () = assert!(SEGMENT_SIZE_MIN_BYTES > (segment_header::SIZE_BYTES + record_header::SIZE_BYTES) as u64);
const _: () = assert!(INDEX_PAGE_BYTES.is_multiple_of(index_entry::SIZE_BYTES));

/// Most sequences one skip marker covers behind stored messages (each costs a ledger slot and,
/// once sealed, an index entry): a mirror's origin gap beyond it is not kept.
pub const SKIP_COUNT_MAX: u64 = 1 << 20;

/// Most sequences one rollback marker removes (each a ledger slot recovery revisits): a larger
/// refusal is removed with synced deletes. Far above the server's 1,000 messages per atomic batch.
pub const ROLLBACK_COUNT_MAX: u64 = 1 << 16;

/// Longest an fsync waits at the fault switch's `hold` (`storage::faults`) before it runs
/// anyway: a test that never releases the hold slows the server down but does not hang it.
/// Longer than a test's bound on what it does meanwhile (five 64 MiB segments appended behind
/// a held commit by a debug build on a busy machine), so that the test fails, not the hold.
pub const FAULT_HOLD_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(300);
/// How often a held fsync reads the control file again.
pub const FAULT_HOLD_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// The unit a drive writes whole or not at all: a write lost in a crash leaves whole sectors
/// as they were (zeros, in a log's preallocated or extended tail).
pub const DISK_SECTOR_BYTES: usize = 512;

/// Zeros right before a sector boundary, inside an unreadable stretch of a log, that make it a
/// lost write rather than rot (recovery cuts the active log at a lost write, and steps over
/// rot): a sector's unsynced end is at least this long unless the sector was nearly all synced.
pub const LOST_WRITE_ZEROS_MIN_BYTES: usize = 16;
