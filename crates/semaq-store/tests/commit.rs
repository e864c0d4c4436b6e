//! The commit in three steps (`commit.rs`): changes handed to the OS under the lock, fsynced
//! without it, recorded under it again. Readers never wait for the fsync; a crash between the
//! steps loses nothing acknowledged; a failed fsync poisons and acknowledges nothing.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::commit;
use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::{FileStore, FileStoreConfig, PurgeRequest, StoreError, StoreLimits, StreamStore};

const SEGMENT_BYTES: u64 = 4 * 1024;
const WAIT: Duration = Duration::from_secs(10);

fn dir() -> PathBuf {
    PathBuf::from("/streams/orders")
}

fn open_with(disk: &SimDisk, limits: StoreLimits) -> FileStore {
    let config = FileStoreConfig { dir: dir(), segment_size_bytes: SEGMENT_BYTES, limits };
    FileStore::open_on(config, disk.shared()).unwrap()
}

fn open(disk: &SimDisk) -> FileStore {
    open_with(disk, StoreLimits::default())
}

fn payload(seq: u64) -> Vec<u8> {
    format!("order-{seq:08}").into_bytes()
}

fn append(store: &mut FileStore, subject: &str, seq: u64) -> u64 {
    store.append(subject, None, &payload(seq), 7).unwrap().0
}

/// Sequences of the live messages, each checked to hold its own payload.
fn held(store: &FileStore) -> Vec<u64> {
    common::held_with(store, payload)
}

fn reopened_after_power_loss(disk: &SimDisk, store: FileStore, tear: Tear) -> FileStore {
    disk.crash(tear);
    drop(store);
    open(disk)
}

#[test]
fn a_reader_under_the_stores_lock_does_not_wait_for_a_commits_fsync() {
    let disk = SimDisk::new();
    let shared = Arc::new(Mutex::new(open(&disk)));
    {
        let mut store = shared.lock().unwrap();
        append(&mut store, "orders.new", 1);
        commit(&mut store).unwrap();
    }
    let hold = disk.hold_syncs();
    let ingest = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let ticket = {
                let mut store = shared.lock().unwrap();
                append(&mut store, "orders.new", 2);
                store.sync_begin().unwrap()
            };
            let synced = ticket.run();
            shared.lock().unwrap().sync_finish(synced)
        })
    };
    assert!(hold.wait_for_waiting(1, WAIT), "the commit's fsync never started");

    // The fsync is stuck on the disk; the store's lock is free and reads are answered.
    let started = Instant::now();
    let store = shared.try_lock().expect("the store's lock is not held across the fsync");
    assert_eq!(store.get(1).unwrap().unwrap().payload, payload(1));
    assert_eq!(store.state().last_seq, 2, "the batch is visible whole, before it is durable");
    drop(store);
    assert!(started.elapsed() < WAIT);
    assert!(!ingest.is_finished(), "the commit waits for its fsync");

    hold.release();
    ingest.join().unwrap().unwrap();
    let store = Arc::into_inner(shared).unwrap().into_inner().unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![1, 2], "finished means durable");
}

#[test]
fn a_crash_between_written_and_synced_keeps_every_acknowledged_message() {
    for seed in 0..32 {
        let disk = SimDisk::new();
        let mut store = open(&disk);
        let mut acknowledged = Vec::new();
        for seq in 1..=40 {
            append(&mut store, "orders.new", seq);
            if seq % 5 == 0 {
                commit(&mut store).unwrap();
                acknowledged = (1..=seq).collect();
            }
        }
        // Written (step 1) but not synced: the power fails before the ticket runs.
        append(&mut store, "orders.new", 41);
        let _unrun = store.sync_begin().unwrap();
        let reopened = reopened_after_power_loss(&disk, store, Tear::Sectors { seed });
        let survived = held(&reopened);
        assert_eq!(survived[..acknowledged.len()], acknowledged[..], "seed {seed}");
        assert!(survived.len() <= 41, "nothing invented");
    }
}

#[test]
fn a_failed_fsync_outside_the_lock_poisons_and_acknowledges_nothing() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    append(&mut store, "orders.new", 1);
    commit(&mut store).unwrap();

    append(&mut store, "orders.new", 2);
    let ticket = store.sync_begin().unwrap();
    disk.fail_syncs(true);
    let synced = ticket.run();
    assert!(!synced.succeeded());
    disk.fail_syncs(false);
    let refused = store.sync_finish(synced).unwrap_err();
    assert!(matches!(&refused, StoreError::Io { operation: "fsync", .. }), "{refused}");
    assert!(store.poisoned().is_some_and(|reason| reason.contains("fsync")), "{:?}", store.poisoned());
    // A later sync that would find the pages clean never turns into an acknowledgement.
    assert!(matches!(store.sync(), Err(StoreError::Poisoned(_))));
    assert!(matches!(store.sync_begin(), Err(StoreError::Poisoned(_))));
    assert_eq!(held(&store), vec![1, 2], "reads go on");

    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![1]);
}

#[test]
fn a_store_poisoned_while_the_fsync_ran_refuses_the_commit() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    append(&mut store, "orders.new", 1);
    let ticket = store.sync_begin().unwrap();
    // Another change under the lock (an API delete) fails on the disk meanwhile.
    disk.fail_syncs(true);
    assert!(store.delete(1).is_err());
    disk.fail_syncs(false);
    let synced = ticket.run();
    assert!(matches!(store.sync_finish(synced), Err(StoreError::Poisoned(_))));
}

#[test]
fn a_purge_while_the_fsync_runs_leaves_the_ticket_harmless_and_the_purge_durable() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    for seq in 1..=400 {
        append(&mut store, "orders.new", seq);
    }
    assert!(store.segment_count() > 2, "the test needs sealed segments to remove");
    let ticket = store.sync_begin().unwrap();
    // Under the lock while the ticket waits: every segment file is removed and a fresh one made.
    assert_eq!(store.purge(&PurgeRequest::default()).unwrap(), 400);
    store.sync_finish(ticket.run()).unwrap();
    append(&mut store, "orders.new", 401);
    commit(&mut store).unwrap();

    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![401]);
    assert_eq!(reopened.state().first_seq, 401, "the purge's floor held");
}

#[test]
fn removals_by_limits_in_a_ticket_are_durable_when_it_finishes() {
    let disk = SimDisk::new();
    let limits = StoreLimits { max_msgs_per_subject: Some(1), ..StoreLimits::default() };
    let mut store = open_with(&disk, limits.clone());
    // Two keys, updated in turn: each update removes that key's previous value, from the
    // middle of the stream (a delete log entry) or from the front (the floor).
    for seq in 1..=20 {
        let key = if seq % 2 == 0 { "kv.b" } else { "kv.a" };
        append(&mut store, key, seq);
        commit(&mut store).unwrap();
    }
    let before = held(&store);
    assert_eq!(before, vec![19, 20]);
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = open_with(&disk, limits);
    assert_eq!(held(&reopened), before, "no removed value comes back");
    assert_eq!(reopened.state().first_seq, 19);
}

