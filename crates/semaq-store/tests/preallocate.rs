//! The active segment's log is grown ahead of its appends in zeros (preallocation, so an
//! fdatasync overwrites blocks the file has instead of extending it): a crash leaves those zeros
//! after the last record, which recovery cuts without calling them torn; a torn write into them
//! is cut at the last whole record; a seal and a clean close leave none; a full disk costs the
//! preallocation, never a commit.

use std::path::PathBuf;

use semaq_store::storage::sim::{SimDisk, Tear};
use semaq_store::{FileStore, FileStoreConfig, StoreLimits, StreamStore};

/// Big enough to preallocate (a quarter of it, 512 KiB, is at least the write buffer).
const SEGMENT_BYTES: u64 = 2 * 1024 * 1024;

fn dir() -> PathBuf {
    PathBuf::from("/streams/kv")
}

fn open(disk: &SimDisk) -> FileStore {
    let config = FileStoreConfig { dir: dir(), segment_size_bytes: SEGMENT_BYTES, limits: StoreLimits::default() };
    FileStore::open_on(config, disk.shared()).unwrap()
}

fn payload(seq: u64, size: usize) -> Vec<u8> {
    let mut bytes = format!("value-{seq:08}-").into_bytes();
    bytes.resize(size.max(bytes.len()), b'v');
    bytes
}

fn append(store: &mut FileStore, seq: u64, size: usize) {
    assert_eq!(store.append("kv.key", None, &payload(seq, size), 7).unwrap().0, seq);
}

fn commit(store: &mut FileStore) {
    let ticket = store.sync_begin().unwrap();
    store.sync_finish(ticket.run()).unwrap();
}

fn held(store: &FileStore) -> Vec<u64> {
    let mut seqs = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).unwrap() {
        assert!(message.payload.starts_with(format!("value-{:08}-", message.seq).as_bytes()));
        seqs.push(message.seq);
        from = message.seq + 1;
    }
    seqs
}

fn log(first_seq: u64) -> PathBuf {
    dir().join(format!("{first_seq:020}.log"))
}

fn reopen_after_power_loss(disk: &SimDisk, store: FileStore, tear: Tear) -> FileStore {
    disk.crash(tear);
    drop(store);
    open(disk)
}

#[test]
fn zeros_written_ahead_survive_a_crash_as_no_torn_bytes_and_appends_continue_over_them() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    for seq in 1..=100 {
        append(&mut store, seq, 100);
    }
    commit(&mut store);
    let on_disk = disk.contents(&log(1)).unwrap();
    assert!(on_disk.len() >= 512 * 1024, "grown ahead: {} bytes", on_disk.len());
    assert!(on_disk[on_disk.len() - 4096..].iter().all(|&byte| byte == 0), "the growth is zeros");

    let mut reopened = reopen_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), (1..=100).collect::<Vec<_>>());
    assert_eq!(reopened.recovery_report().torn_bytes_truncated, 0, "zeros written ahead are not torn bytes");
    assert_eq!(reopened.state().corruption, None);
    append(&mut reopened, 101, 100);
    commit(&mut reopened);
    let reopened = reopen_after_power_loss(&disk, reopened, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), (1..=101).collect::<Vec<_>>());
}

#[test]
fn a_torn_write_into_the_zeros_is_cut_at_the_last_whole_record() {
    for seed in 0..16 {
        let disk = SimDisk::new();
        let mut store = open(&disk);
        for seq in 1..=10 {
            append(&mut store, seq, 300);
        }
        commit(&mut store);
        for seq in 11..=60 {
            append(&mut store, seq, 300);
        }
        store.flush().unwrap(); // with the OS, not on disk
        let reopened = reopen_after_power_loss(&disk, store, Tear::Sectors { seed });
        let survived = held(&reopened);
        assert_eq!(survived, (1..=survived.len() as u64).collect::<Vec<_>>(), "seed {seed}: a contiguous prefix");
        assert!(survived.len() >= 10, "seed {seed}: every committed message is there");
        assert_eq!(reopened.state().corruption, None, "seed {seed}: a torn tail is not damage");
    }
}

#[test]
fn a_seal_and_a_clean_close_leave_no_zeros_behind() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    let mut seq = 0;
    while store.segment_count() < 2 {
        seq += 1;
        append(&mut store, seq, 60 * 1024);
        commit(&mut store);
    }
    let sealed = disk.contents(&log(1)).unwrap();
    assert!(!sealed.ends_with(&[0; 1024]), "a sealed log ends at its last record");
    store.close().unwrap();
    drop(store);
    let active = disk.contents(&log(seq)).unwrap();
    assert!(!active.ends_with(&[0; 1024]), "a closed log ends at its last record");
    let reopened = open(&disk);
    assert_eq!(held(&reopened), (1..=seq).collect::<Vec<_>>());
    assert_eq!(reopened.recovery_report().torn_bytes_truncated, 0);
}

#[test]
fn a_full_disk_while_growing_costs_the_growth_not_the_commit() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    disk.set_free_bytes(Some(4096));
    append(&mut store, 1, 100);
    commit(&mut store);
    assert_eq!(store.poisoned(), None);
    let on_disk = disk.contents(&log(1)).unwrap();
    assert!(on_disk.len() < 4096, "the growth that did not fit was cut back: {} bytes", on_disk.len());
    append(&mut store, 2, 100);
    commit(&mut store);
    let reopened = reopen_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), vec![1, 2]);
}

#[test]
fn commits_of_large_records_write_no_zeros_ahead_and_small_ones_still_do() {
    let disk = SimDisk::new();
    let mut store = open(&disk);
    // An Object Store's chunks: zeros ahead would double the bytes written.
    for seq in 1..=4 {
        append(&mut store, seq, 128 * 1024);
        commit(&mut store);
        let on_disk = disk.contents(&log(1)).unwrap();
        assert!(!on_disk.ends_with(&[0; 1024]), "after record {seq}: {} bytes, zeros ahead", on_disk.len());
    }
    // A meta message after them still counts among large records since the last commit.
    append(&mut store, 5, 128 * 1024);
    append(&mut store, 6, 200);
    commit(&mut store);
    assert!(!disk.contents(&log(1)).unwrap().ends_with(&[0; 1024]), "the meta's commit wrote zeros ahead");
    // Small records: their fsyncs are bound by the metadata write the zeros spare.
    for seq in 7..=100 {
        append(&mut store, seq, 100);
    }
    commit(&mut store);
    assert!(disk.contents(&log(1)).unwrap().ends_with(&[0; 4096]), "small records' commit grows the log");
    let reopened = reopen_after_power_loss(&disk, store, Tear::LoseUnsynced);
    assert_eq!(held(&reopened), (1..=100).collect::<Vec<_>>());
}
