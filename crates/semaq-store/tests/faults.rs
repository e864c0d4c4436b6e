//! The file store on a failing disk (the simulated one, `storage::sim`): what a failed fsync,
//! a full disk, a lost directory entry and a torn write do to a stream, and what it promises.

mod common;

use std::path::{Path, PathBuf};

use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::{DiscardPolicy, FileStore, FileStoreConfig, StoreError, StoreLimits, StreamStore};

const SEGMENT_BYTES: u64 = 4 * 1024;

fn dir() -> PathBuf {
    PathBuf::from("/streams/orders")
}

fn open(disk: &SimDisk, dir: &Path) -> FileStore {
    let config =
        FileStoreConfig { dir: dir.to_path_buf(), segment_size_bytes: SEGMENT_BYTES, limits: StoreLimits::default() };
    FileStore::open_on(config, disk.shared()).unwrap()
}

fn payload(seq: u64) -> Vec<u8> {
    format!("order-{seq:08}").into_bytes()
}

fn append(store: &mut FileStore, seq: u64) -> Result<u64, StoreError> {
    store.append("orders.new", None, &payload(seq), 7).map(|(seq, _)| seq)
}

/// A store holding message 1 synced and messages 2..=4 buffered: the appender's next group,
/// not yet handed to the OS, its commit not yet begun.
fn synced_one_buffered_three(disk: &SimDisk) -> FileStore {
    let mut store = open(disk, &dir());
    append(&mut store, 1).unwrap();
    store.sync().unwrap();
    for seq in 2..=4 {
        append(&mut store, seq).unwrap();
    }
    store
}

/// Sequences of the live messages, each checked to hold its own payload.
fn held(store: &FileStore) -> Vec<u64> {
    common::held_with(store, payload)
}

#[test]
fn a_failed_fsync_poisons_the_stream_which_then_refuses_every_change_but_serves_reads() {
    let disk = SimDisk::new();
    let mut store = open(&disk, &dir());
    for seq in 1..=3 {
        append(&mut store, seq).unwrap();
    }
    store.sync().unwrap();

    disk.fail_syncs(true);
    append(&mut store, 4).unwrap();
    let failed = store.sync().unwrap_err();
    assert!(matches!(&failed, StoreError::Io { operation: "fsync", .. }), "{failed}");
    assert!(store.poisoned().is_some_and(|reason| reason.contains("fsync")), "{:?}", store.poisoned());

    // The disk recovers, the stream does not: what it wrote before is unknown.
    disk.fail_syncs(false);
    assert!(matches!(append(&mut store, 5), Err(StoreError::Poisoned(_))));
    assert!(matches!(store.sync(), Err(StoreError::Poisoned(_))), "never a later sync that looks like success");
    assert!(matches!(store.delete(1), Err(StoreError::Poisoned(_))));
    assert_eq!(held(&store)[..3], [1, 2, 3], "reads go on");
    assert_eq!(store.get(2).unwrap().unwrap().payload, payload(2));

    // Power loss: the acknowledged (synced) prefix is there, the unsynced message is not.
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let mut reopened = open(&disk, &dir());
    assert_eq!(held(&reopened), vec![1, 2, 3]);
    assert_eq!(reopened.poisoned(), None, "reopening is the way back");
    assert_eq!(append(&mut reopened, 4).unwrap(), 4);
}