#[test]
fn a_commit_with_nothing_new_runs_no_fsync() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    append(&mut store, "orders.new", 1);
    commit(&mut store).unwrap();
    let syncs = disk.counts().syncs;
    let ticket = store.sync_begin().unwrap();
    assert!(ticket.is_empty());
    store.sync_finish(ticket.run()).unwrap();
    assert_eq!(disk.counts().syncs, syncs);
}

/// Appends a message of `size` bytes whose payload names its sequence (see `held_big`).
fn append_big(store: &mut FileStore, seq: u64, size: usize) -> u64 {
    let mut body = payload(seq);
    body.resize(size, b'x');
    store.append("orders.big", None, &body, 7).unwrap().0
}

/// Sequences of the live messages, each checked to hold its own payload of `size` bytes.
fn held_big(store: &FileStore, size: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).unwrap() {
        let mut body = payload(message.seq);
        body.resize(size, b'x');
        assert!(message.payload == body, "seq {} does not hold its own payload", message.seq);
        seqs.push(message.seq);
        from = message.seq + 1;
    }
    seqs
}

#[test]
fn appends_made_while_a_ticket_runs_are_left_whole_for_the_next_ticket() {
    // Segments large enough to be grown ahead in zeros: the ticket that grows the log must not
    // write its zeros over the next batch, handed to the OS while the ticket runs.
    const SIZE: usize = 16 * 1024;
    let disk = SimDisk::new();
    let config = FileStoreConfig { dir: dir(), segment_size_bytes: 64 * 1024 * 1024, limits: StoreLimits::default() };
    let mut store = FileStore::open_on(config.clone(), disk.shared()).unwrap();
    append_big(&mut store, 1, SIZE);
    let first = store.sync_begin().unwrap();
    // The next batch, past the write buffer (so it reaches the OS), while the first fsyncs.
    for seq in 2..=40 {
        append_big(&mut store, seq, SIZE);
    }
    store.sync_finish(first.run()).unwrap();
    assert_eq!(held_big(&store, SIZE), (1..=40).collect::<Vec<_>>());

    // Only the first batch is durable so far; the second is after its own ticket.
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let mut store = FileStore::open_on(config.clone(), disk.shared()).unwrap();
    let survived = held_big(&store, SIZE);
    assert_eq!(survived.first(), Some(&1), "the first batch's ticket made it durable");
    let last = store.state().last_seq;
    for seq in last + 1..=last + 39 {
        append_big(&mut store, seq, SIZE);
    }
    let second = store.sync_begin().unwrap();
    store.sync_finish(second.run()).unwrap();
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    let reopened = FileStore::open_on(config, disk.shared()).unwrap();
    assert_eq!(held_big(&reopened, SIZE), (1..=last + 39).collect::<Vec<_>>(), "the second ticket covers them all");
}

#[test]
fn an_eio_on_a_ticket_fails_the_batch_appended_behind_it_too() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    append(&mut store, "orders.new", 1);
    commit(&mut store).unwrap();

    // Batch N is written and its ticket taken; batch N+1 is appended while N's fsync runs.
    append(&mut store, "orders.new", 2);
    let ticket = store.sync_begin().unwrap();
    append(&mut store, "orders.new", 3);
    disk.fail_syncs(true);
    let synced = ticket.run();
    disk.fail_syncs(false);
    assert!(store.sync_finish(synced).is_err(), "batch N is refused");
    // N+1 was never synced: its ticket is refused, and no later sync turns it into an ack.
    assert!(matches!(store.sync_begin(), Err(StoreError::Poisoned(_))));
    assert!(matches!(store.sync(), Err(StoreError::Poisoned(_))));
    assert!(matches!(store.append("orders.new", None, &payload(4), 7), Err(StoreError::Poisoned(_))));

    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![1], "nothing unacknowledged is durable");
}

#[test]
fn a_commit_finished_behind_later_appends_leaves_no_checkpoint_of_their_removals() {
    // Appends made while a ticket runs may evict older messages (limits). Were the checkpoint
    // written when that ticket finished, it would record those removals as durable, and a
    // power cut would lose acknowledged messages along with the unacknowledged appends that
    // pushed them out. Every count of such appends, across segment boundaries or not.
    let limits = StoreLimits { max_msgs: Some(100), ..StoreLimits::default() };
    for behind in 1..=120 {
        let disk = SimDisk::new();
        let mut store = open_with(&disk, limits.clone());
        for seq in 1..=300 {
            append(&mut store, "orders.new", seq);
        }
        commit(&mut store).unwrap();
        append(&mut store, "orders.new", 301);
        let ticket = store.sync_begin().unwrap();
        for seq in 302..302 + behind {
            append(&mut store, "orders.new", seq);
        }
        store.sync_finish(ticket.run()).unwrap();

        disk.crash(Tear::LoseUnsynced);
        drop(store);
        let reopened = open_with(&disk, limits.clone());
        let held = held(&reopened);
        let last = *held.last().expect("messages survive");
        assert!(last >= 301, "{behind} behind: the acknowledged message 301 survived");
        assert_eq!(held, (last - 99..=last).collect::<Vec<_>>(), "{behind} behind: the newest 100 survive");
    }
}

#[test]
fn a_lazy_removal_is_durable_at_the_next_commit_not_before() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    for seq in 1..=3 {
        append(&mut store, "orders.new", seq);
    }
    commit(&mut store).unwrap();
    assert!(store.remove(2).unwrap());
    assert_eq!(held(&store), vec![1, 3], "gone for readers at once");
    let store = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&store), vec![1, 2, 3], "not durable before a commit");

    let mut store = store;
    assert!(store.remove(1).unwrap());
    assert!(store.remove(2).unwrap());
    commit(&mut store).unwrap();
    let store = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&store), vec![3], "durable after one");
}

/// Appends `seqs` alternating between two subjects (`kv.a` for odd, `kv.b` for even), as a KV
/// bucket's two keys.
fn append_keys(store: &mut FileStore, seqs: std::ops::RangeInclusive<u64>) -> Result<(), StoreError> {
    for seq in seqs {
        let key = if seq % 2 == 0 { "kv.b" } else { "kv.a" };
        store.append(key, None, &payload(seq), 7)?;
    }
    Ok(())
}

/// The purges the server makes: the API's (everything, by subject, `keep`, up to a sequence)
/// and a KV rollup's (by subject up to the rollup message, which stays).
/// Whether a purge keeps `seq` of a stream whose last sequence is `last`.
type Keeps = fn(u64, u64) -> bool;

