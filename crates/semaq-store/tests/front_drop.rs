//! Segments an append's limits empty (max_msgs, max_bytes, max_msgs_per_subject, discard old)
//! are given back without an fsync under the store's lock: the append only takes the messages
//! out; the next commit's ticket fsyncs the records, then persists the floor, and its
//! `sync_finish` removes the segments wholly below that durable floor. A power loss anywhere
//! in between keeps every acknowledged message and brings back none a commit covered.

mod common;

use std::path::PathBuf;

use common::commit;
use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::{FileStore, FileStoreConfig, StoreError, StoreLimits, StreamStore};

const SEGMENT_BYTES: u64 = 4 * 1024;
/// Live messages the bounded stream keeps: fewer than a segment holds (about 60).
const KEPT_MSGS: u64 = 20;
/// Changes an append that drops a segment and the commits after it make at most, with room to
/// spare: the crash test cuts the power after each count up to the first that lets them through.
const CHANGES_MAX_COUNT: u64 = 200;
/// Rolls of the steady-load test.
const ROLLS_COUNT: u64 = 120;

fn dir() -> PathBuf {
    PathBuf::from("/streams/bounded")
}

fn open_with(disk: &SimDisk, limits: StoreLimits) -> FileStore {
    let config = FileStoreConfig { segment_size_bytes: SEGMENT_BYTES, limits, ..FileStoreConfig::new(dir()) };
    FileStore::open_on(config, disk.shared()).unwrap()
}

fn bounded() -> StoreLimits {
    StoreLimits { max_msgs: Some(KEPT_MSGS), ..StoreLimits::default() }
}

/// Each limit that takes the oldest messages out as new ones come.
fn limit_kinds() -> [StoreLimits; 3] {
    [
        bounded(),
        // Fewer than KEPT_MSGS messages (55 bytes each, as nats-server counts them).
        StoreLimits { max_bytes: Some(KEPT_MSGS * 50), ..StoreLimits::default() },
        StoreLimits { max_msgs_per_subject: Some(KEPT_MSGS), ..StoreLimits::default() },
    ]
}

fn payload(seq: u64) -> Vec<u8> {
    format!("reading-{seq:08}").into_bytes()
}

fn append(store: &mut FileStore, seq: u64) -> Result<u64, StoreError> {
    store.append("sensor.1", None, &payload(seq), i64::try_from(seq).unwrap()).map(|(seq, _)| seq)
}

/// Sequences of the live messages, each checked to hold its own payload.
fn held(store: &FileStore) -> Vec<u64> {
    common::held_with(store, payload)
}

/// Appends from `next` until a roll has started a new segment, then `extra` more; returns the
/// next sequence to append.
fn append_past_a_roll(store: &mut FileStore, next: u64, extra: u64) -> Result<u64, StoreError> {
    common::append_past_a_roll_with(store, (next, extra), append)
}

/// Segment logs in the stream's directory.
fn log_files(disk: &SimDisk) -> usize {
    let names = disk.shared().list_dir(&dir()).unwrap();
    names.iter().filter(|name| name.ends_with(".log")).count()
}

#[test]
fn appends_whose_limits_empty_a_front_segment_run_no_fsync_and_the_next_commit_gives_it_back() {
    for limits in limit_kinds() {
        let disk = SimDisk::new();
        let mut store = open_with(&disk, limits.clone());
        let next = append_past_a_roll(&mut store, 1, 0).unwrap();
        commit(&mut store).unwrap();
        let syncs = disk.counts().syncs;
        // A roll, then enough appends that every message of the segment before it is out.
        let next = append_past_a_roll(&mut store, next, KEPT_MSGS).unwrap();
        let state = store.state();
        assert!(state.msgs <= KEPT_MSGS, "{limits:?}: the limit holds");
        assert!(state.first_seq > next - KEPT_MSGS - 1, "{limits:?}: the older segments hold nothing live");
        assert_eq!(disk.counts().syncs, syncs, "{limits:?}: the appends and their drops fsync nothing");
        assert!(store.segment_count() > 1, "{limits:?}: the dead segments wait for a commit");
        assert!(store.release_waits(), "{limits:?}: and say so");

        commit(&mut store).unwrap();
        assert_eq!(store.segment_count(), 1, "{limits:?}: the commit gave the dead segments back");
        assert!(!store.release_waits());
        assert_eq!(log_files(&disk), 1, "{limits:?}");
        let expected = held(&store);
        disk.crash(Tear::LoseUnsynced);
        drop(store);
        let reopened = open_with(&disk, StoreLimits::default());
        assert_eq!(held(&reopened), expected, "{limits:?}: with the limits lifted, nothing removed came back");
        assert_eq!(reopened.state().corruption, None);
    }
}

#[test]
fn a_steady_bounded_load_that_rolls_during_every_commit_keeps_a_bounded_number_of_segments() {
    let disk = SimDisk::new();
    let mut store = open_with(&disk, bounded());
    let mut next = append_past_a_roll(&mut store, 1, 1).unwrap();
    let mut most_logs = 0;
    for _ in 0..ROLLS_COUNT {
        // Pipelined, as the ingest task commits: the next batch, which rolls again, is appended
        // while the commit's fsyncs run, so a seal is pending at every `sync_finish`.
        let ticket = store.sync_begin().unwrap();
        next = append_past_a_roll(&mut store, next, 1).unwrap();
        store.sync_finish(ticket.run()).unwrap();
        most_logs = most_logs.max(log_files(&disk));
    }
    assert!(most_logs <= 3, "dead segments piled up: {most_logs} logs at once");
    commit(&mut store).unwrap();
    // The newest messages span the active segment and the one before it: nothing else stays.
    assert_eq!(log_files(&disk), 2, "a commit with no seal pending leaves the live segments alone");
    assert_eq!(held(&store), (next - KEPT_MSGS..next).collect::<Vec<_>>());
}

