//! Fuzz properties for everything the store decodes from disk: records, segment headers, index
//! files, delete logs, the meta file, a whole segment scan, chain pages and checkpoint files,
//! and a whole stream directory opened by recovery and by the read-only reader.
//!
//! Arbitrary and damaged bytes must decode to an error (or to what they validly say), never a
//! panic, and never make the decoder allocate from a length field it has not checked against
//! the bytes it holds. Each property runs a bounded number of cases so the suite stays quick.

mod common;

use std::fs;
use std::ops::ControlFlow;
use std::path::Path;

use proptest::prelude::*;
use semaq_store::chain::{checkpoint, page, unseal};
use semaq_store::decoders::{self, Scan};
use semaq_store::{FileStore, FileStoreConfig, LogReader, StoreError, StoreLimits, StreamStore};

use common::SMALL_SEGMENT_BYTES;

/// Record header bytes before the subject (docs/design.md).
const RECORD_HEADER_BYTES: usize = 32;
/// Segment header bytes before the first record.
const SEGMENT_HEADER_BYTES: usize = 24;
/// Index header bytes and the offsets of its counts and checksums.
const INDEX_HEADER_BYTES: usize = 48;
const INDEX_ENTRY_COUNT_OFFSET: usize = 24;
const INDEX_SUBJECT_COUNT_OFFSET: usize = 28;
const INDEX_SUBJECTS_LENGTH_OFFSET: usize = 32;
const INDEX_BODY_CRC_OFFSET: usize = 36;
const INDEX_HEADER_CRC_OFFSET: usize = 44;
const INDEX_ENTRY_BYTES: usize = 32;
/// Meta slot layout: floor and checksum offsets, slot size.
const META_FLOOR_OFFSET: usize = 16;
const META_CRC_OFFSET: usize = 28;
const META_SLOT_BYTES: usize = 32;
/// Delete log entry size.
const DELETE_ENTRY_BYTES: usize = 12;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// Bytes of any content, mostly short, sometimes past a few records.
fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..512)
}

/// A length-like field value: small, near a bound, or huge.
fn any_length() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..64,
        Just(u32::MAX),
        Just(u32::MAX / 2),
        Just(64 * 1024 * 1024),
        Just(64 * 1024 * 1024 + 1),
        any::<u32>()
    ]
}

/// A damage to a byte string: flip bits, overwrite, truncate, or append.
#[derive(Debug, Clone)]
enum Damage {
    Flip {
        at: usize,
        mask: u8,
    },
    Write {
        at: usize,
        bytes: Vec<u8>,
    },
    Truncate {
        keep: usize,
    },
    Append {
        bytes: Vec<u8>,
    },
    /// Writes a little-endian u32 (a length or count field) at `at`.
    Field {
        at: usize,
        value: u32,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16)).prop_map(|(at, bytes)| Damage::Write { at, bytes }),
        any::<usize>().prop_map(|keep| Damage::Truncate { keep }),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Damage::Append { bytes }),
        (any::<usize>(), any_length()).prop_map(|(at, value)| Damage::Field { at, value }),
    ]
}

fn apply(bytes: &mut Vec<u8>, damage: &Damage) {
    let length = bytes.len().max(1);
    match damage {
        Damage::Flip { at, mask } => {
            if let Some(byte) = bytes.get_mut(at % length) {
                *byte ^= mask;
            }
        }
        Damage::Write { at, bytes: new } => {
            let start = at % length;
            for (offset, byte) in new.iter().enumerate() {
                if let Some(old) = bytes.get_mut(start + offset) {
                    *old = *byte;
                }
            }
        }
        Damage::Truncate { keep } => bytes.truncate(keep % length),
        Damage::Append { bytes: new } => bytes.extend_from_slice(new),
        Damage::Field { at, value } => {
            let start = (at % length) & !3;
            if start + 4 <= bytes.len() {
                bytes[start..start + 4].copy_from_slice(&value.to_le_bytes());
            }
        }
    }
}

fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// A subject of 1..=24 token characters.
fn subject() -> impl Strategy<Value = String> {
    "[a-z0-9]{1,8}(\\.[a-z0-9*>]{1,8}){0,2}"
}

/// A valid record's parts.
fn record_parts() -> impl Strategy<Value = (u64, i64, String, Option<Vec<u8>>, Vec<u8>)> {
    (
        1u64..1_000,
        any::<i64>(),
        subject(),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..32)),
        prop::collection::vec(any::<u8>(), 0..64),
    )
}

/// A segment log: its header and records `first_seq..` built from `parts`.
/// A message's subject, optional header block and payload.
type Parts = (String, Option<Vec<u8>>, Vec<u8>);

fn segment_log(first_seq: u64, parts: &[Parts]) -> Vec<u8> {
    let mut log = decoders::encode_segment_header(first_seq);
    for (position, (subject, headers, payload)) in parts.iter().enumerate() {
        let seq = first_seq + position as u64;
        log.extend(decoders::encode_record(seq, 7, subject, headers.as_deref(), payload));
    }
    log
}

fn assert_scan_within(scan: &Scan, bytes: &[u8], first_seq: u64) {
    assert!(scan.valid_end <= bytes.len() as u64);
    let mut expected = first_seq;
    for (&seq, &(offset, length)) in scan.seqs.iter().zip(&scan.spans) {
        assert!(seq >= expected, "sequences go forward");
        expected = seq + 1;
        let end = offset as usize + length as usize;
        assert!(end <= bytes.len(), "an accepted record lies inside the file");
        assert_eq!(decoders::check_record(&bytes[offset as usize..end]), Ok(length));
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_are_no_record(bytes in any_bytes(), seq in any::<u64>()) {
        // A checksum guards every record: random bytes pass it with odds of 2^-32.
        let _ = decoders::decode_record(&bytes, seq);
        if let Ok(length) = decoders::check_record(&bytes) {
            prop_assert!(length as usize <= bytes.len());
        }
    }

    #[test]
    fn a_record_header_with_any_lengths_is_refused_or_framed_inside_the_bytes(
        lengths in (any_length(), any::<u16>(), any_length()),
        tail in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let (length, subject_length, headers_length) = lengths;
        let mut bytes = vec![0u8; RECORD_HEADER_BYTES];
        put_u32(&mut bytes, 0, length);
        bytes[24..26].copy_from_slice(&subject_length.to_le_bytes());
        put_u32(&mut bytes, 28, headers_length);
        bytes.extend(tail);
        prop_assert!(decoders::decode_record(&bytes, 0).is_err());
        prop_assert!(decoders::check_record(&bytes).is_err());
    }

    #[test]
    fn a_damaged_record_never_decodes_as_another(parts in record_parts(), damage in damage()) {
        let (seq, timestamp_ns, subject, headers, payload) = parts;
        let bytes = decoders::encode_record(seq, timestamp_ns, &subject, headers.as_deref(), &payload);
        let message = decoders::decode_record(&bytes, seq).unwrap();
        prop_assert_eq!((&message.subject, message.headers.as_deref()), (&subject, headers.as_deref()));
        let mut damaged = bytes.clone();
        apply(&mut damaged, &damage);
        if damaged != bytes {
            // Appended bytes are the only change a whole-record decode may accept... and it
            // does not: the index length must match the record's own.
            prop_assert!(decoders::decode_record(&damaged, seq).is_err(), "damage {:?} went unnoticed", damage);
        }
    }

    #[test]
    fn segment_headers_decode_only_when_intact(first_seq in any::<u64>(), damage in damage(), noise in any_bytes()) {
        let header = decoders::encode_segment_header(first_seq);
        prop_assert_eq!(decoders::decode_segment_header(&header), Some(first_seq));
        let mut damaged = header.clone();
        apply(&mut damaged, &damage);
        if damaged.get(..SEGMENT_HEADER_BYTES) != Some(&header[..]) {
            prop_assert_eq!(decoders::decode_segment_header(&damaged), None);
        }
        let _ = decoders::decode_segment_header(&noise);
    }

    #[test]
    fn delete_logs_account_for_every_byte(bytes in any_bytes(), seqs in prop::collection::vec(any::<u64>(), 0..16), damage in damage()) {
        let (decoded, damaged_count, torn) = decoders::decode_delete_log(&bytes);
        prop_assert_eq!((decoded.len() + damaged_count) * DELETE_ENTRY_BYTES + torn, bytes.len());
        let mut log: Vec<u8> = seqs.iter().flat_map(|&seq| decoders::encode_delete_entry(seq)).collect();
        prop_assert_eq!(decoders::decode_delete_log(&log).0, seqs.clone());
        apply(&mut log, &damage);
        let (decoded, damaged_count, torn) = decoders::decode_delete_log(&log);
        prop_assert_eq!((decoded.len() + damaged_count) * DELETE_ENTRY_BYTES + torn, log.len());
        prop_assert!(decoded.iter().all(|seq| seqs.contains(seq)), "a damaged entry never names another sequence");
    }

    #[test]
    fn a_scan_of_any_log_accepts_only_whole_intact_records(bytes in any_bytes(), first_seq in 1u64..100) {
        let mut log = decoders::encode_segment_header(first_seq);
        log.extend(bytes);
        let scan = decoders::scan_log(&log, first_seq);
        assert_scan_within(&scan, &log, first_seq);
    }

    #[test]
    fn a_scan_of_a_damaged_log_keeps_intact_records_and_stays_inside_the_file(
        records in prop::collection::vec((subject(), prop::option::of(prop::collection::vec(any::<u8>(), 0..8)), prop::collection::vec(any::<u8>(), 0..48)), 1..12),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let log = segment_log(5, &records);
        let clean = decoders::scan_log(&log, 5);
        prop_assert_eq!(clean.seqs.len(), records.len());
        prop_assert_eq!(clean.valid_end, log.len() as u64);
        let mut damaged = log.clone();
        for damage in &damages {
            apply(&mut damaged, damage);
        }
        let scan = decoders::scan_log(&damaged, 5);
        assert_scan_within(&scan, &damaged, 5);
    }

    #[test]
    fn index_files_with_any_counts_are_refused_without_allocating_from_them(
        counts in (any_length(), any_length(), any_length()),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        // Header checksums made valid, so the decoder must judge the counts themselves.
        let (entry_count, subject_count, subjects_length) = counts;
        let mut bytes = vec![0u8; INDEX_HEADER_BYTES];
        bytes[0..4].copy_from_slice(b"SQIX");
        put_u32(&mut bytes, 4, 1);
        bytes[8..16].copy_from_slice(&1u64.to_le_bytes());
        bytes[16..24].copy_from_slice(&100u64.to_le_bytes());
        put_u32(&mut bytes, INDEX_ENTRY_COUNT_OFFSET, entry_count);
        put_u32(&mut bytes, INDEX_SUBJECT_COUNT_OFFSET, subject_count);
        put_u32(&mut bytes, INDEX_SUBJECTS_LENGTH_OFFSET, subjects_length);
        put_u32(&mut bytes, INDEX_BODY_CRC_OFFSET, crc32fast::hash(&body));
        let header_crc = crc32fast::hash(&bytes[..INDEX_HEADER_CRC_OFFSET]);
        put_u32(&mut bytes, INDEX_HEADER_CRC_OFFSET, header_crc);
        bytes.extend_from_slice(&body);
        if let Ok((seqs, subjects)) = decoders::decode_index(&bytes, 1, 100) {
            prop_assert_eq!(seqs.len() * INDEX_ENTRY_BYTES + INDEX_HEADER_BYTES <= bytes.len(), true);
            prop_assert!(subjects.len() <= body.len() / 2);
        }
    }

    #[test]
    fn stream_checkpoints_with_a_valid_checksum_and_any_counts_are_refused_or_bounded(
        counts in (any_length(), any_length()),
        body in any_bytes(),
    ) {
        // The checksum made valid, so the decoder must judge the counts and lengths themselves.
        let mut bytes = b"SQCK".to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&[0u8; 24]);
        bytes.extend_from_slice(&counts.0.to_le_bytes());
        bytes.extend_from_slice(&counts.1.to_le_bytes());
        bytes.extend_from_slice(&body);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        prop_assert!(decoders::decode_stream_checkpoint(&body).is_err(), "no checksum, no checkpoint");
        if let Ok((segments, subjects)) = decoders::decode_stream_checkpoint(&bytes) {
            // A segment takes at least 80 bytes, a subject at least 27.
            prop_assert!(segments * 80 + subjects * 27 <= bytes.len());
        }
    }

    #[test]
    fn chain_pages_checkpoints_and_seals_of_any_bytes_are_errors_or_bounded(
        bytes in any_bytes(),
        count in any_length(),
        lengths in (any_length(), any_length(), any_length()),
    ) {
        let _ = page::decode(&bytes);
        let _ = unseal(&bytes);
        let _ = checkpoint::decode_file(&bytes);
        // A page whose count and lengths claim more than it holds.
        let mut crafted = page::start(1, 9);
        crafted.extend_from_slice(&5u64.to_le_bytes());
        crafted.extend_from_slice(&count.to_le_bytes());
        crafted.extend_from_slice(&1u64.to_le_bytes());
        crafted.extend_from_slice(&2i64.to_le_bytes());
        for length in [lengths.0, lengths.1, lengths.2] {
            crafted.extend_from_slice(&length.to_le_bytes());
        }
        crafted.extend_from_slice(&bytes);
        if let Ok(decoded) = page::decode(&crafted) {
            prop_assert!(decoded.messages.len() <= crafted.len() / page::RECORD_PREFIX_BYTES);
        }
    }
}

