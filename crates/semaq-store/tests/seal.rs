//! The seal of a full segment without an fsync under the store's lock: the roll hands the full
//! log to the OS, builds its index in memory and starts the next segment; the next commit's
//! ticket fsyncs the log, writes and fsyncs the index and the directory, without the lock;
//! `sync_finish` moves the segment into the sealed tier. Segments filled between two commits
//! (a large object whose commit waits for its last chunk) each begin a seal, and the next
//! commit completes them all, oldest first. Readers never wait for it, and a power loss
//! anywhere in between gives back exactly what was acknowledged.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::commit;
use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::{
    FileStore, FileStoreConfig, Storage, StoreError, StreamStore, SyncTicket, Synced, SEALS_PENDING_MAX_COUNT,
};

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

/// Appends from `next` until a roll has started a new segment, then `extra` more; returns the
/// next sequence to append.
fn append_past_a_roll(store: &mut FileStore, next: u64, extra: u64) -> Result<u64, StoreError> {
    common::append_past_a_roll_with(store, (next, extra), append)
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

/// What a store holds after a power cut, reopened.
struct AfterCut {
    /// The live sequences.
    survived: Vec<u64>,
    /// The last sequence the reopened store has.
    end: u64,
    /// The last sequence the store had taken before the cut.
    sent: u64,
    /// The last sequence the scenario had seen committed.
    acknowledged: u64,
    /// Whether the scenario got through before the cut.
    completed: bool,
}

impl AfterCut {
    /// Checks the store holds a prefix with every acknowledged sequence and none it never took,
    /// all of them once the scenario got through; returns whether it did.
    fn kept_the_acknowledged_prefix(&self, context: &str) -> bool {
        let survived = &self.survived;
        assert!(survived.len() as u64 >= self.acknowledged, "{context}: acknowledged seqs lost: {survived:?}");
        assert_eq!(*survived, (1..=survived.len() as u64).collect::<Vec<_>>(), "{context}: a prefix, no hole");
        assert!(survived.len() as u64 <= self.sent, "{context}: nothing invented");
        if self.completed {
            assert_eq!(survived.len() as u64, self.sent, "{context}");
        }
        self.completed
    }
}

/// Runs `scenario` on a store whose first segment is sealed and committed, with the power cut
/// after `changes` changes (torn as `tear`), and reopens it: nothing may be reported damaged.
/// The scenario gets the next sequence and raises what is acknowledged as its commits return.
fn cut_power(
    tear: Tear,
    changes: u64,
    scenario: impl FnOnce(&mut FileStore, u64, &mut u64) -> Result<(), StoreError>,
) -> AfterCut {
    cut_power_on_disk(tear, changes, |_, store, next, acknowledged| scenario(store, next, acknowledged))
}

/// [`cut_power`], the scenario also given the disk (to hold its fsyncs).
fn cut_power_on_disk(
    tear: Tear,
    changes: u64,
    scenario: impl FnOnce(&SimDisk, &mut FileStore, u64, &mut u64) -> Result<(), StoreError>,
) -> AfterCut {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let synced_next = append_past_a_roll(&mut store, 1, 2).unwrap();
    commit(&mut store).unwrap();
    let mut acknowledged = synced_next - 1;
    disk.freeze_after(changes, tear);
    let result = scenario(&disk, &mut store, synced_next, &mut acknowledged);
    let sent = store.state().last_seq;
    let completed = result.is_ok() && !disk.is_frozen();
    disk.crash(tear);
    drop(store);
    let reopened = open(&disk);
    let context = format!("{tear:?}, power cut after {changes} changes");
    assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
    assert_eq!(reopened.state().corruption, None, "{context}");
    AfterCut { survived: held(&reopened), end: reopened.state().last_seq, sent, acknowledged, completed }
}

#[test]
fn power_loss_anywhere_between_a_roll_and_its_commit_gives_back_the_synced_prefix() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 7 }, Tear::Sectors { seed: 1_234_567 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            // A roll, appends to the next segment, then a pipelined commit: one more append
            // while the first commit's fsyncs run, and a second commit for it.
            let cut = cut_power(tear, changes, |store, synced_next, acknowledged| {
                let next = append_past_a_roll(store, synced_next, 3)?;
                let ticket = store.sync_begin()?;
                let during = append(store, next);
                store.sync_finish(ticket.run())?;
                *acknowledged = next - 1;
                during?;
                commit(store)?;
                *acknowledged = next;
                Ok(())
            });
            if cut.kept_the_acknowledged_prefix(&format!("{tear:?}, power cut after {changes} changes")) {
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the roll and its commits never got through");
        }
    }
}

