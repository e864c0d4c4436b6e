//! Streams on disk and in memory: the store JetStream streams sit on.
//!
//! One trait, [`StreamStore`], two stores run through the same tests: [`FileStore`] (an
//! append-only, segmented, checksummed log per stream) and [`MemoryStore`]. Synchronous and
//! single-owner: the server drives a store from one task, appends a batch, calls
//! [`StreamStore::sync`] once, then acknowledges the batch (group commit).
//!
//! Modules, in the order a message moves through them:
//! - [`types`]: what crosses the API (messages, state, limits, purge requests); [`error`]: `StoreError`.
//! - `limits`: every fixed limit and every byte layout, as named constants.
//! - `ledger`: one metadata slot per sequence (never a payload), live counts, and every decision
//!   about what limits and purges remove; `subjects`: the per-subject map it keeps; `sealed`:
//!   its sealed tier, a live bit per sequence with the rest read from index files.
//! - `record`: the bytes of one message on disk; `segment`: one log file and its active-write
//!   buffer; `index`: a sealed segment's index file; `delete_log`: per-segment deletions;
//!   `meta`: the persisted floor below which everything is gone.
//! - `recovery`: opening a directory: take the checkpoint (`checkpoint`) or trust sealed
//!   indexes, scan the active segment, cut a torn tail, report damage.
//! - [`file_store`] and [`memory_store`]: the two stores.
//! - [`chain`]: the provenance hash chain of level-4 streams (hashing, checkpoints, verifier);
//!   [`reader`]: reading a stopped stream's files without changing them, for `semaq verify`.
//! - [`commit`]: a sync in three steps whose fsyncs run without the caller's lock.
//! - [`storage`]: the I/O seam every file goes through: the real disk, and (feature `sim`) a
//!   simulated one that loses power, tears writes, fails fsyncs and runs out of space.
//!
//! `docs/design.md` draws the file formats, states the durability promise and argues recovery.

use std::collections::BTreeMap;

pub mod chain;
pub mod commit;
pub mod error;
pub mod file_store;
pub mod memory_store;
pub mod reader;
pub mod storage;
pub mod types;

/// The pure decoders of the on-disk formats, for the fuzz properties only.
#[doc(hidden)]
pub mod decoders;

mod checkpoint;
mod delete_log;
mod index;
mod ledger;
mod limits;
mod meta;
mod record;
mod recovery;
mod sealed;
mod segment;
mod subjects;

pub use checkpoint::CheckpointTicket;
pub use commit::{SyncTicket, Synced};
pub use error::{StoreError, StoreResult};
pub use file_store::{FileStore, FileStoreConfig, RecoveryReport};
pub use limits::{
    FAULT_HOLD_WAIT_MAX, RECORD_SIZE_MAX_BYTES, SEALS_PENDING_MAX_COUNT, SEGMENT_SIZE_DEFAULT_BYTES,
    SUBJECT_LENGTH_MAX_BYTES,
};
pub use memory_store::MemoryStore;
pub use reader::{LogReader, ReadItem, ReadSummary};
pub use storage::{SharedStorage, StdDisk, Storage, StorageFile};
pub use types::{DiscardPolicy, MessageRef, PurgeRequest, SizeModel, StoreLimits, StoredMessage, StreamState};