#[test]
fn a_full_disk_refuses_the_write_keeps_nothing_of_it_and_writes_resume_when_space_returns() {
    let disk = SimDisk::new();
    let mut store = open(&disk, &dir());
    for seq in 1..=10 {
        append(&mut store, seq).unwrap();
    }
    store.sync().unwrap();
    let log = dir().join(format!("{:020}.log", 1));
    let log_length = disk.contents(&log).unwrap().len();

    // Room for half a record: the batch's write is cut short by ENOSPC.
    disk.set_free_bytes(Some(30));
    for seq in 11..=15 {
        append(&mut store, seq).unwrap();
    }
    assert!(matches!(store.sync(), Err(StoreError::OutOfSpace(_))));
    assert_eq!(disk.contents(&log).unwrap().len(), log_length, "the half-written record was cut off");
    assert_eq!(store.poisoned(), None, "a full disk is not a broken one");
    assert_eq!(store.state().last_seq, 10, "the batch is undone, not half kept");
    assert_eq!(held(&store), (1..=10).collect::<Vec<_>>(), "reads go on, and see nothing of the failed write");

    // Still full: the next batch fails the same way.
    append(&mut store, 11).unwrap();
    assert!(matches!(store.sync(), Err(StoreError::OutOfSpace(_))));

    disk.set_free_bytes(None);
    assert_eq!(append(&mut store, 11).unwrap(), 11, "sequences continue where the disk's records end");
    store.sync().unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk, &dir());
    assert_eq!(held(&reopened), (1..=11).collect::<Vec<_>>());
    assert_eq!(reopened.recovery_report().torn_bytes_truncated, 0, "no partial record was left on disk");
}

#[test]
fn a_full_disk_mid_batch_refuses_the_rest_of_the_batch_until_sync_reports_it() {
    let disk = SimDisk::new();
    let mut store = open(&disk, &dir());
    append(&mut store, 1).unwrap();
    store.sync().unwrap();
    disk.set_free_bytes(Some(1024));
    // A message larger than the write buffer is handed to the OS at once, and does not fit.
    let large = vec![b'x'; 300 * 1024];
    assert!(matches!(store.append("orders.big", None, &large, 7), Err(StoreError::OutOfSpace(_))));
    assert!(
        matches!(append(&mut store, 2), Err(StoreError::OutOfSpace(_))),
        "the rest of the batch must not take sequences the failed message held"
    );
    assert!(matches!(store.sync(), Err(StoreError::OutOfSpace(_))), "the batch's sync reports it too");
    disk.set_free_bytes(None);
    assert_eq!(append(&mut store, 2).unwrap(), 2);
    store.sync().unwrap();
    assert_eq!(held(&store), vec![1, 2]);
}

#[test]
fn power_lost_at_any_step_of_a_segment_roll_loses_nothing_synced() {
    // Every change of a roll (seal: log fsync, index written and fsynced; new segment created,
    // its header written and fsynced, the directory fsynced) is a point the power can fail at.
    let mut lost_entries = 0;
    for changes in 0..12 {
        let disk = SimDisk::new();
        let mut store = open(&disk, &dir());
        let mut seq = 0;
        // Fill the first segment to just below its size, synced.
        while store.stored_bytes() + 64 < SEGMENT_BYTES {
            seq += 1;
            append(&mut store, seq).unwrap();
        }
        store.sync().unwrap();
        let mut synced = seq;
        disk.freeze_after(changes, Tear::LoseUnsynced);
        while !disk.is_frozen() {
            seq += 1;
            if append(&mut store, seq).and_then(|_| store.sync()).is_ok() {
                synced = seq;
            }
        }
        let second = dir().join(format!("{:020}.log", synced + 1));
        let created_before_crash = disk.contents(&second).is_some();
        disk.crash(Tear::LoseUnsynced);
        lost_entries += u64::from(created_before_crash && disk.contents(&second).is_none());
        drop(store);
        let mut reopened = open(&disk, &dir());
        assert_eq!(held(&reopened), (1..=synced).collect::<Vec<_>>(), "power lost after {changes} changes");
        assert_eq!(append(&mut reopened, synced + 1).unwrap(), synced + 1);
        reopened.sync().unwrap();
    }
    assert!(lost_entries > 0, "some crash hit a created segment whose directory entry was not yet durable");
}