/// Runs `ticket` on another thread, held before its directory fsync (its files' fsyncs done),
/// runs `meanwhile` (the pipelined appender), then lets the directory fsync go; returns what
/// the ticket reports. A power cut before the hold is reached ends the ticket early.
fn run_with_dir_sync_held<T>(disk: &SimDisk, ticket: SyncTicket, meanwhile: impl FnOnce() -> T) -> (Synced, Option<T>) {
    let hold = disk.hold_dir_syncs();
    std::thread::scope(|scope| {
        let running = scope.spawn(move || ticket.run());
        let started = Instant::now();
        let held = loop {
            if hold.wait_for_waiting(1, Duration::from_millis(5)) {
                break true;
            }
            assert!(started.elapsed() < WAIT, "the ticket neither reached its directory fsync nor ended");
            if running.is_finished() {
                break false;
            }
        };
        let during = held.then(meanwhile);
        hold.release();
        (running.join().unwrap(), during)
    })
}

/// A drive writing out of order: a ticket synced the active log, then a refused batch filled
/// it and rolled (its marker in the next log, whose entry the ticket's directory fsync made
/// durable), and the crash lost one unsynced sector of each log while keeping the rest. The
/// sealing log with a lost write is taken for a torn one (the logs after it go) and cut at
/// the hole: the refused records come back only as the tail, and no damage is reported.
#[test]
fn a_sealing_log_that_lost_an_unsynced_sector_is_cut_there_and_the_logs_after_it_go() {
    for nth in 0..12 {
        let disk = SimDisk::new();
        let mut store = open(&disk);
        let next = append_past_a_roll(&mut store, 1, 3).unwrap();
        let ticket = store.sync_begin().unwrap();
        let (_, during) = run_with_dir_sync_held(&disk, ticket, || {
            let later = append_past_a_roll(&mut store, next, 2).unwrap();
            store.remove_refused(next, later - 1).unwrap();
            let end = (later..later + 5).try_fold(later, |_, seq| append(&mut store, seq).map(|seq| seq + 1)).unwrap();
            store.flush().unwrap();
            (later, end)
        });
        let (later, _) = during.expect("the ticket reached its directory fsync");
        disk.crash(Tear::LoseOneSector { nth });
        drop(store);
        let reopened = open(&disk);
        let survived = held(&reopened);
        let context = format!("unsynced sector {nth} lost: {survived:?}");
        assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
        let synced: Vec<u64> = survived.iter().copied().filter(|&seq| seq < next).collect();
        assert_eq!(synced, (1..next).collect::<Vec<_>>(), "{context}: synced records lost");
        let came_back = survived.iter().any(|&seq| (next..later).contains(&seq));
        assert!(!(came_back && survived.iter().any(|&seq| seq >= later)), "{context}: refused behind later ones");
    }
}

#[test]
fn power_loss_after_a_ticket_synced_the_directory_of_segments_rolled_while_it_ran_gives_back_the_synced_prefix() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 5 }, Tear::Sectors { seed: 424_242 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            // The ticket after a roll syncs the full log, the new one's records, then the
            // directory; two more rolls land between its files and its directory fsync, so that
            // fsync makes the entries of two segments durable whose predecessor's last records
            // (appended after the ticket synced them) are not.
            let cut = cut_power_on_disk(tear, changes, |disk, store, synced_next, acknowledged| {
                let next = append_past_a_roll(store, synced_next, 3)?;
                let ticket = store.sync_begin()?;
                assert!(ticket.completes_seal());
                let (synced, during) = run_with_dir_sync_held(disk, ticket, || {
                    let rolled = append_past_a_roll(store, next, 2)?;
                    append_past_a_roll(store, rolled, 2)
                });
                store.sync_finish(synced)?;
                *acknowledged = next - 1;
                let next = during.ok_or(StoreError::Poisoned("the power failed".into()))??;
                commit(store)?;
                *acknowledged = next - 1;
                Ok(())
            });
            if cut.kept_the_acknowledged_prefix(&format!("{tear:?}, power cut after {changes} changes")) {
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the rolls and their commits never got through");
        }
    }
}