/// Each named, with what it keeps.
fn purges() -> Vec<(&'static str, PurgeRequest, Keeps)> {
    fn none_left(_: u64, _: u64) -> bool {
        false
    }
    fn odd_gone(seq: u64, _: u64) -> bool {
        seq.is_multiple_of(2)
    }
    fn keep_ten(seq: u64, last: u64) -> bool {
        seq + 10 > last
    }
    fn front_gone(seq: u64, _: u64) -> bool {
        seq >= 150
    }
    fn rolled_up(seq: u64, _: u64) -> bool {
        seq.is_multiple_of(2) || seq >= 199
    }
    vec![
        ("everything", PurgeRequest::default(), none_left),
        ("subject", PurgeRequest { subject: Some("kv.a".into()), ..PurgeRequest::default() }, odd_gone),
        ("keep", PurgeRequest { keep: Some(10), ..PurgeRequest::default() }, keep_ten),
        ("up to seq", PurgeRequest { up_to_seq: Some(150), ..PurgeRequest::default() }, front_gone),
        ("rollup", PurgeRequest { subject: Some("kv.a".into()), up_to_seq: Some(199), keep: None }, rolled_up),
    ]
}

#[test]
fn a_lazy_purge_is_durable_after_its_commit_and_not_before() {
    for (name, request, kept) in purges() {
        let disk = SimDisk::new();
        let mut store = open(&disk);
        append_keys(&mut store, 1..=200).unwrap();
        commit(&mut store).unwrap();
        assert!(store.segment_count() > 2, "the test needs sealed segments to remove");
        let expected: Vec<u64> = (1..=200).filter(|&seq| kept(seq, 200)).collect();

        let purged = store.purge_unsynced(&request).unwrap();
        assert_eq!(purged, 200 - expected.len() as u64, "{name}");
        assert_eq!(held(&store), expected, "{name}: gone for readers at once");
        let store = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
        assert_eq!(held(&store), (1..=200).collect::<Vec<_>>(), "{name}: not durable before a commit");

        let mut store = store;
        store.purge_unsynced(&request).unwrap();
        let ticket = store.sync_begin().unwrap();
        // Run, not finished: the fsyncs are done, so the purge is on disk already.
        let synced = ticket.run();
        let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
        drop(synced);
        assert_eq!(held(&reopened), expected, "{name}: durable once its ticket ran");

        let mut store = reopened;
        store.purge_unsynced(&request).unwrap();
        commit(&mut store).unwrap();
        append_keys(&mut store, 201..=201).unwrap();
        commit(&mut store).unwrap();
        let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
        let mut after: Vec<u64> = expected.clone();
        after.push(201);
        assert_eq!(held(&reopened), after, "{name}: durable after the commit, and appends go on");
        assert_eq!(reopened.state().corruption, None, "{name}");
    }
}

#[test]
fn a_lazy_purge_of_everything_gives_the_segments_back_at_its_commit() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    append_keys(&mut store, 1..=400).unwrap();
    commit(&mut store).unwrap();
    let segments = store.segment_count();
    assert!(segments > 2);
    store.purge_unsynced(&PurgeRequest::default()).unwrap();
    assert_eq!(store.segment_count(), segments, "nothing removed before the floor is durable");
    commit(&mut store).unwrap();
    assert_eq!(store.segment_count(), 1, "one fresh segment once it is");
    assert_eq!(store.state().first_seq, 401);
    append_keys(&mut store, 401..=401).unwrap();
    commit(&mut store).unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![401]);
    assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new());
}

#[test]
fn a_lazy_purge_and_skip_commit_with_the_lock_released_for_the_fsync() {
    let disk = SimDisk::new();
    let shared = Arc::new(Mutex::new(open(&disk)));
    {
        let mut store = shared.lock().unwrap();
        append_keys(&mut store, 1..=200).unwrap();
        commit(&mut store).unwrap();
    }
    let hold = disk.hold_syncs();
    let api = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let ticket = {
                let mut store = shared.lock().unwrap();
                store.purge_unsynced(&PurgeRequest::default())?;
                store.skip_to_unsynced(1_000)?;
                store.sync_begin()?
            };
            let synced = ticket.run();
            shared.lock().unwrap().sync_finish(synced)
        })
    };
    assert!(hold.wait_for_waiting(1, WAIT), "the purge's fsync never started");
    let store = shared.try_lock().expect("the store's lock is not held across the purge's fsync");
    assert_eq!(store.state().msgs, 0, "the purge is visible before it is durable");
    assert_eq!(store.state().first_seq, 1_000);
    drop(store);
    assert!(!api.is_finished(), "the purge waits for its fsync");
    hold.release();
    api.join().unwrap().unwrap();

    let mut store = Arc::into_inner(shared).unwrap().into_inner().unwrap();
    assert_eq!(store.segment_count(), 1);
    assert_eq!(store.append("kv.a", None, &payload(1_000), 7).unwrap().0, 1_000);
    commit(&mut store).unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![1_000]);
}

/// A store whose ten committed keys were purged and skipped past to 500, neither committed yet.
fn purged_and_skipped_to_500_without_a_commit() -> (SimDisk, FileStore) {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    append_keys(&mut store, 1..=10).unwrap();
    commit(&mut store).unwrap();
    store.purge_unsynced(&PurgeRequest::default()).unwrap();
    assert!(store.skip_to_unsynced(500).unwrap());
    (disk, store)
}

#[test]
fn an_append_behind_an_uncommitted_skip_lands_at_the_skipped_to_sequence() {
    let (disk, mut store) = purged_and_skipped_to_500_without_a_commit();
    // The ingest appends before the purge's commit: the floor is persisted for it, in place.
    assert_eq!(store.append("kv.a", None, &payload(500), 7).unwrap().0, 500);
    commit(&mut store).unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![500]);
    assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new());
}

/// Changes (writes, fsyncs, creates, removes) enough for every power-cut test below to get through.
const PURGE_CHANGES_MAX_COUNT: u64 = 400;

