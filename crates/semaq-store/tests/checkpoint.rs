//! The stream checkpoint (`stream.ckpt`): a clean restart reads it and the active segment, no
//! sealed index; a damaged one is ignored; a stale one is caught up from the delete logs and
//! the indexes sealed after it, or ignored; either way the stream is what reading every index
//! makes of it.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use semaq_store::{FileStore, PurgeRequest, StoreLimits, StreamState, StreamStore};

const CHECKPOINT: &str = "stream.ckpt";

fn open(dir: &Path) -> FileStore {
    common::open_file(dir, StoreLimits::default())
}

fn fill(store: &mut FileStore, from: u64, count: u64) {
    for n in from..from + count {
        let subject = ["orders.eu", "orders.us", "audit"][usize::try_from(n % 3).unwrap()];
        store.append(subject, None, format!("message {n}").as_bytes(), i64::try_from(n).unwrap()).unwrap();
    }
    store.sync().unwrap();
}

type Seen = (StreamState, BTreeMap<String, u64>, Vec<(u64, String, Vec<u8>)>);

fn seen(store: &FileStore) -> Seen {
    let mut messages = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).unwrap() {
        from = message.seq + 1;
        messages.push((message.seq, message.subject, message.payload.to_vec()));
    }
    (store.state(), store.subjects_state(None), messages)
}

/// What a full open (every index read) makes of the directory.
fn seen_without_checkpoint(dir: &Path) -> Seen {
    let _ = fs::remove_file(dir.join(CHECKPOINT));
    let store = open(dir);
    assert_eq!(store.recovery_report().checkpointed_segments_count, 0);
    seen(&store)
}

#[test]
fn a_clean_restart_reads_the_checkpoint_and_the_active_segment_and_no_sealed_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    fill(&mut store, 0, 3_000);
    assert!(store.delete(10).unwrap() && store.delete(2_000).unwrap());
    store.purge(&PurgeRequest { subject: Some("audit".into()), keep: Some(5), ..Default::default() }).unwrap();
    let before = seen(&store);
    let segments = store.segment_count();
    store.close().unwrap();
    drop(store);
    let reopened = open(dir.path());
    let report = reopened.recovery_report().clone();
    assert_eq!(report.checkpointed_segments_count, segments - 1, "every sealed segment from the checkpoint");
    assert_eq!((report.index_bytes_read, report.indexes_rebuilt_count), (0, 0), "no index read");
    assert!(report.log_bytes_scanned < 2 * common::SMALL_SEGMENT_BYTES, "only the active log scanned");
    assert_eq!(seen(&reopened), before);
    drop(reopened);
    assert_eq!(seen_without_checkpoint(dir.path()), before);
}

#[test]
fn a_damaged_checkpoint_is_ignored_and_the_indexes_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    fill(&mut store, 0, 1_000);
    store.close().unwrap();
    let before = seen(&store);
    drop(store);
    let path = dir.path().join(CHECKPOINT);
    let mut bytes = fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    fs::write(&path, &bytes).unwrap();
    let reopened = open(dir.path());
    assert_eq!(reopened.recovery_report().checkpointed_segments_count, 0);
    assert!(reopened.recovery_report().index_bytes_read > 0);
    assert_eq!(seen(&reopened), before);
}

#[test]
fn a_stale_checkpoint_is_caught_up_from_delete_logs_and_later_seals() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    fill(&mut store, 0, 1_000);
    store.close().unwrap();
    let old = fs::read(dir.path().join(CHECKPOINT)).unwrap();
    let old_segments = store.segment_count();
    // After it: deletions in sealed segments, a purge by subject, and more seals.
    assert!(store.delete(7).unwrap() && store.delete(500).unwrap());
    store.purge(&PurgeRequest { subject: Some("orders.us".into()), keep: Some(100), ..Default::default() }).unwrap();
    fill(&mut store, 1_000, 1_000);
    let before = seen(&store);
    drop(store);
    // As if the power failed before any later checkpoint was written.
    fs::write(dir.path().join(CHECKPOINT), &old).unwrap();
    let reopened = open(dir.path());
    assert_eq!(reopened.recovery_report().checkpointed_segments_count, old_segments - 1);
    assert_eq!(seen(&reopened), before);
    drop(reopened);
    assert_eq!(seen_without_checkpoint(dir.path()), before);
}

