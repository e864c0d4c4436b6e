//! A level-4 stream's durability as a property: chained messages (sealed with `Semaq-Prev-Hash`
//! and `Semaq-Hash`, as the server stores them) and signed checkpoints, written as the server
//! writes them (messages synced before the checkpoint that signs them is appended and synced),
//! on the simulated disk; the power fails at a random change, tearing unsynced sectors. After
//! recovery the chain verifies from genesis to the last stored message, every confirmed
//! checkpoint is in the file, and none signs a message that is gone.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use semaq_store::chain::checkpoint::{Checkpoint, KeyPair};
use semaq_store::chain::checkpoints_file::CheckpointsFile;
use semaq_store::chain::{message_hash, seal, Hash, Link, Verifier, GENESIS};
use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::storage::Storage;
use semaq_store::{FileStore, FileStoreConfig, MessageRef, StoreLimits, StreamStore};

const STREAM: &str = "AUDIT";
const SEGMENT_BYTES: u64 = 4 * 1024;

#[derive(Debug, Clone)]
enum Op {
    Append { filler: usize },
    Sync,
    Flush,
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..200usize).prop_map(|filler| Op::Append { filler }),
        3 => Just(Op::Sync),
        1 => Just(Op::Flush),
        2 => Just(Op::Checkpoint),
    ]
}

fn stream_dir() -> PathBuf {
    PathBuf::from("/js/AUDIT/msgs")
}

fn checkpoints_path() -> PathBuf {
    PathBuf::from("/js/AUDIT/provenance/checkpoints")
}

fn open_store(disk: &SimDisk) -> FileStore {
    let config =
        FileStoreConfig { dir: stream_dir(), segment_size_bytes: SEGMENT_BYTES, limits: StoreLimits::default() };
    FileStore::open_on(config, disk.shared()).expect("the stream reopens after any crash")
}

fn open_checkpoints(disk: &SimDisk) -> (CheckpointsFile, Vec<Checkpoint>) {
    let path = checkpoints_path();
    disk.create_dir_all(path.parent().unwrap_or(Path::new("/"))).expect("a directory");
    let (file, decoded) = CheckpointsFile::open(disk, &path).expect("the checkpoints file reopens");
    assert!(decoded.damaged.is_empty(), "a crash is not damage: {:?}", decoded.damaged);
    (file, decoded.checkpoints)
}

/// The writer's side: the chain head and what was promised.
struct Writer {
    store: FileStore,
    checkpoints: CheckpointsFile,
    keys: KeyPair,
    /// Hash of each appended message, by sequence - 1.
    hashes: Vec<Hash>,
    /// Messages up to here were synced by a call that returned Ok.
    synced_upto: u64,
    /// Checkpoints appended without error, in file order, and how many of them a sync confirmed.
    written: Vec<Checkpoint>,
    confirmed: usize,
}

impl Writer {
    fn append(&mut self, filler: usize) {
        let seq = self.store.state().last_seq + 1;
        let prev = self.hashes.last().copied().unwrap_or(GENESIS);
        let event_time_ns = i64::try_from(seq).unwrap_or(i64::MAX);
        let covered = format!("NATS/1.0\r\nSemaq-Event-Time: {event_time_ns}\r\n\r\n");
        let payload = vec![b'p'; filler];
        let link =
            Link { seq, event_time_ns, subject: "audit.x", headers: [covered.as_bytes(), b""], payload: &payload };
        let hash = message_hash(&prev, &link);
        let Some(stored) = seal(covered.as_bytes(), &prev, &hash) else { return };
        if self.store.append("audit.x", Some(&stored), &payload, event_time_ns).is_ok() {
            self.hashes.push(hash);
        }
    }

    fn sync(&mut self) -> bool {
        let ok = self.store.sync().is_ok();
        if ok {
            self.synced_upto = self.hashes.len() as u64;
        }
        ok
    }

    /// As the server: the messages a checkpoint signs are made durable first.
    fn checkpoint(&mut self) {
        if !self.sync() || self.synced_upto == 0 {
            return;
        }
        if self.written.last().is_some_and(|last| last.seq == self.synced_upto) {
            return;
        }
        let signed = self.keys.sign(STREAM, self.synced_upto, &self.hashes[self.hashes.len() - 1]);
        if self.checkpoints.append(&[signed]).is_err() {
            return;
        }
        self.written.push(signed);
        if self.checkpoints.sync().is_ok() {
            self.confirmed = self.written.len();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn after_power_loss_the_chain_verifies_and_every_confirmed_checkpoint_is_there(
        ops in proptest::collection::vec(op(), 1..100),
        crash_after_changes in proptest::option::of(0..300u64),
        seed in any::<u64>(),
    ) {
        let disk = SimDisk::new();
        let (checkpoints, _) = open_checkpoints(&disk);
        let keys = KeyPair::from_seed(&[7; 32]);
        let mut writer = Writer {
            store: open_store(&disk), checkpoints, keys, hashes: Vec::new(), synced_upto: 0, written: Vec::new(), confirmed: 0,
        };
        if let Some(changes) = crash_after_changes {
            disk.freeze_after(changes, Tear::Sectors { seed });
        }
        for op in &ops {
            match op {
                Op::Append { filler } => writer.append(*filler),
                Op::Sync => { writer.sync(); }
                Op::Flush => { let _ = writer.store.flush(); }
                Op::Checkpoint => writer.checkpoint(),
            }
        }
        disk.crash(Tear::Sectors { seed });
        let Writer { store, checkpoints, keys, hashes, synced_upto, written, confirmed } = writer;
        drop((store, checkpoints));

        let store = open_store(&disk);
        let (_, found) = open_checkpoints(&disk);
        prop_assert!(found.len() >= confirmed, "confirmed checkpoints lost: {} of {}", found.len(), confirmed);
        prop_assert_eq!(&found[..], &written[..found.len()], "the file holds a prefix of what was written");
        let state = store.state();
        prop_assert!(state.last_seq >= synced_upto && state.last_seq <= hashes.len() as u64);
        let mut verifier = Verifier::new(STREAM, &keys.public(), &found, 1);
        for seq in 1..=state.last_seq {
            let message = store.get(seq).expect("readable").expect("a chained stream has no holes");
            let headers = message.headers.as_deref();
            let reference = MessageRef {
                seq, subject: &message.subject, headers, payload: &message.payload, timestamp_ns: message.timestamp_ns,
            };
            if let Err(broken) = verifier.check(reference) {
                prop_assert!(false, "chain broken at {}: {}", broken.seq, broken.detail);
            }
        }
        if let Err(broken) = verifier.finish(state.first_seq) {
            prop_assert!(false, "chain broken at {}: {}", broken.seq, broken.detail);
        }
    }
}