#[test]
fn a_power_cut_anywhere_around_a_lazy_purge_loses_nothing_acknowledged_and_brings_back_nothing_answered() {
    for (name, request, kept) in purges() {
        for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 5 }, Tear::Sectors { seed: 424_242 }] {
            for changes in 0..PURGE_CHANGES_MAX_COUNT {
                let disk = SimDisk::new();
                let mut store = open(&disk);
                append_keys(&mut store, 1..=200).unwrap();
                commit(&mut store).unwrap();
                let mut acknowledged = 200;
                let mut answered = false;
                disk.freeze_after(changes, tear);
                // As the server runs it: a batch's ticket in flight (pipelined ingest), the
                // purge under the lock with its own ticket run without it, answered at its
                // finish; appends go on meanwhile and are committed after.
                let result = (|| {
                    append_keys(&mut store, 201..=210)?;
                    let batch = store.sync_begin()?;
                    store.purge_unsynced(&request)?;
                    let purge = store.sync_begin()?;
                    let synced = purge.run();
                    store.sync_finish(synced)?;
                    answered = true;
                    append_keys(&mut store, 211..=215)?;
                    store.sync_finish(batch.run())?;
                    acknowledged = 210;
                    commit(&mut store)?;
                    acknowledged = 215;
                    Ok::<(), StoreError>(())
                })();
                let sent = store.state().last_seq;
                let completed = result.is_ok() && !disk.is_frozen();
                let reopened = reopened_after_power_loss(&disk, store, tear);
                let survived = held(&reopened);
                let context = format!("{name}, {tear:?}, power cut after {changes} changes");
                assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
                assert_eq!(reopened.state().corruption, None, "{context}");
                // The purge takes what was stored when it ran: 1..=210.
                for seq in 1..=acknowledged {
                    let purged = seq <= 210 && !kept(seq, 210);
                    if answered && purged {
                        assert!(!survived.contains(&seq), "{context}: purged seq {seq} came back");
                    } else if !purged {
                        assert!(survived.contains(&seq), "{context}: acknowledged seq {seq} lost: {survived:?}");
                    }
                }
                assert!(reopened.state().last_seq <= sent, "{context}: nothing invented");
                if completed {
                    let mut expected: Vec<u64> = (1..=210).filter(|&seq| kept(seq, 210)).collect();
                    expected.extend(211..=215);
                    assert_eq!(survived, expected, "{context}");
                    break;
                }
                assert!(
                    changes + 1 < PURGE_CHANGES_MAX_COUNT,
                    "{context}: the purge and its commits never got through"
                );
            }
        }
    }
}

#[test]
fn an_append_behind_an_uncommitted_skip_runs_no_fsync_and_the_skip_waits_for_the_commit() {
    let (disk, mut store) = purged_and_skipped_to_500_without_a_commit();
    let syncs = disk.counts().syncs;
    assert_eq!(store.append("kv.a", None, &payload(500), 7).unwrap().0, 500);
    assert_eq!(disk.counts().syncs, syncs, "no fsync under the lock: the floor waits for the commit");

    // Lost before the commit: neither the purge nor the skip happened, and nothing after them.
    let mut reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), (1..=10).collect::<Vec<_>>());
    assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new());
    assert_eq!(reopened.append("kv.a", None, &payload(11), 7).unwrap().0, 11, "no sequence was handed out");

    // Committed, all three are durable.
    reopened.purge_unsynced(&PurgeRequest::default()).unwrap();
    assert!(reopened.skip_to_unsynced(500).unwrap());
    assert_eq!(reopened.append("kv.a", None, &payload(500), 7).unwrap().0, 500);
    commit(&mut reopened).unwrap();
    let again = reopened_after_power_loss(&disk, reopened, Tear::LoseUnsynced);
    assert_eq!(held(&again), vec![500], "the commit made the floor and the fresh segment durable");
    assert_eq!(again.recovery_report().corruption, Vec::<String>::new());
    assert_eq!(again.segment_count(), 1, "the segments below the skip are gone");
}

#[test]
fn a_crash_after_appends_behind_an_uncommitted_skip_rolled_many_segments_reopens_past_the_skip_with_no_damage() {
    let (disk, mut store) = purged_and_skipped_to_500_without_a_commit();
    // The first segment is the skip's own, then more rolls than seals may be pending, none
    // committed: the segment below the skip is no longer among the newest sealed ones, where a
    // short log may be taken for an unfinished roll.
    let mut next = 500;
    let rolls = semaq_store::SEALS_PENDING_MAX_COUNT + 2;
    for _ in 0..rolls {
        next = common::append_past_a_roll_with(&mut store, (next, 0), |store, seq| {
            append_keys(store, seq..=seq).map(|()| seq)
        })
        .unwrap();
    }
    // The process dies: the files stay as the OS holds them, the floor was never written.
    drop(store);
    let reopened = open(&disk);
    assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "the skip is no gap");
    assert_eq!(held(&reopened), (500..next).collect::<Vec<_>>(), "the purge and the skip stand");
    assert_eq!(reopened.segment_count(), rolls, "the segment below the skip is gone");
}

#[test]
fn a_power_cut_anywhere_around_an_append_behind_an_uncommitted_skip_loses_nothing_acknowledged() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 3 }, Tear::Sectors { seed: 31_337 }] {
        for changes in 0..PURGE_CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let mut store = open(&disk);
            append_keys(&mut store, 1..=10).unwrap();
            commit(&mut store).unwrap();
            let mut acknowledged = 10;
            let mut skip_answered = false;
            // The last sequence taken below the skip.
            let before_skip = std::cell::Cell::new(10);
            disk.freeze_after(changes, tear);
            // A batch that rolled, its ticket in flight (which fsyncs the directory after the
            // fresh segment exists, before the fresh segment's header is fsynced); a purge
            // and a skip under the lock, an append behind them, then the commits.
            let result = (|| {
                common::append_past_a_roll_with(&mut store, (11, 2), |store, seq| {
                    append_keys(store, seq..=seq).map(|()| {
                        before_skip.set(seq);
                        seq
                    })
                })?;
                let batch = store.sync_begin()?;
                store.purge_unsynced(&PurgeRequest::default())?;
                assert!(store.skip_to_unsynced(500)?);
                append_keys(&mut store, 500..=501)?;
                store.sync_finish(batch.run())?;
                acknowledged = before_skip.get();
                commit(&mut store)?;
                skip_answered = true;
                Ok::<(), StoreError>(())
            })();
            let completed = result.is_ok() && !disk.is_frozen();
            let mut reopened = reopened_after_power_loss(&disk, store, tear);
            let survived = held(&reopened);
            let context = format!("{tear:?}, power cut after {changes} changes");
            assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
            let (below, behind): (Vec<u64>, Vec<u64>) = survived.iter().partition(|&&seq| seq < 500);
            if behind.is_empty() && !skip_answered {
                // The purge and the skip may not have happened: everything acknowledged is there.
                let prefix =
                    below.len() as u64 >= acknowledged && below == (1..=below.len() as u64).collect::<Vec<_>>();
                assert!(below.is_empty() || prefix, "{context}: {survived:?}");
                assert!(below.len() as u64 <= before_skip.get(), "{context}: nothing invented");
            } else {
                // The skip happened, and the purge with it.
                assert!(below.is_empty(), "{context}: purged seqs came back: {survived:?}");
                assert!(behind == [500] || behind == [500, 501] || behind.is_empty(), "{context}: {survived:?}");
            }
            let next = reopened.append("kv.a", None, &payload(0), 7).unwrap().0;
            assert!(next > survived.last().copied().unwrap_or(0), "{context}: sequence {next} reused");
            if skip_answered {
                assert_eq!(behind, [500, 501], "{context}: acknowledged appends lost");
                assert_eq!(next, 502, "{context}");
            }
            if completed {
                break;
            }
            assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{context}: never got through");
        }
    }
}

