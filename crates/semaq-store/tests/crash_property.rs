//! The durability promise as a property: random appends, syncs, deletes, purges, seals (small
//! segments roll often), compactions and consumer-state saves run on the simulated disk; the
//! power fails at a random change (tearing a random prefix of the unsynced sectors); the stream
//! reopens. Then exactly the acknowledged prefix is there:
//! - every append followed by a successful `sync` (or a delete, purge or compact, which sync)
//!   is there, byte for byte, unless a delete or purge removed it, or the stream's `max_msgs`
//!   (discard old, in some cases) let newer messages push it out;
//! - nothing a successful delete or purge removed came back, nor what the limit removed before
//!   a successful sync, nor a refused batch rolled back (no fsync) before a successful sync; a
//!   refused batch not yet synced comes back only as the stream's tail, never behind a later
//!   message (the server's start-up removes such a tail);
//! - of the appends never synced, what survived is a prefix (no holes) and holds what was sent;
//! - sequences are never reused, and nothing is reported as damage;
//! - the consumer state saved last with success (`storage::write_atomic`, as the server saves
//!   it) is there, or a later one;
//! - the stream checkpoint (`stream.ckpt`, written after seals) gives what reading every index
//!   gives, whatever the crash left of it: stale (a crash between a seal and its checkpoint),
//!   torn, or current.
//!
//! The disk also fills up and frees space at random moments: a write refused for lack of
//! space is undone, never half kept, and never acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::storage::{self, Storage};
use semaq_store::{FileStore, FileStoreConfig, PurgeRequest, StoreLimits, StreamStore};

const SEGMENT_BYTES: u64 = 4 * 1024;
const SUBJECTS: [&str; 3] = ["orders.a", "orders.b", "orders.c"];

#[derive(Debug, Clone)]
enum Op {
    Append {
        subject: usize,
        filler: usize,
    },
    Sync,
    /// A sync in the server's three steps (`commit.rs`), with a delete under the lock while
    /// the fsyncs run.
    SyncInSteps {
        delete_between: Option<usize>,
    },
    Flush,
    Delete {
        pick: usize,
    },
    PurgeUpTo {
        pick: usize,
    },
    PurgeSubject {
        subject: usize,
        keep: Option<u64>,
    },
    Compact,
    /// Appends `count` messages, then rolls them back as a refused atomic batch (lazily).
    RefusedBatch {
        count: usize,
        filler: usize,
    },
    SaveAck,
    /// The disk fills up, leaving this many bytes free.
    Fill {
        free_bytes: u64,
    },
    /// Space returns.
    Free,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..SUBJECTS.len(), 0..300usize).prop_map(|(subject, filler)| Op::Append { subject, filler }),
        3 => Just(Op::Sync),
        3 => proptest::option::of(any::<usize>()).prop_map(|delete_between| Op::SyncInSteps { delete_between }),
        1 => Just(Op::Flush),
        2 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        1 => any::<usize>().prop_map(|pick| Op::PurgeUpTo { pick }),
        1 => (0..SUBJECTS.len(), proptest::option::of(0..3u64))
            .prop_map(|(subject, keep)| Op::PurgeSubject { subject, keep }),
        1 => Just(Op::Compact),
        2 => (1..4usize, 0..300usize).prop_map(|(count, filler)| Op::RefusedBatch { count, filler }),
        2 => Just(Op::SaveAck),
        1 => (0..600u64).prop_map(|free_bytes| Op::Fill { free_bytes }),
        1 => Just(Op::Free),
    ]
}

fn stream_dir() -> PathBuf {
    PathBuf::from("/js/orders/msgs")
}

fn ack_file() -> PathBuf {
    PathBuf::from("/js/orders/consumers/worker/state")
}

fn open(disk: &SimDisk, max_msgs: Option<u64>) -> FileStore {
    let limits = StoreLimits { max_msgs, ..StoreLimits::default() };
    let config = FileStoreConfig { dir: stream_dir(), segment_size_bytes: SEGMENT_BYTES, limits };
    FileStore::open_on(config, disk.shared()).expect("the stream reopens after any crash")
}

