//! The seal of a full segment without an fsync under the store's lock: the roll hands the full
//! log to the OS, builds its index in memory and starts the next segment; the next commit's
//! ticket fsyncs the log, writes and fsyncs the index and the directory, without the lock;
//! `sync_finish` moves the segment into the sealed tier. Readers never wait for it, and a power
//! loss anywhere in between gives back exactly what was acknowledged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::{FileStore, FileStoreConfig, StoreError, StreamStore};

const SEGMENT_BYTES: u64 = 4 * 1024;
const WAIT: Duration = Duration::from_secs(10);
/// Changes a roll and its commit make at most (writes, creates, fsyncs), with room to spare:
/// the crash test cuts the power after each count up to the first that lets them all through.
const CHANGES_MAX_COUNT: u64 = 200;
/// A segment log's header (`limits::segment_header::SIZE_BYTES`).
const SEGMENT_HEADER_BYTES: usize = 24;

fn dir() -> PathBuf {
    PathBuf::from("/streams/orders")
}

fn open(disk: &SimDisk) -> FileStore {
    let config = FileStoreConfig { segment_size_bytes: SEGMENT_BYTES, ..FileStoreConfig::new(dir()) };
    FileStore::open_on(config, disk.shared()).unwrap()
}

fn payload(seq: u64) -> Vec<u8> {
    format!("order-{seq:08}-{}", "x".repeat((seq % 7) as usize * 10)).into_bytes()
}

fn subject(seq: u64) -> &'static str {
    if seq.is_multiple_of(3) {
        "orders.eu"
    } else {
        "orders.us"
    }
}

fn append(store: &mut FileStore, seq: u64) -> Result<u64, StoreError> {
    store.append(subject(seq), None, &payload(seq), i64::try_from(seq).unwrap()).map(|(seq, _)| seq)
}

/// The three steps in a row, as the ingest task runs them (its lock released for `run`).
fn commit(store: &mut FileStore) -> Result<(), StoreError> {
    let ticket = store.sync_begin()?;
    store.sync_finish(ticket.run())
}

/// Sequences of the live messages, each checked to hold its own subject and payload.
fn held(store: &FileStore) -> Vec<u64> {
    let mut seqs = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).unwrap() {
        assert_eq!(message.payload, payload(message.seq), "seq {} holds another message", message.seq);
        assert_eq!(message.subject, subject(message.seq));
        seqs.push(message.seq);
        from = message.seq + 1;
    }
    seqs
}

/// Appends from `next` until the active segment is full and a roll has started the next one,
/// then `extra` more; returns the next sequence to append.
fn append_past_a_roll(store: &mut FileStore, mut next: u64, extra: u64) -> Result<u64, StoreError> {
    let segments = store.segment_count();
    while store.segment_count() == segments {
        append(store, next)?;
        next += 1;
    }
    for _ in 0..extra {
        append(store, next)?;
        next += 1;
    }
    Ok(next)
}