#[test]
fn power_loss_around_a_delete_in_the_segment_being_sealed_keeps_the_delete_and_the_synced_prefix() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 11 }, Tear::Sectors { seed: 98_765 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            let (mut doomed, mut deleted) = (0, None);
            // The segment holding `doomed` fills and rolls; the delete (which syncs, and so
            // completes the seal under the lock) comes before any commit; then a commit.
            let cut = cut_power(tear, changes, |store, synced_next, acknowledged| {
                doomed = synced_next;
                let next = append_past_a_roll(store, synced_next, 2)?;
                let removed = store.delete(doomed);
                if removed.is_ok() {
                    deleted = Some(doomed);
                    *acknowledged = next - 1;
                }
                removed?;
                append(store, next)?;
                commit(store)?;
                *acknowledged = next;
                Ok(())
            });
            let context = format!("{tear:?}, power cut after {changes} changes");
            let end = cut.end;
            assert!(end <= cut.sent, "{context}: nothing invented");
            if let Some(seq) = deleted {
                assert!(!cut.survived.contains(&seq), "{context}: the deleted seq {seq} came back");
            }
            // A delete that failed may or may not have reached the disk.
            let doomed_kept = cut.survived.contains(&doomed);
            let expected: Vec<u64> = (1..=end).filter(|&seq| seq != doomed || doomed_kept).collect();
            assert_eq!(cut.survived, expected, "{context}: a prefix, no hole");
            assert!(end >= cut.acknowledged, "{context}: acknowledged seqs lost: {:?}", cut.survived);
            if cut.completed {
                assert_eq!(end, cut.sent, "{context}");
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the roll, the delete and the commit never got through");
        }
    }
}

#[test]
fn rolls_while_a_ticket_is_in_flight_queue_their_seals_behind_its_own_without_an_fsync() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut next = 1;
    let ticket = {
        next = append_past_a_roll(&mut store, next, 0).unwrap();
        store.sync_begin().unwrap()
    };
    assert!(ticket.completes_seal());
    // Whole segments of appends while the ticket has not run (a pipelined caller): each roll
    // queues one more seal, none fsyncs; the ticket completes its own, the next commit the rest.
    let syncs = disk.counts().syncs;
    for _ in 0..3 {
        next = append_past_a_roll(&mut store, next, 0).unwrap();
    }
    assert_eq!(disk.counts().syncs, syncs, "no roll completes a pending seal under the lock");
    assert_eq!(store.seals_pending_count(), 4);
    store.sync_finish(ticket.run()).unwrap();
    assert_eq!(store.seals_pending_count(), 3, "the ticket completed the seal it carried, the oldest");
    commit(&mut store).unwrap();
    assert_eq!(store.seals_pending_count(), 0);
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

const CHECKPOINT: &str = "stream.ckpt";

/// Rolls `count` segments with no commit in between, from `next`; returns the next sequence.
fn roll_segments(store: &mut FileStore, mut next: u64, count: usize) -> Result<u64, StoreError> {
    for _ in 0..count {
        next = append_past_a_roll(store, next, 1)?;
    }
    Ok(next)
}

/// A store with one committed segment and `count` more rolled since, none of them committed.
fn store_with_rolls_since_the_last_commit(disk: &SimDisk, count: usize) -> (FileStore, u64) {
    let mut store = open(disk);
    let next = append_past_a_roll(&mut store, 1, 1).unwrap();
    commit(&mut store).unwrap();
    let next = roll_segments(&mut store, next, count).unwrap();
    (store, next)
}

fn index_path(first_seq: u64) -> PathBuf {
    dir().join(format!("{first_seq:020}.idx"))
}