/// A stream's message store. Sequences start at 1, grow by one per append and are never reused.
pub trait StreamStore: Send {
    /// Stores a message and returns its sequence and timestamp (unix ns, as given); durable after `sync`.
    fn append(
        &mut self,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
        timestamp_ns: i64,
    ) -> StoreResult<(u64, i64)>;
    /// The live message at `seq`; `Err(Corrupt)` when its bytes fail their checksum.
    fn get(&self, seq: u64) -> StoreResult<Option<StoredMessage>>;
    /// The first live message with sequence ≥ `from_seq` whose subject matches `filter` (wildcards
    /// allowed); reads no payload but the one returned. `Err(Corrupt { seq })`: ask from `seq + 1` to skip it.
    fn get_next(&self, from_seq: u64, filter: Option<&str>) -> StoreResult<Option<StoredMessage>>;
    /// The newest live message whose subject matches `filter` (wildcards allowed).
    fn get_last_for_subject(&self, filter: &str) -> StoreResult<Option<StoredMessage>>;
    /// Removes the message at `seq`; false when there was none. Durable when it returns.
    fn delete(&mut self, seq: u64) -> StoreResult<bool>;
    /// Removes the message at `seq` as [`delete`](Self::delete) does, but durable only at the
    /// next sync or commit: for removals nobody waits on (a work queue's acknowledged messages).
    fn remove(&mut self, seq: u64) -> StoreResult<bool> {
        self.delete(seq)
    }
    /// Removes a refused atomic batch's messages, `first..=last`, all appended since the last
    /// commit and nothing after them, and returns how many went. Readers see them gone at once;
    /// durable at the next sync or commit, which cannot make anything appended later durable
    /// without the removal. This default deletes them one by one, oldest first, each synced.
    fn remove_refused(&mut self, first: u64, last: u64) -> StoreResult<u64> {
        delete_each(self, first, last)
    }
    /// Removes what the request names and returns how many messages went. Durable when it returns.
    fn purge(&mut self, request: &PurgeRequest) -> StoreResult<u64>;
    /// Removes what the request names as [`purge`](Self::purge) does (readers see it gone at
    /// once), durable only at the next sync or commit, so its fsyncs can run without the
    /// caller's lock (`sync_begin`, `SyncTicket::run`, `sync_finish`). Segments it empties go
    /// once a commit has made the floor durable.
    fn purge_unsynced(&mut self, request: &PurgeRequest) -> StoreResult<u64> {
        self.purge(request)
    }
    /// Counts, bounds and any damage found.
    fn state(&self) -> StreamState;
    /// Live message count per subject matching `filter` (all subjects for `None`).
    fn subjects_state(&self, filter: Option<&str>) -> BTreeMap<String, u64>;
    /// Applies every limit at time `now_ns` (max_age expiry among them); returns how many went.
    /// Durable at the next sync or commit, and runs no fsync itself (segments it empties go then).
    fn enforce_limits(&mut self, now_ns: i64) -> StoreResult<u64>;
    /// Replaces the limits and applies the count limits at once; returns how many went.
    /// Durable at the next sync or commit, and runs no fsync itself (segments it empties go then).
    fn update_limits(&mut self, limits: StoreLimits) -> StoreResult<u64>;
    /// The limits in force.
    fn limits(&self) -> &StoreLimits;
    /// Hands every appended record to the OS without an fsync: it then survives a crash of the
    /// process, though not of the machine. Cheap when nothing is buffered.
    fn flush(&mut self) -> StoreResult<()>;
    /// Makes every change so far durable; cheap when nothing changed.
    fn sync(&mut self) -> StoreResult<()>;
    /// [`StreamStore::sync`] in three steps (see [`commit`]), so the fsyncs can run without
    /// the lock the store is shared under: this hands every change to the OS and returns what
    /// to fsync; then [`SyncTicket::run`]; then [`StreamStore::sync_finish`]. Only the caller
    /// may append in between. A store with no fsyncs of its own syncs here.
    fn sync_begin(&mut self) -> StoreResult<SyncTicket> {
        self.sync().map(|()| SyncTicket::done())
    }
    /// Step 3: records what the ticket made durable; the changes up to `sync_begin` are durable
    /// when it returns `Ok`. A failed fsync poisons the store (as a failed `sync` does).
    fn sync_finish(&mut self, synced: Synced) -> StoreResult<()> {
        match synced.failure {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }
    /// [`sync_finish`](Self::sync_finish) that leaves the checkpoint a completed seal made due
    /// to the caller, to write with its lock let go and after its acknowledgements
    /// ([`CheckpointTicket::run`]): it costs two fsyncs no publish needs to wait for.
    fn sync_finish_deferring(&mut self, synced: Synced) -> StoreResult<Option<CheckpointTicket>> {
        self.sync_finish(synced).map(|()| None)
    }
    /// [`sync`](Self::sync) for a change made aside from the appending task (a purge, a delete,
    /// a producer snapshot, a timer's commit). A full disk met here whose reload dropped the
    /// appender's buffered appends is not reported here but left for the appender's own next
    /// `sync`, `sync_begin`, `flush` or [`report_dropped`](Self::report_dropped), which fails
    /// with it; until then every change is refused, so nothing is acknowledged over the loss.
    fn sync_aside(&mut self) -> StoreResult<()> {
        self.sync()
    }
    /// [`sync_begin`](Self::sync_begin) aside from the appending task, reporting as
    /// [`sync_aside`](Self::sync_aside) does; then `SyncTicket::run` and `sync_finish` as usual.
    fn sync_begin_aside(&mut self) -> StoreResult<SyncTicket> {
        self.sync_aside().map(|()| SyncTicket::done())
    }
    /// For the appending task, when nothing it appended waits for a commit: takes the report of
    /// a full disk met aside (`Err(OutOfSpace)`), so changes resume; `Ok` when there is none.
    fn report_dropped(&mut self) -> StoreResult<()> {
        Ok(())
    }
    /// Gives back disk space held by removed messages where that is cheap (whole segments).
    fn compact(&mut self) -> StoreResult<()>;
    /// Whether a commit is waited for by whole segments emptied by lazy removals (limits applied
    /// at an append among them), to be given back, or by seals about to reach their bound, which
    /// the next roll would complete under the caller's lock: a caller that does not commit after
    /// its appends commits for them.
    fn release_waits(&self) -> bool {
        false
    }
    /// Whether appending this message would roll into `SEALS_PENDING_MAX_COUNT` pending seals,
    /// and so complete the oldest in place, its fsyncs under the caller's lock: a caller that
    /// can commits aside first (`sync_begin_aside`, its lock let go for the run), then appends.
    fn commit_before_append(&self, _subject: &str, _headers: Option<&[u8]>, _payload: &[u8]) -> bool {
        false
    }
    /// [`commit_before_append`](Self::commit_before_append) for appends that cannot be split
    /// (an atomic batch): whether `count` messages of `message_bytes` in all (subjects, header
    /// blocks and payloads) could roll into `SEALS_PENDING_MAX_COUNT` pending seals while seals
    /// are pending, which a commit aside before the first append would complete instead.
    fn commit_before_appends(&self, _count: u64, _message_bytes: u64) -> bool {
        false
    }
    /// Syncs and releases what can be released; the store should be dropped afterwards.
    fn close(&mut self) -> StoreResult<()>;
    /// Bytes the store occupies on its medium (disk files, or live record sizes in memory).
    fn stored_bytes(&self) -> u64;
    /// On an empty store, makes `next_seq` the sequence the next append gets (a mirror keeping
    /// its origin's sequences); false, with nothing changed, when the store holds messages or
    /// already passed `next_seq`. Durable when it returns.
    fn skip_to(&mut self, next_seq: u64) -> StoreResult<bool>;
    /// [`skip_to`](Self::skip_to), durable only at the next sync or commit. Until a commit made
    /// its floor durable, the next append persists the floor itself (under the caller's lock).
    fn skip_to_unsynced(&mut self, next_seq: u64) -> StoreResult<bool> {
        self.skip_to(next_seq)
    }
    /// Makes `next_seq` the sequence the next append gets, also behind stored messages: the
    /// sequences skipped count as deleted (a mirror keeping the gaps its origin has, as
    /// nats-server's `SkipMsgs`). False, with nothing changed, when the store already passed
    /// `next_seq` or the gap behind stored messages is over `SKIP_COUNT_MAX`. Durable when it
    /// returns.
    fn skip_msgs(&mut self, next_seq: u64) -> StoreResult<bool>;
    /// [`skip_msgs`](Self::skip_msgs), durable only at the next sync or commit (with the
    /// message appended behind it, whose commit it rides on): no fsync under the caller's lock.
    fn skip_msgs_unsynced(&mut self, next_seq: u64) -> StoreResult<bool> {
        self.skip_msgs(next_seq)
    }
    /// How messages count in `StreamState::bytes` and against `max_bytes` (as nats-server's
    /// store of the same kind counts them).
    fn size_model(&self) -> SizeModel;
    /// Live messages matching `filter` (wildcards allowed) with sequences in `seqs`, from the
    /// metadata alone; `None` when counting would scan more than `scan_max` sequences.
    fn count_matching(&self, seqs: std::ops::Range<u64>, filter: Option<&str>, scan_max: u64) -> Option<u64>;
    /// Why the store stopped taking changes, if it did: a write or fsync failed, so what is on
    /// disk is unknown. Reads go on; every change (and so every acknowledgement) is refused
    /// until the store is reopened.
    fn poisoned(&self) -> Option<String> {
        None
    }
}

/// Deletes `first..=last` one by one, oldest first, each synced; returns how many went.
pub(crate) fn delete_each<S: StreamStore + ?Sized>(store: &mut S, first: u64, last: u64) -> StoreResult<u64> {
    let mut removed = 0;
    for seq in first..=last {
        removed += u64::from(store.delete(seq)?);
    }
    Ok(removed)
}