#[test]
fn a_roll_runs_no_fsync_and_readers_are_answered_while_the_seal_completes() {
    let disk = SimDisk::new();
    let shared = Arc::new(Mutex::new(open(&disk)));
    let next = {
        let mut store = shared.lock().unwrap();
        let next = append_past_a_roll(&mut store, 1, 3).unwrap();
        commit(&mut store).unwrap();
        let syncs = disk.counts().syncs;
        let next = append_past_a_roll(&mut store, next, 3).unwrap();
        assert_eq!(disk.counts().syncs, syncs, "the roll (seal begun, next segment created) fsyncs nothing");
        next
    };
    let last = next - 1;

    let hold = disk.hold_syncs();
    let ingest = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let ticket = {
                let mut store = shared.lock().unwrap();
                let ticket = store.sync_begin().unwrap();
                assert!(ticket.completes_seal(), "the commit after a roll completes its seal");
                ticket
            };
            let synced = ticket.run();
            shared.lock().unwrap().sync_finish(synced)
        })
    };
    assert!(hold.wait_for_waiting(1, WAIT), "the commit's fsync never started");

    // The seal's fsyncs are stuck on the disk; the lock is free and every kind of read is answered,
    // from the segment being sealed as from the others.
    let started = Instant::now();
    {
        let store = shared.try_lock().expect("the store's lock is not held across the seal's fsyncs");
        assert_eq!(held(&store), (1..=last).collect::<Vec<_>>());
        assert_eq!(store.state().last_seq, last);
        let last_eu = (1..=last).rev().find(|&seq| subject(seq) == "orders.eu").unwrap();
        assert_eq!(store.get_last_for_subject("orders.eu").unwrap().unwrap().seq, last_eu);
        assert_eq!(store.get_next(1, Some("orders.eu")).unwrap().unwrap().seq, 3);
    }
    assert!(started.elapsed() < WAIT);
    assert!(!ingest.is_finished(), "the commit waits for its fsyncs");

    hold.release();
    ingest.join().unwrap().unwrap();
    let mut store = Arc::into_inner(shared).unwrap().into_inner().unwrap();
    assert_eq!(held(&store), (1..=last).collect::<Vec<_>>(), "reads from the sealed tier now");
    // Changes go on after the seal: a delete in the freshly sealed segment, more appends.
    assert!(store.delete(last - 4).unwrap());
    append(&mut store, next).unwrap();
    commit(&mut store).unwrap();
    let expected: Vec<u64> = (1..=next).filter(|&seq| seq != last - 4).collect();
    assert_eq!(held(&store), expected);

    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), expected, "finished means durable");
    assert_eq!(reopened.recovery_report().indexes_rebuilt_count, 0, "the seal's index was durable and valid");
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn power_loss_anywhere_between_a_roll_and_its_commit_gives_back_the_synced_prefix() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 7 }, Tear::Sectors { seed: 1_234_567 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let mut store = open(&disk);
            let synced_next = append_past_a_roll(&mut store, 1, 2).unwrap();
            commit(&mut store).unwrap();
            let mut acknowledged = synced_next - 1;
            disk.freeze_after(changes, tear);
            // A roll, appends to the next segment, then a pipelined commit: one more append
            // while the first commit's fsyncs run, and a second commit for it.
            let result = append_past_a_roll(&mut store, synced_next, 3).and_then(|next| {
                let ticket = store.sync_begin()?;
                let during = append(&mut store, next);
                store.sync_finish(ticket.run())?;
                acknowledged = next - 1;
                during?;
                commit(&mut store)?;
                acknowledged = next;
                Ok(())
            });
            // Whatever was accepted; nothing past it may come back.
            let sent = store.state().last_seq;
            let completed = result.is_ok() && !disk.is_frozen();
            disk.crash(tear);
            drop(store);
            let reopened = open(&disk);
            let survived = held(&reopened);
            let context = format!("{tear:?}, power cut after {changes} changes");
            assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
            assert_eq!(reopened.state().corruption, None, "{context}");
            assert!(survived.len() as u64 >= acknowledged, "{context}: acknowledged seqs lost: {survived:?}");
            assert_eq!(survived, (1..=survived.len() as u64).collect::<Vec<_>>(), "{context}: a prefix, no hole");
            assert!(survived.len() as u64 <= sent, "{context}: nothing invented");
            if completed {
                assert_eq!(survived.len() as u64, sent, "{context}");
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the roll and its commits never got through");
        }
    }
}

#[test]
fn power_loss_around_a_delete_in_the_segment_being_sealed_keeps_the_delete_and_the_synced_prefix() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 11 }, Tear::Sectors { seed: 98_765 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let mut store = open(&disk);
            let synced_next = append_past_a_roll(&mut store, 1, 2).unwrap();
            commit(&mut store).unwrap();
            let mut acknowledged = synced_next - 1;
            let doomed = synced_next;
            let mut deleted = None;
            disk.freeze_after(changes, tear);
            // The segment holding `doomed` fills and rolls; the delete (which syncs, and so
            // completes the seal under the lock) comes before any commit; then a commit.
            let result = append_past_a_roll(&mut store, synced_next, 2).and_then(|next| {
                let removed = store.delete(doomed);
                if removed.is_ok() {
                    deleted = Some(doomed);
                    acknowledged = next - 1;
                }
                removed?;
                append(&mut store, next)?;
                commit(&mut store)?;
                acknowledged = next;
                Ok(())
            });
            let sent = store.state().last_seq;
            let completed = result.is_ok() && !disk.is_frozen();
            disk.crash(tear);
            drop(store);
            let reopened = open(&disk);
            let survived = held(&reopened);
            let context = format!("{tear:?}, power cut after {changes} changes");
            assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
            assert_eq!(reopened.state().corruption, None, "{context}");
            let end = reopened.state().last_seq;
            assert!(end <= sent, "{context}: nothing invented");
            if let Some(seq) = deleted {
                assert!(!survived.contains(&seq), "{context}: the deleted seq {seq} came back");
            }
            // A delete that failed may or may not have reached the disk.
            let doomed_kept = survived.contains(&doomed);
            let expected: Vec<u64> = (1..=end).filter(|&seq| seq != doomed || doomed_kept).collect();
            assert_eq!(survived, expected, "{context}: a prefix, no hole");
            assert!(end >= acknowledged, "{context}: acknowledged seqs lost: {survived:?}");
            if completed {
                assert_eq!(end, sent, "{context}");
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the roll, the delete and the commit never got through");
        }
    }
}