#[test]
fn a_created_file_is_gone_after_power_loss_unless_its_directory_was_synced() {
    use semaq_store::storage::{OpenMode, Storage};
    let disk = SimDisk::new();
    let dir = dir();
    disk.create_dir_all(&dir).unwrap();
    let (kept, lost) = (dir.join("kept"), dir.join("lost"));
    for path in [&kept, &lost] {
        let file = disk.open(path, OpenMode::Create, 0).unwrap();
        file.write_at(b"bytes", 0).unwrap();
        file.sync_data().unwrap();
        if path == &kept {
            disk.sync_dir(&dir).unwrap();
        }
    }
    disk.crash(Tear::LoseUnsynced);
    assert_eq!(disk.contents(&kept).as_deref(), Some(&b"bytes"[..]));
    assert_eq!(disk.contents(&lost), None, "its data was synced, its name was not");
}

#[test]
fn a_torn_tail_is_cut_at_the_last_whole_record_and_every_synced_message_survives() {
    let mut torn_seen = 0;
    let mut kept_counts = std::collections::BTreeSet::new();
    for seed in 0..40 {
        let disk = SimDisk::new();
        let mut store = open(&disk, &dir());
        for seq in 1..=5 {
            append(&mut store, seq).unwrap();
        }
        store.sync().unwrap();
        for seq in 6..=40 {
            append(&mut store, seq).unwrap();
        }
        store.flush().unwrap(); // handed to the OS, never synced: any prefix of sectors may survive
        disk.crash(Tear::Sectors { seed });
        drop(store);
        let mut reopened = open(&disk, &dir());
        let after = held(&reopened);
        let last = after.last().copied().unwrap_or(0);
        assert!(last >= 5, "seed {seed}: synced messages lost: {after:?}");
        assert_eq!(after, (1..=last).collect::<Vec<_>>(), "seed {seed}: a prefix, no holes");
        torn_seen += u64::from(reopened.recovery_report().torn_bytes_truncated > 0);
        kept_counts.insert(last);
        assert_eq!(append(&mut reopened, last + 1).unwrap(), last + 1, "appends continue after the cut");
        reopened.sync().unwrap();
    }
    assert!(torn_seen > 0, "some seed tore a record in half");
    assert!(kept_counts.len() > 3, "seeds keep different prefixes: {kept_counts:?}");
}

#[test]
fn appends_dropped_by_a_full_disk_during_a_delete_are_reported_by_the_next_sync_never_acknowledged() {
    let disk = SimDisk::new();
    let mut store = synced_one_buffered_three(&disk);
    disk.set_free_bytes(Some(10));
    assert!(matches!(store.delete(1), Err(StoreError::OutOfSpace(_))), "the delete syncs the buffer first");
    assert_eq!(held(&store), vec![1], "the delete did not happen, the buffered appends are gone");
    disk.set_free_bytes(None);
    assert!(
        matches!(store.sync(), Err(StoreError::OutOfSpace(_))),
        "the batch that appended 2..=4 must hear they were dropped, not be told they are durable"
    );
    assert_eq!(append(&mut store, 2).unwrap(), 2);
    store.sync().unwrap();
    assert!(store.delete(1).unwrap());
    assert_eq!(held(&store), vec![2]);
}

#[test]
fn what_a_crashed_process_left_unsynced_is_made_durable_when_the_stream_reopens() {
    let disk = SimDisk::new();
    let mut store = open(&disk, &dir());
    for seq in 1..=3 {
        append(&mut store, seq).unwrap();
    }
    store.flush().unwrap(); // in the page cache only
    drop(store); // the process dies; the machine does not

    let reopened = open(&disk, &dir());
    assert_eq!(held(&reopened), vec![1, 2, 3], "recovered from the page cache");
    // Opening fsyncs the active log: from now on the store treats these bytes as synced
    // (a seal, for one, relies on it), so they must be.
    disk.crash(Tear::LoseUnsynced);
    drop(reopened);
    assert_eq!(held(&open(&disk, &dir())), vec![1, 2, 3]);
}

/// A delete log entry as the store writes it (`delete_log::encode`): seq, then its CRC-32.
fn delete_entry(seq: u64) -> Vec<u8> {
    let mut entry = seq.to_le_bytes().to_vec();
    entry.extend_from_slice(&crc32fast::hash(&seq.to_le_bytes()).to_le_bytes());
    entry
}

