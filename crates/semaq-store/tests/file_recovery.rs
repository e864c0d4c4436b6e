//! The file store across restarts and crashes: what is on disk, what open reads, and what a
//! crash, a torn write or a damaged byte leaves behind.

mod common;

use std::fs;
use std::path::Path;

use common::{file_lengths, flip_byte, logs, lose_unsynced, open_file, with_extension, SMALL_SEGMENT_BYTES};
use semaq_store::{DiscardPolicy, FileStore, PurgeRequest, StoreError, StoreLimits, StoredMessage, StreamStore};

/// Bytes before the first record of every segment file (see docs/design.md).
const SEGMENT_HEADER_BYTES: u64 = 24;
/// Every message in these tests has subject "s" and a 16-byte payload, so records have one size.
const PAYLOAD_BYTES: usize = 16;

/// A record: 32 bytes of header, the subject, the payload.
fn record_bytes() -> u64 {
    32 + 1 + PAYLOAD_BYTES as u64
}

fn payload(index: u64) -> Vec<u8> {
    format!("{index:016}").into_bytes()
}

/// Appends messages `seq = from..=to` (payload names the sequence).
fn append_range(store: &mut FileStore, from: u64, to: u64) {
    for seq in from..=to {
        assert_eq!(store.append("s", None, &payload(seq), i64::try_from(seq).unwrap()).unwrap().0, seq);
    }
}

fn all_messages(store: &FileStore) -> Vec<StoredMessage> {
    let mut messages = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).unwrap() {
        from = message.seq + 1;
        messages.push(message);
    }
    messages
}

fn first_seq_of(log: &Path) -> u64 {
    log.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Byte offset of `seq`'s payload in the log whose first sequence is `first_seq`.
fn payload_offset(first_seq: u64, seq: u64) -> u64 {
    SEGMENT_HEADER_BYTES + (seq - first_seq) * record_bytes() + record_bytes() - PAYLOAD_BYTES as u64
}

fn limits() -> StoreLimits {
    StoreLimits::default()
}

#[test]
fn a_new_directory_is_created_and_starts_at_sequence_one() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("streams").join("ORDERS");
    let mut store = open_file(&dir, limits());
    assert_eq!(store.state().first_seq, 1);
    assert_eq!(store.append("s", None, b"x", 1).unwrap().0, 1);
    assert_eq!(logs(&dir).len(), 1);
}

#[test]
fn messages_and_sequences_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 300);
    store.append("t.h", Some(b"NATS/1.0\r\n\r\n"), b"", 301).unwrap();
    store.close().unwrap();
    let before = (store.state(), all_messages(&store));
    drop(store);
    let mut store = open_file(dir.path(), limits());
    assert_eq!((store.state(), all_messages(&store)), before);
    assert_eq!(store.get(301).unwrap().unwrap().headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
    assert_eq!(store.append("s", None, b"next", 302).unwrap().0, 302);
}

#[test]
fn segments_roll_over_at_their_size_and_are_named_by_first_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 500);
    store.sync().unwrap();
    let logs = logs(dir.path());
    assert!(logs.len() > 3, "{} segments", logs.len());
    assert_eq!(logs[0].file_name().unwrap(), "00000000000000000001.log");
    let per_segment = (SMALL_SEGMENT_BYTES - SEGMENT_HEADER_BYTES) / record_bytes();
    for (position, log) in logs.iter().enumerate() {
        assert_eq!(first_seq_of(log), 1 + position as u64 * per_segment, "{log:?}");
        assert!(fs::metadata(log).unwrap().len() <= SMALL_SEGMENT_BYTES);
        let sealed = position + 1 < logs.len();
        assert_eq!(log.with_extension("idx").exists(), sealed, "only sealed segments have an index");
    }
    assert_eq!(store.segment_count(), logs.len());
}