#[test]
fn a_second_roll_while_a_seal_is_pending_completes_the_first_under_the_lock() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut next = 1;
    let ticket = {
        next = append_past_a_roll(&mut store, next, 0).unwrap();
        store.sync_begin().unwrap()
    };
    assert!(ticket.completes_seal());
    // A whole segment of appends while the ticket has not run: the next roll completes the
    // first seal itself (the ticket's later run writes the same bytes again, harmlessly).
    for _ in 0..3 {
        next = append_past_a_roll(&mut store, next, 0).unwrap();
    }
    store.sync_finish(ticket.run()).unwrap();
    commit(&mut store).unwrap();
    let all: Vec<u64> = (1..next).collect();
    assert_eq!(held(&store), all);
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), all);
    assert_eq!(reopened.recovery_report().indexes_rebuilt_count, 0);
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn a_full_disk_while_the_ticket_writes_the_index_is_out_of_space_and_loses_nothing() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let next = append_past_a_roll(&mut store, 1, 2).unwrap();
    let ticket = store.sync_begin().unwrap();
    assert!(ticket.completes_seal());
    // Less room than the index needs: its write in the ticket's run fails with ENOSPC.
    disk.set_free_bytes(Some(16));
    let synced = ticket.run();
    assert!(!synced.succeeded());
    let refused = store.sync_finish(synced).unwrap_err();
    assert!(matches!(refused, StoreError::OutOfSpace(_)), "{refused}");
    assert_eq!(store.poisoned(), None, "a full disk does not poison");
    disk.set_free_bytes(None);
    // The appends were with the OS before the ticket ran: the reload kept them.
    let all: Vec<u64> = (1..next).collect();
    assert_eq!(held(&store), all);
    append(&mut store, next).unwrap();
    commit(&mut store).unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), (1..=next).collect::<Vec<_>>());
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn a_failed_fsync_in_the_seals_ticket_poisons_and_reopens_to_the_synced_prefix() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let first = append_past_a_roll(&mut store, 1, 0).unwrap();
    commit(&mut store).unwrap();
    let next = append_past_a_roll(&mut store, first, 2).unwrap();
    let ticket = store.sync_begin().unwrap();
    assert!(ticket.completes_seal());
    disk.fail_syncs(true);
    let synced = ticket.run();
    disk.fail_syncs(false);
    assert!(matches!(store.sync_finish(synced), Err(StoreError::Io { operation: "fsync", .. })));
    assert!(store.poisoned().is_some());
    assert!(matches!(append(&mut store, next), Err(StoreError::Poisoned(_))));
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>(), "reads go on");
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), (1..first).collect::<Vec<_>>());
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn a_seal_a_crashed_process_left_unfinished_is_completed_by_the_next_commit_after_reopening() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let next = append_past_a_roll(&mut store, 1, 2).unwrap();
    // The process dies after the roll, before any commit: its files stay as the OS holds them.
    drop(store);
    let mut reopened = open(&disk);
    assert_eq!(held(&reopened), (1..next).collect::<Vec<_>>());
    assert_eq!(reopened.segment_count(), 2);
    let ticket = reopened.sync_begin().unwrap();
    assert!(ticket.completes_seal(), "the open left the seal to the next commit, needing no space");
    reopened.sync_finish(ticket.run()).unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(reopened);
    let again = open(&disk);
    assert_eq!(held(&again), (1..next).collect::<Vec<_>>());
    assert_eq!(again.recovery_report().indexes_rebuilt_count, 0, "the commit wrote a valid index");
    assert_eq!(again.state().corruption, None);
}

#[test]
fn a_roll_whose_new_segment_holds_nothing_is_undone_when_its_seal_never_completed() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let next = append_past_a_roll(&mut store, 1, 0).unwrap();
    let last = next - 1;
    drop(store);
    // A process that crashed with the record that did not fit still in its buffer leaves the
    // new segment with its header alone (dropping the store wrote the record: cut it again).
    let new_log = dir().join(format!("{last:020}.log"));
    let header = disk.contents(&new_log).unwrap()[..SEGMENT_HEADER_BYTES].to_vec();
    disk.put(&new_log, &header);
    let mut reopened = open(&disk);
    assert_eq!(held(&reopened), (1..last).collect::<Vec<_>>(), "the buffered record was never written");
    assert_eq!(reopened.segment_count(), 1, "the full segment is the active one again");
    // It seals again at the next append that does not fit, and that seal completes as usual.
    let next = append_past_a_roll(&mut reopened, last, 1).unwrap();
    commit(&mut reopened).unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(reopened);
    let again = open(&disk);
    assert_eq!(held(&again), (1..next).collect::<Vec<_>>());
    assert_eq!(again.state().corruption, None);
}