#[test]
fn a_power_cut_anywhere_around_a_lazy_skip_over_a_gap_keeps_it_with_the_copy_behind_it() {
    for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 7 }, Tear::Sectors { seed: 90_210 }] {
        for changes in 0..PURGE_CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let mut store = open(&disk);
            append_keys(&mut store, 1..=10).unwrap();
            commit(&mut store).unwrap();
            let mut answered = false;
            disk.freeze_after(changes, tear);
            // A mirror's skip over the origin's gap and the copy behind it, under the lock with
            // no fsync; the copy's commit makes both durable.
            let result = (|| {
                assert!(store.skip_msgs_unsynced(20)?);
                append_keys(&mut store, 20..=20)?;
                commit(&mut store)?;
                answered = true;
                Ok::<(), StoreError>(())
            })();
            let completed = result.is_ok() && !disk.is_frozen();
            let mut reopened = reopened_after_power_loss(&disk, store, tear);
            let survived = held(&reopened);
            let context = format!("{tear:?}, power cut after {changes} changes");
            assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
            assert_eq!(survived[..10], (1..=10).collect::<Vec<_>>(), "{context}: committed messages lost");
            let tail = &survived[10..];
            assert!(tail.is_empty() || tail == [20], "{context}: {survived:?}");
            let next = reopened.append("kv.a", None, &payload(0), 7).unwrap().0;
            assert!(next > survived.last().copied().unwrap_or(0), "{context}: sequence {next} reused");
            if answered {
                assert_eq!((tail, next), (&[20][..], 21), "{context}");
            }
            if completed {
                break;
            }
            assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{context}: never got through");
        }
    }
}

#[test]
fn a_refused_batchs_rollback_fsyncs_nothing_and_readers_see_it_gone_at_once() {
    let disk = SimDisk::new();
    let (mut store, _) = ten_committed_and_a_batch(&disk, 3);
    let syncs = disk.counts().syncs;
    assert_eq!(store.remove_refused(11, 13).unwrap(), 3);
    assert_eq!(disk.counts().syncs, syncs, "the rollback waits for the next commit");
    assert_eq!(held(&store), (1..=10).collect::<Vec<_>>());
    assert_eq!(store.subjects_state(None).values().sum::<u64>(), 10, "per-subject counts follow");
    let state = store.state();
    assert_eq!((state.msgs, state.last_seq), (10, 13), "the refused sequences stay used");
    append_keys(&mut store, 14..=14).unwrap();
    commit(&mut store).unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), [(1..=10).collect::<Vec<_>>(), vec![14]].concat());
    assert_eq!(reopened.subjects_state(None).values().sum::<u64>(), 11);
}

/// Cuts the power after every number of disk changes around a refused batch rolled back with
/// no fsync and the publishes after it (enough to roll a segment, so that the marker's segment
/// is sealed and its index, or a rebuild from its log, carries the removal): every committed
/// message survives, and the refused ones only ever as the stream's tail (which the server's
/// start-up removes as a batch without its commit marker), never behind a later one. The large
/// batch rolls a segment itself, so its marker names sequences of the log before its own.
#[test]
fn a_power_cut_anywhere_around_a_lazy_rollback_never_brings_the_refused_batch_back_mid_stream() {
    const LATER_COUNT: u64 = 100;
    for (committed, refused_count) in [(0, 3), (10, 3), (10, ROLLING_BATCH_COUNT)] {
        for tear in TEARS {
            for changes in 0..PURGE_CHANGES_MAX_COUNT {
                let disk = SimDisk::new();
                let mut store = open(&disk);
                append_keys(&mut store, 1..=committed).unwrap();
                commit(&mut store).unwrap();
                let refused = committed + 1..=committed + refused_count;
                let later = committed + refused_count + 1..=committed + refused_count + LATER_COUNT;
                let mut answered = false;
                disk.freeze_after(changes, tear);
                let result = (|| {
                    append_keys(&mut store, refused.clone())?;
                    store.remove_refused(*refused.start(), *refused.end())?;
                    append_keys(&mut store, later.clone())?;
                    commit(&mut store)?;
                    answered = true;
                    Ok::<(), StoreError>(())
                })();
                let completed = result.is_ok() && !disk.is_frozen();
                let reopened = reopened_after_power_loss(&disk, store, tear);
                let survived = held(&reopened);
                let context = format!(
                    "{committed} committed, {refused_count} refused, {tear:?}, power cut after {changes} changes"
                );
                assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
                let kept: Vec<u64> = survived.iter().copied().filter(|&seq| seq <= committed).collect();
                assert_eq!(kept, (1..=committed).collect::<Vec<_>>(), "{context}: committed messages lost");
                let came_back = survived.iter().any(|seq| refused.contains(seq));
                let after = survived.iter().any(|seq| later.contains(seq));
                assert!(!(came_back && after), "{context}: refused messages behind later ones: {survived:?}");
                if answered {
                    let expected: Vec<u64> = (1..=committed).chain(later.clone()).collect();
                    assert_eq!(survived, expected, "{context}");
                }
                if completed {
                    break;
                }
                assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{context}: never got through");
            }
        }
    }
}

/// Reopens after a power cut from the sealed indexes themselves: the checkpoint, which holds
/// the ledger's own live bits, would hide what they say.
fn reopened_without_checkpoint_after_power_loss(disk: &SimDisk, store: FileStore) -> FileStore {
    disk.crash(Tear::LoseUnsynced);
    drop(store);
    semaq_store::storage::Storage::remove_file(disk, &dir().join("stream.ckpt")).unwrap();
    open(disk)
}

/// Crashes that keep nothing unsynced, a prefix of it, or all of it but one sector (a drive
/// that wrote out of order: the marker may be lost while later records are kept).
const TEARS: [Tear; 5] = [
    Tear::LoseUnsynced,
    Tear::Sectors { seed: 11 },
    Tear::Sectors { seed: 31_337 },
    Tear::LoseOneSector { nth: 0 },
    Tear::LoseOneSector { nth: 3 },
];

/// A drive writing out of order loses each unsynced sector in turn, the rollback marker's
/// among them, and keeps every later one: recovery cuts the active log at the first hole, so
/// the refused records before the marker never come back behind the later records.
#[test]
fn a_rollback_marker_lost_while_later_unsynced_records_are_kept_never_brings_the_batch_back() {
    // About 10 unsynced sectors per log: the batch's, the marker's, the later records'. The
    // larger batch rolls a segment, whose log (never fsynced whole) loses a sector too.
    let cases = [30, ROLLING_BATCH_COUNT].into_iter().flat_map(|count| (0..16).map(move |nth| (count, nth)));
    for (refused_count, nth) in cases {
        let disk = SimDisk::new();
        let (mut store, last) = ten_committed_and_a_batch(&disk, refused_count);
        let refused = 11..=last;
        store.remove_refused(*refused.start(), *refused.end()).unwrap();
        let later = 11 + refused_count..=40 + refused_count;
        append_keys(&mut store, later.clone()).unwrap();
        store.flush().unwrap();
        let reopened = reopened_after_power_loss(&disk, store, Tear::LoseOneSector { nth });
        let survived = held(&reopened);
        let context = format!("{refused_count} refused, unsynced sector {nth} lost: {survived:?}");
        assert!(survived.starts_with(&(1..=10).collect::<Vec<_>>()), "{context}");
        let came_back = survived.iter().any(|seq| refused.contains(seq));
        assert!(!(came_back && survived.iter().any(|seq| later.contains(seq))), "{context}");
        assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
    }
}