#[test]
fn open_reads_indexes_not_payloads_of_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 1_000);
    store.close().unwrap();
    drop(store);
    let logs = logs(dir.path());
    // Damage a payload in the middle of a sealed segment: open must not notice, a read must.
    let victim_log = &logs[2];
    let victim_seq = first_seq_of(victim_log) + 3;
    flip_byte(victim_log, payload_offset(first_seq_of(victim_log), victim_seq));

    let store = open_file(dir.path(), limits());
    let active_bytes = fs::metadata(logs.last().unwrap()).unwrap().len();
    assert_eq!(store.recovery_report().log_bytes_scanned, active_bytes, "only the active segment is scanned");
    assert_eq!(store.recovery_report().indexes_rebuilt_count, 0);
    assert_eq!(store.state().corruption, None);
    assert_eq!(store.state().msgs, 1_000);

    let damaged = store.get(victim_seq);
    assert!(matches!(damaged, Err(StoreError::Corrupt { seq, .. }) if seq == victim_seq), "{damaged:?}");
    let corruption = store.state().corruption.expect("damage is visible in state");
    assert!(corruption.contains(&format!("seq {victim_seq}")), "{corruption}");
    assert_eq!(&store.get(victim_seq - 1).unwrap().unwrap().payload[..], &payload(victim_seq - 1)[..]);
    assert_eq!(&store.get(victim_seq + 1).unwrap().unwrap().payload[..], &payload(victim_seq + 1)[..]);
}

#[test]
fn a_crash_keeps_exactly_the_synced_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 20);
    store.sync().unwrap();
    let synced = file_lengths(dir.path());
    append_range(&mut store, 21, 27);
    drop(store); // the process dies; the OS had the bytes but the disk did not
    lose_unsynced(dir.path(), &synced, SEGMENT_HEADER_BYTES);

    let mut store = open_file(dir.path(), limits());
    let state = store.state();
    assert_eq!((state.msgs, state.first_seq, state.last_seq, state.corruption), (20, 1, 20, None));
    assert_eq!(store.recovery_report().torn_bytes_truncated, 0);
    assert_eq!(store.append("s", None, &payload(21), 21).unwrap().0, 21, "lost sequences were never acknowledged");
}

#[test]
fn a_torn_write_at_the_tail_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 10);
    store.sync().unwrap();
    let synced = file_lengths(dir.path());
    append_range(&mut store, 11, 15);
    drop(store);
    let log = logs(dir.path()).pop().unwrap();
    let torn_length = synced[&log] + record_bytes() + 20; // one whole record, then part of the next
    fs::OpenOptions::new().write(true).open(&log).unwrap().set_len(torn_length).unwrap();

    let mut store = open_file(dir.path(), limits());
    assert_eq!(store.recovery_report().torn_bytes_truncated, 20);
    assert_eq!(store.state().last_seq, 11, "the whole record that made it stays");
    assert_eq!(store.state().corruption, None, "a torn tail is not corruption");
    assert_eq!(fs::metadata(&log).unwrap().len(), synced[&log] + record_bytes());
    assert_eq!(store.append("s", None, &payload(12), 12).unwrap().0, 12);
    store.close().unwrap();
    drop(store);
    let store = open_file(dir.path(), limits());
    assert_eq!((store.state().msgs, store.recovery_report().torn_bytes_truncated), (12, 0));
}

#[test]
fn damage_in_the_active_segment_is_reported_and_the_rest_stays_available() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 10);
    store.close().unwrap();
    drop(store);
    let log = logs(dir.path()).pop().unwrap();
    flip_byte(&log, payload_offset(1, 5));

    let mut store = open_file(dir.path(), limits());
    let corruption = store.state().corruption.expect("reported");
    assert!(corruption.contains("seqs 5..6"), "{corruption}");
    assert_eq!(store.recovery_report().corruption.len(), 1);
    assert_eq!(store.get(5).unwrap(), None);
    assert_eq!(&store.get(4).unwrap().unwrap().payload[..], &payload(4)[..]);
    assert_eq!(&store.get(6).unwrap().unwrap().payload[..], &payload(6)[..], "records after the damage are kept");
    let state = store.state();
    assert_eq!((state.msgs, state.last_seq, state.num_deleted), (9, 10, 1));
    assert_eq!(store.append("s", None, &payload(11), 11).unwrap().0, 11);
    store.close().unwrap();
    drop(store);
    let store = open_file(dir.path(), limits());
    assert!(store.state().corruption.is_some(), "still visible after another restart");
    assert_eq!(store.state().msgs, 10);
}

