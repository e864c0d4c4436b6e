//! Helpers shared by the integration tests: fresh stores of each kind, and crash simulation.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use semaq_store::{FileStore, FileStoreConfig, MemoryStore, StoreError, StoreLimits, StreamStore};
use tempfile::TempDir;

/// Small enough that a few dozen messages span several segments.
pub const SMALL_SEGMENT_BYTES: u64 = 4 * 1024;

/// A fresh store of one kind; the directory (if any) lives as long as the value.
pub struct Fresh {
    pub store: Box<dyn StreamStore>,
    pub dir: Option<TempDir>,
}

/// The two kinds every contract test runs against.
pub fn memory(limits: StoreLimits) -> Fresh {
    Fresh { store: Box::new(MemoryStore::new(limits)), dir: None }
}

/// A file store in a new temporary directory, with small segments.
pub fn file(limits: StoreLimits) -> Fresh {
    let dir = tempfile::tempdir().unwrap();
    let store = open_file(dir.path(), limits);
    Fresh { store: Box::new(store), dir: Some(dir) }
}

/// Opens (or reopens) a file store with small segments.
pub fn open_file(dir: &Path, limits: StoreLimits) -> FileStore {
    let config = FileStoreConfig { dir: dir.to_path_buf(), segment_size_bytes: SMALL_SEGMENT_BYTES, limits };
    FileStore::open(config).unwrap()
}

/// Runs the body once per store kind, as two tests: `<name>::memory` and `<name>::file`.
#[macro_export]
macro_rules! for_both_stores {
    ($(fn $name:ident($fresh:ident : $limits:expr) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn run(mut $fresh: $crate::common::Fresh) $body
            #[test]
            fn memory() { run($crate::common::memory($limits)) }
            #[test]
            fn file() { run($crate::common::file($limits)) }
        }
    )*};
}

/// Appends `count` messages to `subject` with timestamps 1, 2, ... offset by `first_ts`.
pub fn append_many(store: &mut dyn StreamStore, subject: &str, count: u64, first_ts: i64) -> Vec<u64> {
    (0..count)
        .map(|index| {
            let payload = format!("{subject}-{index}");
            store.append(subject, None, payload.as_bytes(), first_ts + i64::try_from(index).unwrap()).unwrap().0
        })
        .collect()
}

/// Every file in a directory with its length: what a test treats as "synced".
pub fn file_lengths(dir: &Path) -> HashMap<PathBuf, u64> {
    fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.path(), entry.metadata().unwrap().len())
        })
        .collect()
}

/// Simulates power loss: every file goes back to the length it had at the last sync; files
/// created since then keep only `new_file_bytes` (a segment's header is durable on creation).
pub fn lose_unsynced(dir: &Path, synced: &HashMap<PathBuf, u64>, new_file_bytes: u64) {
    for (path, length) in file_lengths(dir) {
        let keep = synced.get(&path).copied().unwrap_or(new_file_bytes).min(length);
        fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(keep).unwrap();
    }
}

/// The segment log files in a directory, sorted by name (= by first sequence).
pub fn logs(dir: &Path) -> Vec<PathBuf> {
    with_extension(dir, "log")
}

/// Files with an extension, sorted by name.
pub fn with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|found| found == extension))
        .collect();
    paths.sort();
    paths
}

/// Flips one byte of a file.
pub fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[usize::try_from(offset).unwrap()] ^= 0xff;
    fs::write(path, bytes).unwrap();
}

/// The three steps of a commit in a row, as the ingest task runs them (its lock released for
/// `run`).
pub fn commit(store: &mut FileStore) -> Result<(), StoreError> {
    let ticket = store.sync_begin()?;
    store.sync_finish(ticket.run())
}

/// Sequences of the live messages, each checked to hold `payload(seq)`.
pub fn held_with(store: &FileStore, payload: impl Fn(u64) -> Vec<u8>) -> Vec<u64> {
    let mut seqs = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None).unwrap() {
        assert_eq!(message.payload, payload(message.seq), "seq {} holds another message", message.seq);
        seqs.push(message.seq);
        from = message.seq + 1;
    }
    seqs
}

/// Appends with `append` from `next` until a roll has started a new segment, then `extra`
/// more; returns the next sequence to append.
pub fn append_past_a_roll_with(
    store: &mut FileStore,
    (mut next, extra): (u64, u64),
    mut append: impl FnMut(&mut FileStore, u64) -> Result<u64, StoreError>,
) -> Result<u64, StoreError> {
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