/// Keys enough to roll a `SEGMENT_BYTES` segment (about 80 fit).
const ROLLING_BATCH_COUNT: u64 = 120;

/// A store on `disk` holding 1..=10 committed and a batch of `count` keys appended after them,
/// not committed (a batch about to be refused); returns it with the batch's last sequence.
fn ten_committed_and_a_batch(disk: &SimDisk, count: u64) -> (FileStore, u64) {
    let mut store = open(disk);
    append_keys(&mut store, 1..=10).unwrap();
    commit(&mut store).unwrap();
    let last = 10 + count;
    append_keys(&mut store, 11..=last).unwrap();
    (store, last)
}

#[test]
fn a_rollback_across_a_roll_fsyncs_nothing_and_survives_the_seals_after_it() {
    let disk = SimDisk::new();
    let (mut store, last) = ten_committed_and_a_batch(&disk, ROLLING_BATCH_COUNT);
    assert!(store.segment_count() > 1, "the batch rolled a segment");
    let syncs = disk.counts().syncs;
    assert_eq!(store.remove_refused(11, last).unwrap(), ROLLING_BATCH_COUNT);
    assert_eq!(disk.counts().syncs, syncs, "the rollback waits for the next commit");
    assert_eq!(held(&store), (1..=10).collect::<Vec<_>>());
    // Enough after it to seal the marker's own log too: the earlier index must carry the removal.
    let later = last + 1..=last + 2 * ROLLING_BATCH_COUNT;
    append_keys(&mut store, later.clone()).unwrap();
    commit(&mut store).unwrap();
    let expected: Vec<u64> = (1..=10).chain(later).collect();
    assert_eq!(held(&store), expected);
    let reopened = reopened_without_checkpoint_after_power_loss(&disk, store);
    assert_eq!(reopened.recovery_report().indexes_rebuilt_count, 0, "read from the indexes");
    assert_eq!(held(&reopened), expected);
}

#[test]
fn a_crash_before_the_seal_after_a_rollback_across_a_roll_rebuilds_the_index_without_the_batch() {
    let disk = SimDisk::new();
    let (mut store, last) = ten_committed_and_a_batch(&disk, ROLLING_BATCH_COUNT);
    store.remove_refused(11, last).unwrap();
    append_keys(&mut store, last + 1..=last + 1).unwrap();
    // A process crash: everything handed to the OS is kept, but the seal never committed.
    drop(store);
    let mut reopened = open(&disk);
    assert_eq!(held(&reopened), [(1..=10).collect::<Vec<_>>(), vec![last + 1]].concat());
    append_keys(&mut reopened, last + 2..=last + 2 * ROLLING_BATCH_COUNT).unwrap();
    commit(&mut reopened).unwrap();
    let again = reopened_without_checkpoint_after_power_loss(&disk, reopened);
    let expected: Vec<u64> = (1..=10).chain(last + 1..=last + 2 * ROLLING_BATCH_COUNT).collect();
    assert_eq!(held(&again), expected);
}

#[test]
fn a_full_disk_after_a_rollback_reloads_without_the_refused_batch() {
    let disk = SimDisk::new();
    let (mut store, _) = ten_committed_and_a_batch(&disk, 3);
    // The batch's records reached the OS before its refusal (a full write buffer).
    store.flush().unwrap();
    store.remove_refused(11, 13).unwrap();
    disk.set_free_bytes(Some(0));
    append_keys(&mut store, 14..=14).unwrap();
    assert!(matches!(commit(&mut store), Err(StoreError::OutOfSpace(_))));
    // The reload kept what the OS held: the marker was handed over with the rollback.
    assert_eq!(held(&store), (1..=10).collect::<Vec<_>>());
    disk.set_free_bytes(None);
    append_keys(&mut store, 14..=14).unwrap();
    commit(&mut store).unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), [(1..=10).collect::<Vec<_>>(), vec![14]].concat());
}

/// A full disk met writing the rollback marker, with the batch's records already with the OS
/// (they filled the write buffer, or rolled a segment): the reload cuts them off with the
/// marker, so they are never visible again, and their sequences are given again.
#[test]
fn a_full_disk_met_writing_the_rollback_marker_never_shows_the_refused_batch_again() {
    for refused_count in [3, ROLLING_BATCH_COUNT] {
        let disk = SimDisk::new();
        let (mut store, last) = ten_committed_and_a_batch(&disk, refused_count);
        store.flush().unwrap();
        disk.set_free_bytes(Some(0));
        let refused = store.remove_refused(11, last);
        assert!(matches!(refused, Err(StoreError::OutOfSpace(_))), "{refused_count}: {refused:?}");
        assert_eq!(held(&store), (1..=10).collect::<Vec<_>>(), "{refused_count}: after the reload");
        // Whatever the next commit hears, nothing comes back after it.
        let _ = commit(&mut store);
        assert_eq!(held(&store), (1..=10).collect::<Vec<_>>(), "{refused_count}: after a commit");
        disk.set_free_bytes(None);
        assert_eq!(store.state().last_seq, 10, "{refused_count}: the refused sequences are given again");
        append_keys(&mut store, 11..=11).unwrap();
        commit(&mut store).unwrap();
        let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
        assert_eq!(held(&reopened), (1..=11).collect::<Vec<_>>(), "{refused_count}");
        assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{refused_count}");
    }
}

/// A store holding 1..=10 committed and a batch across a roll handed to the OS, its records
/// uncommitted, on a disk just filled; then a write meets the full disk and the store reloads:
/// the append of one more record (its commit hands it over) or, when `marker`, the batch's
/// rollback marker. Returns the store, the sequences it then holds, and whether that reload
/// ran an fsync.
fn reloaded_after_a_full_disk(disk: &SimDisk, marker: bool) -> (FileStore, Vec<u64>, bool) {
    let (mut store, last) = ten_committed_and_a_batch(disk, ROLLING_BATCH_COUNT);
    store.flush().unwrap();
    disk.set_free_bytes(Some(0));
    let syncs = disk.counts().syncs;
    let met = if marker {
        store.remove_refused(11, last).map(drop)
    } else {
        append_keys(&mut store, last + 1..=last + 1).and_then(|()| commit(&mut store))
    };
    assert!(matches!(met, Err(StoreError::OutOfSpace(_))), "marker {marker}: {met:?}");
    let synced_under_the_lock = disk.counts().syncs > syncs;
    disk.set_free_bytes(None);
    let kept = if marker { (1..=10).collect() } else { (1..=last).collect() };
    (store, kept, synced_under_the_lock)
}