/// First sequences of the segments on the disk, from their log files' names.
fn log_firsts(disk: &SimDisk) -> Vec<u64> {
    let mut firsts: Vec<u64> =
        disk.list_dir(&dir()).unwrap().iter().filter_map(|name| name.strip_suffix(".log")?.parse().ok()).collect();
    firsts.sort_unstable();
    firsts
}

/// Commits, completing the `seals` pending, then cuts the power and removes the checkpoint, so
/// that open reads every index: the store reopens holding `1..next` from valid indexes.
fn complete_seals_then_reopen_from_their_indexes(disk: &SimDisk, mut store: FileStore, seals: usize, next: u64) {
    let ticket = store.sync_begin().unwrap();
    assert_eq!(ticket.seals_count(), seals, "the commit carries every pending seal");
    store.sync_finish(ticket.run()).unwrap();
    assert_eq!(store.seals_pending_count(), 0);
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    disk.remove_file(&dir().join(CHECKPOINT)).unwrap();
    let reopened = open(disk);
    assert_eq!(held(&reopened), (1..next).collect::<Vec<_>>());
    assert_eq!(reopened.recovery_report().indexes_rebuilt_count, 0, "the seals wrote valid indexes");
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn appends_that_roll_three_segments_run_no_fsync_and_the_next_commit_completes_every_seal() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let next = append_past_a_roll(&mut store, 1, 1).unwrap();
    commit(&mut store).unwrap();
    let syncs = disk.counts().syncs;
    let next = roll_segments(&mut store, next, 3).unwrap();
    assert_eq!(disk.counts().syncs, syncs, "three rolls, three seals begun, no fsync");
    assert_eq!(store.seals_pending_count(), 3);
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>(), "sealing segments are read from memory");

    let ticket = store.sync_begin().unwrap();
    assert_eq!(ticket.seals_count(), 3, "the commit carries every pending seal");
    store.sync_finish(ticket.run()).unwrap();
    assert_eq!(store.seals_pending_count(), 0);
    assert_eq!(store.segment_count(), 5);
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>(), "read from the sealed tier now");
    assert!(disk.contents(&dir().join(CHECKPOINT)).is_some(), "the checkpoint is written once no seal is pending");

    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), (1..next).collect::<Vec<_>>());
    assert_eq!(reopened.recovery_report().checkpointed_segments_count, 4, "the checkpoint covers every seal");
    assert_eq!(reopened.state().corruption, None);
    drop(reopened);
    // Without the checkpoint, open reads the four indexes: each is valid, none is rebuilt.
    disk.remove_file(&dir().join(CHECKPOINT)).unwrap();
    let reread = open(&disk);
    assert_eq!(held(&reread), (1..next).collect::<Vec<_>>());
    assert_eq!(reread.recovery_report().indexes_rebuilt_count, 0);
    assert!(reread.recovery_report().index_bytes_read > 0);
    assert_eq!(reread.state().corruption, None);
}

#[test]
fn power_loss_anywhere_from_the_first_of_several_rolls_through_their_commit_gives_back_the_synced_prefix() {
    let changes_max_count = 4 * CHANGES_MAX_COUNT;
    let rolls = [2, 3, SEALS_PENDING_MAX_COUNT + 2];
    for (tear, rolls) in [Tear::LoseUnsynced, Tear::Sectors { seed: 5 }, Tear::Sectors { seed: 4_242_424 }]
        .into_iter()
        .flat_map(|tear| rolls.map(|rolls| (tear, rolls)))
    {
        for changes in 0..changes_max_count {
            // Several rolls with no commit between them, the commit that completes their
            // seals, then one more append and its commit.
            let cut = cut_power(tear, changes, |store, synced_next, acknowledged| {
                let next = roll_segments(store, synced_next, rolls)?;
                commit(store)?;
                *acknowledged = next - 1;
                append(store, next)?;
                commit(store)?;
                *acknowledged = next;
                Ok(())
            });
            let context = format!("{tear:?}, {rolls} rolls, power cut after {changes} changes");
            if cut.kept_the_acknowledged_prefix(&context) {
                break;
            }
            assert!(changes + 1 < changes_max_count, "{context}: the rolls and their commits never got through");
        }
    }
}