fn payload(seq: u64, filler: usize) -> Vec<u8> {
    let mut bytes = format!("{seq}:").into_bytes();
    bytes.resize(bytes.len() + filler, b'a' + (seq % 26) as u8);
    bytes
}

/// Live sequences, as reads see them (reads work on a poisoned store too).
fn held(store: &FileStore) -> BTreeSet<u64> {
    let mut seqs = BTreeSet::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).expect("no damage") {
        seqs.insert(message.seq);
        from = message.seq + 1;
    }
    seqs
}

/// Everything a client could see of a stream.
fn observed(store: &FileStore) -> (semaq_store::StreamState, BTreeMap<String, u64>, Vec<(u64, String)>) {
    let mut messages = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).expect("no damage") {
        from = message.seq + 1;
        messages.push((message.seq, message.subject));
    }
    (store.state(), store.subjects_state(None), messages)
}

/// Opens the stream after a crash as the store does (from its checkpoint, when usable), then
/// again with the checkpoint removed, which reads every index: both must agree.
fn open_both_ways(disk: &SimDisk, max_msgs: Option<u64>) -> Result<FileStore, TestCaseError> {
    let store = open(disk, max_msgs);
    let with_checkpoint = observed(&store);
    drop(store);
    let checkpoint = stream_dir().join("stream.ckpt");
    if disk.read(&checkpoint).is_ok() {
        disk.remove_file(&checkpoint).expect("removable");
    }
    let store = open(disk, max_msgs);
    prop_assert_eq!(store.recovery_report().checkpointed_segments_count, 0);
    prop_assert_eq!(with_checkpoint, observed(&store), "the checkpoint gave another state than the indexes");
    Ok(store)
}

/// What the test knows was promised.
#[derive(Debug, Default)]
struct Model {
    /// Every append that returned Ok: seq → (subject, payload).
    sent: BTreeMap<u64, (&'static str, Vec<u8>)>,
    /// Appends up to here were synced by a call that returned Ok.
    synced_upto: u64,
    /// Removed by a delete or purge that returned Ok.
    removed: BTreeSet<u64>,
    /// Removed by a delete or purge that failed: may be back or not.
    maybe_removed: BTreeSet<u64>,
    /// Removed by `max_msgs` on append, not yet synced: may be back or not.
    limit_removed: BTreeSet<u64>,
    /// Rolled back as a refused batch, not yet synced: back only as the tail, if at all.
    refused: BTreeSet<u64>,
    max_msgs: Option<u64>,
    /// Consumer ack floors saved (attempted), and the last save that returned Ok.
    acks_attempted: BTreeSet<u64>,
    ack_confirmed: Option<u64>,
}

impl Model {
    fn last_sent(&self) -> u64 {
        self.sent.keys().next_back().copied().unwrap_or(0)
    }

    /// A call that syncs returned `ok`: everything appended so far is acknowledged.
    fn synced(&mut self, ok: bool) {
        if ok {
            self.synced_upto = self.last_sent();
            self.removed.append(&mut self.limit_removed);
            self.removed.append(&mut self.refused);
        }
    }