#[test]
fn a_missing_index_is_rebuilt_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 400);
    store.delete(7).unwrap();
    store.close().unwrap();
    let before = (store.state(), all_messages(&store));
    drop(store);
    let indexes = with_extension(dir.path(), "idx");
    fs::remove_file(&indexes[0]).unwrap();
    let short = fs::read(&indexes[1]).unwrap();
    fs::write(&indexes[1], &short[..short.len() - 3]).unwrap();

    let store = open_file(dir.path(), limits());
    assert_eq!(store.recovery_report().indexes_rebuilt_count, 2);
    assert_eq!((store.state(), all_messages(&store)), before);
    assert!(indexes[0].exists());
    drop(store);
    let store = open_file(dir.path(), limits());
    assert_eq!(store.recovery_report().indexes_rebuilt_count, 0, "the rebuilt index is trusted next time");
}

#[test]
fn damage_found_while_rebuilding_a_sealed_index_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 300);
    store.close().unwrap();
    drop(store);
    let log = logs(dir.path())[1].clone();
    let first = first_seq_of(&log);
    flip_byte(&log, payload_offset(first, first + 2));
    fs::remove_file(log.with_extension("idx")).unwrap();

    let store = open_file(dir.path(), limits());
    assert!(store.state().corruption.unwrap().contains(&format!("seqs {}..{}", first + 2, first + 3)));
    assert_eq!(store.state().msgs, 299);
    assert!(store.get(first + 1).unwrap().is_some() && store.get(first + 3).unwrap().is_some());
    drop(store);
    let store = open_file(dir.path(), limits());
    assert!(store.state().corruption.is_some(), "the rebuilt index remembers the lost record");
    assert_eq!(store.recovery_report().indexes_rebuilt_count, 0);
}

#[test]
fn deletes_survive_a_restart_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 200);
    store.sync().unwrap();
    assert!(store.delete(1).unwrap());
    assert!(store.delete(50).unwrap());
    assert!(store.delete(199).unwrap());
    let synced = file_lengths(dir.path()); // delete is durable when it returns
    let before = store.state();
    drop(store);
    lose_unsynced(dir.path(), &synced, SEGMENT_HEADER_BYTES);
    let store = open_file(dir.path(), limits());
    assert_eq!(store.state(), before);
    assert_eq!((before.first_seq, before.msgs, before.num_deleted), (2, 197, 2));
    assert!(store.get(50).unwrap().is_none() && store.get(199).unwrap().is_none());
    assert!(!with_extension(dir.path(), "del").is_empty());
}

#[test]
fn a_torn_delete_record_is_ignored_and_cut() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 10);
    store.delete(5).unwrap();
    drop(store);
    let delete_log = with_extension(dir.path(), "del").pop().unwrap();
    let mut bytes = fs::read(&delete_log).unwrap();
    bytes.extend_from_slice(&[1, 2, 3, 4, 5]);
    fs::write(&delete_log, &bytes).unwrap();
    let mut store = open_file(dir.path(), limits());
    assert_eq!((store.state().msgs, store.state().corruption.clone()), (9, None));
    assert_eq!(fs::metadata(&delete_log).unwrap().len() % 12, 0);
    store.delete(6).unwrap();
    drop(store);
    assert_eq!(open_file(dir.path(), limits()).state().msgs, 8);
}