#[test]
fn a_deletion_whose_record_a_crash_took_does_not_delete_the_next_message_at_that_sequence() {
    let disk = SimDisk::new();
    let mut store = open(&disk, &dir());
    for seq in 1..=3 {
        append(&mut store, seq).unwrap();
    }
    store.delete(2).unwrap();
    // What a crash can leave when the power failed in a delete's sync: its entry in the delete
    // log (another file, torn apart from the log) for seq 4, whose record never reached the disk.
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let delete_log = dir().join("00000000000000000001.del");
    let mut entries = disk.contents(&delete_log).unwrap();
    entries.extend(delete_entry(4));
    entries.extend(delete_entry(3));
    disk.put(&delete_log, &entries);

    let mut reopened = open(&disk, &dir());
    assert_eq!(held(&reopened), vec![1, 3], "entries written after the stale one were never synced either");
    assert_eq!(append(&mut reopened, 4).unwrap(), 4);
    reopened.sync().unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(reopened);
    let again = open(&disk, &dir());
    assert_eq!(held(&again), vec![1, 3, 4], "the acknowledged message at seq 4 stays");
    assert_eq!(again.state().corruption, None);
}

#[test]
fn an_append_that_pushes_a_whole_segment_out_changes_nothing_on_disk_and_its_sync_drops_it_whatever_step_fails() {
    // With `max_msgs`, an append can leave the oldest segment with nothing live. The append
    // only takes the message out; its sync writes and fsyncs the active log (the new record),
    // then the floor past the old segment, then unlinks the old segment's files. The power can
    // fail at each one: the append, never refused, is there after the restart exactly when
    // the sync returned, or may be when it failed (a publish whose ack was lost).
    let limits = StoreLimits { max_msgs: Some(3), ..StoreLimits::default() };
    let config = FileStoreConfig { dir: dir(), segment_size_bytes: SEGMENT_BYTES, limits };
    let open_limited = |disk: &SimDisk| FileStore::open_on(config.clone(), disk.shared()).unwrap();
    let mut kept_after_a_failed_step = 0;
    for changes in 0..10 {
        let disk = SimDisk::new();
        let mut store = open_limited(&disk);
        // Append and sync until the first segment rolled, then once more: the first segment
        // then holds nothing live but its last message, and the next append empties it.
        let mut seq = 0;
        while store.segment_count() < 2 {
            seq += 1;
            append(&mut store, seq).unwrap();
            store.sync().unwrap();
        }
        seq += 1;
        append(&mut store, seq).unwrap();
        store.sync().unwrap();
        assert_eq!(store.segment_count(), 2);
        let dropping = seq + 1;
        disk.freeze_after(changes, Tear::LoseUnsynced);
        assert_eq!(append(&mut store, dropping).unwrap(), dropping, "the append itself changes nothing on disk");
        assert_eq!(disk.counts().changes_after_freeze, 0, "power lost after {changes} changes");
        assert_eq!(store.segment_count(), 2, "the emptied segment waits for the sync");
        let synced = store.sync();
        if synced.is_ok() {
            assert_eq!(store.segment_count(), 1, "the sync gave the emptied segment back");
        }
        disk.crash(Tear::LoseUnsynced);
        drop(store);
        let reopened = open_limited(&disk);
        let after = held(&reopened);
        let before = (dropping - 3..dropping).collect::<Vec<_>>();
        let with_it = (dropping - 2..=dropping).collect::<Vec<_>>();
        match synced {
            Ok(()) => assert_eq!(after, with_it, "power lost after {changes} changes"),
            Err(_) => {
                assert!(after == before || after == with_it, "power lost after {changes} changes: {after:?}");
                kept_after_a_failed_step += u64::from(after == with_it);
            }
        }
    }
    assert!(kept_after_a_failed_step > 0, "some crash struck after the new record was fsynced");
}