#[test]
fn a_checkpoint_naming_segments_gone_since_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    fill(&mut store, 0, 1_000);
    store.close().unwrap();
    let old = fs::read(dir.path().join(CHECKPOINT)).unwrap();
    // The front segments go: the checkpoint's first ones no longer exist.
    store.purge(&PurgeRequest { up_to_seq: Some(600), ..Default::default() }).unwrap();
    fill(&mut store, 1_000, 200);
    let before = seen(&store);
    drop(store);
    fs::write(dir.path().join(CHECKPOINT), &old).unwrap();
    let reopened = open(dir.path());
    assert_eq!(reopened.recovery_report().checkpointed_segments_count, 0);
    assert_eq!(seen(&reopened), before);
}

/// Appends until a segment rolls, then commits in three steps: the checkpoint the seal made
/// due comes back unwritten.
fn roll_and_commit_deferring(store: &mut FileStore, from: u64) -> (u64, semaq_store::CheckpointTicket) {
    let segments = store.segment_count();
    let mut n = from;
    while store.segment_count() == segments {
        store.append("orders.eu", None, format!("message {n}").as_bytes(), i64::try_from(n).unwrap()).unwrap();
        n += 1;
    }
    let ticket = store.sync_begin().unwrap();
    let checkpoint = store.sync_finish_deferring(ticket.run()).unwrap().expect("the seal made a checkpoint due");
    (n, checkpoint)
}

#[test]
fn a_checkpoint_ticket_run_after_a_newer_checkpoint_was_written_leaves_the_newer() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let (n, older) = roll_and_commit_deferring(&mut store, 0);
    fill(&mut store, n, 1_000);
    store.close().unwrap();
    let newer = fs::read(dir.path().join(CHECKPOINT)).unwrap();
    older.run();
    assert_eq!(fs::read(dir.path().join(CHECKPOINT)).unwrap(), newer);
    let before = seen(&store);
    let segments = store.segment_count();
    drop(store);
    let reopened = open(dir.path());
    assert_eq!(reopened.recovery_report().checkpointed_segments_count, segments - 1);
    assert_eq!(seen(&reopened), before);
}

#[test]
fn a_checkpoint_ticket_dropped_unrun_comes_back_at_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let (_, unrun) = roll_and_commit_deferring(&mut store, 0);
    let ticket = store.sync_begin().unwrap();
    assert!(store.sync_finish_deferring(ticket.run()).unwrap().is_none(), "one ticket out at a time");
    drop(unrun);
    assert!(!dir.path().join(CHECKPOINT).exists());
    let ticket = store.sync_begin().unwrap();
    let again = store.sync_finish_deferring(ticket.run()).unwrap().expect("due again");
    again.run();
    let ticket = store.sync_begin().unwrap();
    assert!(store.sync_finish_deferring(ticket.run()).unwrap().is_none(), "written: no longer due");
    let before = seen(&store);
    drop(store);
    let reopened = open(dir.path());
    assert_eq!(reopened.recovery_report().checkpointed_segments_count, 1);
    assert_eq!(seen(&reopened), before);
}

mod power_loss {
    //! On the simulated disk: the power fails at every change from a seal to the checkpoint
    //! written at the next sync (log fsync, index, new segment, its directory entry, the
    //! checkpoint's temporary file, its fsync, the rename, the directory fsync).

    use super::*;
    use semaq_store::storage::sim::{SimDisk, Tear};
    use semaq_store::storage::Storage;
    use semaq_store::FileStoreConfig;
    use std::path::PathBuf;

    fn dir() -> PathBuf {
        PathBuf::from("/streams/orders")
    }

    fn open(disk: &SimDisk) -> FileStore {
        let config = FileStoreConfig {
            dir: dir(),
            segment_size_bytes: common::SMALL_SEGMENT_BYTES,
            limits: StoreLimits::default(),
        };
        FileStore::open_on(config, disk.shared()).unwrap()
    }

    fn append(store: &mut FileStore, n: u64) -> semaq_store::StoreResult<u64> {
        store.append("orders.new", None, format!("order-{n:08}").as_bytes(), 7).map(|(seq, _)| seq)
    }

    /// A store with a checkpoint covering its first sealed segment, then a deletion in that
    /// segment; returns it with the last message number appended.
    fn prepared(disk: &SimDisk) -> (FileStore, u64) {
        let mut store = open(disk);
        let mut n = 0;
        while store.segment_count() < 2 {
            n += 1;
            append(&mut store, n).unwrap();
        }
        store.close().unwrap();
        assert!(store.delete(3).unwrap());
        (store, n)
    }