    /// Whether `max_msgs` may have removed `seq` in favour of newer messages present.
    fn limit_may_remove(&self, seq: u64, present: &BTreeSet<u64>) -> bool {
        self.max_msgs.is_some_and(|max| present.range(seq + 1..).count() as u64 >= max)
    }
}

fn run(store: &mut FileStore, disk: &SimDisk, model: &mut Model, op: &Op) {
    match *op {
        Op::Append { subject, filler } => {
            append(store, model, subject, filler);
        }
        Op::RefusedBatch { count, filler } => {
            let appended: Vec<u64> = (0..count).map_while(|index| append(store, model, index % 3, filler)).collect();
            let (Some(&first), Some(&last)) = (appended.first(), appended.last()) else { return };
            if store.remove_refused(first, last).is_ok() {
                model.refused.extend(first..=last);
            } else {
                model.maybe_removed.extend(first..=last);
            }
        }
        Op::Sync => {
            let ok = store.sync().is_ok();
            model.synced(ok);
        }
        Op::SyncInSteps { delete_between } => {
            let Ok(ticket) = store.sync_begin() else { return model.synced(false) };
            if let Some(pick) = delete_between {
                let live: Vec<u64> = held(store).into_iter().collect();
                if let Some(&seq) = live.get(pick % live.len().max(1)) {
                    removing(store, model, |store| store.delete(seq).map(drop));
                }
            }
            let ok = store.sync_finish(ticket.run()).is_ok();
            model.synced(ok);
        }
        Op::Flush => {
            let _ = store.flush();
        }
        Op::Compact => {
            let ok = store.compact().is_ok();
            model.synced(ok);
        }
        Op::Delete { pick } => {
            let live: Vec<u64> = held(store).into_iter().collect();
            let Some(&seq) = live.get(pick % live.len().max(1)) else { return };
            removing(store, model, |store| store.delete(seq).map(drop));
        }
        Op::PurgeUpTo { pick } => {
            let up_to = pick as u64 % (store.state().last_seq + 2);
            let request = PurgeRequest { up_to_seq: Some(up_to), ..PurgeRequest::default() };
            removing(store, model, |store| store.purge(&request).map(drop));
        }
        Op::PurgeSubject { subject, keep } => {
            let request = PurgeRequest { subject: Some(SUBJECTS[subject].into()), keep, up_to_seq: None };
            removing(store, model, |store| store.purge(&request).map(drop));
        }
        Op::Fill { free_bytes } => disk.set_free_bytes(Some(free_bytes)),
        Op::Free => disk.set_free_bytes(None),
        Op::SaveAck => {
            let floor = model.acks_attempted.last().map_or(1, |last| last + 1);
            model.acks_attempted.insert(floor);
            let dir = ack_file().parent().map(Path::to_path_buf).unwrap_or_default();
            let saved = disk
                .create_dir_all(&dir)
                .and_then(|()| storage::write_atomic(disk, &ack_file(), &floor.to_le_bytes(), 0o600));
            if saved.is_ok() {
                model.ack_confirmed = Some(floor);
            }
        }
    }
}

/// Appends one message and records it (and what the limit removed for it); its sequence.
fn append(store: &mut FileStore, model: &mut Model, subject: usize, filler: usize) -> Option<u64> {
    let seq_hint = store.state().last_seq + 1;
    let bytes = payload(seq_hint, filler);
    let before = held(store);
    let (seq, _) = store.append(SUBJECTS[subject], None, &bytes, 1).ok()?;
    assert_eq!(seq, seq_hint);
    model.sent.insert(seq, (SUBJECTS[subject], bytes));
    let after = held(store);
    model.limit_removed.extend(before.difference(&after));
    Some(seq)
}

/// Runs a delete or purge and records what it removed, as confirmed or not.
fn removing(
    store: &mut FileStore,
    model: &mut Model,
    change: impl FnOnce(&mut FileStore) -> Result<(), semaq_store::StoreError>,
) {
    let before = held(store);
    let ok = change(store).is_ok();
    let after = held(store);
    let gone = before.difference(&after).copied();
    if ok {
        model.removed.extend(gone);
    } else {
        model.maybe_removed.extend(gone);
    }
    model.synced(ok);
}

fn check(store: &mut FileStore, disk: &SimDisk, model: &Model) -> Result<(), TestCaseError> {
    let state = store.state();
    prop_assert_eq!(state.corruption.clone(), None, "a crash is not damage");
    let present = held(store);
    for (&seq, (subject, bytes)) in &model.sent {
        let uncertain = model.maybe_removed.contains(&seq)
            || model.limit_removed.contains(&seq)
            || model.limit_may_remove(seq, &present);
        let acknowledged = seq <= model.synced_upto && !model.removed.contains(&seq) && !uncertain;
        if acknowledged {
            prop_assert!(present.contains(&seq), "acknowledged seq {} lost (present: {:?})", seq, present);
        }
        if model.removed.contains(&seq) {
            prop_assert!(!present.contains(&seq), "removed seq {} came back", seq);
        }
        if model.refused.contains(&seq) && present.contains(&seq) {
            let behind = present.range(seq + 1..).find(|later| !model.refused.contains(later));
            prop_assert!(behind.is_none(), "refused seq {} came back behind {:?}", seq, behind);
        }
        if present.contains(&seq) {
            let message = store.get(seq).expect("readable").expect("present");
            prop_assert_eq!(message.subject.as_str(), *subject);
            prop_assert_eq!(&message.payload[..], &bytes[..], "seq {} holds other bytes", seq);
        }
    }
    for &seq in &present {
        prop_assert!(model.sent.contains_key(&seq), "seq {} was never sent", seq);
    }
    // Unsynced appends: what survived is a prefix of them.
    let mut hole = false;
    for &seq in model.sent.keys().filter(|&&seq| seq > model.synced_upto) {
        let removable = model.limit_removed.contains(&seq) || model.limit_may_remove(seq, &present);
        let refused = model.refused.contains(&seq);
        if model.maybe_removed.contains(&seq) || model.removed.contains(&seq) || removable || refused {
            continue;
        }
        if present.contains(&seq) {
            prop_assert!(!hole, "seq {} survived after a lost earlier unsynced append", seq);
        } else {
            hole = true;
        }
    }
    // Sequences go on past everything acknowledged, never reusing one.
    prop_assert!(state.last_seq >= model.synced_upto);
    let next = store.append("orders.a", None, b"after", 1).expect("appends after recovery").0;
    prop_assert!(next > model.synced_upto && present.iter().all(|&seq| seq < next));
    store.sync().expect("syncs after recovery");
    // The consumer's confirmed ack floor never goes back.
    let saved = storage::read_if_present(disk, &ack_file()).expect("readable");
    let saved = saved.map(|bytes| u64::from_le_bytes(bytes.try_into().expect("whole, never torn")));
    match (model.ack_confirmed, saved) {
        (Some(confirmed), Some(saved)) => {
            prop_assert!(
                saved >= confirmed && model.acks_attempted.contains(&saved),
                "ack floor {} < {}",
                saved,
                confirmed
            )
        }
        (Some(confirmed), None) => prop_assert!(false, "confirmed ack floor {} lost", confirmed),
        (None, saved) => prop_assert!(saved.is_none_or(|saved| model.acks_attempted.contains(&saved))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn after_power_loss_exactly_the_acknowledged_prefix_is_there(
        ops in proptest::collection::vec(op(), 1..120),
        crash_after_changes in proptest::option::of(0..400u64),
        seed in any::<u64>(),
        max_msgs in proptest::option::weighted(0.25, 1..30u64),
    ) {
        let disk = SimDisk::new();
        let mut store = open(&disk, max_msgs);
        let mut model = Model { max_msgs, ..Model::default() };
        if let Some(changes) = crash_after_changes {
            disk.freeze_after(changes, Tear::Sectors { seed });
        }
        for op in &ops {
            run(&mut store, &disk, &mut model, op);
            // A full disk makes the store undo what it could not write: those sequences are
            // given again, so what was sent under them no longer counts.
            let last_seq = store.state().last_seq;
            model.sent.retain(|&seq, _| seq <= last_seq);
            for seqs in [&mut model.removed, &mut model.maybe_removed, &mut model.limit_removed, &mut model.refused] {
                seqs.retain(|&seq| seq <= last_seq);
            }
            // The undoing also undoes what the limit removed for the undone appends.
            let live = held(&store);
            model.limit_removed.retain(|seq| !live.contains(seq));
        }
        disk.crash(Tear::Sectors { seed });
        drop(store);
        let mut reopened = open_both_ways(&disk, max_msgs)?;
        check(&mut reopened, &disk, &model)?;
        // A second crash straight after recovery loses nothing more.
        let after_first = held(&reopened);
        disk.crash(Tear::Sectors { seed: seed.rotate_left(7) });
        drop(reopened);
        let again = open_both_ways(&disk, max_msgs)?;
        prop_assert_eq!(after_first, held(&again), "recovery made what it found durable");
    }
}