#[test]
fn power_loss_anywhere_through_an_append_that_drops_a_segment_and_its_commits_keeps_the_acknowledged() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 5 }, Tear::Sectors { seed: 424_242 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let mut store = open_with(&disk, bounded());
            let synced_next = append_past_a_roll(&mut store, 1, 2).unwrap();
            commit(&mut store).unwrap();
            // What the last commit that returned covered: its appends and its floor.
            let mut acknowledged = synced_next - 1;
            let mut floor = store.state().first_seq;
            disk.freeze_after(changes, tear);
            // A roll and appends that push the segment before it out, then a pipelined commit:
            // one more append (another drop) while its fsyncs run, and a second commit for it.
            let result = append_past_a_roll(&mut store, synced_next, KEPT_MSGS).and_then(|next| {
                let covered_floor = store.state().first_seq;
                let ticket = store.sync_begin()?;
                let during = append(&mut store, next);
                store.sync_finish(ticket.run())?;
                (acknowledged, floor) = (next - 1, covered_floor);
                during?;
                let covered_floor = store.state().first_seq;
                commit(&mut store)?;
                (acknowledged, floor) = (next, covered_floor);
                Ok(())
            });
            let sent = store.state().last_seq;
            let completed = result.is_ok() && !disk.is_frozen();
            disk.crash(tear);
            drop(store);
            // The limits lifted: a removed message that came back would show.
            let reopened = open_with(&disk, StoreLimits::default());
            let survived = held(&reopened);
            let context = format!("{tear:?}, power cut after {changes} changes");
            assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
            assert_eq!(reopened.state().corruption, None, "{context}");
            let (Some(&lowest), Some(&highest)) = (survived.first(), survived.last()) else {
                panic!("{context}: everything lost");
            };
            assert!(highest >= acknowledged, "{context}: acknowledged seqs lost: {survived:?}");
            assert!(lowest >= floor, "{context}: seqs a returned commit removed came back: {survived:?}");
            assert!(highest <= sent, "{context}: nothing invented");
            // A removal may be durable without the floor: a seal's index marks what the limits
            // had removed at its roll. Never without the appends that pushed the message out.
            let newest: Vec<u64> = ((highest + 1).saturating_sub(KEPT_MSGS).max(floor)..=highest).collect();
            assert!(survived.ends_with(&newest), "{context}: a message went before its successors came: {survived:?}");
            if completed {
                assert_eq!(survived, (floor..=sent).collect::<Vec<_>>(), "{context}");
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the drop and its commits never got through");
        }
    }
}

#[test]
fn a_lowered_limit_runs_no_fsync_and_the_next_commit_gives_the_segments_it_emptied_back() {
    let disk = SimDisk::new();
    let mut store = open_with(&disk, StoreLimits::default());
    let next = append_past_a_roll(&mut store, 1, 0).unwrap();
    let next = append_past_a_roll(&mut store, next, 3).unwrap();
    commit(&mut store).unwrap();
    let (segments, syncs) = (store.segment_count(), disk.counts().syncs);

    assert_eq!(store.update_limits(bounded()).unwrap(), next - 1 - KEPT_MSGS);
    assert_eq!(disk.counts().syncs, syncs, "lowering the limit fsyncs nothing");
    assert_eq!(store.segment_count(), segments, "the emptied segments wait for a commit");
    assert!(store.release_waits());
    assert_eq!(held(&store), (next - KEPT_MSGS..next).collect::<Vec<_>>(), "readers see them gone at once");

    commit(&mut store).unwrap();
    assert!(store.segment_count() < segments, "the commit gave the emptied segments back");
    assert!(!store.release_waits());
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open_with(&disk, StoreLimits::default());
    assert_eq!(held(&reopened), (next - KEPT_MSGS..next).collect::<Vec<_>>(), "durable once committed");
}

#[test]
fn power_loss_anywhere_through_a_lowered_limits_commit_keeps_the_newest_and_brings_nothing_back_after_it() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 3 }] {
        for changes in 0..CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let mut store = open_with(&disk, StoreLimits::default());
            let next = append_past_a_roll(&mut store, 1, 0).unwrap();
            let next = append_past_a_roll(&mut store, next, 3).unwrap();
            commit(&mut store).unwrap();
            let last = next - 1;
            disk.freeze_after(changes, tear);
            let lowered = store.update_limits(bounded());
            let committed = lowered.is_ok() && commit(&mut store).is_ok() && !disk.is_frozen();
            disk.crash(tear);
            drop(store);
            let reopened = open_with(&disk, StoreLimits::default());
            let survived = held(&reopened);
            let context = format!("{tear:?}, power cut after {changes} changes");
            assert_eq!(reopened.state().corruption, None, "{context}");
            let lowest = survived.first().copied().unwrap_or(next);
            assert_eq!(survived, (lowest..=last).collect::<Vec<_>>(), "{context}: the newest, no hole");
            assert!(lowest <= next - KEPT_MSGS, "{context}: a message the limit keeps was lost");
            if committed {
                assert_eq!(lowest, next - KEPT_MSGS, "{context}: removed messages came back after the commit");
                break;
            }
            assert!(changes + 1 < CHANGES_MAX_COUNT, "the lowered limit's commit never got through");
        }
    }
}