#[test]
fn several_seals_a_crashed_process_left_unfinished_are_completed_by_the_next_commit_after_reopening() {
    let disk = SimDisk::new();
    let (store, next) = store_with_rolls_since_the_last_commit(&disk, 3);
    // The process dies before the commit: its files stay as the OS holds them, three indexes empty.
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), (1..next).collect::<Vec<_>>());
    assert_eq!(reopened.segment_count(), 5);
    assert_eq!(reopened.seals_pending_count(), 3, "open left the three seals to the next commit");
    complete_seals_then_reopen_from_their_indexes(&disk, reopened, 3, next);
}

#[test]
fn a_failed_fsync_of_the_second_seals_index_poisons_and_reopens_to_the_synced_prefix() {
    let disk = SimDisk::new();
    let (mut store, next) = store_with_rolls_since_the_last_commit(&disk, 2);
    // The last commit acknowledged the record that rolled into the second segment and one more.
    let committed = log_firsts(&disk)[1] + 1;
    let second_sealing = log_firsts(&disk)[2];
    let ticket = store.sync_begin().unwrap();
    assert_eq!(ticket.seals_count(), 2);
    disk.fail_syncs_of(Some(&index_path(second_sealing)));
    let synced = ticket.run();
    disk.fail_syncs_of(None);
    assert!(matches!(store.sync_finish(synced), Err(StoreError::Io { operation: "fsync", .. })));
    assert!(store.poisoned().is_some());
    assert!(matches!(append(&mut store, next), Err(StoreError::Poisoned(_))));
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>(), "reads go on");
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    // Nothing after the last commit was acknowledged; what the failed commit made durable
    // before its failure may stay, as a prefix.
    let reopened = open(&disk);
    let survived = held(&reopened);
    assert!(survived.len() as u64 >= committed, "acknowledged seqs lost: {survived:?}");
    assert_eq!(survived, (1..=survived.len() as u64).collect::<Vec<_>>(), "a prefix, no hole");
    assert!((survived.len() as u64) < next, "nothing invented");
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn a_full_disk_while_the_ticket_writes_the_second_seals_index_is_out_of_space_and_loses_nothing() {
    // The same appends on a twin disk tell how long the first index is.
    let twin = SimDisk::new();
    let (mut twin_store, _) = store_with_rolls_since_the_last_commit(&twin, 2);
    commit(&mut twin_store).unwrap();
    let first_sealing = log_firsts(&twin)[1];
    let first_index_bytes = twin.contents(&index_path(first_sealing)).unwrap().len() as u64;

    let disk = SimDisk::new();
    let (mut store, next) = store_with_rolls_since_the_last_commit(&disk, 2);
    let ticket = store.sync_begin().unwrap();
    assert_eq!(ticket.seals_count(), 2);
    // Room for the first index and a little of the second: its write fails with ENOSPC.
    disk.set_free_bytes(Some(first_index_bytes + 16));
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
    assert_eq!(store.seals_pending_count(), 0);
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open(&disk);
    assert_eq!(held(&reopened), (1..=next).collect::<Vec<_>>());
    assert_eq!(reopened.state().corruption, None);
}

#[test]
fn rolls_past_the_pending_bound_complete_the_oldest_seal_in_place_and_keep_the_queue_bounded() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut next = append_past_a_roll(&mut store, 1, 1).unwrap();
    commit(&mut store).unwrap();
    for roll in 1..=SEALS_PENDING_MAX_COUNT + 3 {
        let syncs = disk.counts().syncs;
        next = append_past_a_roll(&mut store, next, 1).unwrap();
        let pending = store.seals_pending_count();
        assert_eq!(pending, roll.min(SEALS_PENDING_MAX_COUNT), "roll {roll}: the queue is bounded");
        let fsynced = disk.counts().syncs > syncs;
        assert_eq!(fsynced, roll > SEALS_PENDING_MAX_COUNT, "roll {roll}: only a roll past the bound fsyncs");
    }
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>());
    complete_seals_then_reopen_from_their_indexes(&disk, store, SEALS_PENDING_MAX_COUNT, next);
}