#[test]
fn purges_survive_a_restart_and_give_disk_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 300);
    store.append("other", None, b"x", 301).unwrap();
    let subject_purge = PurgeRequest { subject: Some("other".into()), ..PurgeRequest::default() };
    assert_eq!(store.purge(&subject_purge).unwrap(), 1);
    assert_eq!(store.purge(&PurgeRequest { up_to_seq: Some(200), ..PurgeRequest::default() }).unwrap(), 199);
    assert!(first_seq_of(&logs(dir.path())[0]) > 1, "segments below the purge point are gone");
    drop(store);
    let mut store = open_file(dir.path(), limits());
    let state = store.state();
    assert_eq!((state.msgs, state.first_seq, state.last_seq), (101, 200, 301));
    assert_eq!(store.purge(&PurgeRequest::default()).unwrap(), 101);
    assert_eq!(logs(dir.path()).len(), 1, "an empty stream keeps one empty segment");
    assert_eq!(first_seq_of(&logs(dir.path())[0]), 302);
    drop(store);
    let mut store = open_file(dir.path(), limits());
    let state = store.state();
    assert_eq!((state.msgs, state.first_seq, state.last_seq), (0, 302, 301));
    assert_eq!(store.append("s", None, b"x", 1).unwrap().0, 302, "sequences are never reused");
}

#[test]
fn limit_removals_drop_whole_segments_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let keep_100 = StoreLimits { max_msgs: Some(100), ..StoreLimits::default() };
    let mut store = open_file(dir.path(), keep_100.clone());
    append_range(&mut store, 1, 2_000);
    store.sync().unwrap();
    let segments = logs(dir.path()).len();
    assert!(segments <= 3, "old segments are deleted as the front moves: {segments}");
    let before = store.state();
    assert_eq!((before.msgs, before.first_seq), (100, 1_901));
    drop(store);
    // Reopen without limits: nothing removed by the old limits comes back.
    let store = open_file(dir.path(), StoreLimits::default());
    assert_eq!(store.state(), before);
}

#[test]
fn per_subject_removals_survive_raising_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let one_each = StoreLimits { max_msgs_per_subject: Some(1), ..StoreLimits::default() };
    let mut store = open_file(dir.path(), one_each);
    for round in 0..50 {
        for subject in ["kv.a", "kv.b", "kv.c"] {
            store.append(subject, None, format!("{round}").as_bytes(), round).unwrap();
        }
    }
    store.sync().unwrap();
    drop(store);
    let store = open_file(dir.path(), StoreLimits::default());
    assert_eq!(store.state().msgs, 3);
    assert_eq!(&store.get_last_for_subject("kv.b").unwrap().unwrap().payload[..], b"49");
}

#[test]
fn discard_new_limits_apply_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let two = StoreLimits { max_msgs: Some(2), discard: DiscardPolicy::New, ..StoreLimits::default() };
    let mut store = open_file(dir.path(), two.clone());
    append_range(&mut store, 1, 2);
    drop(store);
    let mut store = open_file(dir.path(), two);
    assert!(matches!(store.append("s", None, b"x", 3), Err(StoreError::MaxMsgs)));
}

#[test]
fn expired_messages_stay_expired_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ten_ns = StoreLimits { max_age: Some(std::time::Duration::from_nanos(10)), ..StoreLimits::default() };
    let mut store = open_file(dir.path(), ten_ns.clone());
    append_range(&mut store, 1, 300);
    assert_eq!(store.enforce_limits(260).unwrap(), 250);
    store.sync().unwrap();
    drop(store);
    let store = open_file(dir.path(), ten_ns);
    assert_eq!((store.state().msgs, store.state().first_seq), (50, 251));
}

#[test]
fn segment_size_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = semaq_store::FileStoreConfig::new(dir.path());
    config.segment_size_bytes = 10;
    assert!(matches!(FileStore::open(config), Err(StoreError::InvalidConfig(_))));
}

#[test]
fn a_purge_interrupted_after_its_floor_was_written_is_finished_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 250);
    store.sync().unwrap();
    let saved: Vec<(std::path::PathBuf, Vec<u8>)> =
        logs(dir.path()).into_iter().map(|path| (path.clone(), fs::read(&path).unwrap())).collect();
    append_range(&mut store, 251, 300);
    assert_eq!(store.purge(&PurgeRequest::default()).unwrap(), 300);
    drop(store);
    // The crash: the floor reached the disk; the segment removals, the fresh segment and the
    // unsynced appends 251..=300 did not.
    for log in logs(dir.path()) {
        fs::remove_file(log).unwrap();
    }
    for (path, bytes) in &saved {
        fs::write(path, bytes).unwrap();
    }

    let mut store = open_file(dir.path(), limits());
    let state = store.state();
    assert_eq!((state.msgs, state.first_seq, state.last_seq, state.corruption), (0, 301, 300, None));
    assert_eq!(store.append("s", None, &payload(301), 301).unwrap().0, 301);
    store.close().unwrap();
    drop(store);
    let store = open_file(dir.path(), limits());
    let state = store.state();
    assert_eq!((state.msgs, state.first_seq, state.last_seq, state.corruption), (1, 301, 301, None));
    assert_eq!(store.recovery_report().torn_bytes_truncated, 0);
}