    #[test]
    fn power_lost_between_a_seal_and_its_checkpoint_gives_what_the_indexes_give() {
        // The append that seals the second segment, found on a disk that does not fail.
        let (mut dry, mut seals_at) = prepared(&SimDisk::new());
        while dry.segment_count() < 3 {
            seals_at += 1;
            append(&mut dry, seals_at).unwrap();
        }
        let (mut crashes_after_the_seal, mut from_checkpoint) = (0, [0; 3]);
        for changes in 0..24 {
            let disk = SimDisk::new();
            let (mut store, mut n) = prepared(&disk);
            while n + 1 < seals_at {
                n += 1;
                append(&mut store, n).unwrap();
            }
            store.sync().unwrap();
            let mut synced = n;
            disk.freeze_after(changes, Tear::LoseUnsynced);
            while !disk.is_frozen() {
                n += 1;
                if append(&mut store, n).and_then(|_| store.sync()).is_ok() {
                    synced = n;
                }
            }
            crashes_after_the_seal += u64::from(store.segment_count() == 3);
            disk.crash(Tear::LoseUnsynced);
            drop(store);
            let reopened = open(&disk);
            from_checkpoint[reopened.recovery_report().checkpointed_segments_count.min(2)] += 1;
            let with_checkpoint = seen(&reopened);
            let messages: Vec<u64> = with_checkpoint.2.iter().map(|(seq, _, _)| *seq).collect();
            let expected: Vec<u64> = (1..=synced).filter(|&seq| seq != 3).collect();
            assert_eq!(messages[..expected.len()], expected[..], "power lost after {changes} changes");
            drop(reopened);
            let checkpoint = dir().join(CHECKPOINT);
            if disk.read(&checkpoint).is_ok() {
                disk.remove_file(&checkpoint).unwrap();
            }
            let full = open(&disk);
            assert_eq!(full.recovery_report().checkpointed_segments_count, 0);
            assert_eq!(seen(&full), with_checkpoint, "power lost after {changes} changes");
        }
        assert!(crashes_after_the_seal > 10, "crashes all along the seal and its checkpoint");
        // The old checkpoint caught up (one segment from it, the newly sealed one from its
        // index), and the new one (both segments from it).
        assert!(from_checkpoint[1] > 0 && from_checkpoint[2] > 0, "{from_checkpoint:?}");
    }
    /// Appends from message `n + 1` until the store has `segments` segments; returns the last.
    fn append_until(store: &mut FileStore, mut n: u64, segments: usize) -> u64 {
        while store.segment_count() < segments {
            n += 1;
            append(store, n).unwrap();
        }
        n
    }

    #[test]
    fn a_checkpoint_written_after_its_commit_and_a_later_roll_gives_what_the_indexes_give_at_every_power_cut() {
        // The server acknowledges a commit before writing the checkpoint it captured, and goes
        // on appending meanwhile: by the write, another seal may be pending, its successor's
        // directory entry not yet durable, and the checkpoint's rename syncs the directory.
        let (mut used, mut crashes_in_the_write) = (0, 0);
        for changes in 0..20 {
            let disk = SimDisk::new();
            let mut store = open(&disk);
            let mut n = append_until(&mut store, 0, 2);
            let ticket = store.sync_begin().unwrap();
            let checkpoint = store.sync_finish_deferring(ticket.run()).unwrap().expect("the seal made one due");
            let mut synced = n;
            n = append_until(&mut store, n, 3);
            disk.freeze_after(changes, Tear::LoseUnsynced);
            checkpoint.run();
            crashes_in_the_write += u64::from(disk.is_frozen());
            while !disk.is_frozen() {
                if store.sync().is_ok() {
                    synced = n;
                }
                n += 1;
                let _ = append(&mut store, n);
            }
            disk.crash(Tear::LoseUnsynced);
            drop(store);
            let reopened = open(&disk);
            used += reopened.recovery_report().checkpointed_segments_count.min(1);
            let with_checkpoint = seen(&reopened);
            let messages: Vec<u64> = with_checkpoint.2.iter().map(|(seq, _, _)| *seq).collect();
            let held = u64::try_from(messages.len()).unwrap();
            assert!(held >= synced, "power lost after {changes} changes: {held} held, {synced} acknowledged");
            assert_eq!(messages, (1..=held).collect::<Vec<_>>(), "power lost after {changes} changes");
            drop(reopened);
            let checkpoint = dir().join(CHECKPOINT);
            if disk.read(&checkpoint).is_ok() {
                disk.remove_file(&checkpoint).unwrap();
            }
            let full = open(&disk);
            assert_eq!(seen(&full), with_checkpoint, "power lost after {changes} changes");
        }
        assert!(
            crashes_in_the_write > 0 && used > 0,
            "{crashes_in_the_write} crashes in the write, {used} opens used it"
        );
    }
}