#[test]
fn an_append_that_would_roll_past_the_pending_bound_asks_for_a_commit_aside_first_and_then_runs_no_fsync() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut next = append_past_a_roll(&mut store, 1, 1).unwrap();
    commit(&mut store).unwrap();
    next = roll_segments(&mut store, next, SEALS_PENDING_MAX_COUNT).unwrap();
    assert_eq!(store.seals_pending_count(), SEALS_PENDING_MAX_COUNT);
    // Appends that fit ask for nothing; the one that would roll asks, once.
    let mut asked = 0;
    let segments = store.segment_count();
    while store.segment_count() == segments {
        let message = payload(next);
        if store.commit_before_append(subject(next), None, &message) {
            asked += 1;
            // As the server's ingest does: a commit aside, its fsyncs with the lock let go.
            let ticket = store.sync_begin_aside().unwrap();
            assert_eq!(ticket.seals_count(), SEALS_PENDING_MAX_COUNT, "the commit completes every pending seal");
            store.sync_finish(ticket.run()).unwrap();
            assert!(!store.commit_before_append(subject(next), None, &message), "asked again after the commit");
        }
        let syncs = disk.counts().syncs;
        append(&mut store, next).unwrap();
        assert_eq!(disk.counts().syncs, syncs, "seq {next}: an append fsyncs nothing");
        next += 1;
    }
    assert_eq!(asked, 1);
    assert_eq!(store.seals_pending_count(), 1, "the roll began its own seal only");
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>());
    complete_seals_then_reopen_from_their_indexes(&disk, store, 1, next);
}

#[test]
fn seals_one_roll_short_of_the_bound_ask_for_a_commit_aside_which_completes_them_without_the_lock() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut next = append_past_a_roll(&mut store, 1, 1).unwrap();
    commit(&mut store).unwrap();
    assert!(!store.release_waits(), "nothing pending after a commit");
    for roll in 1..SEALS_PENDING_MAX_COUNT {
        assert!(!store.release_waits(), "roll {roll}: {} pending, far from the bound", roll - 1);
        next = append_past_a_roll(&mut store, next, 1).unwrap();
    }
    assert!(store.release_waits(), "the next roll would complete a seal under the caller's lock");
    // The commit aside a caller then makes: its ticket completes every seal.
    let ticket = store.sync_begin_aside().unwrap();
    assert_eq!(ticket.seals_count(), SEALS_PENDING_MAX_COUNT - 1);
    store.sync_finish(ticket.run()).unwrap();
    assert_eq!(store.seals_pending_count(), 0);
    assert!(!store.release_waits());
    let syncs = disk.counts().syncs;
    next = append_past_a_roll(&mut store, next, 1).unwrap();
    assert_eq!(disk.counts().syncs, syncs, "the next roll runs no fsync");
    assert_eq!(held(&store), (1..next).collect::<Vec<_>>());
}

#[test]
fn unfinished_seals_before_a_valid_index_are_completed_at_open_and_nothing_is_reported() {
    // A directory that kept a newer index but lost the older ones' (damage a crash of this
    // store does not leave: indexes are written oldest first): the same appends on a twin
    // disk give the newest sealed segment's valid index.
    let twin = SimDisk::new();
    let (mut twin_store, _) = store_with_rolls_since_the_last_commit(&twin, 3);
    commit(&mut twin_store).unwrap();
    let disk = SimDisk::new();
    let (store, next) = store_with_rolls_since_the_last_commit(&disk, 3);
    drop(store);
    let newest_sealed = log_firsts(&disk)[3];
    disk.put(&index_path(newest_sealed), &twin.contents(&index_path(newest_sealed)).unwrap());
    let mut reopened = open(&disk);
    assert_eq!(held(&reopened), (1..next).collect::<Vec<_>>());
    assert_eq!(reopened.seals_pending_count(), 0, "the older seals were completed before the valid index was loaded");
    assert_eq!(reopened.state().corruption, None);
    commit(&mut reopened).unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(reopened);
    let again = open(&disk);
    assert_eq!(held(&again), (1..next).collect::<Vec<_>>());
    assert_eq!(again.state().corruption, None);
}