#[test]
fn appends_dropped_by_a_full_disk_that_a_commit_taken_aside_met_are_refused_to_the_appenders_commit() {
    let disk = SimDisk::new();
    let mut store = synced_one_buffered_three(&disk);
    // A delete commits aside (its own ticket, as `MSG.DELETE` does) and meets the full disk.
    disk.set_free_bytes(Some(10));
    assert!(store.remove(1).unwrap());
    assert!(matches!(store.sync_begin_aside(), Err(StoreError::OutOfSpace(_))));
    assert_eq!(held(&store), vec![1], "the reload undid the delete and dropped the buffered appends");
    disk.set_free_bytes(None);
    assert!(
        matches!(store.sync_begin_aside(), Err(StoreError::OutOfSpace(_))),
        "nothing is taken aside until the appender heard of its loss"
    );
    assert!(matches!(append(&mut store, 2), Err(StoreError::OutOfSpace(_))), "no append that could be acknowledged");
    assert!(
        matches!(store.sync_begin(), Err(StoreError::OutOfSpace(_))),
        "the appender's commit of 2..=4 must hear they were dropped, not be told they are durable"
    );
    assert_eq!(append(&mut store, 2).unwrap(), 2, "then changes resume");
    store.sync().unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    assert_eq!(held(&open(&disk, &dir())), vec![1, 2]);
}

#[test]
fn a_commit_in_flight_when_an_aside_commit_meets_a_full_disk_stays_durable_and_the_appends_behind_it_are_refused() {
    let disk = SimDisk::new();
    let mut store = open(&disk, &dir());
    append(&mut store, 1).unwrap();
    store.sync().unwrap();
    append(&mut store, 2).unwrap();
    let in_flight = store.sync_begin().unwrap(); // 2 is with the OS; its fsync runs without the lock
    for seq in 3..=4 {
        append(&mut store, seq).unwrap(); // pipelined behind it, buffered
    }
    disk.set_free_bytes(Some(10));
    assert!(matches!(store.sync_begin_aside(), Err(StoreError::OutOfSpace(_))));
    disk.set_free_bytes(None);
    store.sync_finish(in_flight.run()).expect("the fsync in flight covered 2, which the reload kept");
    assert!(
        matches!(store.sync_begin(), Err(StoreError::OutOfSpace(_))),
        "the group behind it, 3..=4, was dropped and must be refused"
    );
    assert_eq!(append(&mut store, 3).unwrap(), 3);
    let ticket = store.sync_begin().unwrap();
    store.sync_finish(ticket.run()).unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    assert_eq!(held(&open(&disk, &dir())), vec![1, 2, 3]);
}

#[test]
fn a_full_disk_met_aside_with_nothing_appended_unreported_leaves_no_report_and_changes_resume_with_space() {
    let disk = SimDisk::new();
    let limits = StoreLimits { max_msgs: Some(2), discard: DiscardPolicy::New, ..StoreLimits::default() };
    let config = FileStoreConfig { dir: dir(), segment_size_bytes: SEGMENT_BYTES, limits };
    let mut store = FileStore::open_on(config, disk.shared()).unwrap();
    append(&mut store, 1).unwrap();
    append(&mut store, 2).unwrap();
    store.sync().unwrap();
    assert!(matches!(append(&mut store, 3), Err(StoreError::MaxMsgs)), "refused without touching the buffer");

    disk.set_free_bytes(Some(0));
    assert!(store.remove(2).unwrap()); // its delete record finds no space
    assert!(matches!(store.sync_begin_aside(), Err(StoreError::OutOfSpace(_))));
    disk.set_free_bytes(None);
    assert!(store.remove(2).unwrap(), "the reload undid the removal; no loss waits to be reported");
    let ticket = store.sync_begin_aside().unwrap();
    store.sync_finish(ticket.run()).unwrap();
    assert!(store.report_dropped().is_ok());
    assert_eq!(held(&store), vec![1]);
}