/// The reload after a full disk runs under the store's lock, so it fsyncs nothing: what its
/// recovery would make durable (the cut logs, the newest sealed ones, the directory that lost
/// the segments after a cut) goes first in the next commit's ticket. A power cut anywhere in
/// that commit keeps what was acknowledged before, never brings the refused batch back behind
/// the new record, and once the commit answered, the new record is there.
#[test]
fn a_reload_after_a_full_disk_fsyncs_nothing_and_the_next_commit_makes_it_durable_first() {
    for marker in [false, true] {
        for tear in TEARS {
            for changes in 0..PURGE_CHANGES_MAX_COUNT {
                let disk = SimDisk::new();
                let (mut store, kept, synced) = reloaded_after_a_full_disk(&disk, marker);
                let context = format!("marker {marker}, {tear:?}, power cut after {changes} changes");
                assert!(!synced, "{context}: the reload ran an fsync under the lock");
                assert_eq!(held(&store), kept, "{context}");
                let next = kept.last().copied().unwrap_or(0) + 1;
                disk.freeze_after(changes, tear);
                let answered = store.append("orders.after", None, &payload(next), 7).is_ok()
                    && commit(&mut store).is_ok()
                    && !disk.is_frozen();
                let reopened = reopened_after_power_loss(&disk, store, tear);
                let survived = held(&reopened);
                assert!(survived.starts_with(&kept[..10]), "{context}: committed messages lost: {survived:?}");
                let after = reopened.get(next).unwrap().is_some_and(|message| message.subject == "orders.after");
                if after {
                    assert_eq!(survived, [kept.clone(), vec![next]].concat(), "{context}");
                }
                if answered {
                    assert!(after, "{context}: the acknowledged record is lost: {survived:?}");
                    break;
                }
                assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{context}: never got through");
            }
        }
    }
}

#[test]
fn a_rollback_reaching_a_finished_seal_falls_back_to_synced_deletes() {
    let disk = SimDisk::new();
    let (mut store, last) = ten_committed_and_a_batch(&disk, ROLLING_BATCH_COUNT);
    // A commit between the appends and the refusal wrote the earlier segment's index.
    commit(&mut store).unwrap();
    let syncs = disk.counts().syncs;
    assert_eq!(store.remove_refused(11, last).unwrap(), ROLLING_BATCH_COUNT);
    assert!(disk.counts().syncs > syncs, "a marker cannot reach an index already written");
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), (1..=10).collect::<Vec<_>>());
}

#[test]
fn a_rollback_reaching_a_seal_a_ticket_holds_falls_back_to_synced_deletes() {
    let disk = SimDisk::new();
    let (mut store, last) = ten_committed_and_a_batch(&disk, ROLLING_BATCH_COUNT);
    // Taken, not yet run: it would write the index as built at the roll.
    let ticket = store.sync_begin().unwrap();
    let syncs = disk.counts().syncs;
    assert_eq!(store.remove_refused(11, last).unwrap(), ROLLING_BATCH_COUNT);
    assert!(disk.counts().syncs > syncs, "the held seal's index is not built again");
    store.sync_finish(ticket.run()).unwrap();
    let reopened = reopened_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), (1..=10).collect::<Vec<_>>());
}

#[test]
fn appends_that_cannot_be_split_ask_for_a_commit_when_their_rolls_could_fill_the_pending_seals() {
    const RECORD_PAYLOAD_BYTES: usize = 1000;
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut seq = 0;
    while store.seals_pending_count() < 1 {
        seq += 1;
        append_big(&mut store, seq, RECORD_PAYLOAD_BYTES);
    }
    let message_bytes = |count: u64| count * ("orders.big".len() + RECORD_PAYLOAD_BYTES) as u64;
    assert!(!store.commit_before_appends(1, message_bytes(1)), "one record fits the active segment");
    let rolls_to_the_bound = semaq_store::SEALS_PENDING_MAX_COUNT as u64;
    assert!(!store.commit_before_appends(rolls_to_the_bound - 1, message_bytes(rolls_to_the_bound - 1) * 4));
    assert!(store.commit_before_appends(16, message_bytes(16)), "16 records could roll past the bound");
    commit(&mut store).unwrap();
    assert_eq!(store.seals_pending_count(), 0);
    assert!(!store.commit_before_appends(16, message_bytes(16)), "no seal pending: a commit would not help");
}

/// A change made to a store, as a test step.
type Operation = fn(&mut FileStore) -> Result<(), StoreError>;

/// The store's own synced removals that create a fresh segment outside a roll (each named,
/// with the sequence the stream goes on at): it is created unsynced and made durable by the
/// sync they end with, not fsynced where it is created.
fn synced_creations() -> Vec<(&'static str, Operation, u64)> {
    fn purge_all(store: &mut FileStore) -> Result<(), StoreError> {
        store.purge(&PurgeRequest::default()).map(drop)
    }
    fn skip(store: &mut FileStore) -> Result<(), StoreError> {
        store.purge_unsynced(&PurgeRequest::default())?;
        store.skip_to(500).map(drop)
    }
    vec![("purge", purge_all, 21), ("skip_to", skip, 500)]
}

#[test]
fn a_power_cut_anywhere_around_a_synced_purge_or_skip_that_creates_a_segment_loses_nothing_answered() {
    for (name, operation, next_seq) in synced_creations() {
        for tear in [Tear::LoseUnsynced, Tear::Sectors { seed: 7 }] {
            for changes in 0..PURGE_CHANGES_MAX_COUNT {
                let disk = SimDisk::new();
                let mut store = open(&disk);
                append_keys(&mut store, 1..=20).unwrap();
                commit(&mut store).unwrap();
                disk.freeze_after(changes, tear);
                let answered = operation(&mut store).is_ok() && !disk.is_frozen();
                let mut reopened = reopened_after_power_loss(&disk, store, tear);
                let context = format!("{name}, {tear:?}, power cut after {changes} changes");
                assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
                let survived = held(&reopened);
                assert!(survived.is_empty() || survived == (1..=20).collect::<Vec<_>>(), "{context}: {survived:?}");
                let seq = reopened.append("kv.a", None, &payload(next_seq), 7).unwrap().0;
                if answered {
                    assert!(survived.is_empty(), "{context}: purged messages came back");
                    assert_eq!(seq, next_seq, "{context}: the stream goes on where it was moved");
                    break;
                }
                assert!(seq == 21 || seq == next_seq, "{context}: appended at {seq}");
                assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{context}: never got through");
            }
        }
    }
}

/// Fills the disk and meets it with the append of `next` and its commit, then gives the space
/// back: the appender hears the failure once (a reload that itself found no space is tried
/// again at the next change), then changes resume. Returns whether any of it ran an fsync:
/// all of it runs under the store's lock.
fn reloaded_with_the_space_back(disk: &SimDisk, store: &mut FileStore, next: u64) -> bool {
    let syncs = disk.counts().syncs;
    disk.set_free_bytes(Some(0));
    let met = append_keys(store, next..=next).and_then(|()| commit(store));
    assert!(matches!(met, Err(StoreError::OutOfSpace(_))), "{met:?}");
    disk.set_free_bytes(None);
    let heard = store.flush();
    if heard.is_err() {
        assert!(matches!(heard, Err(StoreError::OutOfSpace(_))), "{heard:?}");
        store.flush().unwrap();
    }
    disk.counts().syncs > syncs
}