/// A stream directory with sealed segments, an active one, deletions and a floor: every file
/// kind recovery reads. Returns each file's name and bytes.
fn stream_fixture() -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = common::open_file(dir.path(), StoreLimits::default());
    for index in 0..120u64 {
        let headers = (index % 3 == 0).then_some(&b"NATS/1.0\r\nA: b\r\n\r\n"[..]);
        let subject = format!("orders.{}", index % 5);
        store
            .append(&subject, headers, &[u8::try_from(index % 251).unwrap(); 40], 1_000 + i64::try_from(index).unwrap())
            .unwrap();
    }
    for seq in [3, 40, 41, 77, 118] {
        assert!(store.delete(seq).unwrap());
    }
    store.purge(&semaq_store::PurgeRequest { keep: Some(100), ..Default::default() }).unwrap();
    store.close().unwrap();
    drop(store);
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.file_name().into_string().unwrap(), fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    assert!(files.iter().any(|(name, _)| name.ends_with(".idx")), "the fixture has a sealed segment");
    assert!(files.iter().any(|(name, _)| name.ends_with(".del")), "the fixture has a delete log");
    files
}

/// Opens `dir` as a store and as a reader, reads every message each way; panics are the failure.
fn open_and_read_everything(dir: &Path) {
    let config = FileStoreConfig {
        dir: dir.to_path_buf(),
        segment_size_bytes: SMALL_SEGMENT_BYTES,
        limits: StoreLimits::default(),
    };
    // The reader first: opening the store repairs files (cuts torn tails, rebuilds indexes).
    if let Ok(reader) = LogReader::open(dir) {
        let mut items = 0u32;
        let _ = reader.read(0, |_| {
            items += 1;
            if items > 10_000 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
    }
    let Ok(mut store) = FileStore::open(config) else { return };
    let state = store.state();
    let mut from = state.first_seq;
    let mut steps = 0;
    while steps < 10_000 {
        steps += 1;
        match store.get_next(from, None) {
            Ok(Some(message)) => from = message.seq + 1,
            Ok(None) => break,
            Err(StoreError::Corrupt { seq, .. }) => from = seq + 1,
            Err(_) => break,
        }
    }
    let _ = store.subjects_state(None);
    // A store that opened keeps working: one more append is stored or refused, never a panic.
    let _ = store.append("after.damage", None, b"x", 5_000);
    let _ = store.sync();
}

fn meta_slot(generation: u64, floor_seq: u64) -> Vec<u8> {
    let mut slot = vec![0u8; META_SLOT_BYTES];
    slot[0..4].copy_from_slice(b"SQMT");
    put_u32(&mut slot, 4, 1);
    slot[8..16].copy_from_slice(&generation.to_le_bytes());
    slot[META_FLOOR_OFFSET..META_FLOOR_OFFSET + 8].copy_from_slice(&floor_seq.to_le_bytes());
    let crc = crc32fast::hash(&slot[..META_CRC_OFFSET]);
    put_u32(&mut slot, META_CRC_OFFSET, crc);
    slot
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn recovery_and_the_reader_survive_any_damage_to_any_file(
        damages in prop::collection::vec((any::<prop::sample::Index>(), damage()), 1..4),
        floor in prop_oneof![Just(None), Just(Some(0u64)), (1u64..200).prop_map(Some), Just(Some(u64::MAX)), Just(Some(u64::MAX - 1)), Just(Some(1u64 << 40))],
    ) {
        thread_local! {
            static FIXTURE: Vec<(String, Vec<u8>)> = stream_fixture();
        }
        let mut files = FIXTURE.with(Clone::clone);
        for (which, damage) in &damages {
            let position = which.index(files.len());
            apply(&mut files[position].1, damage);
        }
        if let Some(floor_seq) = floor {
            // A meta file with checksums intact but any floor.
            let meta = files.iter_mut().find(|(name, _)| name == "stream.meta").map(|(_, bytes)| bytes);
            let mut slots = meta_slot(1_000, floor_seq);
            slots.extend(meta_slot(999, 1));
            match meta {
                Some(bytes) => *bytes = slots,
                None => files.push(("stream.meta".to_string(), slots)),
            }
        }
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in &files {
            fs::write(dir.path().join(name), bytes).unwrap();
        }
        open_and_read_everything(dir.path());
    }
}

/// Found by `recovery_and_the_reader_survive_any_damage_to_any_file`: a floor far past the last
/// record (a purge to a large `seq` that crashed before its fresh segment existed) made open seal
/// the active segment with one index entry per sequence up to the floor, 2^40 of them.
#[test]
fn a_floor_far_past_the_last_record_opens_at_once_and_appends_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = common::open_file(dir.path(), StoreLimits::default());
    for index in 0..3 {
        store.append("s", None, b"x", index).unwrap();
    }
    store.close().unwrap();
    drop(store);
    let floor_seq = 1u64 << 40;
    let mut slots = meta_slot(1_000, floor_seq);
    slots.extend(meta_slot(999, 1));
    fs::write(dir.path().join("stream.meta"), slots).unwrap();
    let started = std::time::Instant::now();
    let mut store = common::open_file(dir.path(), StoreLimits::default());
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "open took {:?}", started.elapsed());
    assert_eq!(store.state().msgs, 0);
    assert_eq!(store.append("s", None, b"y", 9).unwrap().0, floor_seq);
    assert_eq!(store.get(floor_seq).unwrap().unwrap().payload.as_ref(), b"y");
}

/// Found by `recovery_and_the_reader_survive_any_damage_to_any_file`: with the floor at
/// `u64::MAX` an append took the last sequence and `next_seq` overflowed (wrapping to 0 in a
/// release build). The last sequence is refused instead.
#[test]
fn an_append_at_the_last_sequence_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut slots = meta_slot(1_000, u64::MAX);
    slots.extend(meta_slot(999, 1));
    fs::write(dir.path().join("stream.meta"), slots).unwrap();
    let mut store = common::open_file(dir.path(), StoreLimits::default());
    assert!(matches!(store.append("s", None, b"x", 1), Err(StoreError::TooLarge { what: "sequence", .. })));
    assert_eq!(store.state().msgs, 0);
}