#[test]
fn a_stream_directory_is_open_in_one_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_file(dir.path(), limits());
    let second = FileStore::open(semaq_store::FileStoreConfig::new(dir.path()));
    assert!(matches!(second, Err(StoreError::Locked(_))), "{second:?}");
    drop(store);
    FileStore::open(semaq_store::FileStoreConfig::new(dir.path())).unwrap();
}

#[test]
fn a_missing_segment_in_the_middle_is_reported_and_the_rest_stays_available() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 400);
    store.close().unwrap();
    drop(store);
    let logs = logs(dir.path());
    let (gone, next) = (first_seq_of(&logs[1]), first_seq_of(&logs[2]));
    fs::remove_file(&logs[1]).unwrap();

    let mut store = open_file(dir.path(), limits());
    let corruption = store.state().corruption.expect("reported");
    assert!(corruption.contains(&format!("seqs {gone}..{next} (exclusive) missing")), "{corruption}");
    assert_eq!(store.state().msgs, 400 - (next - gone));
    assert!(store.get(gone - 1).unwrap().is_some() && store.get(next).unwrap().is_some());
    assert_eq!(store.get_next(gone, None).unwrap().unwrap().seq, next);
    assert_eq!(store.append("s", None, &payload(401), 401).unwrap().0, 401);
}

#[test]
fn a_skip_survives_reopening_and_appends_continue_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = common::open_file(dir.path(), StoreLimits::default());
    store.append("a", None, b"1", 1).unwrap();
    store.purge(&semaq_store::PurgeRequest::default()).unwrap();
    assert!(store.skip_to(100).unwrap());
    drop(store);
    let mut store = common::open_file(dir.path(), StoreLimits::default());
    assert_eq!((store.state().first_seq, store.state().last_seq), (100, 99));
    assert_eq!(store.append("a", None, b"2", 2).unwrap().0, 100);
    drop(store);
    let store = common::open_file(dir.path(), StoreLimits::default());
    assert_eq!(store.get(100).unwrap().unwrap().payload.as_ref(), b"2");
    assert_eq!(store.state().corruption, None);
}

/// A skip marker in the log: the gap a mirror keeps survives a restart, in the active segment
/// (scanned) and in a sealed one (indexed, or scanned when its index is gone).
#[test]
fn skipped_sequences_survive_a_restart_as_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_file(dir.path(), limits());
    append_range(&mut store, 1, 3);
    assert!(store.skip_msgs(10).unwrap());
    drop(store);
    let mut store = open_file(dir.path(), limits());
    let state = store.state();
    assert_eq!((state.msgs, state.last_seq, state.num_deleted, state.corruption), (3, 9, 6, None), "a trailing skip");
    assert_eq!(store.append("s", None, &payload(10), 10).unwrap().0, 10);
    append_range(&mut store, 11, 200);
    store.close().unwrap();
    assert!(logs(dir.path()).len() > 1, "the skip is in a sealed segment now");
    let before = (store.state(), all_messages(&store));
    assert_eq!(before.0.num_deleted, 6);
    drop(store);
    let store = open_file(dir.path(), limits());
    assert_eq!((store.state(), all_messages(&store)), before, "from the index");
    drop(store);
    fs::remove_file(&with_extension(dir.path(), "idx")[0]).unwrap();
    let store = open_file(dir.path(), limits());
    assert_eq!(store.recovery_report().indexes_rebuilt_count, 1);
    assert_eq!((store.state(), all_messages(&store)), before, "from a scan of the log");
}