/// A power cut after `changes` changes into the append of `next` and its commit, on a store
/// that reloaded after a full disk holding `kept` (its acknowledged messages first): nothing
/// acknowledged is lost, nothing refused comes back, and once the commit answered, `next` is
/// there. Returns whether the commit got through.
fn next_commit_survives_a_power_cut(
    disk: &SimDisk,
    mut store: FileStore,
    kept: &[u64],
    (next, changes, tear): (u64, u64, Tear),
) -> bool {
    let context = format!("{tear:?}, power cut after {changes} changes");
    disk.freeze_after(changes, tear);
    let answered = append_keys(&mut store, next..=next).is_ok() && commit(&mut store).is_ok() && !disk.is_frozen();
    let reopened = reopened_after_power_loss(disk, store, tear);
    let survived = held(&reopened);
    assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
    let expected = [kept, &[next]].concat();
    assert!(survived == kept || survived == expected, "{context}: {survived:?}");
    if answered {
        assert_eq!(survived, expected, "{context}: the acknowledged record is lost");
    }
    answered
}

/// A store with more sealed segments than seals may be pending, each sealed by a commit;
/// returns it with its last sequence.
fn sealed_by_commits(disk: &SimDisk) -> (FileStore, u64) {
    let mut store = open(disk);
    let mut next = 1;
    for _ in 0..semaq_store::SEALS_PENDING_MAX_COUNT + 3 {
        next = common::append_past_a_roll_with(&mut store, (next, 0), |store, seq| {
            append_keys(store, seq..=seq).map(|()| seq)
        })
        .unwrap();
        commit(&mut store).unwrap();
    }
    assert_eq!(store.seals_pending_count(), 0);
    // Recovery reads the indexes themselves, not the checkpoint of them.
    let _ = semaq_store::storage::Storage::remove_file(disk, &dir().join("stream.ckpt"));
    (store, next - 1)
}

/// The sealed segments' first sequences, oldest first.
fn sealed_firsts(disk: &SimDisk) -> Vec<u64> {
    let names = semaq_store::storage::Storage::list_dir(disk, &dir()).unwrap();
    let mut firsts: Vec<u64> = names.iter().filter_map(|name| name.strip_suffix(".idx")?.parse().ok()).collect();
    firsts.sort_unstable();
    firsts
}

fn index_path(first_seq: u64) -> PathBuf {
    dir().join(format!("{first_seq:020}.idx"))
}

/// A full disk met behind an uncommitted purge and skip, with a record appended behind the
/// skip: the reload finds the segment started there and raises the floor to it without an
/// fsync; the next commit makes that floor durable before anything else.
#[test]
fn a_reload_behind_an_uncommitted_skip_raises_the_floor_without_an_fsync() {
    for tear in TEARS {
        for changes in 0..PURGE_CHANGES_MAX_COUNT {
            let (disk, mut store) = purged_and_skipped_to_500_without_a_commit();
            append_keys(&mut store, 500..=500).unwrap();
            store.flush().unwrap();
            assert!(!reloaded_with_the_space_back(&disk, &mut store, 501), "the reload ran an fsync under the lock");
            assert_eq!(held(&store), vec![500], "the reload kept what the OS held");
            let context = format!("{tear:?}, power cut after {changes} changes");
            disk.freeze_after(changes, tear);
            let answered =
                append_keys(&mut store, 501..=501).is_ok() && commit(&mut store).is_ok() && !disk.is_frozen();
            let mut reopened = reopened_after_power_loss(&disk, store, tear);
            let survived = held(&reopened);
            assert_eq!(reopened.recovery_report().corruption, Vec::<String>::new(), "{context}");
            // Nothing behind the skip was acknowledged before this commit: the purge and the skip
            // are either undone whole or stand.
            let undone = survived == (1..=10).collect::<Vec<_>>();
            assert!(
                undone || survived == [500] || survived == [500, 501] || survived.is_empty(),
                "{context}: {survived:?}"
            );
            let seq = reopened.append("kv.a", None, &payload(0), 7).unwrap().0;
            assert!(seq > survived.last().copied().unwrap_or(0) && (undone || seq >= 500), "{context}: {seq} reused");
            if answered {
                assert_eq!(survived, [500, 501], "{context}: the acknowledged record is lost");
                break;
            }
            assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{context}: never got through");
        }
    }
}

/// On a store sealed by commits whose files `damage` changed, a full disk met and the space
/// given back: the reload fsyncs nothing and leaves `seals_pending`; the next commit survives
/// a power cut at any of its steps.
fn a_reload_after_damage_survives_every_power_cut(damage: fn(&SimDisk), seals_pending: usize) {
    for tear in TEARS {
        for changes in 0..PURGE_CHANGES_MAX_COUNT {
            let disk = SimDisk::new();
            let (mut store, last) = sealed_by_commits(&disk);
            damage(&disk);
            let synced = reloaded_with_the_space_back(&disk, &mut store, last + 1);
            assert!(!synced, "the reload ran an fsync under the lock");
            assert_eq!(store.seals_pending_count(), seals_pending);
            let kept: Vec<u64> = (1..=last).collect();
            assert_eq!(held(&store), kept);
            if next_commit_survives_a_power_cut(&disk, store, &kept, (last + 1, changes, tear)) {
                break;
            }
            assert!(changes + 1 < PURGE_CHANGES_MAX_COUNT, "{tear:?}: never got through");
        }
    }
}

/// A full disk met while an old sealed segment's index is damaged: the reload rebuilds that
/// index from its log without an fsync, owed to the next commit; a crash before that commit
/// leaves an index the next open rejects and builds again.
#[test]
fn a_reload_that_rebuilds_a_damaged_index_fsyncs_nothing() {
    a_reload_after_damage_survives_every_power_cut(
        |disk| {
            let damaged = index_path(sealed_firsts(disk)[0]);
            let mut bytes = disk.contents(&damaged).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
            disk.put(&damaged, &bytes);
        },
        0,
    );
}

/// A full disk met while a newest sealed segment lost its index (damage: a commit writes them
/// oldest first) and the one after it kept a valid one: open writes the lost index then, but
/// the reload cannot fsync, so both seals pend until the next commit completes them.
#[test]
fn a_reload_that_finds_a_lost_seal_before_a_valid_index_leaves_both_to_the_next_commit() {
    a_reload_after_damage_survives_every_power_cut(
        |disk| {
            let firsts = sealed_firsts(disk);
            semaq_store::storage::Storage::remove_file(disk, &index_path(firsts[firsts.len() - 2])).unwrap();
        },
        2,
    );
}
